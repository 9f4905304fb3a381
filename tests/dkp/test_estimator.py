"""API and contract tests of DeepKernelProcessRegressor: oracles T11-T13."""

import pickle
import warnings

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning

from skgpx import DeepKernelProcessRegressor
from skgpx.datasets import make_dkp_toy

from _configs import DKP_FAST

X, Y = make_dkp_toy(n_samples=40, random_state=0)
X_TEST = make_dkp_toy(n_samples=9, random_state=1)[0]
FAST = DKP_FAST


def _fit(**params):
    return DeepKernelProcessRegressor(**{**FAST, **params}).fit(X, Y)


# --------------------------------------------------- T11: permutation equivariance
def test_permutation_equivariance():
    model = _fit()
    order = np.random.default_rng(0).permutation(len(X))
    permuted = _fit().fit(X[order], Y[order])
    for G, G_perm in zip(model.gram_matrices_, permuted.gram_matrices_):
        np.testing.assert_allclose(G_perm, G[np.ix_(order, order)], rtol=1e-8, atol=1e-10)
    mean, std = model.predict(X_TEST, return_std=True)
    mean_p, std_p = permuted.predict(X_TEST, return_std=True)
    np.testing.assert_allclose(mean_p, mean, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(std_p, std, rtol=1e-8)


def test_batch_prediction_equals_row_by_row():
    model = _fit()
    mean, std = model.predict(X_TEST, return_std=True)
    rows = [model.predict(X_TEST[i : i + 1], return_std=True) for i in range(len(X_TEST))]
    np.testing.assert_allclose(np.concatenate([r[0] for r in rows]), mean, rtol=1e-9)
    np.testing.assert_allclose(np.concatenate([r[1] for r in rows]), std, rtol=1e-9)


def test_return_cov_matches_return_std():
    model = _fit()
    mean, std = model.predict(X_TEST, return_std=True)
    mean_c, cov = model.predict(X_TEST, return_cov=True)
    np.testing.assert_allclose(mean_c, mean, rtol=1e-12)
    np.testing.assert_allclose(np.sqrt(np.diag(cov)), std, rtol=1e-9)
    assert np.linalg.eigvalsh(cov).min() > 0


def test_multi_output_shapes_and_shared_grams():
    y2 = np.column_stack([Y, -2.0 * Y + 1.0])
    model = _fit().fit(X, y2)
    mean, std = model.predict(X_TEST, return_std=True)
    assert mean.shape == std.shape == (len(X_TEST), 2)
    _, cov = model.predict(X_TEST, return_cov=True)
    assert cov.shape == (len(X_TEST), len(X_TEST), 2)
    draws = model.sample_y(X_TEST, n_samples=4)
    assert draws.shape == (len(X_TEST), 2, 4)
    # the second column is an affine map of the first: standardised targets coincide
    # (the fit differs from the single-output one: the data term has weight nu = 2)
    np.testing.assert_allclose(mean[:, 1], -2.0 * mean[:, 0] + 1.0, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(std[:, 1], 2.0 * std[:, 0], rtol=1e-7)


def test_column_vector_target_is_squeezed():
    model = _fit().fit(X, Y[:, None])
    assert model.predict(X_TEST).shape == (len(X_TEST),)
    assert model.sample_y(X_TEST, 3).shape == (len(X_TEST), 3)


def test_sample_y_moments():
    """Latent draws: mean and covariance of predict(return_cov) minus the noise.
    With S = 4000 draws the sample mean has sd sqrt(var/S); k = 5."""
    model = _fit()
    mean, cov = model.predict(X_TEST[:4], return_cov=True)
    latent = cov - model.noise_variance_ * np.var(Y) * np.eye(4)
    draws = model.sample_y(X_TEST[:4], n_samples=4000, random_state=3)
    sd = np.sqrt(np.diag(latent) / 4000)
    assert np.all(np.abs(draws.mean(axis=1) - mean) < 5 * sd)
    # sample variance: sd of s^2 is about var * sqrt(2/(S-1))
    var_sd = np.diag(latent) * np.sqrt(2 / 3999)
    assert np.all(np.abs(draws.var(axis=1, ddof=1) - np.diag(latent)) < 5 * var_sd)
    np.testing.assert_array_equal(draws, model.sample_y(X_TEST[:4], 4000, random_state=3))
    # no fitted prediction seed: None is the default seed 0, never fresh entropy
    np.testing.assert_array_equal(model.sample_y(X_TEST, 2, random_state=None),
                                  model.sample_y(X_TEST, 2))


# ---------------------------------------- T12: estimator checks, pickling, devices
# Pickling, determinism, the untouched global RNGs and inputs, silence at verbose=0 and
# float32 (at jitter=1e-3) are tested for every estimator in tests/test_common.py and
# tests/test_float32.py.
def test_warm_start_continues_the_sweeps():
    ten = DeepKernelProcessRegressor(max_iter=6, device="cpu").fit(X, Y)
    warm = DeepKernelProcessRegressor(max_iter=3, warm_start=True, device="cpu").fit(X, Y)
    warm.fit(X, Y)
    np.testing.assert_allclose(warm.objective_, ten.objective_, rtol=1e-10)
    np.testing.assert_allclose(warm.predict(X_TEST), ten.predict(X_TEST), rtol=1e-9)


def test_tol_stops_early_and_warns_when_unmet():
    model = _fit(max_iter=200, tol=1e-3)
    assert model.converged_ and model.n_iter_ < 200
    with pytest.warns(ConvergenceWarning, match="did not converge"):
        model = _fit(max_iter=2, tol=1e-14)
    assert not model.converged_ and model.n_iter_ == 2


def test_dgp_ignores_tol_with_warning():
    with pytest.warns(UserWarning, match="tol is ignored"):
        model = _fit(objective="dgp", tol=1e-2, max_iter=4)
    assert model.n_iter_ == 4


@pytest.mark.parametrize("kernel", ["sqexp", "arccos0", "arccos1"])
@pytest.mark.parametrize("objective", ["dkp", "dgp", "gp"])
def test_kernels_and_objectives_fit_and_predict(kernel, objective):
    model = _fit(kernel=kernel, objective=objective)
    mean, std = model.predict(X_TEST, return_std=True)
    assert np.all(np.isfinite(mean)) and np.all(std > 0)
    assert model.objective_history_[-1] > model.objective_history_[0]
    if kernel != "arccos1":  # the deep ReLU kernel is close to linear on this toy
        # the training-R^2 bar of scikit-learn's regressor checks
        assert model.score(X, Y) > 0.5


@pytest.mark.parametrize("n_layers, skip, input_scale", [(0, True, True), (1, False, True),
                                                         (3, True, False)])
def test_architectures(n_layers, skip, input_scale):
    model = _fit(n_layers=n_layers, skip=skip, input_scale=input_scale)
    assert len(model.gram_matrices_) == n_layers + 1
    assert model.kernel_weights_.shape == (n_layers, 2)
    assert (model.input_scale_ is None) == (not input_scale)
    assert model.dof_.shape == (n_layers + input_scale,)
    if not skip and n_layers:
        assert np.all(model.kernel_weights_[:, 1] == 0)
    assert model.score(X, Y) > 0.8


def test_per_layer_dof():
    model = _fit(dof=[100.0, 2.0, 50.0])
    np.testing.assert_array_equal(model.dof_, [100.0, 2.0, 50.0])


def test_verbose_two_reports_each_sweep(capfd):
    _fit(verbose=2)
    out, err = capfd.readouterr()
    assert "sweep 3: objective" in out + err


def test_duplicate_points_without_jitter_escalate_with_warning():
    X_dup = np.vstack([X, X[:5]])
    Y_dup = np.concatenate([Y, Y[:5]])
    with pytest.warns(UserWarning, match="raised the Eye jitter"):
        model = DeepKernelProcessRegressor(jitter=0.0, **FAST).fit(X_dup, Y_dup)
    assert model.jitter_ > 0
    assert np.all(np.isfinite(model.predict(X_TEST)))


# ------------------------------------------------------------------ T13: bad input
@pytest.mark.parametrize(
    "params, match",
    [
        (dict(dof=0.0), "dof"),
        (dict(dof=-1.0), "dof"),
        (dict(dof=[1.0, 2.0]), "dof has 2 values"),
        (dict(dof=[1.0, np.inf, 2.0]), "finite"),
        (dict(kernel="rbf"), "kernel"),
        (dict(objective="map"), "objective"),
        (dict(n_layers=-1), "n_layers"),
        (dict(care_solver="schur"), "care_solver"),
        (dict(device="tpu"), "device"),
    ],
)
def test_bad_parameters(params, match):
    with pytest.raises(ValueError, match=match):
        DeepKernelProcessRegressor(**params).fit(X, Y)


@pytest.mark.parametrize(
    "X_bad, y_bad, match",
    [
        (X[:1], Y[:1], "1 sample"),
        (np.where(np.arange(X.size).reshape(X.shape) == 3, np.nan, X), Y, "NaN"),
        (X, np.where(np.arange(len(Y)) == 2, np.inf, Y), "infinity"),
        (X[:, 0], Y, "2D array"),
        (X, Y[:-1], "inconsistent numbers of samples"),
        (np.full(X.shape, "a"), Y, "convert"),
    ],
)
def test_bad_input(X_bad, y_bad, match):
    with pytest.raises(ValueError, match=match):
        DeepKernelProcessRegressor(**FAST).fit(X_bad, y_bad)


def test_predict_checks_features_and_fit():
    model = DeepKernelProcessRegressor(**FAST)
    with pytest.raises(Exception, match="not fitted"):
        model.predict(X_TEST)
    model.fit(X, Y)
    with pytest.raises(ValueError, match="features"):
        model.predict(X_TEST[:, :2])
    with pytest.raises(ValueError, match="n_samples"):
        model.sample_y(X_TEST, n_samples=0)


def test_no_warnings_on_clean_fit():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _fit(max_iter=10)


@pytest.mark.gpu
def test_cpu_and_cuda_agree():
    cpu = DeepKernelProcessRegressor(max_iter=5, device="cpu").fit(X, Y)
    gpu = DeepKernelProcessRegressor(max_iter=5, device="cuda").fit(X, Y)
    np.testing.assert_allclose(gpu.objective_history_, cpu.objective_history_, rtol=1e-8)
    np.testing.assert_allclose(gpu.predict(X_TEST), cpu.predict(X_TEST), rtol=1e-8, atol=1e-10)
    reloaded = pickle.loads(pickle.dumps(gpu))
    np.testing.assert_allclose(reloaded.predict(X_TEST), cpu.predict(X_TEST), rtol=1e-8, atol=1e-10)
