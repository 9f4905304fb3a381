"""The one place that picks a mode from the parameters (``skgpx.pathwise._modes``), and
the prior mode of an unfitted regressor."""

import inspect

import numpy as np
import pytest
import torch
from sklearn.exceptions import NotFittedError
from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel

from skgpx import PathwiseGPClassifier, PathwiseGPSampler
from skgpx.pathwise._exact._mode import ExactMode
from skgpx.pathwise._interface import RegressionMode, Training
from skgpx.pathwise._laplace._mode import LaplaceMode
from skgpx.pathwise._modes import PriorMode, plan_classification, plan_regression
from skgpx.pathwise._sgpr._mode import SGPRMode
from skgpx.pathwise._svgp._classification import SVGPClassificationMode
from skgpx.pathwise._svgp._regression import SVGPRegressionMode

KERNEL = ConstantKernel(1.0) * RBF(0.5) + WhiteKernel(0.1)


@pytest.mark.parametrize("params, mode_class", [
    ({}, ExactMode),
    ({"solver": "cg", "optimizer": None}, ExactMode),
    ({"n_inducing": 8}, SGPRMode),
    ({"inducing_points": np.zeros((3, 1))}, SGPRMode),
    ({"likelihood": "student_t"}, SVGPRegressionMode),
    ({"likelihood": "heteroscedastic", "n_inducing": 8}, SVGPRegressionMode),
])
def test_regression_parameters_pick_the_mode(params, mode_class):
    est = PathwiseGPSampler(KERNEL, device="cpu", **params)
    mode = plan_regression(est._context("cpu", torch.float64), KERNEL, 40, 1, 1)
    assert type(mode) is mode_class


@pytest.mark.parametrize("params, mode_class", [
    ({}, LaplaceMode),
    ({"multi_class": "one_vs_one"}, LaplaceMode),
    ({"n_inducing": 8}, SVGPClassificationMode),
    ({"n_inducing": 8, "multi_class": "softmax"}, SVGPClassificationMode),
])
def test_classification_parameters_pick_the_mode(params, mode_class):
    est = PathwiseGPClassifier(KERNEL, device="cpu", **params)
    mode = plan_classification(est._context("cpu", torch.float64), KERNEL, 40, 2, 3)
    assert type(mode) is mode_class


def test_the_prior_mode_answers_but_is_not_fitted():
    est = PathwiseGPSampler(KERNEL, device="cpu")
    assert issubclass(PriorMode, RegressionMode) and not inspect.isabstract(PriorMode)
    context = est._context("cpu", torch.float64)
    prior = PriorMode.plan(context, KERNEL, 0, 1, 2)
    Xq = torch.linspace(0.0, 1.0, 5, dtype=torch.float64)[:, None]
    mean, var, cov = prior.predict(Xq, batch_size=8, want_var=True, want_cov=True)
    assert torch.equal(mean, torch.zeros(5, 2, dtype=torch.float64))
    expected = KERNEL(Xq.numpy())  # the full kernel's covariance, noise included
    np.testing.assert_allclose(cov.numpy(), expected, rtol=1e-14)
    np.testing.assert_allclose(var.numpy(), np.diag(expected), rtol=1e-14)
    assert prior.attributes() == {}
    with pytest.raises(TypeError, match="not fitted"):
        prior.fit(context, KERNEL, Training(Xq.numpy(), np.zeros((5, 1))))
    with pytest.raises(NotFittedError):
        prior.log_marginal_likelihood(context, prior.theta)
