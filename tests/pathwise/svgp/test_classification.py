"""PathwiseGPClassifier's sparse variational mode, through the estimator.

The engine's maths (bound, natural steps, gradients, likelihood quadrature) is tested in
svgp/test_engine.py and likelihoods/test_classification.py; here the estimator's answers
are checked against numpy computed from its own fitted attributes (``inducing_points_``, ``q_mu_``,
``q_sqrt_``, ``kernel_``), scipy quadrature and finite differences.
"""

import numpy as np
import pytest
import scipy.integrate
from scipy.linalg import cholesky, solve_triangular
from scipy.special import expit
from sklearn.gaussian_process.kernels import RBF
from sklearn.gaussian_process.kernels import ConstantKernel as C
from sklearn.gaussian_process.tests._mini_sequence_kernel import MiniSeqKernel

from skgpx import InsufficientMemoryError, PathwiseGPClassifier
from skgpx.pathwise._svgp import _classification as classification

from .._oracles import MEAN_Z_MAX, moment_z_scores

RNG = np.random.default_rng(0)
X = RNG.uniform(-3, 3, size=(120, 2))
Y_BIN = (np.sin(X[:, 0]) + 0.5 * X[:, 1] + 0.3 * RNG.standard_normal(120) > 0).astype(int)
Y_MC = np.digitize(np.sin(X[:, 0]) + 0.3 * X[:, 1], [-0.5, 0.5])
XQ = RNG.uniform(-4, 4, size=(25, 2))
KERNEL = C(1.0, (1e-2, 1e2)) * RBF(1.0, (1e-2, 1e2))


def _whitened_moments(est, Xq):
    """Mean (n*, L) and covariances (L, n*, n*) of q(f) at Xq from the fitted attributes:
    A = L^-1 K_zx, mean = A^T m, cov = K_xx - A^T A + A^T S A (whitened q)."""
    Z, kernel = est.inducing_points_, est.kernel_
    L = cholesky(kernel(Z) + est.jitter_ * np.eye(len(Z)), lower=True)
    A = solve_triangular(L, kernel(Z, Xq), lower=True)
    mean = A.T @ est.q_mu_
    covs = [kernel(Xq) - A.T @ A + (A.T @ R) @ (A.T @ R).T for R in est.q_sqrt_]
    return mean, np.stack(covs)


@pytest.fixture(scope="module")
def binary():
    return PathwiseGPClassifier(KERNEL, n_inducing=15, n_features=2048, random_state=0,
                                device="cpu").fit(X, Y_BIN)


def test_latent_moments_and_probabilities_follow_the_fitted_q(binary):
    mean, covs = _whitened_moments(binary, XQ)
    m, v = binary.latent_mean_and_variance(XQ)
    np.testing.assert_allclose(m, mean[:, 0], rtol=0, atol=1e-8)
    np.testing.assert_allclose(v, np.diag(covs[0]), rtol=0, atol=1e-8)

    def averaged(mu, var):  # E[sigmoid(f)], f ~ N(mu, var), by adaptive quadrature
        density = lambda f: expit(f) * np.exp(-0.5 * (f - mu) ** 2 / var)  # noqa: E731
        s = np.sqrt(var)
        return scipy.integrate.quad(density, mu - 12 * s, mu + 12 * s,
                                    epsabs=1e-13)[0] / np.sqrt(2 * np.pi * var)

    expected = np.array([averaged(a, b) for a, b in zip(m, v)])
    # Bernoulli.predict: 40-point Gauss-Hermite or the error-function mixture, < 1e-4 off
    np.testing.assert_allclose(binary.predict_proba(XQ)[:, 1], expected, rtol=0, atol=1e-4)


def test_bound_at_theta_is_the_fitted_value_and_its_gradient_is_exact(binary):
    value = binary.log_marginal_likelihood(binary.kernel_.theta)
    assert abs(value - binary.log_marginal_likelihood_value_) <= 1e-9 * abs(value)
    # away from the optimum (the fitted q held): the gradient is the derivative of the
    # value up to the Gauss-Hermite rule's error where the marginal variance is below
    # WIDE_VARIANCE (under 1e-6 per row, 120 rows); wider marginals are summed exactly
    theta = binary.kernel_.theta + np.array([0.7, -0.4])
    _, grad = binary.log_marginal_likelihood(theta, eval_gradient=True)
    h = 1e-5
    fd = [(binary.log_marginal_likelihood(theta + h * e)
           - binary.log_marginal_likelihood(theta - h * e)) / (2 * h)
          for e in np.eye(len(theta))]
    assert np.abs(grad).min() > 0.1
    np.testing.assert_allclose(grad, fd, rtol=1e-6, atol=1e-4)
    # the bound lies below what it bounds and L-BFGS-B moved uphill from the start
    assert binary.log_marginal_likelihood(KERNEL.theta) < value


def test_latent_draws_have_the_moments_of_q(binary):
    S = 4000
    draws = binary.sample_functions(S, random_state=0)(XQ)
    assert draws.shape == (25, S)
    mean, covs = _whitened_moments(binary, XQ)
    mean_z, _, abs_err, cov_se = moment_z_scores(draws, mean[:, 0], covs[0])
    assert mean_z <= MEAN_Z_MAX
    # a shared random-feature basis: covariance bias O(sigma_f^2 / sqrt(F)) (draws/test_moments.py)
    sigma_f2 = float(np.exp(binary.kernel_.theta[0]))
    assert (abs_err - (4.0 * sigma_f2 / np.sqrt(2048) + 5.0 * cov_se)).max() <= 0
    # the same functions at other points, and probability draws are their links
    again = binary.sample_functions(S, random_state=0)(XQ[:5])
    np.testing.assert_allclose(again, draws[:5], rtol=0, atol=1e-10)
    probas = binary.sample_y(XQ[:5], n_samples=S, random_state=0)
    np.testing.assert_allclose(probas[:, 1], expit(draws[:5]), rtol=1e-12)


@pytest.mark.parametrize("multi_class", ["one_vs_rest", "softmax"])
def test_several_classes_share_z_and_the_kernel(multi_class):
    est = PathwiseGPClassifier(KERNEL, n_inducing=12, multi_class=multi_class, max_iter=20,
                               random_state=0, device="cpu").fit(X, Y_MC)
    assert est.q_mu_.shape == (12, 3) and est.q_sqrt_.shape == (3, 12, 12)
    assert est.kernel_.theta.shape == KERNEL.theta.shape  # one kernel for every class
    proba = est.predict_proba(XQ)
    np.testing.assert_allclose(proba.sum(1), 1.0, rtol=0, atol=1e-12)
    assert est.score(X, Y_MC) > 0.85
    mean, _ = _whitened_moments(est, XQ)
    f = est.sample_functions(3, random_state=2)(XQ)  # (n*, C, S)
    draws = est.sample_y(XQ, n_samples=3, random_state=2)
    if multi_class == "softmax":
        expected = np.exp(f) / np.exp(f).sum(1, keepdims=True)
    else:
        expected = expit(f) / expit(f).sum(1, keepdims=True)
        # one-vs-rest: the binary probabilities renormalised, as OneVsRestClassifier
        m, v = est._latent(est._query(XQ))
        assert np.allclose(m.T, mean, atol=1e-8)
    np.testing.assert_allclose(draws, expected, rtol=1e-10)


def test_adam_route_is_seeded_and_learns_z():
    params = dict(n_inducing=10, optimizer="adam", minibatch_size=32, max_iter=8, tol=None,
                  learning_rate=0.05, device="cpu")
    a = PathwiseGPClassifier(KERNEL, random_state=3, **params).fit(X, Y_BIN)
    b = PathwiseGPClassifier(KERNEL, random_state=3, **params).fit(X, Y_BIN)
    np.testing.assert_array_equal(a.predict_proba(XQ), b.predict_proba(XQ))
    assert len(a.objective_history_) == 8 and a.n_iter_ == 8
    start = PathwiseGPClassifier(KERNEL, random_state=3, **{**params, "optimizer": None})
    Z0 = start.fit(X, Y_BIN).inducing_points_
    assert np.abs(a.inducing_points_ - Z0).max() > 1e-3
    frozen = PathwiseGPClassifier(KERNEL, random_state=3, optimize_inducing=False,
                                  **params).fit(X, Y_BIN)
    np.testing.assert_array_equal(frozen.inducing_points_, Z0)


@pytest.mark.parametrize("params, match", [
    (dict(n_inducing=4, multi_class="one_vs_one"), "exact-mode option"),
    (dict(inducing_points=np.zeros((4, 3))), "inducing_points has 3 features"),
    (dict(n_inducing=4, kernel=MiniSeqKernel(baseline_similarity_bounds="fixed")),
     "structured inputs"),
])
def test_sparse_mode_refuses_what_it_cannot_do(params, match):
    X_in, y_in = X.copy(), Y_BIN.copy()
    if isinstance(params.get("kernel"), MiniSeqKernel):
        X_in = ["A", "AB", "B", "BB"] * 5
        y_in = np.array([0, 1] * 10)
    with pytest.raises(ValueError, match=match):
        PathwiseGPClassifier(**params).fit(X_in, y_in)


@pytest.mark.parametrize("optimizer", ["adam", "fmin_l_bfgs_b"])
def test_default_kernel_has_no_hyperparameters_but_z_is_learnt(optimizer):
    # kernel=None is scikit-learn's fixed C(1) * RBF(1): nothing in theta to fit, but the
    # inducing inputs still move (the "adam" route once indexed the empty bounds)
    est = PathwiseGPClassifier(n_inducing=6, optimizer=optimizer, max_iter=3, tol=None,
                               random_state=0, device="cpu").fit(X, Y_BIN)
    assert est.kernel_.n_dims == 0 and est.score(X, Y_BIN) > 0.7
    Z0 = PathwiseGPClassifier(n_inducing=6, optimizer=None, random_state=0,
                              device="cpu").fit(X, Y_BIN).inducing_points_
    assert np.abs(est.inducing_points_ - Z0).max() > 1e-4


def test_refit_in_the_other_mode_leaves_no_attribute_of_the_first():
    est = PathwiseGPClassifier(KERNEL, n_inducing=6, max_iter=3, random_state=0,
                               device="cpu").fit(X, Y_MC)
    assert hasattr(est, "inducing_points_") and not hasattr(est, "base_estimator_")
    est.set_params(n_inducing=None).fit(X, Y_MC)
    assert hasattr(est, "base_estimator_")
    assert not any(hasattr(est, a)
                   for a in ("inducing_points_", "q_mu_", "q_sqrt_", "optimizer_"))


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("n_rows, route", [(60, "fmin_l_bfgs_b"), (61, "adam")])
def test_auto_optimizer_is_lbfgs_up_to_its_size_and_minibatches_beyond(monkeypatch, n_rows,
                                                                       route):
    # the documented size, lowered so that both sides of it are a small fit: "auto" must
    # be that route call for call (the same q, Z and kernel to the last bit)
    monkeypatch.setattr(classification, "AUTO_MINIBATCH_ROWS", 60)
    params = dict(n_inducing=6, max_iter=4, tol=None, minibatch_size=16, random_state=0,
                  device="cpu")
    X_n, y_n = X[:n_rows], Y_BIN[:n_rows]
    auto = PathwiseGPClassifier(KERNEL, **params).fit(X_n, y_n)
    named = PathwiseGPClassifier(KERNEL, optimizer=route, **params).fit(X_n, y_n)
    assert auto.get_params()["optimizer"] == "auto"
    assert auto.optimizer_ == named.optimizer_ == route
    for name in ("q_mu_", "q_sqrt_", "inducing_points_"):
        np.testing.assert_array_equal(getattr(auto, name), getattr(named, name))
    np.testing.assert_array_equal(auto.kernel_.theta, named.kernel_.theta)
    assert auto.objective_history_ == named.objective_history_


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_auto_optimizer_keeps_full_passes_on_dask_rows(monkeypatch):
    # mini-batches need the rows in memory: on Dask blocks "auto" stays on L-BFGS-B at
    # any size (here above the lowered threshold), where "adam" is refused
    import dask.array as da  # a test dependency
    monkeypatch.setattr(classification, "AUTO_MINIBATCH_ROWS", 60)
    est = PathwiseGPClassifier(KERNEL, n_inducing=6, max_iter=2, random_state=0,
                               device="cpu")
    est.fit(da.from_array(X, chunks=(60, 2)), da.from_array(Y_BIN, chunks=60))
    assert est.optimizer_ == "fmin_l_bfgs_b"


def test_auto_optimizer_size_is_the_documented_one():
    # the docstring promises L-BFGS-B up to 10 000 rows: the two must not drift apart
    assert classification.AUTO_MINIBATCH_ROWS == 10_000
    assert "up to 10 000 training rows" in " ".join(PathwiseGPClassifier.__doc__.split())
    assert classification.resolve_optimizer("auto", 10_000) == "fmin_l_bfgs_b"
    assert classification.resolve_optimizer("auto", 10_001) == "adam"
    # rows on Dask workers: the full-pass route, whose passes are sums over the blocks
    assert classification.resolve_optimizer("auto", 10 ** 6, in_memory=False) == (
        "fmin_l_bfgs_b")
    assert classification.resolve_optimizer(None, 10 ** 6) is None


def test_memory_guard_refuses_before_any_work_and_names_the_way_out(monkeypatch):
    # O(L m^2) buffers for 3 latents and m = 100 (~2.4 MB) against a 1 MB limit; the rows'
    # O(n m) cross-kernel is never formed, so more rows do not trip the guard by that
    monkeypatch.setenv("SKGPX_MEMORY_LIMIT", "1MB")
    with pytest.raises(InsufficientMemoryError, match="fewer inducing points"):
        PathwiseGPClassifier(n_inducing=100, device="cpu").fit(X, Y_MC)
    PathwiseGPClassifier(n_inducing=8, max_iter=2, device="cpu").fit(X, Y_MC)
