"""The sparse (inducing-point) mode of DeepKernelProcessRegressor: parameters, contract,
prediction algebra, memory guard, pickling and devices (oracles S12-S15)."""

import pickle
import warnings

import numpy as np
import pytest
import torch
from sklearn.datasets import make_friedman1
from sklearn.exceptions import ConvergenceWarning

from skgpx import DeepKernelProcessRegressor, InsufficientMemoryError
from skgpx.dkp._sparse import _predict as _sparse_predict
from skgpx.dkp._memory import sparse_fit_bytes
from skgpx.dkp._predict import propagate
from skgpx.dkp._sparse._model import (
    SparseDKPState, inducing_blocks, prior_mean_grams, propagate_rows,
)
from skgpx.dkp._sparse._pass import objective_value
from skgpx.dkp._sparse._predict import sparse_prediction_cache
from skgpx._inducing._rows import Rows

X, Y = make_friedman1(n_samples=60, n_features=5, noise=0.3, random_state=0)
X_TEST = make_friedman1(n_samples=9, n_features=5, random_state=1)[0]
SPARSE = dict(n_inducing=12, max_iter=3, device="cpu", random_state=0)


# ----------------------------------------------------------------------------- S14

# ------------------------------------------------------------------------ validation
def _no_torch(monkeypatch):
    """Fail the test if the estimator reaches its first torch work."""
    def refuse(*args, **kwargs):
        raise AssertionError("torch work started before the parameters were checked")

    monkeypatch.setattr(DeepKernelProcessRegressor, "_as_tensor", refuse)
    monkeypatch.setattr(DeepKernelProcessRegressor, "_fit_device_dtype", refuse)


@pytest.mark.parametrize("points, message", [
    (np.zeros((3, 2)), r"inducing_points has 2 columns but X has 5 features"),
    (np.zeros(4), r"Expected 2D array"),
    (np.full((3, 5), np.nan), r"inducing_points contains NaN"),
    (np.full((3, 5), np.inf), r"inducing_points contains infinity"),
])
def test_bad_inducing_points_raise_before_torch(monkeypatch, points, message):
    _no_torch(monkeypatch)
    with pytest.raises(ValueError, match=message):
        DeepKernelProcessRegressor(inducing_points=points).fit(X, Y)


def test_lbfgs_needs_the_sparse_mode(monkeypatch):
    _no_torch(monkeypatch)
    with pytest.raises(ValueError, match=r"solver='lbfgs' needs the inducing-point mode"):
        DeepKernelProcessRegressor(solver="lbfgs").fit(X, Y)


@pytest.mark.parametrize("params, message", [
    (dict(n_inducing=0), "n_inducing"), (dict(solver="adam"), "solver"),
    (dict(batch_size=0), "batch_size"), (dict(inducing_jitter=-1.0), "inducing_jitter"),
])
def test_parameter_constraints(monkeypatch, params, message):
    _no_torch(monkeypatch)
    with pytest.raises(ValueError, match=message):
        DeepKernelProcessRegressor(**params).fit(X, Y)


def test_newton_ignores_optimize_inducing_with_a_warning():
    model = DeepKernelProcessRegressor(**SPARSE, solver="newton", optimize_inducing=True)
    with pytest.warns(UserWarning, match="optimize_inducing=True is ignored"):
        model.fit(X, Y)
    fixed = DeepKernelProcessRegressor(**SPARSE, solver="newton").fit(X, Y)
    np.testing.assert_array_equal(model.inducing_points_, fixed.inducing_points_)


# ---------------------------------------------------------------------- fitted state
def test_fitted_attributes_and_user_points_untouched():
    points = X[:10] + 0.01
    given = points.copy()
    model = DeepKernelProcessRegressor(**{**SPARSE, "n_inducing": 3},
                                       inducing_points=points).fit(X, Y)
    np.testing.assert_array_equal(points, given)
    # the points are kept on the scale of X (standardised inside, back out exactly)
    np.testing.assert_allclose(model.inducing_points_, points, rtol=1e-13, atol=1e-13)
    assert [g.shape for g in model.gram_matrices_] == [(10, 10)] * 3
    assert model.n_iter_ == len(model.objective_history_) - 1 == 3
    assert model.objective_ == model.objective_history_[-1]
    assert model.n_passes_ >= model.n_iter_ and model.solver_ in ("newton", "lbfgs")
    assert not hasattr(model, "X_train_") and not hasattr(model, "y_train_")
    # refits in the other mode leave no stale attribute behind
    model.set_params(inducing_points=None, n_inducing=None).fit(X, Y)
    assert model.X_train_.shape == X.shape and not hasattr(model, "inducing_points_")
    model.set_params(n_inducing=1000).fit(X, Y)
    assert model.inducing_points_.shape == X.shape and not hasattr(model, "X_train_")


def test_random_state_decides_the_inducing_points():
    X_big, y_big = make_friedman1(n_samples=200, n_features=5, random_state=0)
    fit = (lambda seed: DeepKernelProcessRegressor(
        n_inducing=8, max_iter=1, device="cpu", random_state=seed).fit(X_big, y_big))
    first, again, other = fit(0), fit(0), fit(1)
    np.testing.assert_array_equal(first.inducing_points_, again.inducing_points_)
    assert not np.array_equal(first.inducing_points_, other.inducing_points_)
    # k-means++ picks rows of the data
    for point in first.inducing_points_:
        assert np.min(np.abs(X_big - point).max(axis=1)) < 1e-12


# ----------------------------------------------------------------------------- S13
def test_row_permutation_with_fixed_inducing_points():
    points = X[::5]
    model = DeepKernelProcessRegressor(**SPARSE, inducing_points=points).fit(X, Y)
    order = np.random.default_rng(0).permutation(len(X))
    permuted = DeepKernelProcessRegressor(**SPARSE, inducing_points=points)
    permuted.fit(X[order], Y[order])
    # the objective is a sum over rows: at one state the order changes only its rounding
    state = model._state
    config = model._config(model.dof_)
    scaled = [(np.asarray(data, dtype=np.float64) - mean) / scale for data, mean, scale in
              ((X, model.X_mean_, model.X_scale_), (Y[:, None], model.y_mean_, model.y_scale_))]
    values = [float(objective_value(config, state, Rows(
        torch.tensor(scaled[0][rows]), torch.tensor(scaled[1][rows]),
        torch.zeros(len(X), dtype=torch.float64)), batch_size=7).value)
        for rows in (np.arange(len(X)), order)]
    assert values[1] == pytest.approx(values[0], rel=1e-12)
    # along the fit, the solver's steps carry that rounding on (2.4e-10 seen after three
    # sweeps, with BLAS's syrk for the row sums)
    np.testing.assert_allclose(permuted.objective_history_, model.objective_history_,
                               rtol=1e-8)
    mean, std = model.predict(X_TEST, return_std=True)
    mean_p, std_p = permuted.predict(X_TEST, return_std=True)
    np.testing.assert_allclose(mean_p, mean, rtol=1e-8)
    np.testing.assert_allclose(std_p, std, rtol=1e-8)


def test_pickle_round_trip():
    model = DeepKernelProcessRegressor(**SPARSE).fit(X, Y)
    loaded = pickle.loads(pickle.dumps(model))
    np.testing.assert_array_equal(loaded.predict(X_TEST), model.predict(X_TEST))
    np.testing.assert_array_equal(loaded.sample_y(X_TEST, 3), model.sample_y(X_TEST, 3))
    np.testing.assert_array_equal(loaded.inducing_points_, model.inducing_points_)


# ----------------------------------------------------------------------------- S12
def test_chunked_prediction_equals_one_chunk(monkeypatch):
    model = DeepKernelProcessRegressor(**SPARSE).fit(X, np.column_stack([Y, Y**2]))
    X_many = make_friedman1(n_samples=50, n_features=5, random_state=2)[0]
    mean, std = model.predict(X_many, return_std=True)
    monkeypatch.setattr(_sparse_predict, "rows_per_chunk", lambda *args: 7)
    mean_c, std_c = model.predict(X_many, return_std=True)
    np.testing.assert_allclose(mean_c, mean, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(std_c, std, rtol=1e-12)
    _, cov = model.predict(X_many[:9], return_cov=True)
    np.testing.assert_allclose(np.sqrt(np.diagonal(cov, axis1=0, axis2=1)).T, std[:9],
                               rtol=1e-9)


def test_predict_grams_are_against_the_inducing_inputs():
    model = DeepKernelProcessRegressor(**SPARSE).fit(X, Y)
    grams = model.predict_grams(X_TEST)
    assert [cross.shape for cross, _ in grams] == [(9, 12)] * 3
    # layer 1 at the inducing inputs is G_1 = Z Omega Z^T / d
    cross, diag = model.predict_grams(model.inducing_points_)[0]
    np.testing.assert_allclose(cross, model.gram_matrices_[0], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(diag, np.diag(model.gram_matrices_[0]), rtol=1e-10)
    draws = model.sample_y(X_TEST, n_samples=4)
    assert draws.shape == (9, 4) and np.all(np.isfinite(draws))


# ------------------------------------------------------------------- Titsias algebra
def _random_state(n_inducing, d, n_layers, seed, dtype=torch.float64):
    """A sparse state with random PD hidden Grams around their prior means."""
    gen = torch.Generator().manual_seed(seed)
    from skgpx.dkp._model import DKPConfig

    config = DKPConfig(kernel="sqexp", skip=True, input_scale=True, objective="dkp",
                       nu_input=10.0, nu_hidden=(10.0,) * n_layers, mirror_reg=5.0,
                       kleinman_reg=1.0, care_solver="auto", max_care_iter=50,
                       care_tol=1e-10, learn_noise=True, learn_weights=True)
    inducing = torch.randn(n_inducing, d, generator=gen, dtype=dtype)
    omega = torch.eye(d, dtype=dtype) + 0.1 * torch.ones(d, d, dtype=dtype)
    weights = [torch.tensor([0.6, 0.4], dtype=dtype) for _ in range(n_layers)]
    weights.append(torch.tensor([1.3, 0.2], dtype=dtype))
    state = SparseDKPState(inducing=inducing, omega=omega, hidden_grams=[None] * n_layers,
                           weights=weights, jitter=1e-6)
    grams = []
    for gram in prior_mean_grams(config, state):
        root = 0.05 * torch.randn(n_inducing, n_inducing, generator=gen, dtype=dtype)
        grams.append(gram + root @ root.mT)
    state.hidden_grams = grams
    return config, state


@pytest.mark.parametrize("n_layers", [0, 1, 2])
def test_prediction_is_titsias_sgpr_on_the_propagated_kernel(n_layers):
    config, state = _random_state(10, 3, n_layers, seed=n_layers)
    gen = torch.Generator().manual_seed(5)
    inputs = torch.randn(40, 3, generator=gen, dtype=torch.float64)
    targets = torch.randn(40, 2, generator=gen, dtype=torch.float64)
    test = torch.randn(7, 3, generator=gen, dtype=torch.float64)
    rows = Rows(inputs, targets, inputs.new_zeros(40))
    terms = objective_value(config, state, rows, batch_size=13)
    cache = sparse_prediction_cache(config, state, terms.statistics)
    mean, var = propagate(cache, test)
    _, cov = propagate(cache, test, full=True)
    # the dense SGPR formulas on the output layer's latent kernel
    blocks = inducing_blocks(config, state)
    K_fu, _ = propagate_rows(config, blocks, inputs, state.jitter)
    K_tu, k_tt = propagate_rows(config, blocks, test, state.jitter)
    lower = torch.linalg.inv(blocks.whitening)
    K_uu = lower @ lower.mT
    noise = state.weights[-1][1]
    sigma = torch.linalg.inv(K_uu + K_fu.mT @ K_fu / noise)
    expected_mean = K_tu @ sigma @ K_fu.mT @ targets / noise
    expected_var = (k_tt - (K_tu @ torch.linalg.solve(K_uu, K_tu.mT)).diagonal()
                    + (K_tu @ sigma @ K_tu.mT).diagonal() + noise)
    np.testing.assert_allclose(mean.numpy(), expected_mean.numpy(), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(var.numpy(), expected_var.numpy(), rtol=1e-10)
    np.testing.assert_allclose(cov.diagonal().numpy(), expected_var.numpy(), rtol=1e-10)


# ------------------------------------------------------------------ reduction Z = X
@pytest.mark.parametrize("n_layers", [0, 2])
def test_inducing_points_at_the_rows_give_the_exact_predictions(n_layers):
    exact = DeepKernelProcessRegressor(n_layers=n_layers, max_iter=3, device="cpu").fit(X, Y)
    sparse = DeepKernelProcessRegressor(n_layers=n_layers, max_iter=1, device="cpu",
                                        inducing_points=X, inducing_jitter=1e-12).fit(X, Y)
    # the exact fit's parameters, carried into the sparse model with Z = X
    full = exact._state
    state = SparseDKPState(inducing=full.inputs, omega=full.omega,
                           hidden_grams=list(full.hidden_grams), weights=list(full.weights),
                           jitter=full.jitter, inducing_jitter=1e-12)
    config = exact._config(exact._resolve_dof())
    rows = Rows(full.inputs, full.targets, full.inputs.new_zeros(len(X)))
    terms = objective_value(config, state, rows, batch_size=7)
    assert float(terms.value) == pytest.approx(exact.objective_, rel=1e-8)
    sparse._state, sparse._cache = state, sparse_prediction_cache(config, state,
                                                                  terms.statistics)
    mean, std = exact.predict(X_TEST, return_std=True)
    mean_s, std_s = sparse.predict(X_TEST, return_std=True)
    np.testing.assert_allclose(mean_s, mean, rtol=1e-8)
    np.testing.assert_allclose(std_s, std, rtol=1e-8)


# ----------------------------------------------------------------------------- S15
def test_sparse_bytes_formula():
    # 8 [(4L + 8) m^2 + (6L + 4) b m + P (d + T)] torch bytes, plus the float64 rows copy
    L, m, b, P, d, T = 3, 64, 1000, 20000, 8, 1
    expected = 8 * ((4 * L + 8) * m**2 + (6 * L + 4) * b * m + P * (d + T)) + 8 * P * (d + T)
    assert sparse_fit_bytes(P, d, T, L - 1, m, b, torch.float64) == expected
    assert sparse_fit_bytes(P, d, T, L - 1, m, b, torch.float32) == expected - 4 * (
        (4 * L + 8) * m**2 + (6 * L + 4) * b * m + P * (d + T))


def test_memory_guard_refuses_a_sparse_fit(monkeypatch):
    X_big = np.random.default_rng(0).normal(size=(20000, 8))
    y_big = X_big[:, 0]
    monkeypatch.setenv("SKGPX_MEMORY_LIMIT", "4MB")
    _no_torch(monkeypatch)
    monkeypatch.setattr(DeepKernelProcessRegressor, "_fit_device_dtype",
                        lambda self: ("cpu", torch.float64))
    with pytest.raises(InsufficientMemoryError,
                       match=r"64 inducing points.*smaller n_inducing.*smaller batch_size"):
        DeepKernelProcessRegressor(n_inducing=64).fit(X_big, y_big)
    # the exact mode's refusal names the inducing-point mode as a way out
    with pytest.raises(InsufficientMemoryError, match=r"n_inducing"):
        DeepKernelProcessRegressor().fit(X_big[:2000], y_big[:2000])


def test_no_warnings_and_silence_on_a_clean_fit(capfd):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        DeepKernelProcessRegressor(**SPARSE).fit(X, Y).predict(X_TEST)
    captured = capfd.readouterr()
    assert captured.out == "" and captured.err == ""


# ------------------------------------------------------------------------------- GPU
@pytest.mark.gpu
def test_fit_on_cuda_loads_on_cpu(monkeypatch):
    cpu = DeepKernelProcessRegressor(**{**SPARSE, "device": "cpu"}).fit(X, Y)
    gpu = DeepKernelProcessRegressor(**{**SPARSE, "device": "cuda"}).fit(X, Y)
    assert gpu._cache.output_weights.device.type == "cuda"
    np.testing.assert_allclose(gpu.objective_history_, cpu.objective_history_, rtol=1e-8)
    np.testing.assert_allclose(gpu.predict(X_TEST), cpu.predict(X_TEST), rtol=1e-8)
    blob = pickle.dumps(gpu)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.warns(UserWarning):
        loaded = pickle.loads(blob)
    assert loaded.device_ == "cpu"
    np.testing.assert_allclose(loaded.predict(X_TEST), cpu.predict(X_TEST), rtol=1e-8)


def test_unmet_tol_warns_and_met_tol_converges():
    with pytest.warns(ConvergenceWarning, match="did not converge"):
        unmet = DeepKernelProcessRegressor(**{**SPARSE, "max_iter": 1}, tol=1e-14).fit(X, Y)
    assert not unmet.converged_
    met = DeepKernelProcessRegressor(**{**SPARSE, "max_iter": 200}, tol=1e-3).fit(X, Y)
    assert met.converged_ and met.n_iter_ < 200


def test_verbose_progress_on_stderr(capfd):
    DeepKernelProcessRegressor(**SPARSE, verbose=2).fit(X, Y)
    captured = capfd.readouterr()
    assert "objective=" in captured.err  # the bar
    assert "iteration 3: objective" in captured.out + captured.err  # tqdm.write's lines


def test_a_long_fit_warns_with_its_estimate(monkeypatch):
    """Long work is never silent: the first iteration's time, projected over max_iter,
    warns once when it exceeds a minute (the clock is faked: 40 s per iteration)."""
    from skgpx.dkp._sparse import _mode as _sparse_mode

    ticks = iter(np.arange(0.0, 1e6, 40.0))
    monkeypatch.setattr(_sparse_mode.time, "perf_counter", lambda: float(next(ticks)))
    with pytest.warns(UserWarning, match=r"may take about \d+ minutes for max_iter=3") as record:
        DeepKernelProcessRegressor(**SPARSE).fit(X, Y)
    assert sum("may take about" in str(w.message) for w in record) == 1
    monkeypatch.undo()
    with warnings.catch_warnings():  # a real small fit is quick: no warning
        warnings.simplefilter("error", UserWarning)
        DeepKernelProcessRegressor(**SPARSE).fit(X, Y)


def test_warm_start_continues_from_the_previous_state():
    model = DeepKernelProcessRegressor(**SPARSE, warm_start=True).fit(X, Y)
    first, points = model.objective_, model.inducing_points_.copy()
    model.set_params(random_state=1).fit(X, Y)  # another k-means++ draw is not used
    np.testing.assert_array_equal(model.inducing_points_, points)
    assert model.objective_history_[0] == pytest.approx(first, rel=1e-10)
    cold = DeepKernelProcessRegressor(**SPARSE).fit(X, Y)
    assert cold.objective_history_[0] < first


@pytest.mark.parametrize("solver", ["lbfgs", "auto"])
def test_optimize_inducing_moves_the_points_and_raises_the_objective(solver):
    params = dict(SPARSE, n_inducing=6, max_iter=8, solver=solver)
    fixed = DeepKernelProcessRegressor(**params).fit(X, Y)
    moved = DeepKernelProcessRegressor(**params, optimize_inducing=True).fit(X, Y)
    assert np.abs(moved.inducing_points_ - fixed.inducing_points_).max() > 1e-3
    # the same start (k-means++ with the same seed) up to the Eye nugget, which moving
    # inducing inputs no longer share with the rows they were picked from (O(jitter))
    assert moved.objective_history_[0] == pytest.approx(fixed.objective_history_[0], rel=1e-6)
    assert moved.objective_history_[0] != fixed.objective_history_[0]
    assert moved.objective_ > moved.objective_history_[0]


def test_torch_rng_untouched():
    before = torch.get_rng_state()
    model = DeepKernelProcessRegressor(**SPARSE).fit(X, Y)
    model.predict(X_TEST, return_std=True)
    model.sample_y(X_TEST, 2)
    assert torch.equal(torch.get_rng_state(), before)
