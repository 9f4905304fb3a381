"""solver="auto" never computes silently for an hour: the CG fit's
cost warning and progress bar, and the memory-based Cholesky/CG switch."""

import re
import types
import warnings

import numpy as np
import pytest
from sklearn.gaussian_process.kernels import ConstantKernel, Matern, WhiteKernel

from skgpx import PathwiseGPSampler

RNG = np.random.default_rng(5)
X = RNG.uniform(0, 4, (120, 2))
Y = np.sin(2 * X[:, 0]) + 0.1 * RNG.standard_normal(120)
KERNEL = ConstantKernel(1.5, "fixed") * Matern([0.7, 1.3], "fixed", nu=2.5) + WhiteKernel(
    0.05, "fixed")


@pytest.fixture
def cost():
    """The module of the switch and of the estimate (imported here: the behaviour tests
    below need no private name)."""
    from skgpx.pathwise._exact import _solver as _exact_solver

    return _exact_solver


def _cost_warnings(caught):
    return [w for w in caught if issubclass(w.category, UserWarning)
            and "estimated to take" in str(w.message)]


def _fit(**options):
    params = dict(optimizer=None, solver="cg", device="cpu")
    params.update(options)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gp = PathwiseGPSampler(KERNEL, **params).fit(X, Y)
    return gp, _cost_warnings(caught)


def test_the_estimate_before_the_solve_is_the_timed_product_times_the_iterations(monkeypatch, cost):
    # 7 s per product x at least 10 iterations = 70 s > 60 s: a warning before any iteration
    monkeypatch.setattr(cost, "seconds_per_product", lambda operator, n_rhs: 7.0)
    gp, caught = _fit()
    assert len(caught) == 1
    message = str(caught[0].message)
    assert "on 120 rows (1 right-hand side(s))" in message
    assert "at least 70 s on cpu (at least 10 iterations at 7 s each)" in message
    assert "n_inducing=512" in message and "device='cuda'" in message
    assert "verbose=1" in message and "exceeds 60 s" in message
    assert "return_std and posterior draws solve again" in message
    assert gp.cg_n_iter_ >= 1


def test_the_warning_comes_once_per_fit(monkeypatch, cost):
    # every estimate, before the solve and at each iteration, exceeds a zero threshold
    monkeypatch.setattr(cost, "SLOW_FIT_SECONDS", 0.0)
    gp, caught = _fit(cg_tol=1e-10, cg_preconditioner_rank=0)
    assert gp.cg_n_iter_ > cost.PROJECT_FROM_ITERATION
    assert len(caught) == 1
    _, again = _fit(cg_tol=1e-10, cg_preconditioner_rank=0)
    assert len(again) == 1  # and again for the next fit


def test_the_solve_warns_when_its_residuals_project_a_long_run(monkeypatch, cost):
    # the timed product says 0 s, so only the projection from the iterations can warn
    monkeypatch.setattr(cost, "seconds_per_product", lambda operator, n_rhs: 0.0)
    monkeypatch.setattr(cost, "SLOW_FIT_SECONDS", 0.0)
    gp, caught = _fit(cg_tol=1e-10, cg_preconditioner_rank=0)
    assert len(caught) == 1
    message = str(caught[0].message)
    match = re.search(r"about (\d+) iterations at ", message)
    assert match and "at least" not in message, message
    assert cost.PROJECT_FROM_ITERATION <= int(match.group(1)) <= gp.cg_max_iter


def test_projected_iterations(cost):
    monitor = cost.CGCostMonitor(n=10, n_rhs=1, device="cpu", tol=1e-4, max_iter=50,
                                 per_iteration=1.0, bar=None, verbose=0)
    # residual 1e-2 after 3 iterations: 10^(-2/3) per iteration, 1e-4 after 6
    assert monitor.projected_iterations(3, 1e-2) == 6
    assert monitor.projected_iterations(4, 1e-5) == 4  # already below tol
    assert monitor.projected_iterations(3, 1.5) == 50  # no decrease: max_iter
    assert monitor.projected_iterations(1, 0.9) == 50  # capped at max_iter


def test_small_cg_fits_do_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        PathwiseGPSampler(KERNEL, optimizer=None, solver="cg", device="cpu").fit(X, Y)


def test_verbose_shows_the_cg_iterations_and_verbose_0_is_silent(capfd):
    PathwiseGPSampler(KERNEL, optimizer=None, solver="cg", device="cpu").fit(X, Y)
    assert capfd.readouterr() == ("", "")
    gp = PathwiseGPSampler(KERNEL, optimizer=None, solver="cg", device="cpu",
                           verbose=1).fit(X, Y)
    out, err = capfd.readouterr()
    assert out == "" and "PathwiseGPSampler CG solve" in err and "relative_residual" in err
    assert f"{gp.cg_n_iter_}it " in err  # one step of the bar per CG iteration
    PathwiseGPSampler(KERNEL, optimizer=None, solver="cg", device="cpu", verbose=2).fit(X, Y)
    assert "CG iteration 1: largest relative residual" in capfd.readouterr().err


@pytest.mark.parametrize("limit, solver", [("600kB", "cg"), ("800kB", "cholesky")])
def test_auto_factorises_when_the_memory_allows(monkeypatch, limit, solver):
    # 3 buffers of 120 x 120 float64 = 345.6 kB, against half the memory available
    monkeypatch.setenv("SKGPX_MEMORY_LIMIT", limit)
    gp = PathwiseGPSampler(KERNEL, optimizer=None, device="cpu").fit(X, Y)
    assert hasattr(gp, "cg_n_iter_") == (solver == "cg")
    assert hasattr(gp, "L_") == (solver == "cholesky")  # L_: the Cholesky factor


def test_resolve_solver_by_memory_device_and_fitting(monkeypatch, cost):
    seen = []

    def available(device):
        seen.append(str(device))
        return 20 * 10**9

    monkeypatch.setattr(cost, "available_memory", available)

    def resolve(n, fitting=False, device="cpu", itemsize=8, **params):
        est = types.SimpleNamespace(**{"solver": "auto", "cholesky_max_n": "auto", **params})
        return cost.resolve_solver(est, n, itemsize, fitting, device)

    # 3 * n^2 * 8 bytes against 10 GB: n = 20 000 needs 9.6 GB, 21 000 needs 10.6 GB
    assert resolve(20_000) == "cholesky" and resolve(21_000) == "cg"
    assert resolve(25_000, itemsize=4) == "cholesky"  # float32: 7.5 GB
    assert resolve(20_000, device="cuda:1") == "cholesky" and seen[-1] == "cuda:1"
    assert resolve(8000, fitting=True) == "cholesky"
    assert resolve(8001, fitting=True) == "cg"  # the caller refuses it (sparse mode)
    assert resolve(20_000, cholesky_max_n=50) == "cg"  # an int is a row limit
    assert resolve(30_000, cholesky_max_n=40_000) == "cholesky"
    assert resolve(10, solver="cg") == "cg"


def test_fitting_above_the_auto_row_limit_is_refused_at_once():
    free = ConstantKernel() * Matern() + WhiteKernel()
    with pytest.raises(ValueError, match=r"'auto': 8000 rows when fitting.*n_inducing"):
        PathwiseGPSampler(free, device="cpu").fit(np.zeros((8001, 1)), np.zeros(8001))


@pytest.mark.parametrize("options, per_evaluation, expected", [
    (dict(optimizer=None), 70.0, "70 s on cpu (one evaluation at 70 s each"),
    (dict(optimizer=None), 50.0, None),
    (dict(), 7.0, "at least 70 s on cpu (at least 10 evaluations at 7 s each"),
    (dict(optimizer="adam", max_iter=9), 7.0, "70 s on cpu (10 evaluations at 7 s each"),
    (dict(optimizer="adam", max_iter=7), 7.0, None),
])
def test_slow_cholesky_fits_warn_once(monkeypatch, cost, options, per_evaluation, expected):
    monkeypatch.setattr(cost, "MIN_TIMED_ROWS", {"fit": 0, "fixed": 0})
    calls = []

    def timed(kernel, theta, X, Y, alpha, fitting):
        calls.append((X.shape[0], fitting))
        return per_evaluation

    monkeypatch.setattr(cost, "cholesky_seconds", timed)
    free = ConstantKernel(1.0, (1e-2, 1e2)) * Matern(1.0, (1e-2, 1e2), nu=2.5) + WhiteKernel(
        0.05, "fixed")
    kernel = KERNEL if options.get("optimizer", "x") is None else free
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gp = PathwiseGPSampler(kernel, solver="cholesky", device="cpu", **options).fit(X, Y)
    caught = _cost_warnings(caught)
    assert calls == [(120, options.get("optimizer", "x") is not None)]
    assert gp.L_.shape == (120, 120)
    if expected is None:
        assert caught == []
        return
    assert len(caught) == 1
    message = str(caught[0].message)
    assert "the exact GP on 120 rows" in message and "timed on 120 rows" in message
    assert expected in message and "n_inducing=512" in message
    assert "at least" not in message or expected.startswith("at least")


def test_cholesky_seconds_scales_the_factorisation_by_n3_and_the_rest_by_n2(monkeypatch,
                                                                            cost):
    from skgpx.kernels import TorchKernel
    import torch

    timings = iter([1.0, 3.0])  # the factorisation alone, then a whole evaluation
    monkeypatch.setattr(cost, "_best_seconds", lambda fn, device: next(timings))
    x = torch.tensor(np.random.default_rng(0).uniform(0, 4, (1024, 2)))
    tk = TorchKernel(KERNEL)
    seconds = cost.cholesky_seconds(tk, tk.theta_tensor("cpu", torch.float64), x,
                                    torch.zeros(1024, 1, dtype=torch.float64),
                                    torch.zeros(1024, dtype=torch.float64), False)
    assert seconds == pytest.approx((3.0 - 1.0) * 2**2 + 1.0 * 2**3)  # 512 rows timed
    assert cost.CALIBRATION_ROWS == 512


def test_small_cholesky_fits_are_not_timed(monkeypatch, cost):
    def fail(*args):
        raise AssertionError("timed")

    monkeypatch.setattr(cost, "cholesky_seconds", fail)
    PathwiseGPSampler(KERNEL, optimizer=None, device="cpu").fit(X, Y)  # 120 <= 4096 rows
    free = ConstantKernel() * Matern(nu=2.5) + WhiteKernel()
    PathwiseGPSampler(free, device="cpu").fit(X, Y)  # 120 <= 1024 rows
    monkeypatch.setattr(cost, "MIN_TIMED_ROWS", {"fit": 119, "fixed": 4096})
    with pytest.raises(AssertionError, match="timed"):
        PathwiseGPSampler(free, device="cpu").fit(X, Y)
