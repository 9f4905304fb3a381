"""Argument checks and noise shared by the generators."""

import numbers

import numpy as np


def check_n_samples(n_samples):
    if not isinstance(n_samples, numbers.Integral) or isinstance(n_samples, bool):
        raise TypeError(f"n_samples must be an int; got {n_samples!r}")
    if n_samples < 1:
        raise ValueError(f"n_samples={int(n_samples)} must be >= 1")


def check_args(n_samples, noise_variance, noise_name="noise_variance"):
    check_n_samples(n_samples)
    if not isinstance(noise_variance, numbers.Real) or not noise_variance >= 0:
        raise ValueError(f"{noise_name}={noise_variance!r} must be a real number >= 0")


def add_noise(f, noise_variance, rng):
    return f + np.sqrt(noise_variance) * rng.standard_normal(f.shape[0])
