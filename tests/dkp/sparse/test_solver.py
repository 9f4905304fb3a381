"""The sparse Newton-like (CARE) solver: fixed point, reduction to the full step, ascent,
the output-weight Newton and convergence (doc/design_notes.rst, "Inducing-point
deep kernel process", from the gradient in G_l to the convergence figures)."""

import math

import pytest
import torch

from skgpx.dkp._model import DKPConfig, DKPState
from skgpx.dkp._solver import sweep
from skgpx.dkp._sparse._model import SparseDKPState, prior_mean_grams, reference_objective
from skgpx.dkp._sparse._pass import objective_gradients
from skgpx.dkp._sparse._solver import (
    layer_coefficients, newton_fit, node_grams, omega_coefficients, psd_split, sparse_sweep,
)
from skgpx.dkp._sparse._weights import (
    _unscaled, bound_in_output_weights, output_newton, transport, transported_gradient,
    transported_omega_gradient,
)
from skgpx._inducing._rows import Rows
from skgpx._inducing._collapsed import collapsed_elbo

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


@pytest.mark.parametrize("input_scale", [True, False])
def test_sweep_reduces_to_full_step(input_scale):
    """S3: inducing inputs = the training rows, fixed weights: one sparse sweep (natural
    split) equals one sweep of the full solver on every G_l and Omega (doc/design_notes.rst,
    "Inducing-point deep kernel process", what stays a CARE)."""
    config = _config(input_scale=input_scale)
    X, Y = _data(30)
    state = _state(config, X, spread=0.1)
    state.inducing_jitter = 0.0
    full = DKPState(inputs=X, targets=Y, omega=state.omega, hidden_grams=list(state.hidden_grams),
                    weights=[w.clone() for w in state.weights], jitter=state.jitter)
    sweep(config, full)
    _, grads = objective_gradients(config, state, _rows(X, Y), 7, seeds=("fit", "volume"))
    report = []
    new = sparse_sweep(config, state, (grads["fit"], grads["volume"]), config.mirror_reg, 1,
                       report=report)
    assert all(entry.get("split") != "psd" for entry in report)
    pairs = list(zip(new.hidden_grams, full.hidden_grams)) + [(new.omega, full.omega)]
    for ours, theirs in pairs:
        assert (ours - theirs).abs().max() <= 1e-8 * theirs.abs().max()
    # the step moved: equality is not the identity map
    assert (new.hidden_grams[-1] - state.hidden_grams[-1]).abs().max() > 1e-3


def _scaled(statistics, ratio_weight, ratio_noise):
    """The row sums at ``(w r_w, s r_s)`` from those at ``(w, s)`` (a_t ~ sqrt(w / s))."""
    return type(statistics)(
        W=statistics.W * (ratio_weight / ratio_noise),
        w=statistics.w * (math.sqrt(ratio_weight) / ratio_noise),
        yy=statistics.yy / ratio_noise, trace=statistics.trace * (ratio_weight / ratio_noise),
        log_noise=statistics.log_noise + statistics.n * math.log(ratio_noise), n=statistics.n)


def test_output_newton_against_grid():
    """S10: the 2-D Newton in (w_out, sigma^2) maximises collapsed_elbo: no point of a
    brute-force grid is higher, the closed form equals collapsed_elbo, and the model at the
    new weights has exactly the predicted bound."""
    config = _config(input_scale=False)
    X, Y = _data(60)
    state = _state(config, X[::4] + 0.03)
    terms = reference_objective(config, state, X, Y)
    w0, s0 = state.weights[-1]
    weight, noise = output_newton(terms.statistics, w0, s0, 1, learn_weight=True,
                                  learn_noise=True, noise_floor=1e-6)
    stats = terms.statistics
    best = float(collapsed_elbo(_scaled(stats, weight / w0, noise / s0), 1)[0])
    parts = _unscaled(stats, w0, s0)
    closed = float(bound_in_output_weights(parts, stats.n, 1, torch.log(weight), torch.log(noise)))
    assert abs(closed - best) <= 1e-10 * abs(best)
    moved = state.copy()
    moved.weights[-1] = torch.stack([weight, noise])
    again = reference_objective(config, moved, X, Y)
    assert abs(float(again.fit + again.volume) - best) <= 1e-9 * abs(best)
    assert best > float(terms.fit + terms.volume) + 1.0  # the start was not optimal
    for width in (3.0, 1e-2, 1e-4):
        grid = torch.linspace(-width, width, 41, dtype=DT).exp()
        values = torch.tensor(
            [[float(collapsed_elbo(_scaled(stats, a * weight / w0, b * noise / s0), 1)[0])
              for b in grid] for a in grid], dtype=DT)
        assert float(values.max()) <= best + 1e-10 * abs(best)
    # one coordinate at a time (learn_noise=False keeps sigma^2)
    weight_only, same = output_newton(stats, w0, s0, 1, learn_weight=True, learn_noise=False,
                                      noise_floor=1e-6)
    assert float(same) == float(s0)
    grid = torch.linspace(-2, 2, 81, dtype=DT).exp()
    line = max(float(collapsed_elbo(_scaled(stats, a, 1.0), 1)[0]) for a in grid)
    assert float(collapsed_elbo(_scaled(stats, weight_only / w0, 1.0), 1)[0]) >= line - 1e-10


@pytest.mark.parametrize("objective", ["dkp", "dgp", "gp"])
def test_sweeps_ascend(objective):
    """S10: with every block learned the accepted sweeps never lower the objective, and
    the passes are counted (forward 1, two-seed gradient 2)."""
    config = _config(objective=objective, input_scale=objective != "gp", learn_weights=True,
                     learn_noise=True)
    X, Y = _data(80)
    state = _state(config, X[::5] + 0.03)
    fit = newton_fit(config, state, _rows(X, Y), max_iter=12, tol=None, batch_size=32,
                     hand_over=False)
    history = fit.history
    assert len(history) >= 5 and fit.solver == "newton"
    assert all(b >= a for a, b in zip(history, history[1:]))
    assert history[-1] > history[0] + 1.0
    assert fit.passes[0] == 1 and all(b - a >= 3 for a, b in zip(fit.passes, fit.passes[1:]))
    final = float(reference_objective(config, fit.state, X, Y).value)
    assert abs(final - history[-1]) <= 1e-10 * abs(final)
    if objective == "gp":
        expected = prior_mean_grams(config, fit.state)
        assert all(torch.equal(a, b) for a, b in zip(fit.state.hidden_grams, expected))
    assert state.weights[-1][1] == 0.05  # the start is not modified


def _lbfgs_optimum(config, state, X, Y, max_eval=3000):
    """A long L-BFGS run on Cholesky factors (log diagonal) of the hidden Grams (autograd
    through the reference objective): the optimum the sweeps must reach."""
    def pack(matrices):
        out = []
        for matrix in matrices:
            factor = torch.linalg.cholesky(matrix)
            factor = factor - torch.diag(factor.diagonal()) + torch.diag(factor.diagonal().log())
            rows, cols = torch.tril_indices(*matrix.shape)
            out.append(factor[rows, cols])
        return torch.cat(out)

    def unpack(vector):
        out, start = [], 0
        for gram in state.hidden_grams:
            rows, cols = torch.tril_indices(*gram.shape)
            factor = torch.zeros_like(gram).index_put((rows, cols),
                                                      vector[start:start + rows.numel()])
            start += rows.numel()
            factor = factor - torch.diag(factor.diagonal()) + torch.diag(factor.diagonal().exp())
            out.append(factor @ factor.mT)
        return out

    vector = pack(state.hidden_grams).requires_grad_()
    optimiser = torch.optim.LBFGS([vector], lr=1, max_iter=max_eval, max_eval=max_eval,
                                  history_size=50, tolerance_grad=1e-12, tolerance_change=1e-15,
                                  line_search_fn="strong_wolfe")
    values = []

    def closure():
        optimiser.zero_grad()
        value = reference_objective(config, state.copy(hidden_grams=unpack(vector)), X, Y).value
        (-value).backward()
        values.append(float(value.detach()))
        return -value

    optimiser.step(closure)
    return max(values)


@pytest.mark.slow
def test_sweeps_reach_the_optimum():
    """Convergence: one hidden layer, P = 200, m = 20, from the prior mean: the sweeps
    (Anderson, no hand-over) reach a long L-BFGS optimum within 1e-4 per row in 60 sweeps
    (seen: 1e-3/row at sweep 21, 1e-4/row at sweep 38, 7.6e-10/row at sweep 100).  With two
    coupled layers the sweeps are only linearly convergent (doc/design_notes.rst,
    "Inducing-point deep kernel process", convergence): 0.0036/row
    short after 100 sweeps at nu = 20, which is why solver='auto' hands over to L-BFGS."""
    config = _config(input_scale=False, nu_hidden=(20.0,))
    X, Y = _data(200)
    gen = torch.Generator().manual_seed(3)
    inducing = X[torch.randperm(200, generator=gen)[:20]] + 0.01
    state = _state(config, inducing, n_hidden=1, spread=0.0)
    state.coincide = False
    optimum = _lbfgs_optimum(config, state, X, Y)
    fit = newton_fit(config, state, _rows(X, Y), max_iter=60, tol=None, batch_size=64,
                     hand_over=False)
    assert fit.history[-1] >= optimum - 1e-4 * 200
    assert fit.history[-1] <= optimum + 1e-6 * 200  # the optimum is an optimum


def test_hand_over_to_lbfgs():
    """solver='auto': once a sweep gains < 1e-3 per row the fit continues by L-BFGS from
    the sweeps' state; history and passes run on across the switch."""
    config = _config(input_scale=False, nu_hidden=(20.0,))
    X, Y = _data(100)
    state = _state(config, X[::5] + 0.01, n_hidden=1, spread=0.0)
    seen = []
    fit = newton_fit(config, state, _rows(X, Y), max_iter=60, tol=1e-9, batch_size=64,
                     progress=lambda i, v: seen.append((i, v)))
    assert fit.solver == "lbfgs"
    gains = [b - a for a, b in zip(fit.history, fit.history[1:])]
    first = next(k for k, g in enumerate(gains) if g < 1e-3 * 100)
    assert all(g >= 1e-3 * 100 for g in gains[:first])
    assert len(fit.history) > first + 2  # L-BFGS went on after the switch
    assert all(b >= a - 1e-9 * abs(a) for a, b in zip(fit.history, fit.history[1:]))
    assert all(b > a for a, b in zip(fit.passes, fit.passes[1:]))
    assert [i for i, _ in seen] == list(range(1, len(fit.history)))
    assert [v for _, v in seen] == fit.history[1:]


def test_transported_gradients():
    """The whitened steps' gradients (hidden log weights; Omega without its own prior) equal
    autograd of the reference objective with the Grams carried by :func:`transport`."""
    config = _config()
    X, Y = _data(50)
    state = _state(config, X[::4][:12] + 0.05)
    state.coincide = False
    _, grads = objective_gradients(config, state, _rows(X, Y), 17, seeds=("fit", "volume"))
    logs = [torch.log(w).requires_grad_() for w in state.weights[:-1]]
    omega = state.omega.clone().requires_grad_()
    weights = [torch.exp(u) for u in logs]
    moved = transport(config, state, state.hidden_grams, weights, omega=omega)
    assert all(torch.allclose(a, b, rtol=1e-12, atol=0)
               for a, b in zip(transport(config, state, state.hidden_grams, state.weights[:-1]),
                               state.hidden_grams))
    carried = state.copy(omega=omega, hidden_grams=moved, weights=[*weights, state.weights[-1]])
    total = reference_objective(config, carried, X, Y).value
    own = 0.5 * config.nu_input * (torch.linalg.slogdet(omega)[1] - omega.diagonal().sum())
    exact = torch.autograd.grad(total, logs, retain_graph=True)
    exact_omega = torch.autograd.grad(total - own, omega)[0]
    exact_omega = 0.5 * (exact_omega + exact_omega.mT)
    ours = transported_gradient(config, state, grads["fit"], grads["volume"])
    for a, b in zip(ours, exact):
        assert torch.allclose(a, b, rtol=0, atol=1e-9 * b.abs().max())
    ours = transported_omega_gradient(config, state, grads["fit"], grads["volume"])
    assert torch.allclose(ours, exact_omega, rtol=0, atol=1e-9 * exact_omega.abs().max())
