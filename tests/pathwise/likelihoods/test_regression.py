"""Regression likelihoods of the SVGP engine (``skgpx.pathwise._likelihoods._regression``).

References are independent of the code under test: scipy's adaptive quadrature of the
defining integrals (``quad`` with break points at ``r = 0, +-sqrt(a)``, absolute error
~1e-13; ``dblquad`` for the heteroscedastic 2-D integral), central differences of those
integrals for the derivatives (step 1e-4: truncation ~1e-8 x the third derivative, round-off
1e-13 / 1e-4 = 1e-9, so 1e-6), and scipy's t / normal distributions for the noise draws.
Tolerances:

* Student-t against quad: 1e-8 (both rules are measured <= 1e-10 on this grid; see the
  module's constants);
* Monte Carlo: ``|z| < 4.5`` (false alarm ~7e-6 per check), the standard error from the
  draws' known fourth moment.
"""

import math
import pickle

import numpy as np
import pytest
import scipy.integrate
import scipy.special
import scipy.stats
import torch

from skgpx.pathwise._likelihoods._regression import NOISE_FLOOR, HeteroscedasticGaussian, StudentT

# (nu, sigma, y - mu, var): narrow (Gauss-Hermite) and wide (sinh rule) marginals, outliers
# at 30 sigma, var up to 100 sigma^2, nu from 2.1 to 100; the last at v / (nu sigma^2) = 0.2,
# where 20 Gauss-Hermite nodes alone err by ~1e-6; then a wide marginal 6 sd from r = 0, where
# the sinh rule with 64 nodes errs by 6e-7
CASES = [(2.1, 1.0, 0.0, 100.0), (2.1, 1.0, 30.0, 100.0), (4.0, 0.5, 1.0, 0.01),
         (4.0, 0.5, 15.0, 25.0), (10.0, 2.0, -3.0, 4.0), (100.0, 1.0, 30.0, 1.0),
         (3.0, 0.1, 0.3, 0.0004), (30.0, 0.2, -6.0, 1.0), (4.0, 1.0, 0.5, 0.8),
         (4.0, 1.0, 207.8, 1200.0)]


def _student_quad(nu, sigma, m, var, kind="E"):
    """``E[t(r)]``, ``r ~ N(m, var)``, of log p (E), d log p / df (g) or its half second
    derivative (h), by scipy's adaptive quadrature."""
    a = nu * sigma * sigma
    const = (scipy.special.gammaln((nu + 1) / 2) - scipy.special.gammaln(nu / 2)
             - 0.5 * math.log(math.pi * a))
    fun = {"E": lambda r: const - (nu + 1) / 2 * np.log1p(r * r / a),
           "g": lambda r: (nu + 1) * r / (a + r * r),
           "h": lambda r: 0.5 * (nu + 1) * (r * r - a) / (a + r * r) ** 2,
           "p": lambda r: np.exp(const - (nu + 1) / 2 * np.log1p(r * r / a))}[kind]
    sd = math.sqrt(var)
    lo, hi = m - 12 * sd, m + 12 * sd
    points = [p for p in (0.0, -math.sqrt(a), math.sqrt(a)) if lo < p < hi] or None
    value, _ = scipy.integrate.quad(lambda r: fun(r) * scipy.stats.norm.pdf(r, m, sd), lo, hi,
                                    points=points, epsabs=1e-14, epsrel=1e-13, limit=500)
    return value


def _student(nu, sigma, m, var):
    lik = StudentT(df=nu, scale=sigma)
    Y = torch.tensor([[m]], dtype=torch.float64)
    return lik, Y, torch.zeros_like(Y), torch.tensor([[var]], dtype=torch.float64)


@pytest.mark.parametrize("nu, sigma, m, var", CASES)
def test_student_t_expectations_against_quad(nu, sigma, m, var):
    lik, Y, mu, v = _student(nu, sigma, m, var)
    E, g, h = lik.expectations(Y, mu, v)
    assert E.shape == (1,) and g.shape == h.shape == (1, 1)
    assert abs(float(E[0]) - _student_quad(nu, sigma, m, var)) < 1e-8
    assert abs(float(g[0, 0]) - _student_quad(nu, sigma, m, var, "g")) < 1e-8
    assert abs(float(h[0, 0]) - _student_quad(nu, sigma, m, var, "h")) < 1e-8


def test_student_t_bonnet_price_by_differences_of_quad():
    # g = dE/dmu, h = dE/dv: central differences of the quad value (r = y - mu)
    eps = 1e-4
    for nu, sigma, m, var in CASES[:6]:
        lik, Y, mu, v = _student(nu, sigma, m, var)
        _, g, h = lik.expectations(Y, mu, v)
        d_mu = (_student_quad(nu, sigma, m - eps, var)
                - _student_quad(nu, sigma, m + eps, var)) / (2 * eps)
        d_var = (_student_quad(nu, sigma, m, var + eps)
                 - _student_quad(nu, sigma, m, var - eps)) / (2 * eps)
        assert abs(float(g[0, 0]) - d_mu) < 1e-6
        assert abs(float(h[0, 0]) - d_var) < 1e-6


def test_student_t_float32_matches_float64():
    # both rules in one batch, in single precision: no NaN, the float64 values to ~1e-5
    # relative (r - m formed as sqrt(a) sinh(u) - m cancelled: 3e-5 off at m = 2000 sigma)
    lik = StudentT(df=2.1, scale=0.5)
    Y = torch.tensor([[0.0, 30.0, 1.0], [1e3, -2.0, 0.1]], dtype=torch.float64)
    var = torch.tensor([[100.0, 1.0, 1e-6], [4.0, 0.0, 0.01]], dtype=torch.float64)
    mu = torch.zeros_like(Y)
    single = lik.expectations(Y.float(), mu.float(), var.float())
    for a, b in zip(lik.expectations(Y, mu, var), single):
        assert b.dtype == torch.float32 and bool(torch.isfinite(b).all())
        assert torch.allclose(b.double(), a, rtol=1e-5, atol=1e-6)
    # an outlier at 3e7 sd: the sinh rule's interval collapses in float32 (it gave E = the
    # constant and a log density of -inf); Gauss-Hermite is accurate that far out
    tiny = StudentT(df=2.001, scale=1e-6)
    Y = torch.tensor([[30.0]], dtype=torch.float64)
    var = torch.tensor([[1e-12]], dtype=torch.float64)
    for dtype in (torch.float64, torch.float32):
        E, g, _ = tiny.expectations(Y.to(dtype), torch.zeros_like(Y, dtype=dtype), var.to(dtype))
        lpd = tiny.log_predictive_density(Y.to(dtype), torch.zeros_like(Y, dtype=dtype),
                                          var.to(dtype))
        # v = sigma^2 is tiny against r^2: log p(30) + v/2 (log p)'' (the next term ~v^2)
        a = 2.001e-12
        ref = scipy.stats.t.logpdf(30.0, 2.001, scale=1e-6) + 0.5e-12 * 3.001 * (900 - a) / (
            a + 900) ** 2
        assert abs(float(E[0]) - ref) < 1e-6 * abs(ref) and float(g[0, 0]) > 0
        assert abs(float(lpd[0]) - ref) < 1e-6 * abs(ref)


def test_student_t_float32_constant_at_large_df():
    # df at its upper bound (where a fit on Gaussian data ends): the normalising constant is
    # a difference of two lgammas near 2600, whose float32 rounding alone is 1.5e-4; what
    # is left in float32 is the quadrature sum's rounding, ~1e-7 of |E| and of the sum's terms
    lik = StudentT(df=1000.0, scale=0.4)
    Y = torch.linspace(-1.0, 1.0, 30, dtype=torch.float64)[:, None]
    mu, var = 0.3 * Y, torch.full_like(Y, 0.05)
    E = lik.expectations(Y, mu, var)[0]
    E32 = lik.expectations(Y.float(), mu.float(), var.float())[0]
    assert E32.dtype == torch.float32
    assert float((E32.double() - E).abs().max()) < 1e-5


def test_student_t_batch_equals_entries():
    # both rules in one (b, T) batch: each entry's g, h and each row's E where they belong
    lik = StudentT(df=3.0, scale=0.4)
    Y = torch.tensor([[0.0, 30.0, 1.0], [5.0, -2.0, 0.1]], dtype=torch.float64)
    mu = torch.tensor([[0.1, 0.0, -1.0], [0.0, 0.2, 0.0]], dtype=torch.float64)
    var = torch.tensor([[100.0, 1e-3, 3.0], [1e-4, 0.0, 9.0]], dtype=torch.float64)
    E, g, h = lik.expectations(Y, mu, var)
    for i in range(2):
        total = 0.0
        for t in range(3):
            e, gg, hh = lik.expectations(Y[i:i + 1, t:t + 1], mu[i:i + 1, t:t + 1],
                                         var[i:i + 1, t:t + 1])
            total += float(e[0])
            assert float(gg[0, 0]) == float(g[i, t]) and float(hh[0, 0]) == float(h[i, t])
        assert abs(float(E[i]) - total) < 1e-12


def test_student_t_is_not_log_concave():
    # an outlier's curvature is positive: h > 0, which the engine's safeguard must handle
    lik, Y, mu, v = _student(4.0, 1.0, 30.0, 1.0)
    assert float(lik.expectations(Y, mu, v)[2][0, 0]) > 0 and not lik.log_concave


def test_student_t_theta_gradient_against_quad():
    # rows in both rules; dE/d(log(nu - 2), log sigma) by central differences of quad
    rows = [(2.5, 0.7, 0.4, 0.01), (2.5, 0.7, 12.0, 30.0)]
    lik = StudentT(df=2.5, scale=0.7)
    Y = torch.tensor([[r[2] for r in rows]], dtype=torch.float64)
    var = torch.tensor([[r[3] for r in rows]], dtype=torch.float64)
    theta = lik.theta.clone().requires_grad_(True)
    E, _, _ = lik.expectations(Y, torch.zeros_like(Y), var, theta=theta)
    (grad,) = torch.autograd.grad(E.sum(), theta)
    eps = 1e-5
    for k in range(2):
        total = 0.0
        for sign in (1.0, -1.0):
            t = lik.theta.numpy().copy()
            t[k] += sign * eps
            nu, sigma = 2.0 + math.exp(t[0]), math.exp(t[1])
            total += sign * sum(_student_quad(nu, sigma, r[2], r[3]) for r in rows)
        assert abs(float(grad[k]) - total / (2 * eps)) < 1e-6


def test_student_t_predictive_and_log_predictive_density():
    lik = StudentT(df=3.0, scale=0.5)
    Y = torch.tensor([[0.2, 15.0], [-1.0, 0.0]], dtype=torch.float64)
    mu = torch.tensor([[0.0, 0.5], [0.3, 0.0]], dtype=torch.float64)
    var = torch.tensor([[0.002, 40.0], [1.0, 0.3]], dtype=torch.float64)
    lpd = lik.log_predictive_density(Y, mu, var)
    for i in range(2):
        ref = sum(math.log(_student_quad(3.0, 0.5, float(Y[i, t] - mu[i, t]), float(var[i, t]),
                                         "p")) for t in range(2))
        assert abs(float(lpd[i]) - ref) < 1e-8
    mean, pvar = lik.predictive_moments(mu, var)
    assert torch.equal(mean, mu)
    assert torch.allclose(pvar, var + 0.25 * 3.0, rtol=1e-14, atol=0)


def test_student_t_noise_draws():
    lik = StudentT(df=10.0, scale=0.3)
    n = 200_000
    draws = lik.sample_noise((n,), torch.Generator().manual_seed(0)).numpy()
    s2 = float(lik.noise_variance())
    assert abs(s2 - 0.09 * 10 / 8) < 1e-15
    # var of the sample variance: (mu_4 - s2^2) / n, excess kurtosis 6 / (nu - 4) = 1
    z = (np.mean(draws ** 2) - s2) / math.sqrt((4.0 - 1.0) * s2 * s2 / n)
    assert abs(z) < 4.5
    assert scipy.stats.kstest(draws[:20_000], scipy.stats.t(10.0, scale=0.3).cdf).pvalue > 1e-5
    again = lik.sample_noise((n,), torch.Generator().manual_seed(0), dtype=torch.float32)
    assert again.dtype == torch.float32 and np.allclose(again.numpy(), draws, rtol=1e-6)


@pytest.mark.parametrize("kwargs", [dict(df=2.0), dict(df=1.5), dict(df=float("nan")),
                                    dict(scale=0.0), dict(scale=-1.0), dict(df=1e6),
                                    dict(n_quadrature=0), dict(n_quadrature=None),
                                    dict(df=True)])
def test_student_t_bad_parameters(kwargs):
    with pytest.raises(ValueError, match="must be"):
        StudentT(**kwargs)


def test_student_t_with_theta_and_bounds():
    lik = StudentT(df=4.0, scale=2.0)
    assert np.allclose(lik.theta.numpy(), [math.log(2.0), math.log(2.0)])
    other = lik.with_theta(torch.tensor([0.0, 0.0], requires_grad=True))
    assert other.df == 3.0 and other.scale == 1.0 and lik.df == 4.0
    assert not other.theta.requires_grad
    assert np.all(np.isfinite(lik.bounds)) and lik.bounds.shape == (2, 2)
    assert np.exp(lik.bounds[0, 0]) + 2 > 2
    again = pickle.loads(pickle.dumps(other))
    assert torch.equal(again.theta, other.theta) and again.df == 3.0


def _hetero_case():
    lik = HeteroscedasticGaussian(log_noise_offset=-0.4)
    Y = torch.tensor([[0.3, -1.2]], dtype=torch.float64)
    mu = torch.tensor([[0.1, -0.5, 0.2, -0.7]], dtype=torch.float64)
    var = torch.tensor([[0.3, 0.05, 0.4, 0.8]], dtype=torch.float64)
    return lik, Y, mu, var


def test_heteroscedastic_expectations_against_dblquad():
    lik, Y, mu, var = _hetero_case()
    E, g, h = lik.expectations(Y, mu, var)
    c, ref = -0.4, 0.0
    for t in range(2):
        mf, mg = float(mu[0, t]), float(mu[0, 2 + t])
        sf, sg = math.sqrt(float(var[0, t])), math.sqrt(float(var[0, 2 + t]))
        y = float(Y[0, t])

        def integrand(f, gg):  # plain math: scipy.stats per point would take seconds
            logp = -0.5 * (math.log(2 * math.pi) + c + gg) - 0.5 * (y - f) ** 2 * math.exp(-c - gg)
            weight = math.exp(-0.5 * ((f - mf) / sf) ** 2 - 0.5 * ((gg - mg) / sg) ** 2)
            return logp * weight / (2 * math.pi * sf * sg)

        value, _ = scipy.integrate.dblquad(integrand, mg - 10 * sg, mg + 10 * sg,
                                           mf - 10 * sf, mf + 10 * sf, epsabs=1e-11,
                                           epsrel=1e-11)
        ref += value
    assert abs(float(E[0]) - ref) < 1e-8
    # g, h: autograd of the same closed form in the marginals; log-concave: h <= 0
    mu_, var_ = mu.clone().requires_grad_(True), var.clone().requires_grad_(True)
    d_mu, d_var = torch.autograd.grad(lik.expectations(Y, mu_, var_)[0].sum(), (mu_, var_))
    assert torch.allclose(g, d_mu, rtol=1e-13, atol=1e-14)
    assert torch.allclose(h, d_var, rtol=1e-13, atol=1e-14)
    # far above the noise floor log p is concave (h <= 0); near it, not (next tests)
    assert bool((h <= 0).all()) and not lik.log_concave


def _floored_quad(y, mf, vf, mg, vg, c):
    """``E_q[log N(y; f, a + e^(c + g))]`` by quad over ``g`` (``f`` integrated in closed
    form: ``E_f[log N(y; f, s)] = -(log 2 pi s + S / s) / 2``), a break point where
    ``e^(c + g)`` crosses the floor ``a``."""
    S, sg, a = (y - mf) ** 2 + vf, math.sqrt(vg), NOISE_FLOOR

    def integrand(gg):
        s = a + math.exp(c + gg)
        return (-0.5 * (math.log(2 * math.pi * s) + S / s)
                * math.exp(-0.5 * ((gg - mg) / sg) ** 2) / (math.sqrt(2 * math.pi) * sg))

    cross = math.log(a) - c
    value, _ = scipy.integrate.quad(
        integrand, mg - 12 * sg, mg + 12 * sg, epsabs=0, epsrel=1e-13, limit=500,
        points=[cross] if abs(cross - mg) < 12 * sg else None)
    return value


# (y, mu_f, v_f, mu_g, v_g) at c = -20: e^(c + g) within a few sd of the floor 1e-10, the
# residuals at its scale (S / a ~ 1 .. 100), v_g up to 1; the last with h_g > 0
FLOOR_CASES = [(2e-5, 0.0, 1e-10, -3.0, 0.05), (-1e-5, 0.0, 3e-10, -1.0, 0.2),
               (1e-4, 0.0, 0.0, -5.0, 1.0)]


@pytest.mark.parametrize("case", FLOOR_CASES)
def test_heteroscedastic_noise_floor_against_quad(case):
    """Where the noise floor matters, E against quad (1e-9 relative: 20 Gauss-Hermite nodes
    err by <= 2e-11 here) and g, h against central differences of quad (1e-6 relative:
    steps 1e-7, 1e-4 and 1e-11 of scales ~1e-5, 1 and 1e-10)."""
    c = -20.0
    lik = HeteroscedasticGaussian(log_noise_offset=c)
    y, mf, vf, mg, vg = case
    E, g, h = lik.expectations(torch.tensor([[y]], dtype=torch.float64),
                               torch.tensor([[mf, mg]], dtype=torch.float64),
                               torch.tensor([[vf, vg]], dtype=torch.float64))
    ref = _floored_quad(*case, c)
    assert abs(float(E[0]) - ref) <= 1e-9 * abs(ref)
    x = np.array(case)

    def slope(i, step):
        e = np.eye(5)[i] * step
        return (_floored_quad(*(x + e), c) - _floored_quad(*(x - e), c)) / (2 * step)

    refs = [slope(1, 1e-7), slope(3, 1e-4), slope(2, 1e-11), slope(4, 1e-4 * vg)]
    got = [float(g[0, 0]), float(g[0, 1]), float(h[0, 0]), float(h[0, 1])]
    for value, expected in zip(got, refs):
        assert abs(value - expected) <= 1e-6 * abs(expected)
    if case is FLOOR_CASES[-1]:
        assert float(h[0, 1]) > 0  # not log-concave in g near the floor


@pytest.mark.parametrize("S", [0.0, 1e-3])
def test_heteroscedastic_is_finite_far_below_the_floor(S):
    """``c + mu_g = -820``: e^(-(c + g)) overflows, and a noise variance without a floor
    gave E = -inf (S > 0) or NaN (S = 0, a row fitted exactly).  With the floor, the
    noise is a: E = -(log 2 pi a + S / a) / 2, dE/dmu_f = (y - mu_f) / a,
    dE/dv_f = -1 / (2 a), and g's derivatives vanish."""
    lik = HeteroscedasticGaussian(log_noise_offset=-20.0)
    a = NOISE_FLOOR
    Y = torch.tensor([[math.sqrt(S)]], dtype=torch.float64)
    mu = torch.tensor([[0.0, -800.0]], dtype=torch.float64)
    var = torch.tensor([[0.0, 0.01]], dtype=torch.float64)
    E, g, h = lik.expectations(Y, mu, var)
    expected_E = -0.5 * (math.log(2 * math.pi * a) + S / a)
    assert abs(float(E[0]) - expected_E) <= 1e-12 * abs(expected_E)
    expected_g = [math.sqrt(S) / a, 0.0]
    expected_h = [-0.5 / a, 0.0]
    assert np.allclose(g[0].numpy(), expected_g, rtol=1e-12, atol=1e-300)
    assert np.allclose(h[0].numpy(), expected_h, rtol=1e-12, atol=1e-300)
    lpd = lik.log_predictive_density(Y, mu, var)
    assert abs(float(lpd[0]) - (-0.5 * (math.log(2 * math.pi * a) + S / a))) < 1e-9 * (
        1 + abs(expected_E))
    noise = lik.sample_noise(torch.full((1000,), -800.0, dtype=torch.float64),
                             torch.Generator().manual_seed(0))
    assert bool(torch.isfinite(noise).all()) and 0 < float(noise.std()) < 2 * math.sqrt(a)
    assert torch.equal(lik.predictive_moments(mu, var)[1],
                       torch.tensor([[a]], dtype=torch.float64))


def test_heteroscedastic_theta_gradient():
    lik, Y, mu, var = _hetero_case()
    assert torch.autograd.gradcheck(
        lambda th: lik.expectations(Y, mu, var, theta=th)[0],
        (lik.theta.clone().requires_grad_(True),))


def test_heteroscedastic_predictive_and_log_predictive_density():
    lik, Y, mu, var = _hetero_case()
    # a second row: outliers (|y - mu_f| = 30, 12) whose predictive mass lies far out in g,
    # where plain Gauss-Hermite around mu_g errs by nats
    Y = torch.cat([Y, torch.tensor([[30.0, -12.0]], dtype=torch.float64)])
    mu = torch.cat([mu, torch.tensor([[0.0, 0.0, 0.0, 0.5]], dtype=torch.float64)])
    var = torch.cat([var, torch.tensor([[0.1, 0.0, 0.1, 1.0]], dtype=torch.float64)])
    lpd = lik.log_predictive_density(Y, mu, var)
    c = -0.4
    for i in range(2):
        ref = 0.0
        for t in range(2):
            y, mf, vf = float(Y[i, t]), float(mu[i, t]), float(var[i, t])
            mg, sg = float(mu[i, 2 + t]), math.sqrt(float(var[i, 2 + t]))

            def density(gg):  # N(y; mf, vf + a + e^(c + g)) N(g; mg, sg^2)
                s = vf + NOISE_FLOOR + math.exp(c + gg)
                return math.exp(-0.5 * (y - mf) ** 2 / s - 0.5 * ((gg - mg) / sg) ** 2) / (
                    2 * math.pi * math.sqrt(s) * sg)

            mode = math.log(max((y - mf) ** 2, 1e-300)) - c  # where the outlier's mass is
            dens, _ = scipy.integrate.quad(
                density, mg - 14 * sg, mg + 14 * sg, epsabs=0, epsrel=1e-13, limit=500,
                points=[mode] if abs(mode - mg) < 14 * sg else None)
            ref += math.log(dens)
        assert abs(float(lpd[i]) - ref) < 1e-8
    mean, pvar = lik.predictive_moments(mu, var)
    assert torch.equal(mean, mu[:, :2])
    expected = var[:, :2] + (NOISE_FLOOR + torch.exp(-0.4 + mu[:, 2:] + var[:, 2:] / 2))
    assert torch.allclose(pvar, expected, rtol=1e-14, atol=0)


def test_heteroscedastic_noise_draws():
    lik = HeteroscedasticGaussian(log_noise_offset=0.5)
    n = 100_000
    g = torch.linspace(-2.0, 2.0, n, dtype=torch.float64)
    noise = lik.sample_noise(g, torch.Generator().manual_seed(1))
    # standardised by the claimed scale they are chi^2_1 (mean 1, variance 2); a scale that
    # ignored g would leave a mean of E[exp(-g)] = 1.8 here
    z2 = (noise ** 2 / (NOISE_FLOOR + torch.exp(0.5 + g))).numpy()
    assert abs((z2.mean() - 1.0) / math.sqrt(2.0 / n)) < 4.5


@pytest.mark.parametrize("kwargs", [dict(log_noise_offset=float("inf")),
                                    dict(log_noise_offset=100.0), dict(n_quadrature=2.5)])
def test_heteroscedastic_bad_parameters(kwargs):
    with pytest.raises(ValueError, match="must be"):
        HeteroscedasticGaussian(**kwargs)
