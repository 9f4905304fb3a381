"""Random Fourier features: kernel error, composition, spectra.

The reference kernel matrices come from scikit-learn's kernel objects; the feature maps are
drawn with ``skgpx.pathwise._draws._features.draw_random_features``.
"""

import numpy as np
import pytest
import scipy.stats
import torch
from sklearn.gaussian_process.kernels import (
    RBF,
    ConstantKernel,
    DotProduct,
    Exponentiation,
    ExpSineSquared,
    Matern,
    PairwiseKernel,
    RationalQuadratic,
    WhiteKernel,
)

from skgpx import PathwiseGPSampler
from skgpx._base import cpu_generator
from skgpx.pathwise._draws._spectra import spectral_terms
from skgpx.pathwise._draws._features import draw_random_features

from .._oracles import NOISE, query_points, sine_data

LENGTH_SCALE = np.array([0.5, 0.8, 1.0])
SIGMA_F2 = 0.9
N_FEATURES = [64, 256, 1024, 4096, 16384]
SEEDS = range(10)

# sigma_f^2 = 0.9, ARD length scale (0.5, 0.8, 1.0), plus the sum and product rules.
KERNELS = {
    "rbf": lambda: ConstantKernel(SIGMA_F2) * RBF(LENGTH_SCALE),
    "matern12": lambda: ConstantKernel(SIGMA_F2) * Matern(LENGTH_SCALE, nu=0.5),
    "matern32": lambda: ConstantKernel(SIGMA_F2) * Matern(LENGTH_SCALE, nu=1.5),
    "matern52": lambda: ConstantKernel(SIGMA_F2) * Matern(LENGTH_SCALE, nu=2.5),
    # product of stationary kernels: omega = omega_1/l_1 + omega_2/l_2, variance 0.9
    "product": lambda: ConstantKernel(SIGMA_F2) * RBF(LENGTH_SCALE)
    * Matern([0.7, 0.6, 0.9], nu=1.5),
    # sum: concatenated blocks with independent weights; total variance 1.5
    "sum": lambda: RBF(LENGTH_SCALE) + ConstantKernel(0.5) * Matern(LENGTH_SCALE, nu=2.5),
    # beyond the common Matern orders: generic nu and RationalQuadratic
    "matern_nu2": lambda: ConstantKernel(SIGMA_F2) * Matern(LENGTH_SCALE, nu=2.0),
    "rq": lambda: ConstantKernel(SIGMA_F2) * RationalQuadratic(0.7, alpha=1.5),
}


def _points():
    return np.random.RandomState(0).uniform(0.0, 1.0, size=(50, 3))


def _features(kernel, n_features, seed, X, feature_map="sincos", n_bases=1):
    Xt = torch.tensor(X, dtype=torch.float64)
    phi = draw_random_features(kernel, n_features, feature_map, n_bases, X.shape[1],
                               Xt.mean(0), cpu_generator(seed), torch.float64, "cpu")
    return phi, phi(Xt).numpy()


@pytest.mark.parametrize("name", list(KERNELS))
def test_rff_kernel_error_decays_like_inverse_sqrt_of_F(name):
    kernel = KERNELS[name]()
    X = _points()
    K = kernel(X)
    sigma_f2 = float(K[0, 0])  # k(x, x) of a stationary kernel (1.5 for the sum)
    rms = []
    for n_features in N_FEATURES:
        errors = []
        for seed in SEEDS:
            _, phi = _features(kernel, n_features, seed, X)
            assert phi.shape == (1, 50, n_features)
            gram = phi[0] @ phi[0].T
            # the sin/cos map reproduces the prior variance exactly: cos^2 + sin^2 = 1
            np.testing.assert_allclose(np.diag(gram), sigma_f2, rtol=0, atol=1e-12)
            error = gram - K
            errors.append(np.sqrt(np.mean(error**2)))
            # single-draw bound, every draw (a numpy prototype saw 1.5-2.6 sigma_f^2 F^-1/2)
            max_error = np.abs(error).max()
            bound = 5.0 * sigma_f2 / np.sqrt(n_features)
            assert max_error <= bound, (n_features, seed, max_error)
        rms.append(np.mean(errors))
    slope = np.polyfit(np.log(N_FEATURES), np.log(rms), 1)[0]
    assert -0.65 <= slope <= -0.35, slope


@pytest.mark.parametrize("name", ["rbf", "matern12", "product", "sum"])
def test_cosine_map_is_unbiased_with_the_same_rate(name):
    # Random-phase cosine map: F frequencies, no exact diagonal, but the same F^-1/2 rate.
    kernel = KERNELS[name]()
    X = _points()
    K = kernel(X)
    rms = []
    for n_features in N_FEATURES:
        errors = []
        for seed in SEEDS:
            phi_map, phi = _features(kernel, n_features, seed, X, feature_map="cosine")
            assert phi.shape == (1, 50, n_features)
            errors.append(np.sqrt(np.mean((phi[0] @ phi[0].T - K) ** 2)))
        rms.append(np.mean(errors))
    slope = np.polyfit(np.log(N_FEATURES), np.log(rms), 1)[0]
    assert -0.65 <= slope <= -0.35, slope


def test_independent_bases_differ_and_each_approximates_the_kernel():
    kernel = KERNELS["matern32"]()
    X = _points()
    K = kernel(X)
    phi_map, phi = _features(kernel, 1024, 0, X, n_bases=4)
    assert phi.shape == (4, 50, 1024)
    assert phi_map.frequencies.shape == (4, 512, 3)
    assert not np.allclose(phi[0], phi[1])
    for b in range(4):
        assert np.abs(phi[b] @ phi[b].T - K).max() <= 5.0 * SIGMA_F2 / np.sqrt(1024)


def test_constant_and_linear_terms_have_exact_features():
    # ConstantKernel as a summand: one feature sqrt(c); c * DotProduct(sigma_0):
    # sqrt(c) [sigma_0, x].  Both are exact, so Phi Phi^T == K to round-off.
    kernel = ConstantKernel(0.7) + ConstantKernel(2.0) * DotProduct(0.5)
    X = _points()
    _, phi = _features(kernel, 64, 0, X)
    assert phi.shape == (1, 50, 1 + 1 + 3)
    np.testing.assert_allclose(phi[0] @ phi[0].T, kernel(X), rtol=0, atol=1e-12)


@pytest.mark.parametrize("nu", [0.5, 1.5, 2.5, 2.0, np.inf])
def test_matern_spectral_frequencies_follow_student_t(nu):
    # Unit-length-scale Matern-nu frequencies in d = 3 are multivariate Student-t with 2 nu
    # dof with ONE Gamma scale per vector, so ||omega||^2 / 3 ~ F(3, 2 nu) (chi2_3 / 3 for
    # nu = inf, i.e. RBF).  A per-coordinate scale would give a different law.  KS test on
    # 20 000 vectors; a correct sampler fails with probability 1e-3.
    kernel = Matern(LENGTH_SCALE, nu=nu)
    phi_map, _ = _features(kernel, 40_000, 11, _points())
    unit = phi_map.frequencies[0].numpy() * LENGTH_SCALE  # back to unit length scale
    stat = (unit**2).sum(axis=1) / 3.0
    law = scipy.stats.chi2(3, scale=1 / 3) if np.isinf(nu) else scipy.stats.f(3, 2 * nu)
    assert scipy.stats.kstest(stat, law.cdf).pvalue > 1e-3


def test_rbf_frequencies_are_standard_normal_over_length_scale():
    phi_map, _ = _features(RBF(LENGTH_SCALE), 40_000, 12, _points())
    unit = phi_map.frequencies[0].numpy() * LENGTH_SCALE
    for j in range(3):
        assert scipy.stats.kstest(unit[:, j], scipy.stats.norm.cdf).pvalue > 1e-3


@pytest.mark.parametrize("kernel", [
    ExpSineSquared(1.0, 2.0),
    ConstantKernel(1.0) * ExpSineSquared(1.0, 2.0),
    Exponentiation(RBF(1.0), 2.0),
    PairwiseKernel(metric="laplacian"),
    RBF(1.0) * WhiteKernel(0.1),
], ids=["expsine", "scaled-expsine", "exponentiation", "pairwise", "white-in-product"])
def test_spectral_terms_rejects_kernels_without_features(kernel):
    with pytest.raises(NotImplementedError, match=r"prior='exact'"):
        spectral_terms(kernel)


def test_sample_functions_names_exact_prior_and_sample_y_still_works():
    X, y = sine_data()
    Xq = query_points()
    kernel = ConstantKernel(1.0, "fixed") * ExpSineSquared(1.0, 2.0, "fixed", "fixed") \
        + WhiteKernel(NOISE, "fixed")
    est = PathwiseGPSampler(kernel, optimizer=None, device="cpu").fit(X, y)
    with pytest.raises(NotImplementedError, match=r"prior='exact'"):
        est.sample_functions(n_samples=2, random_state=0)
    exact = est.set_params(prior="exact").sample_y(Xq, n_samples=3, random_state=0)
    assert exact.shape == (40, 3) and np.isfinite(exact).all()
