"""SGPR: the collapsed bound (:mod:`skgpx._inducing._collapsed`) and its gradient.

The gradient takes a second pass.  With ``G_W``, ``G_w`` the adjoints of the bound with
respect to ``W`` and ``w``, holding ``L`` fixed, a chunk contributes
``sum_i beta_i (a_i^T G_W a_i + a_i^T G_w y_i)``: its kernel block is recomputed and
whitened again, and the derivative with respect to the block,
``L^{-T} (2 G_W A + G_w Y^T) diag(beta)``, is formed from the whitened block (the
unwhitened adjoint ``L^{-T} G_W L^{-1}`` has entries of size ``cond(Kzz)`` that cancel,
and made the gradient of a 200 000-row bound wrong by 1e-4 per row).  The dependence on
``L`` through ``Kzz`` is differentiated once on the small ``m x m`` graph.  A value and
gradient cost about ``7 n m^2`` flops in products (four of them triangular).  The optimal
``q(u) = N(mu_u, R R^T)`` has ``R = L L_B^{-T}`` and ``mu_u = R c``.
"""

import math

import torch

from ..._buffers import Buffers
from ..._inducing._collapsed import (
    SparseStatistics, block_statistics, collapsed_elbo, inducing_cholesky, noise_of, whitening,
)
from ..._inducing._cross import stationary_cross
from ..._inducing._rows import row_chunks
from ...linalg import NotPositiveDefiniteError, lower_matmul, matmul, solve_lower


def block_gradient(X, Y, alpha, kernel, theta, Z, adjoints, batch_size, grad_theta, grad_Z):
    """Pass 2 over one block of rows: its share of ``(d theta, d Z)``, flattened.

    Linear in the rows, so the shares of any partition of the rows sum to the
    gradient; zeros stand for a gradient that is not wanted.
    """
    theta_ = theta.detach().clone().requires_grad_(grad_theta)
    Z_ = Z.detach().clone().requires_grad_(grad_Z)
    cross = stationary_cross(kernel, theta, Z)
    if cross is None:
        _generic_pass(kernel, theta_, Z_, X, Y, alpha, adjoints, batch_size)
    else:
        _stationary_pass(kernel, theta_, Z_, X, Y, alpha, adjoints, batch_size, cross)
    parts = [theta_.grad if theta_.grad is not None else torch.zeros_like(theta)]
    if grad_Z:
        parts.append((Z_.grad if Z_.grad is not None else torch.zeros_like(Z)).reshape(-1))
    return torch.cat(parts)


def _rewhitened(stats, L, L0):
    """The row sums as functions of ``L`` near ``L0`` (their value, to first order).

    ``W = L^{-1} P L^{-T}`` and ``w = L^{-1} b`` with ``P``, ``b`` held fixed: with
    ``D = L0^{-1} L`` (the identity at ``L = L0``) they are ``D^{-1} W0 D^{-T}`` and
    ``D^{-1} w0``.  The values returned are exactly ``W0`` and ``w0``; only their
    derivatives with respect to ``L`` come from the graph.
    """
    D = solve_lower(L0, L)

    def solve(R):
        return torch.linalg.solve_triangular(D, R, upper=False)

    W = solve(solve(stats.W.detach()).T).T
    w = solve(stats.w.detach())
    W = stats.W + (W - W.detach())
    w = stats.w + (w - w.detach())
    return SparseStatistics(W, w, stats.yy, stats.trace, stats.log_noise, stats.n)


def elbo_value_and_grad(kernel, theta, Z, rows, *, jitter, batch_size,
                        grad_theta=True, grad_Z=False):
    """The collapsed bound and its gradients in two passes over row chunks.

    ``rows`` is a :class:`Rows` (or a ``DaskRows``): each pass is one ``map_sum`` over
    its blocks, and only ``m x m`` quantities travel between passes.
    Pass 1 accumulates the whitened row sums without a graph.  The bound is then
    differentiated with respect to the sums (their adjoints) and, through ``L`` and
    ``Kzz``, directly with respect to theta and Z.  Pass 2 recomputes each chunk's
    kernel block and backpropagates the linearisation
    ``sum_i beta_i (a_i^T G_W a_i + a_i^T G_w y_i) + ...`` in whitened form
    (:func:`whitened_weights`).

    Returns
    -------
    elbo : float
        ``-inf`` when a matrix of the bound cannot be factorised at this point.
    grad_theta : Tensor of shape (n_dims,) or None
    grad_Z : Tensor of shape (m, d) or None
    """
    want = grad_theta or grad_Z
    theta_ = theta.detach().clone().requires_grad_(grad_theta)
    Z_ = Z.detach().clone().requires_grad_(grad_Z)
    zero = torch.zeros_like
    try:
        with torch.set_grad_enabled(want):
            L, _ = inducing_cholesky(kernel, theta_, Z_, jitter)
        L0, L_inverse = L.detach(), whitening(L)
        stats = rows.map_sum(block_statistics, kernel, theta.detach(), Z.detach(), L_inverse,
                             batch_size)
        leaves = [t.detach().clone().requires_grad_(want) for t in stats.tensors()]
        leaf_stats = SparseStatistics(*leaves, n=stats.n)
        with torch.set_grad_enabled(want):
            graph_stats = _rewhitened(leaf_stats, L, L0) if want else leaf_stats
            elbo, _, _ = collapsed_elbo(graph_stats, rows.n_targets)
    except NotPositiveDefiniteError:
        # an optimizer's trial point beyond what float arithmetic can factorise: -inf
        # makes the line search step back, as scikit-learn's exact likelihood does
        return -math.inf, zero(theta) if grad_theta else None, zero(Z) if grad_Z else None
    if not want:
        return float(elbo.detach()), None, None
    direct = [t for t, on in ((theta_, grad_theta), (Z_, grad_Z)) if on]
    grads = torch.autograd.grad(elbo, leaves + direct, allow_unused=True)
    G_W, G_w, g_yy, g_trace, g_log = grads[:5]
    direct = [zero(t) if g is None else g for t, g in zip(direct, grads[5:])]
    with torch.no_grad():
        m, T = G_w.shape
        # [[L^-T G_W, L^-T G_w/2], [G_w^T/2, 0]]: one product with [A; Y^T] per chunk
        # gives M and G_w^T A / 2 (whitened_weights)
        G_aug = G_W.new_zeros(m + T, m + T)
        G_aug[:m, :m] = 0.5 * (G_W + G_W.T)
        G_aug[:m, m:] = 0.5 * G_w
        G_aug[:m] = L_inverse.T @ G_aug[:m]
        G_aug[m:, :m] = 0.5 * G_w.T
    adjoints = tuple(g.detach() for g in (G_aug, L_inverse, g_yy, g_trace, g_log))
    shares = rows.map_sum(block_gradient, kernel, theta.detach(), Z.detach(), adjoints,
                          batch_size, grad_theta, grad_Z)
    n_theta = theta.numel()
    out_theta = direct[0] + shares[:n_theta] if grad_theta else None
    out_Z = direct[-1] + shares[n_theta:].reshape(Z.shape) if grad_Z else None
    return float(elbo.detach()), out_theta, out_Z


def whitened_weights(K, Yc, G_aug, L_inverse, buffers):
    r"""A chunk's weights in the linearised bound, from its whitened block.

    With ``A = L^{-1} K`` and ``G_aug = [[L^{-T} G_W, L^{-T} G_w/2], [G_w^T/2, 0]]``
    (formed once per evaluation), one product ``G_aug [A; Y^T]`` gives

    * ``M = L^{-T} (G_W A + G_w Y^T / 2)``, so that the share's derivative with respect
      to ``K`` is ``2 M diag(beta)`` (``K`` in the unit-noise scaling), and
    * ``G_w^T A / 2``, for the per-row weights ``a_i^T G_W a_i + a_i^T G_w y_i``
      ``= k_i^T M_i + y_i^T G_w^T a_i / 2`` (``k_i^T M_i = a_i^T (G_W a_i + G_w y_i/2)``).

    The adjoint multiplies the whitened block ``A``, never ``K``: forming
    ``L^{-T} G_W L^{-1}`` once and multiplying it with ``K`` saves the whitening but
    cancels terms of size ``cond(Kzz)``; on 200 000 rows of friedman1 the gradient was
    then wrong by 1e-4 per row, above its true value near the optimum, and L-BFGS-B could
    not converge.  Here the rounding grows only with ``cond(L) = cond(Kzz)^{1/2}`` (in
    ``k_i^T M_i``, as in the pullback through ``M * K``).  Returns
    ``(M, colsum(K * M), per_row)``; ``M`` lives in ``buffers``.
    """
    m, b = K.shape
    stacked = buffers.get("whitened", (m + Yc.shape[1], b), K)
    lower_matmul(L_inverse, K, stacked[:m])  # A
    stacked[m:] = Yc.T
    product = matmul(G_aug, stacked, out=buffers.get("product", stacked.shape, K))
    M, half_GwA = product[:m], product[m:]
    KM = (K * M).sum(0)
    return M, KM, KM + (Yc * half_GwA.T).sum(1)


def _generic_pass(kernel, theta_, Z_, X, Y, alpha, adjoints, batch_size):
    """Pass 2 by autograd through each chunk's kernel block (any kernel)."""
    G_aug, L_inverse, g_yy, g_trace, g_log = adjoints
    buffers = Buffers()
    for rows in row_chunks(X.shape[0], Z_.shape[0], batch_size, X.device):
        Xc, Yc = X[rows], Y[rows]
        K = kernel(Z_, Xc, theta=theta_, part="signal")
        noise = noise_of(kernel, theta_, alpha[rows])
        beta = 1.0 / noise
        with torch.no_grad():
            # the chunk's share is linear in K with weights 2 M diag(beta) (beta held
            # fixed) and linear in beta with the per-row weights (K held fixed)
            M, _, per_row = whitened_weights(K.detach().contiguous(), Yc, G_aug, L_inverse,
                                             buffers)
            weights = 2.0 * M * beta
            per_row = per_row + g_yy * (Yc * Yc).sum(1)
        surrogate = ((K * weights).sum() + (beta * per_row).sum()
                     + g_trace * (beta * kernel.diag(Xc, theta_, part="signal")).sum()
                     + g_log * torch.log(noise).sum())
        surrogate.backward()


def _stationary_pass(kernel, theta_, Z_, X, Y, alpha, adjoints, batch_size, cross):
    """Pass 2 in closed form for a stationary signal (:class:`StationaryCross`).

    A chunk's share is linear in its block ``K`` with the weights ``2 M diag(beta)`` and
    in ``beta`` with per-row weights (:func:`whitened_weights`).  The beta weighting is
    left on vectors (for the RBF, ``G = H * s kappa' = -(M * K) diag(beta)``), so that a
    chunk costs two large products (one of them triangular) and a few passes over an
    ``m x b`` array.  Accumulates the gradients with respect to ``s``, ``l``, the
    white-noise level and Z over the chunks, then maps ``(s, l, noise)`` to theta on a
    graph of a few scalars.
    """
    G_aug, L_inverse, g_yy, g_trace, g_log = adjoints
    m = L_inverse.shape[0]
    _, scale_of, length_of = kernel.stationary_signal()
    with torch.no_grad():
        white = kernel.noise_level(theta_.detach())
        d_scale = torch.zeros((), dtype=X.dtype, device=X.device)
        d_length = torch.zeros_like(cross.length_scale)
        d_white = torch.zeros((), dtype=X.dtype, device=X.device)
        d_Z = torch.zeros_like(Z_)
        buffers = Buffers()
        for rows in row_chunks(X.shape[0], m, batch_size, X.device):
            Yc = Y[rows]
            Xs = cross.standardised(X[rows])
            beta = 1.0 / (alpha[rows] + white)
            K, slope = cross.weighted_block(Xs, out=buffers.get("block", (m, Xs.shape[0]), Xs))
            M, KM_colsum, per_row = whitened_weights(K, Yc, G_aug, L_inverse, buffers)
            if slope is None:  # RBF: s kappa' = -K / 2, so G = -(M * K) diag(beta)
                dl, dz = cross.pullback(M.mul_(K), -beta, Xs, KM_colsum)
            else:  # Matern: G = 2 (M * slope) diag(beta)
                GM = M.mul_(slope)
                dl, dz = cross.pullback(GM, 2.0 * beta, Xs, GM.sum(0))
            per_row = per_row + g_yy * (Yc * Yc).sum(1)
            # d <H, K> / d s = <H, K> / s (K = s kappa); s = 0 only when it is fixed
            if cross.scale > 0:
                d_scale += 2.0 * (beta * KM_colsum).sum() / cross.scale
            d_scale += g_trace * beta.sum()  # the trace term is sum_i beta_i s
            d_length += dl
            d_Z += dz
            # beta_i = 1 / (alpha_i + white): d beta / d white = -beta^2
            d_white += g_log * beta.sum() - (beta * beta * (per_row + g_trace * cross.scale)).sum()
    if theta_.requires_grad:
        surrogate = (d_scale * scale_of(theta_) + (d_length * length_of(theta_)).sum()
                     + d_white * kernel.noise_level(theta_))
        if surrogate.requires_grad:
            surrogate.backward()
    if Z_.requires_grad:
        Z_.grad = d_Z if Z_.grad is None else Z_.grad + d_Z


__all__ = ["block_gradient", "elbo_value_and_grad", "whitened_weights"]
