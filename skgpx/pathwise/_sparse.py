"""Sparse GP regression with inducing points: Titsias' collapsed bound over row chunks.

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
from dataclasses import dataclass

import numpy as np
import torch

from .._base import rows_per_chunk
from ..kernels import squared_distance_profile_
from ..linalg import (NotPositiveDefiniteError, gram, jittered_cholesky, lower_inverse,
                      lower_matmul, matmul, solve_lower)
from ._features import Buffers

# Inducing inputs within this many length scales of their mean: cross-kernel blocks for
# draws by the expansion (see StationaryCross.block).
_EXPANSION_RADIUS = 8.0

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

    def reduced_cross(self, K_zq):
        """``(L^{-1} k(Z, X*), L_B^{-1} L^{-1} k(Z, X*))`` for the predictive (co)variance."""
        V1 = solve_lower(self.L, K_zq)
        return V1, solve_lower(self.LB, V1)


def noise_of(kernel, theta, alpha):
    """``sigma_i^2``: ``alpha_i`` plus the level of the kernel's top-level WhiteKernels."""
    return alpha + kernel.noise_level(theta)


@dataclass
class Rows:
    """Training rows held in this process: ``X`` (n, d), ``Y`` (n, T), ``alpha`` (n,).

    The bound only needs sums over rows, so it reaches the data through
    :meth:`map_sum`; ``skgpx._dask.DaskRows`` has the same interface for rows held by
    Dask workers.
    """

    X: torch.Tensor
    Y: torch.Tensor
    alpha: torch.Tensor

    @property
    def n_targets(self):
        return self.Y.shape[1]

    def map_sum(self, function, *args):
        """``function(X_b, Y_b, alpha_b, *args)`` summed over the blocks (here: one)."""
        return function(self.X, self.Y, self.alpha, *args)


# largest |z'|^2 of the inducing inputs (z' = (z - c) / l) for which StationaryCross forms
# r^2 by its expansion: the rounding, ~eps |z'|^2, stays below ~1e-9 in float64
MAX_EXPANSION_NORM = 1e6


class StationaryCross:
    r"""Cross-kernel blocks ``k(Z, X_c) = s kappa(r^2)`` of a stationary signal by one
    matrix product, with the pullback of a weight ``G`` on ``r^2`` in closed form.

    For ``[ConstantKernel *] RBF | Matern(3/2, 5/2)`` (``TorchKernel.stationary_signal``):
    ``r^2 = |z'|^2 + |x'|^2 - 2 z' . x'`` with ``z' = (z - c) / l`` (centred, so the
    expansion's rounding, ``eps |x'|^2``, stays small).  Both norms ride along in the
    product as two extra columns, and for the RBF so do ``log s`` and an optional
    per-column log weight, so that one product and one ``exp`` give the weighted block
    ``s exp(-r^2/2 + log w_j)``.  With ``G = H * s kappa'(r^2)``

    .. math::

        \frac{\partial}{\partial l_d} = -\frac{2}{l_d}\Big(\sum_i z'^2_{id} G_{i.}
          + \sum_j x'^2_{jd} G_{.j} - 2 \sum_i z'_{id} (G X')_{id}\Big), \qquad
        \frac{\partial}{\partial z_i} = \frac{2}{l}\big(z'_i G_{i.} - (G X')_i\big),

    which costs one ``m x b x d`` product instead of autograd through pairwise
    differences.  ``kappa'`` is taken with respect to ``r^2``, finite at ``r = 0``.
    """

    def __init__(self, spec, theta, Z):
        self.profile, scale, length_scale = spec
        with torch.no_grad():
            self.scale = float(scale(theta))
            self.length_scale = length_scale(theta).detach().to(Z.dtype)
            self.Z = Z.detach()
            self.center = Z.mean(0)
            self.Zs = (Z - self.center) / self.length_scale
            self.z_norm = (self.Zs * self.Zs).sum(1)
            self.compact = bool(self.z_norm.max() <= _EXPANSION_RADIUS**2)  # see block()
            ones = torch.ones_like(self.z_norm)[:, None]
            if self.profile == "rbf":  # log(s kappa) = [z', log s - |z'|^2/2, 1] . [x', 1, c]
                log_scale = math.log(self.scale) if self.scale > 0 else -math.inf
                self.Z_aug = torch.cat([self.Zs, (log_scale - 0.5 * self.z_norm)[:, None],
                                        ones], 1)
            else:  # r^2 = [z', |z'|^2, 1] . [-2 x', 1, |x'|^2]
                self.Z_aug = torch.cat([self.Zs, self.z_norm[:, None], ones], 1)
            self.log_scale = math.log(self.scale) if self.scale > 0 else -math.inf
            # the expansion rounds r^2 to about eps (|z'|^2 + |x'|^2), and the entries that
            # matter (x near some z) have |x'| ~ |z'|: beyond MAX_EXPANSION_NORM (Z over 1e3
            # length scales from its centre) differences are taken exactly instead (at
            # 1e16, inputs times 1e8 against unit length scales, k(z, z) came out inf)
            self.exact = bool(self.z_norm.numel()) and float(
                self.z_norm.max()) > MAX_EXPANSION_NORM

    def standardised(self, X):
        return (X - self.center) / self.length_scale

    def _exponent(self, Xs, log_weight=None, out=None):
        """``Z_aug X_aug^T``: the RBF's ``log(s kappa) + log w`` or the Matern's ``r^2``."""
        if self.exact:
            E = torch.cdist(self.Zs, Xs, compute_mode="donot_use_mm_for_euclid_dist")
            E = E.square_()
            if self.profile == "rbf":
                E.mul_(-0.5).add_(self.log_scale)
                if log_weight is not None:
                    E.add_(log_weight)
            return E if out is None else out.copy_(E)
        x_norm = (Xs * Xs).sum(1, keepdim=True)
        ones = torch.ones_like(x_norm)
        if self.profile == "rbf":
            last = -0.5 * x_norm if log_weight is None else log_weight[:, None] - 0.5 * x_norm
            X_aug = torch.cat([Xs, ones, last], 1)
        else:
            X_aug = torch.cat([-2.0 * Xs, ones, x_norm], 1)
        return torch.mm(self.Z_aug, X_aug.T, out=out)

    def weighted_block(self, Xs, log_weight=None, out=None):
        """``k(Z, X) diag(exp(log_weight))`` (m, b) from standardised rows; for the
        Matern profiles also ``s kappa'(r^2)`` (unweighted), else None."""
        E = self._exponent(Xs, log_weight, out)
        if self.profile == "rbf":
            return E.exp_(), None
        K, slope, factor = squared_distance_profile_(E, self.profile)  # E = r^2
        slope.mul_(factor * self.scale)
        K.mul_(self.scale)  # K is E's storage, so ``out`` when given
        if log_weight is not None:
            K.mul_(torch.exp(log_weight))
        return K, slope

    def block(self, X, out=None):
        """``k(Z, X)``: (m, b), formed in place (in ``out`` when given; no derivative terms).

        The expansion's rounding, ``eps (|z'|^2 + |x'|^2)`` in ``r^2``, is an error relative
        to ``k`` that the direct ``sum_d (x'_d - z'_d)^2`` (``eps r^2``) does not have.  For
        the pairs where ``k`` is not negligible, ``|x'| <= |z'| + 4``, so it is a few times
        the direct error while the inducing inputs lie within ``_EXPANSION_RADIUS`` length
        scales of their centre; past that (data spanning hundreds of length scales lost 4
        digits of ``k`` this way) the blocks are formed directly from differences in input
        units, at about 20x the cost of the product (d = 10).  Function draws evaluate
        here: their update weights can be large and cancel, which multiplies the error of
        ``k``.
        """
        if self.compact:
            return self.weighted_block(self.standardised(X), out=out)[0]
        # differences in input units first: standardising far-out points first rounds
        # both to eps |x'| before they cancel
        E = X.new_empty(self.Z.shape[0], X.shape[0]) if out is None else out
        step = torch.empty_like(E)
        for d, length in enumerate(self.length_scale.expand(X.shape[1]).tolist()):
            torch.sub(self.Z[:, d, None], X[None, :, d], out=step).div_(length)
            if d == 0:
                E.copy_(step).mul_(step)
            else:
                E.addcmul_(step, step)
        if self.profile == "rbf":
            return E.mul_(-0.5).exp_().mul_(self.scale)
        K, _, _ = squared_distance_profile_(E, self.profile)
        return K.mul_(self.scale)

    def pullback(self, GM, weight, Xs, GM_colsum):
        """Gradients of ``<G, r^2>`` for ``G = GM diag(weight)``: ``(d l, d Z)``.

        ``G`` is never formed: its row sums and ``G X'`` come from one product of ``GM``
        with ``[weight * X', weight]``, its column sums are ``weight * GM_colsum``.
        """
        if self.exact:  # sum_ij G_ij (z'_i - x'_j) and its square, feature by feature
            G = GM * weight
            spread, pull = Xs.new_empty(Xs.shape[1]), torch.empty_like(self.Zs)
            for d in range(Xs.shape[1]):
                D = self.Zs[:, d, None] - Xs[:, d]
                GD = G * D
                pull[:, d] = GD.sum(1)
                spread[d] = (GD * D).sum()
        else:
            both = matmul(GM, torch.cat([weight[:, None] * Xs, weight[:, None]], 1))
            GX, row = both[:, :-1], both[:, -1]
            col = weight * GM_colsum
            spread = (((self.Zs * self.Zs) * row[:, None]).sum(0)
                      + ((Xs * Xs) * col[:, None]).sum(0) - 2.0 * (self.Zs * GX).sum(0))
            pull = self.Zs * row[:, None] - GX
        d_length = -2.0 * spread / self.length_scale
        if self.length_scale.numel() == 1:
            d_length = d_length.sum().reshape(1)
        d_Z = 2.0 * pull / self.length_scale
        return d_length, d_Z


def stationary_cross(kernel, theta, Z):
    """The fast stationary cross-kernel of ``kernel`` at ``theta``, or None."""
    spec = kernel.stationary_signal()
    return None if spec is None else StationaryCross(spec, theta, Z)


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


def _chunks(n, m, batch_size, device):
    step = rows_per_chunk(batch_size, 4 * m, device)
    return [slice(i, min(i + step, n)) for i in range(0, n, step)]


def block_statistics(X, Y, alpha, kernel, theta, Z, L_inverse, batch_size):
    """Pass 1 over one block of rows: :func:`accumulate_statistics` (``Rows.map_sum``)."""
    return accumulate_statistics(kernel, theta, Z, L_inverse, X, Y, alpha, batch_size)


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


def accumulate_statistics(kernel, theta, Z, L_inverse, X, Y, alpha, batch_size):
    """The row sums over all rows, chunk by chunk (no autograd graph is kept);
    ``L_inverse`` is :func:`whitening`'s ``L^{-1}``."""
    total = None
    with torch.no_grad():
        cross, buffers = stationary_cross(kernel, theta, Z), Buffers()
        for rows in _chunks(X.shape[0], Z.shape[0], batch_size, X.device):
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
    for rows in _chunks(X.shape[0], Z_.shape[0], batch_size, X.device):
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
        for rows in _chunks(X.shape[0], m, batch_size, X.device):
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


def inducing_update(factors, prior_at_Z, xi):
    """Decoupled update weights ``v_s = Kzz^{-1} (u_s - f_s(Z))`` with ``u_s = mu_u + R xi_s``.

    ``u_s = L L_B^{-T} (c + xi_s)`` (optimal ``q(u)``), so ``v_s = L^{-T} (L_B^{-T} (c + xi_s)
    - L^{-1} f_s(Z))``; ``prior_at_Z`` and ``xi`` have shape (m, S, T).
    """
    m, S, T = xi.shape
    whitened = factors.c[:, None, :] + xi
    inner = torch.linalg.solve_triangular(factors.LB.T, whitened.reshape(m, S * T), upper=True)
    inner = inner - solve_lower(factors.L, prior_at_Z.reshape(m, S * T))
    return torch.linalg.solve_triangular(factors.L.T, inner, upper=True).reshape(m, S, T)


def initial_inducing_points(X, n_inducing, rng, max_rows=4096):
    """``n_inducing`` rows of X picked by k-means++ seeding (a random subset when m >= n/2).

    k-means++ runs on a random subset of at most ``max(max_rows, 10 m)`` rows: its cost
    is ``O(n m d log m)``, and on millions of rows the subset gives the same spread.
    """
    from sklearn.cluster import kmeans_plusplus

    n = X.shape[0]
    m = min(int(n_inducing), n)
    if 2 * m >= n:
        return np.array(X[np.sort(rng.choice(n, size=m, replace=False))])
    rows = min(n, max(max_rows, 10 * m))
    # np.asarray gathers only the subset of a Dask array
    subset = np.asarray(X if rows == n else X[np.sort(rng.choice(n, size=rows, replace=False))])
    centers, _ = kmeans_plusplus(subset, n_clusters=m, random_state=rng)
    return np.array(centers)


def check_sparse_noise(noise_min, has_white):
    """Without noise the bound's ``A = L^{-1} K_zx / sigma`` blows up: ask for noise."""
    if not has_white and noise_min < 1e-6:
        raise ValueError(
            f"Sparse mode needs observation noise: alpha={noise_min:.3g} < 1e-6 and the "
            "kernel has no WhiteKernel. Add a WhiteKernel to the kernel or set alpha >= 1e-6."
        )


__all__ = [
    "SparseFactors",
    "SparseStatistics",
    "accumulate_statistics",
    "check_sparse_noise",
    "chunk_statistics",
    "collapsed_elbo",
    "elbo_value_and_grad",
    "fit_factors",
    "inducing_cholesky",
    "inducing_update",
    "initial_inducing_points",
    "predictive_cov",
    "predictive_mean_var",
]
