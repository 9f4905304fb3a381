"""Adam on mini-batches for the sparse deep kernel process (a benchmark baseline).

Not a solver of the library: ``inducing.py`` (this folder) runs it against the Newton-like
sweeps and L-BFGS (``doc/design_notes.rst``, "Inducing-point deep kernel process", last bullet).

The collapsed bound of :mod:`skgpx.dkp._sparse._model` is not a sum over rows, so a
mini-batch method optimises the *uncollapsed* bound instead.  It keeps
``q(u) = N(L_u mu, L_u R R^T L_u^T)`` at the output explicitly, whitened as
``u = L_u v`` with ``q(v) = N(mu, R R^T)`` and ``p(v) = N(0, I)``.  With
``a_t = L_u^-1 k_t`` (``T`` targets sharing ``R``)::

    U = prior + sum_t [ -T/2 log(2 pi sigma^2) - |y_t - mu^T a_t|^2 / (2 sigma^2)
                        - T |R^T a_t|^2 / (2 sigma^2) - T (k_tt - |a_t|^2) / (2 sigma^2) ]
        - KL(q(v) || p(v)),
    KL = 1/2 (T Tr(R R^T) + |mu|_F^2 - T m - T log|R R^T|).

Its maximum over ``(mu, R)`` is the collapsed bound, reached at ``mu = L_B^-T c`` and
``R R^T = (I + W)^-1`` (Titsias), so both bounds share their optimum in the model's
parameters.  A mini-batch of ``b`` rows estimates the row sum without bias by scaling it
with ``P / b``.

The model's parameters are the flat vector of
:class:`skgpx.dkp._sparse._lbfgs.StatePacking`, the whitened Cholesky parametrisation of the
L-BFGS fallback (:mod:`skgpx.dkp._sparse._lbfgs`), as one Adam parameter; ``q(v)``'s
mean and the entries of its lower triangular root (log-diagonal, packed as the hidden
Grams' factors) are two more.  What is learned follows
:class:`skgpx.dkp._model.DKPConfig` as in the full solver.
The inducing inputs stay fixed.
"""

import math
import time
from dataclasses import dataclass

import torch

from skgpx.dkp._model import Breakdown
from skgpx.dkp._sparse._lbfgs import StatePacking
from skgpx.dkp._sparse._model import SparseFit
from skgpx.dkp._sparse._model import coincidence
from skgpx.dkp._sparse._model import inducing_blocks
from skgpx.dkp._sparse._model import propagate_rows
from skgpx.dkp._sparse._pass import objective_value

__all__ = ["AdamFit", "adam_fit", "collapsed_q", "uncollapsed_bound"]


@dataclass
class AdamFit(SparseFit):
    """:class:`SparseFit` with the cost of the evaluations kept apart.

    ``passes`` counts training epochs only (one epoch = one pass over the rows);
    ``evaluation_passes`` counts the forward passes that computed ``history``;
    ``seconds[i]`` is the training time (evaluations excluded) when ``history[i]`` was
    reached.
    """

    evaluation_passes: int = 0
    seconds: list = None


def collapsed_q(statistics):
    """The optimal ``(mu, R)`` of the whitened ``q(v)`` for these row sums:
    ``mu = L_B^-T c`` and ``R = L_B^-T`` (upper triangular)."""
    W = 0.5 * (statistics.W + statistics.W.mT)
    eye = torch.eye(W.shape[0], dtype=W.dtype, device=W.device)
    root = torch.linalg.cholesky(W + eye)
    c = torch.linalg.solve_triangular(root, statistics.w, upper=False)
    inverse = torch.linalg.solve_triangular(root, eye, upper=False)
    return inverse.mT @ c, inverse.mT


def _row_sum(config, blocks, inputs, targets, mean, root, jitter, coincident):
    cross, diag = propagate_rows(config, blocks, inputs, jitter, coincident)
    a = cross @ blocks.whitening.mT  # rows of L_u^-1 k_t
    noise, T = blocks.noise, targets.shape[1]
    residual = targets - a @ mean
    spread = a @ root
    return (-0.5 * inputs.shape[0] * T * torch.log(2 * math.pi * noise)
            - 0.5 * (residual * residual).sum() / noise
            - 0.5 * T * (spread * spread).sum() / noise
            - 0.5 * T * (diag.sum() - (a * a).sum()) / noise)


def _kl(mean, root, n_targets):
    m, T = root.shape[0], n_targets
    return 0.5 * (T * (root * root).sum() + (mean * mean).sum() - T * m
                  - 2 * T * torch.log(root.diagonal().abs()).sum())


def uncollapsed_bound(config, state, inputs, targets, mean, root, *, blocks=None, scale=1.0):
    """The uncollapsed bound (module docstring) with the row sum over ``inputs`` scaled
    by ``scale`` (``P / b`` for a mini-batch); differentiable.

    ``mean`` (m, T) and ``root`` (m, m, triangular, either side) describe ``q(v)``.
    """
    blocks = inducing_blocks(config, state) if blocks is None else blocks
    coincident = coincidence(inputs, state.inducing) if state.coincide else None
    rows = _row_sum(config, blocks, inputs, targets, mean, root, state.jitter, coincident)
    return blocks.prior + scale * rows - _kl(mean, root, targets.shape[1])


def adam_fit(config, state, rows, *, epochs, batch_size, lr, seed, evaluate_every=1,
             progress=None, max_seconds=None):
    """Fit by Adam on mini-batches of the uncollapsed bound.

    Parameters
    ----------
    config : DKPConfig
    state : SparseDKPState
        The start; ``q(v)`` starts at the collapsed optimum of this state.
    rows : skgpx._inducing._rows.Rows
        Standardised rows held in this process.
    epochs : int
        Passes over the rows.
    batch_size : int
        Rows per mini-batch (one autograd graph each).
    lr : float
        Adam's learning rate.
    seed : int
        Seed of the shuffling.
    evaluate_every : int, default=1
        Compute the collapsed objective (one forward pass) after every this many epochs.
    progress : callable(epoch, value) or None
        Called after each evaluation.
    max_seconds : float or None
        Stop after the first epoch at which the training time (evaluations excluded)
        exceeds this; that epoch is evaluated.

    Returns
    -------
    AdamFit
        ``history`` holds the collapsed objective at the start and after each evaluated
        epoch, ``passes`` the epochs done at each entry.
    """
    X, Y = rows.X, rows.Y
    n = X.shape[0]
    batch = max(1, min(int(batch_size), n))
    eval_chunk = max(batch, 4096)
    start = objective_value(config, state, rows, eval_chunk)
    history, passes, seconds = [float(start.value)], [0], [0.0]
    mean, root = collapsed_q(start.statistics)
    packing = StatePacking(config, state)
    triangle = packing.gram_triangle  # m x m, as q(v)'s root
    vector = packing.vector(state).requires_grad_()
    q_mean = mean.detach().clone().requires_grad_()
    q_raw = triangle.pack(torch.linalg.cholesky(root @ root.mT)).detach().requires_grad_()
    # Adam steps elementwise: three tensors step as one flat vector of them would
    optimiser = torch.optim.Adam([vector, q_mean, q_raw], lr=lr)
    generator = torch.Generator(device="cpu").manual_seed(int(seed))
    warnings, skipped, trained = [], 0, 0.0
    final = state
    for epoch in range(1, int(epochs) + 1):
        tick = time.perf_counter()
        order = torch.randperm(n, generator=generator).to(X.device)
        for begin in range(0, n, batch):
            index = order[begin:begin + batch]
            optimiser.zero_grad(set_to_none=True)
            try:
                current = packing.state(vector)
                bound = uncollapsed_bound(config, current, X[index], Y[index], q_mean,
                                          triangle.unpack(q_raw), scale=n / index.shape[0])
            except (Breakdown, torch.linalg.LinAlgError):
                skipped += 1  # a non-PD block at this step: skip the mini-batch
                continue
            if not bool(torch.isfinite(bound)):
                skipped += 1
                continue
            (-bound / n).backward()
            optimiser.step()
        trained += time.perf_counter() - tick
        out_of_time = max_seconds is not None and trained > max_seconds
        if epoch % int(evaluate_every) and epoch != int(epochs) and not out_of_time:
            continue
        with torch.no_grad():
            current = packing.state(vector.detach())
        try:
            value = float(objective_value(config, current, rows, eval_chunk).value)
        except (Breakdown, torch.linalg.LinAlgError):
            value = -math.inf
        history.append(value)
        passes.append(epoch)
        seconds.append(trained)
        final = current
        if progress is not None:
            progress(epoch, value)
        if out_of_time:
            break
    if skipped:
        warnings.append(f"{skipped} mini-batch step(s) skipped (a non-PD inducing block)")
    return AdamFit(state=final, history=history, passes=passes, converged=False,
                   solver="adam", warnings=warnings, evaluation_passes=len(history),
                   seconds=seconds)
