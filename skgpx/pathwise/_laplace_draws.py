"""Latent function draws of the Laplace classifier: a Posterior for ``draw_functions``.

At the mode ``f^`` with ``W = -Hess log p(y | f^)`` and ``g = grad log p(y | f^)``
(``= K^-1 f^``), the Laplace posterior ``N(K g, (K^-1 + W)^-1)`` at the training inputs is
the exact posterior of a Gaussian model with pseudo-targets ``f^ + W^-1 g`` and noise
``W^-1``.  Matheron's rule for it, written without ``W^-1`` (rows with ``W = 0`` are
fine), gives the pathwise update weights

.. math::

    v = g - W^{1/2} B^{-1} (W^{1/2} f_{prior}(X) + z), \\quad z \\sim N(0, I), \\quad
    B = I + W^{1/2} K W^{1/2},

and the draw ``f_prior(.) + k(., X) v`` has the mean and covariance of
:func:`skgpx.pathwise._laplace.latent_moments` (up to the random-feature prior's error).
"""

from dataclasses import dataclass

import numpy as np
import torch
from sklearn.gaussian_process.kernels import ConstantKernel
from sklearn.utils.validation import check_is_fitted

from .._base import check_draw_memory, check_n_samples, prediction_generator, to_numpy
from ..kernels import split_white_noise
from ..linalg import cholesky_solve
from ._functions import PathwiseFunctions
from ._laplace_views import probabilities_only
from ._predict import TargetStreams, draw_functions


@dataclass
class LaplacePosterior:
    """One binary problem's Laplace posterior, in the protocol of ``_predict.Posterior``."""

    kernel: object  # TorchKernel
    signal_kernel: object  # sklearn kernel without top-level WhiteKernel terms
    theta: torch.Tensor
    X: torch.Tensor  # (n, d) training inputs: the centres of the update
    g: torch.Tensor  # (n,)
    W_sr: torch.Tensor  # (n,)
    L: torch.Tensor  # (n, n) Cholesky factor of B
    white: float  # top-level WhiteKernel level: part of the latent prior at X
    shift: torch.Tensor  # (d,) centre of the random features
    n_features_in: int
    n_targets: int = 1
    squeeze: bool = True

    def __post_init__(self):
        ones = torch.ones(1, dtype=self.theta.dtype, device=self.theta.device)
        self.y_mean, self.y_std = ones * 0.0, ones

    def streams(self, generator):
        return TargetStreams(generator, 1, self.theta.dtype, self.theta.device)

    fitted = True

    @property
    def centers(self):
        return self.X

    def update(self, prior_at_centers, streams):
        """Update weights (n, S, 1) from the prior paths at X (n, S, 1)."""
        z = streams.normal(prior_at_centers.shape[:-1])  # (n, S, 1)
        f = prior_at_centers
        if self.white > 0:  # the features carry the signal only: add the nugget's draw
            f = f + np.sqrt(self.white) * streams.normal(prior_at_centers.shape[:-1])
        W_sr = self.W_sr[:, None]
        rhs = (W_sr * f[:, :, 0] + z[:, :, 0])
        solved = cholesky_solve(self.L, rhs)
        return (self.g[:, None] - W_sr * solved)[:, :, None]


class ProblemFunctions:
    """Latent draws of several binary problems (one-vs-rest classes, one-vs-one pairs),
    each a :class:`~skgpx.PathwiseFunctions` with its own kernel.

    ``functions(X)`` has shape ``(n_queries, n_problems, n_samples)`` (the multi-target
    layout of ``PathwiseFunctions``); ``functions.problems[c]`` is problem ``c``'s.
    """

    def __init__(self, problems):
        self.problems = list(problems)
        self.n_samples = self.problems[0].n_samples
        self.n_targets = len(self.problems)
        self.n_features_in_ = self.problems[0].n_features_in_

    def __call__(self, X):
        """Values of every problem's paths at X: (n_queries, n_problems, n_samples)."""
        values = [functions(X) for functions in self.problems]
        if isinstance(values[0], torch.Tensor):
            return torch.stack(values, dim=1)
        return np.stack(values, axis=1)

    def to(self, device):
        for functions in self.problems:
            functions.to(device)
        return self


def combine(functions):
    """One problem: its PathwiseFunctions; several: a :class:`ProblemFunctions`."""
    if len(functions) == 1:
        return functions[0]
    return ProblemFunctions(functions)


class LaplaceDrawsMixin:
    """PathwiseGPClassifier's latent and probability draws."""

    def _posteriors(self):
        """One LaplacePosterior per binary problem, at the fitted hyperparameters (also
        after ``log_marginal_likelihood(..., clone_kernel=False)`` moved ``kernel_``)."""
        posts, offset = [], 0
        for X_g, Y_g, mode in self._groups:
            for local in range(Y_g.shape[0]):
                c = offset + local
                fitted = self._kernels[c].clone_with_theta(to_numpy(self._thetas[c]))
                signal, white = split_white_noise(fitted)
                posts.append(LaplacePosterior(
                    kernel=self._torch_kernel, signal_kernel=signal or ConstantKernel(0.0),
                    theta=self._thetas[c], X=X_g, g=mode.g[local], W_sr=mode.W_sr[local],
                    L=mode.L[local], white=white, shift=self._shift,
                    n_features_in=self.n_features_in_))
            offset += Y_g.shape[0]
        return posts

    def sample_functions(self, n_samples=1, random_state=0):
        """Draw latent functions from the Laplace posterior, evaluable anywhere.

        Parameters
        ----------
        n_samples : int, default=1
        random_state : int, RandomState instance or None, default=0
            Seeds the draws; None uses the seed drawn in ``fit``.

        Returns
        -------
        functions : PathwiseFunctions or ProblemFunctions
            Binary: ``functions(X)`` of shape (n_queries, n_samples); several problems:
            (n_queries, n_problems, n_samples), one kernel per problem.

        Raises
        ------
        NotImplementedError
            For kernels on structured inputs (no random-feature expansion).
        """
        check_is_fitted(self)
        n_samples = check_n_samples(n_samples, minimum=1)
        if self._structured():
            raise NotImplementedError(
                f"sample_functions needs random features, which the kernel {self.kernel} on "
                "structured inputs (requires_vector_input=False) has no expansion into.")
        posts = self._posteriors()
        n_train = max(p.centers.shape[0] for p in posts)
        check_draw_memory(n_samples, len(posts) * (2 * self.n_features + 4 * n_train),
                          what="PathwiseGPClassifier.sample_functions",
                          way_out="ask for fewer draws (n_samples) per call",
                          device=self.device_)
        generator = prediction_generator(self, random_state)
        with torch.no_grad():
            return combine([draw_functions(
                post, n_samples, generator, n_features=self.n_features,
                feature_map=self.feature_map, shared_basis=True, method="pathwise",
                batch_size=self.batch_size) for post in posts])

    @probabilities_only
    def sample_y(self, X, n_samples=1, random_state=0):
        """Class-probability draws: the link of latent draws (one-vs-rest: normalised).

        Parameters
        ----------
        X : array-like of shape (n_samples_X, n_features)
        n_samples : int, default=1
        random_state : int, RandomState instance or None, default=0
            As in :meth:`sample_functions`.

        Returns
        -------
        proba_samples : ndarray of shape (n_samples_X, n_classes, n_samples)
            The layout of ``DeepQEPClassifier.sample_y``.
        """
        check_is_fitted(self)
        Xq = self._query(X)
        functions = self.sample_functions(n_samples, random_state)
        f = functions(Xq)  # (m, S) or (m, C, S), torch
        f = f[:, None, :] if f.dim() == 2 else f
        softmax = self._svgp is not None and self._svgp.multi_class == "softmax"
        p = (torch.softmax(f, dim=1) if softmax else torch.sigmoid(f) if self.link == "logit"
             else torch.special.ndtr(f))
        if self.n_classes_ == 2:
            p = torch.cat([1.0 - p, p], dim=1)
        elif not softmax:  # one-vs-rest, normalised as predict_proba
            p = p / p.sum(1, keepdim=True)
        return to_numpy(p)


__all__ = ["LaplaceDrawsMixin", "LaplacePosterior", "PathwiseFunctions", "ProblemFunctions",
           "combine"]
