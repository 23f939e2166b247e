"""ordersim.numba_cache: a change to a helper module recompiles the cached kernels that inline it;
the cache directory must be private (only we may write it: Numba runs the code it finds there)."""

import os
import pwd
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


def ordersim_with_cache_dir(cache_dir, *args):
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache_dir))
    return subprocess.run([sys.executable, "-m", "ordersim", *args], env=env, capture_output=True,
                          text=True, timeout=120)


def make_writable_by_all(path):
    path.mkdir()
    path.chmod(0o777)


def give_to_nobody(path):
    path.mkdir(mode=0o700)
    os.chown(path, pwd.getpwnam("nobody").pw_uid, -1)


@pytest.mark.parametrize("make, words", [
    (make_writable_by_all, "has mode 777, writable by its group or others"),
    (give_to_nobody, "is owned by uid"),
])
def test_a_numba_cache_dir_that_others_can_write_is_refused(tmp_path, make, words):
    """Numba runs the machine code it finds in its cache: a cache directory that another user
    owns or may write would let them run code as us (a job's cache path in a shared /tmp is
    predictable). `python -m ordersim` refuses it in one line before anything compiles."""
    if make is give_to_nobody and os.getuid() != 0:
        pytest.skip("giving a directory to another user needs root")
    cache = tmp_path / "cache"
    make(cache)
    result = ordersim_with_cache_dir(cache, "--help")
    assert result.returncode == 2 and result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0] and "NUMBA_CACHE_DIR" in lines[0], result.stderr
    assert list(cache.iterdir()) == []


def test_a_missing_numba_cache_dir_is_created_private(tmp_path):
    cache = tmp_path / "job" / "cache"
    result = ordersim_with_cache_dir(cache, "--help")
    assert result.returncode == 0, result.stderr
    assert cache.is_dir() and cache.stat().st_mode & 0o777 == 0o700
    assert ordersim_with_cache_dir(cache, "--help").returncode == 0  # ours, private: accepted
