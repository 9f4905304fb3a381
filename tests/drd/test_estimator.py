"""API and contract tests of SmoothDRDRegressor: posterior, prediction, sampling,
parameters, reductions and the scikit-learn checks."""

import pickle
import warnings

import numpy as np
import pytest
import torch
from sklearn.datasets import load_diabetes
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import BayesianRidge, RidgeCV

from skgpx import SmoothDRDRegressor
from skgpx.datasets import make_smooth_sparse_regression

from _configs import DRD_FAST

DATA = make_smooth_sparse_regression("bumps", shape=40, n_samples=30, n_test=50, random_state=0)
X, Y, XQ = DATA.X, DATA.y, DATA.X_test[:7]
FAST = DRD_FAST


def _fit(X=X, y=Y, **params):
    return SmoothDRDRegressor(**{**FAST, **params}).fit(X, y)


@pytest.fixture(scope="module")
def fitted():
    return _fit()


@pytest.fixture(scope="module")
def fitted_fourier():
    return _fit(basis="fourier")


# ------------------------------------------------------------------ shapes and determinism
# Determinism, pickling, the untouched global RNGs and inputs, silence at verbose=0 and float32
# predictions are tested for every estimator in tests/test_common.py and tests/test_float32.py.


@pytest.mark.parametrize("name", ["fitted", "fitted_fourier"])
def test_shapes_and_attributes(name, request):
    model = request.getfixturevalue(name)
    p = X.shape[1]
    mean, std = model.predict(XQ, return_std=True)
    assert mean.shape == std.shape == (len(XQ),)
    assert model.sample_y(XQ, n_samples=3).shape == (len(XQ), 3)
    assert model.sample_y(XQ, n_samples=0).shape == (len(XQ), 0)
    for attr in ("coef_", "coef_std_", "u_", "u_std_", "prior_variance_", "support_"):
        assert getattr(model, attr).shape == (p,)
    assert model.sigma_.shape == (p, p)
    assert model.support_.dtype == bool
    assert model.coef_shape_ == (p,) and model.n_features_in_ == p
    assert model.n_iter_ == 8 and len(model.scores_) == 8
    assert np.isclose(model.alpha_, 1 / model.noise_variance_)
    assert np.all(np.isfinite(model.u_std_)) and np.all(model.u_std_ > 0)
    np.testing.assert_array_equal(model.coef_[~model.support_], 0.0)
    np.testing.assert_allclose(model.prior_variance_, np.exp(model.u_), rtol=1e-12)
    assert model.basis_ == ("fourier" if name == "fitted_fourier" else "dense")


def test_predictions_are_row_wise(fitted):
    mean, std = fitted.predict(XQ, return_std=True)
    draws = fitted.sample_y(XQ, n_samples=4, random_state=1)
    order = np.arange(len(XQ))[::-1]
    m2, s2 = fitted.predict(XQ[order], return_std=True)
    np.testing.assert_allclose(m2, mean[order], rtol=1e-12)
    np.testing.assert_allclose(s2, std[order], rtol=1e-12)
    np.testing.assert_allclose(fitted.sample_y(XQ[order], 4, random_state=1), draws[order],
                               rtol=1e-10)
    np.testing.assert_allclose(fitted.sample_y(XQ[:2], 4, random_state=1), draws[:2], rtol=1e-10)


# ------------------------------------------------------------------ posterior (oracle 6)


@pytest.mark.parametrize("name", ["fitted", "fitted_fourier"])
def test_posterior_equals_direct_gaussian_conditioning(name, request):
    """coef_, sigma_, coef_std_ and predict's std against dense conditioning on the fitted prior
    ``C = diag(sqrt(g)) K_f diag(sqrt(g))`` (trimmed), on centred data, in original units."""
    model = request.getfixturevalue(name)
    G = model._posterior.G
    p = X.shape[1]
    Kf = G.gram(torch.arange(p)).numpy()
    g = model.prior_variance_ * model.support_
    C = np.sqrt(g)[:, None] * Kf * np.sqrt(g)[None, :]
    Xc, yc = X - X.mean(0), Y - Y.mean()
    S = Xc @ C @ Xc.T + model.noise_variance_ * np.eye(len(Y))
    coef = C @ Xc.T @ np.linalg.solve(S, yc)
    Sigma = C - C @ Xc.T @ np.linalg.solve(S, Xc @ C)
    np.testing.assert_allclose(model.coef_, coef, rtol=1e-8, atol=1e-10 * np.abs(coef).max())
    np.testing.assert_allclose(model.sigma_, Sigma, rtol=1e-7, atol=1e-10 * np.abs(Sigma).max())
    np.testing.assert_allclose(model.coef_std_, np.sqrt(np.clip(np.diag(Sigma), 0, None)),
                               rtol=1e-6, atol=1e-8 * np.sqrt(np.diag(Sigma)).max())
    np.testing.assert_allclose(model.intercept_, Y.mean() - X.mean(0) @ model.coef_, rtol=1e-10)
    mean, std = model.predict(XQ, return_std=True)
    Q = XQ - X.mean(0)
    np.testing.assert_allclose(mean, XQ @ model.coef_ + model.intercept_, rtol=1e-12)
    expected = np.sqrt(np.einsum("ij,jk,ik->i", Q, Sigma, Q) + model.noise_variance_)
    np.testing.assert_allclose(std, expected, rtol=1e-7)


def test_sample_y_statistics(fitted):
    """4000 plug-in draws: mean within 4 sd / sqrt(4000) of predict, sd within 5 % of the
    latent sd ``sqrt(z Sigma_a z^T)`` (predict's std without the noise)."""
    S = 4000
    draws = fitted.sample_y(XQ, n_samples=S, random_state=0)
    mean, std = fitted.predict(XQ, return_std=True)
    latent = np.sqrt(std**2 - fitted.noise_variance_)
    assert np.all(np.abs(draws.mean(1) - mean) <= 4 * latent / np.sqrt(S))
    np.testing.assert_allclose(draws.std(1, ddof=1), latent, rtol=0.05)


def test_sample_y_with_u_uncertainty_is_centred_near_the_plug_in_mean(fitted):
    draws = fitted.sample_y(XQ, n_samples=200, random_state=0, u_uncertainty=True)
    plug = fitted.sample_y(XQ, n_samples=200, random_state=0)
    assert draws.shape == (len(XQ), 200)
    assert not np.allclose(draws, plug)
    mean, std = fitted.predict(XQ, return_std=True)
    # draws of u around its mode move f only through the prior variances: their mean stays
    # within a few predictive standard deviations of the plug-in mean
    assert np.all(np.abs(draws.mean(1) - mean) < 3 * std)


# ------------------------------------------------------------------ reductions (oracle 7)


def test_bayesian_ridge_reduction_on_diabetes():
    X_d, y_d = load_diabetes(return_X_y=True)
    ours = SmoothDRDRegressor(sparsity=False, smoothness=False, tol=1e-10, max_iter=1000,
                              device="cpu").fit(X_d, y_d)
    ref = BayesianRidge(tol=1e-10, max_iter=10000, alpha_1=1e-12, alpha_2=1e-12,
                        lambda_1=1e-12, lambda_2=1e-12).fit(X_d, y_d)
    scale = np.abs(ref.coef_).max()
    assert np.abs(ours.coef_ - ref.coef_).max() <= 1e-4 * scale
    np.testing.assert_allclose(ours.alpha_, ref.alpha_, rtol=1e-3)
    np.testing.assert_allclose(ours.intercept_, ref.intercept_, rtol=1e-6)
    default = SmoothDRDRegressor(sparsity=False, smoothness=False, device="cpu").fit(X_d, y_d)
    np.testing.assert_allclose(default.coef_, ref.coef_, rtol=1e-2, atol=1e-2 * scale)
    np.testing.assert_allclose(default.alpha_, ref.alpha_, rtol=1e-2)
    assert np.all(default.support_) and np.all(default.u_std_ == 0)


def test_dense_and_fourier_bases_agree_on_a_1d_problem():
    d = make_smooth_sparse_regression("bumps", shape=64, n_samples=50, random_state=1)
    dense = SmoothDRDRegressor(basis="dense", device="cpu").fit(d.X, d.y)
    fourier = SmoothDRDRegressor(basis="fourier", device="cpu").fit(d.X, d.y)
    gap = np.linalg.norm(dense.coef_ - fourier.coef_) / np.linalg.norm(dense.coef_)
    assert gap < 0.05


# ------------------------------------------------------------------ options and edge cases


def test_two_dimensional_grid_fits():
    d = make_smooth_sparse_regression("bumps2d", n_samples=60, random_state=0)
    model = SmoothDRDRegressor(coef_shape=(16, 16), max_iter=3, tol=None, device="cpu")
    model.fit(d.X, d.y)
    assert model.coef_shape_ == (16, 16) and model.coef_.shape == (256,)
    assert model.score(d.X_test, d.y_test) > 0.5


@pytest.mark.parametrize("params", [dict(link="softplus"), dict(evidence="joint"),
                                    dict(laplace_hessian="exact"), dict(smoothness=False),
                                    dict(sparsity=False), dict(fit_intercept=False)])
def test_options_fit_and_predict_better_than_ridge(params):
    """Every variant beats cross-validated ridge (test R^2 0.50 here) on the bump data."""
    model = _fit(**{"max_iter": 6, **params})
    ridge = RidgeCV(alphas=np.logspace(-3, 4, 15)).fit(X, Y)
    assert model.score(DATA.X_test, DATA.y_test) > ridge.score(DATA.X_test, DATA.y_test)
    assert np.all(np.isfinite(model.predict(XQ, return_std=True)[1]))
    if not params.get("fit_intercept", True):
        assert model.intercept_ == 0.0


@pytest.mark.parametrize("basis", ["dense", "fourier"])
def test_evidence_option_changes_the_theta_objective(basis):
    a = _fit(max_iter=3, tol=None, basis=basis)
    b = _fit(max_iter=3, tol=None, basis=basis, evidence="joint")
    # the Fourier basis's first theta-step maximises the joint density under either option
    assert (a.scores_[0] == b.scores_[0]) == (basis == "fourier")
    assert a.scores_[1] != b.scores_[1] and a.scores_[2] != b.scores_[2]


def test_one_feature_and_constant_targets():
    rng = np.random.default_rng(0)
    X1 = rng.standard_normal((12, 1))
    model = SmoothDRDRegressor(device="cpu").fit(X1, 2.0 * X1[:, 0] + 0.1 * rng.standard_normal(12))
    assert abs(model.coef_[0] - 2.0) < 0.2
    const = SmoothDRDRegressor(device="cpu").fit(X1, np.full(12, 3.0))
    np.testing.assert_allclose(const.predict(X1), 3.0, atol=1e-6)


def test_convergence_warning_and_tol_none():
    with pytest.warns(ConvergenceWarning, match="max_iter=1"):
        SmoothDRDRegressor(max_iter=1, device="cpu").fit(X, Y)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        SmoothDRDRegressor(max_iter=1, tol=None, device="cpu").fit(X, Y)


@pytest.mark.parametrize("shape, match", [((5, 7), "35 positions but X has 40"),
                                          ((0, 40), "positive integers"),
                                          ((40.0,), "positive integers")])
def test_bad_coef_shape(shape, match):
    with pytest.raises(ValueError, match=match):
        SmoothDRDRegressor(coef_shape=shape).fit(X, Y)


def test_bad_inputs_raise_before_torch_work():
    with pytest.raises(ValueError, match="NaN"):
        SmoothDRDRegressor().fit(np.where(np.eye(30, 40) > 0, np.nan, X), Y)
    with pytest.raises(ValueError, match="1 sample"):
        SmoothDRDRegressor().fit(X[:1], Y[:1])
    with pytest.raises(ValueError, match="features"):
        _fit(max_iter=1).predict(X[:, :5])
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA is not available"):
            SmoothDRDRegressor(device="cuda").fit(X, Y)


def test_verbose_two_reports_each_iteration(capfd):
    _fit(max_iter=2, verbose=2)
    out, err = capfd.readouterr()
    assert "SmoothDRDRegressor" in err  # the bar, on stderr
    assert "iteration 2: evidence" in out + err


def test_float32_coefficients_are_close_to_float64(fitted):
    """float32 moves each coefficient by well under its posterior sd (a quarter of it); its
    predictions and draws: tests/test_float32.py."""
    model = _fit(dtype="float32")
    assert np.all(np.abs(model.coef_ - fitted.coef_) <= 0.25 * fitted.coef_std_)


@pytest.mark.gpu
def test_cuda_fit_equals_cpu_fit(fitted):
    model = _fit(device="cuda")
    np.testing.assert_allclose(model.coef_, fitted.coef_, rtol=1e-6, atol=1e-9)
    clone = pickle.loads(pickle.dumps(model))
    assert clone.device_ == "cuda"
    np.testing.assert_array_equal(clone.predict(XQ), model.predict(XQ))
