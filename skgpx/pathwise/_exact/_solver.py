"""Which exact solver ``solver="auto"`` takes, and what an exact fit will cost.

The exact mode solves with ``K_A = k(X, X) + diag(noise)`` by a Cholesky factor (three
dense ``n x n`` buffers, ``O(n^3)``) or by preconditioned block CG on kernel products
formed in row chunks (``O(n^2)`` per iteration, ``O(chunk * n)`` memory).  Past some
thousands of rows either takes minutes on a CPU, and an exact fit of the
hyperparameters repeats the factorisation at every optimizer step.  Nothing of that
runs silently: :func:`cg_fit_solve` and :func:`check_cholesky_cost` time a small part
of the work before it starts and warn (once per fit) when the estimate exceeds
:data:`SLOW_FIT_SECONDS`; ``verbose`` shows the CG iterations (the optimizer's steps
have their own bar).
"""

import math
import sys
import time
import warnings

import torch

from ..._base import progress_bar
from ..._memory import available_memory
from ._algebra import CGSolver, log_marginal_likelihood

# solver="auto", cholesky_max_n="auto", fixed hyperparameters: factorise when the
# Cholesky buffers take at most this share of the memory available on the device
AUTO_MEMORY_FRACTION = 0.5
# ... and the Cholesky buffers of such a solve: K_A, its factor, and the distances or
# kernel temporaries that the evaluation of K_A holds at its peak
CHOLESKY_BUFFERS = 3
# solver="auto", cholesky_max_n="auto", hyperparameters to fit: a row limit, since every
# optimizer step factorises again and CG cannot fit them (the error points to sparse mode)
FIT_CHOLESKY_MAX_N = 8000
# warn when the estimated time of an exact fit (its CG solve, or its Cholesky
# evaluations) exceeds this (seconds)
SLOW_FIT_SECONDS = 60.0
# iterations assumed before the solve starts: a lower bound of what a solve to
# cg_tol=1e-4 takes with a pivoted-Cholesky preconditioner (13-24 on 2000-10 000 rows of
# a smooth 2-D problem, 40 on 50 000, 102-149 on 3000-6000 rows of a rougher 3-D one;
# benchmarks/pathwise/cg.py), so that the estimate made before the first iteration
# does not warn without reason
MIN_EXPECTED_ITERATIONS = 10
# from this iteration on, the remaining iterations are projected from the residuals;
# earlier, the slow start of PCG (the worst residual still near 1 after 2-3 iterations)
# would project several times too many (3000 rows in [0, 1]^3, RBF(0.2), noise 1e-2:
# 280 at iteration 3, 57 at iteration 10, 64 in fact)
PROJECT_FROM_ITERATION = MIN_EXPECTED_ITERATIONS
# Cholesky fits: evaluations timed on this many rows, and scaled (cholesky_seconds) ...
CALIBRATION_ROWS = 512
# ... for problems of more rows than this: with hyperparameters to fit (an evaluation on
# 1024 rows takes a fraction of a second on one core, so even 200 optimizer steps stay
# near a minute), and at fixed hyperparameters (one factorisation on 4096 rows took 5 s on
# one busy core: a minute needs a machine 12 times slower; the timing costs about 0.1 s)
MIN_TIMED_ROWS = {"fit": 1024, "fixed": 4096}
# L-BFGS-B evaluations assumed in a Cholesky fit of the hyperparameters: a lower bound
MIN_EXPECTED_EVALUATIONS = 10


def resolve_solver(params, n, itemsize, fitting, device):
    """``"cholesky"`` or ``"cg"`` for ``solver="auto"`` on ``n`` rows.

    An integer ``cholesky_max_n`` is a row limit.  ``"auto"`` factorises, with fixed
    hyperparameters, when the :data:`CHOLESKY_BUFFERS` ``n x n`` buffers take at most
    :data:`AUTO_MEMORY_FRACTION` of the memory available on ``device`` (GPU memory on
    CUDA), and, with hyperparameters to fit, up to :data:`FIT_CHOLESKY_MAX_N` rows.
    """
    if params.solver != "auto":
        return params.solver
    if params.cholesky_max_n != "auto":
        return "cholesky" if n <= params.cholesky_max_n else "cg"
    if fitting:
        return "cholesky" if n <= FIT_CHOLESKY_MAX_N else "cg"
    needed = CHOLESKY_BUFFERS * n * n * itemsize
    return "cholesky" if needed <= AUTO_MEMORY_FRACTION * available_memory(device) else "cg"


def _synchronize(device):
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def seconds_per_product(operator, n_rhs, repeats=2):
    """Seconds of one product ``K_A V`` with ``V`` of shape (n, n_rhs), timed on the
    first row chunk (the fastest of ``repeats`` runs) and scaled to all ``n`` rows."""
    n = operator.shape[0]
    rows = min(operator.rows_per_chunk, n)
    V = torch.ones(n, n_rhs, dtype=operator.dtype, device=operator.device)
    best = math.inf
    for _ in range(repeats):
        _synchronize(operator.device)
        start = time.perf_counter()
        operator.matmul(V, stop=rows)
        _synchronize(operator.device)
        best = min(best, time.perf_counter() - start)
    return best * n / rows


def format_seconds(seconds):
    """``'45 s'``, ``'12 min'`` or ``'2.5 h'``."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


class CGCostMonitor:
    """Estimates the time of a block CG solve, warns once when it is long, and drives
    the progress bar (a ``callback`` of :func:`skgpx._krylov.block_cg`).

    Before the first iteration the estimate is ``per_iteration * MIN_EXPECTED_ITERATIONS``
    (a lower bound); from iteration :data:`PROJECT_FROM_ITERATION` on it is the time
    spent plus the measured time per iteration times the iterations still needed, which
    the worst column's residual projects at its average rate so far,
    ``k * log(tol / r_k) / log(r_k)`` more for a relative residual ``r_k`` after ``k``
    iterations (at most ``max_iter`` in all).  Where convergence slows down, that rate
    is optimistic (3000 rows in [-2, 2]^3, RBF(0.2), noise 1e-2: 64 iterations
    projected at the 10th, 97 at the 20th, 102 in fact), so the projection is made
    again at every iteration.
    """

    def __init__(self, *, n, n_rhs, device, tol, max_iter, per_iteration, bar, verbose):
        self.n, self.n_rhs, self.device = n, n_rhs, str(device)
        self.tol, self.max_iter = tol, max_iter
        self.per_iteration = per_iteration
        self.bar, self.verbose = bar, verbose
        self.warned = False
        self.start = time.perf_counter()

    def before(self):
        """The estimate before the first iteration; warns when it is too long."""
        iterations = min(MIN_EXPECTED_ITERATIONS, self.max_iter)
        self._check(iterations * self.per_iteration, iterations, "at least ")

    def projected_iterations(self, k, worst):
        """Iterations in all that the worst relative residual ``worst`` after ``k``
        iterations projects to (``max_iter`` when it has not decreased)."""
        if worst <= self.tol:
            return k
        if not 0 < worst < 1:
            return self.max_iter
        total = k * math.log(self.tol) / math.log(worst)
        return int(min(self.max_iter, math.ceil(total)))

    def __call__(self, k, relative):
        worst = float(relative.max())
        self.bar.update(1)
        self.bar.set_postfix(relative_residual=f"{worst:.3g}")
        if self.verbose >= 2:
            self.bar.write(f"CG iteration {k}: largest relative residual {worst:.3g}",
                           file=sys.stderr)
        if self.warned or k < PROJECT_FROM_ITERATION:
            return
        elapsed = time.perf_counter() - self.start
        total = self.projected_iterations(k, worst)
        self.per_iteration = elapsed / k  # measured now, preconditioner included
        self._check(elapsed + (total - k) * self.per_iteration, total, "about ")

    def _check(self, seconds, iterations, qualifier):
        if self.warned or seconds <= SLOW_FIT_SECONDS:
            return
        self.warned = True
        warn_slow(f"the conjugate-gradient solve with K_A on {self.n} rows ({self.n_rhs} "
                  "right-hand side(s))", seconds, qualifier,
                  f"{qualifier}{iterations} iterations at {self.per_iteration:.3g} s each",
                  self.device, "the solve's progress",
                  "; predictions with return_std and posterior draws solve again")


def warn_slow(what, seconds, qualifier, detail, device, progress, note=""):
    """The UserWarning of a fit estimated to take more than :data:`SLOW_FIT_SECONDS`."""
    faster = "Sparse mode (n_inducing=512, say; O(n m^2) per pass over the rows)"
    if not str(device).startswith("cuda"):
        faster += " or a GPU (device='cuda')"
    warnings.warn(
        f"PathwiseGPSampler.fit: {what} is estimated to take {qualifier}"
        f"{format_seconds(seconds)} on {device} ({detail}){note}. {faster} is much faster"
        + (f"; verbose=1 shows {progress}" if progress else "")
        + f". This warning comes when the estimate exceeds {SLOW_FIT_SECONDS:g} s.",
        UserWarning,
    )


def _best_seconds(fn, device, repeats=2):
    best = math.inf
    for _ in range(repeats):
        _synchronize(device)
        start = time.perf_counter()
        fn()
        _synchronize(device)
        best = min(best, time.perf_counter() - start)
    return best


def cholesky_seconds(kernel, theta, X, Y, alpha, fitting):
    """Seconds of one exact evaluation on all ``n`` rows (with its gradient when
    ``fitting``), from timings on the first ``m = min(n, CALIBRATION_ROWS)`` rows.

    The factorisation (``potrf``, and ``potri`` for the gradient's ``K_A^{-1}``) is
    timed alone and scaled by ``(n / m)^3``; the rest of an evaluation (the kernel
    matrix and, when fitting, its gradient) by ``(n / m)^2``.
    """
    n = X.shape[0]
    m = min(n, CALIBRATION_ROWS)
    Xm, Ym, am = X[:m], Y[:m], alpha[:m]
    with torch.no_grad():
        K = kernel(Xm, theta=theta)
        K.diagonal().add_(am + 1e-6 * K.diagonal().mean())  # timing only: keep it PD

        def factorise():
            L = torch.linalg.cholesky_ex(K)[0]
            if fitting:
                torch.cholesky_inverse(L)

        cubic = _best_seconds(factorise, X.device)
    total = _best_seconds(lambda: log_marginal_likelihood(kernel, theta, Xm, Ym, am, fitting),
                          X.device)
    return max(total - cubic, 0.0) * (n / m) ** 2 + cubic * (n / m) ** 3


def check_cholesky_cost(params, kernel, theta, X, Y, alpha, fitting):
    """Warn (once, before any work on all rows) when an exact Cholesky fit is estimated
    to take more than :data:`SLOW_FIT_SECONDS`: one factorisation at fixed
    hyperparameters; with an optimizer, ``max_iter + 1`` evaluations per Adam run, and
    at least :data:`MIN_EXPECTED_EVALUATIONS` per L-BFGS-B (or callable) run.  Not timed
    on :data:`MIN_TIMED_ROWS` rows or fewer (1024 when fitting, else 4096)."""
    n = X.shape[0]
    if n <= MIN_TIMED_ROWS["fit" if fitting else "fixed"]:
        return
    per_evaluation = cholesky_seconds(kernel, theta, X, Y, alpha, fitting)
    count, qualifier = 1, ""
    if fitting:
        runs = 1 + params.n_restarts_optimizer
        if params.optimizer == "adam":
            count = runs * (params.max_iter + 1)
        else:
            count, qualifier = runs * MIN_EXPECTED_EVALUATIONS, "at least "
    seconds = count * per_evaluation
    if seconds > SLOW_FIT_SECONDS:
        what = "one evaluation" if count == 1 else f"{qualifier}{count} evaluations"
        warn_slow(f"the exact GP on {n} rows (a Cholesky factorisation of the {n} x {n} "
                  "kernel matrix per evaluation)", seconds, qualifier,
                  f"{what} at {per_evaluation:.3g} s each, timed on {min(n, CALIBRATION_ROWS)}"
                  " rows and scaled", X.device,
                  "the optimizer's progress" if fitting else None)


def cg_fit_solve(params, kernel, X, theta, noise, Y):
    """Build the CG solver of ``K_A`` and solve ``K_A a = Y``, timed and reported.

    Returns ``(solver, a)``; ``solver.n_iter`` holds the iterations of the solve.
    """
    # no total: the bar counts the iterations, which stop at cg_tol well before cg_max_iter
    with progress_bar(params.verbose, "PathwiseGPSampler CG solve", total=None) as bar:
        solver = CGSolver.build(kernel, X, theta, noise, rank=params.cg_preconditioner_rank,
                                tol=params.cg_tol, max_iter=params.cg_max_iter)
        operator = solver.operator()
        per_product = seconds_per_product(operator, Y.shape[1])
        monitor = CGCostMonitor(n=X.shape[0], n_rhs=Y.shape[1], device=X.device,
                                tol=params.cg_tol, max_iter=params.cg_max_iter,
                                per_iteration=per_product, bar=bar, verbose=params.verbose)
        monitor.before()
        a, solver.n_iter = solver.solve(Y, what="K_A^-1 y", callback=monitor,
                                        operator=operator)
    return solver, a


__all__ = ["AUTO_MEMORY_FRACTION", "SLOW_FIT_SECONDS", "CGCostMonitor", "cg_fit_solve",
           "check_cholesky_cost", "cholesky_seconds", "resolve_solver", "seconds_per_product",
           "warn_slow"]
