"""The numpydoc examples of the public modules run as doctests."""

import doctest
import importlib

import pytest

# module -> does it carry examples (every estimator must)
MODULES = {"skgpx.pathwise._regressor": True, "skgpx.pathwise._classifier": True,
           "skgpx.dkp._estimator": True,
           "skgpx.datasets._regression": True, "skgpx.datasets._qep": True,
           "skgpx.datasets._digits": True, "skgpx.datasets._smooth_sparse": True,
           "skgpx.datasets._heteroscedastic": True,
           "skgpx.kernels": False, "skgpx.linalg": False,
           "skgpx.qep._regressor": True, "skgpx.qep._classifier": True,
           "skgpx.qep._distribution": True, "skgpx.metrics": True,
           "skgpx.kepsvgp._estimator": True, "skgpx.drd._estimator": True}


@pytest.mark.parametrize("name", sorted(MODULES))
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
    if MODULES[name]:
        assert result.attempted > 0
