"""Smooth regression surfaces of the pathwise and DKP tests and benchmarks."""

import numbers

import numpy as np
from sklearn.utils import check_random_state

from ._checks import add_noise, check_args


def make_sine_1d(n_samples=30, noise_variance=0.1, random_state=None):
    """Noisy sine on [0, 4]: the common fixture of the pathwise-sampling tests.

    ``X ~ U(0, 4)`` and ``y = sin(2 x) + e`` with ``e ~ N(0, noise_variance)``.

    Parameters
    ----------
    n_samples : int, default=30
        Number of points.
    noise_variance : float, default=0.1
        Variance of the additive Gaussian noise.
    random_state : int, RandomState instance or None, default=None
        Seed or generator for the inputs and the noise.

    Returns
    -------
    X : ndarray of shape (n_samples, 1)
        Inputs.
    y : ndarray of shape (n_samples,)
        Noisy targets.

    Examples
    --------
    >>> from skgpx.datasets import make_sine_1d
    >>> X, y = make_sine_1d(n_samples=5, random_state=0)
    >>> X.shape, y.shape
    ((5, 1), (5,))
    """
    check_args(n_samples, noise_variance)
    rng = check_random_state(random_state)
    X = rng.uniform(0.0, 4.0, size=(n_samples, 1))
    return X, add_noise(np.sin(2.0 * X[:, 0]), noise_variance, rng)


def make_gap_1d(n_samples=1000, noise_variance=1e-2, random_state=None):
    """Noisy sine observed on two intervals with a gap between them.

    Half of the inputs (``n_samples // 2``) are uniform on [0, 4], the rest uniform on [6, 10],
    in random order; ``y = sin(3 x) + e`` with ``e ~ N(0, noise_variance)``. With many points
    and few random features, weight-space posterior samples lose their variance in the gap and
    beyond the data ("variance starvation"), while pathwise samples keep it.

    Parameters
    ----------
    n_samples : int, default=1000
        Number of points.
    noise_variance : float, default=1e-2
        Variance of the additive Gaussian noise.
    random_state : int, RandomState instance or None, default=None
        Seed or generator for the inputs and the noise.

    Returns
    -------
    X : ndarray of shape (n_samples, 1)
        Inputs, none of them in the open interval (4, 6).
    y : ndarray of shape (n_samples,)
        Noisy targets.
    """
    check_args(n_samples, noise_variance)
    rng = check_random_state(random_state)
    n_left = n_samples // 2
    x = np.concatenate([rng.uniform(0.0, 4.0, n_left), rng.uniform(6.0, 10.0, n_samples - n_left)])
    X = x[rng.permutation(n_samples)][:, None]
    return X, add_noise(np.sin(3.0 * X[:, 0]), noise_variance, rng)


def make_matern_2d(n_samples=1000, length_scale=0.5, noise_variance=1e-2, random_state=None):
    """A smooth two-dimensional test surface on [-2, 2]^2, for the benchmarks.

    ``X ~ U([-2, 2]^2)``; with ``z = X * 0.5 / length_scale``,
    ``y = sin(2 z1) cos(1.5 z2) + 0.5 sin(3 z2) + e`` and ``e ~ N(0, noise_variance)``.
    The default ``length_scale=0.5`` gives ``z = X``; smaller values make the surface wigglier.

    Parameters
    ----------
    n_samples : int, default=1000
        Number of points.
    length_scale : float, default=0.5
        Horizontal scale of the surface; the frequencies are multiplied by
        ``0.5 / length_scale``.
    noise_variance : float, default=1e-2
        Variance of the additive Gaussian noise.
    random_state : int, RandomState instance or None, default=None
        Seed or generator for the inputs and the noise.

    Returns
    -------
    X : ndarray of shape (n_samples, 2)
        Inputs.
    y : ndarray of shape (n_samples,)
        Noisy targets.
    """
    check_args(n_samples, noise_variance)
    if not isinstance(length_scale, numbers.Real) or not length_scale > 0:
        raise ValueError(f"length_scale={length_scale!r} must be a real number > 0")
    rng = check_random_state(random_state)
    X = rng.uniform(-2.0, 2.0, size=(n_samples, 2))
    z = X * (0.5 / length_scale)
    f = np.sin(2.0 * z[:, 0]) * np.cos(1.5 * z[:, 1]) + 0.5 * np.sin(3.0 * z[:, 1])
    return X, add_noise(f, noise_variance, rng)


def make_dkp_toy(n_samples=60, noise_variance=1e-2, random_state=None):
    """The three-feature toy of the deep-kernel-process tests.

    ``X ~ N(0, I_3)`` and ``y = sin(2 x1) + 0.5 x2^2 - 0.3 x3 + e`` with
    ``e ~ N(0, noise_variance)`` (the default is a noise standard deviation of 0.1).

    Parameters
    ----------
    n_samples : int, default=60
        Number of points.
    noise_variance : float, default=1e-2
        Variance of the additive Gaussian noise.
    random_state : int, RandomState instance or None, default=None
        Seed or generator for the inputs and the noise.

    Returns
    -------
    X : ndarray of shape (n_samples, 3)
        Inputs.
    y : ndarray of shape (n_samples,)
        Noisy targets.
    """
    check_args(n_samples, noise_variance)
    rng = check_random_state(random_state)
    X = rng.standard_normal((n_samples, 3))
    f = np.sin(2.0 * X[:, 0]) + 0.5 * X[:, 1] ** 2 - 0.3 * X[:, 2]
    return X, add_noise(f, noise_variance, rng)
