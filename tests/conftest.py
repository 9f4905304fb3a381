"""Test-session set-up: array-API mode for scipy, one thread per process, the gpu marker, and
which cases of a parametrised test the fast tier (``make test-fast``) runs."""
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


# The two tiers: `make test` runs every test, `make test-fast` those without the `slow`
# marker. Besides the markers written on the tests (paper-level checks, and in
# test_sklearn_checks.py the full scikit-learn check suite of all but one configuration per
# estimator), parametrised tests that repeat one assertion over interchangeable cases run one
# case (or one per kind of output) in the fast tier and all of them in the full suite:
# {(module, parameter): the values whose cases stay in the fast tier}; every other case gets
# `slow` here.
ONE_CASE_IN_FAST_TIER = {
    # the moment oracles over four stationary kernels (20 000 draws each): a kernel enters
    # only through its random features, whose frequency laws and kernel approximation
    # tests/pathwise/draws/test_features.py and draws/test_spectra.py check for every one of these
    # kernels in both tiers; Matern-3/2 (Student-t frequencies) stays
    ("tests/pathwise/draws/test_moments.py", "name"): ("matern32",),
    # grid search under Dask's joblib backend and block-wise prediction, per estimator: what
    # differs between estimators there (pickling, seeded reproducible fits) is asserted for
    # every estimator by tests/test_common.py in both tiers; a regressor and a classifier
    # (predict_proba by blocks) stay
    ("tests/test_dask.py", "name"): ("pathwise", "qep-classifier"),
    # (a key "path::test" applies to that test only)
    # sparse draws against the sparse predictive over four kernels (10 000 draws each): the
    # kernel enters through the same random features as above, and the exact identities of
    # the sparse posterior keep all four kernels in both tiers
    ("tests/pathwise/sgpr/test_sgpr.py::test_sparse_draw_moments_match_sparse_predictive",
     "name"): ("matern32",),
    # iid and Sobol frequencies reach the moment oracle through the same basis; the two
    # samplers' laws are checked in both tiers by tests/pathwise/draws/test_features.py
    ("tests/pathwise/draws/test_moments.py::test_independent_basis_moments_match_exact_posterior",
     "frequency_sampling"): ("qmc",),
    # a Dask fit against the in-memory fit: the bound's block sums are the same code for both
    # non-Gaussian likelihoods (their per-row expectations differ, and are tested in memory)
    ("tests/test_dask.py::test_distributed_robust_regression_equals_in_memory_fit",
     "likelihood"): ("student_t",),
}


def _declared_values(item, name):
    """The values of ``name`` in the test's own ``parametrize`` marker (one-name markers)."""
    for mark in item.iter_markers("parametrize"):
        if mark.args[0] == name:
            return {getattr(value, "values", (value,))[0] for value in mark.args[1]}
    return set()


def _mark_other_cases_slow(items):
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        module = item.nodeid.split("::")[0]
        test = f"{module}::{item.originalname}"
        for (path, name), values in ONE_CASE_IN_FAST_TIER.items():
            if path not in (module, test) or name not in params:
                continue
            # a renamed case would silently move a whole test to the full suite only
            stale = set(values) - _declared_values(item, name)
            if stale:
                raise pytest.UsageError(
                    f"ONE_CASE_IN_FAST_TIER keeps {name}={sorted(stale)} of {item.originalname}"
                    f" in {path}, which has no such case; update tests/conftest.py")
            if params[name] not in values:
                item.add_marker(pytest.mark.slow)


# before the `-m` selection (which reads the markers set here)
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    _mark_other_cases_slow(items)
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
