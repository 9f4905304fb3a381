"""The ``"fmin_l_bfgs_b"`` route of the SVGP engine (``_svgp._engine`` module docstring):
L-BFGS-B with the plateau rule, on the packed hyperparameters, ``q`` optimal at each
evaluation."""

import math
import warnings

import numpy as np
import scipy.optimize
from sklearn.exceptions import ConvergenceWarning

from ...linalg import NotPositiveDefiniteError
from .._optimize import SPARSE_GRADIENT_TOL, SPARSE_LBFGS_MEMORY, ThetaZPacking

# the "adam" route's stopping rule compares epoch means this many epochs apart
PLATEAU_WINDOW = 3
# the inner natural-gradient loop of the L-BFGS-B route stops once a step gains less than
# this per row: the bound's gap is then ~1e-10 per row, and the gradient's error (first
# order in the distance to the optimal q) ~1e-5 of its size, below L-BFGS-B's tolerance
INNER_TOL = 1e-10
# inner_tol="adaptive": the per-row tolerance of an evaluation's inner loop is INNER_RATIO
# times the per-row change of the bound between the last two evaluations, within
# [INNER_TOL, INNER_LOOSE]
INNER_RATIO = 1e-2
INNER_LOOSE = 1e-5


class _Plateau(Exception):
    """Raised inside L-BFGS-B's objective when the plateau rule fires there."""


def _lbfgs_plateau(value_and_grad, x0, bounds, max_iter, n_rows, tol):
    """scipy's L-BFGS-B on ``value / n_rows`` with ``_optimize.lbfgs``'s sparse settings
    (projected-gradient test, memory), which also stops by the "adam" route's rule: once
    the bound at the accepted iterates rose by at most ``PLATEAU_WINDOW * tol * |bound|``
    over the last :data:`PLATEAU_WINDOW` iterations (``tol=None``: never).  Without it
    the fit spends most of its evaluations on the last ``1e-3`` of the bound (digits,
    softmax: 30 of 43 evaluations for 1.3 nats of 455).  Returns the last iterate; warns
    ``ConvergenceWarning`` when L-BFGS-B stops otherwise than by either test.
    """
    values, best = [], []

    def objective(x):
        value, grad = value_and_grad(x)
        best.append(max(-value, best[-1]) if best else -value)
        # a line search at the floor of a Monte-Carlo bound can take a dozen trials for
        # nothing: the same rule over evaluations, once past the first iterations
        lag = 2 * PLATEAU_WINDOW
        if (tol is not None and len(values) >= PLATEAU_WINDOW and len(best) > lag
                and best[-1] - best[-1 - lag] <= PLATEAU_WINDOW * tol * abs(best[-1])):
            raise _Plateau
        return value / n_rows, grad / n_rows

    def callback(intermediate_result):
        values.append(-float(intermediate_result.fun) * n_rows)
        if tol is not None and len(values) > PLATEAU_WINDOW:
            rise = values[-1] - values[-1 - PLATEAU_WINDOW]
            if rise <= PLATEAU_WINDOW * tol * abs(values[-1]):
                raise StopIteration

    try:
        result = scipy.optimize.minimize(
            objective, x0, method="L-BFGS-B", jac=True, bounds=bounds, callback=callback,
            options={"maxiter": max_iter, "gtol": SPARSE_GRADIENT_TOL,
                     "maxcor": SPARSE_LBFGS_MEMORY})
    except _Plateau:
        return None  # the caller takes the best point evaluated
    if result.status not in (0, 99):  # 99: the plateau rule's StopIteration
        warnings.warn(
            f"L-BFGS-B stopped without converging ({result.message}); increase max_iter "
            "or check the kernel's bounds.", ConvergenceWarning)
    return np.asarray(result.x, dtype=np.float64)


def fit_full(mode, rows, theta, Z):
    """The ``"fmin_l_bfgs_b"`` route (and a callable optimizer, or None) of ``mode``
    (``_svgp._engine.SVGPEngine``, module docstring there): L-BFGS-B on
    ``x = [theta_1 .. theta_G, theta_lik, vec Z]`` (the likelihood's part only when it
    has hyperparameters, Z only when learned) with ``q`` optimal at each evaluation
    (``mode._optimal_q``).  Returns the packed ``(theta, Z)``; sets ``mode.q``,
    ``mode.likelihood_``, ``mode.elbo``, ``mode.history`` and ``mode.n_iter``."""
    learn_Z = mode.optimize_inducing and mode.optimizer is not None
    n_theta, n_lik = theta.numel(), len(mode.likelihood.names)
    bounds = mode._theta_bounds
    if n_lik:  # x = [theta_1 .. theta_G, theta_lik, vec Z]
        bounds = np.vstack([bounds, np.asarray(mode.likelihood.bounds,
                                               dtype=np.float64).reshape(-1, 2)])
    packing = ThetaZPacking(bounds, Z.shape, learn_Z)
    device, dtype = Z.device, Z.dtype

    def unpack(x):
        theta_x, Z_x = packing.unpack(np.asarray(x, dtype=np.float64), Z, device, dtype)
        if n_lik:
            mode.likelihood_ = mode._lik_at(theta_x[n_theta:])
            theta_x = theta_x[:n_theta]
        return theta_x, Z_x

    n = mode._optimal_q(rows, theta, Z)
    if mode.optimizer is None:
        mode.elbo = mode._objective(rows, mode.q, theta, Z, False).elbo
        mode.history.append(mode.elbo)
        mode.n_iter = 1
        return theta, Z

    best = {"elbo": -math.inf, "q": mode.q, "x": None}
    values = []

    def value_and_grad(x, eval_gradient=True):
        theta_x, Z_x = unpack(x)
        # warm start from the best point so far: a line search's next trial lies
        # between it and the last trial, often closer to it
        mode.q = best["q"]
        if mode.inner_tol == "adaptive" and len(values) >= 2:
            # the inner loop's gap, small beside the last outer change
            change = abs(values[-1] - values[-2]) / n
            mode._inner_tol = min(INNER_LOOSE, max(INNER_TOL, INNER_RATIO * change))
        try:
            mode._optimal_q(rows, theta_x, Z_x)
            # no natural step follows: the gradient without H (_svgp.block_sums)
            ev = mode._objective(rows, mode.q, theta_x, Z_x, eval_gradient,
                                 want_H=False)
        except NotPositiveDefiniteError:
            # a trial point beyond what float arithmetic factorises: the line search
            # steps back from +inf
            return (math.inf, np.zeros_like(x)) if eval_gradient else math.inf
        values.append(ev.elbo)
        if ev.elbo > best["elbo"]:
            best.update(elbo=ev.elbo, q=mode.q, x=np.array(x, dtype=np.float64))
        mode.history.append(ev.elbo)
        mode._bar.update(1)
        mode._bar.set_postfix(elbo=f"{ev.elbo:.6g}")
        if not eval_gradient:
            return -ev.elbo
        parts = [ev.grad_theta.cpu().numpy()]
        if n_lik:
            parts.append(ev.grad_lik.cpu().numpy())
        if learn_Z:
            parts.append(ev.grad_Z.cpu().numpy().ravel())
        return -ev.elbo, -np.concatenate(parts).astype(np.float64)

    lik0 = [mode.likelihood.theta.cpu().numpy()] if n_lik else []
    x0 = packing.pack(np.concatenate([theta.cpu().numpy()] + lik0), Z)
    if callable(mode.optimizer):
        x, _ = mode.optimizer(value_and_grad, x0, bounds=packing.bounds)
    else:
        x = _lbfgs_plateau(value_and_grad, x0, packing.bounds, mode.max_iter, n,
                           mode.tol)
        x = best["x"] if x is None else x
    theta, Z = unpack(x)
    mode.q = best["q"]
    mode._inner_tol = INNER_TOL
    mode._optimal_q(rows, theta, Z)  # q at the returned point (not the last trial)
    mode.elbo = mode._objective(rows, mode.q, theta, Z, False).elbo
    mode.n_iter = len(mode.history)
    return theta, Z


__all__ = ["INNER_LOOSE", "INNER_RATIO", "INNER_TOL", "PLATEAU_WINDOW", "fit_full"]
