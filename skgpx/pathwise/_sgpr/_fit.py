"""SGPR's hyperparameter fit: L-BFGS-B (or Adam) on the collapsed bound, presolved on row
subsets for large data, or Adam on mini-batches of the uncollapsed bound (Hensman et al.,
UAI 2013) re-collapsed at the end."""

import math
import sys
import warnings

import numpy as np
import torch
from sklearn.exceptions import ConvergenceWarning

from ..._base import cpu_generator, draw_seed, progress_bar
from ..._inducing._collapsed import inducing_cholesky, noise_of
from ..._inducing._rows import Rows
from ...linalg import positive_tril, solve_lower
from .._optimize import ThetaZPacking, lbfgs, restart_points, run_optimizer
from ._bound import elbo_value_and_grad


def uncollapsed_adam(kernel, theta0, Z0, X, Y, alpha, *, bounds, learn_Z, max_iter, learning_rate,
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


def negative_bound(params, torch_kernel, rows, Z, packing):
    """``value_and_grad(x, eval_gradient=True)``: the negative collapsed bound on
    ``rows`` and its gradient at the packed ``x``."""
    device, dtype = Z.device, Z.dtype

    def value_and_grad(x, eval_gradient=True):
        theta, Z_x = packing.unpack(x, Z, device, dtype)
        elbo, g_theta, g_Z = elbo_value_and_grad(
            torch_kernel, theta, Z_x, rows, jitter=params.jitter,
            batch_size=params.batch_size, grad_theta=eval_gradient,
            grad_Z=eval_gradient and params.optimize_inducing)
        if not eval_gradient:
            return -elbo
        grad = [g_theta.cpu().numpy()] + ([g_Z.cpu().numpy().ravel()] if g_Z is not None
                                          else [])
        return -elbo, -np.concatenate(grad).astype(np.float64)

    return value_and_grad


def optimize_sparse(params, torch_kernel, rows, Z, rng, history):
    """Maximise the collapsed bound over theta (and Z); returns (theta, Z).

    ``rows``: the training rows (``_inducing._rows.Rows`` or ``skgpx.distributed.DaskRows``).
    """
    device, dtype = Z.device, Z.dtype
    packing = ThetaZPacking(torch_kernel.bounds, Z.shape, params.optimize_inducing)
    starts = [packing.pack(theta, Z) for theta in restart_points(params, torch_kernel, rng)]
    if params.optimizer == "adam" and params.minibatch_size is not None:
        return _minibatch_runs(params, torch_kernel, rows, Z, starts, packing, rng, history)

    value_and_grad = negative_bound(params, torch_kernel, rows, Z, packing)
    if params.optimizer == "fmin_l_bfgs_b" and isinstance(rows, Rows):
        sizes = presolve_sizes(rows.X.shape[0], params.presolve_rows)
        if sizes:
            starts = presolved_starts(params, torch_kernel, rows, Z, starts, packing, sizes, rng)
    x, _ = run_optimizer(params, value_and_grad, starts, packing.bounds, history,
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


def presolved_starts(params, torch_kernel, rows, Z, starts, packing, sizes, rng):
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
    bounds = [negative_bound(params, torch_kernel, subset, Z, packing) for subset in subsets]
    moved = []
    with progress_bar(params.verbose, f"PathwiseGPSampler presolve on {sizes} rows",
                      total=None) as bar:
        for x in starts:
            for subset, bound in zip(subsets, bounds):
                with warnings.catch_warnings():
                    # the fit on all rows warns if it does not converge
                    warnings.simplefilter("ignore", ConvergenceWarning)
                    x, _ = lbfgs(bound, x, packing.bounds, params.max_iter,
                                 on_step=lambda: bar.update(1), n_rows=subset.X.shape[0])
            moved.append(x)
    return moved


def _minibatch_runs(params, torch_kernel, rows, Z, starts, packing, rng, history):
    """Adam on mini-batches of the uncollapsed bound, best run by the collapsed bound."""
    X, Y, alpha = rows.X, rows.Y, rows.alpha  # mini-batches index rows held here
    device, dtype = X.device, X.dtype
    best = None
    with progress_bar(params.verbose, "PathwiseGPSampler fit",
                      total=params.max_iter * len(starts)) as bar:
        for run, x0 in enumerate(starts):
            theta0, Z0 = packing.unpack(x0, Z, device, dtype)

            def on_step(loss):
                history.append(loss)
                bar.update(1)
                bar.set_postfix(neg_svgp_bound=f"{loss:.6g}")

            theta, Z_run, _ = uncollapsed_adam(
                torch_kernel, theta0, Z0, X, Y, alpha, bounds=torch_kernel.bounds,
                learn_Z=params.optimize_inducing, max_iter=params.max_iter,
                learning_rate=params.learning_rate, minibatch_size=params.minibatch_size,
                jitter=params.jitter, generator=cpu_generator(draw_seed(rng)),
                on_step=on_step)
            elbo, _, _ = elbo_value_and_grad(torch_kernel, theta, Z_run, rows,
                                             jitter=params.jitter, batch_size=params.batch_size,
                                             grad_theta=False)
            if params.verbose >= 2:
                bar.write(f"run {run}: collapsed bound {elbo:.6g}", file=sys.stderr)
            if best is None or elbo > best[0]:
                best = (elbo, theta.cpu().numpy().astype(np.float64), Z_run)
    return best[1], best[2]


__all__ = [
    "PRESOLVE_MIN_ROWS", "negative_bound", "optimize_sparse", "presolve_sizes", "presolved_starts",
    "uncollapsed_adam",
]
