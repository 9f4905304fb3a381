"""Shared fixture data and independent (numpy/scipy) oracles for the pathwise tests.

Nothing here uses skgpx code: the exact posterior is dense numpy algebra on sklearn
kernel objects, so a bug in skgpx cannot cancel out in the comparison.
"""

import numpy as np
import scipy.linalg
from sklearn.gaussian_process.kernels import RBF, ConstantKernel, Matern, WhiteKernel

from skgpx.datasets import make_sine_1d

NOISE = 0.1  # noise variance of the common fixture (spec §6)
N_TRAIN = 30
DATA_SEED = 0

# The four stationary kernels of the common fixture, by id.
BASE_KERNELS = {
    "rbf": lambda: RBF(0.5, length_scale_bounds="fixed"),
    "matern12": lambda: Matern(0.5, length_scale_bounds="fixed", nu=0.5),
    "matern32": lambda: Matern(0.5, length_scale_bounds="fixed", nu=1.5),
    "matern52": lambda: Matern(0.5, length_scale_bounds="fixed", nu=2.5),
}
KERNEL_IDS = list(BASE_KERNELS)


def sine_data(n_samples=N_TRAIN, random_state=DATA_SEED):
    """X ~ U(0, 4) (n, 1), y = sin(2x) + N(0, 0.1) noise."""
    return make_sine_1d(n_samples=n_samples, noise_variance=NOISE, random_state=random_state)


def query_points(n=40):
    """n* = 40 points on [-1, 5]: interpolation in [0, 4] and extrapolation outside."""
    return np.linspace(-1.0, 5.0, n)[:, None]


def signal_kernel(name):
    """``ConstantKernel(1.0, "fixed") * K`` (sigma_f^2 = 1)."""
    return ConstantKernel(1.0, constant_value_bounds="fixed") * BASE_KERNELS[name]()


def full_kernel(name, noise=NOISE):
    """The fixture kernel ``ConstantKernel(1.0, "fixed") * K + WhiteKernel(0.1, "fixed")``."""
    return signal_kernel(name) + WhiteKernel(noise, noise_level_bounds="fixed")


def exact_posterior(kernel, X, y, Xq, noise_var):
    """Exact latent GP posterior by dense Cholesky algebra.

    ``noise_var`` is a scalar or an (n,) vector on the training diagonal.
    Returns the mean (n*,) or (n*, T) and the covariance (n*, n*).
    """
    K = kernel(X) + np.diag(np.broadcast_to(np.asarray(noise_var, float), (X.shape[0],)))
    Ks = kernel(Xq, X)
    factor = scipy.linalg.cho_factor(K, lower=True)
    mean = Ks @ scipy.linalg.cho_solve(factor, y)
    cov = kernel(Xq) - Ks @ scipy.linalg.cho_solve(factor, Ks.T)
    return mean, 0.5 * (cov + cov.T)


def moment_z_scores(draws, mean, cov):
    """Monte-Carlo z-scores of the sample mean and sample covariance of ``draws``.

    ``draws`` has shape (n*, S).  For Gaussian draws the sample mean has standard error
    sqrt(C_ii / S) and the sample covariance entry (i, j) has standard error
    sqrt((C_ii C_jj + C_ij^2) / S).  Returns (max mean z, max covariance z, |C_hat - C|,
    covariance standard errors).
    """
    S = draws.shape[1]
    var = np.diag(cov)
    mean_hat = draws.mean(axis=1)
    cov_hat = np.cov(draws)
    mean_z = np.abs(mean_hat - mean) / np.sqrt(var / S)
    cov_se = np.sqrt((np.outer(var, var) + cov**2) / S)
    abs_err = np.abs(cov_hat - cov)
    return float(mean_z.max()), float((abs_err / cov_se).max()), abs_err, cov_se


# Item 1 tolerances (spec §6.1): 40 mean entries and 1600 covariance entries.  For 40
# independent standard normals the max |z| exceeds 5 with probability ~2e-5; the
# covariance z-scores are correlated and slightly heavier tailed, hence 5.5.
MEAN_Z_MAX = 5.0
COV_Z_MAX = 5.5
