"""Titsias' collapsed bound of a GP with inducing inputs, accumulated over row chunks.

The collapsed evidence lower bound (Titsias, AISTATS 2009) of a GP with inducing inputs
``Z`` (m x d) and independent Gaussian noise ``sigma_i^2`` depends on the training rows
only through sums over rows.  With ``L = chol(Kzz)``, the whitened cross-covariances
``a_i = L^{-1} k(Z, x_i)`` and ``beta_i = 1 / sigma_i^2``, they are

.. math::

    W = \\sum_i \\beta_i a_i a_i^T, \\quad w = \\sum_i \\beta_i a_i y_i^T, \\quad
    \\textstyle\\sum_i \\beta_i \\|y_i\\|^2, \\quad \\sum_i \\beta_i k(x_i, x_i), \\quad
    \\sum_i \\log \\sigma_i^2,

and with ``B = I + W``, ``L_B = chol(B)`` and ``c = L_B^{-1} w`` (for one noise level,
``W = A A^T`` and ``w = A y / sigma`` with ``A = L^{-1} K_zx / sigma``), for T targets

.. math::

    \\mathrm{ELBO} = -\\tfrac{nT}{2} \\log 2\\pi - T \\sum \\log \\operatorname{diag} L_B
      - \\tfrac T2 \\sum_i \\log\\sigma_i^2 - \\tfrac12 \\sum_i \\beta_i \\|y_i\\|^2
      + \\tfrac12 \\|c\\|_F^2 - \\tfrac T2 \\sum_i \\beta_i k_{ii}
      + \\tfrac T2 \\operatorname{tr} W.

The sums are accumulated chunk by chunk in ``O(m^2 + chunk * m)`` memory, never
``O(n m)``.  They are whitened row by row, as the usual stable form of the bound does: summing
``k_i k_i^T`` first and whitening the sum afterwards loses about ``cond(Kzz)`` relative
digits, enough to make the bound jump by 0.5 nats under 1e-15 changes of theta when
inducing inputs crowd (then L-BFGS stops abnormally).

SGPR differentiates this bound (:mod:`skgpx.pathwise._sgpr._bound`); the deep kernel
process's inducing-point mode builds its own statistics and calls :func:`collapsed_elbo`.
"""

import math
from dataclasses import dataclass

import torch

from .._buffers import Buffers
from ..linalg import gram, jittered_cholesky, lower_inverse, lower_matmul, solve_lower
from ._cross import stationary_cross
from ._rows import row_chunks


# The row sums of the collapsed bound, in a fixed order (see the module docstring).
STATISTICS = ("W", "w", "yy", "trace", "log_noise")


@dataclass
class SparseStatistics:
    """Row sums of the collapsed bound (module docstring) over some rows of the data."""

    W: torch.Tensor  # (m, m)  sum beta_i a_i a_i^T
    w: torch.Tensor  # (m, T)  sum beta_i a_i y_i^T
    yy: torch.Tensor  # ()
    trace: torch.Tensor  # ()
    log_noise: torch.Tensor  # ()
    n: int

    def __add__(self, other):
        return SparseStatistics(*(getattr(self, f) + getattr(other, f) for f in STATISTICS),
                                n=self.n + other.n)

    def tensors(self):
        return [getattr(self, f) for f in STATISTICS]

    def to_device(self, device):
        return SparseStatistics(*(t.to(device) for t in self.tensors()), n=self.n)


def noise_of(kernel, theta, alpha):
    """``sigma_i^2``: ``alpha_i`` plus the level of the kernel's top-level WhiteKernels."""
    return alpha + kernel.noise_level(theta)


def chunk_statistics(kernel, theta, Z, L, X, Y, alpha):
    """The row sums over the rows ``X`` (b x d), ``Y`` (b x T), ``alpha`` (b,), by a
    triangular solve and differentiable: the reference the chunked passes are tested
    against (:func:`accumulate_statistics` is the fast route)."""
    noise = noise_of(kernel, theta, alpha)
    beta = 1.0 / noise
    root_beta = beta.sqrt()
    # whitened and scaled: A = L^-1 K diag(sqrt(beta)), (m, b)
    A = solve_lower(L, kernel(Z, X, theta=theta, part="signal")) * root_beta
    return SparseStatistics(
        W=gram(A), w=A @ (root_beta[:, None] * Y), yy=(beta[:, None] * Y * Y).sum(),
        trace=(beta * kernel.diag(X, theta, part="signal")).sum(),
        log_noise=torch.log(noise).sum(), n=X.shape[0],
    )


def _chunk_sums(kernel, theta, Z, L_inverse, X, Y, alpha, cross, buffers):
    """:func:`chunk_statistics` without autograd, for one chunk of the fast route.

    One product with ``L^{-1}`` whitens the block about twice as fast as a triangular
    solve, with the same accuracy here (both are backward stable for the factor of a
    jittered ``Kzz``).  The block is scaled by ``sqrt(beta)`` before it is whitened (for a
    :class:`StationaryCross` ``cross``, inside its exponent), and one ``(m + T)``-row syrk
    gives ``W``, ``w`` and the target term; ``buffers`` hold the large intermediates.
    """
    noise = noise_of(kernel, theta, alpha)
    beta = 1.0 / noise
    m, T, b = Z.shape[0], Y.shape[1], X.shape[0]
    block = buffers.get("block", (m, b), X)
    if cross is None:
        block.copy_(kernel(Z, X, theta=theta, part="signal")).mul_(beta.sqrt())
    else:
        cross.weighted_block(cross.standardised(X), -0.5 * torch.log(noise), out=block)
    stacked = buffers.get("stacked", (m + T, b), X)
    lower_matmul(L_inverse, block, stacked[:m])  # A = L^-1 K diag(sqrt(beta))
    stacked[m:] = (beta.sqrt()[:, None] * Y).T
    S = gram(stacked)  # [[A A^T, A y~], [y~^T A^T, y~^T y~]]: a new tensor, kept
    return SparseStatistics(W=S[:m, :m], w=S[:m, m:], yy=S[m:, m:].diagonal().sum(),
                            trace=(beta * kernel.diag(X, theta, part="signal")).sum(),
                            log_noise=torch.log(noise).sum(), n=b)


def block_statistics(X, Y, alpha, kernel, theta, Z, L_inverse, batch_size):
    """Pass 1 over one block of rows: :func:`accumulate_statistics` (``Rows.map_sum``)."""
    return accumulate_statistics(kernel, theta, Z, L_inverse, X, Y, alpha, batch_size)


def accumulate_statistics(kernel, theta, Z, L_inverse, X, Y, alpha, batch_size):
    """The row sums over all rows, chunk by chunk (no autograd graph is kept);
    ``L_inverse`` is :func:`whitening`'s ``L^{-1}``."""
    total = None
    with torch.no_grad():
        cross, buffers = stationary_cross(kernel, theta, Z), Buffers()
        for rows in row_chunks(X.shape[0], Z.shape[0], batch_size, X.device):
            part = _chunk_sums(kernel, theta, Z, L_inverse, X[rows], Y[rows], alpha[rows],
                               cross, buffers)
            total = part if total is None else total + part
    return total


def whitening(L):
    """``L^{-1}`` in row-major order, computed once per bound evaluation for both passes."""
    with torch.no_grad():
        return lower_inverse(L).contiguous()


def inducing_cholesky(kernel, theta, Z, jitter, warn=False):
    """``chol(Kzz + jitter * mean(diag) I)``, escalating the jitter tenfold on failure.

    The jitter is part of the sparse model: inducing inputs may nearly
    coincide, and without it ``L^{-1} K_zx`` amplifies round-off without bound.
    float32 gets at least ``1e-6`` (its rounding is ``6e-8``).  Returns ``(L, jitter)``
    with the total jitter added.
    """
    Kzz = kernel(Z, theta=theta, part="signal")
    if Kzz.dtype == torch.float32:
        jitter = max(jitter, 1e-6)
    mean_diag = Kzz.diagonal().mean().abs()
    if float(mean_diag.detach()) == 0.0:
        mean_diag = torch.ones_like(mean_diag)
    # a tensor on the autograd graph: held constant, the jitter's dependence on the
    # signal variance s was missing from d bound / d log s (about 1 nat on 20 000 rows
    # with cond(Kzz) ~ 1e8), and L-BFGS-B stopped at points that were not stationary
    base = jitter * mean_diag
    L, extra = jittered_cholesky(
        Kzz, base_jitter=base, jitter=max(10 * jitter, 1e-12), max_jitter=1e-3, warn=warn,
        name="inducing kernel matrix Kzz",
        advice="use fewer or more spread-out inducing points, or a larger length-scale bound",
    )
    return L, float(base.detach()) + extra


def collapsed_elbo(stats, n_targets):
    """The collapsed bound from the whitened row sums; returns (elbo, LB, c).

    Differentiable with respect to every statistic.
    """
    T = n_targets
    W = 0.5 * (stats.W + stats.W.T)
    B = W + torch.eye(W.shape[0], dtype=W.dtype, device=W.device)
    LB, _ = jittered_cholesky(B, jitter=1e-12, max_jitter=1e-6, warn=False,
                              name="sparse bound matrix I + A A^T",
                              advice="increase the noise level or use fewer inducing points")
    c = solve_lower(LB, stats.w)
    elbo = (-0.5 * stats.n * T * math.log(2 * math.pi)
            - T * torch.log(LB.diagonal()).sum()
            - 0.5 * T * stats.log_noise - 0.5 * stats.yy + 0.5 * (c * c).sum()
            - 0.5 * T * stats.trace + 0.5 * T * W.diagonal().sum())
    return elbo, LB, c


__all__ = [
    "SparseStatistics", "accumulate_statistics", "chunk_statistics", "collapsed_elbo",
    "inducing_cholesky",
]
