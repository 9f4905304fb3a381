"""Moment oracles: draws against the exact GP posterior.

The exact latent posterior is computed with dense numpy algebra (``_oracles.exact_posterior``)
and cross-checked against scikit-learn.  Tolerances are Monte-Carlo z-scores: the sample
mean of S draws has standard error sqrt(C_ii/S), a sample covariance entry
sqrt((C_ii C_jj + C_ij^2)/S); we allow k = 5 (mean, 40 entries) and k = 5.5 (covariance,
1 600 entries).
"""

import numpy as np
import pytest
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process.kernels import ConstantKernel, ExpSineSquared, WhiteKernel

from skgpx import PathwiseGPSampler

from .._oracles import (
    COV_Z_MAX,
    KERNEL_IDS,
    MEAN_Z_MAX,
    NOISE,
    exact_posterior,
    full_kernel,
    moment_z_scores,
    query_points,
    signal_kernel,
    sine_data,
)

S = 20_000


def _fit(name, **params):
    X, y = sine_data()
    est = PathwiseGPSampler(full_kernel(name), optimizer=None, predict_noise="latent",
                            device="cpu", **params)
    return est.fit(X, y)


@pytest.mark.parametrize("name", KERNEL_IDS)
def test_exact_oracle_equals_sklearn(name):
    # The oracle itself: dense algebra == sklearn's predict for the signal kernel, alpha=0.1.
    X, y = sine_data()
    Xq = query_points()
    mean, cov = exact_posterior(signal_kernel(name), X, y, Xq, NOISE)
    gpr = GaussianProcessRegressor(signal_kernel(name), alpha=NOISE, optimizer=None).fit(X, y)
    mean_sk, cov_sk = gpr.predict(Xq, return_cov=True)
    np.testing.assert_allclose(mean, mean_sk, rtol=0, atol=1e-10)
    np.testing.assert_allclose(cov, cov_sk, rtol=0, atol=1e-10)


@pytest.mark.parametrize("frequency_sampling", ["iid", "qmc"])
@pytest.mark.parametrize("name", KERNEL_IDS)
def test_independent_basis_moments_match_exact_posterior(name, frequency_sampling):
    # with one frequency set per path, mean and covariance of the draws are exact for
    # any F, so the tight z-score test applies even at F = 64.  Stratified radii keep each
    # frequency's marginal law, so they must pass the same test.
    X, y = sine_data()
    Xq = query_points()
    mean, cov = exact_posterior(signal_kernel(name), X, y, Xq, NOISE)
    est = _fit(name, shared_basis=False, n_features=64, frequency_sampling=frequency_sampling)
    draws = est.sample_y(Xq, n_samples=S, random_state=1)
    assert draws.shape == (40, S) and draws.dtype == np.float64
    mean_z, cov_z, _, _ = moment_z_scores(draws, mean, cov)
    assert mean_z <= MEAN_Z_MAX, f"mean z-score {mean_z:.2f}"
    assert cov_z <= COV_Z_MAX, f"covariance z-score {cov_z:.2f}"


@pytest.mark.parametrize("name", KERNEL_IDS)
def test_shared_basis_moments_carry_only_the_rff_bias(name):
    # a shared basis with F = 2048 has an exact mean and a covariance bias of
    # O(sigma_f^2 F^-1/2): |C_hat - C| <= 4 sigma_f^2 / sqrt(F) + 5 * MC standard error.
    X, y = sine_data()
    Xq = query_points()
    mean, cov = exact_posterior(signal_kernel(name), X, y, Xq, NOISE)
    n_features, sigma_f2 = 2048, 1.0
    draws = _fit(name, shared_basis=True, n_features=n_features).sample_y(
        Xq, n_samples=S, random_state=2)
    mean_z, _, abs_err, cov_se = moment_z_scores(draws, mean, cov)
    assert mean_z <= MEAN_Z_MAX, f"mean z-score {mean_z:.2f}"
    bound = 4.0 * sigma_f2 / np.sqrt(n_features) + 5.0 * cov_se
    excess = abs_err - bound
    assert excess.max() <= 0, f"covariance error exceeds its bound by {excess.max():.3g}"


@pytest.mark.parametrize("name", KERNEL_IDS)
def test_tight_covariance_test_detects_shared_basis_bias(name):
    # the independent-basis test must be able to fail: a shared basis at F = 64 has a covariance
    # bias far beyond the Monte-Carlo error, so its covariance z-score exceeds 5.5.
    X, y = sine_data()
    Xq = query_points()
    mean, cov = exact_posterior(signal_kernel(name), X, y, Xq, NOISE)
    draws = _fit(name, shared_basis=True, n_features=64).sample_y(
        Xq, n_samples=S, random_state=1)
    mean_z, cov_z, _, _ = moment_z_scores(draws, mean, cov)
    assert mean_z <= MEAN_Z_MAX  # the mean is exact whatever the basis
    assert cov_z > COV_Z_MAX, f"covariance z-score only {cov_z:.2f}"


@pytest.mark.parametrize("name", KERNEL_IDS)
def test_exact_prior_moments_match_exact_posterior(name):
    # prior="exact" is exact in distribution (up to a 1e-8 relative jitter).
    X, y = sine_data()
    Xq = query_points()
    mean, cov = exact_posterior(signal_kernel(name), X, y, Xq, NOISE)
    draws = _fit(name, prior="exact").sample_y(Xq, n_samples=S, random_state=3)
    assert draws.shape == (40, S)
    mean_z, cov_z, _, _ = moment_z_scores(draws, mean, cov)
    assert mean_z <= MEAN_Z_MAX, f"mean z-score {mean_z:.2f}"
    assert cov_z <= COV_Z_MAX, f"covariance z-score {cov_z:.2f}"


def test_exact_prior_works_for_kernel_without_random_features():
    # ExpSineSquared has no RFF expansion, but sample_y(prior="exact") must still give
    # the exact posterior; the same z-score tolerances apply.
    X, y = sine_data()
    Xq = query_points()
    signal = ConstantKernel(1.0, "fixed") * ExpSineSquared(1.0, 2.0, "fixed", "fixed")
    kernel = signal + WhiteKernel(NOISE, "fixed")
    mean, cov = exact_posterior(signal, X, y, Xq, NOISE)
    est = PathwiseGPSampler(kernel, optimizer=None, prior="exact", predict_noise="latent",
                            device="cpu").fit(X, y)
    draws = est.sample_y(Xq, n_samples=S, random_state=4)
    mean_z, cov_z, _, _ = moment_z_scores(draws, mean, cov)
    assert mean_z <= MEAN_Z_MAX, f"mean z-score {mean_z:.2f}"
    assert cov_z <= COV_Z_MAX, f"covariance z-score {cov_z:.2f}"


@pytest.mark.parametrize("prior", ["rff", "exact"])
def test_prior_draws_before_fit_have_prior_moments(prior):
    # Before fit, sample_y draws from the prior GP(0, k): independent bases make the RFF
    # draws' covariance exact, so the same z-score tolerances apply.
    Xq = query_points()
    kernel = full_kernel("matern32")
    est = PathwiseGPSampler(kernel, shared_basis=False, n_features=64, prior=prior,
                            predict_noise="latent", device="cpu")
    draws = est.sample_y(Xq, n_samples=S, random_state=5)
    assert not hasattr(est, "X_train_")
    mean_z, cov_z, _, _ = moment_z_scores(draws, np.zeros(40), signal_kernel("matern32")(Xq))
    assert mean_z <= MEAN_Z_MAX, f"mean z-score {mean_z:.2f}"
    assert cov_z <= COV_Z_MAX, f"covariance z-score {cov_z:.2f}"


def _sincos_features(Xq, frequencies, shift, variance):
    """Independent rebuild of the sin/cos map: sigma sqrt(2/F) [cos(W(x-x0)), sin(W(x-x0))]."""
    arg = (Xq - shift) @ frequencies.T
    n_features = 2 * frequencies.shape[0]
    return np.sqrt(2.0 * variance / n_features) * np.hstack([np.cos(arg), np.sin(arg)])


@pytest.mark.parametrize("n_features", [16, 64], ids=["primal-F<n", "dual-F>=n"])
def test_weight_space_moments_match_bayesian_linear_regression(n_features):
    # given the (shared) frequencies, weight-space draws are exactly Gaussian with
    # mean Phi* mu_w and covariance Phi* Sigma_w Phi*^T, mu_w = Sigma_w Phi^T S^-1 y,
    # Sigma_w = (Phi^T S^-1 Phi + I)^-1, with heteroscedastic S = alpha_i + white noise.
    X, y = sine_data()
    Xq = query_points()
    alpha = np.random.RandomState(6).uniform(0.0, 0.1, X.shape[0])
    est = PathwiseGPSampler(full_kernel("rbf"), alpha=alpha, method="weight_space",
                            n_features=n_features, optimizer=None, predict_noise="latent",
                            device="cpu").fit(X, y)
    functions = est.sample_functions(n_samples=S, random_state=7)
    assert functions.update_weights_ is None and functions.centers_ is None
    frequencies = functions.frequencies_.cpu().numpy()
    assert frequencies.shape == (1, n_features // 2, 1)
    phi = _sincos_features(X, frequencies[0], X.mean(0), 1.0)
    phi_q = _sincos_features(Xq, frequencies[0], X.mean(0), 1.0)
    noise = alpha + NOISE
    precision = phi.T @ (phi / noise[:, None]) + np.eye(n_features)
    sigma_w = np.linalg.inv(precision)
    mu_w = sigma_w @ (phi.T @ (y / noise))
    mean, cov = phi_q @ mu_w, phi_q @ sigma_w @ phi_q.T
    draws = functions(Xq)
    np.testing.assert_array_equal(draws, est.sample_y(Xq, n_samples=S, random_state=7))
    mean_z, cov_z, _, _ = moment_z_scores(draws, mean, cov)
    assert mean_z <= MEAN_Z_MAX, f"mean z-score {mean_z:.2f}"
    assert cov_z <= COV_Z_MAX, f"covariance z-score {cov_z:.2f}"


def _three_targets():
    X, y = sine_data()
    rng = np.random.RandomState(8)
    x = X[:, 0]
    Y = np.column_stack([
        y,
        3.0 * np.cos(x) + 5.0 + np.sqrt(NOISE) * rng.standard_normal(x.size),
        -2.0 * np.sin(1.5 * x) + 1.0 + np.sqrt(NOISE) * rng.standard_normal(x.size),
    ])
    return X, Y


@pytest.mark.parametrize("name", KERNEL_IDS)
def test_multi_output_normalized_moments_and_independence(name):
    # T = 3 targets with normalize_y.  In normalised units each target is an
    # independent GP with the same kernel (white noise 0.1 there); in target units the mean
    # is ybar_t + s_t * m(norm) and the covariance s_t^2 C (s_t the ddof-0 std).
    X, Y = _three_targets()
    Xq = query_points()
    est = PathwiseGPSampler(full_kernel(name), normalize_y=True, shared_basis=False,
                            n_features=64, optimizer=None, predict_noise="latent",
                            device="cpu").fit(X, Y)
    draws = est.sample_y(Xq, n_samples=S, random_state=9)
    assert draws.shape == (40, 3, S)
    y_mean, y_std = Y.mean(axis=0), Y.std(axis=0)
    mean_n, cov_n = exact_posterior(signal_kernel(name), X, (Y - y_mean) / y_std, Xq, NOISE)
    gpr = GaussianProcessRegressor(signal_kernel(name), alpha=NOISE, normalize_y=True,
                                   optimizer=None).fit(X, Y)
    mean_sk, cov_sk = gpr.predict(Xq, return_cov=True)
    for t in range(3):
        mean_t, cov_t = y_mean[t] + y_std[t] * mean_n[:, t], y_std[t] ** 2 * cov_n
        np.testing.assert_allclose(mean_t, mean_sk[:, t], atol=1e-9)  # oracle cross-check
        np.testing.assert_allclose(cov_t, cov_sk[:, :, t], atol=1e-9)
        mean_z, cov_z, _, _ = moment_z_scores(draws[:, t, :], mean_t, cov_t)
        assert mean_z <= MEAN_Z_MAX, f"target {t}: mean z-score {mean_z:.2f}"
        assert cov_z <= COV_Z_MAX, f"target {t}: covariance z-score {cov_z:.2f}"
    # Different targets are independent: every cross-target correlation (any pair of query
    # points) has standard error 1/sqrt(S) around 0; allow k = 5.
    centred = draws - draws.mean(axis=2, keepdims=True)
    scaled = centred / centred.std(axis=2, keepdims=True)
    for a, b in [(0, 1), (0, 2), (1, 2)]:
        corr = scaled[:, a, :] @ scaled[:, b, :].T / S
        assert np.abs(corr).max() <= 5.0 / np.sqrt(S), (a, b, np.abs(corr).max())
