"""ordersim.numba_cache: a change to a helper module recompiles the cached kernels that inline it;
the cache directory must be private (only we may write it: Numba runs the code it finds there).
The MPI epoch loop is cached too, compiled by one rank of the node while the others wait."""

import os
import pwd
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import h5py
import numba
import pytest

from conftest import run_mpi

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


# A problem with a kernel of its own (logistic regression's, called from this file), so that its
# step loops have cache entries of their own, cold in any cache, while everything else of a run
# (logistic's other kernels, rr's, the measurements) is whatever the cache already holds.
CACHE_PROBE = textwrap.dedent('''
    from numba import njit

    from ordersim.problems.logistic import Logistic, batch_grads as logistic_batch_grads


    @njit(cache=True)
    def batch_grads(x, A, y, idx, params, out):
        return logistic_batch_grads(x, A, y, idx, params, out)


    class CacheProbe(Logistic):
        name = "cache-probe"
        batch_grads = staticmethod(batch_grads)
''')


def cache_events(output: str) -> list[tuple[str, str]]:
    """("saved" or "loaded", path) of every file in Numba's cache log (NUMBA_DEBUG_CACHE),
    found in the whole output: the ranks write to one pipe, and two ranks' lines can run into one."""
    return re.findall(r"data (saved|loaded) (?:to|from) '([^']*)'", output)


def mpi_loop_cache_events(ranks, problem, tmp_path, run, *args):
    """Run the probe problem under mpiexec; Numba's own cache log (NUMBA_DEBUG_CACHE, one line
    per file it saves or loads, from every rank) counts how many ranks compiled the MPI epoch
    loop (each saves it) and how many loaded it."""
    out = tmp_path / f"{run}.h5"
    result = run_mpi(ranks, ["-m", "ordersim", "--problem", str(problem), "--backend", "mpi",
                             "--data", "synthetic:classification?n=160&d=4", "--epochs", "1",
                             "--workers", "4", "--orderers", "rr", "--seeds", "0", "--quiet", "--no-herding",
                             "--cache-dir", str(tmp_path / "constants"), "--out", str(out), *args],
                     timeout=300, env={"NUMBA_DEBUG_CACHE": "1"})
    assert result.returncode == 0, result.stderr
    assert "Cannot cache" not in result.stderr, result.stderr
    loops = [(kind, path) for kind, path in cache_events(result.stdout) if "engine.epoch_steps_mpi_" in path]
    return out, sum(kind == "saved" for kind, _ in loops), sum(kind == "loaded" for kind, _ in loops), loops


def remove_probe_entries(loop_events):
    """Remove the probe's loops from ordersim's cache directory (in-tree or NUMBA_CACHE_DIR, which
    the test leaves as it found it): the files named with its kernel digest, read off the MPI
    loop's file name in Numba's log."""
    for _, name in loop_events[:1]:
        path = Path(name)
        digest = re.search(r"_([0-9a-f]{16})-\d+\.", path.name).group(1)
        for entry in path.parent.glob(f"*_{digest}-*"):
            entry.unlink()


NEEDS_JIT = pytest.mark.skipif(numba.config.DISABLE_JIT, reason="nothing compiles under NUMBA_DISABLE_JIT=1")


@pytest.mark.mpi
@NEEDS_JIT
def test_the_mpi_loop_is_compiled_by_one_rank_then_loaded_from_the_cache(tmp_path):
    """On a cold cache the node's first rank compiles the MPI epoch loop and the others (3 at
    mpiexec -n 4) load it; a second job, in fresh processes (at -n 2, with MPI_Allgather as the
    exchange), compiles nothing of it: every rank loads the cached machine code, which calls the
    C functions by symbol on this process's MPI handles, and the trace is the first job's, bit
    for bit (one compilation for both rank counts: a job's cold compilation is most of its time)."""
    from test_simulator import assert_bitwise_equal, contents

    problem = tmp_path / "cache_probe.py"
    problem.write_text(CACHE_PROBE)
    first, saved, loaded, loops = mpi_loop_cache_events(4, problem, tmp_path, "cold")
    try:
        assert (saved, loaded) == (1, 3), "one rank compiled the loop, the others loaded it"
        second, saved, loaded, _ = mpi_loop_cache_events(2, problem, tmp_path, "warm", "--exchange", "allgather")
        assert (saved, loaded) == (0, 2), "every rank loaded the loop, none compiled it"
        assert_bitwise_equal(contents(first), contents(second))
    finally:
        remove_probe_entries(loops)


# The node's first rank fails to compile its loop (a typing error on that rank only) while the
# others wait for it to finish: the job must end, and the others never get to run the loop.
FAILING_COMPILE = textwrap.dedent("""
    from mpi4py import MPI
    from numba import njit

    from ordersim.backend import MPIBackend, abort_on_exception

    world = MPI.COMM_WORLD
    OFFSET = "not a number" if world.Get_rank() == 0 else 1.0


    @njit(cache=True)
    def loop(x):
        return x + OFFSET


    backend = MPIBackend(world.Get_size(), world)
    abort_on_exception(world, backend.run_steps, loop, 1.0)
    print("rank", world.Get_rank(), "ran the loop", flush=True)
""")


@pytest.mark.mpi
@NEEDS_JIT
@pytest.mark.parametrize("ranks", [2, 4])
def test_a_rank_that_fails_to_compile_ends_the_ranks_waiting_for_it(tmp_path, ranks):
    script = tmp_path / "failing_compile.py"
    script.write_text(FAILING_COMPILE)
    result = run_mpi(ranks, [str(script)], timeout=120)  # not a hang
    assert result.returncode != 0
    assert "TypingError" in result.stderr, result.stderr
    assert "ran the loop" not in result.stdout, "the other ranks waited for the first one"


# One rank has the loop compiled for these types already, the others not: all must still agree on
# whether to wait for the node's first rank (one that skipped the wait left the others in it).
PARTLY_COMPILED = textwrap.dedent("""
    from mpi4py import MPI
    from numba import njit

    from ordersim.backend import MPIBackend, abort_on_exception

    world = MPI.COMM_WORLD


    @njit(cache=True)
    def loop(x):
        return x + 1.0


    if world.Get_rank() == world.Get_size() - 1:
        loop.compile((loop.typeof_pyval(1.0),))
    backend = MPIBackend(world.Get_size(), world)
    abort_on_exception(world, backend.run_steps, loop, 1.0)
    world.Barrier()
    print("rank", world.Get_rank(), "ran the loop", flush=True)
""")


@pytest.mark.mpi
@NEEDS_JIT
@pytest.mark.parametrize("ranks", [2, 4])
def test_ranks_that_have_the_loop_compiled_wait_with_the_others(tmp_path, ranks):
    script = tmp_path / "partly_compiled.py"
    script.write_text(PARTLY_COMPILED)
    result = run_mpi(ranks, [str(script)], timeout=120)  # not a hang
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("ran the loop") == ranks, result.stdout


@pytest.mark.mpi
@NEEDS_JIT
def test_on_a_cold_cache_the_node_compiles_each_kernel_once_and_its_ranks_load_it(tmp_path):
    """At mpiexec -n 4 on an empty NUMBA_CACHE_DIR the node's first rank compiles the config's
    kernels (warm.warm_node_first: its serial kernels on a stand-in, the orderers' MPI kernels,
    then the MPI loop) while the other ranks wait: every cache file is saved once, not once per
    rank. A second job on that cache compiles and warms nothing, and traces the same bits."""
    from test_simulator import assert_bitwise_equal, contents

    def job(name):
        out = tmp_path / f"{name}.h5"
        result = run_mpi(4, ["-m", "ordersim", "--backend", "mpi", "--data", "synthetic:classification?n=160&d=4",
                             "--epochs", "1", "--workers", "4", "--orderers", "rr", "cd-grab", "--seeds", "0",
                             "--no-herding", "--cache-dir", str(tmp_path / "constants"), "--out", str(out)],
                         timeout=600, env={"NUMBA_DEBUG_CACHE": "1", "NUMBA_CACHE_DIR": str(tmp_path / "numba")})
        assert result.returncode == 0, result.stderr
        saved = [path for kind, path in cache_events(result.stdout) if kind == "saved"]
        # the last line's time is the whole job's: it covers the set-up, where the node compiles
        seconds = float(re.search(r"trace: .*\(([0-9.]+) s\)", result.stdout).group(1))
        with h5py.File(out) as f:
            assert 0 < f.attrs["setup_time"] <= seconds + 0.05, (f.attrs["setup_time"], seconds)
        return out, result.stderr, saved

    cold, notices, saved = job("cold")
    assert any("pair_balance_observe" in path for path in saved)  # cd-grab's kernel of MPI steps
    assert saved and not {path for path in saved if saved.count(path) > 1}, \
        "a cache file was compiled and saved by several ranks"
    assert "once for the node's ranks, which wait and then load them" in notices
    markers = list((tmp_path / "numba").rglob("ordersim-warm-*"))
    assert len(markers) == 1, markers
    written = markers[0].stat().st_mtime_ns
    warm, notices, saved = job("warm")
    assert saved == [] and "compiling" not in notices, notices
    # the marker found: no second warm-up (which would write it again)
    assert list((tmp_path / "numba").rglob("ordersim-warm-*")) == markers
    assert markers[0].stat().st_mtime_ns == written
    assert_bitwise_equal(contents(cold), contents(warm))


@pytest.mark.mpi
@NEEDS_JIT
@pytest.mark.parametrize("bad, words", [(["--batch", "1000"], ["'batch'", "1000"]),
                                        (["--problem", "softmax", "--data", "synthetic:regression?n=160&d=4"],
                                         ["'data'", "real numbers"]),
                                        (["--problem", "{tmp_path}/reads_params_1.py", "--data",
                                          "synthetic:regression?n=160&d=4"],
                                         ["'problem'", "kernel batch_grads raised IndexError", "kernel_params()"])])
def test_on_a_cold_cache_a_data_error_comes_before_the_node_compiles(tmp_path, bad, words):
    """What only the data can refute (a batch larger than a worker's examples, labels the problem
    cannot take, a kernel that reads past params' end on the data's first rows) is found before
    warm_node_first compiles the config's kernels (10-30 s of a cold cache at mpiexec -n 2 on 2
    cores): no kernel of the steps is saved, no warm marker written."""
    from test_problems import READS_PARAMS_1

    (tmp_path / "reads_params_1.py").write_text(READS_PARAMS_1)  # the last case's problem
    bad = [arg.format(tmp_path=tmp_path) for arg in bad]
    result = run_mpi(2, ["-m", "ordersim", "--backend", "mpi", "--data", "synthetic:classification?n=160&d=4",
                         "--epochs", "1", "--orderers", "rr", *bad, "--out", str(tmp_path / "t.h5")],
                     timeout=300, env={"NUMBA_DEBUG_CACHE": "1", "NUMBA_CACHE_DIR": str(tmp_path / "numba")})
    assert result.returncode == 2, result.stderr
    # ordersim's lines: Open MPI's launcher adds its own report of a non-zero exit
    lines = [line for line in result.stderr.splitlines() if line.startswith("ordersim:")]
    assert len(lines) == 1 and all(word in lines[0] for word in words), result.stderr
    saved = [path for kind, path in cache_events(result.stdout) if kind == "saved"]
    assert not [path for path in saved if "engine" in path or "orderers" in path], saved
    assert not list((tmp_path / "numba").rglob("ordersim-warm-*"))


@NEEDS_JIT
def test_the_warm_marker_changes_with_what_chooses_kernels_only(tmp_path):
    """Run-only fields (seeds, epochs, step size, output, data) keep the node's warm marker, so
    that a warm cache is not warmed again; the orderers, a problem option, the batch or an edit of
    a user's problem file change it."""
    from dataclasses import replace

    from ordersim.config import build_config
    from ordersim.warm import warm_marker

    problem = tmp_path / "my_problem.py"
    problem.write_text(CACHE_PROBE)
    config = build_config({"problem": str(problem)})
    marker = warm_marker(config)
    assert marker is not None
    for same in (dict(seeds=[7]), dict(epochs=3), dict(lr=0.01), dict(out="x.h5"),
                 dict(data="synthetic:classification?n=100&d=3")):
        assert warm_marker(replace(config, **same)) == marker, same
    for other in (dict(orderers=["rr"]), dict(problem_options={"lam": 1.0}), dict(batch=4)):
        assert warm_marker(replace(config, **other)) != marker, other
    problem.write_text(CACHE_PROBE + "\n# edited\n")
    assert warm_marker(config) != marker
