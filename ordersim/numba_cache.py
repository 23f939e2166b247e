"""Numba's on-disk cache, invalidated by any change to the source tree a kernel comes from.

Numba keys a cached function on its own source file only. Kernels here inline helpers from other
modules (the balancing kernels in ``orderers/_balance.py`` compile in ``_vector.py`` and
``_state.py``; problems compile in ``problems/_kernels.py``), so after a change to a helper alone
(a ``git pull``, an edit) Numba would load the machine code compiled from the old helper, silently.
For functions defined under a registered tree (``ordersim/`` and ``problems/``; users may register
their own) the cache stamp here is the function's own file stamp together with a digest of every
``.py`` file of the tree (path, size, modification time): a change anywhere in the tree recompiles
that tree's cached kernels once.

Importing this module registers both trees; every module that defines cached kernels imports it
before them (the locator is chosen when a function is decorated), and with it SciPy's BLAS for
Numba's kernels (``ordersim.numba_blas``, before any kernel loads). ``import ordersim`` itself does
not: ``python -m ordersim`` sets thread counts and the cache directory before NumPy and Numba load.

Numba runs the machine code it finds in its cache, so whoever can write the cache directory can
run code as you: ``private_cache_dir_error`` (called by ``python -m ordersim`` before anything
compiles) creates ``NUMBA_CACHE_DIR`` with mode 0700 and refuses one that is not private.

This works through Numba's cache locator classes (``numba.core.caching``), which are internal: if a
Numba version lacks them, nothing is registered and Numba's own per-file stamps apply.
"""

import functools
import hashlib
import inspect
import os
import stat
import sys
from pathlib import Path
from types import FunctionType

from numba.core import caching

from ordersim.numba_blas import load_cython_blas

load_cython_blas()  # before the first kernel loads: Numba's BLAS check would import scipy.linalg

_TREES: list[Path] = []


@functools.lru_cache(maxsize=None)
def tree_digest(root: Path) -> str:
    """Digest of the stat (relative path, size, mtime) of every .py file under root, once per
    process: a cached kernel's machine code is loaded or compiled once per process too."""
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        stat = path.stat()
        digest.update(f"{path.relative_to(root)}\0{stat.st_size}\0{stat.st_mtime_ns}\0".encode())
    return digest.hexdigest()


def kernel_digest(kernel) -> str | None:
    """A digest of a jitted kernel's module, name, file and source state (its registered tree's
    digest, else its file's size and mtime), for the cached loops that call it as a global
    (engine.problem_loop): their cache entries differ per kernel and go stale with its source.
    None when the name does not say which kernel it is (a closure, a kernel that is not its
    module's global of that name, one without a source file): such a kernel's loops are not cached."""
    py_func = getattr(kernel, "py_func", kernel)
    module = sys.modules.get(getattr(py_func, "__module__", None))
    if (py_func.__closure__ is not None or module is None
            or getattr(module, py_func.__qualname__, None) is not kernel):
        return None
    try:
        path = os.path.realpath(inspect.getfile(py_func))
        tree = _tree_of(path)
        state = tree_digest(tree) if tree else "{0.st_size}\0{0.st_mtime_ns}".format(os.stat(path))
    except (OSError, TypeError):
        return None
    text = f"{module.__name__}\0{py_func.__qualname__}\0{path}\0{state}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def function_copy(function, names: dict | None = None, qualname: str | None = None):
    """The plain function ``function`` with other globals ``names`` and the qualified name
    ``qualname`` (Numba names its cache entry by it): a kernel of its own, cached apart."""
    copy = FunctionType(function.__code__, function.__globals__ if names is None else names,
                        function.__name__, function.__defaults__)
    copy.__qualname__ = qualname or function.__qualname__
    copy.__doc__, copy.__module__ = function.__doc__, function.__module__
    return copy


def code_state() -> str:
    """A digest of everything a cached kernel's machine code depends on besides its own types:
    the registered trees, the Python, NumPy, Numba and llvmlite versions and the host CPU. Two
    processes with the same code state load each other's cached kernels."""
    import llvmlite
    import numba
    import numpy
    from llvmlite import binding

    parts = [str(tree_digest(root)) for root in _TREES]
    parts += [sys.version, numpy.__version__, numba.__version__, llvmlite.__version__,
              binding.get_host_cpu_name(), binding.get_host_cpu_features().flatten()]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def cached_on_disk(dispatcher) -> bool:
    """Whether Numba caches this dispatcher's machine code on disk (``cache=True``, cacheable)."""
    return not isinstance(getattr(dispatcher, "_cache", None), (caching.NullCache, type(None)))


def _tree_of(py_file) -> Path | None:
    path = Path(os.path.realpath(py_file))
    return next((root for root in _TREES if root in path.parents), None)


def _tree_stamped(locator_class):
    """A subclass of one of Numba's locators that serves only files under a registered tree and
    adds the tree's digest to the stamp."""
    class TreeStampedLocator(locator_class):
        @classmethod
        def from_function(cls, py_func, py_file):
            if _tree_of(py_file) is None:
                return None  # Numba's own locators handle it
            return super().from_function(py_func, py_file)

        def get_source_stamp(self):
            return super().get_source_stamp(), tree_digest(_tree_of(self._py_file))

    TreeStampedLocator.__name__ = TreeStampedLocator.__qualname__ = "TreeStamped" + locator_class.__name__
    return TreeStampedLocator


def _locator_list():
    impl = getattr(caching, "CacheImpl", None) or getattr(caching, "_CacheImpl", None)
    return getattr(impl, "_locator_classes", None)


# Numba's locators for functions in source files, in its order of preference: NUMBA_CACHE_DIR,
# __pycache__ next to the source, the user-wide directory (when the source tree is read-only).
_FILE_LOCATORS = ("UserProvidedCacheLocator", "InTreeCacheLocator", "UserWideCacheLocator")


def _install() -> bool:
    """Put tree-stamped versions of Numba's file locators first (names with or without the
    leading underscore that older Numba versions used)."""
    classes = _locator_list()
    wanted = [getattr(caching, name, None) or getattr(caching, "_" + name, None) for name in _FILE_LOCATORS]
    if classes is None or None in wanted:
        return False
    if not any(getattr(cls, "__name__", "").startswith("TreeStamped") for cls in classes):
        classes[:0] = [_tree_stamped(cls) for cls in wanted]
    return True


def register_tree(root) -> bool:
    """Stamp the cached Numba functions defined under ``root`` with the digest of the whole tree.
    Call before the first cached function of the tree compiles or loads. Returns whether Numba's
    internals allowed it."""
    root = Path(os.path.realpath(root))
    if root not in _TREES:
        _TREES.append(root)
    return _install()


def private_cache_dir_error(path: str) -> str | None:
    """Create the cache directory `path` (mode 0700) unless it exists; the one-line reason when
    it is not private (not a directory, owned by another user, or writable by group or others)."""
    try:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass  # made earlier (by this job's other ranks, say): checked below like any other
    except OSError as err:
        return f"NUMBA_CACHE_DIR {path!r} cannot be created ({err.strerror})"
    try:
        info = os.stat(path)
    except OSError as err:
        return f"NUMBA_CACHE_DIR {path!r} cannot be read ({err.strerror})"
    why = "Numba runs the machine code it caches there"
    fix = "set NUMBA_CACHE_DIR to a directory of your own with mode 0700 (ordersim creates a missing one)"
    if not stat.S_ISDIR(info.st_mode):
        return f"NUMBA_CACHE_DIR {path!r} is not a directory; {fix}"
    if info.st_uid != os.getuid():
        return (f"NUMBA_CACHE_DIR {path!r} is owned by uid {info.st_uid}, not by you (uid "
                f"{os.getuid()}); {why}, so its owner could run code as you: {fix}")
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return (f"NUMBA_CACHE_DIR {path!r} has mode {stat.S_IMODE(info.st_mode):o}, writable by its "
                f"group or others; {why}, so they could run code as you: chmod 700 it, or {fix}")
    return None


# ordersim's own kernels (ordersim.problems registers its folder itself: it is installed from the
# repository's problems/, which is not under this one in an editable install)
register_tree(Path(__file__).parent)
