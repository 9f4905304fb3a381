"""The optimiser loop of the pathwise fits: L-BFGS-B, Adam or a user's callable, from restarts.

Parameters are packed into one float64 vector ``x = [theta, vec(Z)]`` (``Z`` only when the
inducing inputs are learnt), so scipy's L-BFGS-B, a user's sklearn-style optimizer
callable and torch's Adam see the same objective: the negative log marginal likelihood
(exact mode) or the negative collapsed bound (sparse mode); the SVGP engine's L-BFGS-B
route (``_svgp._lbfgs``) shares its settings.
"""

import sys
import warnings

import numpy as np
import scipy.optimize
import torch
from sklearn.exceptions import ConvergenceWarning

from .._base import progress_bar


class ThetaZPacking:
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


def restart_points(params, torch_kernel, rng):
    """Initial theta of each optimizer run (scikit-learn's restart protocol)."""
    bounds = torch_kernel.bounds
    starts = [torch_kernel.theta]
    if params.n_restarts_optimizer > 0:
        if not np.isfinite(bounds).all():
            raise ValueError(
                "Multiple optimizer restarts (n_restarts_optimizer>0) requires that "
                "all bounds are finite."
            )
        starts += [rng.uniform(bounds[:, 0], bounds[:, 1])
                   for _ in range(params.n_restarts_optimizer)]
    return starts


def run_optimizer(params, value_and_grad, starts, bounds, history, n_rows=None):
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
    total = params.max_iter * len(starts) if params.optimizer == "adam" else None
    with progress_bar(params.verbose, "PathwiseGPSampler fit", total=total) as bar:
        for run, x0 in enumerate(starts):
            if callable(params.optimizer):
                x, fmin = params.optimizer(obj_func, x0, bounds=bounds)
                x, fmin = np.asarray(x, dtype=np.float64), float(fmin)
            elif params.optimizer == "adam":
                x, fmin = adam(obj_func, x0, bounds, max_iter=params.max_iter,
                               learning_rate=params.learning_rate,
                               on_step=lambda: bar.update(1))
            else:
                x, fmin = lbfgs(obj_func, x0, bounds, params.max_iter,
                                on_step=lambda: bar.update(1), n_rows=n_rows)
            optima.append((x, fmin))
            if params.verbose >= 2:
                bar.write(f"run {run}: neg log marginal likelihood {fmin:.6g}",
                          file=sys.stderr)
    best = int(np.argmin([fmin for _, fmin in optima]))
    return optima[best]


__all__ = ["ThetaZPacking", "adam", "lbfgs", "run_optimizer"]
