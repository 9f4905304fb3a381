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

which keeps ``Omega`` positive definite; ``t`` is halved until the objective increases
(otherwise the step is not taken), so every step is an ascent step.
"""

import math

import numpy as np
import torch

from ._model import Breakdown, dkp_objective, node_matrix

__all__ = ["joint_input_scale_steps"]

_MAX_HALVINGS = 10
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


def _value(config, state, omega, whitened, order):
    """The objective at ``omega`` with the Grams transported, and the transported state
    (``(-inf, None)`` where a matrix of the chain is not positive definite)."""
    try:
        with torch.no_grad():
            moved = transported_state(config, state, omega, whitened, order)
            value = float(dkp_objective(config, moved))
    except (Breakdown, torch.linalg.LinAlgError):
        return -math.inf, None
    return (value, moved) if math.isfinite(value) else (-math.inf, None)


def _gradient(config, state, omega, whitened, order):
    """The symmetric gradient of the transported objective with respect to ``omega``."""
    omega = omega.detach().clone().requires_grad_(True)
    with torch.enable_grad():
        value = dkp_objective(config, transported_state(config, state, omega, whitened, order))
        (gradient,) = torch.autograd.grad(value, omega)
    return 0.5 * (gradient + gradient.mT)


def joint_input_scale_steps(config, state, n_steps):
    """Up to ``n_steps`` ascent steps of ``Omega`` with the Grams transported, in place.

    The first trial of a step is twice the last accepted step (``state.omega_step``, the
    spectral norm of the exponent), at most ``0.5``; each rejected trial halves it.
    Returns the number of steps taken (it stops early when no trial increases the
    objective).
    """
    order = canonical_order(state.inputs)
    whitened = [a.detach() for a in whitened_grams(config, state, order)]
    omega = state.omega
    # at the current Omega the transport is the identity: the state's own objective, from
    # the factorisations the sweep has cached
    try:
        value = float(dkp_objective(config, state))
    except Breakdown:
        return 0
    if not math.isfinite(value):
        return 0
    taken, moved = 0, None
    for _ in range(n_steps):
        gradient = _gradient(config, state, omega, whitened, order)
        if not bool(torch.isfinite(gradient).all()):
            # the arc-cosine kernels' autograd derivative is not finite where two Gram
            # rows are parallel (the diagonal): no direction, no step
            break
        root = _symmetric_function(omega, torch.sqrt)
        direction = root @ gradient @ root
        norm = float(torch.linalg.matrix_norm(direction, 2))
        if not norm > 0.0:
            break
        size = min(_FIRST_STEP, 2.0 * state.omega_step)
        for _ in range(_MAX_HALVINGS):
            trial = root @ _symmetric_function((size / norm) * direction, torch.exp) @ root
            trial = 0.5 * (trial + trial.mT)
            trial_value, trial_state = _value(config, state, trial, whitened, order)
            if trial_value > value:
                omega, value, state.omega_step = trial, trial_value, size
                moved = trial_state
                taken += 1
                break
            size *= 0.5
        else:
            break
    if taken:
        # the accepted trial's transported state (made without a graph), with its cached
        # factorisations: the objective that ends the sweep reuses them
        state.omega = moved.omega
        state.hidden_grams[:] = moved.hidden_grams
        state.grams_cache = moved.grams_cache
    return taken
