"""Predictive Gram matrices and the output Gaussian at test points.

As in Aitchison, arXiv:2108.13097, App. H and Alg. 2: for the sum kernel ``S = S_{l-1}``
on training (i) and test (t) points, the expected test blocks of the next Gram matrix are
(Eqs. 139-141)::

    G_ti = S_ti S_ii^-1 G_ii,
    G_tt = S_tt + S_ti S_ii^-1 (G_ii - S_ii) S_ii^-1 S_it.

The Eye component (jitter, or the noise at the output) sits on the ii and tt diagonals
only, like scikit-learn's WhiteKernel: it never enters cross blocks ``S_ti``.
"""

from dataclasses import dataclass

import torch

from ._grams import gram_kernel, gram_kernel_derivatives, gram_kernel_diag
from ._model import (
    eye_weight, node_components, node_fixed_eye, node_matrix, spd_factors, weighted_components,
)

__all__ = ["PredictionCache", "build_prediction_cache", "propagate"]


@dataclass
class PredictionCache:
    """Factors precomputed at the end of fit: O(L P^2) memory."""

    inputs: torch.Tensor  # X_train (P, d), standardised
    omega: torch.Tensor  # (d, d)
    train_diags: list  # diag(G_j) for j = 1..L
    hidden_maps: list  # A_l = S_ii^-1 G_l,ii for l = 2..L
    hidden_corrections: list  # E_l = S_ii^-1 (G_l,ii - S_ii) S_ii^-1
    output_inverse: torch.Tensor  # S_L,ii^-1
    output_weights: torch.Tensor  # S_L,ii^-1 Y
    weights: list
    components: list
    fixed_eyes: list
    kernel: str


def build_prediction_cache(config, state):
    """Precompute ``A_l``, ``E_l`` and ``S_L^-1 Y`` from the fitted state."""
    last = state.n_nodes
    maps, corrections = [], []
    for layer in range(2, last + 1):
        # the factorisations of the final objective evaluation are reused
        _, scale_inverse = spd_factors(state, node_matrix(config, state, layer - 1), "sum kernel")
        # B = S^-1 (G - S) with G - S formed first (A S^-1 - S^-1 would cancel when G is
        # close to S: float32, large dof); then A = S^-1 G = B + I and E = B S^-1
        shift = scale_inverse @ (state.gram(layer) - node_matrix(config, state, layer - 1))
        mapping = shift.clone()
        mapping.diagonal().add_(1.0)
        maps.append(mapping)
        correction = shift @ scale_inverse
        corrections.append(0.5 * (correction + correction.mT))
    output_inverse = spd_factors(state, node_matrix(config, state, last), "output covariance")[1]
    return PredictionCache(
        inputs=state.inputs,
        omega=state.omega,
        train_diags=[state.gram(j).diagonal().clone() for j in range(1, last + 1)],
        hidden_maps=maps,
        hidden_corrections=corrections,
        output_inverse=output_inverse,
        output_weights=output_inverse @ state.targets,
        weights=[w.clone() for w in state.weights],
        components=[node_components(config, state, j) for j in range(1, last + 1)],
        fixed_eyes=[node_fixed_eye(state, j) for j in range(1, last + 1)],
        kernel=config.kernel,
    )


def _node_blocks(cache, j, cross, test_gram, full):
    """``S_j`` between test and training points, and on the test points."""
    weights, names = cache.weights[j - 1], cache.components[j - 1]
    test_diag = test_gram.diagonal() if full else test_gram
    kernel_cross = gram_kernel(cache.kernel, cross, test_diag, cache.train_diags[j - 1])
    if full:
        kernel_test = gram_kernel_derivatives(cache.kernel, test_gram, derivatives=False)
    else:
        kernel_test = gram_kernel_diag(cache.kernel, test_gram)
    s_cross = weighted_components(weights, names, kernel_cross, cross)
    s_test = weighted_components(weights, names, kernel_test, test_gram)
    eye = eye_weight(weights, names, cache.fixed_eyes[j - 1])
    if full:
        s_test.diagonal().add_(eye)
    else:
        s_test = s_test + eye
    return s_cross, s_test


def propagate(cache, test_inputs, full=False, grams=False):
    """Push test inputs through the layers.

    Parameters
    ----------
    cache : PredictionCache
    test_inputs : Tensor of shape (n, d)
        Standardised test inputs.
    full : bool
        Propagate the joint ``G_tt`` (n x n) instead of its diagonal.
    grams : bool
        Also return the list of ``(G_ti, G_tt)`` per layer ``j = 1..L``.

    Returns
    -------
    mean : Tensor of shape (n, t)
        ``S_ti S_ii^-1 Y`` on the standardised scale.
    cov : Tensor of shape (n,) or (n, n)
        ``S_tt - S_ti S_ii^-1 S_it`` (observation noise included).
    layers : list, only with ``grams=True``
    """
    scaled = test_inputs @ cache.omega / cache.inputs.shape[1]
    cross = scaled @ cache.inputs.mT
    test_gram = scaled @ test_inputs.mT if full else (scaled * test_inputs).sum(dim=1)
    if full:
        test_gram = 0.5 * (test_gram + test_gram.mT)
    layers = [(cross, test_gram)]
    for j in range(1, len(cache.train_diags)):
        s_cross, s_test = _node_blocks(cache, j, cross, test_gram, full)
        cross = s_cross @ cache.hidden_maps[j - 1]
        bent = s_cross @ cache.hidden_corrections[j - 1]
        if full:
            test_gram = s_test + bent @ s_cross.mT
            test_gram = 0.5 * (test_gram + test_gram.mT)
        else:
            test_gram = s_test + (bent * s_cross).sum(dim=1)
        layers.append((cross, test_gram))
    s_cross, s_test = _node_blocks(cache, len(cache.train_diags), cross, test_gram, full)
    mean = s_cross @ cache.output_weights
    reduced = s_cross @ cache.output_inverse
    if full:
        cov = s_test - reduced @ s_cross.mT
        cov = 0.5 * (cov + cov.mT)
    else:
        cov = s_test - (reduced * s_cross).sum(dim=1)
    return (mean, cov, layers) if grams else (mean, cov)
