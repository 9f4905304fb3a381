"""The one place that picks a mode from an estimator's parameters, and the prior mode.

``PathwiseGPSampler``: a likelihood other than ``"gaussian"`` is fitted on the SVGP engine
(:class:`~skgpx.pathwise._svgp._regression.SVGPRegressionMode`); otherwise inducing inputs
(``n_inducing`` or ``inducing_points``) ask for collapsed sparse regression
(:class:`~skgpx.pathwise._sgpr._mode.SGPRMode`), and without them the GP is exact
(:class:`~skgpx.pathwise._exact._mode.ExactMode`).  ``PathwiseGPClassifier``: inducing
inputs ask for sparse variational classification
(:class:`~skgpx.pathwise._svgp._classification.SVGPClassificationMode`), and without them
each binary problem has Laplace's approximation
(:class:`~skgpx.pathwise._laplace._mode.LaplaceMode`).  Before ``fit``, a regressor answers
with :class:`PriorMode`.
"""

from dataclasses import dataclass

import torch
from sklearn.exceptions import NotFittedError
from sklearn.gaussian_process.kernels import ConstantKernel

from ..kernels import TorchKernel, split_white_noise
from ._exact._mode import ExactMode, check_structured_options
from ._interface import RegressionMode
from ._laplace._mode import LaplaceMode
from ._sgpr._mode import SGPRMode
from ._svgp._classification import SVGPClassificationMode, is_sparse
from ._svgp._regression import SVGPRegressionMode


def plan_regression(context, kernel, n, d, n_targets):
    """The unfitted mode of a ``PathwiseGPSampler`` fit on ``n`` rows of ``d`` features;
    refuses, before any work, what cannot run."""
    params = context.params
    variational = params.likelihood != "gaussian"
    sparse = params.inducing_points is not None or params.n_inducing is not None
    if variational and params.minibatch_size is not None and params.optimizer != "adam":
        raise ValueError(f"minibatch_size={params.minibatch_size} needs optimizer='adam'; "
                         "set minibatch_size=None otherwise.")
    if variational:
        if params.inducing_points is not None and params.n_inducing is not None:
            raise ValueError("Set at most one of inducing_points and n_inducing; got both.")
        return SVGPRegressionMode.plan(context, kernel, n, d, n_targets)
    if context.structured:
        check_structured_options(params, sparse)
    if params.inducing_points is not None and params.n_inducing is not None:
        raise ValueError("Set at most one of inducing_points and n_inducing; got both.")
    if params.minibatch_size is not None and not (sparse and params.optimizer == "adam"):
        raise ValueError(
            f"minibatch_size={params.minibatch_size} needs sparse mode (n_inducing or "
            "inducing_points) and optimizer='adam'; set minibatch_size=None otherwise."
        )
    return (SGPRMode if sparse else ExactMode).plan(context, kernel, n, d, n_targets)


def plan_classification(context, kernel, n, d, n_classes):
    """The unfitted mode of a ``PathwiseGPClassifier`` fit on ``n`` rows of ``d``
    features with ``n_classes`` classes."""
    mode = SVGPClassificationMode if is_sparse(context.params) else LaplaceMode
    return mode.plan(context, kernel, n, d, n_classes)


@dataclass
class PriorMode(RegressionMode):
    """The prior of an unfitted estimator: zero mean, the kernel's covariance."""

    n_targets: int = 1

    @classmethod
    def of(cls, kernel, n_features_in, n_targets, device, dtype):
        """The prior of the scikit-learn ``kernel`` for ``n_features_in`` input features,
        and the face of its posterior (the latent function: zero mean, unit scale)."""
        torch_kernel = TorchKernel(kernel)
        torch_kernel.check_n_features(n_features_in)
        signal, _ = split_white_noise(kernel)
        face = dict(signal_kernel=ConstantKernel(0.0, "fixed") if signal is None else signal,
                    y_mean=torch.zeros(n_targets, dtype=dtype, device=device),
                    y_std=torch.ones(n_targets, dtype=dtype, device=device),
                    n_targets=n_targets, squeeze=n_targets == 1,
                    n_features_in=n_features_in)
        return cls(kernel=torch_kernel, theta=torch_kernel.theta_tensor(device, dtype),
                   n_targets=n_targets), face

    @classmethod
    def plan(cls, context, kernel, n, d, n_targets=1):
        """The prior of ``kernel`` for ``d`` features (no rows are needed)."""
        return cls.of(kernel, d, n_targets, context.device, context.dtype)[0]

    def fit(self, context, kernel, data):
        """The prior has nothing to fit: a fitted estimator answers with the mode that
        :func:`plan_regression` picks."""
        raise TypeError("PriorMode is the prior of an unfitted estimator and is not fitted; "
                        "fit the estimator instead.")

    def attributes(self):
        """None: an unfitted estimator has no fitted attributes."""
        return {}

    def log_marginal_likelihood(self, context, theta, eval_gradient=False, clone_kernel=True):
        """Undefined without training data."""
        raise NotFittedError("The log marginal likelihood needs training data; call fit "
                             "first.")

    def predict(self, Xq, *, noise=None, batch_size, want_var=False, want_cov=False,
                observed=True):
        mean = Xq.new_zeros(Xq.shape[0], self.n_targets)
        return (mean, self.prior_variance(Xq, noise) if want_var else None,
                self.prior_covariance(Xq, noise) if want_cov else None)


__all__ = ["PriorMode", "plan_classification", "plan_regression"]
