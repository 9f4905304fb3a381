"""Preconditions of the estimator checks: without them some checks skip instead of running."""
import importlib

import sklearn
import torch


def test_pandas_available():
    # sklearn's dataframe checks skip when pandas is missing.
    assert importlib.import_module("pandas") is not None


def test_scipy_array_api_active():
    # scipy fixes this flag when its array-API module is first imported; setting the
    # environment variable later has no effect, and sklearn then refuses array-API dispatch.
    from scipy._lib._array_api import SCIPY_ARRAY_API

    assert SCIPY_ARRAY_API, "SCIPY_ARRAY_API=1 must be set before scipy is imported"
    # Raises ValueError when scipy's array-API support is off.
    with sklearn.config_context(array_api_dispatch=True):
        pass


def test_one_thread_per_process():
    assert torch.get_num_threads() == 1
