"""Joint steps of the input scale ``Omega`` with the hidden Gram matrices.

The block update of ``Omega`` in Aitchison (arXiv:2108.13097, App. L;
:func:`~skgpx.dkp._solver.update_input_scale`) holds ``G_2`` fixed.  With ``nu_2`` large,
``G_2`` pins ``S_1 = S_1(X Omega X^T / nu_0)`` and so ``Omega`` itself: the block maximiser
hardly moves although ``dL/dOmega`` is far from zero (we measured ``diag Omega = 1.00 +-
0.03`` after 100 sweeps of block updates alone).

Here ``Omega`` moves together with every hidden Gram matrix.  Each ``G_l`` is written
relative to its prior scale, ``G_l = C_{l-1} A_l C_{l-1}^T`` with ``C_{l-1} C_{l-1}^T =
S_{l-1}`` (Cholesky), and the whitened ``A_l`` are held fixed while ``Omega`` changes.
A Cholesky factor depends on the order of the rows, so the factors are taken with the
rows in a canonical (lexicographic) order of the inputs: a permuted data set then gets the
permuted fit.
The hidden terms ``-nu_l KL(N(0, G_l) || N(0, S_{l-1})) = -nu_l KL(N(0, A_l) || N(0, I))``
are then constant, so a step trades only the prior of ``Omega`` against the likelihood of
the targets, through the whole chain of layers: the coupling that stalls the block update
is moved along instead of fought.  Steps follow the affine-invariant (Riemannian) gradient
on SPD matrices,

.. math::

    \\Omega(t) = \\Omega^{1/2}
        \\exp\\big(t\\, \\Omega^{1/2} \\nabla_\\Omega L\\, \\Omega^{1/2}\\big) \\Omega^{1/2},

which keeps ``Omega`` positive definite; ``t`` is shortened until the objective increases
(otherwise the step is not taken), so every step is an ascent step.
"""

import math

import numpy as np
import torch

from ..linalg import try_cholesky
from ._grams import contract_derivatives
from ._model import Breakdown, gaussian_term, node_derivatives, node_matrix

__all__ = ["joint_input_scale_steps"]

_MAX_TRIALS = 10
_FIRST_STEP = 0.5  # spectral norm of the first trial's exponent


def _symmetric_function(matrix, function):
    values, vectors = torch.linalg.eigh(0.5 * (matrix + matrix.mT))
    return (vectors * function(values)) @ vectors.mT


def canonical_order(inputs):
    """Row indices sorting the input rows lexicographically (first column first)."""
    keys = inputs.detach().cpu().numpy()
    return torch.as_tensor(np.lexsort(keys.T[::-1]), device=inputs.device)


def _reordered(matrix, order):
    return matrix.index_select(0, order).index_select(1, order)


def whitened_grams(config, state, order):
    """``A_l = C_{l-1}^{-1} G_l C_{l-1}^{-T}`` for ``l = 2 .. L``, with ``C C^T = S_{l-1}``
    and both in the row order ``order``."""
    out = []
    for layer in range(2, state.n_nodes + 1):
        factor = torch.linalg.cholesky(_reordered(node_matrix(config, state, layer - 1), order))
        half = torch.linalg.solve_triangular(factor, _reordered(state.gram(layer), order),
                                             upper=False)
        out.append(torch.linalg.solve_triangular(factor, half.mT, upper=False))
    return out


def transported_state(config, state, omega, whitened, order):
    """A copy of ``state`` at ``omega`` whose Gram matrices keep the whitened ``A_l``."""
    moved = state.copy(omega=omega, grams_cache={})
    inverse = torch.argsort(order)
    for layer in range(2, state.n_nodes + 1):
        scale = _reordered(node_matrix(config, moved, layer - 1), order)
        factor = torch.linalg.cholesky(scale)
        gram = _reordered(factor @ whitened[layer - 2] @ factor.mT, inverse)
        moved.hidden_grams[layer - 2] = 0.5 * (gram + gram.mT)
    return moved


def _omega_term(config, omega):
    """``nu_1/2 (log|Omega| - Tr Omega)``: with the likelihood, the only part of the
    objective that moves along the transport (the hidden KL terms stay as they are)."""
    return 0.5 * config.nu_input * (torch.linalg.slogdet(omega)[1] - torch.diagonal(omega).sum())


def _likelihood(factor, root):
    """``t/2 (-log|S_L| - Tr(S_L^-1 R R^T))`` from ``chol(S_L)``, the targets' term less
    its constant."""
    return 0.5 * root.shape[1] * gaussian_term(factor, root=root)


def _value(config, state, omega, whitened, order):
    """The objective at ``omega`` with the Grams transported, less the hidden KL terms
    (constant along the transport), and the transported state (``(-inf, None)`` where a
    matrix of the chain is not positive definite).

    Only the factorisations of the transport and of the output covariance are taken:
    those of a trial that is rejected would be wasted, and those of the accepted one
    are taken once by the objective that ends the sweep.
    """
    try:
        with torch.no_grad():
            moved = transported_state(config, state, omega, whitened, order)
            factor = try_cholesky(node_matrix(config, moved, moved.n_nodes))
            if factor is None:
                return -math.inf, None
            value = float(_omega_term(config, omega) + _likelihood(factor, moved.data_root))
    except (Breakdown, torch.linalg.LinAlgError):
        return -math.inf, None
    return (value, moved) if math.isfinite(value) else (-math.inf, None)


def _factor(matrix):
    factor = try_cholesky(matrix)
    if factor is None:
        raise Breakdown("A matrix of the transported chain is not positive definite.")
    return factor


def _value_and_gradient(config, state, order):
    """At ``state.omega``: the value of :func:`_value`, the symmetric gradient of the
    transported objective in ``Omega``, and the whitened Grams ``A_l`` (in ``order``).

    Reverse mode written out on the factors the transport itself takes, in place of
    autograd through the whole objective: the hidden KL terms are constant along the
    transport and drop out, and ``G_l = C A_l C^T`` is never formed (it is ``G_l``).
    Going down the chain, with ``Sb = dL/dS`` (symmetric)::

        Sb_L = t/2 (S_L^-1 R R^T S_L^-1 - S_L^-1)
        Gb_l = M_l o Sb_l + 2 Diag(N_l Sb_l)                 (derivatives of S_l in G_l)
        Sb_{l-1} = sym(C^-T Phi(C^T Cb) C^-1),  Cb = 2 Gb_l G_l C^-T,  C = chol(S_{l-1})
        dL/dOmega = X^T Gb_1 X / nu_0 + nu_1/2 (Omega^-1 - I)

    where ``Phi`` keeps the lower triangle and halves the diagonal (the derivative of a
    Cholesky factor).  ``Raises`` :class:`Breakdown` when a factor fails.
    """
    ordered = state.copy(
        inputs=state.inputs.index_select(0, order), targets=state.targets.index_select(0, order),
        hidden_grams=[_reordered(gram, order) for gram in state.hidden_grams], grams_cache={})
    last = ordered.n_nodes
    factors, halves, whitened = [], [], []
    with torch.no_grad():
        for layer in range(2, last + 1):
            factor = _factor(node_matrix(config, ordered, layer - 1))
            half = torch.linalg.solve_triangular(factor, ordered.gram(layer), upper=False)
            factors.append(factor)
            halves.append(half)  # C^-1 G = (G C^-T)^T
            whitened.append(torch.linalg.solve_triangular(factor, half.mT, upper=False))
        factor = _factor(node_matrix(config, ordered, last))
        root = ordered.data_root
        value = _omega_term(config, ordered.omega) + _likelihood(factor, root)
        weighted = torch.cholesky_solve(root, factor)
        bar = 0.5 * root.shape[1] * (weighted @ weighted.mT - torch.cholesky_inverse(factor))
        for layer in range(last, 1, -1):
            derivatives, _ = node_derivatives(config, ordered, layer)
            gram_bar = contract_derivatives(*derivatives, bar)
            factor, half = factors[layer - 2], halves[layer - 2]
            inner = 2.0 * (factor.mT @ gram_bar) @ half.mT
            inner = inner.tril()
            inner.diagonal().mul_(0.5)
            left = torch.linalg.solve_triangular(factor.mT, inner, upper=True)
            bar = torch.linalg.solve_triangular(factor, left, upper=False, left=False)
            bar = 0.5 * (bar + bar.mT)
        derivatives, _ = node_derivatives(config, ordered, 1)
        gram_bar = contract_derivatives(*derivatives, bar)
        inputs, omega = ordered.inputs, ordered.omega
        eye = torch.eye(omega.shape[0], dtype=omega.dtype, device=omega.device)
        gradient = inputs.mT @ gram_bar @ inputs / inputs.shape[1] \
            + 0.5 * config.nu_input * (torch.linalg.inv(omega) - eye)
    return float(value), 0.5 * (gradient + gradient.mT), whitened


def _shorter(size, value, slope, trial_value):
    """The next trial after a rejected one: the maximiser of the parabola through the
    value and slope at 0 and the trial's value, kept in ``[size/10, size/2]``."""
    if not math.isfinite(trial_value):
        return 0.5 * size
    drop = value + slope * size - trial_value  # > 0: the trial fell short of the tangent
    if not drop > 0.0:
        # no parabola with a maximum fits (in float32 a tiny trial can land on the tangent
        # exactly): halve
        return 0.5 * size
    return min(0.5 * size, max(0.1 * size, 0.5 * slope * size * size / drop))


def joint_input_scale_steps(config, state, n_steps):
    """Up to ``n_steps`` ascent steps of ``Omega`` with the Grams transported, in place.

    The first trial of a step is twice the last accepted step (``state.omega_step``, the
    spectral norm of the exponent), at most ``0.5``; after a rejected trial the next is
    the maximiser of the parabola through the value and slope at 0 and the rejected
    value (:func:`_shorter`): one rejection per step where halving took two or three,
    as the best step shrinks from sweep to sweep.
    Returns the number of steps taken (it stops early when no trial increases the
    objective).  Only the squared-exponential kernel takes steps: the arc-cosine
    kernels' derivative in ``Omega`` is not finite where two Gram rows are parallel.
    """
    if config.kernel != "sqexp":
        return 0
    order = canonical_order(state.inputs)
    taken, moved = 0, state
    for _ in range(n_steps):
        try:
            value, gradient, whitened = _value_and_gradient(config, moved, order)
        except Breakdown:
            break
        if not (math.isfinite(value) and bool(torch.isfinite(gradient).all())):
            break
        omega = moved.omega
        root = _symmetric_function(omega, torch.sqrt)
        direction = root @ gradient @ root
        norm = float(torch.linalg.matrix_norm(direction, 2))
        if not norm > 0.0:
            break
        # the slope of t -> L(Omega(t)) at t = 0 along the unit-norm exponent
        slope = float((direction * direction).sum()) / norm
        size = min(_FIRST_STEP, 2.0 * state.omega_step)
        for _ in range(_MAX_TRIALS):
            trial = root @ _symmetric_function((size / norm) * direction, torch.exp) @ root
            trial = 0.5 * (trial + trial.mT)
            trial_value, trial_state = _value(config, moved, trial, whitened, order)
            if trial_value > value:
                state.omega_step = size
                moved = trial_state
                taken += 1
                break
            size = _shorter(size, value, slope, trial_value)
        else:
            break
    if taken:
        # the accepted trial's transported state, with its cached kernel and node matrices:
        # the objective that ends the sweep reuses them
        state.omega = moved.omega
        state.hidden_grams[:] = moved.hidden_grams
        state.grams_cache = moved.grams_cache
    return taken
