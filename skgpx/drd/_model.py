"""The maths of sDRD at a fixed latent ``u``: evidence, posterior, curvature, Laplace terms.

Given ``u`` the model is Bayesian linear regression with a unit prior on whitened
coefficients ``a``: ``y = Z a + e``, ``Z = X D G`` (n x m), ``D = diag(sqrt(g(u)))``,
``G G^T = K_f``, ``e ~ N(0, s2 I)`` (the primal form of Wu et al., NIPS 2014, suppl. App. B).
Pure torch, no sklearn.
"""

import math
from dataclasses import dataclass

import torch

from ..linalg import (
    cholesky_solve,
    jittered_cholesky,
    logdet_from_cholesky,
    matheron_update,
    solve_lower,
    spd_logdet,
)

_LOG_2PI = math.log(2 * math.pi)


def _chol(matrix, what):
    """Cholesky factor of a matrix that is positive definite in exact arithmetic.

    Extreme trial points of the optimisers (prior variances of 1e14) can lose definiteness
    to rounding; a jitter of 1e-12 up to 1e-6 of the mean diagonal is then added silently,
    which only changes the objective where it is already far from its optimum.
    """
    return jittered_cholesky(matrix, jitter=1e-12, max_jitter=1e-6, warn=False, name=what,
                             advice="increase noise_floor or use dtype='float64'")[0]


def _with_diagonal(matrix, value):
    return matrix + value * torch.eye(matrix.shape[-1], dtype=matrix.dtype, device=matrix.device)


def log_evidence_dual(Z, y, noise_var):
    """``log N(y | 0, Z Z^T + s2 I)`` by the n x n Cholesky factor (Wu et al., suppl. Eq. 2)."""
    L = _chol(_with_diagonal(Z @ Z.T, noise_var), "evidence covariance Z Z^T + s2 I")
    alpha = solve_lower(L, y[:, None])[:, 0]
    return -0.5 * alpha @ alpha - 0.5 * logdet_from_cholesky(L) - 0.5 * len(y) * _LOG_2PI


def log_evidence_primal(Z, y, noise_var):
    """The same value through the m x m ``S = Z^T Z + s2 I`` (Wu et al., NIPS 2014, suppl.
    Eq. 8, corrected)::

        -1/2 log|S| + y^T Z S^-1 Z^T y / (2 s2) - y^T y / (2 s2) - (n - m)/2 log s2 - n/2 log 2 pi

    The printed Eq. 8 lacks ``-(n - m)/2 log s2`` and the constant ``-n/2 log 2 pi``; we add
    them, as learning ``s2`` needs the first.
    """
    n, m = Z.shape
    L = _chol(_with_diagonal(Z.T @ Z, noise_var), "posterior precision Z^T Z + s2 I")
    beta = solve_lower(L, (Z.T @ y)[:, None])[:, 0]
    return (-0.5 * logdet_from_cholesky(L) + 0.5 * (beta @ beta - y @ y) / noise_var
            - 0.5 * (n - m) * torch.log(noise_var) - 0.5 * n * _LOG_2PI)


def log_evidence(Z, y, noise_var):
    """``log p(y | u, theta)``, by the dual form when ``n <= m``, else the primal form."""
    n, m = Z.shape
    return (log_evidence_dual if n <= m else log_evidence_primal)(Z, y, noise_var)


@dataclass
class Conditional:
    """Gaussian conditioning of ``a ~ N(0, I_m)`` on ``y = Z a + e``: the coefficient posterior,

    ``mu_a = Z^T S_n^-1 y = S^-1 Z^T y``,  ``Sigma_a = I - Z^T S_n^-1 Z = s2 S^-1``,

    computed in the dual form (``S_n = Z Z^T + s2 I``, n x n) when ``n <= m`` and the
    primal form (``S = Z^T Z + s2 I``, m x m) otherwise.  Build it with :meth:`condition`.
    """

    Z: torch.Tensor
    y: torch.Tensor
    noise_var: torch.Tensor
    dual: bool
    L: torch.Tensor  # Cholesky factor of S_n (dual) or S (primal)
    mean: torch.Tensor

    @classmethod
    def condition(cls, Z, y, noise_var):
        n, m = Z.shape
        if n <= m:
            L = _chol(_with_diagonal(Z @ Z.T, noise_var), "evidence covariance")
            return cls(Z, y, noise_var, True, L, Z.T @ cholesky_solve(L, y[:, None])[:, 0])
        L = _chol(_with_diagonal(Z.T @ Z, noise_var), "posterior precision")
        return cls(Z, y, noise_var, False, L, cholesky_solve(L, (Z.T @ y)[:, None])[:, 0])

    def variance(self, Zq):
        """``diag(Zq Sigma_a Zq^T)``: (nq,), as ``|zq|^2 - |L^-1 Z zq|^2`` (dual) or
        ``s2 |L^-1 zq|^2`` (primal)."""
        if self.dual:
            R = solve_lower(self.L, self.Z @ Zq.T)
            return (Zq**2).sum(1) - (R**2).sum(0)
        return self.noise_var * (solve_lower(self.L, Zq.T) ** 2).sum(0)

    def covariance(self):
        """``Sigma_a``: (m, m)."""
        if self.dual:
            R = solve_lower(self.L, self.Z)
            return _with_diagonal(-(R.T @ R), 1.0)
        return self.noise_var * torch.cholesky_inverse(self.L)

    def solve_evidence(self, R):
        """``S_n^-1 R`` for ``R`` of shape (n, k), in either form (push-through identity
        ``S_n^-1 = (I - Z S^-1 Z^T) / s2`` for the primal one)."""
        if self.dual:
            return cholesky_solve(self.L, R)
        return (R - self.Z @ cholesky_solve(self.L, self.Z.T @ R)) / self.noise_var

    def quadratic_form(self, X, gram=None):
        """``X^T S_n^-1 X`` for ``X`` (n, k).  In the primal form, given ``gram = X^T X``, it
        is ``(X^T X - V^T V) / s2`` with ``V = L^-1 Z^T X`` (push-through identity), which
        costs ``O(k^2 m)`` instead of ``O(k^2 n)``."""
        if self.dual or gram is None:
            return X.T @ self.solve_evidence(X)
        V = solve_lower(self.L, self.Z.T @ X)
        return torch.addmm(gram, V.T, V, alpha=-1.0).div_(self.noise_var)

    def draw(self, prior_draws, noise_draws):
        """Posterior draws of ``a`` from prior draws ``a0`` (m, S) and unit noise (n, S).

        Dual form: Matheron's rule (Wilson et al., ICML 2020),
        ``a = a0 + Z^T S_n^-1 (y - Z a0 - e)``.  Primal form: ``mu_a + sqrt(s2) L^-T a0``.
        """
        if self.dual:
            noise = noise_draws * self.noise_var.sqrt()
            weights = matheron_update(self.L, self.y[:, None], self.Z @ prior_draws, noise)
            return prior_draws + self.Z.T @ weights
        shift = torch.linalg.solve_triangular(self.L.T, prior_draws, upper=True)
        return self.mean[:, None] + self.noise_var.sqrt() * shift


def link(u, name):
    """The prior variance ``g(u)``: ``exp`` or ``softplus``."""
    return torch.exp(u) if name == "exp" else torch.nn.functional.softplus(u)


def link_log_slope(u, name):
    """``s = g'(u) / g(u)``: 1 for ``exp``, ``sigmoid(u) / softplus(u)`` for ``softplus``."""
    if name == "exp":
        return torch.ones_like(u)
    return torch.sigmoid(u) / torch.nn.functional.softplus(u)


def fisher_curvature(cond, X_A, C_AA, slope_A, DG_A=None, XC_A=None, gram_A=None):
    """Fisher information of ``u`` on the positions ``A`` (default Laplace curvature)::

        W_F = 1/4 (s s^T) o [ (C A) o (C A)^T + A o (C A C) ],   A = X_A^T S_n^-1 X_A,

    with ``C = C_sf[A, A]`` and ``s = g'/g``.  It equals ``1/2 tr(S_n^-1 dS_n/du_i
    S_n^-1 dS_n/du_j)`` and is positive semi-definite.  Pass ``C_AA`` (p' x p'), or its factor
    ``DG_A`` (p' x m, ``C = DG_A DG_A^T``) when ``m < n``: then only ``A`` costs ``O(n p'^2)``
    and ``CA = DG (Y^T S_n^-1 X)``, ``CAC = DG (Y^T S_n^-1 Y) DG^T`` with ``Y = X_A DG_A`` cost
    ``O(p'^2 m)``.  ``XC_A`` (n x p') passes the rows ``X_A C_AA`` instead of ``C_AA`` when
    the caller has a cheaper product (a Fourier factor: ``D G G^T D`` by FFT-sized products).
    ``gram_A = X_A^T X_A`` makes ``A`` a rank-m correction of it in the primal form
    (:meth:`Conditional.quadratic_form`).
    """
    SX = cond.solve_evidence(X_A)
    A = X_A.T @ SX if gram_A is None else cond.quadratic_form(X_A, gram_A)
    # the factors 1/4 go into the small middle matrices, and every p' x p' array is written
    # once: each pass over one costs as much as the products
    if DG_A is not None:
        Y = X_A @ DG_A
        M = 0.5 * (Y.T @ SX)  # CA / 2 = DG M
        half_CA = DG_A @ M
        half_AC = M.T @ DG_A.T  # its transpose as a product of its own: no strided copy
        quarter_CAC = DG_A @ (0.25 * (Y.T @ cond.solve_evidence(Y))) @ DG_A.T
        W = half_CA.mul_(half_AC)
    else:
        Q = 0.5 * (X_A @ C_AA if XC_A is None else XC_A)  # rows of X C / 2
        half_CA = Q.T @ SX
        quarter_CAC = Q.T @ cond.solve_evidence(Q)
        W = half_CA * half_CA.T
    W.addcmul_(A, quarter_CAC)
    if not bool((slope_A == 1).all()):  # s = 1 for the exp link
        W.mul_(slope_A[:, None]).mul_(slope_A[None, :])
    return W


def laplace_logdet(Phi_A, W):
    """``log|I_r + Phi_A^T W Phi_A|``, by the smaller side.

    With ``r > p'`` it is ``log|I + L_A^T W L_A|`` with ``L_A L_A^T = Phi_A Phi_A^T`` (the
    u-prior covariance on ``A``), by Sylvester's identity.  Raises ``NotPositiveDefiniteError``
    if the matrix is not positive definite (an indefinite exact Hessian away from the mode).
    """
    p, r = Phi_A.shape
    if r <= p:
        H = _with_diagonal(Phi_A.T @ W @ Phi_A, 1.0)
    else:
        K_A = Phi_A @ Phi_A.T
        L_A = _chol(K_A, "u-prior covariance on the support")
        H = _with_diagonal(L_A.T @ W @ L_A, 1.0)
    return spd_logdet(0.5 * (H + H.T), "Laplace Hessian I + Phi^T W Phi")


class FrozenLaplaceLogdet:
    """``log|I_r + D W D|`` for a fixed curvature ``W`` (r x r) as the diagonal ``D`` varies
    below a bound ``d_max`` (the Fourier u-basis in a trust box: ``D = sqrt(rho) S_l``).

    Large ``r`` goes through a truncated eigendecomposition of ``M = D_max W D_max =
    V Gamma V^T``.  With ``R = D / D_max`` (entries in [0, 1])::

        log|I + R M R| = log|I_k + Gamma_k^1/2 V_k^T R^2 V_k Gamma_k^1/2| + err,
        0 <= err <= tr(R M_dropped R) <= sum_{i > k} gamma_i <= tol,

    since adding a PSD matrix ``B`` raises a log-determinant by at most ``tr(B)``.  Each
    evaluation then costs ``O(r k^2)`` instead of ``O(r^3)``.  An indefinite ``W`` (an exact
    Hessian) or a rank that would not save much uses the full ``r x r`` matrix.
    """

    def __init__(self, W, d_max, tol=1e-4, min_rank=256):
        self.W, self.d_max, self.factor = W, d_max, None
        if W.shape[0] < min_rank:
            return
        gamma, V = torch.linalg.eigh(d_max[:, None] * W * d_max[None, :])
        if float(gamma[0]) < -1e-10 * max(float(gamma[-1]), 1.0):
            return
        tail = gamma.clamp_min(0).cumsum(0)  # ascending: tail[j] = sum of gamma[:j + 1]
        k = int((tail > tol).sum())
        if 2 * k <= W.shape[0]:
            self.factor = V[:, -k:] * gamma[-k:].clamp_min(0).sqrt()

    @property
    def rank(self):
        return self.W.shape[0] if self.factor is None else self.factor.shape[1]

    def __call__(self, d):
        if self.factor is None:
            H = d[:, None] * self.W * d[None, :]
        else:
            RF = (d / self.d_max)[:, None] * self.factor
            H = RF.T @ RF
        return spd_logdet(_with_diagonal(H, 1.0), "Laplace Hessian I + Phi^T W Phi")
