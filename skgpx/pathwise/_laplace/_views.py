"""``base_estimator_`` of PathwiseGPClassifier: read-only views of the binary problems.

scikit-learn's ``GaussianProcessClassifier.base_estimator_`` is a binary Laplace estimator
(two classes) or a ``OneVsRestClassifier`` / ``OneVsOneClassifier`` holding one per class or
pair in ``estimators_``.  These views expose the same per-problem quantities of the
batched fit (kernel, log marginal likelihood, latent moments, probabilities) without a
second copy of the fitted state.
"""

import functools
import types

import numpy as np
import torch


class LaplaceBinaryView:
    """One binary problem of a fitted :class:`~skgpx.PathwiseGPClassifier`.

    Attributes
    ----------
    classes_ : ndarray of shape (2,)
        The labels of the problem's negative and positive class: the estimator's two
        classes, or with more classes ``[0, 1]`` as scikit-learn's multiclass wrappers'
        estimators see them (one-vs-rest: "rest" and "this class"; one-vs-one: the
        pair's first and second class).
    kernel_ : kernel instance
        The problem's fitted kernel (shared with the estimator's ``kernel_``).
    log_marginal_likelihood_value_ : float
    X_train_ : ndarray of shape (n_rows, n_features) or list of object
        The problem's training rows (one-vs-one: the rows of its two classes, in order).
    y_train_ : ndarray of shape (n_rows,)
        Its labels encoded 0 (negative) and 1 (positive), int64.
    pi_ : ndarray of shape (n_rows,)
        As scikit-learn's binary Laplace estimator keeps it: the positive-class
        probability at the latent values of the last Newton step (logit link; the
        probit link: ``Phi(f)`` at the mode).
    W_sr_ : ndarray of shape (n_rows,)
        Square root of the negative Hessian ``W`` of the log-likelihood there.
    L_ : ndarray of shape (n_rows, n_rows)
        Lower Cholesky factor of ``B = I + W_sr K W_sr``.

    Each of these is a float64 numpy copy of the fitted state, made at each access.
    """

    def __init__(self, owner, index, classes):
        self._owner, self._index = owner, index
        self.classes_ = np.asarray(classes)

    @property
    def kernel_(self):
        return self._owner._mode.kernels[self._index]

    @property
    def log_marginal_likelihood_value_(self):
        return np.float64(self._owner._mode.lml_values[self._index])

    def _state(self, name):
        return self._owner._mode.problem_state(self._index, name)

    @property
    def X_train_(self):
        return self._state("X_train_")

    @property
    def y_train_(self):
        return self._state("y_train_")

    @property
    def pi_(self):
        return self._state("pi_")

    @property
    def W_sr_(self):
        return self._state("W_sr_")

    @property
    def L_(self):
        return self._state("L_")

    def log_marginal_likelihood(self, theta=None, eval_gradient=False):
        """This problem's log marginal likelihood (and gradient) at ``theta``."""
        if theta is None:
            if eval_gradient:
                raise ValueError("Gradient can only be evaluated for theta!=None")
            return self.log_marginal_likelihood_value_
        value, grad = self._owner._mode.problem_lml(
            self._index, np.asarray(theta, dtype=float), eval_gradient)
        return (value, grad) if eval_gradient else value

    def latent_mean_and_variance(self, X):
        """Latent mean and variance of this problem at X (validated by the owner)."""
        mean, var = self._owner._latent(self._owner._query(X), problems=[self._index])
        return mean[0], var[0]

    def predict_proba(self, X):
        """Probabilities of ``classes_`` for this problem alone: (n, 2)."""
        p = self._owner._mode.positive_probability(self._owner._query(X),
                                                   problems=[self._index])[0]
        return np.stack([1.0 - p, p], axis=1)


class LaplaceEnsembleView:
    """The binary problems of a multi-class fit, as scikit-learn's multiclass wrappers
    hold them.

    Attributes
    ----------
    strategy : {"one_vs_rest", "one_vs_one"}
    estimators_ : list of LaplaceBinaryView
        One per class (one-vs-rest) or per pair ``(i, j)``, ``i < j`` (one-vs-one).
    classes_ : ndarray of shape (n_classes,)
    """

    def __init__(self, strategy, estimators, classes):
        self.strategy = strategy
        self.estimators_ = list(estimators)
        self.classes_ = classes


class NoProbabilitiesError(AttributeError, ValueError):
    """One-vs-one with more than two classes has no probabilities: an AttributeError, so
    that ``hasattr(est, "predict_proba")`` is False (as for scikit-learn's multiclass
    wrappers), and a ValueError, scikit-learn's error for ``predict_proba`` there."""


class probabilities_only:
    """A method that does not exist (:class:`NoProbabilitiesError`, with scikit-learn's
    message) on a fitted one-vs-one estimator of more than two classes."""

    def __init__(self, method):
        self.method = method
        functools.update_wrapper(self, method)

    def __get__(self, est, owner=None):
        if est is None:
            return self.method
        if est.multi_class == "one_vs_one" and getattr(est, "n_classes_", 2) > 2:
            raise NoProbabilitiesError(_OVO_PROBA)
        return types.MethodType(self.method, est)


_OVO_PROBA = ("one_vs_one multi-class mode does not support predicting probability "
              "estimates. Use one_vs_rest mode instead.")


def ovo_scores(positive, confidences, n_classes):
    """One-vs-one votes plus confidences squashed into (-1/3, 1/3), as scikit-learn's
    ``OneVsOneClassifier.decision_function`` combines them: pair ``k = (i, j)`` votes for
    ``j`` where its latent mean is positive, and its probability of ``j`` moves the
    confidence from ``i`` to ``j``; the squashing only breaks ties between votes."""
    votes = np.zeros((positive.shape[0], n_classes))
    confidence = np.zeros_like(votes)
    pairs = [(i, j) for i in range(n_classes) for j in range(i + 1, n_classes)]
    for k, (i, j) in enumerate(pairs):
        confidence[:, i] -= confidences[:, k]
        confidence[:, j] += confidences[:, k]
        votes[~positive[:, k], i] += 1
        votes[positive[:, k], j] += 1
    return votes + confidence / (3 * (np.abs(confidence) + 1))


def select_problems(mode, members):
    """The NewtonPosterior of a subset of the problems (all of them: the NewtonPosterior itself)."""
    if members == list(range(mode.lml.shape[0])):
        return mode
    index = torch.as_tensor(members, device=mode.lml.device)
    return type(mode)(**{name: getattr(mode, name)[index.to(getattr(mode, name).device)]
                         for name in mode.__dataclass_fields__})


__all__ = ["LaplaceBinaryView", "LaplaceEnsembleView", "NoProbabilitiesError", "ovo_scores",
           "probabilities_only", "select_problems"]
