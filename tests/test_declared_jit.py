"""ordersim.declared_jit: kernels with explicit signatures compile at first use, not at import,
and from then on behave as numba's eager njit(signatures); so listings and --help compile nothing."""

import json
import os
import pickle
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from numba import config, njit, types

from ordersim.declared_jit import njit_declared

pytestmark = pytest.mark.skipif(config.DISABLE_JIT, reason="nothing compiles without JIT")

SIGNATURES = [types.float64(types.float64[::1]), types.float64(types.float64[:, ::1])]


def first_entry(values):
    return values.reshape(-1)[0]


def declared():
    return njit_declared(SIGNATURES, error_model="numpy")(first_entry)


def test_compiles_the_declared_signatures_at_first_call_and_no_other():
    kernel = declared()
    assert kernel.signatures == []
    assert kernel(np.arange(3.0)) == 0.0
    assert sorted(map(str, kernel.signatures)) == ["(Array(float64, 1, 'C', False, aligned=True),)",
                                                   "(Array(float64, 2, 'C', False, aligned=True),)"]
    with pytest.raises(TypeError):
        kernel(np.arange(3, dtype=np.float32))  # a new type compiles nothing, as with njit(sigs)
    with pytest.raises(TypeError):
        declared()(np.arange(3, dtype=np.int64))  # nor as the first call
    assert len(kernel.signatures) == 2


def test_first_use_from_jitted_code_or_compile_or_pickle():
    @njit
    def caller(kernel, values):
        return kernel(values)

    from_jitted = declared()
    assert caller(from_jitted, np.ones((2, 2))) == 1.0
    assert len(from_jitted.signatures) == 2

    from_compile = declared()
    from_compile.compile((types.float64[::1],))
    assert len(from_compile.signatures) == 2
    with pytest.raises(RuntimeError):
        from_compile.compile((types.int64[::1],))

    unpickled = pickle.loads(pickle.dumps(declared()))
    with pytest.raises(TypeError):
        unpickled(np.arange(3, dtype=np.float32))
    assert unpickled(np.arange(1.0, 3.0)) == 1.0


# Every Numba compilation in the process, as (command, function); python -m ordersim as run.
LISTINGS = textwrap.dedent("""
    import json, runpy, sys
    from numba.core import event

    compiled, command = [], None

    class Compilations(event.Listener):
        def on_start(self, e):
            compiled.append((command, e.data["dispatcher"].py_func.__qualname__))

        def on_end(self, e):
            pass

    event.register("numba:compile", Compilations())
    for command in json.loads(sys.argv[1]):
        sys.argv = ["ordersim", *command]
        try:
            runpy.run_module("ordersim", run_name="__main__", alter_sys=True)
        except SystemExit as stop:
            assert stop.code in (0, None), (command, stop.code)
    print(json.dumps(compiled))
""")


def test_listings_and_help_compile_nothing(tmp_path):
    """Listing the orderers cold took 6 s, all compilation of the balancing kernels at import."""
    commands = [["orderers"], ["problems"], ["measurements"], ["--help"], ["run", "--help"],
                ["herding-sim", "--help"]]
    cache = tmp_path / "numba-cache"  # fresh: nothing to load, so anything needed would compile
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache))
    out = subprocess.run([sys.executable, "-c", LISTINGS, json.dumps(commands)], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "cd-grab" in out.stdout and "logistic" in out.stdout and "[suboptimality]" in out.stdout
    assert json.loads(out.stdout.splitlines()[-1]) == []
    assert not [path.name for path in cache.rglob("*") if path.suffix in (".nbi", ".nbc")]
