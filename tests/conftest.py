"""Test-session set-up: array-API mode for scipy, one thread per process, the gpu marker."""
import os

# scipy reads this once, when its array-API helpers are first imported; it must be set before
# anything (sklearn included) imports scipy, or sklearn's array-API checks skip silently.
os.environ.setdefault("SCIPY_ARRAY_API", "1")
# MKL (torch's CPU BLAS/LAPACK) picks kernels by the memory alignment of its inputs unless told
# to be run-to-run reproducible; without this, two identical fits in one process can differ in
# the last bits on some CPUs, and the bitwise determinism tests would test the allocator. It is
# read when MKL loads, so before torch is imported.
os.environ.setdefault("MKL_CBWR", "AUTO,STRICT")

import pytest  # noqa: E402
import threadpoolctl  # noqa: E402
import torch  # noqa: E402

# One thread per process: parallelism comes from `pytest -n 2`. Oversubscribed BLAS/OpenMP
# threads on a small machine make the estimator checks many times slower.
torch.set_num_threads(1)
_THREAD_LIMITS = threadpoolctl.threadpool_limits(1)  # kept alive for the whole session


def pytest_collection_modifyitems(config, items):
    # The `slow` tests first (a stable sort keeps every other order). `pytest -n 2 --dist
    # worksteal` hands each worker a contiguous half of this list and lets an idle worker take
    # the tail of the other's queue; a test of minutes that starts near the end would leave one
    # worker idle for its whole length, while short tests at the end balance to the second.
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
    if torch.cuda.is_available():
        return
    skip_gpu = pytest.mark.skip(reason="CUDA not available")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)
