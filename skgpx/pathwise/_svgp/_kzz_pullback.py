r"""The SVGP bound's dependence on ``L_z = chol(K_zz)``: the adjoint of ``K_zz`` from the
row sums (``_svgp`` module docstring), its closed-form pullback for a stationary kernel,
and the triangular products and inverse of the engine."""

import numpy as np
import scipy.linalg
import torch

from ..._inducing._collapsed import whitening
from ..._inducing._cross import stationary_cross
from ...linalg import lower_matmul, matmul


def upper_matmul(U, B, out, parts=4):
    """``U @ B`` into ``out`` for an upper-triangular ``U`` (m, m), skipping its zeros
    (row block ``i`` needs the columns from its first row on: 5/8 of a product's flops
    with four blocks, as ``linalg.lower_matmul``)."""
    m = U.shape[0]
    if U.device.type != "cpu" or m < 4 * parts:
        return matmul(U, B, out=out)
    edges = [round(m * i / parts) for i in range(parts + 1)]
    for start, stop in zip(edges[:-1], edges[1:]):
        matmul(U[start:stop, start:], B[start:], out=out[start:stop])
    return out


def zz_adjoint(L_inverse, GAAt):
    r"""The symmetric ``bar K`` with ``<bar K, dK_zz> = <G_A, dA>`` for ``A = L_z^{-1} K_zx``
    (``K_zx`` held fixed), from ``G_A A^T`` alone.

    With ``dL_z = L_z Phi(L_z^{-1} dK_zz L_z^{-T})`` (Murray, "Differentiation of the Cholesky
    decomposition", 2016; ``Phi`` the lower triangle with its diagonal halved),
    ``dA = -Phi(L_z^{-1} dK_zz L_z^{-T}) A`` and

    .. math::

        \bar K = -\operatorname{sym}\big(L_z^{-T} \Phi(G_A A^T) L_z^{-1}\big):

    two ``m x m`` products instead of forming ``dL/dL_z`` and differentiating
    ``torch.linalg.cholesky``.
    """
    P = GAAt.tril()
    P.diagonal().mul_(0.5)
    # both factors triangular: Phi L_z^{-1} is lower, L_z^{-T} upper (5/8 of a product each)
    P = lower_matmul(P, L_inverse, torch.empty_like(P))
    P = upper_matmul(L_inverse.T.contiguous(), P, torch.empty_like(P))
    return -0.5 * (P + P.T)


def triangular_inverse(L):
    """``L^{-1}`` (row-major) of a lower-triangular ``L``: LAPACK ``trtri`` on the CPU
    (``m^3 / 3`` multiply-adds, about 2x faster than a triangular solve against the
    identity for m = 256 on one core), ``_inducing._collapsed.whitening`` elsewhere or under
    autograd."""
    routine = {torch.float64: "dtrtri", torch.float32: "strtri"}.get(L.dtype)
    if L.device.type != "cpu" or L.requires_grad or routine is None or L.dim() != 2:
        return whitening(L)
    # row-major L is column-major L^T (upper): its inverse, read row-major, is L^{-1}
    inverse, info = getattr(scipy.linalg.lapack, routine)(L.contiguous().numpy().T, lower=0)
    if info != 0:
        return whitening(L)
    return torch.from_numpy(np.ascontiguousarray(inverse.T))


def stationary_zz_gradient(kernel, spec, theta, Z, K_bar, jitter):
    """``<bar K, d(K_zz + j s I)>`` in theta and Z for a stationary signal, in closed form.

    ``K_zz = s kappa(r^2)`` and the model's jitter ``j * mean(diag K_zz) = j s``
    (``_inducing._collapsed.inducing_cholesky``); ``bar K`` (:func:`zz_adjoint`) is pulled back
    through ``r^2(Z, Z)`` as a cross-kernel block of Z with itself (its row and column
    derivatives in Z are equal for a symmetric ``bar K``, hence the factor 2).
    """
    with torch.no_grad():
        cross = stationary_cross(kernel, theta, Z)
        K, slope = cross.weighted_block(cross.Zs)
        ones = torch.ones(Z.shape[0], dtype=Z.dtype, device=Z.device)
        if slope is None:  # RBF: dK/dr^2 = -K / 2
            GM = K_bar * K
            KG = GM.sum()
            dl, dz = cross.pullback(GM, -0.5 * ones, cross.Zs, GM.sum(0))
        else:
            KG = (K_bar * K).sum()
            GM = K_bar * slope
            dl, dz = cross.pullback(GM, ones, cross.Zs, GM.sum(0))
        if Z.dtype == torch.float32:
            jitter = max(jitter, 1e-6)
        d_scale = jitter * K_bar.diagonal().sum()
        if cross.scale > 0:
            d_scale = d_scale + KG / cross.scale
    theta_ = theta.detach().clone().requires_grad_(True)
    _, scale_of, length_of = spec
    surrogate = d_scale * scale_of(theta_) + (dl * length_of(theta_)).sum()
    d_theta = None
    if surrogate.requires_grad:
        (d_theta,) = torch.autograd.grad(surrogate, [theta_], allow_unused=True)
    return d_theta, 2.0 * dz


__all__ = ["triangular_inverse", "zz_adjoint"]
