"""Exact mode without the n x n matrix: the CG solver against the Cholesky solver."""

import warnings

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process.kernels import RBF, ConstantKernel, Matern, WhiteKernel

from skgpx import PathwiseGPSampler

RNG = np.random.default_rng(3)
X = RNG.uniform(0, 4, (120, 2))
Y = np.column_stack([np.sin(2 * X[:, 0]), np.cos(X[:, 1])]) + 0.1 * RNG.standard_normal((120, 2))
XQ = RNG.uniform(-1, 5, (25, 2))
KERNEL = ConstantKernel(1.5, "fixed") * Matern([0.7, 1.3], "fixed", nu=2.5) + WhiteKernel(
    0.05, "fixed")


def _pair(**cg_options):
    common = dict(optimizer=None, device="cpu", normalize_y=True)
    chol = PathwiseGPSampler(KERNEL, solver="cholesky", **common).fit(X, Y)
    cg = PathwiseGPSampler(KERNEL, solver="cg", cg_tol=1e-10, **common, **cg_options).fit(X, Y)
    return chol, cg


@pytest.mark.parametrize("rank", [0, 30])
def test_cg_predictions_and_draws_equal_cholesky(rank):
    chol, cg = _pair(cg_preconditioner_rank=rank)
    # relative residual 1e-10 on a matrix with condition number ~1e3: errors ~1e-7 at most
    np.testing.assert_allclose(cg.alpha_, chol.alpha_, rtol=0, atol=1e-6)
    for a, b in zip(cg.predict(XQ, return_std=True), chol.predict(XQ, return_std=True)):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-7)
    np.testing.assert_allclose(cg.predict(XQ, return_cov=True)[1],
                               chol.predict(XQ, return_cov=True)[1], rtol=0, atol=1e-7)
    # the same random numbers enter both (draw order is solver-independent)
    np.testing.assert_allclose(cg.sample_y(XQ, 5, random_state=1),
                               chol.sample_y(XQ, 5, random_state=1), rtol=0, atol=1e-6)
    np.testing.assert_allclose(cg.sample_functions(3, random_state=2)(XQ),
                               chol.sample_functions(3, random_state=2)(XQ), rtol=0, atol=1e-6)
    assert np.isnan(cg.log_marginal_likelihood_value_)
    assert not hasattr(cg, "L_") and cg.cg_n_iter_ >= 1
    with pytest.raises(NotImplementedError, match="n_inducing"):
        cg.log_marginal_likelihood(cg.kernel_.theta)


def test_pivoted_cholesky_preconditioner_cuts_iterations():
    kernel = ConstantKernel(1.0, "fixed") * RBF(1.0, "fixed") + WhiteKernel(1e-3, "fixed")
    x = np.linspace(0, 10, 400)[:, None]
    y = np.sin(x[:, 0])
    its = [PathwiseGPSampler(kernel, optimizer=None, solver="cg", cg_tol=1e-8, device="cpu",
                             cg_preconditioner_rank=r).fit(x, y).cg_n_iter_ for r in (0, 40)]
    assert its[1] < its[0] / 3, its


def test_cg_warns_when_the_tolerance_is_not_met():
    with pytest.warns(ConvergenceWarning, match="cg_max_iter=2"):
        PathwiseGPSampler(KERNEL, optimizer=None, solver="cg", cg_max_iter=2, cg_tol=1e-12,
                          device="cpu").fit(X, Y)


def test_auto_switches_to_cg_and_refuses_exact_fitting_above_cholesky_max_n():
    auto = PathwiseGPSampler(KERNEL, optimizer=None, cholesky_max_n=50, device="cpu").fit(X, Y)
    assert hasattr(auto, "cg_n_iter_") and not hasattr(auto, "L_")
    free = ConstantKernel() * RBF() + WhiteKernel()
    with pytest.raises(ValueError, match="n_inducing"):
        PathwiseGPSampler(free, cholesky_max_n=50, device="cpu").fit(X, Y)
    with pytest.raises(ValueError, match="n_inducing"):
        PathwiseGPSampler(free, solver="cg", device="cpu").fit(X, Y)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        PathwiseGPSampler(free, solver="cholesky", cholesky_max_n=50, device="cpu").fit(X, Y)


@pytest.mark.parametrize("options, match", [
    (dict(n_inducing=5, inducing_points=X[:5]), "at most one"),
    (dict(minibatch_size=10), "minibatch_size"),
    (dict(n_inducing=5, minibatch_size=10), "minibatch_size"),
    (dict(n_inducing=5, method="weight_space"), "weight_space"),
    (dict(inducing_points=X[:5, :1]), "inducing_points"),
])
def test_sparse_option_errors(options, match):
    with pytest.raises(ValueError, match=match):
        PathwiseGPSampler(KERNEL, device="cpu", **options).fit(X, Y)


def test_sparse_mode_needs_noise():
    with pytest.raises(ValueError, match="WhiteKernel"):
        PathwiseGPSampler(RBF(), n_inducing=5, device="cpu").fit(X, Y)


@pytest.mark.parametrize("options", [dict(solver="cg", cg_preconditioner_rank=10),
                                     dict(n_inducing=12, random_state=0)])
def test_pickle_round_trip_keeps_cg_and_sparse_predictions(options):
    import pickle

    gp = PathwiseGPSampler(KERNEL, optimizer=None, device="cpu", **options).fit(X, Y)
    clone = pickle.loads(pickle.dumps(gp))
    np.testing.assert_array_equal(clone.predict(XQ, return_std=True)[1],
                                  gp.predict(XQ, return_std=True)[1])
    np.testing.assert_array_equal(clone.sample_y(XQ, 4), gp.sample_y(XQ, 4))


@pytest.mark.parametrize("options", [
    dict(n_inducing=10),
    dict(n_inducing=10, optimizer="adam", minibatch_size=40, max_iter=30),
])
def test_sparse_fit_stores_the_fitted_noise_and_signal_kernel(options):
    kernel = ConstantKernel(1.0) * RBF([1.0, 1.0]) + WhiteKernel(1.0)
    gp = PathwiseGPSampler(kernel, random_state=0, device="cpu", alpha=1e-3,
                           **options).fit(X, Y[:, 0])
    white = gp.kernel_.k2.noise_level
    assert abs(white - 1.0) > 1e-3  # the noise level was learnt, so stale values would differ
    np.testing.assert_allclose(gp.noise_variance_, 1e-3 + white, rtol=1e-12)
    assert gp.signal_kernel_.get_params()["k2__length_scale"].tolist() == \
        gp.kernel_.k1.k2.length_scale.tolist()
    assert gp.log_marginal_likelihood(gp.kernel_.theta) == pytest.approx(
        gp.log_marginal_likelihood_value_, rel=1e-10)
