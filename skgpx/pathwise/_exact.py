"""Exact Gaussian-process algebra in torch: marginal likelihood and predictive moments.

Notation: ``K_A = k(X, X) + diag(alpha)`` (the full kernel, so a ``WhiteKernel`` is on
its diagonal), ``L = chol(K_A)``, ``a = K_A^{-1} y``.
"""

import math
import warnings

import numpy as np
import torch

from .._base import rows_per_chunk
from ..linalg import cholesky_solve, logdet_from_cholesky, solve_lower, try_cholesky

def log_marginal_likelihood(kernel, theta, X, Y, alpha, eval_gradient=False):
    """scikit-learn's log marginal likelihood, summed over targets, and its gradient.

    .. math::

        \\log p(y) = -\\tfrac12 y^T K_A^{-1} y - \\sum_i \\log L_{ii} - \\tfrac n2 \\log 2\\pi,
        \\qquad
        \\frac{\\partial \\log p}{\\partial \\theta}
          = \\tfrac12 \\operatorname{tr}\\big((a a^T - K_A^{-1})
            \\frac{\\partial K}{\\partial \\theta}\\big)

    The gradient backpropagates ``0.5 * sum(W * K(theta))`` with ``W`` fixed, so autograd
    differentiates the kernel only, never the Cholesky factorisation.

    Parameters
    ----------
    kernel : TorchKernel
    theta : Tensor of shape (n_dims,)
        Log hyperparameters (scikit-learn's ``theta``).
    X : Tensor of shape (n, d)
    Y : Tensor of shape (n, T)
    alpha : Tensor of shape (n,)
        Diagonal added to the kernel matrix.
    eval_gradient : bool

    Returns
    -------
    lml : float
        ``-inf`` when ``K_A`` is not positive definite (as in scikit-learn).
    gradient : ndarray of shape (n_dims,), only if ``eval_gradient``
    """
    theta = theta.detach().clone().requires_grad_(eval_gradient)
    with torch.set_grad_enabled(eval_gradient):
        K = kernel(X, theta=theta)
    K_A = K.detach().clone()
    K_A.diagonal().add_(alpha)
    L = try_cholesky(K_A)
    if L is None:
        return (-np.inf, np.zeros(theta.shape[0])) if eval_gradient else -np.inf
    a = cholesky_solve(L, Y)
    lml = lml_from_factor(L, Y, a)
    if not eval_gradient:
        return lml
    if theta.shape[0] == 0:
        return lml, np.zeros(0)
    W = a @ a.T - Y.shape[1] * torch.cholesky_inverse(L)
    (0.5 * (W * K).sum()).backward()
    return lml, theta.grad.detach().cpu().numpy().astype(np.float64)


def lml_from_factor(L, Y, a):
    """Log marginal likelihood from ``L = chol(K_A)`` and ``a = K_A^{-1} Y``, summed over targets."""
    n, n_targets = Y.shape
    lml = (-0.5 * (Y * a).sum() - 0.5 * n_targets * logdet_from_cholesky(L)
           - 0.5 * n * n_targets * math.log(2 * math.pi))
    return float(lml)


def predictive_mean_var(cross, prior_diag, L, a, Xq, batch_size, want_var):
    """Posterior mean (and variance) in row chunks; never an n* x n* matrix.

    Parameters
    ----------
    cross : callable
        ``cross(Xc) -> k(Xc, X_train)`` of shape (b, n).
    prior_diag : callable
        ``prior_diag(Xc) -> (b,)`` prior variance at the query rows.
    L, a : Tensors
        Cholesky factor of ``K_A`` and ``K_A^{-1} y`` of shape (n, T).

    Returns
    -------
    mean : Tensor (n*, T)
    var : Tensor (n*,) or None
    """
    step = rows_per_chunk(batch_size, L.shape[0], L.device)
    mean = a.new_empty(Xq.shape[0], a.shape[1])
    var = a.new_empty(Xq.shape[0]) if want_var else None
    for start in range(0, Xq.shape[0], step):
        rows = slice(start, start + step)
        Ks = cross(Xq[rows])
        mean[rows] = Ks @ a
        if want_var:
            var[rows] = prior_diag(Xq[rows]) - (solve_lower(L, Ks.T) ** 2).sum(0)
    return mean, var


def predictive_cov(cross, prior_cov, L, Xq):
    """Posterior covariance ``k(X*, X*) - k(X*, X) K_A^{-1} k(X, X*)`` (dense)."""
    V = solve_lower(L, cross(Xq).T)
    return prior_cov(Xq) - V.T @ V


def clip_negative_variance(var):
    """Set tiny negative variances (round-off) to zero with scikit-learn's warning."""
    negative = var < 0
    if bool(negative.any()):
        warnings.warn(
            "Predicted variances smaller than 0. Setting those variances to 0.",
            UserWarning,
        )
        var = torch.where(negative, torch.zeros_like(var), var)
    return var
