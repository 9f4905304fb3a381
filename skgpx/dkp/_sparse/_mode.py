"""Sparse (inducing-point) mode of :class:`DeepKernelProcessRegressor`: the fit glue.

The estimator validates and standardises the data as in the exact mode, then hands over
here: inducing inputs (k-means++ on the standardised rows, or the user's points), the
start at the prior means, one of the sparse solvers (:mod:`skgpx.dkp._sparse._solver`'s
CARE sweeps, :mod:`skgpx.dkp._sparse._lbfgs`'s L-BFGS), the Eye jitter raised on a
breakdown as the exact mode does, and the prediction factors of
:mod:`skgpx.dkp._sparse._predict`.  The fitted model keeps no training row: its size is
``O(L m^2 + m d)`` whatever the number of rows.
"""

import time
import warnings

import numpy as np
import torch
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_array, check_random_state

from ..._base import progress_bar, rows_per_chunk, to_numpy
from ..._inducing._points import initial_inducing_points
from ..._inducing._rows import Rows
from .._model import Breakdown
from ._model import SparseDKPState, node_grams, prior_mean_grams
from ._predict import sparse_prediction_cache

__all__ = ["fit_sparse", "inducing_spec"]

# a fit projected to take longer than this warns once, with the estimate
_LONG_FIT_SECONDS = 60.0


def inducing_spec(estimator, X):
    """Check the sparse-mode parameters against ``X`` before any torch work.

    Returns None in the exact mode, else the inducing points on the original scale
    (an ``(m, d)`` float64 copy) or their number ``m`` (clamped to the rows).
    """
    sparse = estimator.inducing_points is not None or estimator.n_inducing is not None
    if not sparse:
        if estimator.solver == "lbfgs":
            raise ValueError(
                "solver='lbfgs' needs the inducing-point mode: set n_inducing or "
                "inducing_points, or use solver='auto' or 'newton' (the exact mode runs the "
                "point solver's CARE sweeps).")
        return None
    if estimator.optimize_inducing and estimator.solver == "newton":
        warnings.warn("optimize_inducing=True is ignored with solver='newton' (the inducing "
                      "inputs are learned by L-BFGS: use solver='auto' or 'lbfgs').",
                      UserWarning, stacklevel=3)
    if estimator.inducing_points is None:
        return min(int(estimator.n_inducing), X.shape[0])
    points = check_array(estimator.inducing_points, dtype=np.float64, copy=True,
                         input_name="inducing_points")
    if points.shape[1] != X.shape[1]:
        raise ValueError(
            f"inducing_points has {points.shape[1]} columns but X has {X.shape[1]} features; "
            f"pass an array of shape (m, {X.shape[1]}) on the scale of X.")
    return points


def _learns_inducing(estimator):
    return estimator.optimize_inducing and estimator.solver != "newton"


def _initial_state(estimator, config, inducing, jitter, device, dtype):
    previous = getattr(estimator, "_state", None)
    if (estimator.warm_start and isinstance(previous, SparseDKPState)
            and tuple(previous.inducing.shape) == tuple(inducing.shape)
            and len(previous.hidden_grams) == estimator.n_layers
            and estimator._fitted_structure == (estimator.kernel, estimator.skip,
                                                estimator.input_scale)):
        # the previous Grams live on the previous inducing inputs: keep both
        return previous.copy(jitter=jitter, coincide=not _learns_inducing(estimator))
    half = torch.full((2 if estimator.skip else 1,), 0.5, dtype=dtype, device=device)
    weights = [half.clone() for _ in range(estimator.n_layers)]
    weights.append(torch.tensor([1.0, float(estimator.noise_variance)], dtype=dtype,
                                device=device))
    state = SparseDKPState(
        inducing=inducing, omega=torch.eye(inducing.shape[1], dtype=dtype, device=device),
        hidden_grams=[None] * estimator.n_layers, weights=weights, jitter=jitter,
        inducing_jitter=float(estimator.inducing_jitter),
        coincide=not _learns_inducing(estimator))  # a moving Z coincides with no row
    state.hidden_grams = prior_mean_grams(config, state)
    return state


def sparse_max_iter(estimator):
    """``max_iter``, with None as 200: an L-BFGS iteration costs about two passes over the
    rows, and fits on make_friedman1 (P = 2000 and 20 000) came within 1e-4 nats per row of
    their optimum after about 200 of them."""
    return 200 if estimator.max_iter is None else estimator.max_iter


def _solve(estimator, config, state, rows, batch_size, progress):
    """One run of the chosen solver (imported here: the solvers import this package)."""
    keywords = dict(max_iter=sparse_max_iter(estimator), batch_size=batch_size, progress=progress,
                    tol=None if config.objective == "dgp" else estimator.tol)  # as the exact mode
    if _learns_inducing(estimator):
        keywords["learn_inducing"] = True
    if estimator.solver == "lbfgs":
        from ._lbfgs import lbfgs_fit

        return lbfgs_fit(config, state, rows, **keywords)
    from ._solver import newton_fit

    return newton_fit(config, state, rows, hand_over=estimator.solver == "auto", **keywords)


def _warn_if_long(estimator, clock, iteration, n_rows, n_inducing):
    """After the first iteration, project the fit's time from it and warn once if long.

    Every iteration (a sweep or an L-BFGS step) costs a few passes over the rows, so the
    first one, with the start's evaluation, is a fair unit; ``tol`` may stop it sooner.
    """
    if clock["warned"] or iteration != 1:
        return
    clock["warned"] = True
    elapsed = time.perf_counter() - clock["start"]
    total = elapsed * sparse_max_iter(estimator)
    if total > _LONG_FIT_SECONDS:
        warnings.warn(
            f"This sparse fit ({n_rows} rows, {n_inducing} inducing inputs) may take about "
            f"{total / 60:.0f} minutes for max_iter={sparse_max_iter(estimator)} iterations "
            f"(the first took {elapsed:.1f} s). Faster: fewer inducing inputs (the pass costs "
            "grow as m^2), a tol to stop at convergence, a smaller max_iter, or a GPU "
            "(device='cuda'); verbose=1 shows the progress.", UserWarning, stacklevel=4)


def fit_sparse(estimator, config, spec, X, inputs, targets, scaling, device, dtype):
    """Fit the sparse model on standardised rows and store the sparse-only attributes.

    Parameters
    ----------
    estimator : DeepKernelProcessRegressor
    config : DKPConfig
    spec : int or ndarray
        :func:`inducing_spec`'s result.
    X : ndarray of shape (n_samples, n_features)
        The standardised inputs (k-means++ runs on them).
    inputs, targets : Tensor
        The same rows and the standardised targets on ``device``.
    scaling : tuple of ndarray
        The column means and scales that standardised ``X``.

    Returns
    -------
    state, grams, history, converged, jitter
        What the estimator's shared attributes are made of.
    """
    from ._pass import objective_value

    if isinstance(spec, np.ndarray):
        points = (spec - scaling[0]) / scaling[1]
    else:
        points = initial_inducing_points(X, spec, check_random_state(estimator.random_state))
    inducing = estimator._as_tensor(points, device, dtype)
    rows = Rows(inputs, targets, inputs.new_zeros(inputs.shape[0]))
    batch_size = rows_per_chunk(min(estimator.batch_size, inputs.shape[0]),
                                4 * inducing.shape[0], device)
    jitter, raises = float(estimator.jitter), 0
    with progress_bar(estimator.verbose, "DeepKernelProcessRegressor (sparse)",
                      sparse_max_iter(estimator)) as bar:
        clock = {"start": time.perf_counter(), "warned": False}

        def progress(iteration, value):
            _warn_if_long(estimator, clock, iteration, inputs.shape[0], inducing.shape[0])
            bar.update()
            bar.set_postfix(objective=f"{value:.6g}")
            if estimator.verbose >= 2:
                bar.write(f"iteration {iteration}: objective {value:.10g}")

        while True:
            try:
                state = _initial_state(estimator, config, inducing, jitter, device, dtype)
                result = _solve(estimator, config, state, rows, batch_size, progress)
                terms = objective_value(config, result.state, rows, batch_size)
                cache = sparse_prediction_cache(config, result.state, terms.statistics)
                break
            except Breakdown:
                jitter, raises = estimator._raise_jitter(jitter, raises)
    history = [float(value) for value in result.history]
    if not all(np.isfinite(history)) or not bool(torch.isfinite(terms.value)):
        raise RuntimeError(
            f"The sparse objective became non-finite after iteration {len(history) - 1}; "
            "increase jitter, inducing_jitter or noise_variance, or use fewer inducing points.")
    for message in result.warnings:
        warnings.warn(message, ConvergenceWarning, stacklevel=3)
    tol = None if config.objective == "dgp" else estimator.tol
    if tol is not None and not result.converged and not result.warnings:
        warnings.warn(
            f"The objective did not converge to tol={tol!r} within max_iter="
            f"{sparse_max_iter(estimator)} iterations; increase max_iter.", ConvergenceWarning,
            stacklevel=3)
    state = result.state.copy()  # without the solvers' caches (extras)
    estimator._cache = cache
    estimator.inducing_points_ = to_numpy(state.inducing) * scaling[1] + scaling[0]
    estimator.n_passes_ = int(result.passes[-1]) + 1  # + the pass of the prediction factors
    estimator.solver_ = result.solver
    with torch.no_grad():
        grams = node_grams(config, state)
    return state, grams, history, bool(result.converged), jitter
