"""Hostile inputs every public estimator must refuse clearly (issue 18).

Magnitudes beyond ``skgpx._base.MAX_MAGNITUDE`` (squares would overflow) raise a
ValueError naming the bound, in fit (X and y) and in every prediction method (X); a large
but supported scale gives the scaled predictions.  Draw counts whose output cannot fit
raise ``InsufficientMemoryError`` at once, before any draw is allocated.
"""

import time
import warnings

import numpy as np
import pytest
import torch

from skgpx import (
    DeepKernelProcessRegressor,
    DeepQEPClassifier,
    DeepQEPRegressor,
    InsufficientMemoryError,
    PathwiseGPClassifier,
    PathwiseGPSampler,
    SmoothDRDRegressor,
)
from skgpx._base import MAX_MAGNITUDE, check_magnitude
from skgpx.kepsvgp import KEPSVGPClassifier

from _configs import QEP_FAST

_RNG = np.random.default_rng(0)
X = _RNG.normal(size=(30, 4))
Y = np.sin(X[:, 0]) + 0.1 * _RNG.normal(size=30)
CLASSES = (X[:, 0] > 0).astype(int)

# name -> (factory, is a regressor); the regressors all standardise y (PathwiseGPSampler
# with normalize_y=True), so (c) applies to every one of them
ESTIMATORS = {
    "pathwise": (lambda: PathwiseGPSampler(normalize_y=True, random_state=0), True),
    "dkp": (lambda: DeepKernelProcessRegressor(n_layers=1, max_iter=5), True),
    "qep-regressor": (lambda: DeepQEPRegressor(**QEP_FAST, random_state=0), True),
    "qep-classifier": (lambda: DeepQEPClassifier(**QEP_FAST, random_state=0), False),
    "kepsvgp": (lambda: KEPSVGPClassifier(max_iter=2, random_state=0), False),
    "drd": (lambda: SmoothDRDRegressor(), True),
    "gpc": (lambda: PathwiseGPClassifier(random_state=0), False),
}
REGRESSORS = sorted(name for name, (_, regressor) in ESTIMATORS.items() if regressor)
PREDICT_METHODS = {
    "pathwise": ["predict", "sample_y"],
    "dkp": ["predict", "sample_y"],
    "qep-regressor": ["predict", "sample_y"],
    "qep-classifier": ["predict", "predict_proba", "sample_y"],
    "kepsvgp": ["predict", "predict_proba", "predict_proba_samples", "sample_y"],
    "drd": ["predict", "sample_y"],
    "gpc": ["predict", "predict_proba", "latent_mean_and_variance", "sample_y"],
}
DRAW_METHODS = [
    ("pathwise", "sample_y"), ("pathwise", "sample_functions"), ("dkp", "sample_y"),
    ("qep-regressor", "sample_y"), ("qep-classifier", "sample_y"), ("kepsvgp", "sample_y"),
    ("kepsvgp", "predict_proba_samples"), ("drd", "sample_y"), ("gpc", "sample_y"),
    ("gpc", "sample_functions"),
]
TOO_LARGE = r"largest supported magnitude 1e\+150"

_FITTED = {}


def _targets(name):
    return Y if ESTIMATORS[name][1] else CLASSES


def _fitted(name):
    if name not in _FITTED:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _FITTED[name] = ESTIMATORS[name][0]().fit(X, _targets(name))
    return _FITTED[name]


@pytest.mark.parametrize("name", REGRESSORS)
def test_huge_y_is_refused_in_fit(name):
    with pytest.raises(ValueError, match=TOO_LARGE):
        ESTIMATORS[name][0]().fit(X, Y * 1e200)


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_huge_X_is_refused_in_fit(name):
    with pytest.raises(ValueError, match=TOO_LARGE):
        ESTIMATORS[name][0]().fit(X * 1e200, _targets(name))


@pytest.mark.parametrize("name, method", [(name, method) for name in sorted(PREDICT_METHODS)
                                          for method in PREDICT_METHODS[name]])
def test_huge_X_is_refused_in_prediction(name, method):
    model = _fitted(name)
    with pytest.raises(ValueError, match=TOO_LARGE):
        getattr(model, method)(X * 1e200)
    X_neg = X.copy()
    X_neg[0, 0] = -1e151  # the largest magnitude, whatever its sign
    with pytest.raises(ValueError, match=TOO_LARGE):
        getattr(model, method)(X_neg)


@pytest.mark.parametrize("name", REGRESSORS)
def test_large_supported_scale_scales_the_predictions(name):
    make = ESTIMATORS[name][0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scaled = make().fit(X, Y * 1e100).predict(X)
    reference = _fitted(name).predict(X) * 1e100
    assert np.isfinite(scaled).all()
    np.testing.assert_allclose(scaled, reference, rtol=1e-6, atol=1e-6 * 1e100)


def test_float32_bound_is_lower():
    with pytest.raises(ValueError, match=r"largest supported magnitude 1e\+15 "
                                         r"\(dtype='float32'"):
        PathwiseGPSampler(dtype="float32").fit(X, Y * 1e16)
    PathwiseGPSampler(dtype="float32", normalize_y=True).fit(X, Y * 1e14)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_bound_rule(dtype):
    # squares of differences (up to twice the bound) summed over 10**7 terms stay finite
    bound = MAX_MAGNITUDE[dtype]
    assert np.isfinite((2 * bound) ** 2 * 1e7) and (2 * bound) ** 2 * 1e7 < torch.finfo(dtype).max
    assert (2 * bound * 10) ** 2 * 1e7 > torch.finfo(dtype).max  # the largest power of ten
    assert check_magnitude(np.array([bound, -bound]), "X", dtype) is not None
    with pytest.raises(ValueError, match="X has values of magnitude up to"):
        check_magnitude(np.array([0.0, -2 * bound]), "X", dtype)
    # integer and empty arrays
    check_magnitude(np.array([np.iinfo(np.int64).min]), "y")
    check_magnitude(np.empty((0, 3)), "X")


@pytest.mark.parametrize("name, method", DRAW_METHODS)
def test_huge_draw_counts_raise_before_allocating(name, method):
    model = _fitted(name)
    start = time.perf_counter()
    with pytest.raises(InsufficientMemoryError, match=r"n_samples=1000000000000.*fewer draws"):
        if method == "sample_functions":
            model.sample_functions(n_samples=10**12)
        else:
            getattr(model, method)(X, n_samples=10**12)
    assert time.perf_counter() - start < 1.0
