"""Which code wrote a trace: ordersim's version and git state, its libraries, the command line.

`code_state()` is what a trace's root attributes record (docs/trace-format.md); ordersim.analysis.load
reads them back (``code_label``) to tell traces made by different code apart.
"""

import hashlib
import json
import os
import shlex
import subprocess
import sys
from importlib import metadata

import ordersim
from ordersim.registry import PLUGIN_FILES

LIBRARIES = ("numpy", "numba", "mpi4py", "h5py")


PACKAGE = os.path.dirname(os.path.abspath(ordersim.__file__))


def _run_git(*args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", PACKAGE, *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def _git(*args: str) -> str | None:
    """Output of a git command in ordersim's own checkout, or None (no git, not a checkout, or an
    installed copy that merely sits inside some other repository, e.g. a venv in a user's project)."""
    top = _run_git("rev-parse", "--show-toplevel")
    if not top or not os.path.isdir(os.path.join(top, "ordersim")) or \
            not os.path.samefile(os.path.join(top, "ordersim"), PACKAGE):
        return None
    return _run_git(*args)


def _version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return ""


def mpi_library() -> str:
    """MPI.Get_library_version() (first line), or '' when mpi4py or its MPI library is missing."""
    try:
        from mpi4py import MPI
    except (ImportError, RuntimeError):  # RuntimeError: mpi4py cannot load an MPI library
        return ""
    # Open MPI's string ends in a NUL, which HDF5 string attributes cannot hold
    return MPI.Get_library_version().split("\0")[0].strip().splitlines()[0]


def versions() -> list[tuple[str, str]]:
    """(name, version) of ordersim (with its commit when run from a checkout), Python, the key
    libraries and the MPI library, for `python -m ordersim --version`."""
    commit = _git("rev-parse", "--short=12", "HEAD")
    dirty = " (dirty)" if commit and _git("status", "--porcelain", "--untracked-files=no") else ""
    rows = [("ordersim", ordersim.__version__ + (f" @ {commit}{dirty}" if commit else "")),
            ("python", sys.version.split()[0])]
    rows += [(name, _version(name) or "not installed") for name in (*LIBRARIES, "scipy")]
    return rows + [("MPI library", mpi_library() or "none loadable (the serial backend runs)")]


def code_state() -> dict:
    """Root attributes: ordersim_version; git_commit and git_dirty ('' and False outside a git
    checkout); git_diff_sha1, the hash of `git diff HEAD` when dirty; <library>_version for numpy,
    numba, mpi4py and h5py; mpi_library; command_line, working_directory and plugin_files."""
    commit = _git("rev-parse", "HEAD")
    # the tree is dirty when a tracked file differs from the commit (untracked files do not count)
    dirty = bool(_git("status", "--porcelain", "--untracked-files=no")) if commit else False
    # two dirty trees on one commit differ in their diff: its hash tells them apart
    diff = hashlib.sha1((_git("diff", "HEAD") or "").encode()).hexdigest()[:12] if dirty else ""
    state = dict(ordersim_version=ordersim.__version__, git_commit=commit or "", git_dirty=dirty,
                 git_diff_sha1=diff)
    state.update({f"{name}_version": _version(name) for name in LIBRARIES})
    state["mpi_library"] = mpi_library()
    state["command_line"] = command_line()
    state["working_directory"] = os.getcwd()  # what the command line's relative paths meant
    state["plugin_files"] = json.dumps(PLUGIN_FILES, sort_keys=True)
    return state


def command_line() -> str:
    """The command as it can be run again: the interpreter's full path (which environment), then
    `-m MODULE` for a module run as a script (sys.argv[0] is its __main__.py's path), the rest of
    sys.argv; shell-quoted."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if spec is not None and spec.name:
        program = ["-m", spec.name.removesuffix(".__main__")]
    else:
        program = sys.argv[:1]
    return shlex.join([sys.executable, *program, *sys.argv[1:]])
