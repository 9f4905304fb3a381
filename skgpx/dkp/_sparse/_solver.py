"""The paper's Newton-like (CARE) sweep carried to the inducing Grams.

``doc/design_notes.rst``, "Inducing-point deep kernel process" (gradient in ``G_l``, what
stays a CARE and what does not).  For hidden layer ``l`` with ``G~ = G_l`` held as the
expansion point, ``S_{l-1}`` fixed, ``D_l, T_l`` the prior coupling to the layer above
(:meth:`skgpx.dkp._solver.Message.terms` on the ``m x m`` blocks, from the new
``G_{l+1}``) and the data gradient split ``Psi_l = Psi^Q - Psi^U``::

    U = S_{l-1}^-1 + r D_l + (2/nu_l) Psi^U + r lam G~^-1
    Q = G~ (r T_l + (2/nu_l) Psi^Q) G~ + r lam G~,      0 = 2 alpha G - G U G + Q.

Its fixed point is a stationary point of the sparse objective for any split (the ``lam``
terms cancel at ``G = G~``).  The natural split takes ``Psi^Q = sym dF_fit/dG_l`` and
``Psi^U = -sym dF_volume/dG_l`` (one two-seed gradient pass): with the inducing inputs
equal to the rows it is the full model's step exactly.  Where that CARE has no positive
definite solution the PSD split (whitened positive part into ``Q``) is used, with the
mirror boosts of :func:`skgpx.dkp._solver.care_step` as the last resort.  ``Omega`` takes the
same step on ``d x d`` matrices (App. L), the output weights the exact 2-D Newton of
:mod:`skgpx.dkp._sparse._weights`.

The paper's ``Omega`` CARE (coupled to ``G_2`` through ``D_1, T_1``) and App. K weight
steps hold the Grams fixed and are block-coordinate slow; ``whitened=True`` instead moves
``Omega`` and the hidden weights at fixed whitened Grams ``L_l`` (``G_l = C L_l L_l^T C^T``,
``C = chol(S_{l-1})``, the L-BFGS parametrisation), where the hidden priors do not
depend on them.  A sweep is kept only if the objective does not decrease (else every
step is re-solved with ``lam`` x4 from the stored gradients), then Anderson(5)
extrapolation over sweeps is tried (kept if positive definite and not worse): the sweeps
alone converge only linearly (the convergence figures of the same section).
"""

import math
from dataclasses import replace

import torch

from .._grams import gram_kernel_derivatives
from .._model import Breakdown
from .._riccati import CARESolveError, solve_care
from .._solver import Message, care_step
from ._anderson import Anderson, pack, unpack
from ._model import SparseFit, hidden_node, input_gram, node_grams, prior_mean_grams, prior_terms
from ._pass import objective_gradients, objective_value
from ._weights import (
    hidden_weight_step, output_newton, transport, transported_gradient, transported_omega_gradient,
)

__all__ = ["layer_coefficients", "newton_fit", "omega_coefficients", "psd_split",
           "sparse_sweep"]

_HAND_OVER_GAIN = 1e-3  # per row: below this gain a sweep hands over to L-BFGS
_MAX_REJECTIONS = 4
# with learned inducing inputs, sweeps (which hold Z fixed) before L-BFGS takes over
_SWEEPS_BEFORE_INDUCING = 5


def _sym(matrix):
    return 0.5 * (matrix + matrix.mT)


def _inverse(matrix, name):
    factor, info = torch.linalg.cholesky_ex(matrix)
    if int(info) != 0:
        raise Breakdown(f"The {name} on the inducing inputs is not positive definite.")
    return torch.cholesky_inverse(factor)


def psd_split(psi, current):
    """``(Psi^Q, Psi^U)`` with ``Psi = Psi^Q - Psi^U`` both PSD: the positive and negative
    parts of ``C^T Psi C`` (``G~ = C C^T``) mapped back."""
    factor = torch.linalg.cholesky(current)
    whitened = _sym(factor.mT @ psi @ factor)
    values, vectors = torch.linalg.eigh(whitened)
    back = torch.linalg.solve_triangular(factor.mT, vectors, upper=True).mT  # V^T C^-1
    return (_sym(back.mT @ (values.clamp(min=0)[:, None] * back)),
            _sym(back.mT @ ((-values).clamp(min=0)[:, None] * back)))


def _node_derivatives(config, weights, gram):
    """``(M, N)`` of ``S = w K(G) + v G + eps I`` in ``G`` (as ``_model.node_derivatives``)."""
    _, m_kernel, n_kernel = gram_kernel_derivatives(config.kernel, gram)
    m_matrix = weights[0] * m_kernel
    if config.skip:
        m_matrix = m_matrix + weights[1]
    return m_matrix, weights[0] * n_kernel


def _message_terms(config, state, node, gram, gram_next, nu_next):
    """``(D, T)`` of the prior of ``G_{node+1}`` through ``S_node(G_node)``."""
    scale = hidden_node(config, state.weights[node - 1], gram, state.jitter)
    message = Message(nu=nu_next, inverse=_inverse(scale, f"sum kernel S_{node}"),
                      derivatives=_node_derivatives(config, state.weights[node - 1], gram),
                      gram=gram_next)
    return message.terms()


def layer_coefficients(config, state, layer, grams, psi_q, psi_u, n_targets):
    """``lam -> (U, Q)`` of the CARE of ``G_layer`` (module docstring).

    ``grams`` is ``[G_1 .. G_L]`` as the sweep holds them: ``G_{layer+1}`` already new,
    ``G_layer`` (the expansion point) and ``G_{layer-1}`` current.
    """
    last = state.n_nodes
    nu = config.nu_hidden[layer - 2]
    current = grams[layer - 1]
    prev_scale = hidden_node(config, state.weights[layer - 2], grams[layer - 2], state.jitter)
    fixed = _inverse(prev_scale, f"sum kernel S_{layer - 1}") + (2.0 / nu) * psi_u
    curvature = (2.0 / nu) * psi_q
    if layer < last:
        nu_next = config.nu_hidden[layer - 1]
        d_matrix, t_matrix = _message_terms(config, state, layer, current, grams[layer], nu_next)
        fixed = fixed + (nu_next / nu) * d_matrix
        curvature = curvature + (nu_next / nu) * t_matrix
    else:
        nu_next = float(n_targets)
    ratio = nu_next / nu
    current_inverse = _inverse(current, f"Gram matrix G_{layer}")
    quadratic = current @ curvature @ current

    def coefficients(lam):
        return (_sym(fixed + (ratio * lam) * current_inverse),
                _sym(quadratic + (ratio * lam) * current))

    return coefficients


def omega_coefficients(config, state, grams, psi_q, psi_u, n_targets, coupled=True):
    """``lam -> (U, Q)`` of the App. L CARE of ``Omega`` (``G_2`` in ``grams`` already new)."""
    inducing, omega = state.inducing, state.omega
    dim = inducing.shape[1]
    nu = config.nu_input
    eye = torch.eye(dim, dtype=omega.dtype, device=omega.device)
    fixed = eye + (2.0 / nu) * psi_u
    curvature = (2.0 / nu) * psi_q
    if state.n_nodes > 1:
        nu_next = config.nu_hidden[0]
    if state.n_nodes > 1 and coupled:
        d_matrix, t_matrix = _message_terms(config, state, 1, grams[0], grams[1], nu_next)
        fixed = fixed + (nu_next / nu / dim) * (inducing.mT @ d_matrix @ inducing)
        curvature = curvature + (nu_next / nu / dim) * (inducing.mT @ t_matrix @ inducing)
    elif state.n_nodes == 1:
        nu_next = float(n_targets)
    ratio = nu_next / nu
    omega_inverse = _inverse(omega, "input scale Omega")
    quadratic = omega @ curvature @ omega

    def coefficients(lam):
        return (_sym(fixed + (ratio * lam) * omega_inverse),
                _sym(quadratic + (ratio * lam) * omega))

    return coefficients


def _solve(config, lam, natural, fallback, current, report):
    """The natural split's CARE; the PSD split (with mirror boosts) where it fails."""
    u_matrix, q_matrix = natural(lam)
    try:
        solution, info = solve_care(
            config.alpha, u_matrix, q_matrix, method=config.care_solver, initial=current,
            reg=config.kleinman_reg, max_iter=config.max_care_iter, tol=config.care_tol)
        report.append({**info, "split": "natural"})
        return solution
    except CARESolveError:
        pass
    report.append({"split": "psd"})
    return care_step(replace(config, mirror_reg=lam), config.alpha, fallback(), current, report)


def _split(fit, volume, index):
    return _sym(fit[index]), -_sym(volume[index])


def sparse_sweep(config, state, gradients, lam, n_targets, shrink=1.0, report=None,
                 weight_steps=None, whitened=False):
    """One Newton-like sweep from ``state`` with the stored data gradients; a new state.

    ``gradients = (fit, volume)``: the two seeds of
    :func:`skgpx.dkp._sparse._pass.objective_gradients` at ``state`` (order of
    ``state.tensors()``).  Hidden Grams top-down, then ``Omega``, then the hidden weights
    (``weight_steps`` in log space, else a Fisher step), scaled by ``shrink``.  With
    ``whitened`` the ``Omega`` step is the CARE of its own prior with the data gradient
    taken along :func:`transport`, and the Grams are carried to the new ``Omega`` and
    weights.  The output weights are not touched here.
    """
    report = [] if report is None else report
    fit, volume = gradients
    new = state.copy()
    if config.objective != "gp":
        grams = node_grams(config, state)
        for layer in range(state.n_nodes, 1, -1):
            psi_q, psi_u = _split(fit, volume, layer - 1)
            natural = layer_coefficients(config, state, layer, grams, psi_q, psi_u, n_targets)

            def fallback(layer=layer, psi=psi_q - psi_u):
                q, u = psd_split(psi, grams[layer - 1])
                return layer_coefficients(config, state, layer, grams, q, u, n_targets)

            grams[layer - 1] = _solve(config, lam, natural, fallback, grams[layer - 1], report)
        new.hidden_grams = grams[1:]
        if config.input_scale and whitened and state.n_nodes > 1:
            # the whitened step: Omega's own prior exactly, the rest through the transport
            psi = transported_omega_gradient(config, state, fit, volume)
            q, u = psd_split(psi, state.omega)
            coefficients = omega_coefficients(config, state, None, q, u, n_targets,
                                              coupled=False)
            new.omega = care_step(replace(config, mirror_reg=lam), config.alpha, coefficients,
                                  state.omega, report)
            carrier = state.copy(hidden_grams=new.hidden_grams)
            new.hidden_grams = transport(config, carrier, new.hidden_grams,
                                         state.weights[:-1], omega=new.omega)
        elif config.input_scale:
            psi_q, psi_u = _split(fit, volume, 0)
            natural = omega_coefficients(config, state, grams, psi_q, psi_u, n_targets)

            def fallback(psi=psi_q - psi_u):
                q, u = psd_split(psi, state.omega)
                return omega_coefficients(config, state, grams, q, u, n_targets)

            new.omega = _solve(config, lam, natural, fallback, state.omega, report)
    if weight_steps is not None and config.objective != "gp":
        weights = [w * torch.exp(shrink * step) for w, step in zip(state.weights, weight_steps)]
        carrier = state.copy(omega=new.omega, hidden_grams=new.hidden_grams)
        new.hidden_grams = transport(config, carrier, new.hidden_grams, weights)
        new.weights[:len(weights)] = weights
    elif config.learn_weights and state.n_nodes > 1:
        _hidden_weights(config, state, new, fit, volume, shrink)
    if config.objective == "gp":
        new.hidden_grams = prior_mean_grams(config, new)
    return new


def _hidden_weights(config, state, new, fit, volume, shrink):
    """Fisher (non-'gp') or normalised gradient ('gp') steps of the hidden weights, all from
    the gradients at ``state`` (Jacobi, like the data gradients)."""
    n_hidden = len(state.hidden_grams)
    offset = 1 + n_hidden
    leaves = [w.detach().clone().requires_grad_() for w in state.weights[:-1]]
    with torch.enable_grad():
        trial = state.copy(weights=[*leaves, state.weights[-1]])
        if config.objective == "gp":
            # the Grams are the prior means: the data gradient reaches the weights through them
            grams = prior_mean_grams(config, trial)
            seeds = [fit[1 + k] + volume[1 + k] for k in range(n_hidden)]
            pulled = torch.autograd.grad(grams, leaves, grad_outputs=seeds, allow_unused=True)
        else:
            pulled = torch.autograd.grad(prior_terms(config, trial), leaves, allow_unused=True)
    grams = [input_gram(state.inducing, state.omega), *state.hidden_grams]
    for j, weights in enumerate(state.weights[:-1]):
        gradient = fit[offset + j] + volume[offset + j]
        if pulled[j] is not None:
            gradient = gradient + pulled[j]
        if config.objective == "gp":
            grad_log = weights * gradient
            step = 0.5 * shrink * grad_log / grad_log.abs().max().clamp(min=1e-300)
            new.weights[j] = weights * torch.exp(step)
        else:
            scale = hidden_node(config, weights, grams[j], state.jitter)
            new.weights[j] = hidden_weight_step(config, weights, grams[j], scale, gradient,
                                                config.nu_hidden[j], shrink)


def newton_fit(config, state, rows, *, max_iter, tol, batch_size, hand_over=True,
               progress=None, whitened=True, learn_inducing=False):
    """Fit the sparse model by Newton-like sweeps with Anderson acceleration.

    Parameters
    ----------
    config : DKPConfig
    state : SparseDKPState
        The start (not modified).  For ``objective='gp'`` the hidden Grams are reset to
        their prior means.
    rows : skgpx._inducing._rows.Rows
    max_iter : int
        Sweeps (with ``hand_over``: sweeps plus L-BFGS iterations).
    tol : float or None
        Stop when a sweep changes the objective by at most ``tol * (|L| + 1)``; None runs
        ``max_iter`` sweeps.
    batch_size : int
        Rows per chunk of the passes.
    hand_over : bool, default=True
        Continue with :func:`skgpx.dkp._sparse._lbfgs.lbfgs_fit` once a sweep gains less
        than 1e-3 per row or the sweeps stall (``solver='auto'``).
    progress : callable(iteration, value) or None
    whitened : bool, default=True
        Step ``Omega`` and the hidden weights in the whitened coordinates of the L-BFGS
        parametrisation (the hidden Grams carried along, :func:`transport`); False: the
        paper's coupled ``Omega`` CARE and Fisher steps of the weights at fixed Grams.
    learn_inducing : bool, default=False
        Learn ``Z`` in the L-BFGS hand-over, which then comes after at most 5 sweeps (the
        sweeps keep ``Z`` fixed; needs ``state.coincide`` False).

    Returns
    -------
    SparseFit
        ``history`` per accepted sweep (``[0]`` the start); ``passes`` counts forward
        passes as 1 and gradient passes as 2.
    """
    n_rows, n_targets = rows.X.shape[0], rows.Y.shape[1]
    state = state.copy()
    if config.objective == "gp":
        state.hidden_grams = prior_mean_grams(config, state)
    passes = 0

    def evaluate(candidate):
        nonlocal passes
        passes += 1
        try:
            terms = objective_value(config, candidate, rows, batch_size)
        except Breakdown:
            return -math.inf, None
        value = float(terms.value)
        return (value, terms) if math.isfinite(value) else (-math.inf, None)

    value, terms = evaluate(state)
    if terms is None:
        raise Breakdown("The starting state of the sparse fit is not positive definite.")
    history, counts, warnings = [value], [passes], []
    lam0 = config.mirror_reg if config.mirror_reg > 0 else 1.0
    lam, shrink = config.mirror_reg, 1.0
    anderson, converged, stalled, secant = Anderson(), False, False, None
    for iteration in range(1, max_iter + 1):
        start_point = pack(config, state)
        weight, noise = output_newton(
            terms.statistics, state.weights[-1][0], state.weights[-1][1], n_targets,
            learn_weight=config.learn_weights, learn_noise=config.learn_noise,
            noise_floor=config.noise_floor)
        current = state.copy()
        current.weights[-1] = torch.stack([weight, noise])
        passes += 2
        gterms, grads = objective_gradients(config, current, rows, batch_size,
                                            seeds=("fit", "volume"))
        base = float(gterms.value)
        steps = None
        if whitened and config.learn_weights and config.objective != "gp" \
                and state.n_nodes > 1:
            steps, secant = _weight_steps(config, current, grads, secant)
        for attempt in range(_MAX_REJECTIONS + 1):
            try:
                candidate = sparse_sweep(config, current, (grads["fit"], grads["volume"]), lam,
                                         n_targets, shrink, weight_steps=steps,
                                         whitened=whitened)
                new_value, new_terms = evaluate(candidate)
            except (Breakdown, CARESolveError, torch.linalg.LinAlgError):
                new_value = -math.inf
            if new_value >= base:
                break
            lam, shrink = 4.0 * max(lam, lam0 / 4.0), shrink / 4.0
        else:
            stalled = True
            state, value, terms = current, base, gterms
            break
        lam, shrink = max(config.mirror_reg, lam / 2.0), min(1.0, 2.0 * shrink)
        extrapolated = anderson.extrapolate(start_point, pack(config, candidate))
        if extrapolated is not None:
            trial = unpack(config, candidate, extrapolated)
            if trial is not None:
                trial_value, trial_terms = evaluate(trial)
                if trial_value >= new_value:
                    candidate, new_value, new_terms = trial, trial_value, trial_terms
        gain = new_value - value
        state, value, terms = candidate, new_value, new_terms
        history.append(value)
        counts.append(passes)
        if progress is not None:
            progress(iteration, value)
        if tol is not None and abs(gain) <= tol * (abs(value) + 1.0):
            converged = True
            break
        if hand_over and (gain < _HAND_OVER_GAIN * n_rows
                          or learn_inducing and iteration >= _SWEEPS_BEFORE_INDUCING):
            break
    fit = SparseFit(state=state, history=history, passes=counts, converged=converged,
                    solver="newton", warnings=warnings)
    remaining = max_iter - (len(history) - 1)
    if hand_over and not converged and remaining > 0 and (stalled or len(history) > 1):
        if stalled or learn_inducing or history[-1] - history[-2] < _HAND_OVER_GAIN * n_rows:
            return _hand_over(config, fit, rows, remaining, tol, batch_size, progress, passes,
                              learn_inducing)
    if stalled:
        warnings.append("The Newton-like sweeps stalled: no sweep raised the objective even "
                        f"with the mirror term x{4 ** _MAX_REJECTIONS}.")
    return fit


def _weight_steps(config, state, grads, secant):
    """Log-weight steps of the hidden nodes along :func:`transport`: gradient steps with a
    Barzilai-Borwein length from the previous sweep's (log weights, gradient)."""
    gradient = torch.cat(transported_gradient(config, state, grads["fit"], grads["volume"]))
    point = torch.cat([torch.log(w) for w in state.weights[:-1]])
    length = 0.1 / float(gradient.abs().max().clamp(min=1e-300))
    if secant is not None:
        moved, change = point - secant[0], secant[1] - gradient
        curvature = float(moved @ change)
        length = float(moved @ moved) / curvature if curvature > 0 else 2.0 * secant[2]
        length = min(length, 10.0 * secant[2])
    step = torch.clamp(length * gradient, -1.0, 1.0)
    sizes = [w.numel() for w in state.weights[:-1]]
    return list(torch.split(step, sizes)), (point, gradient, length)


def _hand_over(config, fit, rows, max_iter, tol, batch_size, progress, passes, learn_inducing):
    from ._lbfgs import lbfgs_fit  # written alongside; imported when first needed
    offset = len(fit.history) - 1
    shifted = None if progress is None else (lambda i, v: progress(offset + i, v))
    tail = lbfgs_fit(config, fit.state, rows, max_iter=max_iter, tol=tol, batch_size=batch_size,
                     progress=shifted, passes=passes, learn_inducing=learn_inducing)
    return SparseFit(state=tail.state, history=fit.history + tail.history[1:],
                     passes=fit.passes + tail.passes[1:], converged=tail.converged,
                     solver="lbfgs", warnings=fit.warnings + tail.warnings)
