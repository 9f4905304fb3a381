"""Likelihoods of the deep Q-EP, used as the skorch criterion.

Each returns the mean over rows (and Monte-Carlo samples) of the expected
log-likelihood of one row, given the last layer's ``(mu, v)`` of shape (S, B, D).
They own the learned noise parameters, so skorch's optimiser updates them.
"""

import torch
from torch import nn
from torch.nn import functional as F

from ._bounds import dirichlet_targets, expected_log_likelihood
from ._distribution import standard_univariate_draws
from ..linalg import inverse_softplus

__all__ = ["DirichletLikelihood", "QExponentialLikelihood", "SoftmaxLikelihood"]

# noise scales live above this floor (standardised units), as GPyTorch's GreaterThan(1e-4)
NOISE_FLOOR = 1e-4


class _NoiseMixin:
    def _init_noise(self, n_outputs, noise, dtype):
        value = torch.full((n_outputs,), float(noise) - NOISE_FLOOR)
        self.raw_noise = nn.Parameter(inverse_softplus(value).to(dtype))

    @property
    def noise(self):
        """Per-output noise scale ``sigma^2`` (the noise variance is ``c_q sigma^2``)."""
        return F.softplus(self.raw_noise) + NOISE_FLOOR


class QExponentialLikelihood(_NoiseMixin, nn.Module):
    """``y_d = f_d + e_d`` with ``e_d ~ q-ED_1(0, sigma_d^2)``, Jensen-bounded per row."""

    def __init__(self, n_outputs, q, noise=0.1, dtype=torch.float64):
        super().__init__()
        self.q = float(q)
        self._init_noise(n_outputs, noise, dtype)

    def forward(self, output, y):
        mean, var = output
        ell = expected_log_likelihood(y, mean, var, self.noise, self.q)
        return ell.sum(-1).mean()


class DirichletLikelihood(_NoiseMixin, nn.Module):
    """Dirichlet-based classification as regression on log-concentrations (Milios et al.,
    2018): fixed heteroscedastic noise from the labels plus a learned per-class noise."""

    def __init__(self, n_classes, q, alpha_epsilon=0.01, noise=0.1, dtype=torch.float64):
        super().__init__()
        self.q = float(q)
        self.n_classes = int(n_classes)
        self.alpha_epsilon = float(alpha_epsilon)
        self._init_noise(n_classes, noise, dtype)

    def forward(self, output, labels):
        mean, var = output
        targets, fixed = dirichlet_targets(labels, self.n_classes, self.alpha_epsilon, mean.dtype)
        ell = expected_log_likelihood(targets, mean, var, fixed + self.noise, self.q)
        return ell.sum(-1).mean()


class SoftmaxLikelihood(nn.Module):
    """``(1/K) sum_k log softmax(mu + sqrt(v) eps_k)_y`` with reparameterised
    q-exponential ``eps_k`` (times ``draw_scale``, the bound's rule for latent draws)."""

    def __init__(self, q, draw_scale=1.0, n_draws=8):
        super().__init__()
        self.q = float(q)
        self.draw_scale = float(draw_scale)
        self.n_draws = int(n_draws)

    def forward(self, output, labels):
        mean, var = output
        eps = standard_univariate_draws(
            (self.n_draws,) + tuple(mean.shape), self.q, dtype=mean.dtype, device=mean.device
        )
        log_probs = F.log_softmax(mean + var.sqrt() * (self.draw_scale * eps), dim=-1)
        index = labels.long().view(1, 1, -1, 1).expand(log_probs.shape[:-1] + (1,))
        return log_probs.gather(-1, index).mean()
