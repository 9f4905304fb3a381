"""Small problems for the sparse deep kernel process tests.

Random positive-definite Grams around the prior mean (``S + B B^T``, ``B ~ 0.05``), as the
reduction study behind doc/design_notes.rst, "Inducing-point deep kernel process": far
enough from the prior that every term of the objective matters, near enough that every
matrix is well conditioned.
"""

import torch

from skgpx.dkp._model import DKPConfig, DKPState, node_matrix
from skgpx.dkp._sparse._model import SparseDKPState, hidden_node, input_gram
from skgpx._inducing._rows import Rows

DTYPE = torch.float64


def make_config(kernel="sqexp", n_layers=2, skip=True, input_scale=True, objective="dkp"):
    """A :class:`DKPConfig` with distinct degrees of freedom per layer."""
    return DKPConfig(
        kernel=kernel, skip=skip, input_scale=input_scale, objective=objective, nu_input=5.0,
        nu_hidden=tuple(7.0 + layer for layer in range(n_layers)), mirror_reg=5.0,
        kleinman_reg=1.0, care_solver="auto", max_care_iter=50, care_tol=1e-10,
        learn_noise=True, learn_weights=True)


def make_data(n=30, d=3, n_targets=1, seed=0):
    """Standardised rows ``X`` (n, d) and targets ``Y`` (n, T) of a smooth function."""
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, d, generator=g, dtype=DTYPE)
    Y = torch.sin(2.0 * X[:, :1]) + X[:, -1:] * torch.arange(1, n_targets + 1, dtype=DTYPE)
    Y = Y + 0.1 * torch.randn(n, n_targets, generator=g, dtype=DTYPE)
    return X, (Y - Y.mean(0)) / Y.std(0)


def make_weights(config, n_layers):
    hidden = [0.6, 0.4] if config.skip else [0.6]
    return [torch.tensor(hidden, dtype=DTYPE) for _ in range(n_layers)] + \
        [torch.tensor([1.1, 0.2], dtype=DTYPE)]


def make_omega(d, seed, input_scale=True):
    if not input_scale:
        return torch.eye(d, dtype=DTYPE)
    g = torch.Generator().manual_seed(seed + 100)
    A = 0.3 * torch.randn(d, d, generator=g, dtype=DTYPE)
    return torch.eye(d, dtype=DTYPE) + A @ A.mT


def _perturbed(scale, g, spread=0.05):
    B = spread * torch.randn(scale.shape[0], scale.shape[0], generator=g, dtype=DTYPE)
    gram = scale + B @ B.mT
    return 0.5 * (gram + gram.mT)


def make_full_state(config, X, Y, n_layers, jitter=1e-6, seed=0):
    """A full :class:`DKPState` with random PD hidden Grams around their prior means."""
    g = torch.Generator().manual_seed(seed + 200)
    state = DKPState(inputs=X, targets=Y, omega=make_omega(X.shape[1], seed, config.input_scale),
                     hidden_grams=[None] * n_layers, weights=make_weights(config, n_layers),
                     jitter=jitter)
    for layer in range(2, n_layers + 2):
        state.hidden_grams[layer - 2] = _perturbed(node_matrix(config, state, layer - 1), g)
        state.grams_cache.clear()
    return state


def sparse_from_full(state, inducing_jitter=1e-12):
    """The sparse state with the training rows as inducing inputs and the same parameters."""
    return SparseDKPState(
        inducing=state.inputs, omega=state.omega, hidden_grams=list(state.hidden_grams),
        weights=list(state.weights), jitter=state.jitter, inducing_jitter=inducing_jitter,
        coincide=True)


def make_inducing(X, m, seed=0, shared=None):
    """``m`` inducing inputs: ``shared`` of them are rows of ``X`` (bitwise), the rest new."""
    g = torch.Generator().manual_seed(seed + 300)
    shared = m // 2 if shared is None else shared
    rows = X[torch.randperm(X.shape[0], generator=g)[:shared]]
    fresh = torch.randn(m - shared, X.shape[1], generator=g, dtype=DTYPE)
    return torch.cat([rows, fresh]).clone()


def make_sparse_state(config, X, Z, n_layers, jitter=1e-4, seed=0, coincide=True,
                      inducing_jitter=1e-8):
    """A sparse state on inducing inputs ``Z`` with random PD Grams around the prior."""
    g = torch.Generator().manual_seed(seed + 400)
    weights = make_weights(config, n_layers)
    grams, previous = [], input_gram(Z, make_omega(X.shape[1], seed, config.input_scale))
    for layer in range(n_layers):
        previous = _perturbed(hidden_node(config, weights[layer], previous, jitter), g)
        grams.append(previous)
    return SparseDKPState(
        inducing=Z, omega=make_omega(X.shape[1], seed, config.input_scale), hidden_grams=grams,
        weights=weights, jitter=jitter, inducing_jitter=inducing_jitter, coincide=coincide)


def make_rows(X, Y):
    return Rows(X, Y, torch.zeros(X.shape[0], dtype=X.dtype))


def reference_gradients(config, state, X, Y, seeds):
    """Autograd through the unchunked :func:`reference_objective` (the oracle of S5)."""
    from skgpx.dkp._sparse._model import reference_objective

    leaves = [t.detach().clone().requires_grad_() for t in state.tensors()]
    terms = reference_objective(config, state.with_tensors(leaves), X, Y)
    out = {}
    for seed in seeds:
        grads = torch.autograd.grad(getattr(terms, seed), leaves, allow_unused=True,
                                    retain_graph=True)
        out[seed] = [torch.zeros_like(t) if gr is None else gr for t, gr in zip(leaves, grads)]
    return terms, out
