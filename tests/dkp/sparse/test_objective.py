"""The sparse DKP objective against independent oracles (doc/design_notes.rst,
"Inducing-point deep kernel process", objective and shared nugget).

S1/S2: with the training rows as inducing inputs (shared nugget) the sparse objective and
its chunked gradients equal the full :func:`dkp_objective` and its autograd gradients.
S7: with no hidden layer, ``objective='gp'`` and no input scale it is SGPR, the collapsed
bound of :mod:`skgpx._inducing._collapsed` with the matching fixed kernel.
S8: extending the inducing set by the prior conditional keeps the prior terms and the rows,
and cannot lower Titsias' bound.
Also: autograd through the arc-cosine Gram kernels is finite and matches finite differences.
"""

import itertools
import math

import pytest
import torch
from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel

from skgpx.dkp._model import dkp_objective
from skgpx.dkp._sparse._model import (
    hidden_node, input_gram, prior_terms, propagate_rows, reference_objective,
)
from skgpx.dkp._sparse._pass import objective_gradients, objective_value
from skgpx.kernels import TorchKernel
from skgpx.pathwise._sgpr._bound import elbo_value_and_grad

from ._fixtures import (DTYPE, make_config, make_data, make_full_state, make_inducing,
                        make_rows, make_sparse_state, sparse_from_full)

KERNELS = ("sqexp", "arccos0", "arccos1")
CHUNK = 7  # not a divisor of the 30 rows


def _relative(a, b):
    return float((a - b).abs().max() / b.abs().max())


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("n_layers", [0, 1, 2])
def test_reduction_value(kernel, n_layers):
    """S1: inducing inputs = training rows gives the full objective, for every variant."""
    X, Y = make_data(30, 3, n_targets=2)
    for skip, input_scale, objective in itertools.product(
            (True, False), (True, False), ("dkp", "dgp", "gp")):
        config = make_config(kernel, n_layers, skip, input_scale, objective)
        full = make_full_state(config, X, Y, n_layers, jitter=1e-4)
        expected = float(dkp_objective(config, full))
        sparse = objective_value(config, sparse_from_full(full), make_rows(X, Y), CHUNK)
        assert float(sparse.value) == pytest.approx(expected, rel=1e-9), \
            (skip, input_scale, objective)
        assert float(sparse.prior + sparse.fit + sparse.volume) == pytest.approx(
            float(sparse.value), rel=1e-14)


def _full_gradients(config, state):
    leaves = [t.detach().clone().requires_grad_()
              for t in (state.omega, *state.hidden_grams, *state.weights)]
    n = len(state.hidden_grams)
    fresh = state.copy(omega=leaves[0], hidden_grams=leaves[1:1 + n], weights=leaves[1 + n:])
    fresh.grams_cache = {}
    grads = torch.autograd.grad(dkp_objective(config, fresh), leaves, allow_unused=True)
    return [torch.zeros_like(t) if g is None else g for t, g in zip(leaves, grads)]


def _sym(g):
    return 0.5 * (g + g.mT) if g.dim() == 2 else g


@pytest.mark.parametrize("kernel", ["sqexp", "arccos1"])
@pytest.mark.parametrize("skip,input_scale,objective",
                         [(True, True, "dkp"), (False, False, "dgp"), (True, False, "gp")])
def test_reduction_gradients(kernel, skip, input_scale, objective):
    """S2: the two-pass chunked gradients equal autograd of the full objective at Z = X.

    Only the symmetric part of a Gram gradient is defined (both objectives read
    symmetric matrices through different triangles)."""
    X, Y = make_data(30, 3, n_targets=2)
    config = make_config(kernel, 2, skip, input_scale, objective)
    full = make_full_state(config, X, Y, 2, jitter=1e-4)
    expected = _full_gradients(config, full)
    _, grads = objective_gradients(config, sparse_from_full(full), make_rows(X, Y), CHUNK)
    got = grads["value"][:-1]  # the inducing inputs are not a parameter of the full model
    assert len(got) == len(expected)
    overall = max(float(b.abs().max()) for b in expected)
    for index, (a, b) in enumerate(zip(got, expected)):
        assert torch.isfinite(a).all()
        # relative to the tensor's largest entry; for a tensor the full objective does not
        # depend on ('gp': Omega, hidden weights), relative to the largest gradient
        scale = float(b.abs().max()) or overall
        assert float((_sym(a) - _sym(b)).abs().max()) < 1e-7 * scale, index


def _finite_difference_check(function, tensors, seed, step=1e-4):
    """Autograd's directional derivative against a five-point central difference."""
    g = torch.Generator().manual_seed(seed)
    directions = [torch.randn(t.shape, generator=g, dtype=DTYPE) for t in tensors]
    directions = [_sym(d) if d.dim() == 2 and d.shape[0] == d.shape[1] else d
                  for d in directions]
    leaves = [t.detach().clone().requires_grad_() for t in tensors]
    grads = torch.autograd.grad(function(leaves), leaves)
    assert all(bool(torch.isfinite(gr).all()) for gr in grads)
    analytic = sum(float((gr * d).sum()) for gr, d in zip(grads, directions))

    def at(h):
        with torch.no_grad():
            return float(function([t + h * d for t, d in zip(tensors, directions)]))

    numeric = (8.0 * (at(step) - at(-step)) - (at(2 * step) - at(-2 * step))) / (12.0 * step)
    assert analytic == pytest.approx(numeric, rel=1e-6)


@pytest.mark.parametrize("kernel", ["arccos0", "arccos1"])
def test_arccos_autograd_full_objective(kernel):
    """Autograd of the full objective is finite and right for the arc-cosine kernels (it was
    NaN: d arccos at the cosine 1 of the Gram diagonals)."""
    X, Y = make_data(20, 3)
    config = make_config(kernel, 2)
    state = make_full_state(config, X, Y, 2, jitter=1e-3, seed=1)

    def objective(tensors):
        fresh = state.copy(omega=tensors[0], hidden_grams=tensors[1:3], weights=tensors[3:])
        fresh.grams_cache = {}
        return dkp_objective(config, fresh)

    _finite_difference_check(objective, [state.omega, *state.hidden_grams, *state.weights], 0)


@pytest.mark.parametrize("kernel", ["arccos0", "arccos1"])
def test_arccos_autograd_sparse_reference(kernel):
    """The same for the sparse objective with rows that coincide with inducing inputs."""
    X, Y = make_data(40, 3)
    config = make_config(kernel, 2)
    state = make_sparse_state(config, X, make_inducing(X, 10), 2, seed=2)
    tensors = state.tensors()[:-1]  # Z: its bitwise coincidences are not differentiable

    def objective(parts):
        return reference_objective(config, state.with_tensors([*parts, state.inducing]),
                                   X, Y).value

    _finite_difference_check(objective, tensors, 1)


def _pathwise_kernel(w, noise, d, fixed):
    bounds = "fixed" if fixed else (1e-5, 1e5)
    return (ConstantKernel(w, bounds) * RBF(math.sqrt(d), "fixed")
            + WhiteKernel(noise, bounds))


def test_sgpr_bound():
    """S7: n_layers=0, 'gp', no input scale: the bound (and its gradient in w_out and
    sigma^2) is pathwise's collapsed bound for w RBF(sqrt(d)) + WhiteKernel(sigma^2)."""
    P, d, m = 500, 4, 32
    X, Y = make_data(P, d, seed=3)
    config = make_config("sqexp", 0, input_scale=False, objective="gp")
    Z = make_inducing(X, m, seed=3, shared=0)
    state = make_sparse_state(config, X, Z, 0, inducing_jitter=1e-8)
    w, noise = (float(v) for v in state.weights[-1])
    rows = make_rows(X, Y)
    terms, grads = objective_gradients(config, state, rows, 64)
    expected, _, _ = elbo_value_and_grad(
        TorchKernel(_pathwise_kernel(w, noise, d, True)), torch.zeros(0, dtype=DTYPE), Z, rows,
        jitter=1e-8, batch_size=64, grad_theta=False)
    assert float(terms.value) == pytest.approx(expected, rel=1e-8)
    assert float(terms.prior) == 0.0
    kernel = TorchKernel(_pathwise_kernel(w, noise, d, False))
    _, grad_theta, _ = elbo_value_and_grad(kernel, kernel.theta_tensor(), Z, rows, jitter=1e-8,
                                           batch_size=64)
    output = grads["value"][-2]  # d/d [w_out, sigma^2]; theta = [log w, log sigma^2]
    assert torch.allclose(output * state.weights[-1], grad_theta, rtol=1e-7, atol=0)


def _extend(config, state, Z2):
    """The hidden Grams on ``Z2 = [Z; Z_new]`` from those on ``Z`` by the prior conditional
    (App. H, full block for the new points)."""
    m1 = state.n_inducing
    previous, grams = input_gram(Z2, state.omega), []
    for layer, gram in enumerate(state.hidden_grams):
        scale = hidden_node(config, state.weights[layer], previous, state.jitter)
        s11, s12, s22 = scale[:m1, :m1], scale[:m1, m1:], scale[m1:, m1:]
        shift = torch.linalg.solve(s11, s12)
        top = torch.cat([gram, gram @ shift], 1)
        bottom = torch.cat([shift.mT @ gram, s22 + shift.mT @ (gram - s11) @ shift], 1)
        previous = torch.cat([top, bottom])
        previous = 0.5 * (previous + previous.mT)
        grams.append(previous)
    return state.copy(inducing=Z2, hidden_grams=grams)


@pytest.mark.parametrize("kernel", ["sqexp", "arccos1"])
def test_nested_inducing_sets(kernel):
    """S8: prior terms and rows unchanged, bound not lower, after extending m1 = 20 -> 40."""
    X, Y = make_data(60, 3, seed=4)
    config = make_config(kernel, 2)
    Z1, Z2 = X[0::3].clone(), torch.cat([X[0::3], X[1::3]])
    small = make_sparse_state(config, X, Z1, 2, jitter=1e-4, seed=4, coincide=False)
    large = _extend(config, small, Z2)
    assert float(prior_terms(config, large)) == pytest.approx(
        float(prior_terms(config, small)), rel=1e-10)
    rows = make_rows(X, Y)
    lower, upper = (objective_value(config, s, rows, 16) for s in (small, large))
    from skgpx.dkp._sparse._model import inducing_blocks

    cross1, diag1 = propagate_rows(config, inducing_blocks(config, small), X, small.jitter)
    cross2, diag2 = propagate_rows(config, inducing_blocks(config, large), X, large.jitter)
    assert _relative(cross2[:, :Z1.shape[0]], cross1) < 1e-8
    assert _relative(diag2, diag1) < 1e-8
    assert float(upper.fit + upper.volume) >= float(lower.fit + lower.volume) - 1e-10
    # not a tie: the 20 extra points do explain more of the rows
    assert float(upper.value) > float(lower.value) + 1.0
