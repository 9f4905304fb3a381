"""Exact Gaussian-process algebra in torch: marginal likelihood and predictive moments.

Notation: ``K_A = k(X, X) + diag(alpha)`` (the full kernel, so a ``WhiteKernel`` is on
its diagonal), ``L = chol(K_A)``, ``a = K_A^{-1} y``.
"""

import math
import warnings
from dataclasses import dataclass

import numpy as np
import torch
from sklearn.exceptions import ConvergenceWarning

from ..._base import rows_per_chunk
from ..._krylov import (
    JacobiPreconditioner, KernelOperator, PivotedCholeskyPreconditioner, block_cg,
    pivoted_cholesky,
)
from ...linalg import cholesky_solve, logdet_from_cholesky, solve_lower, try_cholesky


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
    """Log marginal likelihood from ``L = chol(K_A)`` and ``a = K_A^{-1} Y``, summed over
    targets."""
    n, n_targets = Y.shape
    lml = (-0.5 * (Y * a).sum() - 0.5 * n_targets * logdet_from_cholesky(L)
           - 0.5 * n * n_targets * math.log(2 * math.pi))
    return float(lml)


def _explained(post, Ks):
    """``diag(Ks K_A^{-1} Ks^T)`` for a (b, n) block: by the Cholesky factor, or by CG."""
    if post.L is not None:
        return (solve_lower(post.L, Ks.T) ** 2).sum(0)
    solution, _ = post.cg.solve(Ks.T.contiguous(), what="the predictive variance")
    return (Ks.T * solution).sum(0)


def predictive_mean_var(cross, prior_diag, post, a, Xq, batch_size, want_var):
    """Posterior mean (and variance) in row chunks; never an n* x n* matrix.

    Parameters
    ----------
    cross : callable
        ``cross(Xc) -> k(Xc, X_train)`` of shape (b, n).
    prior_diag : callable
        ``prior_diag(Xc) -> (b,)`` prior variance at the query rows.
    post : Posterior
        Exact-mode posterior: its Cholesky factor ``L`` of ``K_A``, or its CG solver
        (one solve with ``b`` right-hand sides per chunk for the variance).
    a : Tensor of shape (n, T)
        ``K_A^{-1} y``.

    Returns
    -------
    mean : Tensor (n*, T)
    var : Tensor (n*,) or None
    """
    n = post.X.shape[0]
    step = rows_per_chunk(batch_size, n, a.device)
    if post.L is None and want_var:
        step = min(step, 256)  # right-hand sides per CG solve: memory O(n * step)
    mean = a.new_empty(Xq.shape[0], a.shape[1])
    var = a.new_empty(Xq.shape[0]) if want_var else None
    for start in range(0, Xq.shape[0], step):
        rows = slice(start, start + step)
        Ks = cross(Xq[rows])
        mean[rows] = Ks @ a
        if want_var:
            var[rows] = prior_diag(Xq[rows]) - _explained(post, Ks)
    return mean, var


def predictive_cov(cross, prior_cov, post, Xq):
    """Posterior covariance ``k(X*, X*) - k(X*, X) K_A^{-1} k(X, X*)`` (dense)."""
    Ks = cross(Xq)
    if post.L is not None:
        V = solve_lower(post.L, Ks.T)
        return prior_cov(Xq) - V.T @ V
    solution, _ = post.cg.solve(Ks.T.contiguous(), what="the predictive covariance")
    cov = prior_cov(Xq) - Ks @ solution
    return 0.5 * (cov + cov.T)


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


@dataclass
class CGSolver:
    """Solves ``K_A V = R`` by preconditioned block CG, ``K_A`` never formed.

    ``K_A = k(X, X) + diag(noise)``; products with it run over row chunks
    (:class:`skgpx.linalg.KernelOperator`).  ``factor`` is the rank-r pivoted Cholesky
    factor of ``k(X, X)`` (Woodbury preconditioner with ``diag(noise)``), or None for
    the Jacobi preconditioner.  A dataclass of tensors, so it pickles from the CPU.
    """

    kernel: object  # TorchKernel
    X: torch.Tensor
    theta: torch.Tensor
    noise: torch.Tensor  # (n,)
    factor: torch.Tensor  # (n, r) or None
    tol: float
    max_iter: int

    @classmethod
    def build(cls, kernel, X, theta, noise, *, rank, tol, max_iter):
        solver = cls(kernel, X, theta, noise, None, tol, max_iter)
        if rank > 0:
            operator = solver.operator()
            solver.factor = pivoted_cholesky(
                operator.diagonal(include_shift=False),
                lambda index: operator.rows(index, include_shift=False), min(rank, X.shape[0]))
        return solver

    def operator(self):
        return KernelOperator(self.kernel, self.X, self.theta, self.noise, part="signal")

    def preconditioner(self, operator):
        if self.factor is None:
            return JacobiPreconditioner(operator.diagonal())
        return PivotedCholeskyPreconditioner(self.factor, self.noise)

    def solve(self, rhs, what="the kernel system", *, callback=None, operator=None):
        """``K_A^{-1} rhs`` for rhs of shape (n, r); returns (solution, n_iter).

        ``callback`` goes to :func:`skgpx._krylov.block_cg`; ``operator``, this
        solver's :meth:`operator` when the caller has built it already.
        """
        operator = self.operator() if operator is None else operator
        result = block_cg(operator.matmul, rhs, preconditioner=self.preconditioner(operator),
                          tol=self.tol, max_iter=self.max_iter, callback=callback)
        if not result.converged:
            worst = float(result.relative_residuals.max())
            warnings.warn(
                f"Conjugate gradients on {what} stopped after cg_max_iter={self.max_iter} "
                f"iterations with a relative residual of {worst:.2g} > cg_tol={self.tol:g}; "
                "increase cg_max_iter or cg_preconditioner_rank, or use sparse mode "
                "(n_inducing).",
                ConvergenceWarning,
            )
        return result.solution, result.n_iter
