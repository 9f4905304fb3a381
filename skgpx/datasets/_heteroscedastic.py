"""Regression data that break the Gaussian, one-noise-level model: input-dependent noise and
gross outliers (the benchmarks of robust and heteroscedastic regression)."""

import numbers

import numpy as np
from sklearn.datasets import make_friedman1
from sklearn.utils import check_random_state

from ._checks import check_n_samples

# the noise standard deviation at the loudest input (it is this / noise_ratio at the quietest)
_MAX_NOISE_STD = 0.5


def _check_real(name, value, low, low_open, high=None):
    """ValueError unless ``value`` is a real number in the interval (open or closed at low)."""
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and np.isfinite(value)
    if ok:
        ok = (value > low if low_open else value >= low) and (high is None or value <= high)
    if not ok:
        interval = ("(" if low_open else "[") + f"{low}, " + (f"{high}]" if high else "inf)")
        raise ValueError(f"{name}={value!r} must be a finite real number in {interval}")


def heteroscedastic_mean(X):
    """The noise-free mean of :func:`make_heteroscedastic`: ``sum_j sin(3 x_j + j) / (j + 1)``
    over the columns ``j = 0 .. d-1`` of ``X`` (a smooth additive surface; ``sin(3 x)`` in
    one dimension)."""
    X = np.asarray(X, dtype=np.float64)
    j = np.arange(X.shape[1])
    return np.sum(np.sin(3.0 * X + j) / (j + 1.0), axis=1)


def heteroscedastic_noise_std(X, noise_ratio=10.0):
    """The noise standard deviation of :func:`make_heteroscedastic` at ``X``:
    ``0.5 * noise_ratio ** ((x_0 - 1) / 2)``, log-linear in the first feature, from
    ``0.5 / noise_ratio`` at ``x_0 = -1`` to ``0.5`` at ``x_0 = 1``."""
    X = np.asarray(X, dtype=np.float64)
    return _MAX_NOISE_STD * float(noise_ratio) ** ((X[:, 0] - 1.0) / 2.0)


def make_heteroscedastic(n_samples=1000, n_features=1, noise_ratio=10.0, random_state=None,
                         return_noise=False):
    """Smooth regression with a noise level that varies ``noise_ratio``-fold over the inputs.

    ``X ~ U([-1, 1]^d)``; the mean is the additive surface
    ``f(x) = sum_{j=0}^{d-1} sin(3 x_j + j) / (j + 1)`` (``sin(3 x)`` for ``d = 1``) and the
    noise is Gaussian with standard deviation
    ``s(x) = 0.5 * noise_ratio ** ((x_0 - 1) / 2)``: log-linear in the first feature, so that
    ``log s`` is uniform on the data and every decile of the noise level is a slab of
    ``x_0``, from ``0.5 / noise_ratio`` (quiet, ``x_0 = -1``) to ``0.5`` (loud, ``x_0 = 1``).
    ``y = f(X) + s(X) e`` with ``e ~ N(0, 1)``.  ``X`` is drawn first, then ``e``.

    Parameters
    ----------
    n_samples : int, default=1000
        Number of points.
    n_features : int, default=1
        Input dimension ``d``; the noise depends on the first feature only, the mean on all.
    noise_ratio : float, default=10.0
        Ratio of the largest to the smallest noise standard deviation (>= 1; 1 gives a
        homoscedastic problem with noise standard deviation 0.5).
    random_state : int, RandomState instance or None, default=None
        Seed or generator for the inputs and the noise.
    return_noise : bool, default=False
        Also return the noise standard deviation at ``X`` and the noise-free mean.

    Returns
    -------
    X : ndarray of shape (n_samples, n_features)
        Inputs.
    y : ndarray of shape (n_samples,)
        Noisy targets.
    noise_std : ndarray of shape (n_samples,)
        ``s(X)``; only with ``return_noise=True``.
    f : ndarray of shape (n_samples,)
        ``f(X)``, the noise-free mean; only with ``return_noise=True``.

    Examples
    --------
    >>> from skgpx.datasets import make_heteroscedastic
    >>> X, y, s, f = make_heteroscedastic(1000, n_features=5, random_state=0, return_noise=True)
    >>> X.shape, y.shape, bool(0.05 <= s.min() < s.max() <= 0.5)
    ((1000, 5), (1000,), True)
    """
    check_n_samples(n_samples)
    if (not isinstance(n_features, numbers.Integral) or isinstance(n_features, bool)
            or n_features < 1):
        raise ValueError(f"n_features={n_features!r} must be an int >= 1")
    _check_real("noise_ratio", noise_ratio, 1.0, False)
    rng = check_random_state(random_state)
    X = rng.uniform(-1.0, 1.0, size=(n_samples, n_features))
    f = heteroscedastic_mean(X)
    noise_std = heteroscedastic_noise_std(X, noise_ratio)
    y = f + noise_std * rng.standard_normal(n_samples)
    return (X, y, noise_std, f) if return_noise else (X, y)


def friedman1_mean(X):
    """The noise-free Friedman #1 function of the first five columns of ``X``:
    ``10 sin(pi x_0 x_1) + 20 (x_2 - 0.5)^2 + 10 x_3 + 5 x_4``."""
    X = np.asarray(X, dtype=np.float64)
    return (10.0 * np.sin(np.pi * X[:, 0] * X[:, 1]) + 20.0 * (X[:, 2] - 0.5) ** 2
            + 10.0 * X[:, 3] + 5.0 * X[:, 4])


def make_friedman_outliers(n_samples=2000, noise=1.0, outlier_fraction=0.05,
                           outlier_shift=30.0, random_state=None):
    """Friedman #1 with a fraction of its targets shifted by a gross error.

    ``X`` and ``y`` are :func:`sklearn.datasets.make_friedman1` with 10 features, the given
    ``noise`` and the same random state (so the clean data of a seed are
    ``make_friedman1(n_samples, noise=noise, random_state=seed)``, and ``outlier_fraction=0``
    returns them unchanged); then ``round(outlier_fraction * n_samples)`` rows, chosen without
    replacement, get ``+outlier_shift`` or ``-outlier_shift`` (a fair coin each) added to their
    target.  The targets of Friedman #1 span about 0 to 30 with a standard deviation near 5,
    so the default shift of 30 is six of those.

    Parameters
    ----------
    n_samples : int, default=2000
        Number of points.
    noise : float, default=1.0
        Standard deviation of the Gaussian noise on every target.
    outlier_fraction : float, default=0.05
        Fraction of the targets shifted, in [0, 1].
    outlier_shift : float, default=30.0
        Size of the shift (>= 0).
    random_state : int, RandomState instance or None, default=None
        Seed or generator: ``X``, the noise, the outlier rows and their signs, in that order.

    Returns
    -------
    X : ndarray of shape (n_samples, 10)
        Inputs, uniform on the unit cube (only the first five columns matter).
    y : ndarray of shape (n_samples,)
        Targets with the outliers.
    f : ndarray of shape (n_samples,)
        The noise-free Friedman #1 function at ``X``.
    outliers : ndarray of shape (n_samples,), dtype bool
        Which targets were shifted.

    Examples
    --------
    >>> from skgpx.datasets import make_friedman_outliers
    >>> X, y, f, outliers = make_friedman_outliers(random_state=0)
    >>> X.shape, int(outliers.sum())
    ((2000, 10), 100)
    """
    check_n_samples(n_samples)
    _check_real("noise", noise, 0.0, False)
    _check_real("outlier_fraction", outlier_fraction, 0.0, False, 1.0)
    _check_real("outlier_shift", outlier_shift, 0.0, False)
    rng = check_random_state(random_state)
    X, y = make_friedman1(n_samples, n_features=10, noise=noise, random_state=rng)
    n_out = int(round(outlier_fraction * n_samples))
    rows = rng.choice(n_samples, size=n_out, replace=False)
    signs = np.where(rng.uniform(size=n_out) < 0.5, -1.0, 1.0)
    y[rows] += signs * outlier_shift
    outliers = np.zeros(n_samples, dtype=bool)
    outliers[rows] = True
    return X, y, friedman1_mean(X), outliers
