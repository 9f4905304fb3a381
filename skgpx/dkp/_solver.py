"""One sweep of the point solver: natural-gradient weights, CARE layer updates, Omega.

The sweep runs from the output down to the input (Aitchison, arXiv:2108.13097, Alg. 1), so
every update sees the freshest layer above it.  Each block update maximises the objective of
:func:`~skgpx.dkp._model.dkp_objective` in its own block:

* sum-kernel weights: Fisher scoring in log space with an acceptance check (App. K);
* hidden Gram matrices: the stabilised Riccati equation of App. E-F (Eq. 123);
* the input scale ``Omega``: the same equation on ``d x d`` matrices (App. L), then
  joint steps of ``Omega`` with the hidden Grams (:mod:`skgpx.dkp._input_scale`).
"""

import math
from dataclasses import dataclass

import torch

from ..linalg import try_cholesky
from ._riccati import CARESolveError, solve_care
from ._grams import chain_derivatives, contract_derivatives
from ._input_scale import joint_input_scale_steps
from ._model import (
    Breakdown, forward_prior_means, gaussian_term, kernel_of, node_components, node_derivatives,
    node_fixed_eye, node_matrix, spd_factors,
)

__all__ = ["Message", "sweep"]

_MAX_LOG_STEP = 2.0
_MAX_HALVINGS = 10
_MAX_MIRROR_BOOSTS = 8


def _sandwich(inverse, gram=None, root=None):
    """``Z G Z`` for ``G`` given densely or as ``R R^T`` (the targets' Gram matrix)."""
    if root is not None:
        half = inverse @ root
        return half @ half.mT
    # symmetric up to rounding; it is only read through Hadamard products whose results
    # feed symmetric (one-triangle) factorisations
    return inverse @ gram @ inverse


def _times_next(inverse, gram=None, root=None):
    """``Z G`` for ``G`` given densely or as ``R R^T``."""
    if root is not None:
        return (inverse @ root) @ root.mT
    return inverse @ gram


def _components(config, state, j, kernel_matrix, identity_as_none=False):
    """The matrices that node ``j``'s weights multiply (``None`` for an identity if asked)."""
    eye = None if identity_as_none else torch.eye(
        kernel_matrix.shape[0], dtype=kernel_matrix.dtype, device=kernel_matrix.device)
    table = {"kernel": kernel_matrix, "linear": state.gram(j), "eye": eye}
    return [table[name] for name in node_components(config, state, j)]


def _learnable(config, state, j):
    names = node_components(config, state, j)
    return [config.learn_noise if name == "eye" else config.learn_weights for name in names]


def _direction(component, message):
    """``dK_next / dw`` for one component: ``C o M + Diag(C) N + N^T Diag(C)`` (Eq. 23)."""
    m_matrix, n_matrix = message
    out = component * m_matrix
    if n_matrix is not None:
        scaled = component.diagonal()[:, None] * n_matrix
        out = out + scaled + scaled.mT
    return out


def _direction_products(directions, learnable, inverse, weights, fixed_eye):
    """``Z D_a`` for the learnable directions.

    The Eye direction is the identity (no product).  For a hidden node
    ``S = w K + v G + eps I`` (directions ``K``, ``G``), ``Z S = I`` gives
    ``Z G = (I - w Z K - eps Z) / v``: one matrix product instead of two, used while
    ``v`` is not so small that rounding in ``Z S = I`` would be amplified.
    """
    products = [None] * len(directions)
    index = [a for a, flag in enumerate(learnable) if flag]
    if len(directions) == 2 and all(d is not None for d in directions) and all(learnable) \
            and float(weights[1]) > 1e-3 * float(weights[0]):
        products[0] = inverse @ directions[0]
        eye = torch.eye(inverse.shape[0], dtype=inverse.dtype, device=inverse.device)
        products[1] = (eye - weights[0] * products[0] - fixed_eye * inverse) / weights[1]
    else:
        for a in index:
            products[a] = inverse if directions[a] is None else inverse @ directions[a]
    return [products[a] for a in index]


def _fisher_step(weights, learnable, products, next_times_inverse, nu, curvature=None,
                 keep_direction=False):
    """Fisher-scoring step in log weights, ``clip(F_u^-1 g_u, +-2)`` (App. K, corrected).

    ``g_a = nu/2 Tr((Z G' Z - Z) D_a)`` and ``F_ab = nu/2 Tr(Z D_a Z D_b)`` for the
    directions ``D_a = dK/dw_a``, given ``products = [Z D_a]`` of the learnable ones;
    the paper's ``dw = -F g`` misses the inverse.

    ``curvature``, for a matrix linear in its weights (``d^2 K / dw_a dw_b = 0``), is
    ``T_ab = Tr(Z D_a Z G' Z D_b)`` (:func:`_data_curvature`): the step is then Newton's,
    ``-H_u^-1 g_u`` with the observed Hessian in log weights
    ``H_u = nu/2 w_a w_b (Tr(Z D_a Z D_b) - 2 T_ab) + diag(g_u)``, whenever ``-H_u`` is
    positive definite.  Fisher scoring converges only linearly (the error shrank by
    0.1-0.3 per sweep on the shallow GP), so its predicted gains fall below the
    rounding level of the objective while the weights are still ~1e-6 off the
    optimum; Newton converges quadratically.

    ``keep_direction`` shrinks the whole step to the ``+-2`` bound instead of clipping
    each coordinate.  The deep ``'gp'`` sweep needs it: there ``F`` of a hidden node is
    nearly singular, the per-coordinate clip turned its ascent direction into a descent
    one, every halving was rejected, and the fit stopped (``converged_`` with ``tol``) at
    log-weight gradients up to 12.  The Wishart sweeps keep the clip: in our runs it
    acted there only in the first sweep, where it progressed faster (toy, 80 rows:
    objective -46.67 against -51.46 after one sweep).
    """
    index = [a for a, flag in enumerate(learnable) if flag]
    grad = torch.stack([
        (next_times_inverse.mT * prod).sum() - prod.diagonal().sum() for prod in products
    ])
    # F_ab = Tr(Z D_a Z D_b) = sum((Z D_a) o (Z D_b)^T), k(k+1)/2 <= 3 reductions
    size = len(products)
    fisher = torch.empty((size, size), dtype=weights.dtype, device=weights.device)
    for a in range(size):
        for b in range(a, size):
            fisher[a, b] = fisher[b, a] = (products[a] * products[b].mT).sum()
    w = weights[index]
    grad_u = 0.5 * nu * w * grad
    fisher_u = 0.5 * nu * w[:, None] * fisher * w[None, :]
    fisher_u = fisher_u + 1e-12 * fisher_u.diagonal().abs().max() * torch.eye(
        len(index), dtype=w.dtype, device=w.device
    )
    if curvature is not None:
        # minus the observed Hessian; the Fisher model where it is not negative definite
        observed = nu * w[:, None] * curvature * w[None, :] - 0.5 * nu * w[:, None] * fisher \
            * w[None, :] - torch.diag(grad_u)
        observed = 0.5 * (observed + observed.mT)
        if try_cholesky(observed) is not None:
            fisher_u = observed  # the local quadratic model of the steps below
    # minimum-norm solution through the symmetric pseudo-inverse (an eigendecomposition):
    # torch's default CPU least-squares driver, gelsy, reads a pivot array it never
    # clears (pytorch/pytorch#71222), so its step depends on the allocator's history
    step = torch.linalg.pinv(fisher_u, hermitian=True) @ grad_u
    if keep_direction:
        step = step * torch.clamp(_MAX_LOG_STEP / step.abs().max(), max=1.0)
    else:
        step = torch.clamp(step, -_MAX_LOG_STEP, _MAX_LOG_STEP)
    full = torch.zeros_like(weights)
    full[index] = step

    def predicted_gain(scale):
        """Gain of ``scale * step`` under the local quadratic (Fisher or Newton) model."""
        scaled = scale * step
        return float(grad_u @ scaled - 0.5 * scaled @ fisher_u @ scaled)

    return full, predicted_gain


def _data_curvature(products, whitened, root):
    """``T_ab = Tr(Z D_a Z G' Z D_b)`` for ``G' = R R^T``, from ``products = [Z D_a]`` and
    ``whitened = Z R``: ``Tr(P_a V R^T P_b) = sum((P_b^T R) o (P_a V))``, ``O(P^2 t)``."""
    left = [prod @ whitened for prod in products]
    right = [prod.mT @ root for prod in products]
    size = len(products)
    out = torch.empty((size, size), dtype=root.dtype, device=root.device)
    for a in range(size):
        for b in range(a, size):
            out[a, b] = out[b, a] = 0.5 * ((right[b] * left[a]).sum() + (right[a] * left[b]).sum())
    return out


def _accept(weights, step, evaluate, floor_index, noise_floor, current=None, predicted_gain=None,
            take_small=False):
    """Halve the log step until ``evaluate`` does not decrease; returns (weights, payload).

    ``current`` is ``evaluate(weights)`` when the caller already has it.  A step whose
    gain predicted by the Fisher model is below rounding level of the objective is not
    tried: at convergence such steps are rejected anyway, each after a factorisation.
    With ``take_small`` (Newton steps) such a step is taken whenever its objective is
    finite: the objective cannot tell it from no step, while the weights can still be
    ~1e-6 off (the gain is quadratic in the distance), and it is that last step which
    brings them to the optimum.
    """
    current, payload = evaluate(weights) if current is None else current
    scale = 1.0
    for _ in range(_MAX_HALVINGS + 1):
        small = predicted_gain is not None \
            and predicted_gain(scale) <= 1e-12 * (1.0 + abs(current))
        if small and not take_small:
            break
        trial = weights * torch.exp(scale * step)
        if floor_index is not None:
            trial[floor_index] = torch.clamp(trial[floor_index], min=noise_floor)
        value, trial_payload = evaluate(trial)
        if value >= current or (small and value > -math.inf):
            return trial, trial_payload
        scale = 0.5 * scale
    return weights, payload


def _local_value(factor, inverse, gram_next, root, nu):
    """``nu/2 (-log|S| - Tr(S^-1 G'))`` from the Cholesky factor (and inverse) of ``S``."""
    value = 0.5 * nu * gaussian_term(factor, root=root, gram=gram_next, inverse=inverse)
    return float(value) if bool(torch.isfinite(value)) else -math.inf


def _local_evaluator(config, state, j, kernel_matrix, gram_next=None, root=None, nu=1.0):
    """``S_j(w) -> (local value, (S_j, S_j^-1))``; ``-inf`` when ``S_j`` is not PD."""

    def evaluate(weights):
        matrix = node_matrix(config, state, j, weights, kernel_matrix)
        factor = try_cholesky(matrix)
        if factor is None:
            return -math.inf, None
        inverse = torch.cholesky_inverse(factor)
        value = _local_value(factor, inverse, gram_next, root, nu)
        return value, (None if value == -math.inf else (matrix, inverse))

    return evaluate


def _floor_index(config, state, j):
    names = node_components(config, state, j)
    return names.index("eye") if "eye" in names else None


def update_local_weights(config, state, j, gram_next=None, root=None, nu=1.0, current=None):
    """App. K step for node ``j`` whose matrix is the Wishart scale (or output covariance)
    of ``G'`` directly (``M = 1``, ``N = 0``).

    ``current`` is ``(S_j, S_j^-1, chol)`` at the current weights when already known.
    Returns ``(S_j, S_j^-1)`` after the step.
    """
    kernel_matrix = kernel_of(config, state, j)
    if current is None:
        matrix = node_matrix(config, state, j, kernel_matrix=kernel_matrix)
        factor, inverse = spd_factors(state, matrix, f"S_{j}")
    else:
        matrix, inverse, factor = current
    learnable = _learnable(config, state, j)
    if not any(learnable):
        return matrix, inverse
    value = _local_value(factor, inverse, gram_next, root, nu)
    if value == -math.inf:
        raise Breakdown(f"S_{j}")
    directions = _components(config, state, j, kernel_matrix, identity_as_none=True)
    products = _direction_products(
        directions, learnable, inverse, state.weights[j - 1], node_fixed_eye(state, j))
    step, gain = _fisher_step(
        state.weights[j - 1], learnable, products, _times_next(inverse, gram_next, root), nu)
    evaluate = _local_evaluator(config, state, j, kernel_matrix, gram_next, root, nu)
    weights, payload = _accept(
        state.weights[j - 1], step, evaluate, _floor_index(config, state, j), config.noise_floor,
        current=(value, (matrix, inverse)), predicted_gain=gain,
    )
    state.weights[j - 1] = weights
    return payload


def care_step(config, alpha, coefficients, initial, report):
    """Solve the layer's Riccati equation, strengthening the mirror term if needed.

    ``coefficients(lam)`` returns ``(U, Q)`` for a mirror weight ``lam``.  When the
    equation has no positive-definite solution (``Q`` too indefinite), the proximity
    term is made 4x stronger, up to ``_MAX_MIRROR_BOOSTS`` times: a shorter step with
    the same fixed point, since the mirror terms cancel at ``G = G~``.  As ``lam``
    grows, ``U -> r lam G~^-1`` and ``Q -> r lam G~``, whose solution tends to ``G~``.
    """
    lam = config.mirror_reg if config.mirror_reg > 0 else 1.0
    for boost in range(_MAX_MIRROR_BOOSTS + 1):
        u_matrix, q_matrix = coefficients(config.mirror_reg if boost == 0 else lam)
        try:
            solution, info = solve_care(
                alpha, u_matrix, q_matrix, method=config.care_solver,
                initial=initial, reg=config.kleinman_reg, max_iter=config.max_care_iter,
                tol=config.care_tol,
            )
        except CARESolveError as error:
            last_error = error
            lam = 4.0 * lam
            continue
        report.append({**info, "mirror_boosts": boost})
        return solution
    raise Breakdown(str(last_error))


@dataclass(frozen=True)
class Message:
    """What a node sends down to the Gram matrix below it (Aitchison, arXiv:2108.13097, App. J).

    ``K_next`` is the kernel built on the receiving Gram matrix ``G`` that is the
    Wishart scale (or the output covariance) of ``G_next``.  The message carries
    ``nu_next``, ``K_next^-1``, ``G_next`` (dense, or as a root ``R`` with
    ``G_next = R R^T``) and the derivatives ``(M, N)`` of ``K_next`` in ``G``.
    Several messages reaching one Gram matrix (forks, App. J.3) add their ``r D``
    and ``r G~ T G~`` terms; the sweeps here build a chain: one message per layer.
    """

    nu: float
    inverse: torch.Tensor
    derivatives: tuple
    gram: torch.Tensor = None
    root: torch.Tensor = None

    def terms(self):
        """``D = M o Z + 2 Diag(N Z)`` and ``T = M o H + 2 Diag(N H)``, ``H = Z G_next Z``."""
        m_matrix, n_matrix = self.derivatives
        sandwich = _sandwich(self.inverse, self.gram, self.root)
        return (contract_derivatives(m_matrix, n_matrix, self.inverse),
                contract_derivatives(m_matrix, n_matrix, sandwich))


def update_hidden_gram(config, state, layer, messages, prev_inverse, report):
    """Stabilised CARE update of ``G_layer`` (Aitchison, arXiv:2108.13097, Eq. 123)::

        U = S_{l-1}^-1 + sum_msg r (D + lam G~^-1),   Q = sum_msg r (G~ T G~ + lam G~),
        0 = 2 alpha G - G U G + Q,                    r = nu_next / nu_l,

    with ``D``, ``T`` from each :class:`Message` (for the chain: ``Z = S_l^-1``,
    ``H = Z G_{l+1} Z`` and ``(M, N)`` the derivatives of ``S_l`` in ``G_l``).
    """
    current = state.gram(layer)
    current_inverse = spd_factors(state, current, f"G_{layer}")[1]
    data, curvature, ratio = 0.0, 0.0, 0.0
    for message in messages:
        r = message.nu / config.nu_hidden[layer - 2]
        d_matrix, t_matrix = message.terms()
        data = data + r * d_matrix
        curvature = curvature + r * (current @ t_matrix @ current)
        ratio += r

    def coefficients(lam):
        return (prev_inverse + data + (ratio * lam) * current_inverse,
                curvature + (ratio * lam) * current)

    state.hidden_grams[layer - 2] = care_step(config, config.alpha, coefficients, current, report)


def update_input_scale(config, state, messages, report):
    """CARE update of ``Omega`` (Aitchison, App. L; Eq. 190 without its extra ``1/nu_0``)::

        U = I + sum_msg [(r/nu_0) X^T D X + r lam Omega~^-1],
        Q = sum_msg [(r/nu_0) Omega~ X^T T X Omega~ + r lam Omega~],   r = nu_2 / nu_1.
    """
    inputs, omega = state.inputs, state.omega
    omega_inverse = spd_factors(state, omega, "Omega")[1]
    eye = torch.eye(omega.shape[0], dtype=omega.dtype, device=omega.device)
    data, curvature, ratio = 0.0, 0.0, 0.0
    for message in messages:
        r = message.nu / config.nu_input
        d_matrix, t_matrix = message.terms()
        data = data + (r / inputs.shape[1]) * (inputs.mT @ d_matrix @ inputs)
        projected = omega @ (inputs.mT @ t_matrix @ inputs) @ omega
        curvature = curvature + (r / inputs.shape[1]) * projected
        ratio += r

    def coefficients(lam):
        return (eye + data + (ratio * lam) * omega_inverse, curvature + (ratio * lam) * omega)

    state.omega = care_step(config, config.alpha, coefficients, omega, report)


def _message_from(config, state, j, inverse, above):
    """The chain's message from node ``j`` down to ``G_j``; ``above = (G_next, root, nu)``."""
    gram, root, nu = above
    return Message(nu=nu, inverse=inverse, derivatives=node_derivatives(config, state, j)[0],
                   gram=gram, root=root)


def _wishart_sweep(config, state, report):
    last = state.n_nodes
    root, n_targets = state.data_root, float(state.targets.shape[1])
    _, scale_inverse = update_local_weights(config, state, last, root=root, nu=n_targets)
    for layer in range(last, 1, -1):
        above = (None, root, n_targets) if layer == last else (
            state.gram(layer + 1), None, config.nu_hidden[layer - 1])
        prev_scale = node_matrix(config, state, layer - 1)
        prev_factor, prev_inverse = spd_factors(state, prev_scale, f"S_{layer - 1}")
        message = _message_from(config, state, layer, scale_inverse, above)
        update_hidden_gram(config, state, layer, [message], prev_inverse, report)
        _, scale_inverse = update_local_weights(
            config, state, layer - 1, gram_next=state.gram(layer), nu=config.nu_hidden[layer - 2],
            current=(prev_scale, prev_inverse, prev_factor))
    if config.input_scale:
        above = (None, root, n_targets) if last == 1 else (state.gram(2), None, config.nu_hidden[0])
        update_input_scale(config, state, [_message_from(config, state, 1, scale_inverse, above)],
                           report)
        if config.input_scale_steps and config.objective == "dkp" \
                and state.n_sweeps % config.input_scale_every == 0:
            # not for 'dgp': without the log|Omega| term its objective grows without bound
            # along Omega, and the joint steps would follow it
            joint_input_scale_steps(config, state, config.input_scale_steps)
    state.n_sweeps += 1


def _gp_sweep(config, state, report):
    """Weights of every node by App. K, messages chained through deterministic layers."""
    last = state.n_nodes
    root, n_targets = state.data_root, float(state.targets.shape[1])
    for j in range(last, 0, -1):
        learnable = _learnable(config, state, j)
        if not any(learnable):
            continue
        message = (1.0, None)
        for k in range(last, j, -1):
            message = chain_derivatives(node_derivatives(config, state, k)[0], message)
        output_inverse = spd_factors(state, node_matrix(config, state, last), f"S_{last}")[1]
        kernel_matrix = kernel_of(config, state, j)
        directions = [_direction(c, message) for c in _components(config, state, j, kernel_matrix)]

        def evaluate(weights, j=j):
            trial = state.copy()
            trial.weights[j - 1] = weights
            forward_prior_means(config, trial, start=j)
            factor = try_cholesky(node_matrix(config, trial, last))
            if factor is None:
                return -math.inf, None
            value = _local_value(factor, None, None, root, n_targets)
            return (value, None if value == -math.inf else trial)

        products = [output_inverse @ directions[a] for a, flag in enumerate(learnable) if flag]
        # S_L is linear in its own weights: Newton steps with the observed Hessian there
        curvature = _data_curvature(products, output_inverse @ root, root) if j == last else None
        step, gain = _fisher_step(
            state.weights[j - 1], learnable, products, _times_next(output_inverse, root=root),
            n_targets, curvature=curvature, keep_direction=True)
        _, trial = _accept(state.weights[j - 1], step, evaluate, _floor_index(config, state, j),
                           config.noise_floor, predicted_gain=gain,
                           take_small=curvature is not None)
        if trial is None:
            raise Breakdown(f"S_{last}")
        state.weights[j - 1] = trial.weights[j - 1]
        state.hidden_grams[:] = trial.hidden_grams


def sweep(config, state):
    """One solver sweep, in place on ``state``; returns the CARE solver reports."""
    report = []
    if config.objective == "gp":
        _gp_sweep(config, state, report)
    else:
        _wishart_sweep(config, state, report)
    return report
