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
:func:`skgpx.pathwise._laplace._newton.latent_moments` (up to the random-feature prior's error).
"""

from dataclasses import dataclass

import numpy as np
import torch

from ..._base import check_draw_memory, prediction_generator
from ...linalg import cholesky_solve
from .._draws._posterior import TargetStreams, draw_functions
from .._functions import PathwiseFunctions


@dataclass
class LaplacePosterior:
    """One binary problem's Laplace posterior, in the protocol of
    ``_draws._posterior.Posterior``."""

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


def draw_latent(est, posts, n_samples, random_state):
    """Latent draws of the posteriors ``posts`` of a fitted classifier ``est`` (its
    random-feature options, device and prediction seed): PathwiseFunctions for one
    posterior, a :class:`ProblemFunctions` for several."""
    n_train = max(p.centers.shape[0] for p in posts)
    check_draw_memory(n_samples, len(posts) * (2 * est.n_features + 4 * n_train),
                      what="PathwiseGPClassifier.sample_functions",
                      way_out="ask for fewer draws (n_samples) per call",
                      device=est.device_)
    generator = prediction_generator(est, random_state)
    with torch.no_grad():
        return combine([draw_functions(
            post, n_samples, generator, n_features=est.n_features,
            feature_map=est.feature_map, shared_basis=True, method="pathwise",
            batch_size=est.batch_size) for post in posts])


def link_probabilities(f, link, n_classes, softmax=False):
    """Class-probability draws (n*, C, S) of latent draws ``f`` ((n*, S) or (n*, P, S)):
    the softmax over the latents, or the link of each (two classes: ``[1 - p, p]``;
    one-vs-rest: normalised as ``predict_proba``)."""
    f = f[:, None, :] if f.dim() == 2 else f
    p = (torch.softmax(f, dim=1) if softmax else torch.sigmoid(f) if link == "logit"
         else torch.special.ndtr(f))
    if n_classes == 2:
        p = torch.cat([1.0 - p, p], dim=1)
    elif not softmax:
        p = p / p.sum(1, keepdim=True)
    return p


__all__ = ["LaplacePosterior", "PathwiseFunctions", "ProblemFunctions", "combine",
           "draw_latent", "link_probabilities"]
