"""The memory guard: what memory it sees, what it counts, what it says, and that every
estimator's quadratic path raises it before allocating anything large."""

import os
import re

import numpy as np
import pytest
import torch

from skgpx import (
    DeepKernelProcessRegressor,
    DeepQEPClassifier,
    DeepQEPRegressor,
    InsufficientMemoryError,
    KEPSVGPClassifier,
    PathwiseGPSampler,
    SmoothDRDRegressor,
)
from skgpx import _memory
from skgpx._base import array_bytes, available_memory, check_memory

try:
    import resource
except ImportError:  # Windows: no address-space limit to test with
    resource = None

LIMIT = "SKGPX_MEMORY_LIMIT"


@pytest.fixture(autouse=True)
def _no_limit(monkeypatch):
    monkeypatch.delenv(LIMIT, raising=False)


# ---------------------------------------------------------------- available_memory


def test_available_memory_is_a_positive_int():
    for device in ("cpu", torch.device("cpu")):
        value = available_memory(device)
        assert isinstance(value, int) and value > 0


@pytest.mark.parametrize("text, expected", [
    ("1000", 1000),
    (" 42 B ", 42),
    ("3k", 3 * 1024),
    ("1.5MB", 1_500_000),
    ("1 mb", 1_000_000),
    ("512KiB", 512 * 1024),
    ("7MiB", 7 * 2**20),
    ("2Mi", 2 * 2**20),
    (".5kB", 500),
])
def test_limit_caps_and_parses_units(monkeypatch, text, expected):
    monkeypatch.setenv(LIMIT, text)
    assert available_memory() == expected


def test_limit_above_the_machine_does_not_raise_it(monkeypatch):
    monkeypatch.setenv(LIMIT, "1000000TB")
    assert available_memory() < 10**18  # the machine's own figure (any real one is smaller)


def test_blank_limit_is_no_limit(monkeypatch):
    monkeypatch.setenv(LIMIT, "  ")
    assert available_memory() > 42


@pytest.mark.parametrize("text", ["lots", "-5MB", "0", "0.0001", "12 parsecs", "1e9", "MB"])
def test_bad_limit_is_a_clear_value_error(monkeypatch, text):
    monkeypatch.setenv(LIMIT, text)
    with pytest.raises(ValueError, match=rf"SKGPX_MEMORY_LIMIT={re.escape(repr(text))} "):
        available_memory()


def _fake_files(monkeypatch, files, meminfo_kb=8_000_000):
    files = {"/proc/meminfo": f"MemTotal: 9999999 kB\nMemAvailable: {meminfo_kb} kB\n", **files}
    monkeypatch.setattr(_memory, "_read", files.get)
    monkeypatch.setattr(_memory, "_address_space_headroom", lambda: None)


def test_cgroup_v2_headroom_counts_reclaimable_cache_as_free(monkeypatch):
    _fake_files(monkeypatch, {
        "/proc/self/cgroup": "0::/user.slice/job\n",
        "/sys/fs/cgroup/user.slice/job/memory.max": "1000000000\n",
        "/sys/fs/cgroup/user.slice/job/memory.current": "600000000\n",
        "/sys/fs/cgroup/user.slice/job/memory.stat": "anon 5\ninactive_file 100000000\n",
        "/sys/fs/cgroup/user.slice/memory.max": "max\n",  # no limit: ignored
        "/sys/fs/cgroup/user.slice/memory.current": "900000000\n",
    })
    # limit 1e9 minus (6e8 used - 1e8 reclaimable), below MemAvailable (8.2e9)
    assert available_memory() == 500_000_000


def test_cgroup_v1_walks_up_and_ignores_absurd_limits(monkeypatch):
    _fake_files(monkeypatch, {
        "/proc/self/cgroup": "5:cpu,cpuacct:/docker/abc\n4:memory:/docker/abc\n0::/\n",
        "/sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes": "9223372036854771712\n",
        "/sys/fs/cgroup/memory/docker/abc/memory.usage_in_bytes": "100\n",
        "/sys/fs/cgroup/memory/docker/memory.limit_in_bytes": "2000000000\n",
        "/sys/fs/cgroup/memory/docker/memory.usage_in_bytes": "1500000000\n",
        "/sys/fs/cgroup/memory/docker/memory.stat": "total_inactive_file 250000000\n",
    })
    assert available_memory() == 750_000_000


def test_meminfo_without_cgroup_limits(monkeypatch):
    _fake_files(monkeypatch, {"/proc/self/cgroup": "0::/\n"}, meminfo_kb=1000)
    assert available_memory() == 1000 * 1024


@pytest.mark.skipif(resource is None or not os.path.exists("/proc/self/statm"),
                    reason="needs RLIMIT_AS and /proc")
def test_address_space_limit_counts():
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    vsize = int(open("/proc/self/statm").read().split()[0]) * resource.getpagesize()
    headroom = 300 * 10**6
    if hard != resource.RLIM_INFINITY and hard < vsize + headroom:
        # the soft limit cannot be raised to vsize + headroom here: the guard must then see
        # the hard-capped soft limit, at most hard - vsize
        value = available_memory()
        assert 0 < value <= max(hard - vsize, 1)
        return
    resource.setrlimit(resource.RLIMIT_AS, (vsize + headroom, hard))
    try:
        value = available_memory()
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    assert 0 < value <= headroom


@pytest.mark.gpu
def test_available_memory_on_cuda(monkeypatch):
    total = torch.cuda.get_device_properties(0).total_memory
    assert 0 < available_memory("cuda") <= total
    assert available_memory(torch.device("cuda", 0)) <= total
    monkeypatch.setenv(LIMIT, "1MB")
    assert available_memory("cuda:0") == 1_000_000


# ---------------------------------------------------------------- array_bytes, check_memory


def test_array_bytes():
    assert array_bytes(3, 4) == 96
    assert array_bytes((3, 4)) == 96
    assert array_bytes(3, 4, dtype="float32") == array_bytes(3, 4, dtype=torch.float32) == 48
    assert array_bytes(dtype="float64") == 8  # a scalar
    assert array_bytes(3, 0, 5) == 0
    assert array_bytes(100_000, 100_000, 10) == 8 * 10**11  # Python ints: no overflow
    with pytest.raises(ValueError, match="negative"):
        array_bytes(3, -1)
    with pytest.raises(ValueError, match="float16"):
        array_bytes(3, dtype="float16")


@pytest.mark.parametrize("n_bytes, text", [
    (0, "0 B"), (999, "999 B"), (1000, "1 kB"), (28_800_000_000, "28.8 GB"),
    (123_456_789, "123 MB"), (1.5e12, "1.5 TB"), (999_960, "1 MB"), (2.5e18, "2.5 EB"),
])
def test_sizes_in_human_units(n_bytes, text):
    assert _memory.format_bytes(n_bytes) == text


def test_check_memory_message_names_size_memory_and_way_out(monkeypatch):
    monkeypatch.setenv(LIMIT, "64MB")
    with pytest.raises(InsufficientMemoryError) as info:
        check_memory(array_bytes(60_000, 60_000), what="A 60000 x 60000 kernel matrix",
                     way_out="use n_inducing=1000 or solver='cg'")
    assert isinstance(info.value, MemoryError)
    assert str(info.value) == (
        "A 60000 x 60000 kernel matrix needs 28.8 GB, but only 64 MB is available on cpu "
        "(capped by SKGPX_MEMORY_LIMIT='64MB'); use n_inducing=1000 or solver='cg'.")


def test_check_memory_threshold_is_the_fraction(monkeypatch):
    monkeypatch.setenv(LIMIT, "1000000")
    assert check_memory(900_000, what="x", way_out="y") is None
    with pytest.raises(InsufficientMemoryError, match="900 kB, but only 1 MB"):
        check_memory(900_001, what="x", way_out="y")
    assert check_memory(1_000_000, what="x", way_out="y", fraction=1.0) is None
    with pytest.raises(InsufficientMemoryError):
        check_memory(500_001, what="x", way_out="y", fraction=0.5)


def test_check_memory_without_a_cap_says_only_the_device():
    with pytest.raises(InsufficientMemoryError) as info:
        check_memory(10**19, what="Ten exabytes", way_out="buy more memory")
    message = str(info.value)
    assert message.startswith("Ten exabytes needs 10 EB, but only ")
    assert message.endswith(" is available on cpu; buy more memory.")


# ---------------------------------------------------------------- every estimator
# The limit is 16 MB; each guarded buffer below is hundreds of MB (its first single
# n x n, p x p or batch x heads x N x N array is over 256 MB) while the inputs are small.

_RNG = np.random.default_rng(0)
_SMALL_X = _RNG.normal(size=(30, 2))
_SMALL_Y = np.sin(_SMALL_X[:, 0])
_SMALL_CLASSES = (_SMALL_X[:, 0] > 0).astype(int) + (_SMALL_X[:, 1] > 0)
_WIDE = _RNG.normal(size=(8, 6000))  # 8 rows of a 6000-feature 1-D grid
_TOKENS = _RNG.normal(size=(16, 1024))  # 16 rows of 1024 feature tokens


def _dkp():
    return DeepKernelProcessRegressor(n_layers=1, max_iter=2, device="cpu").fit(
        _SMALL_X, _SMALL_Y)


def _qep(estimator, y):
    return estimator(hidden_dims=(3,), n_inducing=8, max_iter=3, tol=None, n_mc_samples=2,
                     device="cpu", random_state=0).fit(_SMALL_X, y)


def _kep_fitted_on_small_batches():
    model = KEPSVGPClassifier(batch_size=1, max_iter=1, d_model=8, n_heads=4, device="cpu",
                              random_state=0).fit(_TOKENS[:2], [0, 1])
    return model.set_params(batch_size=16)


# (setup without a limit -> object, guarded call, way out the message must name)
CASES = {
    "dkp-fit": (lambda: DeepKernelProcessRegressor(device="cpu"),
                lambda m: m.fit(_RNG.normal(size=(6000, 2)), np.zeros(6000)),
                r"fewer rows.*device='cuda'.*exact in the number of training rows"),
    "dkp-predict-cov": (_dkp, lambda m: m.predict(_RNG.normal(size=(6000, 2)), return_cov=True),
                        r"fewer query rows per call"),
    "dkp-sample_y": (_dkp, lambda m: m.sample_y(_RNG.normal(size=(6000, 2)), 2),
                     r"fewer query rows per call"),
    "drd-fit-dense": (lambda: SmoothDRDRegressor(basis="dense", device="cpu"),
                      lambda m: m.fit(_WIDE, _WIDE[:, 0]),
                      r"basis='fourier'.*fewer features.*device='cuda'"),
    "qep-regressor-sample_y": (lambda: _qep(DeepQEPRegressor, _SMALL_Y),
                               lambda m: m.sample_y(_RNG.normal(size=(4000, 2)), 3),
                               r"fewer query rows per call"),
    "qep-classifier-sample_y": (lambda: _qep(DeepQEPClassifier, _SMALL_CLASSES),
                                lambda m: m.sample_y(_RNG.normal(size=(4000, 2)), 3),
                                r"fewer query rows per call"),
    "kepsvgp-fit": (lambda: KEPSVGPClassifier(max_iter=1, device="cpu", random_state=0),
                    lambda m: m.fit(_TOKENS, np.arange(16) % 2),
                    r"smaller batch_size.*kep_layers=2.*fewer features"),
    "kepsvgp-predict_proba": (_kep_fitted_on_small_batches, lambda m: m.predict_proba(_TOKENS),
                              r"smaller batch_size"),
    "pathwise-exact-fit": (lambda: PathwiseGPSampler(device="cpu"),
                           lambda m: m.fit(_RNG.normal(size=(6000, 2)), np.zeros(6000)),
                           r"n_inducing"),
}


def _peak_rss():
    # ru_maxrss is in kB on Linux
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


@pytest.mark.skipif(resource is None or not os.path.exists("/proc/self/statm"),
                    reason="needs RLIMIT_AS and /proc")
@pytest.mark.parametrize("case", sorted(CASES))
def test_estimators_raise_before_allocating(monkeypatch, case):
    setup, call, way_out = CASES[case]
    model = setup()
    monkeypatch.setenv(LIMIT, "16MB")
    # An address-space limit 256 MB above the current size: if the quadratic buffer were
    # allocated before the guard ran, the allocation itself would fail (a RuntimeError or
    # a plain MemoryError, not the guard's), and it cannot slip through unnoticed.
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    vsize = int(open("/proc/self/statm").read().split()[0]) * resource.getpagesize()
    before = _peak_rss()
    resource.setrlimit(resource.RLIMIT_AS, (vsize + 256 * 2**20, hard))
    try:
        with pytest.raises(InsufficientMemoryError) as info:
            call(model)
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    assert _peak_rss() - before < 64 * 2**20
    message = str(info.value)
    assert re.search(r" needs [\d.]+ [kMGT]B, but only 16 MB is available on cpu \(capped by "
                     r"SKGPX_MEMORY_LIMIT='16MB'\); ", message), message
    assert re.search(way_out, message), message
