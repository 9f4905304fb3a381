"""Expected log-likelihoods of the sparse classifier
(``skgpx.pathwise._likelihoods._classification``).

References are independent: scipy's adaptive quadrature of the defining integrals
(``scipy.integrate.quad``, absolute error ~1e-12 here), autograd through the quadrature
value, mpmath in the probit tail, and the Bernoulli-logit expectation for a two-class
softmax (``log softmax_1(f) = log sigma(f_1 - f_0)`` with ``f_1 - f_0 ~ N(mu_1 - mu_0,
v_0 + v_1)``).  Tolerances:

* Gauss-Hermite with 20 nodes against quad: 1e-8.  The rule is exact for polynomials of
  degree 39; for ``sd <= 2`` the integrands are analytic in a strip of half-width ~pi/sd
  (logit) around the real line, so its error decays like ``exp(-c Q)``: measured <= 1e-10;
* ``dE/dv`` two ways (Price's ``E[t'']/2`` against autograd of the quadrature value): both
  approximate the same integral to the rule's error, 1e-8;
* Monte Carlo: 5 standard errors (a false alarm rate ~6e-7 per check); ``|delta - p| <= 1``
  and ``p (1 - p) <= 1/4`` bound the standard deviations used.
"""

import math

import numpy as np
import pytest
import scipy.integrate
import scipy.special
import scipy.stats
import torch

from skgpx.pathwise._likelihoods._classification import Bernoulli, Gaussian, Softmax

# (mu, var); v = 4 needs more nodes than the default 20 for 1e-8 (the rule's error grows with
# v: ~1e-6 at Q = 20, ~1e-11 at Q = 60; see ``Bernoulli``)
POINTS = [(-2.0, 0.3), (0.0, 1.0), (3.0, 0.01)]
WIDE = (0.7, 4.0)


def _log_p(link, z):
    return -np.logaddexp(0.0, -z) if link == "logit" else scipy.special.log_ndtr(z)


def _quad(fun, mu, var):
    sd = math.sqrt(var)
    density = scipy.stats.norm(mu, sd).pdf if var > 0 else None
    value, _ = scipy.integrate.quad(lambda f: fun(f) * density(f), mu - 12 * sd, mu + 12 * sd,
                                    epsabs=1e-13, epsrel=1e-12, limit=200)
    return value


def _derivatives_numpy(link, z):
    """First and second derivative of log p(z) by central differences of scipy's log p."""
    eps = 1e-4
    first = (_log_p(link, z + eps) - _log_p(link, z - eps)) / (2 * eps)
    second = (_log_p(link, z + eps) - 2 * _log_p(link, z) + _log_p(link, z - eps)) / eps**2
    return first, second


@pytest.mark.parametrize("link", ["logit", "probit"])
@pytest.mark.parametrize("points, n_quadrature", [(POINTS, 20), ([WIDE], 60)])
def test_bernoulli_expectations_against_quad(link, points, n_quadrature):
    lik = Bernoulli(link, n_quadrature=n_quadrature)
    for y in (0.0, 1.0):
        s = 2 * y - 1
        mu = torch.tensor([[p[0]] for p in points], dtype=torch.float64)
        var = torch.tensor([[p[1]] for p in points], dtype=torch.float64)
        E, g, h = lik.expectations(torch.full_like(mu, y), mu, var)
        for i, (m, v) in enumerate(points):
            ref_E = _quad(lambda f: _log_p(link, s * f), m, v)
            assert abs(float(E[i]) - ref_E) < 1e-8
            # closed-form derivatives of log p: logit s sigma(-z), -sigma(z) sigma(-z);
            # probit s r, -r (z + r) with r = phi(z) / Phi(z)
            if link == "logit":
                def d1(f):
                    return s * scipy.special.expit(-s * f)

                def d2(f):
                    return -scipy.special.expit(s * f) * scipy.special.expit(-s * f)
            else:
                def ratio(f):
                    z = s * f
                    return np.exp(-0.5 * z * z - 0.5 * math.log(2 * math.pi)
                                  - scipy.special.log_ndtr(z))

                def d1(f):
                    return s * ratio(f)

                def d2(f):
                    return -ratio(f) * (s * f + ratio(f))
            assert abs(float(g[i, 0]) - _quad(d1, m, v)) < 1e-8
            assert abs(float(h[i, 0]) - 0.5 * _quad(d2, m, v)) < 1e-8


@pytest.mark.parametrize("link", ["logit", "probit"])
def test_bernoulli_derivatives_against_autograd(link):
    lik = Bernoulli(link, n_quadrature=20)
    gen = torch.Generator().manual_seed(0)
    mu = torch.randn(7, 3, generator=gen, dtype=torch.float64).mul_(2).requires_grad_(True)
    var = (torch.rand(7, 3, generator=gen, dtype=torch.float64) + 0.05).requires_grad_(True)
    Y = (torch.rand(7, 3, generator=gen) < 0.5).to(torch.float64)
    E, g, h = lik.expectations(Y, mu, var)
    d_mu, d_var = torch.autograd.grad(E.sum(), [mu, var])
    # d/dmu of the quadrature value is the quadrature of t': identical up to rounding
    torch.testing.assert_close(g, d_mu, rtol=1e-12, atol=1e-14)
    # d/dvar by Price (E[t''] / 2) and by differentiating the nodes' positions agree to
    # the rule's error (v <= 1.05 here: ~1e-11)
    torch.testing.assert_close(h, d_var, rtol=0, atol=1e-8)
    assert bool((h <= 0).all())


@pytest.mark.parametrize("link", ["logit", "probit"])
def test_bernoulli_extreme_latents_are_finite(link):
    lik = Bernoulli(link, n_quadrature=20)
    mu = torch.tensor([[-1e4], [-60.0], [-38.0], [0.0], [45.0], [1e4], [30.0]],
                      dtype=torch.float64)
    var = torch.tensor([[1e-3], [1e-4], [0.0], [1e4], [1e-2], [1e-3], [-1e-18]],
                       dtype=torch.float64)
    for y in (0.0, 1.0):
        E, g, h = lik.expectations(torch.full_like(mu, y), mu, var)
        for t in (E, g, h):
            assert bool(torch.isfinite(t).all())
        assert bool((E <= 0).all()) and bool((h <= 0).all())
        p = lik.predict(mu, var)
        assert bool(torch.isfinite(p).all()) and bool(((p >= 0) & (p <= 1)).all())


def test_probit_tail_curvature_against_mpmath():
    """At z < -40 the curvature -r (z + r) comes from the asymptotic series; mpmath's 50-digit
    Mills ratio is the reference (relative 1e-12), and it joins the direct formula there."""
    import mpmath  # a dependency of sympy, which torch requires
    mpmath.mp.dps = 50
    lik = Bernoulli("probit", n_quadrature=1)  # one node: f = mu exactly
    zs = [-39.0, -41.0, -80.0, -500.0]
    mu = torch.tensor([[z] for z in zs], dtype=torch.float64)
    _, g, h = lik.expectations(torch.ones_like(mu), mu, torch.zeros_like(mu))
    for i, z in enumerate(zs):
        zz = mpmath.mpf(z)
        r = mpmath.npdf(zz) / mpmath.ncdf(zz)
        assert abs(float(g[i, 0]) / float(r) - 1) < 1e-12
        assert abs(2 * float(h[i, 0]) / float(-r * (zz + r)) - 1) < 1e-11


def test_bernoulli_predictive_probability():
    for link in ("logit", "probit"):
        lik = Bernoulli(link, n_quadrature=20)
        mu = torch.tensor([[p[0]] for p in POINTS], dtype=torch.float64)
        var = torch.tensor([[p[1]] for p in POINTS], dtype=torch.float64)
        p = lik.predict(mu, var)
        cdf = scipy.special.expit if link == "logit" else scipy.special.ndtr
        for i, (m, v) in enumerate(POINTS):
            assert abs(float(p[i, 0]) - _quad(cdf, m, v)) < 1e-9


def test_softmax_two_classes_is_the_logit_expectation():
    S = 40_000
    lik = Softmax(n_mc_samples=S, seed=3)
    bern = Bernoulli("logit", n_quadrature=40)
    mu = torch.tensor([[0.3, -0.5], [1.0, 2.0], [-3.0, 1.0]], dtype=torch.float64)
    var = torch.tensor([[0.5, 0.8], [2.0, 0.1], [1.0, 1.0]], dtype=torch.float64)
    Y = torch.tensor([[0.0, 1.0], [1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    E, g, h = lik.expectations(Y, mu, var)
    se = lik.standard_error(Y, mu, var)
    # class 1 against class 0: d = f_1 - f_0 ~ N(mu_1 - mu_0, v_0 + v_1), y_b = Y[:, 1]
    E_b, g_b, h_b = bern.expectations(Y[:, 1:], mu[:, 1:] - mu[:, :1],
                                      var.sum(1, keepdim=True))
    assert bool((se > 0).all())
    assert bool(((E - E_b).abs() <= 5 * se).all())
    bound = 5 * 0.5 / math.sqrt(S / 2)  # pair means of |delta - p| <= 1: sd <= 1/2
    torch.testing.assert_close(g[:, 1], g_b[:, 0], rtol=0, atol=bound)
    torch.testing.assert_close(g[:, 0], -g_b[:, 0], rtol=0, atol=bound)
    # both variances enter through v_0 + v_1: d/dv_0 = d/dv_1 = h_b; p (1 - p) <= 1/4
    for c in (0, 1):
        torch.testing.assert_close(h[:, c], h_b[:, 0], rtol=0, atol=5 * 0.125 / math.sqrt(S / 2))
    p = lik.predict(mu, var)
    torch.testing.assert_close(p.sum(1), torch.ones(3, dtype=torch.float64))
    p_b = bern.predict(mu[:, 1:] - mu[:, :1], var.sum(1, keepdim=True))
    torch.testing.assert_close(p[:, 1], p_b[:, 0], rtol=0, atol=5 * 0.5 / math.sqrt(S / 2))


def test_softmax_is_deterministic_rowwise_and_g_is_its_derivative():
    lik = Softmax(n_mc_samples=64, seed=11)
    gen = torch.Generator().manual_seed(1)
    mu = torch.randn(9, 4, generator=gen, dtype=torch.float64).requires_grad_(True)
    var = torch.rand(9, 4, generator=gen, dtype=torch.float64) + 0.1
    Y = torch.nn.functional.one_hot(torch.arange(9) % 4, 4).to(torch.float64)
    E, g, h = lik.expectations(Y, mu, var)
    (d_mu,) = torch.autograd.grad(E.sum(), [mu])
    torch.testing.assert_close(g, d_mu, rtol=1e-12, atol=1e-14)
    assert bool((h <= 0).all())
    # a subset of rows, in another order, gets the same values (draws shared by rows)
    rows = torch.tensor([5, 2, 7])
    E2, g2, h2 = lik.expectations(Y[rows], mu.detach()[rows], var[rows])
    torch.testing.assert_close(E2, E.detach()[rows], rtol=0, atol=0)
    torch.testing.assert_close(h2, h[rows], rtol=0, atol=0)
    big = torch.full((2, 4), 1e4, dtype=torch.float64)
    big[0, 1] = -1e4
    out = lik.expectations(Y[:2], big, torch.full_like(big, 1e3))
    assert all(bool(torch.isfinite(t).all()) for t in out)


def test_softmax_expectations_equal_the_plain_log_softmax_average():
    """The class-major evaluation (with and without autograd) equals the direct average of
    log_softmax over the same draws, rows by samples by classes, for moderate and for
    extreme latents (1e-12: rounding of sums of 64 terms)."""
    lik = Softmax(n_mc_samples=64, seed=5)
    gen = torch.Generator().manual_seed(2)
    Y = torch.nn.functional.one_hot(torch.arange(12) % 5, 5).to(torch.float64)
    for scale in (1.0, 300.0):
        mu = scale * torch.randn(12, 5, generator=gen, dtype=torch.float64)
        var = scale * torch.rand(12, 5, generator=gen, dtype=torch.float64)
        eps = lik._draws(mu, 5)  # (S, C)
        f = mu[:, None, :] + var.sqrt()[:, None, :] * eps  # (b, S, C)
        log_p = torch.log_softmax(f, dim=2)
        p = log_p.exp()
        ref = ((log_p * Y[:, None, :]).sum(2).mean(1), Y - p.mean(1),
               -0.5 * (p * (1.0 - p)).mean(1))
        for grad in (False, True):
            out = lik.expectations(Y, mu.clone().requires_grad_(grad), var)
            for a, b in zip(out, ref):
                torch.testing.assert_close(a.detach(), b, rtol=1e-12, atol=1e-12 * scale)


def test_gaussian_expectation_closed_form():
    lik = Gaussian(0.3)
    mu = torch.tensor([[0.2], [1.5]], dtype=torch.float64)
    var = torch.tensor([[0.4], [0.01]], dtype=torch.float64)
    Y = torch.tensor([[1.0], [-1.0]], dtype=torch.float64)
    E, g, h = lik.expectations(Y, mu, var)
    for i in range(2):
        ref = _quad(lambda f: scipy.stats.norm(f, math.sqrt(0.3)).logpdf(float(Y[i, 0])),
                    float(mu[i, 0]), float(var[i, 0]))
        assert abs(float(E[i]) - ref) < 1e-9


@pytest.mark.parametrize("var", [2.0, 9.0, 100.0, 1e4])
def test_logit_expectation_is_exact_and_consistent_for_wide_marginals(var):
    # Gauss-Hermite alone is 2e-3 off at v = 25 and 3e-2 at v = 100 (its nodes straddle
    # the kink of log sigma); the split form (_wide_logit) is exact to quadrature error,
    # and g, h are the derivatives of the same sums (L-BFGS-B needs value and gradient
    # of one function)
    from scipy.special import log_expit

    lik = Bernoulli("logit", 20)
    mu = np.array([-12.0, -2.5, 0.0, 0.3, 4.0, 15.0])
    Y = np.array([0.0, 1.0, 1.0, 0.0, 1.0, 0.0])
    t = lambda a: torch.tensor(a, dtype=torch.float64)[:, None]  # noqa: E731
    E, g, h = lik.expectations(t(Y), t(mu), t(np.full(6, var)))
    s = np.sqrt(var)
    for i in range(6):
        sign = 2 * Y[i] - 1
        exact = scipy.integrate.quad(
            lambda f: log_expit(sign * f) * np.exp(-0.5 * (f - mu[i]) ** 2 / var),
            mu[i] - 14 * s, mu[i] + 14 * s, points=[0.0], limit=400,
            epsabs=1e-13)[0] / np.sqrt(2 * np.pi * var)
        # v <= WIDE_VARIANCE keeps 20-point Gauss-Hermite (1e-8 off at v = 2)
        assert abs(float(E[i]) - exact) < (1e-7 if var <= 4.0 else 1e-10)
    step = 1e-6
    for i in range(6):
        def value(m, v):
            return float(lik.expectations(t(Y[i:i + 1]), t([m]), t([v]))[0][0])

        d_mu = (value(mu[i] + step, var) - value(mu[i] - step, var)) / (2 * step)
        d_var = (value(mu[i], var * (1 + step)) - value(mu[i], var * (1 - step))) / (
            2 * step * var)
        # below WIDE_VARIANCE h is Price's E[log p'']/2, which the rule's value matches
        # only to its own error
        tol = 1e-6 if var <= 4.0 else 1e-7
        assert abs(d_mu - float(g[i, 0])) < tol and abs(d_var - float(h[i, 0])) < tol
