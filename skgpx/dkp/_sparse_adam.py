"""Adam on mini-batches for the sparse deep kernel process (a benchmark baseline).

Not a public solver: ``benchmarks/dkp_sparse.py`` runs it against the Newton-like sweeps
and L-BFGS (design note of issue 34, §2.5 and §3.2).

The collapsed bound of :mod:`skgpx.dkp._sparse_model` is not a sum over rows, so a
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

The model's parameters use the whitened Cholesky parametrisation of the L-BFGS fallback
(design §2.5): ``G_l = C_{l-1} L_l L_l^T C_{l-1}^T`` with ``C_{l-1} = chol(S_{l-1})``
and ``L_l`` lower triangular with a log-diagonal (``L_l = I`` is the prior mean);
``Omega = L_O L_O^T``; positive weights by their logarithms; ``sigma^2 = floor +
exp(s)``.  What is learned follows :class:`skgpx.dkp._model.DKPConfig` as in the full
solver.  The inducing inputs stay fixed.
"""

import math
import time
from dataclasses import dataclass

import torch

from ._model import Breakdown
from ._sparse_model import (
    SparseFit, coincidence, hidden_node, inducing_blocks, input_gram, propagate_rows,
)
from ._sparse_pass import objective_value

__all__ = ["AdamFit", "WhitenedPacking", "adam_fit", "collapsed_q", "uncollapsed_bound"]


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


def _log_tril(factor):
    """Unconstrained form of a lower triangular factor with a positive diagonal."""
    raw = torch.tril(factor, -1)
    return raw + torch.diag_embed(torch.log(factor.diagonal()))


def _tril_exp(raw):
    return torch.tril(raw, -1) + torch.diag_embed(torch.exp(raw.diagonal()))


class WhitenedPacking:
    """The whitened Cholesky parametrisation of a :class:`SparseDKPState` (module
    docstring): :attr:`leaves` are the unconstrained tensors, :meth:`state` rebuilds the
    state from them (differentiably)."""

    def __init__(self, config, state):
        self.config, self.template = config, state
        self.learn_grams = config.objective != "gp"
        self.learn_omega = config.input_scale
        omega_factor = torch.linalg.cholesky(state.omega)
        self.omega_raw = _log_tril(omega_factor) if self.learn_omega else None
        self.hidden_raw = []
        if self.learn_grams:
            lower = input_gram(state.inducing, state.omega)
            for layer, gram in enumerate(state.hidden_grams):
                scale = hidden_node(config, state.weights[layer], lower, state.jitter)
                factor = torch.linalg.cholesky(scale)
                # L_l = chol(C^-1 G_l C^-T): the start state exactly, I at the prior mean
                inner = torch.linalg.solve_triangular(factor, gram, upper=False)
                inner = torch.linalg.solve_triangular(factor, inner.mT, upper=False)
                self.hidden_raw.append(
                    _log_tril(torch.linalg.cholesky(0.5 * (inner + inner.mT))))
                lower = gram
        self.weight_raw = ([torch.log(w) for w in state.weights[:-1]]
                           if config.learn_weights else [])
        w_out, noise = state.weights[-1][0], state.weights[-1][1]
        self.out_raw = torch.log(w_out) if config.learn_weights else None
        floor = config.noise_floor
        excess = torch.clamp(noise - floor, min=1e-12 * max(floor, 1e-300))
        self.noise_raw = torch.log(excess) if config.learn_noise else None
        self.leaves = [t.detach().clone().requires_grad_() for t in self._raw()]

    def _raw(self):
        out = [] if self.omega_raw is None else [self.omega_raw]
        out += self.hidden_raw + self.weight_raw
        out += [t for t in (self.out_raw, self.noise_raw) if t is not None]
        return out

    def state(self, leaves=None):
        """The :class:`SparseDKPState` at ``leaves`` (default: :attr:`leaves`)."""
        config, base = self.config, self.template
        cut = iter(self.leaves if leaves is None else leaves)
        if self.learn_omega:
            factor = _tril_exp(next(cut))
            omega = factor @ factor.mT
        else:
            omega = base.omega
        hidden_raw = [next(cut) for _ in self.hidden_raw]
        weights = ([torch.exp(next(cut)) for _ in self.weight_raw] if self.weight_raw
                   else list(base.weights[:-1]))
        w_out = torch.exp(next(cut)) if self.out_raw is not None else base.weights[-1][0]
        noise = (config.noise_floor + torch.exp(next(cut)) if self.noise_raw is not None
                 else base.weights[-1][1])
        weights.append(torch.stack([w_out, noise]))
        lower = input_gram(base.inducing, omega)
        grams = []
        for layer in range(len(base.hidden_grams)):
            scale = hidden_node(config, weights[layer], lower, base.jitter)
            if self.learn_grams:
                root = torch.linalg.cholesky(scale) @ _tril_exp(hidden_raw[layer])
                gram = root @ root.mT
            else:  # objective='gp': the Grams stay at their prior means
                gram = scale
            grams.append(gram)
            lower = gram
        return base.copy(omega=omega, hidden_grams=grams, weights=weights)


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
    rows : skgpx.pathwise._sparse.Rows
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
    packing = WhitenedPacking(config, state)
    q_mean = mean.detach().clone().requires_grad_()
    q_raw = _log_tril(torch.linalg.cholesky(root @ root.mT)).detach().requires_grad_()
    leaves = packing.leaves + [q_mean, q_raw]
    optimiser = torch.optim.Adam(leaves, lr=lr)
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
                current = packing.state()
                bound = uncollapsed_bound(config, current, X[index], Y[index], q_mean,
                                          _tril_exp(q_raw), scale=n / index.shape[0])
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
            current = packing.state()
        current = current.copy(omega=current.omega.detach(),
                               hidden_grams=[g.detach() for g in current.hidden_grams],
                               weights=[w.detach() for w in current.weights])
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
