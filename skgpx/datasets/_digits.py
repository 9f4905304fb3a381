"""Corrupted copies of scikit-learn's 8 x 8 digits (the KEP-SVGP robustness proxy)."""

import numbers

import numpy as np
from sklearn.utils import check_random_state

# Severity 1..5 of each corruption, on images scaled to [0, 1] (a stand-in for CIFAR-10-C).
DIGIT_CORRUPTIONS = {
    "gaussian_noise": (0.04, 0.08, 0.12, 0.18, 0.26),  # noise standard deviation
    "salt_and_pepper": (0.02, 0.05, 0.10, 0.15, 0.25),  # fraction of pixels set to 0 or 1
    "blur": (0.4, 0.6, 0.8, 1.0, 1.3),  # Gaussian blur sigma in pixels
    "contrast": (0.75, 0.6, 0.45, 0.3, 0.2),  # factor about each image's mean
    "shift": (1, 1, 2, 2, 3),  # pixels, in a random direction per image, zero fill
}
_DIRECTIONS = np.array([(dy, dx) for dy in (-1, 0, 1) for dx in (-1, 0, 1) if dy or dx])


def _shift_image(image, dy, dx):
    out = np.zeros_like(image)
    h, w = image.shape
    out[max(dy, 0):h + min(dy, 0), max(dx, 0):w + min(dx, 0)] = (
        image[max(-dy, 0):h + min(-dy, 0), max(-dx, 0):w + min(-dx, 0)]
    )
    return out


def corrupt_digits(X, kind, severity, *, scale=16.0, random_state=None):
    """Corrupted copies of 8 x 8 digit images (scikit-learn's ``load_digits``).

    The images are divided by ``scale`` (16 for ``load_digits``) to lie in [0, 1],
    corrupted, clipped to [0, 1] and returned on the input's scale.  The kinds and
    their five severities (the CIFAR-10-C proxy of the KEP-SVGP benchmarks):

    ===================  ======================================================
    ``gaussian_noise``   additive noise, sd 0.04, 0.08, 0.12, 0.18, 0.26
    ``salt_and_pepper``  a fraction 0.02, 0.05, 0.10, 0.15, 0.25 of the pixels set
                         to 0 or 1 with equal probability
    ``blur``             Gaussian blur, sigma 0.4, 0.6, 0.8, 1.0, 1.3 pixels
                         (zero outside the image)
    ``contrast``         ``mean + factor (x - mean)`` per image, factor 0.75, 0.6,
                         0.45, 0.3, 0.2
    ``shift``            1, 1, 2, 2, 3 pixels in one of the 8 directions, drawn per
                         image, zero fill
    ===================  ======================================================

    Parameters
    ----------
    X : array-like of shape (n_samples, 64)
        Flattened 8 x 8 images with values in ``[0, scale]``; not modified.
    kind : str
        One of the kinds above.
    severity : int
        1 (mild) to 5 (severe).
    scale : float, default=16.0
        The largest pixel value of ``X``.
    random_state : int, RandomState instance or None, default=None
        Seeds the noise, the pixels hit and the shift directions.

    Returns
    -------
    X_corrupted : ndarray of shape (n_samples, 64)
        float64, on the scale of ``X``.

    Examples
    --------
    >>> from sklearn.datasets import load_digits
    >>> from skgpx.datasets import corrupt_digits
    >>> X = load_digits().data[:5]
    >>> corrupt_digits(X, "blur", 3).shape
    (5, 64)
    """
    from scipy.ndimage import gaussian_filter

    if kind not in DIGIT_CORRUPTIONS:
        raise ValueError(f"kind={kind!r} is not one of {sorted(DIGIT_CORRUPTIONS)}.")
    if (not isinstance(severity, numbers.Integral) or isinstance(severity, bool)
            or not 1 <= severity <= 5):
        raise ValueError(f"severity={severity!r} must be an integer from 1 to 5.")
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2 or X.shape[1] != 64:
        raise ValueError(f"X must have shape (n_samples, 64) (8 x 8 images); got {X.shape}.")
    if not np.all(np.isfinite(X)):
        raise ValueError("X contains NaN or infinite values.")
    rng = check_random_state(random_state)
    level = DIGIT_CORRUPTIONS[kind][severity - 1]
    images = X.reshape(-1, 8, 8) / scale
    if kind == "gaussian_noise":
        out = images + level * rng.standard_normal(images.shape)
    elif kind == "salt_and_pepper":
        hit = rng.uniform(size=images.shape) < level
        out = np.where(hit, (rng.uniform(size=images.shape) < 0.5).astype(float), images)
    elif kind == "blur":
        out = np.stack([gaussian_filter(image, level, mode="constant") for image in images])
    elif kind == "contrast":
        mean = images.mean(axis=(1, 2), keepdims=True)
        out = mean + level * (images - mean)
    else:
        directions = _DIRECTIONS[rng.randint(len(_DIRECTIONS), size=len(images))] * level
        out = np.stack([_shift_image(image, dy, dx) for image, (dy, dx) in zip(images, directions)])
    return np.clip(out, 0.0, 1.0).reshape(X.shape) * scale
