"""The chunked two-pass value and gradients of the sparse DKP (doc/design_notes.rst,
"Inducing-point deep kernel process", two-pass gradient).

S5: the passes equal autograd through the unchunked reference objective, for every seed
and chunk size, with inducing inputs that are partly training rows (the shared nugget).
Memory: no pass holds more than one chunk of rows, or one chunk's autograd graph.
"""

import pytest
import torch
from torch.overrides import TorchFunctionMode

import skgpx.dkp._sparse._model as sparse_model
import skgpx.dkp._sparse._pass as sparse_pass
from skgpx.dkp._sparse._model import reference_objective
from skgpx.dkp._sparse._pass import SEEDS, objective_gradients, objective_value

from ._fixtures import (make_config, make_data, make_inducing, make_rows,
                        make_sparse_state, reference_gradients)

P, M = 50, 12


def _problem(kernel="sqexp", n_layers=2, coincide=True, objective="dkp", n=P, seed=0,
             **options):
    X, Y = make_data(n, 3, n_targets=2, seed=seed)
    config = make_config(kernel, n_layers, objective=objective, **options)
    state = make_sparse_state(config, X, make_inducing(X, M, seed=seed), n_layers,
                              seed=seed, coincide=coincide)
    return config, state, X, Y


@pytest.mark.parametrize("chunk", [1, 7, P])
@pytest.mark.parametrize("kernel,coincide,skip", [("sqexp", True, True),
                                                  ("arccos1", False, False),
                                                  ("arccos0", True, True)])
def test_passes_match_reference(chunk, kernel, coincide, skip):
    """S5: value to 1e-12 and every seed's gradients to 1e-9 (relative to the largest entry
    of each tensor) against autograd through :func:`reference_objective`.  (Not arccos0
    without the shared nugget: at a row equal to an inducing input its derivative is
    infinite, clamped to ~1e6, and the gradient is then only defined to ~1e-8.)"""
    config, state, X, Y = _problem(kernel, coincide=coincide, skip=skip)
    rows = make_rows(X, Y)
    expected, expected_grads = reference_gradients(config, state, X, Y, SEEDS)
    value = objective_value(config, state, rows, chunk)
    terms, grads = objective_gradients(config, state, rows, chunk, seeds=SEEDS)
    for got in (value, terms):
        for part in ("value", "prior", "fit", "volume"):
            assert float(getattr(got, part)) == pytest.approx(
                float(getattr(expected, part).detach()), rel=1e-12, abs=1e-12)
        assert not got.value.requires_grad
    assert set(grads) == set(SEEDS)
    for seed in SEEDS:
        assert len(grads[seed]) == len(state.tensors())
        for index, (a, b) in enumerate(zip(grads[seed], expected_grads[seed])):
            assert a.shape == b.shape
            scale = float(b.abs().max())
            assert float((a - b).abs().max()) <= 1e-9 * scale, (seed, index)


def test_single_seeds_and_zeros():
    """Each seed alone gives what it gives among all four (to rounding: the seeds share
    one product per chunk); 'value' = 'fit' + 'volume'; 'gp' has no prior: zeros."""
    config, state, X, Y = _problem(objective="gp", input_scale=False)
    rows = make_rows(X, Y)
    _, together = objective_gradients(config, state, rows, 9, seeds=SEEDS)
    for seed in SEEDS:
        _, alone = objective_gradients(config, state, rows, 9, seeds=(seed,))
        assert list(alone) == [seed]
        for a, b in zip(alone[seed], together[seed]):
            assert float((a - b).abs().max()) <= 1e-10 * float(b.abs().max())
    assert all(float(g.abs().max()) == 0.0 for g in together["prior"])
    assert any(float(g.abs().max()) > 0.0 for g in together["fit"])
    for a, b, c in zip(together["value"], together["fit"], together["volume"]):
        assert float((a - b - c).abs().max()) <= 1e-10 * float(a.abs().max())


def test_unknown_seed():
    config, state, X, Y = _problem()
    with pytest.raises(ValueError, match="seeds"):
        objective_gradients(config, state, make_rows(X, Y), 8, seeds=("value", "total"))


def test_state_untouched():
    config, state, X, Y = _problem()
    before = [t.clone() for t in state.tensors()]
    objective_gradients(config, state, make_rows(X, Y), 8, seeds=SEEDS)
    assert all(torch.equal(a, b) for a, b in zip(before, state.tensors()))
    assert not any(t.requires_grad for t in state.tensors())


def test_rows_visited_in_chunks(monkeypatch):
    """Every row function call sees one chunk (<= batch_size rows), each pass visits every
    row exactly once, and no tensor of P x m entries is ever allocated."""
    config, state, X, Y = _problem(n=240)
    seen = []
    original = sparse_model.propagate_rows

    def recording(config_, blocks, inputs, *args, **kwargs):
        seen.append(inputs.shape[0])
        cross, diag = original(config_, blocks, inputs, *args, **kwargs)
        assert cross.shape == (inputs.shape[0], M)
        return cross, diag

    monkeypatch.setattr(sparse_pass, "propagate_rows", recording, raising=False)  # pass B
    monkeypatch.setattr(sparse_model, "propagate_rows", recording)  # pass A (row_statistics)
    largest = []

    class Sizes(TorchFunctionMode):  # every torch call of the forward code
        def __torch_function__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in out if isinstance(out, (tuple, list)) else [out]:
                if isinstance(t, torch.Tensor):
                    largest.append(t.numel())
            return out

    with Sizes():
        objective_value(config, state, make_rows(X, Y), 24)
    assert seen and max(seen) <= 24 and sum(seen) == X.shape[0]
    seen.clear()
    with Sizes():
        objective_gradients(config, state, make_rows(X, Y), 24, seeds=SEEDS)
    assert max(seen) <= 24 and sum(seen) == 2 * X.shape[0]
    # the largest intermediates: the coincidence test (chunk x m x d), the seeds' adjoints
    # and the block gradients (a few m x m), none of them growing with the rows
    assert max(largest) < X.shape[0] * M


def test_gradients_reuse_the_value_pass(monkeypatch):
    """With the row sums of :func:`objective_value` at the same state, the gradients are
    the same and take one pass over the rows instead of two."""
    config, state, X, Y = _problem(n=60)
    rows = make_rows(X, Y)
    terms, grads = objective_gradients(config, state, rows, 16, seeds=SEEDS)
    value = objective_value(config, state, rows, 16)
    seen = []
    original = sparse_model.propagate_rows

    def recording(config_, blocks, inputs, *args, **kwargs):
        seen.append(inputs.shape[0])
        return original(config_, blocks, inputs, *args, **kwargs)

    monkeypatch.setattr(sparse_pass, "propagate_rows", recording)
    monkeypatch.setattr(sparse_model, "propagate_rows", recording)
    again, reused = objective_gradients(config, state, rows, 16, seeds=SEEDS,
                                        statistics=value.statistics)
    assert sum(seen) == X.shape[0]
    assert float(again.value) == float(terms.value)
    for seed in SEEDS:
        for a, b in zip(reused[seed], grads[seed]):
            assert torch.equal(a, b)


class _SavedBytes:
    """Peak bytes held by autograd graphs for backward (saved-tensor hooks)."""

    def __init__(self):
        self.live = self.peak = 0

    def pack(self, tensor):
        return _Held(self, tensor)

    @staticmethod
    def unpack(held):
        return held.tensor


class _Held:
    def __init__(self, counter, tensor):
        self.counter, self.tensor = counter, tensor
        self.size = tensor.numel() * tensor.element_size()
        counter.live += self.size
        counter.peak = max(counter.peak, counter.live)

    def __del__(self):
        self.counter.live -= self.size


def _peak_graph_bytes(n):
    config, state, X, Y = _problem(n=n, seed=5)
    counter = _SavedBytes()
    with torch.autograd.graph.saved_tensors_hooks(counter.pack, counter.unpack):
        objective_gradients(config, state, make_rows(X, Y), 8, seeds=("fit", "volume"))
    return counter.peak


def test_graph_memory_independent_of_rows():
    """Pass B keeps one chunk's graph at a time: the peak graph memory does not grow with
    the number of rows (autograd through all chunks at once grows linearly)."""
    small, large = _peak_graph_bytes(40), _peak_graph_bytes(400)
    assert small > 0
    assert large <= 1.1 * small


def test_float32_and_reference_agree():
    """float32 runs and stays within its rounding of the float64 value."""
    config, state, X, Y = _problem()
    value64 = float(reference_objective(config, state, X, Y).value)
    state32 = state.with_tensors([t.float() for t in state.tensors()])
    terms, grads = objective_gradients(config, state32, make_rows(X.float(), Y.float()), 7)
    assert terms.value.dtype == torch.float32
    assert all(g.dtype == torch.float32 and bool(torch.isfinite(g).all())
               for g in grads["value"])
    assert float(terms.value) == pytest.approx(value64, rel=1e-3)
