"""Dense linear algebra shared by the families: jittered Cholesky, solves, log-determinants.

Every factorisation of a kernel matrix goes through :func:`jittered_cholesky`, which
tries the matrix as given first, then escalates a diagonal jitter, warns once with the
jitter it used and finally raises :class:`NotPositiveDefiniteError` with advice.
"""

import warnings

import numpy as np
import torch

__all__ = [
    "NotPositiveDefiniteError",
    "cholesky_solve",
    "jittered_cholesky",
    "logdet_from_cholesky",
    "solve_lower",
]


class NotPositiveDefiniteError(np.linalg.LinAlgError):
    """A kernel matrix stayed non positive definite after the largest allowed jitter."""


def _try_cholesky(matrix, shift):
    if shift:
        matrix = matrix + shift * torch.eye(
            matrix.shape[-1], dtype=matrix.dtype, device=matrix.device
        )
    factor, info = torch.linalg.cholesky_ex(matrix)
    if bool((info != 0).any()) or not bool(torch.isfinite(factor).all()):
        return None
    return factor


def jittered_cholesky(
    matrix,
    *,
    jitter=1e-6,
    max_jitter=1e-3,
    base_jitter=0.0,
    name="kernel matrix",
    advice="increase the noise level (alpha or a WhiteKernel) or use a smoother kernel",
):
    """Lower Cholesky factor of a symmetric matrix, adding diagonal jitter only if needed.

    The matrix (plus ``base_jitter``, a jitter that is part of the model) is factorised
    as given first.  On failure a jitter of ``jitter * mean(diag)`` is added and grown
    tenfold per retry up to ``max_jitter * mean(diag)``.  A ``UserWarning`` names the
    jitter that worked.

    Parameters
    ----------
    matrix : Tensor of shape (..., n, n)
        Symmetric matrix (or batch), not modified.
    jitter, max_jitter : float
        First and largest extra jitter, relative to the mean of the diagonal.
    base_jitter : float
        Absolute jitter always added (0 for none).
    name, advice : str
        Used in the warning and error messages.

    Returns
    -------
    factor : Tensor of shape (..., n, n)
        Lower-triangular ``L`` with ``L L^T = matrix + (base_jitter + extra) I``.
    extra_jitter : float
        The escalated jitter that was added beyond ``base_jitter`` (0.0 when none).

    Raises
    ------
    NotPositiveDefiniteError
        If the matrix holds non-finite values, or is still not positive definite
        with the largest jitter.
    """
    if not bool(torch.isfinite(matrix).all()):
        raise NotPositiveDefiniteError(
            f"The {name} contains NaN or infinite values; check the kernel "
            "hyperparameters and the input data."
        )
    factor = _try_cholesky(matrix, base_jitter)
    if factor is not None:
        return factor, 0.0
    scale = float(matrix.diagonal(dim1=-2, dim2=-1).mean().abs()) or 1.0
    extra = jitter * scale
    while 0 < extra <= max_jitter * scale * (1 + 1e-9):
        factor = _try_cholesky(matrix, base_jitter + extra)
        if factor is not None:
            warnings.warn(
                f"The {name} was not numerically positive definite; added a jitter "
                f"of {extra:.3g} ({extra / scale:.1e} of its mean diagonal) to factorise it.",
                UserWarning,
                stacklevel=2,
            )
            return factor, extra
        extra *= 10.0
    raise NotPositiveDefiniteError(
        f"The {name} is not positive definite, even with a jitter of "
        f"{max_jitter:.1e} of its mean diagonal: {advice}."
    )


def cholesky_solve(factor, rhs):
    """Solve ``(L L^T) X = rhs`` given the lower Cholesky factor ``L``."""
    return torch.cholesky_solve(rhs, factor, upper=False)


def solve_lower(factor, rhs):
    """Solve ``L X = rhs`` for a lower-triangular ``L``."""
    return torch.linalg.solve_triangular(factor, rhs, upper=False)


def logdet_from_cholesky(factor):
    """``log det(L L^T)`` from the lower Cholesky factor ``L``."""
    return 2.0 * torch.log(factor.diagonal(dim1=-2, dim2=-1)).sum(-1)
