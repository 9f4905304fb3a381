"""Hostile inputs every public estimator must refuse clearly.

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
from sklearn.exceptions import ConvergenceWarning

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


# Targets whose spread the Student-t or heteroscedastic noise cannot follow: the noise is
# bounded in the units y is fitted in, so the fit is refused before any torch work, with
# the rescaling that fits them
_Y_UNIT = np.random.RandomState(1).normal(size=30)


@pytest.mark.parametrize("likelihood", ["student_t", "heteroscedastic"])
@pytest.mark.parametrize("factor, normalize_y, remedy", [
    (1e-15, True, "normalize_y=True does not rescale y"),  # std < 10 eps: a constant column
    (1e-15, False, "Set normalize_y=True"),
    (1e15, False, "Set normalize_y=True"),
])
def test_targets_beyond_the_noise_range_are_refused_before_any_work(
        likelihood, factor, normalize_y, remedy, monkeypatch):
    est = PathwiseGPSampler(likelihood=likelihood, n_inducing=8, max_iter=3,
                            normalize_y=normalize_y, random_state=0)

    def no_tensors(*args, **kwargs):
        raise AssertionError("torch work started before the targets were checked")

    monkeypatch.setattr(PathwiseGPSampler, "_as_tensor", no_tensors)
    where = "below" if factor < 1 else "above"
    with pytest.raises(ValueError, match=rf"likelihood='{likelihood}' cannot fit these "
                       rf"targets: their spread .* {where} the range") as info:
        est.fit(X[:, :3], factor * _Y_UNIT)
    assert remedy in str(info.value) and "divide y by a constant" in str(info.value).lower()


@pytest.mark.parametrize("likelihood", ["student_t", "heteroscedastic"])
@pytest.mark.parametrize("y", [1e15 * _Y_UNIT, np.full(30, 3.0)], ids=["huge", "constant"])
def test_targets_at_the_extremes_fit_with_normalize_y(likelihood, y):
    """Huge targets are standardised; constant ones (spread 0) are fitted as the constant."""
    est = PathwiseGPSampler(likelihood=likelihood, n_inducing=8, max_iter=3,
                            normalize_y=True, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category=ConvergenceWarning)
        mean, std = est.fit(X[:, :3], y).predict(X[:5, :3], return_std=True)
    assert np.isfinite(mean).all() and np.isfinite(std).all()
    if np.ptp(y) == 0:
        np.testing.assert_allclose(mean, 3.0, rtol=0, atol=1e-6)


def test_sparse_cross_kernel_is_exact_for_inputs_far_beyond_the_length_scales():
    """Inputs 1e8 length scales apart: the cross-kernel block and the pullback of a weight
    on r^2 against scikit-learn's kernel and the pairwise differences (the expansion
    |z|^2 + |x|^2 - 2 z.x lost every digit there: k(z, z) came out 0, e^+-3 or inf)."""
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel

    from skgpx.kernels import TorchKernel
    from skgpx._inducing._cross import stationary_cross

    kernel = ConstantKernel(2.0) * RBF([1.0, 0.5, 2.0])
    torch_kernel = TorchKernel(kernel)
    theta = torch_kernel.theta_tensor("cpu", torch.float64)
    rows = X[:, :3] * 1e8
    Z = torch.tensor(rows[:8])
    cross = stationary_cross(torch_kernel, theta, Z)
    Xs = cross.standardised(torch.tensor(rows))
    np.testing.assert_allclose(cross.block(torch.tensor(rows)).numpy(), kernel(rows[:8], rows),
                               rtol=1e-12, atol=0)
    G = torch.tensor(np.random.RandomState(2).normal(size=(8, 30)))
    weight = torch.ones(30, dtype=torch.float64)
    d_length, d_Z = cross.pullback(G, weight, Xs, G.sum(0))
    diff = (cross.Zs[:, None, :] - Xs[None, :, :]).numpy()  # (m, n, d), exact differences
    spread = np.einsum("ij,ijd->d", G.numpy(), diff ** 2)
    np.testing.assert_allclose(d_length.numpy(), -2.0 * spread / np.array([1.0, 0.5, 2.0]),
                               rtol=1e-12)
    np.testing.assert_allclose(d_Z.numpy(), 2.0 * np.einsum("ij,ijd->id", G.numpy(), diff)
                               / np.array([1.0, 0.5, 2.0]), rtol=1e-12)
