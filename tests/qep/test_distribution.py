"""Oracles for the multivariate q-exponential distribution: density, stochastic
representation, scaled q-ED.

Every reference value is computed independently of ``skgpx.qep``: radius moments from
``scipy.special.gammaln``, normalisation by ``scipy.integrate.quad``/``dblquad``, the
Gaussian case by ``scipy.stats.multivariate_normal``, sample laws by ``scipy.stats.kstest``.

Monte-Carlo tolerances are ``k * sd / sqrt(n)``: ``k = 4`` for a single scalar statistic
(two-sided false-alarm rate 6e-5 per assertion), ``k = 5`` for element-wise covariance checks,
where up to 210 entries are tested at once (Bonferroni: 210 * 5.7e-7 = 1.2e-4 per matrix).
The ``sd`` is either exact (from radius moments) or estimated from the same ``n`` draws.
All randomness comes from explicitly seeded ``torch.Generator`` / ``numpy`` generators.
"""

import math
import warnings

import numpy as np
import pytest
import torch
from scipy import integrate, special, stats

from skgpx.qep import (
    MultivariateQExponential,
    radius_moment,
    standard_univariate_draws,
    univariate_variance_factor,
    variance_factor,
)

DT = torch.float64
N_DRAWS = 200_000
K_SCALAR = 4.0  # MC multiplier for one scalar statistic
K_MATRIX = 5.0  # MC multiplier for element-wise matrix checks (Bonferroni, see module doc)


# ---------------------------------------------------------------------------------------------
# independent helpers
# ---------------------------------------------------------------------------------------------
def exact_radius_moment(k, dim, q):
    """E[R^k] for R^q ~ chi2(dim), by scipy's gammaln (independent of the code under test)."""
    return math.exp((k / q) * math.log(2.0) + special.gammaln(dim / 2.0 + k / q)
                    - special.gammaln(dim / 2.0))


def spd_matrix(dim, seed):
    """A well-conditioned, non-diagonal positive-definite matrix."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((dim, dim))
    return a @ a.T / dim + 0.5 * np.eye(dim)


def numpy_log_density(u, mu, cov, q):
    """Eq. 1 written out in numpy:
    log(q/2) - N/2 log 2pi - 1/2 log|C| + N/2 (q/2-1) log r - r^(q/2)/2."""
    n = mu.shape[-1]
    diff = u - mu
    r = np.einsum("...i,ij,...j->...", diff, np.linalg.inv(cov), diff)
    _, logdet = np.linalg.slogdet(cov)
    return (math.log(q / 2.0) - 0.5 * n * math.log(2.0 * math.pi) - 0.5 * logdet
            + 0.5 * n * (q / 2.0 - 1.0) * np.log(r) - 0.5 * r ** (q / 2.0))


def make_dist(mu, cov, q, scaled=False):
    return MultivariateQExponential(torch.as_tensor(mu, dtype=DT), torch.as_tensor(cov, dtype=DT),
                                    power=q, scaled=scaled)


def quad_1d(func, lo, hi):
    """quad that tolerates scipy's harmless round-off warnings at 1e-10 accuracy."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", integrate.IntegrationWarning)
        value, _ = integrate.quad(func, lo, hi, limit=200, epsabs=1e-11, epsrel=1e-11)
    return value


# ---------------------------------------------------------------------------------------------
# density
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("q", [0.5, 1.0, 1.5, 2.0, 3.0])
def test_normalisation_1d(q):
    """The 1-D density integrates to 1.  For q < 2 it is infinite at the mean (integrable
    |u - mu|^(q/2 - 1) singularity), so the range is split at the mean (QAGS handles the
    algebraic end-point singularity) and again one unit away (QAGI for the tails)."""
    mu, var = 0.7, 1.9
    dist = make_dist([mu], [[var]], q)

    def density(x):
        return math.exp(float(dist.log_prob(torch.tensor([x], dtype=DT))))

    pieces = [(mu, mu + 1.0), (mu + 1.0, np.inf), (mu - 1.0, mu), (-np.inf, mu - 1.0)]
    total = sum(quad_1d(density, lo, hi) for lo, hi in pieces)
    assert abs(total - 1.0) < 1e-6


@pytest.mark.parametrize("q", [0.5, 1.0, 1.5, 2.0, 3.0])
def test_normalisation_2d_polar(q):
    """2-D normalisation with a non-diagonal C, in polar coordinates around the mean.

    u = mu + rho * C^(1/2) (cos t, sin t) with the *symmetric* square root (not the
    implementation's Cholesky factor), Jacobian rho |C^(1/2)|.  A further substitution
    rho = s^2 (Jacobian 2 s) removes the rho^(q-1) singularity at 0 (q < 1) and shortens
    the heavy q = 0.5 tail; it is a plain change of variables, valid for any density.
    The angle is integrated too, so a wrong quadratic form (density not constant on the
    ellipses r = const) would also show up.
    """
    cov = np.array([[1.3, 0.6], [0.6, 0.8]])
    mu = np.array([0.4, -1.1])
    w, v = np.linalg.eigh(cov)
    root = v @ np.diag(np.sqrt(w)) @ v.T
    det_root = float(np.linalg.det(root))
    dist = make_dist(mu, cov, q)

    def integrand(s, theta):
        rho = s * s
        u = mu + rho * (root @ np.array([math.cos(theta), math.sin(theta)]))
        return 2.0 * s * rho * det_root * math.exp(float(dist.log_prob(torch.from_numpy(u))))

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", integrate.IntegrationWarning)
        total, _ = integrate.dblquad(integrand, 0.0, 2.0 * math.pi, 0.0, np.inf,
                                     epsabs=1e-9, epsrel=1e-9)
    assert abs(total - 1.0) < 1e-6


def test_q2_log_prob_is_gaussian():
    rng = np.random.default_rng(0)
    cov = spd_matrix(4, seed=1)
    mu = rng.standard_normal(4)
    u = rng.standard_normal((50, 4)) * 2.0
    got = make_dist(mu, cov, 2.0).log_prob(torch.from_numpy(u)).numpy()
    want = stats.multivariate_normal(mean=mu, cov=cov).logpdf(u)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-10)


@pytest.mark.parametrize("q", [0.5, 1.0, 1.5, 3.0])
def test_log_prob_matches_formula_and_scale_tril(q):
    """Eq. 1 against a numpy transcription, for covariance_matrix= and scale_tril= inputs and
    a batch of locations (broadcasting over loc)."""
    rng = np.random.default_rng(2)
    cov = spd_matrix(3, seed=3)
    mu = rng.standard_normal((2, 3))
    u = rng.standard_normal((7, 2, 3)) * 1.5
    want = numpy_log_density(u, mu, cov, q)
    d1 = make_dist(mu, cov, q)
    d2 = MultivariateQExponential(torch.from_numpy(mu),
                                  scale_tril=torch.linalg.cholesky(torch.from_numpy(cov)), power=q)
    for distribution in (d1, d2):
        np.testing.assert_allclose(distribution.log_prob(torch.from_numpy(u)).numpy(), want,
                                   rtol=1e-12, atol=1e-11)


def test_constructor_validation():
    loc = torch.zeros(2, dtype=DT)
    eye = torch.eye(2, dtype=DT)
    with pytest.raises(ValueError, match="exactly one"):
        MultivariateQExponential(loc, power=1.0)
    with pytest.raises(ValueError, match="exactly one"):
        MultivariateQExponential(loc, eye, scale_tril=eye, power=1.0)
    with pytest.raises(ValueError, match="must be > 0"):
        MultivariateQExponential(loc, eye, power=0.0)


# ---------------------------------------------------------------------------------------------
# radius moments and variance factors
# ---------------------------------------------------------------------------------------------
def test_variance_factor_closed_forms():
    assert univariate_variance_factor(1.0) == pytest.approx(3.0, rel=1e-12)
    assert univariate_variance_factor(2.0) == pytest.approx(1.0, rel=1e-12)
    # c_1.5 = 2^(4/3) Gamma(1/2 + 4/3) / Gamma(1/2) ~ 1.337
    c15 = 2 ** (4 / 3) * math.gamma(0.5 + 4 / 3) / math.gamma(0.5)
    assert univariate_variance_factor(1.5) == pytest.approx(c15, rel=1e-12)
    assert c15 == pytest.approx(1.337, abs=5e-4)
    for n in [1, 2, 5, 64, 1000]:
        assert variance_factor(n, 1.0) == pytest.approx(n + 2.0, rel=1e-10)
        assert variance_factor(n, 2.0) == pytest.approx(1.0, rel=1e-10)


@pytest.mark.parametrize("q", [0.5, 1.0, 1.5, 2.0, 3.0])
@pytest.mark.parametrize("dim", [1, 3, 20, 1000])
@pytest.mark.parametrize("k", [1.0, 2.0, 4.0])
def test_radius_moment_against_gammaln(q, dim, k):
    """E[R^k] by lgamma; finite at N = 1000 where Gamma(N/2 + k/q) overflows."""
    got = radius_moment(k, dim, q)
    assert math.isfinite(got)
    assert got == pytest.approx(exact_radius_moment(k, dim, q), rel=1e-10)
    expected = exact_radius_moment(2.0, dim, q) / dim
    assert variance_factor(dim, q) == pytest.approx(expected, rel=1e-10)


def test_radius_moment_chi2_mean():
    # R^q ~ chi2(N)  =>  E[R^q] = N for any q
    for q in [0.5, 1.0, 1.5, 3.0]:
        for n in [1, 7, 1000]:
            assert radius_moment(q, n, q) == pytest.approx(n, rel=1e-10)


# ---------------------------------------------------------------------------------------------
# sampler
# ---------------------------------------------------------------------------------------------
SAMPLER_CASES = [(q, n) for q in (1.0, 1.5, 2.0) for n in (1, 3)] + [(1.0, 20), (0.5, 3), (3.0, 3)]
COVARIANCE_CASES = [(q, n, False) for q, n in SAMPLER_CASES if n > 1] + [
    (1.0, 3, True), (1.5, 3, True), (1.0, 20, True)]


@pytest.mark.parametrize("q,dim", SAMPLER_CASES)
def test_sampler_radius_law(q, dim):
    """r = R^2 of the draws: mean E[R^2] (exact sd), E[log r] (sd estimated), KS of r^(q/2)
    against chi2(N)."""
    cov = spd_matrix(dim, seed=10 + dim)
    mu = np.linspace(-1.0, 1.0, dim)
    dist = make_dist(mu, cov, q)
    gen = torch.Generator().manual_seed(1000 + dim + int(10 * q))
    u = dist.sample((N_DRAWS,), generator=gen)
    assert u.shape == (N_DRAWS, dim)
    r = dist.quadratic_form(u).numpy()

    m2 = exact_radius_moment(2.0, dim, q)
    sd = math.sqrt(exact_radius_moment(4.0, dim, q) - m2 ** 2)
    assert abs(r.mean() - m2) <= K_SCALAR * sd / math.sqrt(N_DRAWS)

    log_r = np.log(r)
    e_log_r = (2.0 / q) * (special.digamma(dim / 2.0) + math.log(2.0))
    assert abs(log_r.mean() - e_log_r) <= K_SCALAR * log_r.std() / math.sqrt(N_DRAWS)

    assert stats.kstest(r ** (q / 2.0), stats.chi2(dim).cdf).pvalue > 1e-3


@pytest.mark.parametrize("q,dim,scaled", COVARIANCE_CASES)
def test_sampler_covariance(q, dim, scaled):
    """Empirical covariance (about the known mean) vs kappa_N C (plain) or C (scaled); each
    entry within K_MATRIX MC standard errors, sd of (u_i - mu_i)(u_j - mu_j) estimated from the
    same draws.  Also the mean, and the covariance_matrix property."""
    cov = spd_matrix(dim, seed=20 + dim)
    mu = np.linspace(0.5, -0.5, dim)
    dist = make_dist(mu, cov, q, scaled=scaled)
    kappa = exact_radius_moment(2.0, dim, q) / dim
    want = cov if scaled else kappa * cov
    np.testing.assert_allclose(dist.covariance_matrix.numpy(), want, rtol=1e-10, atol=1e-12)

    gen = torch.Generator().manual_seed(2000 + dim + int(10 * q) + 7 * scaled)
    d = (dist.sample((N_DRAWS,), generator=gen) - dist.loc).numpy()
    sd_mean = d.std(axis=0) / math.sqrt(N_DRAWS)
    assert np.all(np.abs(d.mean(axis=0)) <= K_MATRIX * sd_mean)
    # entry (i, j): mean of d_i d_j, MC variance E[d_i^2 d_j^2] - E[d_i d_j]^2 (over n)
    emp = d.T @ d / N_DRAWS
    sq = d * d
    se = np.sqrt((sq.T @ sq / N_DRAWS - emp ** 2) / N_DRAWS)
    assert np.all(np.abs(emp - want) <= K_MATRIX * se), np.max(np.abs(emp - want) / se)


def test_scaled_is_plain_with_shrunken_scale():
    """q-ED*(mu, C) = q-ED(mu, C / kappa_N): identical log densities."""
    rng = np.random.default_rng(5)
    cov = spd_matrix(4, seed=6)
    mu = rng.standard_normal(4)
    u = torch.from_numpy(rng.standard_normal((20, 4)))
    for q in [0.5, 1.0, 1.5, 3.0]:
        kappa = exact_radius_moment(2.0, 4, q) / 4
        a = make_dist(mu, cov, q, scaled=True).log_prob(u)
        b = make_dist(mu, cov / kappa, q).log_prob(u)
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("q", [0.5, 1.0, 1.5, 2.0, 3.0])
def test_univariate_variance_and_interval_probability(q):
    """N = 1: variance c_q sigma^2 (exact MC sd from E[R^4]) for both the distribution's sampler
    and standard_univariate_draws; P(|u - mu| < a) from draws vs quad of the density, within
    4 binomial standard errors."""
    mu, sigma2 = -0.3, 0.7
    dist = make_dist([mu], [[sigma2]], q)
    c_q = exact_radius_moment(2.0, 1, q)
    sd_sq = sigma2 * math.sqrt(exact_radius_moment(4.0, 1, q) - c_q ** 2)
    tol = K_SCALAR * sd_sq / math.sqrt(N_DRAWS)

    gen = torch.Generator().manual_seed(3000 + int(10 * q))
    d = (dist.sample((N_DRAWS,), generator=gen)[:, 0] - mu).numpy()
    assert abs(np.mean(d ** 2) - c_q * sigma2) <= tol

    gen = torch.Generator().manual_seed(4000 + int(10 * q))
    z = standard_univariate_draws((N_DRAWS,), q, generator=gen)
    assert z.shape == (N_DRAWS,) and z.dtype == DT
    assert abs(float(np.mean(z.numpy() ** 2)) * sigma2 - c_q * sigma2) <= tol
    # symmetric law: mean 0
    assert abs(float(z.mean())) <= K_SCALAR * math.sqrt(c_q) / math.sqrt(N_DRAWS)

    def density(x):
        return math.exp(float(dist.log_prob(torch.tensor([x], dtype=DT))))

    for a in [0.1, 0.8, 2.0]:
        p = quad_1d(density, mu - a, mu) + quad_1d(density, mu, mu + a)
        se = math.sqrt(p * (1.0 - p) / N_DRAWS)
        assert abs(np.mean(np.abs(d) < a) - p) <= K_SCALAR * se
        p_std = np.mean(np.abs(z.numpy()) * math.sqrt(sigma2) < a)
        assert abs(p_std - p) <= K_SCALAR * se


def test_standard_univariate_draws_large_q_no_nan():
    """sign(z)|z|^(2/q) is finite for q > 2 (z |z|^(2/q-1) would give 0 * inf at z = 0)."""
    z = standard_univariate_draws((20_000,), 4.0, generator=torch.Generator().manual_seed(7))
    assert torch.isfinite(z).all()
    # the law is q-ED_1(0, 1): |z|^q ~ chi2(1), and symmetric
    assert stats.kstest(z.abs().numpy() ** 4.0, stats.chi2(1).cdf).pvalue > 1e-3
    assert abs(float((z > 0).double().mean()) - 0.5) <= K_SCALAR * 0.5 / math.sqrt(20_000)


def test_rsample_shapes_and_reparameterisation():
    """Batch shapes, and gradients through loc and scale_tril (gradcheck with a re-seeded draw)."""
    rng = np.random.default_rng(8)
    loc = torch.from_numpy(rng.standard_normal((2, 3))).requires_grad_()
    tril = torch.from_numpy(np.linalg.cholesky(spd_matrix(3, seed=9))).requires_grad_()
    dist = MultivariateQExponential(loc, scale_tril=tril, power=1.0)
    assert dist.rsample((5,), generator=torch.Generator().manual_seed(0)).shape == (5, 2, 3)
    assert not dist.sample((5,), generator=torch.Generator().manual_seed(0)).requires_grad

    def draw(loc_, tril_):
        d = MultivariateQExponential(loc_, scale_tril=torch.tril(tril_), power=1.5)
        return d.rsample((4,), generator=torch.Generator().manual_seed(11))

    assert torch.autograd.gradcheck(draw, (loc, tril))
    # same seed => same draws; u - loc is linear in the scale factor
    a = draw(loc, tril).detach()
    b = MultivariateQExponential(loc.detach(), scale_tril=2 * tril.detach(), power=1.5).rsample(
        (4,), generator=torch.Generator().manual_seed(11))
    torch.testing.assert_close(b - loc.detach(), 2 * (a - loc.detach()), rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------------------------------------
# entropy
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("q", [0.5, 1.0, 1.5, 2.0, 3.0])
@pytest.mark.parametrize("dim", [1, 4])
@pytest.mark.parametrize("scaled", [False, True])
def test_entropy_vs_monte_carlo(q, dim, scaled):
    """-mean log p(draws) vs the closed form.  Location 0: for q = 0.5 about 5e-5 of the draws
    have R |L| below 1e-16 |loc|, so ``loc + R L s`` rounds to ``loc`` and log p = +inf (a
    floating-point property of the density's singularity, not a sampler error)."""
    cov = spd_matrix(dim, seed=30 + dim)
    mu = np.zeros(dim)
    dist = make_dist(mu, cov, q, scaled=scaled)
    gen = torch.Generator().manual_seed(5000 + dim + int(10 * q) + 3 * scaled)
    lp = dist.log_prob(dist.sample((N_DRAWS,), generator=gen)).numpy()
    mc, se = -lp.mean(), lp.std() / math.sqrt(N_DRAWS)
    assert abs(float(dist.entropy()) - mc) <= K_SCALAR * se
    if q == 2.0 and not scaled:
        want = stats.multivariate_normal(mean=mu, cov=cov).entropy()
        assert float(dist.entropy()) == pytest.approx(want, rel=1e-12)
