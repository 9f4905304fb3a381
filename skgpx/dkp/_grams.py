"""Kernels on Gram matrices and their first derivatives (Aitchison, arXiv:2108.13097, App. C, I).

A Gram kernel maps a positive semi-definite Gram matrix ``G`` to a kernel matrix whose
entry ``K_ij`` depends on ``G_ii``, ``G_ij`` and ``G_jj`` only.  Its linearisation,
for a symmetric perturbation ``dG``, is written with two matrices ``M`` and ``N``
(Eqs. 21-23 of Aitchison)::

    dK = dG o M + Diag(dG) N + N^T Diag(dG),      Diag(A) = I o A,

with ``M_ij = dK_ij/dG_ij`` and ``N_ij = dK_ij/dG_ii`` off the diagonal.  On the
diagonal only ``M_ii + 2 N_ii = dK_ii/dG_ii`` is determined; we put it all in ``N``
(``M_ii = 0``) wherever the off-diagonal formula has no finite limit.
"""

import math

import torch

__all__ = [
    "GRAM_KERNELS",
    "chain_derivatives",
    "contract_derivatives",
    "gram_kernel",
    "gram_kernel_derivatives",
    "gram_kernel_diag",
]

GRAM_KERNELS = ("sqexp", "arccos0", "arccos1")


def _cosine_margin(dtype):
    """Off-diagonal cosines stay this far from +-1 where derivatives are taken: the
    arc-cosine derivative ``1/sqrt(1 - C^2)`` is infinite at ``C = +-1``."""
    return max(1e-12, 8.0 * torch.finfo(dtype).eps)


def _tiny(dtype):
    """Smallest ``sqrt(G_ii G_jj)`` used as a divisor (a zero input row has ``G_ii = 0``)."""
    return torch.finfo(dtype).tiny


def _arccos_parts(order, cosine):
    """``J_n(C)`` and ``J_n'(C)`` of Cho and Saul's arc-cosine kernel (Aitchison, App. C.2)."""
    angle_term = math.pi - torch.arccos(cosine)
    if order == 0:
        return angle_term, None
    return torch.sqrt(torch.clamp(1.0 - cosine * cosine, min=0.0)) + angle_term * cosine, angle_term


class _ArccosProfile(torch.autograd.Function):
    """``J_n(C)`` with its analytic derivative for autograd.

    Differentiating the formula of :func:`_arccos_parts` term by term gives NaN at
    ``C = +-1`` (a Gram diagonal, or two equal rows) even where the result's gradient is
    zero: ``d sqrt(1 - C^2)`` and ``d arccos C`` are infinite there (``inf - inf`` for
    ``n = 1``, and ``0 * inf`` when the entry is then overwritten by the diagonal rule).
    ``J_1'(C) = pi - arccos C`` is finite everywhere; ``J_0'(C) = 1/sqrt(1 - C^2)`` is taken
    at the cosine clamped by :func:`_cosine_margin`, the slope that the ``M`` of
    :func:`gram_kernel_derivatives` uses.
    """

    @staticmethod
    def forward(ctx, cosine, order):
        ctx.save_for_backward(cosine)
        ctx.order = order
        return _arccos_parts(order, cosine)[0]

    @staticmethod
    def backward(ctx, grad):
        (cosine,) = ctx.saved_tensors
        if ctx.order == 1:
            slope = math.pi - torch.arccos(cosine)
        else:
            bound = 1.0 - _cosine_margin(cosine.dtype)
            clamped = torch.clamp(cosine, -bound, bound)
            slope = 1.0 / torch.sqrt(1.0 - clamped * clamped)
        return grad * slope, None


def gram_kernel(name, cross, row_diag, col_diag):
    """One block of ``K(G)`` from the matching block of ``G`` and the two diagonals.

    Parameters
    ----------
    name : {'sqexp', 'arccos0', 'arccos1'}
    cross : Tensor of shape (a, b)
        ``G_ij`` for rows ``i`` and columns ``j`` of the block.
    row_diag, col_diag : Tensor of shape (a,) and (b,)
        ``G_ii`` of the rows and ``G_jj`` of the columns.

    Returns
    -------
    Tensor of shape (a, b)
        ``sqexp``: ``exp(-(G_ii - 2 G_ij + G_jj) / 2)``; ``arccos<n>``:
        ``s^n J_n(C) / pi`` with ``s = sqrt(G_ii G_jj)`` and ``C = G_ij / s``.
    """
    if name == "sqexp":
        half_sq_dist = 0.5 * (row_diag[:, None] + col_diag[None, :]) - cross
        return torch.exp(-torch.clamp(half_sq_dist, min=0.0))
    order = int(name[-1])
    norm = torch.sqrt(torch.clamp(row_diag[:, None] * col_diag[None, :], min=0.0))
    cosine = torch.clamp(cross / torch.clamp(norm, min=_tiny(cross.dtype)), -1.0, 1.0)
    j_value = _ArccosProfile.apply(cosine, order)
    return j_value / math.pi if order == 0 else norm * j_value / math.pi


def gram_kernel_diag(name, diag):
    """``K_ii`` from ``G_ii``: 1 for ``sqexp`` and ``arccos0``, ``G_ii`` for ``arccos1``."""
    return diag.clone() if name == "arccos1" else torch.ones_like(diag)


def _square_kernel(name, gram):
    diag = gram.diagonal()
    kernel = gram_kernel(name, gram, diag, diag)  # symmetric: entry (i, j) only uses G_ij
    exact = gram_kernel_diag(name, diag)
    if kernel.requires_grad:  # out of place, so that autograd can differentiate through it
        return kernel + torch.diag_embed(exact - kernel.diagonal())
    kernel.diagonal().copy_(exact)
    return kernel


def gram_kernel_derivatives(name, gram, derivatives=True):
    """``K(G)`` of a square Gram matrix and, optionally, its derivatives ``M`` and ``N``.

    Parameters
    ----------
    name : {'sqexp', 'arccos0', 'arccos1'}
    gram : Tensor of shape (P, P)
        Symmetric positive semi-definite Gram matrix.
    derivatives : bool, default=True
        Return ``(K, M, N)``; with False return ``K`` only.

    Notes
    -----
    ``sqexp``: ``M = K`` and ``N = -K/2`` (the diagonal rule holds since ``K_ii = 1``).
    ``arccos<n>`` (Aitchison, arXiv:2108.13097, Eqs. 100, 104)::

        M_ij = s^(n-1) J_n'(C) / pi,
        N_ij = (n K_ij / 2 - s^n J_n'(C) C / (2 pi)) / G_ii,

    and on the diagonal ``M_ii = 0``, ``N_ii = n G_ii^(n-1) / 2``.
    """
    kernel = _square_kernel(name, gram)
    if not derivatives:
        return kernel
    if name == "sqexp":
        return kernel, kernel, -0.5 * kernel
    order = int(name[-1])
    diag = gram.diagonal()
    tiny = _tiny(gram.dtype)
    safe_diag = torch.clamp(diag, min=tiny)
    raw_norm = torch.sqrt(torch.clamp(diag[:, None] * diag[None, :], min=0.0))
    norm = torch.clamp(raw_norm, min=tiny)
    bound = 1.0 - _cosine_margin(gram.dtype)
    cosine = torch.clamp(gram / norm, -bound, bound)
    if order == 0:
        slope = 1.0 / torch.sqrt(1.0 - cosine * cosine)
        m_matrix = slope / (math.pi * norm)
        n_matrix = -(slope * cosine) / (2.0 * math.pi) / safe_diag[:, None]
    else:
        slope = _arccos_parts(1, cosine)[1]
        m_matrix = slope / math.pi
        n_matrix = (0.5 * kernel - norm * slope * cosine / (2.0 * math.pi)) / safe_diag[:, None]
    # A point at the origin of the Gram space (G_ii = 0) has no direction, and the
    # arc-cosine kernel is not differentiable there: its rows get no gradient.
    degenerate = raw_norm <= math.sqrt(tiny)
    m_matrix = torch.where(degenerate, 0.0, m_matrix)
    n_matrix = torch.where(degenerate, 0.0, n_matrix)
    m_matrix.diagonal().zero_()
    n_matrix.diagonal().fill_(0.5 * order)
    return kernel, m_matrix, n_matrix


def contract_derivatives(m_matrix, n_matrix, weight):
    """``M o A + 2 Diag(N A)`` for a symmetric ``A`` (Aitchison, Eqs. 25, 31, corrected).

    With ``A = K^-1`` this is ``D``, the gradient of ``log|K(G)|`` in ``G``; with
    ``A = K^-1 G' K^-1`` it is ``T``, minus the gradient of ``Tr(K(G)^-1 G')``.
    The paper prints ``Diag(A N)``; ``Diag(N A)`` is the correct form whenever ``N``
    is not symmetric (arc-cosine kernels).  ``n_matrix=None`` stands for ``N = 0``.
    """
    out = m_matrix * weight
    if n_matrix is not None:
        # (N A)_ii = sum_k N_ik A_ki = sum_k N_ik A_ik for symmetric A
        out.diagonal().add_(2.0 * (n_matrix * weight).sum(dim=1))
    return out


def chain_derivatives(inner, outer):
    """Derivatives of ``K_b(K_a(G))`` from those of ``K_a`` (inner) and ``K_b`` (outer).

    The paper's Eqs. 148 and 151::

        M = M_a o M_b,      N = M_b o N_a + Diag(M_a + 2 N_a) N_b.

    ``outer`` is evaluated at ``K_a(G)``.  ``N`` may be None for zero.
    """
    m_inner, n_inner = inner
    m_outer, n_outer = outer
    m_matrix = m_inner * m_outer
    n_matrix = None if n_inner is None else n_inner * m_outer
    if n_outer is not None:
        slope = m_inner.diagonal() if torch.is_tensor(m_inner) and m_inner.dim() == 2 else m_inner
        if n_inner is not None:
            slope = slope + 2.0 * n_inner.diagonal()
        term = (slope[:, None] if torch.is_tensor(slope) and slope.dim() else slope) * n_outer
        n_matrix = term if n_matrix is None else n_matrix + term
    return m_matrix, n_matrix
