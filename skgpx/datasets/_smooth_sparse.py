"""Linear-regression problems with structured coefficients: the sDRD simulations.

``"reference"`` follows ``test_1D.m`` of the authors' MATLAB code (Wu et al., NIPS 2014);
the other kinds are small benchmarks of our own.  ``X`` has i.i.d. standard normal entries and
``y = X w + e`` with Gaussian noise; a test set is drawn from the same law.
"""

import numbers

import numpy as np
from sklearn.utils import Bunch, check_random_state

from ._checks import check_n_samples

# kind -> (default grid shape, n_samples, noise sd, n_test)
_KINDS = {
    "bumps": ((200,), 100, 0.5, 1000),
    "dense": ((200,), 100, 0.5, 1000),
    "bumps2d": ((16, 16), 150, 0.5, 1000),
    "reference": ((1000,), 400, 0.2 * np.exp(1.5), 100),
}
# (centre, amplitude, sd) of the 1-D bumps on a grid of 200 positions
_BUMPS = ((40.0, 1.0, 5.0), (100.0, -1.0, 4.0), (160.0, 0.8, 6.0))
# (row, column, amplitude, sd) of the 2-D blobs on a 16 x 16 grid
_BLOBS = ((5.0, 5.0, 1.0, 2.5), (11.0, 10.0, -0.8, 2.5))


def _truncated_bumps(t, scale):
    w = np.zeros_like(t)
    for centre, amplitude, sd in _BUMPS:
        c, s = centre * scale, sd * scale
        w += np.where(np.abs(t - c) <= 3 * s, amplitude * np.exp(-0.5 * ((t - c) / s) ** 2), 0.0)
    return w


def _truncated_blobs(shape):
    rows, cols = np.meshgrid(np.arange(shape[0]), np.arange(shape[1]), indexing="ij")
    scale_r, scale_c = shape[0] / 16.0, shape[1] / 16.0
    w = np.zeros(shape)
    for row, col, amplitude, sd in _BLOBS:
        s = sd * min(scale_r, scale_c)
        r2 = (rows - row * scale_r) ** 2 + (cols - col * scale_c) ** 2
        w += np.where(r2 <= (3 * s) ** 2, amplitude * np.exp(-0.5 * r2 / s**2), 0.0)
    return w.ravel()


def _se_draw(n_points, length_scale, rng):
    """One draw of a unit-variance stationary GP with a squared-exponential kernel.

    Circulant embedding: the real orthonormal Fourier basis on ``M = 2 n_points`` points, each
    coefficient ``N(0, C(omega_k))`` with the SE spectral density
    ``C(omega) = sqrt(2 pi) l exp(-omega^2 l^2 / 2)`` at ``omega_k = 2 pi k / M``; the first
    ``n_points`` values are kept (the padding removes the wrap-around correlation).
    """
    M = 2 * n_points
    k = np.arange(M // 2 + 1)
    frequency = 2 * np.pi * k / M
    density = np.sqrt(2 * np.pi) * length_scale * np.exp(-0.5 * (frequency * length_scale) ** 2)
    coef = rng.standard_normal(M // 2 + 1) + 1j * rng.standard_normal(M // 2 + 1)
    # irfft(X)[t] = (X_0 + 2 sum_k Re(X_k e^{i w_k t}) + X_{M/2} (-1)^t) / M, so these weights
    # give the orthonormal real basis: 1/sqrt(M) at k = 0 and M/2, sqrt(2/M) cos / sin otherwise.
    weight = np.full(M // 2 + 1, np.sqrt(M / 2.0))
    weight[[0, -1]] = np.sqrt(M)
    coef[[0, -1]] = coef[[0, -1]].real
    return np.fft.irfft(weight * np.sqrt(density) * coef, M)[:n_points]


def _check_shape(kind, shape):
    if shape is None:
        return _KINDS[kind][0]
    shape = tuple(int(s) for s in np.atleast_1d(shape))
    ndim = 2 if kind == "bumps2d" else 1
    if len(shape) != ndim or min(shape) < 1:
        raise ValueError(f"shape={shape!r} must be {ndim} positive integer(s) for kind={kind!r}.")
    return shape


def make_smooth_sparse_regression(kind="bumps", *, n_samples=None, n_test=None, noise=None,
                                  shape=None, random_state=None):
    """A regression problem whose coefficients live on a 1-D or 2-D grid.

    The true coefficients ``w`` are sparse and smooth (``"bumps"``, ``"bumps2d"``,
    ``"reference"``) or smooth and dense (``"dense"``); ``X`` has i.i.d. ``N(0, 1)`` entries and
    ``y = X w + noise * e`` with ``e ~ N(0, I)``.  These are the simulations of the smooth
    dependent relevance determination benchmarks:

    =============  ===========================================================================
    ``bumps``      p = 200: three Gaussian bumps (centre, amplitude, sd) = (40, 1.0, 5),
                   (100, -1.0, 4), (160, 0.8, 6), each exactly 0 beyond 3 sd; 93 of 200
                   coefficients are non-zero. n = 100, noise sd 0.5.
    ``dense``      p = 200: ``w = 0.5 f`` with ``f`` a unit-variance SE Gaussian-process draw of
                   length scale 10. n = 100, noise sd 0.5.
    ``bumps2d``    16 x 16 image (C order): blobs at (5, 5) with amplitude 1.0 and at (11, 10)
                   with amplitude -0.8, both sd 2.5 and 0 beyond 3 sd. n = 150, noise sd 0.5.
    ``reference``  The authors' ``test_1D.m`` protocol: p = 1000, ``u`` an SE GP draw with
                   mean -8, variance 36 and length 50, prior variances ``c = softplus(u)`` set
                   to 0 below 5e-3, ``w = sqrt(c) * f`` with ``f`` a unit-variance SE draw of
                   length 50. 500 samples with a 20 % hold-out (n = 400, 100 test rows), noise
                   sd ``0.2 e^1.5``.
    =============  ===========================================================================

    The random draws come in a fixed order from ``random_state``: the random coefficients
    (``"dense"``, ``"reference"``), ``X``, the training noise, ``X_test``, the test noise. The
    bump coefficients do not depend on the seed.

    Parameters
    ----------
    kind : {"bumps", "dense", "bumps2d", "reference"}, default="bumps"
        Which coefficients (see the table).
    n_samples : int, default=None
        Training rows; None takes the kind's default.
    n_test : int, default=None
        Test rows; None takes the kind's default (1000, or 100 for ``"reference"``).
    noise : float, default=None
        Standard deviation of the noise; None takes the kind's default.
    shape : int or tuple of int, default=None
        Grid shape: ``(p,)`` for the 1-D kinds, ``(rows, columns)`` for ``"bumps2d"``. The bumps
        are scaled with the grid (centres and widths times ``p / 200``, or ``rows / 16`` and
        ``columns / 16``); the GP length scales of ``"dense"`` and ``"reference"`` are not.
    random_state : int, RandomState instance or None, default=None
        Seed or generator.

    Returns
    -------
    data : Bunch
        ``X`` (n_samples, p), ``y`` (n_samples,), ``coef`` (p,), ``coef_shape`` (tuple),
        ``X_test`` (n_test, p), ``y_test`` (n_test,), ``noise`` (the noise sd, float) and, for
        ``"reference"``, ``prior_variance`` (p,), the ``c`` above.

    Examples
    --------
    >>> from skgpx.datasets import make_smooth_sparse_regression
    >>> d = make_smooth_sparse_regression("bumps", random_state=0)
    >>> d.X.shape, d.y.shape, int((d.coef != 0).sum()), d.coef_shape
    ((100, 200), (100,), 93, (200,))
    """
    if not isinstance(kind, str) or kind not in _KINDS:
        raise ValueError(f"kind={kind!r} must be one of {sorted(_KINDS)}.")
    shape = _check_shape(kind, shape)
    _, default_n, default_noise, default_test = _KINDS[kind]
    n_samples = default_n if n_samples is None else n_samples
    n_test = default_test if n_test is None else n_test
    noise = default_noise if noise is None else noise
    check_n_samples(n_samples)
    check_n_samples(n_test)
    if not isinstance(noise, numbers.Real) or not noise >= 0:
        raise ValueError(f"noise={noise!r} must be a real number >= 0.")
    rng = check_random_state(random_state)
    p = int(np.prod(shape))
    extra = {}
    if kind == "bumps":
        coef = _truncated_bumps(np.arange(p, dtype=float), p / 200.0)
    elif kind == "bumps2d":
        coef = _truncated_blobs(shape)
    elif kind == "dense":
        coef = 0.5 * _se_draw(p, 10.0, rng)
    else:
        u = -8.0 + 6.0 * _se_draw(p, 50.0, rng)
        c = np.logaddexp(0.0, u)
        c[c < 5e-3] = 0.0
        coef = np.sqrt(c) * _se_draw(p, 50.0, rng)
        extra["prior_variance"] = c
    X = rng.standard_normal((n_samples, p))
    y = X @ coef + noise * rng.standard_normal(n_samples)
    X_test = rng.standard_normal((n_test, p))
    y_test = X_test @ coef + noise * rng.standard_normal(n_test)
    return Bunch(X=X, y=y, coef=coef, coef_shape=shape, X_test=X_test, y_test=y_test,
                 noise=float(noise), **extra)
