"""Shared fixture data and independent (numpy/scipy) oracles for the pathwise tests.

Nothing here uses skgpx code: the exact posterior is dense numpy algebra on sklearn
kernel objects, so a bug in skgpx cannot cancel out in the comparison.
"""

import numpy as np
import scipy.linalg
from sklearn.gaussian_process.kernels import RBF, ConstantKernel, Matern, WhiteKernel

from skgpx.datasets import make_sine_1d

NOISE = 0.1  # noise variance of the common fixture
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


# Exact-posterior z-score tolerances: 40 mean entries and 1600 covariance entries.  For 40
# independent standard normals the max |z| exceeds 5 with probability ~2e-5; the
# covariance z-scores are correlated and slightly heavier tailed, hence 5.5.
MEAN_Z_MAX = 5.0
COV_Z_MAX = 5.5


# ---------------------------------------------------------------- sparse (SGPR) oracles
# By the direct (textbook) formulas of Titsias (2009): explicit
# m x m inverses and an n x n Gaussian log density, no Cholesky tricks, so they share no
# algebra with the stable formulas (L, A, B, LB, c) that skgpx implements.


def sgpr_reference(kernel, X, y, Z, noise_var, jitter=0.0):
    """SGPR-optimal q(u) = N(mu_u, S_u) and collapsed ELBO by the direct formulas.

    ``kernel`` is the *signal* kernel (an sklearn kernel object), ``noise_var`` a scalar or
    an (n,) vector Sigma = diag(sigma_i^2), ``y`` of shape (n,) or (n, T), and ``jitter``
    an absolute amount added to the diagonal of Kzz (the prior covariance of u; the model
    writes L = chol(Kzz + jitter I)), so that Kzz below means Kzz + jitter I::

        Sig  = (Kzz + Kzx Sigma^-1 Kxz)^-1
        mu_u = Kzz Sig Kzx Sigma^-1 y        S_u = Kzz Sig Kzz
        ELBO = sum_t log N(y_t | 0, Q + Sigma) - tr(Sigma^-1 (Kxx - Q)) / 2,
        Q    = Kxz Kzz^-1 Kzx

    (with a scalar sigma^2 the trace term is tr(Kxx - Q) / (2 sigma^2)).
    Returns ``mu_u`` of shape (m, T), ``S_u`` (m, m) and the ELBO (float).
    """
    n = X.shape[0]
    Y = np.asarray(y, float).reshape(n, -1)
    noise = np.broadcast_to(np.asarray(noise_var, float), (n,))
    Kzz, Kzx = kernel(Z) + jitter * np.eye(Z.shape[0]), kernel(Z, X)
    Kzz_inv = np.linalg.inv(Kzz)
    Sig = np.linalg.inv(Kzz + (Kzx / noise) @ Kzx.T)
    mu = Kzz @ Sig @ (Kzx / noise) @ Y
    S = Kzz @ Sig @ Kzz
    Q = Kzx.T @ Kzz_inv @ Kzx
    cov = Q + np.diag(noise)
    sign, logdet = np.linalg.slogdet(cov)
    assert sign > 0
    quad = np.einsum("it,it->", Y, np.linalg.solve(cov, Y))
    T = Y.shape[1]
    log_density = -0.5 * quad - 0.5 * T * logdet - 0.5 * n * T * np.log(2 * np.pi)
    trace = np.sum((kernel.diag(X) - np.diag(Q)) / noise) / 2
    return mu, 0.5 * (S + S.T), float(log_density - T * trace)


def sgpr_predictive(kernel, Z, mu, S, Xq, jitter=0.0):
    """SGPR sparse predictive moments of f | q(u) (latent, normalised units).

    mean = k*z Kzz^-1 mu_u (n*, T);  cov = k** - Q** + k*z Kzz^-1 S_u Kzz^-1 kz* (n*, n*),
    with Kzz + jitter I for Kzz as in :func:`sgpr_reference`.
    """
    Kzz_inv = np.linalg.inv(kernel(Z) + jitter * np.eye(Z.shape[0]))
    Ksz = kernel(Xq, Z)
    P = Ksz @ Kzz_inv
    cov = kernel(Xq) - P @ Ksz.T + P @ S @ P.T
    return P @ mu, 0.5 * (cov + cov.T)


def sgpr_elbo(kernel, X, y, Z, noise_var, jitter=0.0):
    """The collapsed ELBO alone (see :func:`sgpr_reference`)."""
    return sgpr_reference(kernel, X, y, Z, noise_var, jitter)[2]


def exact_lml(kernel, X, y, noise_var):
    """Exact log marginal likelihood sum_t log N(y_t | 0, K + Sigma) (dense, no skgpx)."""
    n = X.shape[0]
    Y = np.asarray(y, float).reshape(n, -1)
    K = kernel(X) + np.diag(np.broadcast_to(np.asarray(noise_var, float), (n,)))
    factor = scipy.linalg.cho_factor(K, lower=True)
    quad = np.einsum("it,it->", Y, scipy.linalg.cho_solve(factor, Y))
    logdet = 2 * np.log(np.diag(factor[0])).sum()
    T = Y.shape[1]
    return float(-0.5 * quad - 0.5 * T * logdet - 0.5 * n * T * np.log(2 * np.pi))


def sparse_inducing_inputs(m=10):
    """The fixed inducing inputs of the sparse oracles: m points evenly spread on [0.2, 3.8].

    Kzz is well conditioned for the four fixture kernels (smallest eigenvalue 7e-3 for
    RBF(0.5) at m = 10, condition number 4e2), so the direct formulas are accurate to
    ~1e-13 and Kzz factorises without escalated jitter.  (The sparse model's fixed jitter,
    1e-8 mean(diag) on Kzz, still moves q(u) by up to ~1e-6 relative for RBF: pass it.)
    """
    return np.linspace(0.2, 3.8, m)[:, None]
