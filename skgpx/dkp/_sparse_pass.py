"""Passes over the training rows of the sparse deep kernel process.

Interface (frozen for the solvers):

- :func:`objective_value` ``(config, state, rows, batch_size) -> SparseTerms`` (no graph):
  one pass over the rows.
- :func:`objective_gradients` ``(config, state, rows, batch_size, seeds) -> (SparseTerms,
  {seed: [gradient per tensor of state.tensors()]})`` with ``seeds`` among ``'value'``
  (the whole objective), ``'prior'``, ``'fit'`` and ``'volume'`` (the parts of
  :class:`skgpx.dkp._sparse_model.SparseTerms`).  Gradients are plain autograd gradients
  (not symmetrised) with respect to ``state.tensors()``; a tensor the objective does not
  depend on gets zeros.  Two passes over the rows.

``rows`` is a :class:`skgpx.pathwise._sparse.Rows` (``X`` standardised, ``Y`` standardised,
``alpha`` unused).

PROVISIONAL implementation: autograd through :func:`reference_objective` (memory O(P m));
the chunked two-pass version replaces it with the same signatures.
"""

import torch

from ._sparse_model import SparseTerms, reference_objective

__all__ = ["SEEDS", "objective_gradients", "objective_value"]

SEEDS = ("value", "prior", "fit", "volume")


def _detached(terms):
    return SparseTerms(*(t.detach() for t in (terms.value, terms.prior, terms.fit, terms.volume)),
                       statistics=terms.statistics)


def objective_value(config, state, rows, batch_size):
    """The objective and its parts at ``state`` (one pass over the rows)."""
    with torch.no_grad():
        return reference_objective(config, state, rows.X, rows.Y, chunk=batch_size)


def objective_gradients(config, state, rows, batch_size, seeds=("value",)):
    """The objective and, per seed, its gradients in ``state.tensors()`` (two passes)."""
    leaves = [t.detach().clone().requires_grad_() for t in state.tensors()]
    with torch.enable_grad():
        terms = reference_objective(config, state.with_tensors(leaves), rows.X, rows.Y,
                                    chunk=batch_size)
        out = {}
        for index, seed in enumerate(seeds):
            target = getattr(terms, seed)
            grads = torch.autograd.grad(target, leaves, allow_unused=True,
                                        retain_graph=index + 1 < len(seeds))
            out[seed] = [torch.zeros_like(leaf) if g is None else g
                         for leaf, g in zip(leaves, grads)]
    return _detached(terms), out
