"""L-BFGS-B with the SVGP engine's plateau rule (``_svgp_fit``'s ``"fmin_l_bfgs_b"``
route)."""

import warnings

import numpy as np
import scipy.optimize
from sklearn.exceptions import ConvergenceWarning

from ._solver import SPARSE_GRADIENT_TOL, SPARSE_LBFGS_MEMORY

# the "adam" route's stopping rule compares epoch means this many epochs apart
PLATEAU_WINDOW = 3


class _Plateau(Exception):
    """Raised inside L-BFGS-B's objective when the plateau rule fires there."""


def _lbfgs_plateau(value_and_grad, x0, bounds, max_iter, n_rows, tol):
    """scipy's L-BFGS-B on ``value / n_rows`` with ``_solver.lbfgs``'s sparse settings
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


__all__ = ["PLATEAU_WINDOW"]
