"""ordersim.numba_blas: Numba's kernels get SciPy's BLAS without scipy.linalg being imported, and
they compute what they computed with it; a later `import scipy.linalg` works as usual."""

import os
import subprocess
import sys
import textwrap

from conftest import ROOT

# Fresh processes: the test session itself has long imported scipy.linalg.
KERNELS = textwrap.dedent("""
    import sys

    import numpy as np
    from numba import njit

    import ordersim.numba_cache  # noqa: F401  (what every module with kernels imports first)

    @njit
    def products(x, y, a):
        return np.dot(x, y), np.dot(a, x), np.dot(a, a.T)

    rng = np.random.default_rng(0)
    x, y, a = rng.normal(size=64), rng.normal(size=64), rng.normal(size=(5, 64))
    dot, matvec, gram = products(x, y, a)
    print("scipy.linalg" in sys.modules)
    import scipy.linalg
    print(scipy.linalg.solve(np.eye(2), np.ones(2)).tolist())
    np.save(sys.argv[1], np.concatenate([[dot], matvec, gram.ravel()]))
""")


def run_kernels(script, out, env):
    """The kernels' script in a fresh process: its printed lines and the products it saved."""
    import numpy as np

    done = subprocess.run([sys.executable, "-c", script, str(out)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout.split("\n"), np.load(out)


def test_kernels_calling_blas_load_without_scipy_linalg_and_compute_the_same(tmp_path):
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"))
    lines, ours = run_kernels(KERNELS, tmp_path / "ours.npy", env)
    assert lines[0] == "False", "scipy.linalg was imported before the kernel ran"
    assert lines[1] == "[1.0, 1.0]"  # scipy.linalg imported after the preload works
    # The same kernels with scipy.linalg imported the usual way, first: the same BLAS, the same bits.
    usual = KERNELS.replace("import sys\n", "import sys\nimport scipy.linalg\n", 1)
    lines, theirs = run_kernels(usual, tmp_path / "usual.npy", env)
    assert lines[0] == "True"
    assert ours.tobytes() == theirs.tobytes()
