"""SciPy's BLAS for Numba's kernels, without importing ``scipy.linalg``.

Numba calls BLAS (``np.dot`` in a kernel) through ``scipy.linalg.cython_blas``, and it checks that
module once per process, when it first loads or compiles any kernel, by importing it. Importing it
runs ``scipy.linalg``'s ``__init__`` first: SciPy's array-API layer, which imports ``numpy.f2py``
among others, 0.1–0.2 s of CPU in every process and every MPI rank, for a module that is one
extension whose C functions Numba looks up by name.

``load_cython_blas`` loads that extension under its own name, without its package's ``__init__``,
before the first kernel loads (``numba_cache`` calls it; every module with kernels imports that).
Numba's check and its run-time look-ups (``PyImport_ImportModule``, then ``__pyx_capi__``) find the
same module in ``sys.modules``; a later ``import scipy.linalg`` runs as usual. Where the extension is
not where SciPy keeps it, or scipy.linalg is already imported, nothing is done and Numba imports it
the usual way.
"""

import importlib.machinery
import importlib.util
import os
import sys

NAME = "scipy.linalg.cython_blas"


def load_cython_blas() -> None:
    """Load scipy.linalg.cython_blas alone into sys.modules, unless it or its package is there."""
    if NAME in sys.modules or "scipy.linalg" in sys.modules:
        return
    scipy = importlib.util.find_spec("scipy")  # finds the package without importing it
    if scipy is None or not scipy.submodule_search_locations:
        return
    folder = os.path.join(scipy.submodule_search_locations[0], "linalg")
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = os.path.join(folder, "cython_blas" + suffix)
        if os.path.isfile(path):
            break
    else:
        return
    spec = importlib.util.spec_from_file_location(NAME, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[NAME] = module
    try:
        spec.loader.exec_module(module)
    except Exception:  # e.g. a SciPy whose extension needs its package: Numba imports it itself
        del sys.modules[NAME]
