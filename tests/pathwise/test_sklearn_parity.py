"""Agreement with scikit-learn's GaussianProcessRegressor.

Both estimators get the same kernel, alpha and data.  Exact float64 algebra on a
well-conditioned problem: atol 1e-8 for mean/std/cov (agreement to 1e-6 is the requirement,
1e-8 what float64 gives), rtol 1e-8 for the log marginal likelihood.
"""

import numpy as np
import pytest
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.base import clone
from sklearn.gaussian_process.kernels import (
    RBF,
    ConstantKernel,
    GenericKernelMixin,
    Hyperparameter,
    Kernel,
    Matern,
    WhiteKernel,
)

from skgpx import PathwiseGPSampler

from ._oracles import NOISE, exact_posterior, full_kernel, query_points, signal_kernel, sine_data

ATOL = 1e-8


def _targets(shape):
    X, y = sine_data()
    if shape == "1d":
        return X, y
    if shape == "n1":
        return X, y[:, None]
    rng = np.random.RandomState(1)
    x = X[:, 0]
    Y = np.column_stack([y, 3.0 * np.cos(x) + 5.0 + 0.3 * rng.standard_normal(x.size),
                         -2.0 * y + 1.0])
    return X, Y


def _alpha(kind, n):
    if kind == "array":
        return np.random.RandomState(2).uniform(0.05, 0.2, n)
    return kind


# With a WhiteKernel the default alpha=1e-10 is well posed; without one the noisy targets
# need a real noise floor (alpha=1e-10 would interpolate noise, condition number ~1e10,
# where two correct implementations legitimately differ by ~1e-3).
NOISE_CASES = [
    pytest.param(True, 1e-10, id="white-alpha1e-10"),
    pytest.param(True, "array", id="white-alpha-array"),
    pytest.param(False, 0.1, id="nowhite-alpha0.1"),
    pytest.param(False, "array", id="nowhite-alpha-array"),
]


def _kernel(white):
    kernel = ConstantKernel(1.0) * RBF(0.5)
    return kernel + WhiteKernel(NOISE) if white else kernel


def _assert_same_predictions(ours, theirs, Xq):
    """predict mean, std and cov equal sklearn's, with the same shapes (float64)."""
    mean, mean_sk = ours.predict(Xq), theirs.predict(Xq)
    assert mean.shape == mean_sk.shape and mean.dtype == np.float64
    np.testing.assert_allclose(mean, mean_sk, rtol=0, atol=ATOL)
    for option in ("return_std", "return_cov"):
        _, spread = ours.predict(Xq, **{option: True})
        _, spread_sk = theirs.predict(Xq, **{option: True})
        assert spread.shape == spread_sk.shape
        np.testing.assert_allclose(spread, spread_sk, rtol=0, atol=ATOL)


def _assert_same_sample_layout(ours, theirs, Xq):
    for n_samples in (1, 4):
        a = ours.sample_y(Xq, n_samples=n_samples, random_state=0)
        b = theirs.sample_y(Xq, n_samples=n_samples, random_state=0)
        assert a.shape == b.shape, (n_samples, a.shape, b.shape)
        assert a.dtype == b.dtype == np.float64


@pytest.mark.parametrize("normalize_y", [False, True], ids=["raw", "normalize_y"])
@pytest.mark.parametrize("white, alpha", NOISE_CASES)
@pytest.mark.parametrize("y_shape", ["1d", "n1", "n3"])
def test_fixed_kernel_predictions_match_sklearn(y_shape, white, alpha, normalize_y):
    X, y = _targets(y_shape)
    Xq = query_points()
    alpha = _alpha(alpha, X.shape[0])
    params = dict(alpha=alpha, normalize_y=normalize_y, optimizer=None)
    ours = PathwiseGPSampler(_kernel(white), predict_noise="sklearn", device="cpu", **params)
    theirs = GaussianProcessRegressor(_kernel(white), **params)
    if y_shape == "n3":
        ours.set_params(n_targets=3)
        theirs.set_params(n_targets=3)
    _assert_same_sample_layout(ours, theirs, Xq)  # before fit: prior draws
    ours.fit(X, y)
    theirs.fit(X, y)
    _assert_same_sample_layout(ours, theirs, Xq)

    _assert_same_predictions(ours, theirs, Xq)

    np.testing.assert_allclose(ours.log_marginal_likelihood_value_,
                               theirs.log_marginal_likelihood_value_, rtol=1e-8)
    assert ours.jitter_ == 0.0  # factorised as given, like sklearn
    np.testing.assert_allclose(ours.alpha_, theirs.alpha_, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(ours.L_, theirs.L_, rtol=0, atol=1e-12)
    np.testing.assert_allclose(ours.y_train_, theirs.y_train_, rtol=0, atol=1e-14)
    # log_marginal_likelihood(theta) away from the fitted theta, with its gradient
    # (autograd vs sklearn's analytic gradient: both exact, agree to round-off).
    theta = ours.kernel_.theta + np.linspace(-0.3, 0.4, ours.kernel_.theta.size)
    lml, grad = ours.log_marginal_likelihood(theta, eval_gradient=True)
    lml_sk, grad_sk = theirs.log_marginal_likelihood(theta, eval_gradient=True)
    np.testing.assert_allclose(lml, lml_sk, rtol=1e-8)
    np.testing.assert_allclose(ours.log_marginal_likelihood(theta), lml_sk, rtol=1e-8)
    np.testing.assert_allclose(grad, grad_sk, rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("kernel", [
    None,
    ConstantKernel(2.0) * Matern(0.7, nu=1.5) + WhiteKernel(0.2),
], ids=["default", "matern-white"])
@pytest.mark.parametrize("n_targets", [None, 3])
def test_unfitted_predict_is_sklearns_prior(kernel, n_targets):
    Xq = query_points()
    ours = PathwiseGPSampler(kernel, n_targets=n_targets, device="cpu")
    theirs = GaussianProcessRegressor(kernel, n_targets=n_targets)
    _assert_same_predictions(ours, theirs, Xq)
    _assert_same_sample_layout(ours, theirs, Xq)


@pytest.mark.parametrize("normalize_y", [False, True], ids=["raw", "normalize_y"])
@pytest.mark.parametrize("y_shape", ["1d", "n3"])
def test_lbfgs_fit_reaches_sklearns_optimum(y_shape, normalize_y):
    # One L-BFGS-B run from the same initial theta on a well-posed problem.
    X, y = _targets(y_shape)
    Xq = query_points()
    kernel = ConstantKernel(1.0) * RBF(1.0) + WhiteKernel(0.5)
    ours = PathwiseGPSampler(kernel, normalize_y=normalize_y, random_state=0,
                             device="cpu").fit(X, y)
    theirs = GaussianProcessRegressor(kernel, normalize_y=normalize_y,
                                      random_state=0).fit(X, y)
    assert abs(ours.log_marginal_likelihood_value_
               - theirs.log_marginal_likelihood_value_) <= 1e-4
    assert ours.n_iter_ >= 1
    # kernel_ is a real sklearn kernel that reproduces our predictions in sklearn
    replay = GaussianProcessRegressor(ours.kernel_, normalize_y=normalize_y,
                                      optimizer=None).fit(X, y)
    mean, std = ours.predict(Xq, return_std=True)
    mean_sk, std_sk = replay.predict(Xq, return_std=True)
    np.testing.assert_allclose(mean, mean_sk, rtol=0, atol=ATOL)
    np.testing.assert_allclose(std, std_sk, rtol=0, atol=ATOL)
    # the original kernel parameter is untouched
    np.testing.assert_array_equal(ours.kernel.theta, kernel.theta)


def test_lbfgs_with_per_sample_alpha_matches_sklearn():
    X, y = sine_data()
    alpha = _alpha("array", X.shape[0])
    kernel = ConstantKernel(1.0) * Matern(1.0, nu=2.5)
    ours = PathwiseGPSampler(kernel, alpha=alpha, device="cpu").fit(X, y)
    theirs = GaussianProcessRegressor(kernel, alpha=alpha).fit(X, y)
    assert abs(ours.log_marginal_likelihood_value_
               - theirs.log_marginal_likelihood_value_) <= 1e-4
    np.testing.assert_allclose(ours.kernel_.theta, theirs.kernel_.theta, atol=1e-3)


@pytest.mark.parametrize("predict_noise", ["latent", "observed"])
@pytest.mark.parametrize("alpha", [0.05, "array"])
def test_predict_noise_variants_against_dense_algebra(predict_noise, alpha):
    # "latent": no noise at new inputs; "observed": white noise plus a scalar alpha (an
    # alpha array adds nothing at new X).  sklearn has no such option, so the reference
    # is the dense latent posterior plus that noise.
    X, y = sine_data()
    Xq = query_points()
    alpha = _alpha(alpha, X.shape[0])
    est = PathwiseGPSampler(full_kernel("matern32"), alpha=alpha, optimizer=None,
                            predict_noise=predict_noise, device="cpu").fit(X, y)
    mean, cov = exact_posterior(signal_kernel("matern32"), X, y, Xq, NOISE + alpha)
    extra = 0.0
    if predict_noise == "observed":
        extra = NOISE + (alpha if np.ndim(alpha) == 0 else 0.0)
    mean_hat, std = est.predict(Xq, return_std=True)
    _, cov_hat = est.predict(Xq, return_cov=True)
    np.testing.assert_allclose(mean_hat, mean, rtol=0, atol=ATOL)
    np.testing.assert_allclose(std, np.sqrt(np.diag(cov) + extra), rtol=0, atol=ATOL)
    np.testing.assert_allclose(cov_hat, cov + extra * np.eye(40), rtol=0, atol=ATOL)
    np.testing.assert_allclose(est.noise_variance_, NOISE + np.broadcast_to(alpha, 30),
                               rtol=0, atol=1e-15)


# -------------------------------------------------------- calls a scikit-learn user makes
def test_default_kernel_is_fitted_as_sklearn_fits_it():
    # kernel=None: scikit-learn optimises ConstantKernel() * RBF() at fit; the fixed kernel
    # is only the prior of an unfitted model
    X, y = sine_data()
    # alpha = 0.1: an interior optimum (with less noise both runs end at the length-scale
    # bound, which would not tell optimised from fixed hyperparameters as well)
    ours = PathwiseGPSampler(alpha=0.1, device="cpu").fit(X, y)
    theirs = GaussianProcessRegressor(alpha=0.1).fit(X, y)
    assert ours.kernel_.n_dims == 2 and ours.kernel is None
    np.testing.assert_allclose(ours.kernel_.theta, theirs.kernel_.theta, atol=1e-3)
    assert abs(ours.log_marginal_likelihood_value_
               - theirs.log_marginal_likelihood_value_) <= 1e-4
    Xq = query_points()
    np.testing.assert_allclose(PathwiseGPSampler().predict(Xq),
                               GaussianProcessRegressor().predict(Xq), atol=ATOL)


def test_log_marginal_likelihood_returns_numpy_scalars_and_honours_clone_kernel():
    X, y = sine_data()
    kernel = ConstantKernel(1.0) * RBF(1.0) + WhiteKernel(0.5)
    ours = PathwiseGPSampler(kernel, device="cpu").fit(X, y)
    theirs = GaussianProcessRegressor(kernel).fit(X, y)
    theta = ours.kernel_.theta + 0.1
    for model in (ours, theirs):
        assert type(model.log_marginal_likelihood_value_) is np.float64
        assert type(model.log_marginal_likelihood(theta)) is np.float64
        value, grad = model.log_marginal_likelihood(theta, eval_gradient=True)
        assert type(value) is np.float64 and grad.dtype == np.float64
        # NumPy 2 promotion: a Python float would let a float32 operand win
        assert (model.log_marginal_likelihood(theta) - np.float32(1e-3)).dtype == np.float64
    np.testing.assert_allclose(ours.log_marginal_likelihood(theta),
                               theirs.log_marginal_likelihood(theta), rtol=1e-10)
    before = ours.kernel_.theta.copy()
    ours.log_marginal_likelihood(theta)  # clone_kernel=True leaves kernel_ alone
    np.testing.assert_array_equal(ours.kernel_.theta, before)
    for model in (ours, theirs):
        model.log_marginal_likelihood(theta, clone_kernel=False)
        np.testing.assert_allclose(model.kernel_.theta, theta, rtol=1e-15)


SAMPLERS = {
    "rff": dict(prior="rff"),
    "rff-independent-qmc": dict(prior="rff", shared_basis=False, frequency_sampling="qmc"),
    "exact-prior": dict(prior="exact"),
    "weight-space": dict(method="weight_space"),
    "sparse": dict(n_inducing=12),
}


@pytest.mark.parametrize("options", SAMPLERS.values(), ids=SAMPLERS.keys())
@pytest.mark.parametrize("normalize_y", [False, True], ids=["raw", "normalize_y"])
def test_adding_a_target_leaves_the_first_targets_draws_alone(options, normalize_y):
    # scikit-learn draws target by target from one generator; a user adding a target must not
    # see the first target's draws change (fixed kernel: a joint fit would move the optimum)
    X, Y = _targets("n3")
    Xq = query_points()
    kernel = ConstantKernel(1.0) * RBF(0.7) + WhiteKernel(0.1)
    params = dict(kernel=kernel, optimizer=None, normalize_y=normalize_y, random_state=3,
                  device="cpu", **options)
    one = PathwiseGPSampler(**params).fit(X, Y[:, 0])
    three = PathwiseGPSampler(**params).fit(X, Y)
    for predict_noise in ("latent", "observed"):
        one.set_params(predict_noise=predict_noise)
        three.set_params(predict_noise=predict_noise)
        np.testing.assert_allclose(three.sample_y(Xq, 5, random_state=7)[:, 0],
                                   one.sample_y(Xq, 5, random_state=7), rtol=1e-9, atol=1e-12)
    if options.get("prior") != "exact":
        np.testing.assert_allclose(three.sample_functions(4, random_state=2)(Xq)[:, 0],
                                   one.sample_functions(4, random_state=2)(Xq),
                                   rtol=1e-9, atol=1e-12)
    theirs = [GaussianProcessRegressor(kernel, optimizer=None, normalize_y=normalize_y)
              .fit(X, y) for y in (Y[:, 0], Y)]
    np.testing.assert_allclose(theirs[1].sample_y(Xq, 5, random_state=7)[:, 0],
                               theirs[0].sample_y(Xq, 5, random_state=7), rtol=1e-9, atol=1e-12)


# ------------------------------------------------------------------ structured inputs


class SequenceKernel(GenericKernelMixin, Kernel):
    """A kernel on strings (scikit-learn's gallery example on DNA sequences): the sum over
    character pairs of 1 for equal characters and ``baseline_similarity`` otherwise."""

    def __init__(self, baseline_similarity=0.5, baseline_similarity_bounds=(1e-5, 1)):
        self.baseline_similarity = baseline_similarity
        self.baseline_similarity_bounds = baseline_similarity_bounds

    @property
    def hyperparameter_baseline_similarity(self):
        return Hyperparameter("baseline_similarity", "numeric", self.baseline_similarity_bounds)

    def _pair(self, s1, s2):
        equal = sum(c1 == c2 for c1 in s1 for c2 in s2)
        return equal + self.baseline_similarity * (len(s1) * len(s2) - equal), \
            len(s1) * len(s2) - equal

    def __call__(self, X, Y=None, eval_gradient=False):
        pairs = np.array([[self._pair(x, y) for y in (X if Y is None else Y)] for x in X])
        K = pairs[..., 0]
        if eval_gradient:  # d K / d log(baseline_similarity)
            return K, (pairs[..., 1] * self.baseline_similarity)[..., None]
        return K

    def diag(self, X):
        return np.array([self._pair(x, x)[0] for x in X])

    def is_stationary(self):
        return False

    def clone_with_theta(self, theta):
        cloned = clone(self)
        cloned.theta = theta
        return cloned


def _sequences():
    # a draw of 0.1 * SequenceKernel(0.3) plus noise 0.09: the fitted similarity (about
    # 0.66) is an interior optimum for this seed, so matching it tests the optimiser
    rng = np.random.RandomState(3)
    X = ["".join(rng.choice(list("ACGT"), size=5)) for _ in range(24)]
    K = 0.1 * SequenceKernel(0.3)(X)
    y = np.linalg.cholesky(K + 1e-9 * np.eye(24)) @ rng.randn(24) + 0.3 * rng.randn(24)
    Xq = ["".join(rng.choice(list("ACGT"), size=5)) for _ in range(5)]
    return X, y, Xq


def test_structured_inputs_are_fitted_and_predicted_as_sklearn_does():
    # a kernel with requires_vector_input=False gets the lists of strings themselves
    X, y, Xq = _sequences()
    kernel = ConstantKernel(1.0) * SequenceKernel() + WhiteKernel(0.1)
    assert not kernel.requires_vector_input
    theirs = GaussianProcessRegressor(kernel).fit(X, y)
    ours = PathwiseGPSampler(kernel, prior="exact", device="cpu").fit(X, y)
    assert -1.0 < theirs.kernel_.theta[1] < -0.1  # the similarity's optimum is interior
    np.testing.assert_allclose(ours.kernel_.theta, theirs.kernel_.theta, atol=1e-4)
    np.testing.assert_allclose(ours.log_marginal_likelihood_value_,
                               theirs.log_marginal_likelihood_value_, rtol=1e-8)
    theta = theirs.kernel_.theta + 0.2
    value, grad = ours.log_marginal_likelihood(theta, eval_gradient=True)
    value_sk, grad_sk = theirs.log_marginal_likelihood(theta, eval_gradient=True)
    np.testing.assert_allclose(value, value_sk, rtol=1e-10)
    np.testing.assert_allclose(grad, grad_sk, rtol=1e-8)
    # the same fitted kernel on both sides: predictions agree to round-off
    fixed = GaussianProcessRegressor(ours.kernel_, optimizer=None).fit(X, y)
    _assert_same_predictions(ours, fixed, Xq)
    assert not hasattr(ours, "n_features_in_") and not hasattr(fixed, "n_features_in_")
    # the prior of an unfitted model, on objects too
    np.testing.assert_allclose(
        PathwiseGPSampler(kernel).predict(Xq, return_cov=True)[1],
        GaussianProcessRegressor(kernel).predict(Xq, return_cov=True)[1], atol=ATOL)


def test_structured_inputs_draw_exactly_and_refuse_random_features():
    X, y, Xq = _sequences()
    kernel = ConstantKernel(1.0) * SequenceKernel() + WhiteKernel(0.1)
    ours = PathwiseGPSampler(kernel, prior="exact", optimizer=None, predict_noise="latent",
                             device="cpu").fit(X, y)
    mean, cov = ours.predict(Xq, return_cov=True)
    draws = ours.sample_y(Xq, n_samples=4000, random_state=1)
    assert draws.shape == (len(Xq), 4000)
    # Monte-Carlo error of 4000 draws: 5 standard errors of the mean and of the variance
    sd = np.sqrt(np.diag(cov))
    assert np.all(np.abs(draws.mean(1) - mean) < 5 * sd / np.sqrt(4000))
    assert np.all(np.abs(draws.var(1) / sd**2 - 1) < 5 * np.sqrt(2 / 4000))
    # the default prior='rff' has no features to use: it draws exactly at the query rows
    default = PathwiseGPSampler(kernel, optimizer=None, predict_noise="latent",
                                device="cpu").fit(X, y)
    assert default.sample_y_route(Xq) == "exact_at_queries"
    draws = default.sample_y(Xq, n_samples=4000, random_state=2)
    assert np.all(np.abs(draws.mean(1) - mean) < 5 * sd / np.sqrt(4000))
    assert np.all(np.abs(draws.var(1) / sd**2 - 1) < 5 * np.sqrt(2 / 4000))
    with pytest.raises(NotImplementedError, match="prior='exact'"):
        ours.sample_functions(2)
    for options in (dict(n_inducing=4), dict(solver="cg"), dict(method="weight_space")):
        with pytest.raises(ValueError, match="structured inputs"):
            PathwiseGPSampler(kernel, **options).fit(X, y)
