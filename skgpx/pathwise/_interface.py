"""The mode interface: what every way of fitting a pathwise GP answers.

An estimator of the pathwise family validates its input and parameters, picks one *mode*
(:mod:`skgpx.pathwise._modes` is the one place that picks it from the parameters), hands it
the training data once, and afterwards only asks it questions; the mode owns every tensor
of the fit.  A mode sees the estimator only through a :class:`FitContext` (its
parameters and where tensors live) and the :class:`Training` data: it never reads the
estimator's attributes or calls its methods.

================================  ==========================================================
mode                              fits
================================  ==========================================================
``_exact.ExactMode``              the exact GP: Cholesky or CG, vectors or structured inputs
``_sgpr.SGPRMode``                collapsed sparse GP regression (inducing inputs, Dask)
``_svgp.SVGPRegressionMode``      non-Gaussian likelihoods on the SVGP engine
``_laplace.LaplaceMode``          Laplace classification, one-vs-rest problems batched
``_svgp.SVGPClassificationMode``  sparse variational classification
================================  ==========================================================

Before ``fit`` a regressor answers with ``_modes.PriorMode``, the prior.  A mode is a
dataclass, so that pickling a fitted estimator moves its tensors to the CPU
field by field (:func:`skgpx._base.move_to_device`).
"""

from abc import ABC, abstractmethod
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np
import torch

from ..kernels import TorchKernel
from ._draws._posterior import Posterior


@dataclass(frozen=True)
class FitContext:
    """What a mode knows of the estimator that fits or asks it.

    Attributes
    ----------
    params : SimpleNamespace
        The estimator's constructor parameters (``get_params(deep=False)``), read only.
    device, dtype : torch.device, torch.dtype
        Where the fit's tensors live.
    structured : bool
        Whether the kernel takes structured inputs (``requires_vector_input=False``).
    rng : numpy.random.RandomState or None
        The fit's random state (regression modes; the classifier's modes seed their own
        from ``params.random_state``, as scikit-learn's classifier does).
    history : list or None
        The objective of each evaluation is appended here (``objective_history_``).
    X_train : array-like or None
        The training rows as the estimator keeps them (``X_train_``), for the questions
        asked after the fit that need them again.
    """

    params: SimpleNamespace
    device: torch.device = None
    dtype: torch.dtype = None
    structured: bool = False
    rng: object = None
    history: list = None
    X_train: object = None

    @classmethod
    def of(cls, estimator, **fields):
        """The context of ``estimator``'s current parameters."""
        return cls(params=SimpleNamespace(**estimator.get_params(deep=False)), **fields)

    @staticmethod
    def as_tensor(array, device, dtype):
        """A new tensor holding a copy of ``array``: user data is never aliased."""
        return torch.tensor(np.ascontiguousarray(array), dtype=dtype, device=device)


@dataclass
class Training:
    """The training data a mode is fitted on (in-memory arrays, or Dask collections
    where the mode supports them).

    Attributes
    ----------
    X : array-like of shape (n, d), or a list of objects
    Y : array-like
        Regression: the targets (n, T) as the estimator wants them modelled (normalised,
        say).  Classification: the class codes (n,), 0 .. n_classes - 1 (Dask: the label
        matrix of ``skgpx._dask.dask_class_labels``).
    noise : array-like of shape (n,) or float, optional
        Regression: the per-row noise variance ``alpha``.
    shift : array-like of shape (d,), optional
        The random features' centre, when the estimator computed it (Dask fits).
    n_classes : int, optional
        Classification: the number of classes.
    """

    X: object
    Y: object
    noise: object = None
    shift: object = None
    n_classes: int = None


@dataclass
class Mode(ABC):
    """A way of fitting: the fitted state every mode has (None before ``fit``), and the
    questions every mode answers."""

    kernel: object = None  # TorchKernel at the fitted theta
    theta: torch.Tensor = None  # fitted log hyperparameters
    shift: torch.Tensor = None  # (d,) centre of the random features; None: the origin
    lml: float = None  # the objective at theta: log marginal likelihood or its bound
    jitter: float = 0.0  # jitter that the fitted factorisation needed

    @classmethod
    @abstractmethod
    def plan(cls, context, kernel, n, d, n_targets=1):
        """The unfitted mode for ``n`` rows of ``d`` features and ``n_targets`` targets
        (or latent problems), refusing before any torch work what it cannot run (memory,
        options)."""

    @abstractmethod
    def fit(self, context, kernel, data):
        """Fit on the :class:`Training` ``data``, optimising the hyperparameters of the
        scikit-learn ``kernel`` (a clone the estimator owns) when the parameters ask for
        it; returns the fitted scikit-learn kernel.  Afterwards the fields hold the fit."""

    @abstractmethod
    def attributes(self):
        """The public fitted attributes this mode gives the estimator (a dict)."""

    @abstractmethod
    def log_marginal_likelihood(self, context, theta, eval_gradient=False, clone_kernel=True):
        """The objective of the fit (log marginal likelihood, its approximation or its
        bound) at another ``theta`` (a tensor for regression modes, a float64 array for
        classification ones): a float, and with ``eval_gradient`` its gradient as a float64
        array; ``clone_kernel=False`` sets the fitted kernel's theta (classifiers)."""


class RegressionMode(Mode):
    """A mode of ``PathwiseGPSampler``: predictive moments, the posterior of the draws, and
    the noise of the likelihood."""

    exact_draws = True  # (class attribute) sample_y may draw the exact joint posterior

    @abstractmethod
    def predict(self, Xq, *, noise=None, batch_size, want_var=False, want_cov=False,
                observed=True):
        """Predictive moments at the query rows ``Xq``: ``(mean (n*, T), var (n*,) or
        (n*, T) or None, cov (n*, n*) or (n*, n*, T) or None)`` in the units of the fitted
        ``Y``.  ``noise`` is the variance added at new inputs: None for the full kernel's
        (its ``WhiteKernel`` terms, scikit-learn's choice), a float for the signal plus that
        (0.0: the latent function); see :meth:`prior_variance`.  ``observed``: also add
        a non-Gaussian likelihood's noise (the Gaussian modes carry theirs in the kernel)."""

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


class ClassificationMode(Mode):
    """A mode of ``PathwiseGPClassifier``: latent moments, class probabilities and the
    posteriors of the latent draws."""

    @classmethod
    def plan(cls, context, kernel, n, d, n_targets=1):
        """The unfitted mode: a classification mode refuses what cannot fit in memory in
        :meth:`fit`, once its binary problems or latent functions are known."""
        return cls()

    @abstractmethod
    def latent(self, Xq, problems=None):
        """Latent means and variances ``(P, n*)`` (tensors) of the binary problems or
        latent functions (all, or the indices ``problems``) at validated query rows."""

    @abstractmethod
    def predict_proba(self, Xq):
        """Class probabilities ``(n*, n_classes)``, float64 numpy rows summing to one."""

    @abstractmethod
    def posteriors(self, n_features_in):
        """The posteriors that ``draw_functions`` consumes (one per Laplace problem, one
        for all the latents of ``q(u)``)."""

    @abstractmethod
    def draw_probabilities(self, f):
        """Class-probability draws ``(n*, n_classes, S)`` of latent draws ``f``."""

    def views(self, owner, classes):
        """``base_estimator_`` of the fitted ``owner``, where the mode has one (else None)."""
        return None


def with_theta(kernel, theta):
    """``kernel`` (scikit-learn, changed in place) set to ``theta``, and its TorchKernel."""
    kernel.theta = theta
    kernel._check_bounds_params()
    return kernel, TorchKernel(kernel)


__all__ = ["ClassificationMode", "FitContext", "Mode", "RegressionMode", "Training", "with_theta"]
