"""The one-pass cos/sin kernel (skgpx._trig) against NumPy and against torch's route."""

import numpy as np
import pytest
import torch

from skgpx import _trig
from skgpx._trig import cos_sin_rows


@pytest.fixture
def kernel():
    kernel = _trig._kernel()
    # numba comes with the test extras: without it every test here would silently
    # exercise the torch route twice
    assert kernel is not None, "numba is missing: pip install skgpx[fast]"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the kernel runs only with torch on one thread
    yield kernel
    torch.set_num_threads(threads)


def _ulp_error(got, want):
    return np.abs(got - want) / np.spacing(np.abs(want))


@pytest.mark.parametrize("scale", [1.0, 30.0, 1e4, 2.0 ** 22 / 3])
def test_values_within_two_ulp_of_numpy(kernel, scale):
    rng = np.random.default_rng(0)
    phases = rng.uniform(-scale, scale, size=(3, 40_000))
    # add points next to every quadrant boundary k pi/2, where the reduction is hardest
    k = rng.integers(-int(scale / 1.6), int(scale / 1.6) + 1, size=40_000)
    phases[2] = k * (np.pi / 2) + rng.normal(scale=1e-6, size=40_000)
    out = cos_sin_rows(torch.from_numpy(phases), torch.empty(6, 40_000, dtype=torch.float64))
    cos, sin = out[:3].numpy(), out[3:].numpy()
    assert _ulp_error(cos, np.cos(phases)).max() <= 2
    assert _ulp_error(sin, np.sin(phases)).max() <= 2
    assert np.abs(cos - np.cos(phases)).max() <= 2 * np.finfo(float).eps
    assert np.abs(sin - np.sin(phases)).max() <= 2 * np.finfo(float).eps


def test_signs_and_zeros_at_exact_quadrants(kernel):
    phases = torch.tensor([[0.0, -0.0, np.pi / 2, np.pi, -np.pi, 1.5 * np.pi, 2 * np.pi]])
    out = cos_sin_rows(phases, torch.empty(2, 7, dtype=torch.float64))
    np.testing.assert_allclose(out[0].numpy(), np.cos(phases[0].numpy()), rtol=0, atol=1e-15)
    np.testing.assert_allclose(out[1].numpy(), np.sin(phases[0].numpy()), rtol=0, atol=1e-15)
    assert np.array_equal(out[:, :2].numpy(), [[1.0, 1.0], [0.0, 0.0]])


@pytest.mark.parametrize("bad", [2.0 ** 23, -1e300, np.inf, np.nan])
def test_a_phase_past_the_reduction_goes_to_torch_alone(kernel, bad):
    phases = torch.linspace(-3, 3, 200, dtype=torch.float64).reshape(2, 100)
    clean = cos_sin_rows(phases, torch.empty(4, 100, dtype=torch.float64))
    phases[1, 57] = bad
    out = cos_sin_rows(phases, torch.empty(4, 100, dtype=torch.float64))
    want = torch.cat([torch.cos(phases), torch.sin(phases)])
    far = torch.zeros(4, 100, dtype=torch.bool)
    far[[1, 3], 57] = True
    # torch's bits at the far phase (NaN where torch gives NaN) ...
    assert torch.equal(out[far].isnan(), want[far].isnan())
    assert torch.equal(out[far].nan_to_num(), want[far].nan_to_num())
    # ... and the kernel's everywhere else, as if the far phase were not there
    assert torch.equal(out[~far], clean[~far])
    assert not torch.equal(out[~far], want[~far])


def test_each_value_depends_on_its_own_phase_only(kernel):
    # the same phase gives the same bits at any position of any length of row: the
    # vectorised body, its remainder and the torch fallback never mix across values
    rng = np.random.default_rng(1)
    phases = torch.from_numpy(rng.uniform(-200.0, 200.0, size=(3, 300)))
    phases[1, 150] = 2.0 ** 23  # a far phase among them
    whole = cos_sin_rows(phases, torch.empty(6, 300, dtype=torch.float64))
    for start, stop in [(0, 1), (5, 6), (0, 7), (3, 70), (149, 152), (1, 299), (37, 300)]:
        part = phases[:, start:stop].contiguous()
        got = cos_sin_rows(part, torch.empty(6, stop - start, dtype=torch.float64))
        assert torch.equal(got, whole[:, start:stop]), (start, stop)
    shuffled = rng.permutation(300)
    got = cos_sin_rows(phases[:, shuffled].contiguous(), torch.empty(6, 300, dtype=torch.float64))
    assert torch.equal(got, whole[:, shuffled])


def test_other_dtypes_devices_and_layouts_take_the_torch_route(kernel):
    phases = torch.randn(8, 50, dtype=torch.float64)
    strided = phases.T.contiguous().T  # same values, not contiguous
    for arg in (phases.float(), strided):
        out = cos_sin_rows(arg, torch.empty(16, 50, dtype=arg.dtype))
        assert torch.equal(out, torch.cat([torch.cos(arg), torch.sin(arg)]))


def test_several_threads_take_the_torch_route(kernel):
    phases = torch.randn(64, 5000, dtype=torch.float64) * 40
    one = torch.empty(128, 5000, dtype=torch.float64)
    several = torch.empty_like(one)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        cos_sin_rows(phases, one)
        torch.set_num_threads(3)
        cos_sin_rows(phases, several)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(several, torch.cat([torch.cos(phases), torch.sin(phases)]))
    assert not torch.equal(one, several)  # the kernel ran on one thread: other bits
    assert _ulp_error(one.numpy(), several.numpy()).max() <= 4


def test_input_is_not_modified(kernel):
    phases = torch.randn(4, 300, dtype=torch.float64)
    before = phases.clone()
    cos_sin_rows(phases, torch.empty(8, 300, dtype=torch.float64))
    assert torch.equal(phases, before)


def test_a_batch_equals_its_matrices_one_by_one(kernel):
    # one kernel call for (B, P, n): the same bits as B calls on (P, n), with a far
    # phase in one matrix too (it alone goes to torch)
    phases = torch.randn(5, 3, 70, dtype=torch.float64) * 20
    phases[3, 1, 9] = 2.0 ** 23
    batch = cos_sin_rows(phases, torch.empty(5, 6, 70, dtype=torch.float64))
    for b in range(5):
        alone = cos_sin_rows(phases[b], torch.empty(6, 70, dtype=torch.float64))
        assert torch.equal(batch[b], alone)
    assert not torch.equal(batch, torch.cat([torch.cos(phases), torch.sin(phases)], 1))
