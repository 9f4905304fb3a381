"""The engine of the pathwise estimators: one *mode object* per way of fitting a GP.

An estimator of the pathwise family validates its input and parameters, builds one mode
object, hands it the training data once, and afterwards only asks it questions; the
mode owns every tensor of the fit.  ``PathwiseGPSampler`` has two modes,
:class:`~skgpx.pathwise._exact._mode.ExactMode` (the exact GP by a Cholesky factor or by
CG, on vectors or on structured inputs) and
:class:`~skgpx.pathwise._sgpr._mode.SGPRMode` (inducing points, on rows held in this
process or by Dask workers), and :class:`PriorMode` answers for an unfitted estimator.

The interface
-------------
A mode object is a dataclass (so that pickling a fitted estimator moves its tensors to
the CPU field by field: :func:`skgpx._base.move_to_device`) with

``plan(est, kernel, n, d, device)`` (classmethod)
    Refuses, before any torch work, what this mode cannot run on ``n`` rows of ``d``
    features (memory, options), and returns the unfitted mode.
``fit(est, kernel, X, Y, noise, rng, history, device, dtype, shift=None)``
    Fits on the training data (in-memory arrays, or Dask collections where the mode
    supports them) with the targets ``Y`` of shape (n, T) as the estimator wants them
    modelled (normalised, say), optimising the hyperparameters of the scikit-learn
    ``kernel`` (a clone the estimator owns) when ``est`` asks for it.  Reads its options
    from ``est``, appends the objective of each evaluation to ``history`` and returns the
    fitted kernel.  Afterwards the fields of :class:`Mode` hold the fitted state.
``predict(Xq, *, noise, batch_size, want_var, want_cov, observed)``
    Predictive moments at the query rows ``Xq``: ``(mean (n*, T), var (n*,) or (n*, T)
    or None, cov (n*, n*) or (n*, n*, T) or None)`` in the units of the fitted ``Y``.
    ``noise`` is the variance the estimator adds at new inputs: None for the full
    kernel's (its ``WhiteKernel`` terms, scikit-learn's choice), a float for the signal
    plus that (0.0: the latent function); see :meth:`Mode.prior_variance`.
    ``observed``: also add a non-Gaussian likelihood's noise (the Gaussian modes carry
    theirs in the kernel, so ``noise`` says all for them).
``noise_variance(Xq)``, ``sample_noise(Xq, n_samples, generator, draw_options)``
    The expected observation noise variance (n*, 1) or (n*, T) at ``Xq``, and draws of a
    likelihood's own noise (n*, S, T), or None where the kernel carries it (:class:`Mode`
    gives both for the Gaussian modes).  ``exact_draws``: whether ``sample_y`` may draw
    from the exact joint posterior (``prior="exact"``).
``posterior(**face)``
    The object that :func:`~skgpx.pathwise._draws._posterior.draw_functions` and
    :func:`~skgpx.pathwise._draws._posterior.draw_exact` consume: a
    :class:`~skgpx.pathwise._draws._posterior.Posterior` of this fit, completed by the
    estimator's ``face`` (``signal_kernel``, ``y_mean``, ``y_std``, ``n_targets``,
    ``squeeze``, ``n_features_in``).
``log_marginal_likelihood(est, theta, eval_gradient)``
    The objective of the fit at another ``theta`` (a tensor): a float, and with
    ``eval_gradient`` its gradient as a float64 array.
``attributes()``
    The public fitted attributes this mode gives the estimator (``noise_variance_``,
    ``inducing_points_``, ``cg_n_iter_``, ...).

Classifiers
-----------
``PathwiseGPClassifier`` has two modes of the same shape,
:class:`~skgpx.pathwise._laplace._mode.LaplaceMode` (exact: Laplace's approximation of
each binary problem, one-vs-rest problems batched) and
:class:`~skgpx.pathwise._svgp._classification.SVGPClassificationMode` (the SVGP engine,
:class:`~skgpx.pathwise._svgp._engine.SVGPEngine`).  Both are :class:`Mode` dataclasses (their
``kernel``, ``theta``, ``shift``, ``lml``, ``jitter``; ``seed``: the prediction seed
drawn after the fit) with

``fit(est, kernel, X, codes, n_classes, device, dtype)``
    Fits on the validated ``X`` and the class codes ``codes`` (0 .. n_classes - 1),
    reading the options of ``est``; refuses first what cannot fit in memory.
``attributes(est)``
    The public fitted attributes (``kernel_``, ``log_marginal_likelihood_value_``,
    ``objective_history_``, ``n_iter_``, and ``base_estimator_`` or ``inducing_points_``,
    ``q_mu_``, ``q_sqrt_``, ``jitter_``).
``latent(Xq, problems=None)``
    Latent means and variances ``(P, n*)`` (tensors) of the binary problems or latent
    functions (all, or the indices ``problems``) at validated query rows.
``predict_proba(Xq)``
    Class probabilities ``(n*, n_classes)``, float64 numpy rows summing to one.
``posteriors(n_features_in)``
    The posteriors that ``draw_functions`` consumes (attributes of ``Posterior``): one
    per Laplace problem, one for all the latents of ``q(u)``.
``draw_probabilities(f)``
    Class-probability draws ``(n*, n_classes, S)`` of latent draws ``f``.
``log_marginal_likelihood(est, theta, eval_gradient, clone_kernel)``
    The approximate log marginal likelihood (or the bound) at the float64 array
    ``theta``, with its gradient when asked; ``clone_kernel=False`` sets the fitted
    kernels' theta (the fitted posterior stays).
"""

from dataclasses import dataclass

import numpy as np
import torch
from sklearn.gaussian_process.kernels import ConstantKernel

from ..kernels import TorchKernel, split_white_noise
from ._draws._posterior import Posterior


@dataclass
class Mode:
    """The fitted state every mode has (None before ``fit``)."""

    kernel: object = None  # TorchKernel at the fitted theta
    theta: torch.Tensor = None  # fitted log hyperparameters
    shift: torch.Tensor = None  # (d,) centre of the random features; None: the origin
    lml: float = None  # the objective at theta: log marginal likelihood or its bound
    jitter: float = 0.0  # jitter that the fitted factorisation needed
    exact_draws = True  # (class attribute) sample_y may draw the exact joint posterior

    def posterior(self, **face):
        """The posterior of this fit for draws (see the module docstring)."""
        return Posterior(kernel=self.kernel, theta=self.theta, shift=self.shift,
                         **self._posterior_fields(), **face)

    def _posterior_fields(self):
        return {}

    def noise_variance(self, Xq):
        """The kernel's ``WhiteKernel`` noise level at the rows ``Xq``, (n*, 1)."""
        return self.kernel.noise_level(self.theta).expand(Xq.shape[0], 1)

    def sample_noise(self, Xq, n_samples, generator, draw_options):
        """Draws of a likelihood's own noise: none for a Gaussian mode, whose noise is
        the kernel's (added by the estimator)."""
        return None

    def prior_variance(self, Xq, noise=None):
        """Prior variance at the rows ``Xq``: of the full kernel when ``noise`` is None,
        else of the signal (no ``WhiteKernel`` terms) plus ``noise``."""
        if noise is None:
            return self.kernel.diag(Xq, self.theta, part="full")
        return self.kernel.diag(Xq, self.theta, part="signal") + noise

    def prior_covariance(self, Xq, noise=None):
        """Prior covariance of the rows ``Xq``, with ``noise`` as in :meth:`prior_variance`."""
        if noise is None:
            return self.kernel(Xq, theta=self.theta, part="full")
        cov = self.kernel(Xq, theta=self.theta, part="signal")
        cov.diagonal().add_(noise)
        return cov

    def as_theta(self, theta):
        """``theta`` (array-like) as a tensor like the fitted one, checked for its length:
        the argument of :meth:`log_marginal_likelihood`."""
        theta = torch.as_tensor(np.asarray(theta, dtype=np.float64), dtype=self.theta.dtype,
                                device=self.theta.device)
        if self.theta.shape[0] != theta.shape[0]:
            raise ValueError(f"theta has {theta.shape[0]} entries, but the kernel has "
                             f"{self.theta.shape[0]} free hyperparameters.")
        return theta


def with_theta(kernel, theta):
    """``kernel`` (scikit-learn, changed in place) set to ``theta``, and its TorchKernel."""
    kernel.theta = theta
    kernel._check_bounds_params()
    return kernel, TorchKernel(kernel)


@dataclass
class PriorMode(Mode):
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

    def predict(self, Xq, *, noise=None, batch_size, want_var=False, want_cov=False,
                observed=True):
        mean = Xq.new_zeros(Xq.shape[0], self.n_targets)
        return (mean, self.prior_variance(Xq, noise) if want_var else None,
                self.prior_covariance(Xq, noise) if want_cov else None)


__all__ = ["Mode", "PriorMode", "with_theta"]
