"""Prediction-time propagation through a fitted deep Q-EP.

Every random draw here comes from a CPU generator built from a seed, and the base
draws of each layer are shared by all rows.  A row's output therefore depends only
on that row and the seed: predictions are repeatable, and invariant to the order,
the subset and the chunking of the rows.
"""

import torch

from .._base import rows_per_chunk
from ..linalg import jittered_cholesky
from ._distribution import MultivariateQExponential, standard_univariate_draws

__all__ = ["joint_latent_draws", "latent_moments", "shared_draws"]


def shared_draws(module, shape, generator, device):
    """Standard univariate q-exponential draws of ``shape`` from ``generator`` (CPU),
    moved to ``device``."""
    dtype = module.layers[0].inducing_points.dtype
    return standard_univariate_draws(shape, module.q, generator=generator, dtype=dtype,
                                     device=device)


def latent_moments(module, X, n_draws, generator):
    """Last-layer marginals ``(mu, v)`` at the rows of ``X`` for ``n_draws`` shared
    Monte-Carlo paths through the hidden layers.

    Parameters
    ----------
    module : DeepQEPModule
    X : Tensor of shape (n, Q)
        Standardised inputs on the module's device.
    n_draws : int
    generator : torch.Generator (CPU)

    Returns
    -------
    mean, var : Tensor of shape (S, n, D_L)
        ``S = n_draws``, or 1 for a one-layer model (its marginals are exact).
    """
    device = X.device
    eps = [
        shared_draws(module, (n_draws, 1, layer.n_units), generator, device)
        for layer in module.layers[:-1]
    ]
    whitening = module.inducing_whitening(escalate=False)
    largest = max(layer.inducing_points.shape[1] * layer.n_units for layer in module.layers)
    chunk = rows_per_chunk(X.shape[0], n_draws * largest, device)
    means, variances = [], []
    with torch.no_grad():
        for start in range(0, X.shape[0], chunk):
            mean, var = module.propagate(
                X[start : start + chunk], lambda index, shape: eps[index], whitening
            )
            means.append(mean)
            variances.append(var)
    return torch.cat(means, dim=1), torch.cat(variances, dim=1)


def joint_latent_draws(module, X, n_samples, generator):
    """Joint draws of the last layer's latent functions at the rows of ``X``.

    Each layer and unit draws its values jointly over the rows from the q-ED with the
    full predictive scale matrix (plus the module's jitter), base vector ``R s``,
    rescaled by ``kappa_n^(-1/2)`` when ``bound="scaled"``; hidden draws feed the next
    layer path by path.

    Returns
    -------
    draws : Tensor of shape (n_samples, D_L, n)
    """
    H = X.unsqueeze(0)
    whitening = module.inducing_whitening(escalate=False)
    with torch.no_grad():
        for layer, inverse in zip(module.layers, whitening):
            mean, cov = layer.joint(H, inverse)  # (S_in, D, n), (S_in, D, n, n)
            shift = module.jitter * layer.output_scale[:, None, None]
            eye = torch.eye(cov.shape[-1], dtype=cov.dtype, device=cov.device)
            tril, _ = jittered_cholesky(
                cov + shift * eye, name="predictive covariance of the rows",
                advice="draw at fewer or less clustered rows",
            )
            dist = MultivariateQExponential(
                mean, scale_tril=tril, power=module.q, scaled=module.bound == "scaled"
            )
            if H.shape[0] == 1:  # the first layer: one input for every path
                draws = dist.rsample((n_samples,), generator=generator).squeeze(1)
            else:
                draws = dist.rsample(generator=generator)
            H = draws.transpose(-1, -2)
    return draws
