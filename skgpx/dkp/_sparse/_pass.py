"""Passes over the training rows of the sparse deep kernel process.

Interface (frozen for the solvers):

- :func:`objective_value` ``(config, state, rows, batch_size) -> SparseTerms`` (no graph):
  one pass over the rows.
- :func:`objective_gradients` ``(config, state, rows, batch_size, seeds) -> (SparseTerms,
  {seed: [gradient per tensor of state.tensors()]})`` with ``seeds`` among ``'value'``
  (the whole objective), ``'prior'``, ``'fit'`` and ``'volume'`` (the parts of
  :class:`skgpx.dkp._sparse._model.SparseTerms`).  Gradients are plain autograd gradients
  (not symmetrised) with respect to ``state.tensors()``; a tensor the objective does not
  depend on gets zeros.  Two passes over the rows.

``rows`` is a :class:`skgpx._inducing._rows.Rows` (``X`` standardised, ``Y`` standardised,
``alpha`` unused) or anything with its ``map_sum``.

How the gradient is collected (``doc/design_notes.rst``, "Inducing-point deep kernel
process", two-pass gradient).  The data term ``F`` depends
on the rows only through the row sums ``s = (W, w, yy, tr, log_noise)`` of
:func:`skgpx.dkp._sparse._model.row_statistics`, and the rows depend on the state only
through the ``m x m`` :class:`InducingBlocks` ``B``.  Pass A sums ``s`` chunk by chunk with
no graph.  The adjoints ``g = dF/ds`` (per seed) then come from the small graph of
:func:`split_data_terms`.  Pass B rebuilds each chunk's graph, with the blocks as detached
leaves, for the chunk's linearised bound ``phi_c = <g, s_c>`` and adds up its leaf
gradients: since ``F`` is a function of ``sum_c s_c``, ``dF/dB = sum_c d phi_c / dB``
exactly.  One backward through the graph ``state -> B`` (``m x m``) ends it.  Only
``m x m`` and ``d x d`` tensors cross between chunks and passes, so ``map_sum`` may run on
Dask blocks, and memory is O(L m^2 + chunk * m).

``phi_c`` is taken on the whitened rows ``a_t = L_u^-1 k_t / sigma`` with ``L_u^-1`` as a
leaf (``a_t`` is linear in it): the adjoint then multiplies ``a_t``, never the unwhitened
``L_u^-T G_W L_u^-1``, whose entries of size ``cond(K_uu)`` cancel (the module docstring of
:mod:`skgpx._inducing._collapsed` says how many digits that lost).
"""

import torch

from ..._base import rows_per_chunk
from ..._inducing._collapsed import SparseStatistics
from ._model import (
    InducingBlocks, SparseTerms, coincidence, inducing_blocks, propagate_rows, row_statistics,
    split_data_terms,
)

__all__ = ["SEEDS", "objective_gradients", "objective_value"]

SEEDS = ("value", "prior", "fit", "volume")
_DATA_SEEDS = ("value", "fit", "volume")


def _chunks(n, m, batch_size, device):
    step = rows_per_chunk(batch_size, 4 * m, device)
    return [slice(i, min(i + step, n)) for i in range(0, n, step)]


def _layout(blocks):
    return len(blocks.diags), len(blocks.maps), len(blocks.hidden_weights)


def _rebuild(tensors, layout):
    """:class:`InducingBlocks` from the flat tuple that travels to the row blocks."""
    n_diag, n_map, n_weights = layout
    cut = iter(tensors)

    def take(n):
        return [next(cut) for _ in range(n)]

    return InducingBlocks(
        inducing=next(cut), omega=next(cut), diags=take(n_diag), maps=take(n_map),
        corrections=take(n_map), hidden_weights=take(n_weights), output_weight=next(cut),
        noise=next(cut), whitening=next(cut), prior=None)


def _coincident(X, inducing, coincide):
    return coincidence(X, inducing) if coincide else None


def block_statistics(X, Y, alpha, config, tensors, layout, jitter, coincide, batch_size):
    """Pass A over one block of rows: the row sums (:class:`SparseStatistics`), no graph."""
    blocks = _rebuild(tensors, layout)
    total = None
    with torch.no_grad():
        for rows in _chunks(X.shape[0], blocks.inducing.shape[0], batch_size, X.device):
            part = row_statistics(config, blocks, X[rows], Y[rows], jitter,
                                  _coincident(X[rows], blocks.inducing, coincide))
            total = part if total is None else total + part
    return total


def _linearised(config, blocks, X, Y, jitter, coincident, adjoints):
    """A surrogate of ``phi_c`` for every seed, with ``phi_c``'s gradients.

    ``phi_c = <G_W, W_c> + <G_w, w_c> + g_yy yy_c + g_tr tr_c + g_log log_noise_c``; with
    ``u_t = L_u^-1 k_t`` (so ``a_t = u_t / sigma``, ``w_c = U^T Y / sigma^2``) its first two
    terms are ``(q + r) / sigma^2`` with ``q = <U G_W, U>`` and ``r = <U, Y G_w^T>``.  Their
    derivative in ``U`` is ``C = (2 U G_W + Y G_w^T) / sigma^2``, formed here without a graph,
    so that the surrogate ``<U, C> + (q + r) / sigma^2`` (``C``, ``q``, ``r`` held fixed) has
    the gradients of ``phi_c`` at one elementwise product per seed: the backward pass never
    multiplies by ``G_W`` again.  ``W_c``, ``w_c`` are never formed.
    """
    G_W, G_w, g_scalars = adjoints  # (S, m, m), (S, m, T), (S, 3)
    cross, diag = propagate_rows(config, blocks, X, jitter, coincident)
    whitened = cross @ blocks.whitening.mT  # u_t = L_u^-1 k_t, (b, m)
    n_seeds, m = G_W.shape[0], G_W.shape[1]
    noise = blocks.noise
    with torch.no_grad():
        fixed = whitened.detach()
        # one product for all seeds: U G_W and Y G_w^T, (b, S, m)
        quadratic = (fixed @ G_W.permute(1, 0, 2).reshape(m, n_seeds * m)).reshape(-1, n_seeds, m)
        linear = (Y @ G_w.permute(2, 0, 1).reshape(Y.shape[1], n_seeds * m)).reshape(
            -1, n_seeds, m)
        q = (quadratic * fixed[:, None, :]).sum(dim=(0, 2))
        r = (linear * fixed[:, None, :]).sum(dim=(0, 2))
        slope = (2.0 * quadratic + linear) / noise
    surrogate = (whitened[:, None, :] * slope).sum(dim=(0, 2))
    n = X.shape[0]
    scalars = torch.stack([(Y * Y).sum() / noise, diag.sum() / noise, n * torch.log(noise)])
    return surrogate + (q + r) / noise + g_scalars @ scalars  # (S,)


def block_gradients(X, Y, alpha, config, tensors, layout, jitter, coincide, adjoints,
                    batch_size):
    """Pass B over one block of rows: ``sum_c d phi_c / d B`` per seed, as one
    (n_seeds, n_block_entries) tensor (linear in the rows, so block shares add up)."""
    leaves = [t.detach().clone().requires_grad_() for t in tensors]
    blocks = _rebuild(leaves, layout)
    n_seeds = adjoints[0].shape[0]
    total = [[torch.zeros_like(t) for t in leaves] for _ in range(n_seeds)]
    with torch.enable_grad():
        for rows in _chunks(X.shape[0], blocks.inducing.shape[0], batch_size, X.device):
            phi = _linearised(config, blocks, X[rows], Y[rows], jitter,
                              _coincident(X[rows], blocks.inducing, coincide), adjoints)
            for seed in range(n_seeds):
                grads = torch.autograd.grad(phi[seed], leaves, allow_unused=True,
                                            retain_graph=seed + 1 < n_seeds)
                for acc, g in zip(total[seed], grads):
                    if g is not None:
                        acc += g
    return torch.stack([torch.cat([g.reshape(-1) for g in seed]) for seed in total])


def _statistics(config, state, blocks, rows, batch_size):
    tensors = tuple(t.detach() for t in blocks.tensors())
    return rows.map_sum(block_statistics, config, tensors, _layout(blocks), state.jitter,
                        state.coincide, batch_size)


def _terms(prior, fit, volume, statistics):
    return SparseTerms(value=(prior + fit + volume).detach(), prior=prior.detach(),
                       fit=fit.detach(), volume=volume.detach(), statistics=statistics)


def objective_value(config, state, rows, batch_size):
    """The objective and its parts at ``state`` (one pass over the rows).

    Returns
    -------
    SparseTerms
        Detached 0-d tensors and the row sums.  Raises ``Breakdown`` when a matrix on the
        inducing inputs is not positive definite.
    """
    with torch.no_grad():
        blocks = inducing_blocks(config, state)
        statistics = _statistics(config, state, blocks, rows, batch_size)
        fit, volume = split_data_terms(statistics, rows.n_targets)
    return _terms(blocks.prior, fit, volume, statistics)


def _data_seeds(seeds):
    """The data parts whose adjoints pass B carries; 'value' is their sum when both
    'fit' and 'volume' are asked for (one chunk backward fewer)."""
    wanted = [s for s in _DATA_SEEDS if s in seeds]
    if "value" in wanted and "fit" in wanted and "volume" in wanted:
        wanted.remove("value")
    return wanted


def objective_gradients(config, state, rows, batch_size, seeds=("value",), statistics=None):
    """The objective and, per seed, its gradients in ``state.tensors()`` (two passes).

    Parameters
    ----------
    config : DKPConfig
    state : SparseDKPState
    rows : Rows
    batch_size : int
        Upper bound on the rows per chunk.
    seeds : sequence of {'value', 'prior', 'fit', 'volume'}
    statistics : SparseStatistics, optional
        The row sums at this same ``state`` (``objective_value(...).statistics``, e.g. of the
        evaluation that accepted it): pass A is then skipped.  Row sums of another state
        give wrong gradients.

    Returns
    -------
    terms : SparseTerms
    gradients : dict
        ``{seed: [Tensor like each of state.tensors()]}``.
    """
    unknown = [s for s in seeds if s not in SEEDS]
    if unknown:
        raise ValueError(f"Unknown seeds {unknown}; expected a subset of {SEEDS}.")
    leaves = [t.detach().clone().requires_grad_() for t in state.tensors()]
    with torch.enable_grad():
        blocks = inducing_blocks(config, state.with_tensors(leaves))  # m x m graph
    if statistics is None:
        statistics = _statistics(config, state, blocks, rows, batch_size)  # pass A
    data_seeds = _data_seeds(seeds)
    stat_leaves = [t.detach().clone().requires_grad_() for t in statistics.tensors()]
    with torch.enable_grad():
        fit, volume = split_data_terms(SparseStatistics(*stat_leaves, n=statistics.n),
                                       rows.n_targets)
        parts = {"fit": fit, "volume": volume, "value": fit + volume}
        adjoints = [torch.autograd.grad(parts[s], stat_leaves, allow_unused=True,
                                        retain_graph=True) for s in data_seeds]
    terms = _terms(blocks.prior, fit, volume, statistics)
    block_grads = {}
    if data_seeds:
        adjoints = [[torch.zeros_like(t) if g is None else g for t, g in zip(stat_leaves, a)]
                    for a in adjoints]
        G_W = torch.stack([0.5 * (a[0] + a[0].mT) for a in adjoints])
        G_w = torch.stack([a[1] for a in adjoints])
        g_scalars = torch.stack([torch.stack(a[2:5]) for a in adjoints])
        tensors = tuple(t.detach() for t in blocks.tensors())
        flat = rows.map_sum(block_gradients, config, tensors, _layout(blocks), state.jitter,
                            state.coincide, (G_W, G_w, g_scalars), batch_size)  # pass B
        sizes = [t.numel() for t in tensors]
        for index, seed in enumerate(data_seeds):
            block_grads[seed] = [g.reshape(t.shape) for g, t in
                                 zip(flat[index].split(sizes), tensors)]
        if "value" in seeds and "value" not in block_grads:
            block_grads["value"] = [a + b for a, b in
                                    zip(block_grads["fit"], block_grads["volume"])]
    out = {}
    outputs = [t for t in blocks.tensors()]
    for seed in seeds:
        targets, weights = [], []
        if seed in block_grads:
            for t, g in zip(outputs, block_grads[seed]):
                if t.requires_grad:
                    targets.append(t)
                    weights.append(g)
        if seed in ("value", "prior") and blocks.prior.requires_grad:
            targets.append(blocks.prior)
            weights.append(torch.ones_like(blocks.prior))
        grads = torch.autograd.grad(targets, leaves, weights, allow_unused=True,
                                    retain_graph=True) if targets else [None] * len(leaves)
        out[seed] = [torch.zeros_like(leaf) if g is None else g.detach()
                     for leaf, g in zip(leaves, grads)]
    return terms, out
