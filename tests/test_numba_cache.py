"""ordersim.numba_cache: a change to a helper module recompiles the cached kernels that inline it."""

import os
import subprocess
import sys
import textwrap

import pytest

KERNEL = textwrap.dedent("""
    from numba import njit

    from tree.helper import value


    @njit(cache=True)
    def kernel():
        return value()
""")
RUN = textwrap.dedent("""
    import sys
    from ordersim.numba_cache import register_tree
    if sys.argv[1] == "register":
        register_tree(sys.argv[2])
    from tree.kernel import kernel
    print(kernel(), sum(kernel.stats.cache_hits.values()))
""")


def helper(number):
    return f"from numba import njit\n\n\n@njit(inline='always')\ndef value():\n    return {number}\n"


def run(tmp_path, mode, cache_dir):
    paths = [str(tmp_path)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths))
    env.pop("NUMBA_CACHE_DIR", None)  # without: the in-tree cache (__pycache__ next to the sources)
    if cache_dir:
        env["NUMBA_CACHE_DIR"] = str(tmp_path / "cache")  # as on clusters (docs/cluster.md)
    out = subprocess.run([sys.executable, "-c", RUN, mode, str(tmp_path / "tree")], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    value, hits = out.stdout.split()
    return int(value), int(hits)


@pytest.mark.parametrize("cache_dir", [False, True])
@pytest.mark.parametrize("mode", ["register", "plain"])
def test_changing_an_inlined_helper_recompiles_a_registered_tree(tmp_path, mode, cache_dir):
    """Registered, the run after editing only the helper gives the new value; plain Numba (no
    registration) loads the stale machine code from its cache: the hazard this guards against (if
    that part fails, Numba now tracks inlined helpers and ordersim/numba_cache.py can go)."""
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "__init__.py").write_text("")
    (tree / "kernel.py").write_text(KERNEL)
    (tree / "helper.py").write_text(helper(1))
    assert run(tmp_path, mode, cache_dir) == (1, 0)
    assert run(tmp_path, mode, cache_dir) == (1, 1), "the unchanged tree loads from the cache"
    (tree / "helper.py").write_text(helper(22))
    if mode == "register":
        assert run(tmp_path, mode, cache_dir) == (22, 0)
    else:
        assert run(tmp_path, mode, cache_dir) == (1, 1)


def test_importing_ordersim_loads_neither_numpy_nor_numba():
    """`python -m ordersim` imports the package before its __main__ sets one BLAS/Numba thread per
    rank and, under Slurm, NUMBA_CACHE_DIR: both only work if NumPy and Numba load after that."""
    out = subprocess.run([sys.executable, "-c", "import sys, ordersim; print(sorted({'numpy', 'numba'} & set(sys.modules)))"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
