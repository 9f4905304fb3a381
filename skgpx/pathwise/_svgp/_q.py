"""The whitened variational distribution ``q(v)`` of the SVGP engine (``_svgp``), held in
natural parameters, and its natural-gradient step."""

import torch

from ..._base import MovableState
from ...linalg import jittered_cholesky


class WhitenedQ(MovableState):
    """``q(v_c) = N(m_c, S_c)`` for ``L`` latents, held in natural parameters.

    Parameters
    ----------
    precision : Tensor of shape (L, m, m)
        ``Lambda_c = S_c^{-1}``.
    natural_mean : Tensor of shape (m, L)
        ``Lambda_c m_c`` in column ``c``.
    """

    def __init__(self, precision, natural_mean):
        self.precision, self.natural_mean = precision, natural_mean
        self.factor, _ = jittered_cholesky(
            precision, jitter=1e-12, max_jitter=1e-8, warn=False,
            name="variational precision", advice="use a smaller natgrad_step")
        L = precision.shape[0]
        self.mean = torch.cholesky_solve(natural_mean.T.reshape(L, -1, 1), self.factor)[..., 0].T
        self.covariance = torch.cholesky_inverse(self.factor)
        eye = torch.eye(precision.shape[1], dtype=precision.dtype, device=precision.device)
        self.excess = self.covariance - eye  # S_c - I: the marginal variances' update

    @classmethod
    def prior(cls, m, n_latent, dtype, device):
        eye = torch.eye(m, dtype=dtype, device=device)
        return cls(eye.expand(n_latent, m, m).clone(),
                   torch.zeros(m, n_latent, dtype=dtype, device=device))

    @classmethod
    def from_moments(cls, mean, covariance):
        """The ``q`` with means ``mean`` (m, L) and covariances ``covariance`` (L, m, m)."""
        factor = torch.linalg.cholesky(covariance)
        precision = torch.cholesky_inverse(factor)
        return cls(precision, (precision @ mean.T[..., None])[..., 0].T)

    @property
    def root(self):
        """``R_c = Lambda_c^{-T/2}`` (upper triangular): ``R_c R_c^T = S_c``, for draws."""
        eye = torch.eye(self.factor.shape[1], dtype=self.factor.dtype,
                        device=self.factor.device)
        return torch.linalg.solve_triangular(self.factor, eye, upper=False).transpose(1, 2)

    def kl(self):
        """``sum_c KL(N(m_c, S_c) || N(0, I))``."""
        m = self.factor.shape[1]
        log_det_S = -2.0 * torch.log(self.factor.diagonal(dim1=1, dim2=2)).sum()
        trace = self.covariance.diagonal(dim1=1, dim2=2).sum()
        return 0.5 * (trace + (self.mean * self.mean).sum()
                      - m * self.factor.shape[0] - log_det_S)

    def natural_step(self, sums, scale, gamma):
        """The natural-gradient step of size ``gamma`` with data term ``scale * sums``."""
        H, r = scale * sums.H, scale * sums.r
        eye = torch.eye(H.shape[1], dtype=H.dtype, device=H.device)
        target_precision = eye - 2.0 * H
        target_natural = r - 2.0 * (H @ self.mean.T[..., None])[..., 0].T
        precision = (1.0 - gamma) * self.precision + gamma * target_precision
        precision = 0.5 * (precision + precision.transpose(1, 2))
        return WhitenedQ(precision, (1.0 - gamma) * self.natural_mean + gamma * target_natural)

    def centred(self):
        """``q`` with the means' average over latents removed (covariances kept).

        For a likelihood that sees only differences of the latents (the softmax), ``E``
        does not change when every ``m_c`` moves by the same vector, and the KL is least
        when ``sum_c m_c = 0``: this is the bound's exact maximum along that direction,
        which natural steps of a ``q`` factorised over latents approach only at the
        prior's slow rate (the likelihood's curvature there is zero).
        """
        mean = self.mean - self.mean.mean(1, keepdim=True)
        return WhitenedQ(self.precision, (self.precision @ mean.T[..., None])[..., 0].T)

    def with_mean(self, mean):
        """The ``q`` with means ``mean`` (m, L) and these covariances (no refactorisation)."""
        out = WhitenedQ.__new__(WhitenedQ)
        out.precision, out.factor = self.precision, self.factor
        out.covariance, out.excess, out.mean = self.covariance, self.excess, mean
        out.natural_mean = (self.precision @ mean.T[..., None])[..., 0].T
        return out

    def to(self, device):
        return WhitenedQ(self.precision.to(device), self.natural_mean.to(device))


__all__ = ["WhitenedQ"]
