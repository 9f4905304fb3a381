"""The sparse Newton-like (CARE) solver: fixed point, reduction to the full step, ascent,
the output-weight Newton and convergence (issue 34, design note §2.2-2.6)."""

import math

import pytest
import torch

from skgpx.dkp._model import DKPConfig, DKPState, node_matrix
from skgpx.dkp._solver import sweep
from skgpx.dkp._sparse_model import (
    SparseDKPState, prior_mean_grams, reference_objective,
)
from skgpx.dkp._sparse_pass import objective_gradients
from skgpx.dkp._sparse_solver import (
    layer_coefficients, newton_fit, node_grams, omega_coefficients, psd_split, sparse_sweep,
)
from skgpx.dkp._sparse_weights import _unscaled, bound_in_output_weights, output_newton
from skgpx.pathwise._sparse import Rows, collapsed_elbo

DT = torch.float64


def _config(**changes):
    base = dict(kernel="sqexp", skip=True, input_scale=True, objective="dkp", nu_input=5.0,
                nu_hidden=(6.0, 4.0), mirror_reg=5.0, kleinman_reg=1.0, care_solver="auto",
                max_care_iter=200, care_tol=1e-12, learn_noise=False, learn_weights=False)
    base.update(changes)
    return DKPConfig(**base)


def _data(n_rows, dim=3, seed=0):
    gen = torch.Generator().manual_seed(seed)
    X = torch.randn(n_rows, dim, generator=gen, dtype=DT)
    Y = torch.sin(2 * X[:, :1]) + 0.5 * X[:, 1:2] ** 2 - 0.3 * X[:, 2:3]
    Y = Y + 0.1 * torch.randn(n_rows, 1, generator=gen, dtype=DT)
    Y = (Y - Y.mean()) / Y.std()
    return X, Y


def _state(config, inducing, n_hidden=2, seed=1, spread=0.05):
    """Random PD Grams around the prior means (prior + B B^T), Omega near the identity."""
    gen = torch.Generator().manual_seed(seed)
    m, dim = inducing.shape
    base = torch.randn(dim, dim, generator=gen, dtype=DT)
    omega = torch.eye(dim, dtype=DT) + 0.1 * base @ base.mT if config.input_scale \
        else torch.eye(dim, dtype=DT)
    weights = [torch.tensor([0.6, 0.4], dtype=DT) for _ in range(n_hidden)]
    weights.append(torch.tensor([1.2, 0.05], dtype=DT))
    state = SparseDKPState(inducing=inducing, omega=omega, hidden_grams=[None] * n_hidden,
                           weights=weights, jitter=1e-4)
    grams = prior_mean_grams(config, state)
    noisy = []
    for layer in range(n_hidden):
        # each layer's mean from the already perturbed layer below
        state.hidden_grams = noisy + grams[layer:]
        mean = prior_mean_grams(config, state)[layer]
        factor = spread * torch.randn(m, m, generator=gen, dtype=DT)
        noisy.append(mean + factor @ factor.mT)
    state.hidden_grams = noisy
    return state


def _rows(X, Y):
    return Rows(X, Y, torch.zeros(X.shape[0], dtype=DT))


@pytest.mark.parametrize("split", ["natural", "psd"])
def test_fixed_point_is_stationarity(split):
    """S6: G~^-1 (2 alpha G~ - G~ U G~ + Q) G~^-1 == (2/nu) dL/dG (autograd), every layer
    and Omega, for both splits and any mirror weight."""
    config = _config()
    X, Y = _data(50)
    state = _state(config, X[torch.arange(0, 50, 4)][:12] + 0.05)
    state.coincide = False
    rows = _rows(X, Y)
    _, grads = objective_gradients(config, state, rows, 17, seeds=("fit", "volume"))
    leaves = [t.detach().clone().requires_grad_() for t in state.tensors()]
    total = reference_objective(config, state.with_tensors(leaves), X, Y).value
    exact = [0.5 * (g + g.mT) for g in torch.autograd.grad(total, leaves[:3])]
    grams = node_grams(config, state)
    for layer in (3, 2):
        psi_q = 0.5 * (grads["fit"][layer - 1] + grads["fit"][layer - 1].mT)
        psi_u = -0.5 * (grads["volume"][layer - 1] + grads["volume"][layer - 1].mT)
        if split == "psd":
            psi_q, psi_u = psd_split(psi_q - psi_u, grams[layer - 1])
            assert torch.linalg.eigvalsh(psi_u).min() > -1e-10
        coefficients = layer_coefficients(config, state, layer, grams, psi_q, psi_u, 1)
        gram = grams[layer - 1]
        u_matrix, q_matrix = coefficients(7.0)
        inverse = torch.linalg.inv(gram)
        residual = inverse @ (2 * config.alpha * gram - gram @ u_matrix @ gram + q_matrix) @ inverse
        expected = (2.0 / config.nu_hidden[layer - 2]) * exact[layer - 1]
        assert torch.allclose(residual, expected, rtol=0, atol=1e-9 * expected.abs().max())
    psi_q = 0.5 * (grads["fit"][0] + grads["fit"][0].mT)
    psi_u = -0.5 * (grads["volume"][0] + grads["volume"][0].mT)
    if split == "psd":
        psi_q, psi_u = psd_split(psi_q - psi_u, state.omega)
    u_matrix, q_matrix = omega_coefficients(config, state, grams, psi_q, psi_u, 1)(3.0)
    inverse = torch.linalg.inv(state.omega)
    residual = inverse @ (2 * config.alpha * state.omega - state.omega @ u_matrix @ state.omega
                          + q_matrix) @ inverse
    expected = (2.0 / config.nu_input) * exact[0]
    assert torch.allclose(residual, expected, rtol=0, atol=1e-9 * expected.abs().max())
