"""Prediction factors of the sparse (inducing-point) deep kernel process.

The hidden layers carry test rows exactly as the training rows travel in the fit
(App. H, Eqs. 139-141, with the inducing inputs ``Z`` in the place of the training
points), so :func:`skgpx.dkp._predict.propagate` predicts once its cache holds the
``m x m`` blocks on ``Z``.  Only the output layer differs: Titsias' optimal
``q(u) = N(mu_u, Sigma_u)`` replaces the exact posterior.  With ``K_uu = L_u L_u^T``,
``B = I + W`` and ``w`` the whitened row sums of the collapsed bound
(:class:`skgpx._inducing._collapsed.SparseStatistics`)::

    Sigma = (K_uu + K_uf K_fu / sigma^2)^-1 = L_u^-T B^-1 L_u^-1
    mean_t = k_tu Sigma K_uf Y / sigma^2        = k_tu [L_u^-T B^-1 w]
    var_t  = s_tt - k_tu (K_uu^-1 - Sigma) k_ut = s_tt - k_tu [L_u^-T (I - B^-1) L_u^-1] k_ut

where ``s_tt`` includes the noise ``sigma^2`` (the output node's ``'eye'`` component), and
``I - B^-1 = B^-1 W`` is formed without the cancellation of the difference.
"""

import torch

from ..._base import rows_per_chunk
from .._model import node_components, node_fixed_eye
from .._predict import PredictionCache, propagate
from ._model import inducing_blocks

__all__ = ["predict_marginals", "sparse_prediction_cache"]


def predict_marginals(cache, test, device):
    """Predictive means (n, T) and variances (n,) of standardised test rows, in chunks.

    Each chunk holds ``O(rows x n_train)`` blocks (the inducing inputs in sparse mode), so
    the memory beyond the inputs and outputs is bounded whatever the number of rows; the
    chunks write into outputs on the device, copied to the host once by the caller.
    """
    rows = rows_per_chunk(4096, cache.inputs.shape[0], device)
    means = test.new_empty((test.shape[0], cache.output_weights.shape[1]))
    variances = test.new_empty(test.shape[0])
    for start in range(0, test.shape[0], rows):
        stop = start + rows
        means[start:stop], variances[start:stop] = propagate(cache, test[start:stop])
    return means, variances


def sparse_prediction_cache(config, state, statistics):
    """The :class:`~skgpx.dkp._predict.PredictionCache` of a fitted sparse state.

    Parameters
    ----------
    config : DKPConfig
    state : SparseDKPState
    statistics : SparseStatistics
        The collapsed bound's row sums at ``state`` (one pass over the training rows).
    """
    with torch.no_grad():
        blocks = inducing_blocks(config, state)
        W = 0.5 * (statistics.W + statistics.W.mT)
        B = W + torch.eye(W.shape[0], dtype=W.dtype, device=W.device)
        factor = torch.linalg.cholesky(B)  # B >= I: always positive definite
        whitening = blocks.whitening
        reduced = whitening.mT @ torch.cholesky_solve(W, factor) @ whitening
        weights = whitening.mT @ torch.cholesky_solve(statistics.w, factor)
        nodes = range(1, state.n_nodes + 1)
        return PredictionCache(
            inputs=state.inducing,
            omega=state.omega,
            train_diags=[d.clone() for d in blocks.diags],
            hidden_maps=list(blocks.maps),
            hidden_corrections=list(blocks.corrections),
            output_inverse=0.5 * (reduced + reduced.mT),
            output_weights=weights,
            weights=[w.clone() for w in state.weights],
            components=[node_components(config, state, j) for j in nodes],
            fixed_eyes=[node_fixed_eye(state, j) for j in nodes],
            kernel=config.kernel,
        )
