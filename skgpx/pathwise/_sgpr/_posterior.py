"""SGPR: the optimal ``q(u)`` at fixed hyperparameters and the predictive moments it gives
(Titsias, AISTATS 2009)."""

from dataclasses import dataclass

import torch

from ..._base import rows_per_chunk
from ..._inducing._collapsed import block_statistics, collapsed_elbo, inducing_cholesky, whitening
from ...linalg import solve_lower


@dataclass
class SparseFactors:
    """The fitted optimal ``q(u)`` and the factors that prediction and sampling reuse."""

    Z: torch.Tensor  # (m, d) inducing inputs
    L: torch.Tensor  # chol(Kzz + jitter I)
    LB: torch.Tensor  # chol(I + W)
    c: torch.Tensor  # (m, T)
    jitter: float

    @property
    def q_sqrt(self):
        """``R = L L_B^{-T}``: ``S_u = R R^T`` is the optimal q(u) covariance."""
        return torch.linalg.solve_triangular(self.LB, self.L.T, upper=False, left=True).T

    @property
    def q_mu(self):
        return self.q_sqrt @ self.c

    @property
    def mean_weights(self):
        """``Kzz^{-1} mu_u = L^{-T} L_B^{-T} c``: the predictive mean is ``k(., Z)`` times this."""
        inner = torch.linalg.solve_triangular(self.LB.T, self.c, upper=True)
        return torch.linalg.solve_triangular(self.L.T, inner, upper=True)

    def update(self, prior_at_Z, xi):
        """Decoupled update weights ``v_s = Kzz^{-1} (u_s - f_s(Z))`` with
        ``u_s = mu_u + R xi_s``: ``u_s = L L_B^{-T} (c + xi_s)`` (the optimal ``q(u)``), so
        ``v_s = L^{-T} (L_B^{-T} (c + xi_s) - L^{-1} f_s(Z))``; ``prior_at_Z`` and ``xi``
        have shape (m, S, T)."""
        m, S, T = xi.shape
        whitened = self.c[:, None, :] + xi
        inner = torch.linalg.solve_triangular(self.LB.T, whitened.reshape(m, S * T), upper=True)
        inner = inner - solve_lower(self.L, prior_at_Z.reshape(m, S * T))
        return torch.linalg.solve_triangular(self.L.T, inner, upper=True).reshape(m, S, T)

    def reduced_cross(self, K_zq):
        """``(L^{-1} k(Z, X*), L_B^{-1} L^{-1} k(Z, X*))`` for the predictive (co)variance."""
        V1 = solve_lower(self.L, K_zq)
        return V1, solve_lower(self.LB, V1)


def fit_factors(kernel, theta, Z, rows, *, jitter, batch_size, warn=True):
    """The optimal q(u) at fixed hyperparameters: (elbo, SparseFactors)."""
    with torch.no_grad():
        L, extra = inducing_cholesky(kernel, theta, Z, jitter, warn=warn)
        stats = rows.map_sum(block_statistics, kernel, theta, Z, whitening(L), batch_size)
        elbo, LB, c = collapsed_elbo(stats, rows.n_targets)
    return float(elbo), SparseFactors(Z=Z, L=L, LB=LB, c=c, jitter=extra)


def predictive_mean_var(factors, cross, prior_diag, Xq, batch_size, want_var):
    """Sparse predictive mean (and variance) in row chunks (Titsias, AISTATS 2009)."""
    m = factors.Z.shape[0]
    weights = factors.mean_weights
    step = rows_per_chunk(batch_size, 3 * m, Xq.device)
    mean = Xq.new_empty(Xq.shape[0], weights.shape[1])
    var = Xq.new_empty(Xq.shape[0]) if want_var else None
    for start in range(0, Xq.shape[0], step):
        rows = slice(start, start + step)
        K_zq = cross(Xq[rows])  # (m, b)
        mean[rows] = K_zq.T @ weights
        if want_var:
            V1, V2 = factors.reduced_cross(K_zq)
            var[rows] = prior_diag(Xq[rows]) - (V1**2).sum(0) + (V2**2).sum(0)
    return mean, var


def predictive_cov(factors, cross, prior_cov, Xq):
    """Dense sparse predictive covariance ``k** - Q** + k*z Kzz^-1 S_u Kzz^-1 kz*``."""
    V1, V2 = factors.reduced_cross(cross(Xq))
    return prior_cov(Xq) - V1.T @ V1 + V2.T @ V2


def check_sparse_noise(noise_min, has_white):
    """Without noise the bound's ``A = L^{-1} K_zx / sigma`` blows up: ask for noise."""
    if not has_white and noise_min < 1e-6:
        raise ValueError(
            f"Sparse mode needs observation noise: alpha={noise_min:.3g} < 1e-6 and the "
            "kernel has no WhiteKernel. Add a WhiteKernel to the kernel or set alpha >= 1e-6."
        )


__all__ = [
    "SparseFactors", "check_sparse_noise", "fit_factors", "predictive_cov",
    "predictive_mean_var",
]
