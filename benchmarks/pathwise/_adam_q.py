"""Our SVGP engine with Adam on ``q(u)`` instead of natural steps: the ablation of the
natural gradient in ``classifier.py`` (part ``gpytorch``) and ``pathwise/svgp_engine.py``.

Imported by the scripts of this folder after ``_common``; running it does nothing.
"""

import torch

from skgpx.linalg import positive_tril, positive_tril_raw
from skgpx.pathwise._svgp._bound import WhitenedQ
from skgpx.pathwise._svgp._engine import SVGPEngine


class MomentQ:
    """``q(v_c) = N(m_c, R_c R_c^T)`` in moment parameters (``raw``: the unconstrained lower
    triangle of ``R``, softplus on the diagonal), with what the SVGP bound reads of a ``WhitenedQ``:
    ``mean``, ``root``, ``covariance``, ``excess = S - I`` and the KL to ``N(0, I)``."""

    def __init__(self, mean, raw):
        self.mean, self.raw = mean, raw
        self.root = positive_tril(raw)
        self.covariance = self.root @ self.root.transpose(1, 2)
        eye = torch.eye(raw.shape[1], dtype=raw.dtype, device=raw.device)
        self.excess = self.covariance - eye

    def kl(self):
        m, n_latent = self.mean.shape
        log_det = 2.0 * torch.log(self.root.diagonal(dim1=1, dim2=2)).sum()
        return 0.5 * (self.covariance.diagonal(dim1=1, dim2=2).sum()
                      + (self.mean * self.mean).sum() - m * n_latent - log_det)


class AdamQSVGP(SVGPEngine):
    """Our SVGP engine on the mini-batch route (``optimizer="adam"``) with ``q(u)`` moved by
    Adam on its moment parameters (as GPyTorch's SVGP moves it) instead of natural steps;
    theta, Z, the batches, the bound and the stopping rule are the engine's.

    At each mini-batch the engine evaluates the bound at the current ``q`` and hands its
    sufficient statistics to the natural step; here that step is one Adam step (learning
    rate ``learning_rate``, the hyperparameters') on ``(m, raw R)``.  The expected
    log-likelihood is linear in ``m`` and ``S`` to first order, ``dE/dm = r`` and
    ``dE/dS = H`` (the statistics' ``r`` and ``H``), so the gradient of the bound in
    ``(m, R)`` is that of ``scale * (<r, m> + <H, S>) - KL(q || p)``.  After training,
    ``q`` is stored as a ``WhitenedQ`` of the same moments."""

    def _fit_adam(self, rows, theta, Z, rng):
        root = torch.linalg.cholesky(self.q.covariance)
        self._q_mean = self.q.mean.clone().requires_grad_(True)
        self._q_raw = positive_tril_raw(root).clone().requires_grad_(True)
        self._q_opt = torch.optim.Adam([self._q_mean, self._q_raw], lr=self.learning_rate)
        self.q = MomentQ(self._q_mean.detach(), self._q_raw.detach())
        try:
            theta, Z = super()._fit_adam(rows, theta, Z, rng)
        finally:
            del self._q_mean, self._q_raw, self._q_opt
        self.q = WhitenedQ.from_moments(self.q.mean, self.q.covariance)
        return theta, Z

    def _safe_step(self, sums, scale, gamma):
        self._q_opt.zero_grad()
        moving = MomentQ(self._q_mean, self._q_raw)
        surrogate = -(scale * ((sums.r * self._q_mean).sum()
                               + (sums.H * moving.covariance).sum()) - moving.kl())
        surrogate.backward()
        self._q_opt.step()
        return MomentQ(self._q_mean.detach(), self._q_raw.detach())
