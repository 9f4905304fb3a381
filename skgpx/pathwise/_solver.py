"""Hyperparameter fitting for PathwiseGPSampler: L-BFGS-B, Adam and SVGP mini-batches.

Parameters are packed into one float64 vector ``x = [theta, vec(Z)]`` (``Z`` only when the
inducing inputs are learnt), so scipy's L-BFGS-B, a user's sklearn-style optimizer
callable and torch's Adam see the same objective: the negative log marginal likelihood
(exact mode) or the negative collapsed bound (sparse mode).
"""

import math
import sys
import warnings

import numpy as np
import scipy.optimize
import torch
from sklearn.exceptions import ConvergenceWarning

from .._base import cpu_generator, draw_seed, progress_bar
from ..linalg import positive_tril, solve_lower
from ._model import log_marginal_likelihood
from ._sparse import Rows, elbo_value_and_grad, inducing_cholesky, noise_of


class Packing:
    """Maps ``x = [theta, vec(Z)]`` to and from torch tensors, with L-BFGS-B bounds."""

    def __init__(self, theta_bounds, Z_shape, learn_Z):
        self.n_theta = len(theta_bounds)
        self.Z_shape = tuple(Z_shape) if learn_Z else None
        extra = [(None, None)] * (int(np.prod(Z_shape)) if learn_Z else 0)
        self.bounds = np.vstack([np.asarray(theta_bounds, dtype=np.float64).reshape(-1, 2),
                                 np.asarray(extra, dtype=np.float64).reshape(-1, 2)])

    def pack(self, theta, Z):
        parts = [np.asarray(theta, dtype=np.float64)]
        if self.Z_shape is not None:
            parts.append(Z.detach().cpu().numpy().astype(np.float64).ravel())
        return np.concatenate(parts)

    def unpack(self, x, Z, device, dtype):
        theta = torch.as_tensor(x[: self.n_theta], dtype=dtype, device=device)
        if self.Z_shape is not None:
            Z = torch.as_tensor(x[self.n_theta:].reshape(self.Z_shape), dtype=dtype,
                                device=device)
        return theta, Z


# Sparse fits stop once no log-hyperparameter moves the bound by more than this per
# training row and unit step (L-BFGS-B's projected-gradient test on the bound / n).
SPARSE_GRADIENT_TOL = 1e-6
# ... and keep 20 correction pairs (scipy's default is 10).  A dozen hyperparameters then fit
# in the memory, which follows the valley where the signal variance and the length scales of
# near-linear features grow together: friedman1, 20 000 rows, four data seeds: 53-71
# evaluations against 62-101; 200 000 rows after the presolve: 25 and 52 against 33 and 98
SPARSE_LBFGS_MEMORY = 20


def lbfgs(obj_func, x0, bounds, max_iter, on_step, n_rows=None):
    """scipy's L-BFGS-B with a ConvergenceWarning when it stops without converging.

    With ``n_rows`` (sparse mode), it minimises ``obj_func / n_rows`` with the
    projected-gradient tolerance :data:`SPARSE_GRADIENT_TOL` and a memory of
    :data:`SPARSE_LBFGS_MEMORY` pairs; the value returned is on the scale of ``obj_func``
    either way.  Exact mode keeps scipy's defaults (scikit-learn's behaviour).
    """
    options = {"maxiter": max_iter}
    if n_rows is not None:
        options.update(gtol=SPARSE_GRADIENT_TOL, maxcor=SPARSE_LBFGS_MEMORY)

    def objective(x):
        if n_rows is None:
            return obj_func(x)
        value, grad = obj_func(x)
        return value / n_rows, grad / n_rows

    result = scipy.optimize.minimize(
        objective, x0, method="L-BFGS-B", jac=True, bounds=bounds,
        options=options, callback=lambda *args: on_step(),
    )
    if n_rows is not None:
        result.fun = result.fun * n_rows
    if result.status != 0:
        warnings.warn(
            f"L-BFGS-B stopped without converging ({result.message}); increase "
            "max_iter or check the kernel's bounds.",
            ConvergenceWarning,
        )
    return np.asarray(result.x, dtype=np.float64), float(result.fun)


def adam(value_and_grad, x0, bounds, *, max_iter, learning_rate, on_step):
    """Torch Adam on a packed objective; parameters are clipped to their bounds.

    ``value_and_grad(x) -> (f, g)`` with numpy ``x`` and ``g``.  Returns the best
    iterate seen and its value (Adam's iterates do not decrease monotonically).
    """
    x = torch.tensor(x0, dtype=torch.float64, requires_grad=True)
    low = torch.tensor(np.where(np.isfinite(bounds[:, 0]), bounds[:, 0], -np.inf))
    high = torch.tensor(np.where(np.isfinite(bounds[:, 1]), bounds[:, 1], np.inf))
    opt = torch.optim.Adam([x], lr=learning_rate)
    best_x, best_f = x.detach().numpy().copy(), np.inf
    for _ in range(max_iter):
        f, g = value_and_grad(x.detach().numpy())
        if not np.isfinite(f):
            raise RuntimeError(
                f"The objective became non-finite during Adam step {_ + 1}; use a smaller "
                "learning_rate or tighter kernel bounds."
            )
        if f < best_f:
            best_x, best_f = x.detach().numpy().copy(), f
        x.grad = torch.as_tensor(g, dtype=torch.float64)
        opt.step()
        with torch.no_grad():
            x.copy_(torch.maximum(torch.minimum(x, high), low))
        on_step()
    f, _ = value_and_grad(x.detach().numpy())
    if f < best_f:
        best_x, best_f = x.detach().numpy().copy(), f
    return best_x, float(best_f)


def svgp_adam(kernel, theta0, Z0, X, Y, alpha, *, bounds, learn_Z, max_iter, learning_rate,
              minibatch_size, jitter, generator, on_step):
    """Adam on the uncollapsed SVGP bound with mini-batches (Hensman et al., UAI 2013).

    Whitened variational parameters: ``u = L v``, ``q(v) = N(m_t, S S^T)`` per target
    ``t`` with one shared ``S``; the bound is
    ``(n / b) sum_{i in batch} E_q[log N(y_i | f_i, sigma_i^2)] - KL(q(v) || N(0, I))``.
    Returns the final ``(theta, Z)``; the caller recomputes the optimal collapsed
    ``q(u)`` at those hyperparameters, which is never worse than the learnt one.
    """
    n, T = Y.shape
    m = Z0.shape[0]
    dtype, device = X.dtype, X.device
    theta = theta0.detach().clone().requires_grad_(True)
    Z = Z0.detach().clone().requires_grad_(learn_Z)
    q_mean = torch.zeros(m, T, dtype=dtype, device=device, requires_grad=True)
    q_raw = torch.eye(m, dtype=dtype, device=device)
    q_raw.diagonal().fill_(math.log(math.expm1(1.0)))  # positive_tril gives I
    q_raw.requires_grad_(True)
    params = [theta, q_mean, q_raw] + ([Z] if learn_Z else [])
    opt = torch.optim.Adam(params, lr=learning_rate)
    low = torch.as_tensor(bounds[:, 0], dtype=dtype, device=device)
    high = torch.as_tensor(bounds[:, 1], dtype=dtype, device=device)
    b = min(int(minibatch_size), n)
    order, position = torch.randperm(n, generator=generator), 0
    history = []
    for step in range(max_iter):
        if position + b > n:
            order, position = torch.randperm(n, generator=generator), 0
        rows = order[position: position + b].to(device)
        position += b
        opt.zero_grad()
        L, _ = inducing_cholesky(kernel, theta, Z, jitter)
        S = positive_tril(q_raw)
        Xb, Yb, noise = X[rows], Y[rows], noise_of(kernel, theta, alpha[rows])
        A = solve_lower(L, kernel(Z, Xb, theta=theta, part="signal"))  # L^-1 k(Z, x_i)
        mean = A.T @ q_mean
        var = (kernel.diag(Xb, theta, part="signal") - (A * A).sum(0)
               + ((S.T @ A) ** 2).sum(0))
        expected = -0.5 * (torch.log(2 * math.pi * noise)[:, None]
                           + ((Yb - mean) ** 2 + var[:, None]) / noise[:, None])
        kl = 0.5 * (T * ((S * S).sum() - m - 2 * torch.log(S.diagonal()).sum())
                    + (q_mean * q_mean).sum())
        loss = -(n / b) * expected.sum() + kl
        if not torch.isfinite(loss):
            raise RuntimeError(
                f"The SVGP bound became non-finite at Adam step {step + 1}; use a smaller "
                "learning_rate or a larger minibatch_size."
            )
        loss.backward()
        opt.step()
        with torch.no_grad():
            theta.copy_(torch.maximum(torch.minimum(theta, high), low))
        value = float(loss.detach())
        history.append(value)
        on_step(value)
    return theta.detach(), Z.detach(), history


def restart_points(est, torch_kernel, rng):
    """Initial theta of each optimizer run (scikit-learn's restart protocol)."""
    bounds = torch_kernel.bounds
    starts = [torch_kernel.theta]
    if est.n_restarts_optimizer > 0:
        if not np.isfinite(bounds).all():
            raise ValueError(
                "Multiple optimizer restarts (n_restarts_optimizer>0) requires that "
                "all bounds are finite."
            )
        starts += [rng.uniform(bounds[:, 0], bounds[:, 1])
                   for _ in range(est.n_restarts_optimizer)]
    return starts


def optimize_exact(est, torch_kernel, X, Y, alpha, rng, history):
    """Minimise the negative log marginal likelihood over theta (sklearn's protocol)."""
    device, dtype = X.device, X.dtype

    def value_and_grad(theta, eval_gradient):
        theta_t = torch.as_tensor(theta, dtype=dtype, device=device)
        result = log_marginal_likelihood(torch_kernel, theta_t, X, Y, alpha, eval_gradient)
        return (-result[0], -result[1]) if eval_gradient else -result

    x, fmin = run_optimizer(est, value_and_grad, restart_points(est, torch_kernel, rng),
                            torch_kernel.bounds, history)
    return x, -fmin


def negative_bound(est, torch_kernel, rows, Z, packing):
    """``value_and_grad(x, eval_gradient=True)``: the negative collapsed bound on
    ``rows`` and its gradient at the packed ``x``."""
    device, dtype = Z.device, Z.dtype

    def value_and_grad(x, eval_gradient=True):
        theta, Z_x = packing.unpack(x, Z, device, dtype)
        elbo, g_theta, g_Z = elbo_value_and_grad(
            torch_kernel, theta, Z_x, rows, jitter=est.jitter,
            batch_size=est.batch_size, grad_theta=eval_gradient,
            grad_Z=eval_gradient and est.optimize_inducing)
        if not eval_gradient:
            return -elbo
        grad = [g_theta.cpu().numpy()] + ([g_Z.cpu().numpy().ravel()] if g_Z is not None
                                          else [])
        return -elbo, -np.concatenate(grad).astype(np.float64)

    return value_and_grad


def optimize_sparse(est, torch_kernel, rows, Z, rng, history):
    """Maximise the collapsed bound over theta (and Z); returns (theta, Z).

    ``rows``: the training rows (``_sparse.Rows`` or ``skgpx.distributed.DaskRows``).
    """
    device, dtype = Z.device, Z.dtype
    packing = Packing(torch_kernel.bounds, Z.shape, est.optimize_inducing)
    starts = [packing.pack(theta, Z) for theta in restart_points(est, torch_kernel, rng)]
    if est.optimizer == "adam" and est.minibatch_size is not None:
        return _svgp_runs(est, torch_kernel, rows, Z, starts, packing, rng, history)

    value_and_grad = negative_bound(est, torch_kernel, rows, Z, packing)
    if est.optimizer == "fmin_l_bfgs_b" and isinstance(rows, Rows):
        sizes = presolve_sizes(rows.X.shape[0], est.presolve_rows)
        if sizes:
            starts = presolved_starts(est, torch_kernel, rows, Z, starts, packing, sizes, rng)
    x, _ = run_optimizer(est, value_and_grad, starts, packing.bounds, history,
                         n_rows=rows.X.shape[0])
    _, Z_opt = packing.unpack(x, Z, device, dtype)
    return np.asarray(x[: packing.n_theta], dtype=np.float64), Z_opt


# presolve_rows="auto": fits on at least this many rows first fit on a random tenth
PRESOLVE_MIN_ROWS = 50_000


def presolve_sizes(n, presolve_rows):
    """Subset sizes of the presolves before a sparse L-BFGS-B fit on ``n`` rows,
    smallest first: ``"auto"`` takes a tenth of the rows while there are at least
    :data:`PRESOLVE_MIN_ROWS` (``[20000]`` for 200 000 rows, ``[10000, 100000]`` for a
    million); an int below ``n`` is one subset of that size; None is none."""
    if presolve_rows is None:
        return []
    if presolve_rows != "auto":
        return [int(presolve_rows)] if presolve_rows < n else []
    sizes = []
    while n >= PRESOLVE_MIN_ROWS:
        n //= 10
        sizes.insert(0, n)
    return sizes


def presolved_starts(est, torch_kernel, rows, Z, starts, packing, sizes, rng):
    """Each start moved to the optimum of the bound on random row subsets.

    L-BFGS-B runs on nested random subsets of ``sizes`` rows (smallest first, each
    started from the previous optimum) under the per-row stopping rule of :func:`lbfgs`.
    A tenth of the rows costs a tenth per evaluation, and its optimum is already close
    to the full bound's (friedman1, 200 000 rows: 4e-4 per row below it, after 44-71
    evaluations on 20 000 rows); the fit on all rows then only refines it.  The subset
    evaluations are not part of ``objective_history_``.
    """
    # one gather of the largest subset; the smaller ones are its leading rows (views)
    picked = torch.as_tensor(rng.permutation(rows.X.shape[0])[: sizes[-1]],
                             device=rows.X.device)
    X, Y, alpha = rows.X[picked], rows.Y[picked], rows.alpha[picked]
    subsets = [Rows(X[:size], Y[:size], alpha[:size]) for size in sizes]
    bounds = [negative_bound(est, torch_kernel, subset, Z, packing) for subset in subsets]
    moved = []
    with progress_bar(est.verbose, f"PathwiseGPSampler presolve on {sizes} rows",
                      total=None) as bar:
        for x in starts:
            for subset, bound in zip(subsets, bounds):
                with warnings.catch_warnings():
                    # the fit on all rows warns if it does not converge
                    warnings.simplefilter("ignore", ConvergenceWarning)
                    x, _ = lbfgs(bound, x, packing.bounds, est.max_iter,
                                 on_step=lambda: bar.update(1), n_rows=subset.X.shape[0])
            moved.append(x)
    return moved


def _svgp_runs(est, torch_kernel, rows, Z, starts, packing, rng, history):
    """Adam on mini-batches of the uncollapsed bound, best run by the collapsed bound."""
    X, Y, alpha = rows.X, rows.Y, rows.alpha  # mini-batches index rows held here
    device, dtype = X.device, X.dtype
    best = None
    with progress_bar(est.verbose, "PathwiseGPSampler fit",
                      total=est.max_iter * len(starts)) as bar:
        for run, x0 in enumerate(starts):
            theta0, Z0 = packing.unpack(x0, Z, device, dtype)

            def on_step(loss):
                history.append(loss)
                bar.update(1)
                bar.set_postfix(neg_svgp_bound=f"{loss:.6g}")

            theta, Z_run, _ = svgp_adam(
                torch_kernel, theta0, Z0, X, Y, alpha, bounds=torch_kernel.bounds,
                learn_Z=est.optimize_inducing, max_iter=est.max_iter,
                learning_rate=est.learning_rate, minibatch_size=est.minibatch_size,
                jitter=est.jitter, generator=cpu_generator(draw_seed(rng)),
                on_step=on_step)
            elbo, _, _ = elbo_value_and_grad(torch_kernel, theta, Z_run, rows,
                                             jitter=est.jitter, batch_size=est.batch_size,
                                             grad_theta=False)
            if est.verbose >= 2:
                bar.write(f"run {run}: collapsed bound {elbo:.6g}", file=sys.stderr)
            if best is None or elbo > best[0]:
                best = (elbo, theta.cpu().numpy().astype(np.float64), Z_run)
    return best[1], best[2]


def run_optimizer(est, value_and_grad, starts, bounds, history, n_rows=None):
    """Run the optimizer from every start; returns the best (x, f_min).

    ``n_rows``: the sparse bound's number of rows, for L-BFGS-B's per-row test (``lbfgs``).
    """

    def obj_func(x, eval_gradient=True):
        result = value_and_grad(np.asarray(x, dtype=np.float64), eval_gradient)
        value = result[0] if eval_gradient else result
        history.append(value)
        bar.set_postfix(neg_log_marginal_likelihood=f"{value:.6g}")
        return result

    optima = []
    total = est.max_iter * len(starts) if est.optimizer == "adam" else None
    with progress_bar(est.verbose, "PathwiseGPSampler fit", total=total) as bar:
        for run, x0 in enumerate(starts):
            if callable(est.optimizer):
                x, fmin = est.optimizer(obj_func, x0, bounds=bounds)
                x, fmin = np.asarray(x, dtype=np.float64), float(fmin)
            elif est.optimizer == "adam":
                x, fmin = adam(obj_func, x0, bounds, max_iter=est.max_iter,
                               learning_rate=est.learning_rate,
                               on_step=lambda: bar.update(1))
            else:
                x, fmin = lbfgs(obj_func, x0, bounds, est.max_iter,
                                on_step=lambda: bar.update(1), n_rows=n_rows)
            optima.append((x, fmin))
            if est.verbose >= 2:
                bar.write(f"run {run}: neg log marginal likelihood {fmin:.6g}",
                          file=sys.stderr)
    best = int(np.argmin([fmin for _, fmin in optima]))
    return optima[best]


__all__ = ["Packing", "adam", "lbfgs", "optimize_exact", "optimize_sparse", "run_optimizer",
           "svgp_adam"]
