"""The theory schedule's step sizes, the regime quantities, provenance and the warm-up, on real runs
of the command line (one fresh process each) and their HDF5 traces."""

import json
import math

import h5py
import numpy as np
import pytest

from ordersim import regime
from test_simulator import run_serial

SMALL = ["--problem", "least-squares", "--data", "synthetic:regression?n=64&d=3", "--workers", "4",
         "--test-fraction", "0", "--schedule", "theory", "--lr", "1", "--seeds", "0", "1", "--quiet",
         "--orderers", "rr", "cd-grab"]


def test_theory_step_makes_the_bias_term_the_orderers_rate():
    m, n, T, mu = 8, 128, 20, 0.3
    for orderer, rate in (("cd-grab", 1 / (m * n * T) ** 2), ("rr", 1 / (m * n * T**2)),
                          ("d-grab", 1 / (m * n * T**2))):
        alpha = regime.theory_step(orderer, m, n, T, mu)
        assert math.exp(-alpha * mu * n * T) == pytest.approx(rate)
    # the step grows with m (the old 2 ln T / (mu n T) did not), and cd-grab's faster rate asks more
    assert regime.theory_step("cd-grab", 64, n, T, mu) > regime.theory_step("cd-grab", 1, n, T, mu)
    assert regime.theory_step("cd-grab", m, n, T, mu) > regime.theory_step("rr", m, n, T, mu)


def test_regime_quantities():
    info = regime.regime(0.01, {"L": 2.0, "L_max": 10.0, "mu": 0.5}, 4, 16, 40)
    assert info["alpha_L_n"] == pytest.approx(0.32) and info["alpha_Lmax_n"] == pytest.approx(1.6)
    assert info["kappa"] == pytest.approx(20) and info["T_over_kappa"] == pytest.approx(2)
    assert not info["in_regime"]  # alpha L_max n > 1
    assert regime.regime(0.001, {"L": 2.0, "L_max": 10.0, "mu": 0.5}, 4, 16, 40)["in_regime"]
    line = regime.regime_warning({"rr": info, "cd-grab": dict(info, in_regime=True)})
    assert line.count("\n") == 0 and "rr (alpha L_max n = 1.6" in line and "cd-grab" not in line


@pytest.mark.parametrize("batch, momentum", [(4, 0.0), (1, 0.9)])
def test_minibatches_and_momentum_are_outside_the_analyses_setting(batch, momentum):
    """The PL analyses take one example per step and plain SGD steps: small numbers do not make
    such a run inside their regime, and the warning says why: only the reason that applies (a run
    with b = 2 and no momentum was told "b = 2, momentum 0: ... without momentum")."""
    info = regime.regime(0.001, {"L": 2.0, "L_max": 10.0, "mu": 0.5}, 4, 16, 40, batch, momentum)
    reason = f"b = {batch}: the analyses take b = 1" if batch != 1 else f"momentum {momentum:g}: the analyses take none"
    assert not info["in_regime"] and info["outside_setting"] == reason
    assert info["outside_setting"] in regime.regime_warning({"rr": info})


def test_without_mu_the_smooth_non_convex_analyses_step_condition_is_checked():
    """A problem without mu > 0 is held to the smooth non-convex analyses' small step (no horizon):
    before, such runs recorded and said nothing about their step."""
    constants = {"L": 2.0, "L_max": 10.0, "mu": math.nan}
    info = regime.regime(0.01, constants, 4, 16, 40)
    assert info["analyses"] == "smooth non-convex" and "kappa" not in info and "T_over_kappa" not in info
    assert info["alpha_Lmax_n"] == pytest.approx(1.6) and not info["in_regime"]
    assert regime.regime(0.001, constants, 4, 16, 1)["in_regime"]  # no horizon: T = 1 is inside
    line = regime.regime_warning({"rr": info})
    assert "of the smooth non-convex analyses (alpha L_max n <= 1)" in line and "T/kappa" not in line


@pytest.mark.parametrize("schedule", ["step", "inv-epoch", "inv-sqrt-epoch"])
def test_a_decaying_schedule_is_outside_the_analyses_setting(schedule):
    info = regime.regime(1e-4, {"L": 2.0, "L_max": 10.0, "mu": 0.5}, 4, 16, 40, schedule=schedule)
    assert not info["in_regime"] and f"schedule {schedule}" in info["outside_setting"]
    assert info["outside_setting"] in regime.regime_warning({"rr": info})


def trace_of(tmp_path, name, *extra):
    out = tmp_path / f"{name}.h5"
    result = run_serial([*SMALL, *extra, "--out", str(out)])
    assert result.returncode == 0, result.stderr
    return out, result


def test_runs_record_the_regime_and_warn_once_outside_it(tmp_path):
    out, result = trace_of(tmp_path, "short", "--epochs", "2")
    warnings = [line for line in result.stderr.splitlines() if "outside the regime" in line]
    assert len(warnings) == 1 and "rr (" in warnings[0] and "cd-grab (" in warnings[0]
    with h5py.File(out) as f:
        for orderer in ("rr", "cd-grab"):
            attrs = f[f"runs/{orderer}/seed_0"].attrs
            n, T = attrs["examples_per_worker"], 2
            alpha = regime.theory_step(orderer, 4, n, T, attrs["mu"])
            assert attrs["step_size"] == pytest.approx(alpha)
            assert attrs["alpha_Lmax_n"] == pytest.approx(alpha * attrs["L_max"] * n)
            assert attrs["alpha_L_n"] == pytest.approx(alpha * attrs["L"] * n)
            assert attrs["T_over_kappa"] == pytest.approx(T * attrs["mu"] / attrs["L_max"])
            assert not attrs["in_regime"]
    # a strongly regularized problem and a long horizon: inside, and no warning
    out, result = trace_of(tmp_path, "long", "--epochs", "60", "--problem-options", '{"lam": 100}',
                           "--measure-every", "60")
    assert "outside the regime" not in result.stderr
    with h5py.File(out) as f:
        assert all(f[f"runs/{o}/seed_0"].attrs["in_regime"] for o in ("rr", "cd-grab"))


def test_an_lr_below_the_theory_step_is_recorded_and_said(tmp_path):
    """The theory schedule takes min(lr, theory step): a run capped by lr is inside the assumptions
    (a smaller step) but not at the step the rate is proven at, which nothing said before."""
    out, result = trace_of(tmp_path, "capped", "--epochs", "60", "--problem-options", '{"lam": 100}',
                           "--measure-every", "60", "--lr", "1e-5")
    [line] = [line for line in result.stderr.splitlines() if "caps the theory step" in line]
    with h5py.File(out) as f:
        for orderer in ("rr", "cd-grab"):
            attrs = f[f"runs/{orderer}/seed_0"].attrs
            assert attrs["step_size"] == 1e-5 < attrs["theory_step"] and attrs["in_regime"]
            assert f"{orderer} ({attrs['theory_step']:.3g}; alpha L_max n = " in line
    assert line.endswith("(raise lr above it)")  # in the regime at the theory step too
    out, result = trace_of(tmp_path, "uncapped", "--epochs", "2")  # lr 1: above the theory steps
    assert "caps the theory step" not in result.stderr
    with h5py.File(out) as f:
        attrs = f["runs/rr/seed_0"].attrs
        assert attrs["step_size"] == attrs["theory_step"]


def test_a_capped_theory_step_outside_the_regime_does_not_advise_raising_lr():
    """The default experiment's theory steps (T = 5 against kappa ~ 10^4) are further outside the
    regime than its lr: the line said "raise lr above it", and a user who did got f - f* 2000x
    worse. It says now what would bring the runs into the regime: a horizon, not a step."""
    constants, m, n, T = {"L": 2.0, "L_max": 10.0, "mu": 0.5}, 4, 16, 5
    alpha = regime.theory_step("rr", m, n, T, constants["mu"])
    info = dict(regime.regime(alpha / 10, constants, m, n, T), step_size=alpha / 10, theory_step=alpha)
    line = regime.capped_warning({"rr": info})
    assert "raise lr" not in line and "a larger lr would not bring rr into the analyses' regime" in line
    # at the theory step alpha L_max n = kappa ln(1/rate) / T: T >= kappa ln(1/rate) brings it to 1
    assert f"T >= ~{alpha * 10.0 * n * T:.2g} epochs" in line
    # a run kept out by its setting alone (momentum) is told that, not a horizon it already has
    small = dict(regime.regime(1e-4, constants, m, n, 400, momentum=0.9), step_size=1e-4, theory_step=2e-4)
    line = regime.capped_warning({"rr": small})
    assert "T >= " not in line and line.endswith("momentum 0.9: the analyses take none"), line


def test_a_constant_step_outside_the_regime_warns_as_the_theory_schedule_does(tmp_path):
    """A constant step recorded outside the regime said nothing in the run's output before: its
    errors then read as the theorems'."""
    out, result = trace_of(tmp_path, "constant", "--epochs", "2", "--schedule", "constant", "--lr", "0.5")
    [warning] = [line for line in result.stderr.splitlines() if "outside the regime" in line]
    with h5py.File(out) as f:
        attrs = f["runs/rr/seed_0"].attrs
        assert attrs["step_size"] == 0.5 and not attrs["in_regime"]
        assert f"rr, cd-grab (alpha L_max n = {attrs['alpha_Lmax_n']:.3g}" in warning  # the same numbers


NONCONVEX = ["--problem", "nonconvex-logistic", "--data", "synthetic:classification?n=64&d=3",
             "--workers", "4", "--test-fraction", "0", "--seeds", "0", "--quiet", "--orderers", "rr",
             "cd-grab", "--epochs", "2", "--schedule", "constant"]


def test_a_nonconvex_run_records_its_step_against_L_and_warns_outside(tmp_path):
    out = tmp_path / "large.h5"
    result = run_serial([*NONCONVEX, "--lr", "1", "--out", str(out)])
    assert result.returncode == 0, result.stderr
    [warning] = [line for line in result.stderr.splitlines() if "outside the regime" in line]
    assert "of the smooth non-convex analyses (alpha L_max n <= 1)" in warning
    with h5py.File(out) as f:
        for orderer in ("rr", "cd-grab"):
            attrs = f[f"runs/{orderer}/seed_0"].attrs
            assert attrs["analyses"] == "smooth non-convex" and "kappa" not in attrs
            assert attrs["step_size"] == 1 and not attrs["in_regime"]
            assert attrs["alpha_Lmax_n"] == pytest.approx(attrs["L_max"] * attrs["examples_per_worker"])
            assert f"alpha L_max n = {attrs['alpha_Lmax_n']:.3g}" in warning
    assert "rr, cd-grab (alpha L_max n = " in warning  # the same numbers, given once
    out = tmp_path / "small.h5"
    result = run_serial([*NONCONVEX, "--lr", "1e-4", "--out", str(out)])
    assert result.returncode == 0 and "outside the regime" not in result.stderr, result.stderr
    with h5py.File(out) as f:
        assert all(f[f"runs/{o}/seed_0"].attrs["in_regime"] for o in ("rr", "cd-grab"))


def test_a_decaying_schedule_records_its_largest_step_and_warns(tmp_path):
    """The step schedule may grow (lr_decay > 1): its largest step is the last epoch's."""
    out = tmp_path / "growing.h5"
    result = run_serial([*SMALL, "--schedule", "step", "--lr", "1e-4", "--lr-decay", "3", "--lr-step", "2",
                         "--epochs", "5", "--out", str(out)])
    assert result.returncode == 0, result.stderr
    [warning] = [line for line in result.stderr.splitlines() if "outside the regime" in line]
    assert "schedule step: the analyses take a constant step" in warning
    with h5py.File(out) as f:
        attrs = f["runs/rr/seed_0"].attrs
        assert attrs["largest_step"] == pytest.approx(9e-4) and "step_size" not in attrs
        assert attrs["alpha_Lmax_n"] == pytest.approx(9e-4 * attrs["L_max"] * attrs["examples_per_worker"])
        assert not attrs["in_regime"] and attrs["analyses"] == "PL"


def test_a_problem_without_a_bound_on_L_max_records_no_regime(tmp_path):
    out = tmp_path / "mlp.h5"
    result = run_serial(["--problem", "mlp", "--data", "synthetic:classification?n=64&d=3", "--workers", "2",
                         "--test-fraction", "0", "--seeds", "0", "--quiet", "--orderers", "rr", "--epochs", "1",
                         "--out", str(out)])
    assert result.returncode == 0 and "outside the regime" not in result.stderr, result.stderr
    with h5py.File(out) as f:
        assert not {"in_regime", "alpha_Lmax_n", "analyses"} & set(f["runs/rr/seed_0"].attrs)


def test_trace_records_the_code_state(tmp_path):
    out, _ = trace_of(tmp_path, "provenance", "--epochs", "1")
    with h5py.File(out) as f:
        a = dict(f.attrs)
    assert len(a["git_commit"]) == 40 and isinstance(bool(a["git_dirty"]), bool)  # tests run in a checkout
    for library in ("numpy", "numba", "mpi4py", "h5py"):
        assert a[f"{library}_version"], library
    assert "MPI" in a["mpi_library"] or "MPICH" in a["mpi_library"]
    assert "ordersim" in a["command_line"] and "--epochs 1" in a["command_line"]
    assert json.loads(a["hosts"])


def test_clock_starts_after_compilation(tmp_path):
    """In a fresh process the first run's first epoch is not the one that compiles: the warm-up did
    it before the clock started (compile_time), so that epoch takes about as long as the others."""
    out, _ = trace_of(tmp_path, "timing", "--epochs", "6", "--orderers", "rr", "--seeds", "0", "1")
    with h5py.File(out) as f:
        first, second = f["runs/rr/seed_0"], f["runs/rr/seed_1"]
        assert first.attrs["compile_time"] > 0 and second.attrs["compile_time"] == 0
        epochs = np.diff(first["wall_time"][()])  # seconds of epochs 1..6 (measurement included)
    # Loose on purpose (a shared machine): compiling takes seconds, an epoch here milliseconds.
    assert epochs[0] < 20 * np.median(epochs[1:]) + 0.25, epochs
