"""A length-scale list of one entry is an isotropic kernel, as scikit-learn reads it.

scikit-learn's ``RBF([1.0])`` (and ``Matern([1.0])``) has ``anisotropic`` False: one
length scale for every feature, on data of any dimension (its GPC iris example fits
``1.0 * RBF([1.0])`` on two features).  Both estimators must fit it as scikit-learn does
(fitted theta, log marginal likelihood, predictions) and, in every mode, exactly as the
scalar ``RBF(1.0)``: the two kernels are the same function with the same ``theta``.
"""

import warnings

import numpy as np
import pytest
from sklearn.datasets import load_iris
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process import GaussianProcessClassifier, GaussianProcessRegressor
from sklearn.gaussian_process.kernels import RBF, ConstantKernel, Matern, WhiteKernel

from skgpx import PathwiseGPClassifier, PathwiseGPSampler


def _data():
    rng = np.random.RandomState(0)
    X = rng.uniform(-2.0, 2.0, (24, 2))
    y = np.sin(X[:, 0]) + 0.5 * X[:, 1] + 0.1 * rng.standard_normal(24)
    return X, y, rng.uniform(-2.5, 2.5, (9, 2))


BASES = {
    "rbf": lambda scale: RBF(scale),
    "matern52": lambda scale: Matern(scale, nu=2.5),
}


@pytest.mark.parametrize("base", BASES.values(), ids=BASES.keys())
def test_regressor_fits_a_one_entry_list_as_sklearn_does(base):
    X, y, Xq = _data()
    kernel = ConstantKernel(1.0) * base([1.0]) + WhiteKernel(0.1)
    theirs = GaussianProcessRegressor(kernel).fit(X, y)
    ours = PathwiseGPSampler(kernel, random_state=0, device="cpu").fit(X, y)
    # the optimum is interior (no bound warnings on either side): it is matched, not a bound
    np.testing.assert_allclose(ours.kernel_.theta, theirs.kernel_.theta, atol=1e-5)
    np.testing.assert_allclose(ours.log_marginal_likelihood_value_,
                               theirs.log_marginal_likelihood_value_, rtol=1e-9)
    theta = theirs.kernel_.theta + 0.1
    value, grad = ours.log_marginal_likelihood(theta, eval_gradient=True)
    value_sk, grad_sk = theirs.log_marginal_likelihood(theta, eval_gradient=True)
    np.testing.assert_allclose(value, value_sk, rtol=1e-10)
    np.testing.assert_allclose(grad, grad_sk, rtol=1e-8, atol=1e-10)
    replay = GaussianProcessRegressor(ours.kernel_, optimizer=None).fit(X, y)
    mean, std = ours.predict(Xq, return_std=True)
    mean_sk, std_sk = replay.predict(Xq, return_std=True)
    np.testing.assert_allclose(mean, mean_sk, atol=1e-8)
    np.testing.assert_allclose(std, std_sk, atol=1e-8)
    # the prior of an unfitted model too
    np.testing.assert_allclose(PathwiseGPSampler(kernel).predict(Xq, return_cov=True)[1],
                               GaussianProcessRegressor(kernel).predict(Xq, return_cov=True)[1],
                               atol=1e-12)


SAMPLER_MODES = {
    "exact": dict(),
    "exact-prior": dict(prior="exact"),
    "weight-space": dict(method="weight_space"),
    "qmc": dict(frequency_sampling="qmc"),
    "sparse": dict(n_inducing=8),
    "cg": dict(solver="cg", optimizer=None),
    "student-t": dict(likelihood="student_t", n_inducing=8, max_iter=3, tol=None),
    "heteroscedastic": dict(likelihood="heteroscedastic", n_inducing=8, max_iter=3,
                            tol=None),
}


@pytest.mark.parametrize("options", SAMPLER_MODES.values(), ids=SAMPLER_MODES.keys())
def test_every_sampler_mode_fits_a_one_entry_list_as_the_scalar(options):
    X, y, Xq = _data()
    runs = []
    for scale in ([1.0], 1.0):
        kernel = ConstantKernel(1.0) * RBF(scale) + WhiteKernel(0.1)
        est = PathwiseGPSampler(kernel, random_state=0, device="cpu", **options)
        prior_draws = est.sample_y(Xq, 3, random_state=1)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            est.fit(X, y)
        out = [prior_draws, est.kernel_.theta, *est.predict(Xq, return_std=True),
               est.sample_y(Xq, 3, random_state=2)]
        if options.get("likelihood") is None:
            out.append(est.sample_functions(3, random_state=3)(Xq))
        runs.append(out)
    for listed, scalar in zip(*runs):
        np.testing.assert_allclose(listed, scalar, rtol=1e-12, atol=1e-12)


def _two_feature_iris():
    X, y = load_iris(return_X_y=True)
    return X[::3, :2], y[::3]  # the example's two features, a third of the rows


@pytest.mark.parametrize("labels", ["binary", "multi"])
def test_classifier_fits_a_one_entry_list_as_sklearn_does(labels):
    X, y = _two_feature_iris()
    if labels == "binary":
        y = (y == 0).astype(int)
    kernel = 1.0 * RBF([1.0])
    theirs = GaussianProcessClassifier(kernel).fit(X, y)
    ours = PathwiseGPClassifier(kernel, device="cpu").fit(X, y)
    np.testing.assert_allclose(ours.kernel_.theta, theirs.kernel_.theta, atol=1e-6)
    assert abs(ours.log_marginal_likelihood_value_
               - theirs.log_marginal_likelihood_value_) <= 1e-6
    np.testing.assert_allclose(ours.predict_proba(X), theirs.predict_proba(X), atol=1e-6)
    np.testing.assert_array_equal(ours.predict(X), theirs.predict(X))


def test_sparse_classifier_fits_a_one_entry_list_as_the_scalar():
    X, y = _two_feature_iris()
    runs = []
    for scale in ([1.0], 1.0):
        est = PathwiseGPClassifier(1.0 * RBF(scale), n_inducing=8, max_iter=3,
                                   random_state=0, device="cpu")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            est.fit(X, y)
        runs.append([est.kernel_.theta, est.predict_proba(X), est.sample_y(X[:5], 2)])
    for listed, scalar in zip(*runs):
        np.testing.assert_allclose(listed, scalar, rtol=1e-12, atol=1e-12)
