"""L-BFGS fit of the sparse deep kernel process on a whitened Cholesky parametrisation.

The fallback solver of the inducing-point DKP, and the tail of ``solver='auto'``
(``doc/design_notes.rst``, "Inducing-point deep kernel process": why the CARE sweeps hand
over to it).  Every learned quantity lives in one flat vector:

* hidden Grams ``G_l = C_{l-1} L_l L_l^T C_{l-1}^T`` with ``C_{l-1} = chol(S_{l-1})``
  taken *inside* the map from the lower layers, ``L_l`` lower triangular with its diagonal
  stored as logarithms.  The prior mean ``G_l = S_{l-1}`` is ``L_l = I`` whatever the lower
  layers do, and the hidden prior term is ``-nu_l KL(N(0, L_l L_l^T) || N(0, I))``: the
  whitening of :mod:`skgpx.dkp._input_scale`, well conditioned.  Not for
  ``objective='gp'``, whose hidden Grams stay at their prior means.
* ``Omega = L_O L_O^T`` (log-diagonal) iff ``config.input_scale``;
* log weights: hidden ``w`` (and ``v``) and ``w_out`` iff ``config.learn_weights``;
  ``sigma^2 = floor + exp(r)`` iff ``config.learn_noise`` (``floor = config.noise_floor``);
* the inducing inputs ``Z`` iff ``learn_inducing`` (rows then share no nugget with them).

Value and gradient come from :func:`skgpx.dkp._sparse._pass.objective_gradients` (two
passes over the rows) at the detached state; the gradients in the state's tensors are then
chained to the vector by one backward through the ``m x m`` map vector -> state.

The optimiser is our own L-BFGS (memory 20) with a strong-Wolfe line search (Nocedal and
Wright, *Numerical Optimization*, 2nd ed., Algs. 3.5, 3.6 and 7.4): owning the loop lets
the stopping rule, the pass count and trial points outside the domain be handled here.  A
trial point where a matrix on the inducing inputs is not positive definite
(:class:`~skgpx.dkp._model.Breakdown`) or the objective is not finite counts as
``-inf``: the search brackets it and bisects back towards the last good step.
(``torch.optim.LBFGS`` with ``line_search_fn='strong_wolfe'`` does not: an infinite loss
with a zero gradient makes its cubic interpolation return NaN, and the parameters become
NaN without an error; torch 2.13.)
"""

import math
from collections import deque

import torch

from .._model import Breakdown
from ._model import SparseFit, checked_cholesky, hidden_node, input_gram, prior_mean_grams
from ._pass import objective_gradients

__all__ = ["PackedObjective", "StatePacking", "lbfgs_fit", "maximise"]

_HISTORY = 20  # L-BFGS memory
_ARMIJO = 1e-4  # c1 of the Wolfe conditions
_CURVATURE = 0.9  # c2
_MAX_EVALUATIONS = 25  # per line search
_GRADIENT_TOL = 1e-10  # stop when max |grad| <= this * (|L| + 1)


# ------------------------------------------------------------------------- packing


class _Triangle:
    """Lower-triangular ``n x n`` factors <-> their ``n (n + 1) / 2`` entries, the diagonal
    as logarithms."""

    def __init__(self, n, device):
        self.n = n
        self.rows, self.cols = torch.tril_indices(n, n, device=device)
        self.diagonal = torch.nonzero(self.rows == self.cols).flatten()
        self.size = self.rows.shape[0]

    def pack(self, factor):
        entries = factor[self.rows, self.cols]
        return entries.index_put((self.diagonal,), torch.log(entries[self.diagonal]))

    def unpack(self, entries):
        # exp on the diagonal entries only: a large off-diagonal entry must not overflow
        # into a 0 * inf in the backward pass
        entries = entries.index_put((self.diagonal,), torch.exp(entries[self.diagonal]))
        factor = entries.new_zeros(self.n, self.n)
        return factor.index_put((self.rows, self.cols), entries)


def _symmetric(matrix):
    return 0.5 * (matrix + matrix.mT)


class StatePacking:
    """The map between a :class:`~skgpx.dkp._sparse._model.SparseDKPState` and one flat
    vector of what ``config`` (and ``learn_inducing``) says is learned.

    Parameters
    ----------
    config : DKPConfig
    state : SparseDKPState
        The template: what is not learned is taken from it as it is.
    learn_inducing : bool, default=False
        Whether ``Z`` is in the vector.
    """

    def __init__(self, config, state, learn_inducing=False):
        self.config = config
        self.template = state.copy()
        self.learn_inducing = bool(learn_inducing)
        self.learn_grams = config.objective != "gp"
        m, d = state.inducing.shape
        device = state.inducing.device
        self.gram_triangle = _Triangle(m, device)
        self.omega_triangle = _Triangle(d, device) if config.input_scale else None
        # which components of each node's weights are learned, in their storage order
        n_nodes = state.n_nodes
        self.learned = [
            [config.learn_weights] * state.weights[j].shape[0] for j in range(n_nodes - 1)
        ] + [[config.learn_weights, config.learn_noise]]
        self.size = (
            (self.omega_triangle.size if self.omega_triangle is not None else 0)
            + (n_nodes - 1) * self.gram_triangle.size * self.learn_grams
            + sum(sum(flags) for flags in self.learned)
            + m * d * self.learn_inducing
        )

    def _noise_raw(self, noise):
        floor = self.config.noise_floor
        # a noise within 0.1 floor of its floor starts 0.1 floor above it: on floor + exp(r)
        # the gradient in r is the excess times dL/dsigma^2, and an excess of ~0 pins the
        # noise to the floor however much the objective wants it higher (measured: from
        # 1e-3 floor above it, 60 iterations did not lift it)
        excess = torch.clamp(noise - floor, min=max(0.1 * floor, torch.finfo(noise.dtype).tiny))
        return torch.log(excess)

    def vector(self, state):
        """The vector whose :meth:`state` is ``state`` (to rounding; a noise within
        ``0.1 * noise_floor`` of its floor is moved to that distance); detached.

        Raises :class:`~skgpx.dkp._model.Breakdown` when a matrix of ``state`` is not
        positive definite, and ValueError when a learned weight is not positive.
        """
        parts = []
        with torch.no_grad():
            if self.omega_triangle is not None:
                parts.append(self.omega_triangle.pack(checked_cholesky(state.omega, "input scale")))
            if self.learn_grams:
                lower = input_gram(state.inducing, state.omega)
                for layer, gram in enumerate(state.hidden_grams, start=2):
                    scale = hidden_node(self.config, state.weights[layer - 2], lower,
                                        state.jitter)
                    root = checked_cholesky(scale, f"sum kernel S_{layer - 1}")
                    # L_l = C^-1 chol(G_l): lower triangular, G_l = C L L^T C^T
                    whitened = torch.linalg.solve_triangular(
                        root, checked_cholesky(gram, f"Gram matrix G_{layer}"), upper=False)
                    parts.append(self.gram_triangle.pack(whitened))
                    lower = gram
            for j, flags in enumerate(self.learned):
                values = state.weights[j]
                for index, flag in enumerate(flags):
                    if not flag:
                        continue
                    is_noise = j == len(self.learned) - 1 and index == 1
                    raw = self._noise_raw(values[1]) if is_noise else torch.log(values[index])
                    parts.append(raw.reshape(1))
            if self.learn_inducing:
                parts.append(state.inducing.reshape(-1))
        if not parts:
            return self.template.omega.new_zeros(0)
        vector = torch.cat([p.to(self.template.omega.dtype) for p in parts]).detach().clone()
        if not bool(torch.isfinite(vector).all()):
            # a learned weight at 0 (or a non-finite entry) has no logarithm to start from
            raise ValueError("The start of the L-BFGS fit has a learned weight that is not "
                             "positive and finite, or a non-finite input scale or inducing "
                             "input.")
        return vector

    def state(self, vector):
        """The state at ``vector``, differentiable in it.

        Raises :class:`~skgpx.dkp._model.Breakdown` when a sum kernel ``S_{l-1}`` on the
        inducing inputs is not positive definite.
        """
        template, config = self.template, self.config
        at = 0

        def take(n):
            nonlocal at
            at += n
            return vector[at - n:at]

        omega = template.omega
        if self.omega_triangle is not None:
            root = self.omega_triangle.unpack(take(self.omega_triangle.size))
            omega = _symmetric(root @ root.mT)
        whitened = []
        if self.learn_grams:
            size = self.gram_triangle.size
            whitened = [self.gram_triangle.unpack(take(size))
                        for _ in range(template.n_nodes - 1)]
        weights = []
        for j, flags in enumerate(self.learned):
            fixed = template.weights[j]
            parts = []
            for index, flag in enumerate(flags):
                if not flag:
                    parts.append(fixed[index])
                elif j == len(self.learned) - 1 and index == 1:
                    parts.append(config.noise_floor + torch.exp(take(1)[0]))
                else:
                    parts.append(torch.exp(take(1)[0]))
            weights.append(torch.stack(parts) if any(flags) else fixed)
        inducing = template.inducing
        if self.learn_inducing:
            inducing = take(inducing.numel()).reshape(inducing.shape)
        if self.learn_grams:
            grams, lower = [], input_gram(inducing, omega)
            for layer, factor in enumerate(whitened, start=2):
                scale = hidden_node(config, weights[layer - 2], lower, template.jitter)
                half = checked_cholesky(scale, f"sum kernel S_{layer - 1}") @ factor
                lower = _symmetric(half @ half.mT)
                grams.append(lower)
        else:
            grams = prior_mean_grams(config, template.with_tensors(
                [omega, *template.hidden_grams, *weights, inducing]))
        return template.with_tensors([omega, *grams, *weights, inducing])


class PackedObjective:
    """The objective and its gradient in the packed vector (two passes over the rows).

    ``objective(vector) -> (L, dL/dvector, state)`` with ``state`` detached, or ``None``
    where a matrix on the inducing inputs is not positive definite or a value is not
    finite.  ``passes`` counts the passes over the rows (an evaluation refused on a
    breakdown of the inducing matrices reads no rows and counts none).
    """

    def __init__(self, config, packing, rows, batch_size, passes=0):
        self.config, self.packing, self.rows, self.batch_size = config, packing, rows, batch_size
        self.passes = int(passes)

    def __call__(self, vector):
        leaf = vector.detach().requires_grad_()
        try:
            with torch.enable_grad():
                built = self.packing.state(leaf)
                tensors = built.tensors()
                detached = built.with_tensors([t.detach() for t in tensors])
                terms, gradients = objective_gradients(self.config, detached, self.rows,
                                                       self.batch_size, seeds=("value",))
                self.passes += 2
                value = float(terms.value)
                # chain the state's gradients to the vector through the m x m map
                pairs = [(t, g) for t, g in zip(tensors, gradients["value"]) if t.requires_grad]
                if pairs:
                    torch.autograd.backward([t for t, _ in pairs], [g for _, g in pairs])
        except Breakdown:
            return None
        gradient = leaf.grad if leaf.grad is not None else torch.zeros_like(leaf)
        if not math.isfinite(value) or not bool(torch.isfinite(gradient).all()):
            return None
        return value, gradient.detach(), detached


# ----------------------------------------------------------------------- optimiser


def _cubic_minimiser(a, fa, da, b, fb, db, low, high):
    """Minimiser of the cubic through ``(a, fa, da)`` and ``(b, fb, db)``, clipped to
    ``[low, high]``; the midpoint where the cubic has none or a value is not finite."""
    if not all(math.isfinite(v) for v in (fa, da, fb, db)) or a == b:
        return 0.5 * (low + high)
    if a > b:
        a, fa, da, b, fb, db = b, fb, db, a, fa, da
    d1 = da + db - 3.0 * (fa - fb) / (a - b)
    square = d1 * d1 - da * db
    if square < 0.0:
        return 0.5 * (low + high)
    d2 = math.sqrt(square)
    denominator = db - da + 2.0 * d2
    if denominator == 0.0:
        return 0.5 * (low + high)
    t = b - (b - a) * (db + d2 - d1) / denominator
    return min(max(t, low), high) if math.isfinite(t) else 0.5 * (low + high)


class _Point:
    """A point of the line search: step ``t``, loss ``f`` (``inf`` outside the domain),
    directional derivative ``slope`` and the evaluation (``None`` outside the domain)."""

    def __init__(self, t, evaluation, direction):
        self.t, self.evaluation = t, evaluation
        if evaluation is None:
            self.f, self.slope = math.inf, math.nan
        else:
            self.f = -evaluation[0]
            self.slope = -float(torch.dot(evaluation[1], direction))

    @property
    def feasible(self):
        return self.evaluation is not None


def _line_search(trial, start, direction, t):
    """Strong-Wolfe line search on the loss ``-L`` along ``direction`` from ``start`` (a
    :class:`_Point` at ``t = 0``).  Returns the accepted :class:`_Point`, or ``start``
    when no step decreases the loss enough within the evaluation budget."""
    f0, slope0 = start.f, start.slope
    previous, evaluations = start, 0
    low = high = None
    while evaluations < _MAX_EVALUATIONS:
        point = _Point(t, trial(t), direction)
        evaluations += 1
        if not point.feasible or point.f > f0 + _ARMIJO * t * slope0 \
                or (evaluations > 1 and point.f >= previous.f):
            low, high = previous, point
            break
        if abs(point.slope) <= -_CURVATURE * slope0:
            return point
        if point.slope >= 0.0:
            low, high = point, previous
            break
        extrapolated = _cubic_minimiser(previous.t, previous.f, previous.slope, t, point.f,
                                        point.slope, t + 0.01 * (t - previous.t), 10.0 * t)
        previous, t = point, extrapolated
    if low is None:
        return previous
    # zoom: ``low`` satisfies sufficient decrease with the lowest loss so far, ``high``
    # bounds the bracket on the other side (possibly outside the domain)
    while evaluations < _MAX_EVALUATIONS:
        width = abs(high.t - low.t)
        if width * float(direction.abs().max()) <= 1e-14 * (1.0 + abs(low.t)):
            break
        a, b = min(low.t, high.t), max(low.t, high.t)
        t = 0.5 * (a + b)
        if high.feasible:
            t = _cubic_minimiser(low.t, low.f, low.slope, high.t, high.f, high.slope,
                                 a + 0.1 * width, b - 0.1 * width)
        point = _Point(t, trial(t), direction)
        evaluations += 1
        if not point.feasible or point.f > f0 + _ARMIJO * t * slope0 or point.f >= low.f:
            high = point
            continue
        if abs(point.slope) <= -_CURVATURE * slope0:
            return point
        if point.slope * (high.t - low.t) >= 0.0:
            high = low
        low = point
    return low


def _two_loop(gradient, memory):
    """``-H g`` of L-BFGS (Nocedal and Wright, Alg. 7.4) for the loss gradient ``g``."""
    q = -gradient
    if not memory:
        return q
    coefficients = []
    for s, y, rho in reversed(memory):
        a = rho * float(torch.dot(s, q))
        coefficients.append(a)
        q = q - a * y
    s, y, _ = memory[-1]
    q = q * (float(torch.dot(s, y)) / float(torch.dot(y, y)))
    for (s, y, rho), a in zip(memory, reversed(coefficients)):
        q = q + (a - rho * float(torch.dot(y, q))) * s
    return q


def maximise(evaluate, x, *, max_iter, tol, on_iteration=None):
    """Maximise ``L`` by L-BFGS with a strong-Wolfe line search.

    Parameters
    ----------
    evaluate : callable
        ``evaluate(x) -> (L, dL/dx, payload)``, or ``None`` where ``x`` is outside the
        domain (the line search backs off from such points).
    x : Tensor of shape (n,)
        The start; ``evaluate(x)`` must not be ``None``.
    max_iter : int
        Most iterations (line searches).
    tol : float or None
        Stop when ``|L_k - L_{k-1}| <= tol (|L_k| + 1)``; None: only on ``max_iter``, a
        vanishing gradient or a failed line search.
    on_iteration : callable or None
        ``on_iteration(k, evaluation)`` after iteration ``k`` (``k = 0``: the start).

    Returns
    -------
    evaluation : tuple
        ``evaluate`` at the final point.
    converged : bool
        Whether ``tol`` was met or the gradient vanished.
    message : str or None
        Why the fit stopped short (a line search without progress), or None.
    """
    evaluation = evaluate(x)
    if evaluation is None:
        raise Breakdown("The start of the L-BFGS fit is outside the model's domain.")
    if on_iteration is not None:
        on_iteration(0, evaluation)
    memory = deque(maxlen=_HISTORY)
    for iteration in range(1, max_iter + 1):
        value, gradient = evaluation[0], -evaluation[1]  # the loss -L and its gradient
        if x.numel() == 0 or float(gradient.abs().max()) <= _GRADIENT_TOL * (abs(value) + 1):
            return evaluation, True, None
        direction = _two_loop(gradient, memory)
        if float(torch.dot(gradient, direction)) >= 0.0:  # not a descent direction: restart
            memory.clear()
            direction = -gradient
        # first step (or after a restart): as torch.optim.LBFGS, at most unit length in l1
        t = min(1.0, 1.0 / float(gradient.abs().sum())) if not memory else 1.0
        start = _Point(0.0, evaluation, direction)
        point = _line_search(lambda step: evaluate(x + step * direction), start, direction, t)
        if point is start:
            if memory:  # retry along the steepest descent once
                memory.clear()
                direction = -gradient
                start = _Point(0.0, evaluation, direction)
                t = min(1.0, 1.0 / float(gradient.abs().sum()))
                point = _line_search(lambda step: evaluate(x + step * direction), start,
                                     direction, t)
            if point is start:
                return evaluation, False, (
                    f"The L-BFGS line search found no ascent from objective {value:.12g} "
                    f"(max |gradient| {float(gradient.abs().max()):.3g}); stopped at "
                    f"iteration {iteration}.")
        step = point.t * direction
        new_gradient = -point.evaluation[1]
        change = new_gradient - gradient
        curvature = float(torch.dot(step, change))
        if curvature > 1e-10 * float(step.norm() * change.norm()):
            memory.append((step, change, 1.0 / curvature))
        x, previous, evaluation = x + step, value, point.evaluation
        if on_iteration is not None:
            on_iteration(iteration, evaluation)
        if tol is not None and abs(evaluation[0] - previous) <= tol * (abs(evaluation[0]) + 1):
            return evaluation, True, None
    return evaluation, False, None


# ------------------------------------------------------------------------ the fit


def lbfgs_fit(config, state, rows, *, max_iter, tol, batch_size, progress=None, passes=0,
              learn_inducing=False):
    """Fit the sparse DKP by L-BFGS on the whitened Cholesky parametrisation.

    Parameters
    ----------
    config : DKPConfig
    state : SparseDKPState
        The start, hidden Grams set (prior means or a warm start); not modified.
    rows : skgpx._inducing._rows.Rows
        Standardised rows.
    max_iter : int
        Most L-BFGS iterations (each one line search of one or more evaluations).
    tol : float or None
        Stop when the objective changes by at most ``tol * (|L| + 1)`` in an iteration;
        None runs ``max_iter`` iterations (it still stops when the gradient vanishes or a
        line search finds no ascent).
    batch_size : int
        Rows per chunk of the passes.
    progress : callable or None
        ``progress(iteration, value)`` after each iteration.
    passes : int, default=0
        Passes over the rows already spent (by a solver handing over).
    learn_inducing : bool, default=False
        Also learn ``Z``; needs ``state.coincide`` False.

    Returns
    -------
    SparseFit
        ``history[0]`` is the objective at the start; ``passes`` is cumulative, two per
        value-and-gradient evaluation (an evaluation refused on a breakdown of the
        inducing matrices reads no rows and counts none).

    Raises
    ------
    ValueError
        ``learn_inducing`` with ``state.coincide`` (moving inducing inputs cannot keep
        sharing a nugget with the rows they leave).
    Breakdown
        When a matrix of the start state is not positive definite.
    """
    if learn_inducing and state.coincide:
        raise ValueError("learn_inducing needs state.coincide=False: a moving inducing input "
                         "cannot share the Eye nugget with the row it started on.")
    packing = StatePacking(config, state, learn_inducing)
    evaluate = PackedObjective(config, packing, rows, batch_size, passes)
    history, counts = [], []

    def record(iteration, evaluation):
        history.append(evaluation[0])
        counts.append(evaluate.passes)
        if progress is not None and iteration > 0:
            progress(iteration, evaluation[0])

    evaluation, converged, message = maximise(
        evaluate, packing.vector(state), max_iter=int(max_iter), tol=tol, on_iteration=record)
    return SparseFit(state=evaluation[2], history=history, passes=counts, converged=converged,
                     solver="lbfgs", warnings=[message] if message else [])
