import numpy as np
import pytest

from skgpx.datasets import make_dkp_toy, make_gap_1d, make_matern_2d, make_sine_1d


def _sine(X):
    return np.sin(2 * X[:, 0])


def _gap(X):
    return np.sin(3 * X[:, 0])


def _surface(X):
    return np.sin(2 * X[:, 0]) * np.cos(1.5 * X[:, 1]) + 0.5 * np.sin(3 * X[:, 1])


def _toy(X):
    return np.sin(2 * X[:, 0]) + 0.5 * X[:, 1] ** 2 - 0.3 * X[:, 2]


# (generator, noise-free function at default settings, input dimension, default noise variance)
CASES = [
    (make_sine_1d, _sine, 1, 0.1),
    (make_gap_1d, _gap, 1, 1e-2),
    (make_matern_2d, _surface, 2, 1e-2),
    (make_dkp_toy, _toy, 3, 1e-2),
]
IDS = ["sine", "gap", "matern2d", "dkp_toy"]


@pytest.mark.parametrize("make, f, d, noise", CASES, ids=IDS)
def test_shapes_and_dtypes(make, f, d, noise):
    X, y = make(n_samples=17, random_state=0)
    assert X.shape == (17, d) and y.shape == (17,)
    assert X.dtype == np.float64 and y.dtype == np.float64
    assert np.all(np.isfinite(X)) and np.all(np.isfinite(y))


def test_input_ranges():
    X, _ = make_sine_1d(n_samples=2000, random_state=1)
    assert X.min() >= 0 and X.max() <= 4

    X, _ = make_gap_1d(n_samples=2001, random_state=1)
    x = X[:, 0]
    assert x.min() >= 0 and x.max() <= 10
    assert not np.any((x > 4) & (x < 6))
    assert np.sum(x <= 4) == 1000  # n_samples // 2 on the left interval
    assert x.min() < 0.1 and x.max() > 9.9 and x[x <= 4].max() > 3.9 and x[x >= 6].min() < 6.1
    # Shuffled, not sorted by interval.
    assert np.any(x[:1000] >= 6)

    X, _ = make_matern_2d(n_samples=2000, random_state=1)
    assert X.min() >= -2 and X.max() <= 2
    assert np.all(X.min(axis=0) < -1.9) and np.all(X.max(axis=0) > 1.9)


@pytest.mark.parametrize("make, f, d, noise", CASES, ids=IDS)
def test_reproducible(make, f, d, noise):
    X1, y1 = make(n_samples=50, random_state=3)
    X2, y2 = make(n_samples=50, random_state=np.random.RandomState(3))
    np.testing.assert_array_equal(X1, X2)
    np.testing.assert_array_equal(y1, y2)
    X3, y3 = make(n_samples=50, random_state=4)
    assert not np.array_equal(X1, X3) and not np.array_equal(y1, y3)


@pytest.mark.parametrize("make, f, d, noise", CASES, ids=IDS)
@pytest.mark.parametrize("noise_variance", [None, 0.25])
def test_noise_variance(make, f, d, noise, noise_variance):
    # The residuals y - f(X) are N(0, s2); their mean square has variance 2 s2^2 / n,
    # so it lies within 5 standard errors of s2 except with probability ~6e-7.
    s2 = noise if noise_variance is None else noise_variance
    kwargs = {} if noise_variance is None else {"noise_variance": noise_variance}
    n = 20_000
    X, y = make(n_samples=n, random_state=5, **kwargs)
    r = y - f(X)
    se = s2 * np.sqrt(2.0 / n)
    assert abs(np.mean(r**2) - s2) <= 5 * se
    assert abs(np.mean(r)) <= 5 * np.sqrt(s2 / n)


@pytest.mark.parametrize("make", [make_sine_1d, make_gap_1d, make_matern_2d])
def test_noise_free(make):
    X, y = make(n_samples=10, noise_variance=0.0, random_state=0)
    f = {make_sine_1d: _sine, make_gap_1d: _gap, make_matern_2d: _surface}[make]
    np.testing.assert_allclose(y, f(X), rtol=0, atol=1e-15)


def test_matern_length_scale_rescales_inputs():
    X, y = make_matern_2d(n_samples=30, length_scale=0.25, noise_variance=0.0, random_state=0)
    np.testing.assert_allclose(y, _surface(2 * X), rtol=0, atol=1e-15)


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        ({"n_samples": 0}, ValueError, r"n_samples=0 must be >= 1"),
        ({"n_samples": 2.5}, TypeError, r"n_samples must be an int; got 2.5"),
        ({"noise_variance": -1.0}, ValueError, r"noise_variance=-1.0 must be"),
    ],
)
@pytest.mark.parametrize("make", [make_sine_1d, make_gap_1d, make_matern_2d])
def test_bad_arguments(make, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        make(**kwargs)


def test_bad_length_scale():
    with pytest.raises(ValueError, match=r"length_scale=0 must be a real number > 0"):
        make_matern_2d(length_scale=0)
