"""Oracles for the deep Q-EP objective terms: the expected log-likelihood l_q
and the two KL terms of the ``bound`` parameter (doc/design_notes.rst, "Deep q-exponential
processes").

References are independent: Gaussian closed forms and ``torch.distributions.kl_divergence`` at
q = 2, numpy/scipy transcriptions of the formulas, and Monte-Carlo expectations of exact
log densities.  Monte-Carlo tolerances are ``K * sd / sqrt(n)`` with ``K = 4`` (two-sided
false-alarm rate 6e-5 per assertion) and ``sd`` estimated from the same ``n`` draws.  Seeds are
explicit.
"""

import math

import numpy as np
import pytest
import torch
from scipy import special

from skgpx.qep import (
    MultivariateQExponential,
    dirichlet_targets,
    expected_log_likelihood,
    kl_authors,
    kl_scaled,
)

DT = torch.float64
K = 4.0
N_DRAWS = 200_000


def exact_kappa(dim, q):
    """kappa_N = E[R^2] / N = 2^(2/q) Gamma(N/2 + 2/q) / (Gamma(N/2) N), via scipy's gammaln."""
    return math.exp((2.0 / q) * math.log(2.0) + special.gammaln(dim / 2.0 + 2.0 / q)
                    - special.gammaln(dim / 2.0)) / dim


def random_unit_params(n_units, m, seed):
    """Whitened variational parameters: mean (D, M), lower-triangular S with positive diagonal."""
    g = torch.Generator().manual_seed(seed)
    mean = 0.5 * torch.randn(n_units, m, generator=g, dtype=DT)
    off = 0.2 * torch.randn(n_units, m, m, generator=g, dtype=DT)
    diag = 0.6 + 0.8 * torch.rand(n_units, m, generator=g, dtype=DT)
    tril = torch.tril(off, diagonal=-1) + torch.diag_embed(diag)
    return mean, tril


def spec_kl_authors(mean, tril, q):
    """KL_auth (``bound="authors"``, the authors' code), transcribed in numpy."""
    mean, tril = mean.detach().numpy(), tril.detach().numpy()
    m = mean.shape[-1]
    t = (mean ** 2).sum(-1) + (tril ** 2).sum((-2, -1))
    logdet = 2.0 * np.log(np.diagonal(tril, axis1=-2, axis2=-1)).sum(-1)
    return (0.5 * (t ** (q / 2) - m ** (q / 2) - logdet)
            - 0.5 * m * (q / 2 - 1) * (np.log(t) - np.log(m)))


def spec_kl_scaled(mean, tril, q):
    """KL_sc (``bound="scaled"``), transcribed in numpy/scipy."""
    mean, tril = mean.detach().numpy(), tril.detach().numpy()
    m = mean.shape[-1]
    kt = exact_kappa(m, q) * ((mean ** 2).sum(-1) + (tril ** 2).sum((-2, -1)))
    logdet = 2.0 * np.log(np.diagonal(tril, axis1=-2, axis2=-1)).sum(-1)
    return (0.5 * kt ** (q / 2) - m / 2 - 0.5 * logdet
            + 0.5 * m * (q / 2 - 1) * ((2 / q) * (special.digamma(m / 2) + np.log(2)) - np.log(kt)))


def spec_ell(y, mu, v, s2, q):
    """The expected log-likelihood l_q, transcribed in numpy."""
    r = ((y - mu) ** 2 + v) / s2
    return (np.log(q / 2) - 0.5 * np.log(2 * np.pi * s2) + 0.5 * (q / 2 - 1) * np.log(r)
            - 0.5 * r ** (q / 2))


# ---------------------------------------------------------------------------------------------
# expected log-likelihood
# ---------------------------------------------------------------------------------------------
def _ell_inputs(seed, shape=(3, 4)):
    g = torch.Generator().manual_seed(seed)
    y = torch.randn(shape, generator=g, dtype=DT)
    mean = torch.randn(shape, generator=g, dtype=DT)
    var = 0.1 + torch.rand(shape, generator=g, dtype=DT)
    noise = 0.2 + torch.rand(shape[-1:], generator=g, dtype=DT)  # per-output, broadcast
    return y, mean, var, noise


@pytest.mark.parametrize("q", [0.5, 1.0, 1.5, 2.0, 3.0])
def test_expected_log_likelihood_formula(q):
    y, mean, var, noise = _ell_inputs(0)
    got = expected_log_likelihood(y, mean, var, noise, q)
    assert got.shape == (3, 4) and got.dtype == DT
    want = spec_ell(y.numpy(), mean.numpy(), var.numpy(), noise.numpy(), q)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("q", [0.5, 1.0, 1.5, 2.0, 3.0])
def test_expected_log_likelihood_zero_variance_is_log_density(q):
    """With v = 0 there is nothing to average: l_q(y; mu, 0, s2) = log q-ED_1(y | mu, s2)."""
    y, mean, _, noise = _ell_inputs(1)
    got = expected_log_likelihood(y, mean, torch.zeros_like(y), noise, q)
    dist = MultivariateQExponential(mean.unsqueeze(-1), scale_tril=noise.sqrt()[:, None, None],
                                    power=q)
    want = dist.log_prob(y.unsqueeze(-1))
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_expected_log_likelihood_q2_gaussian_closed_form():
    """q = 2: E_f[log N(y | f, s2)] = -1/2 log(2 pi s2) - ((y - mu)^2 + v) / (2 s2), exactly."""
    y, mean, var, noise = _ell_inputs(2)
    got = expected_log_likelihood(y, mean, var, noise, 2.0)
    want = -0.5 * torch.log(2 * math.pi * noise) - ((y - mean) ** 2 + var) / (2 * noise)
    torch.testing.assert_close(got, want, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("q", [0.5, 1.0, 1.5, 2.0, 3.0])
def test_expected_log_likelihood_gradcheck(q):
    inputs = tuple(t.clone().requires_grad_() for t in _ell_inputs(3, shape=(2, 3)))
    assert torch.autograd.gradcheck(lambda *a: expected_log_likelihood(*a, q), inputs)


@pytest.mark.parametrize("q", [1.0, 1.5, 2.0, 3.0])
def test_jensen_direction(q):
    """MC average of the exact log q-ED_1(y | f, s2) over f with mean mu and variance exactly v
    (f = mu + sqrt(v) z, z ~ N(0, 1)) lies above l_q for q in {1, 1.5} (phi convex: l_q is a
    lower bound), below it for q = 3 (phi concave: caveat 3), and equals it at q = 2."""
    y, mu, v, s2 = 0.3, -0.2, 0.8, 0.5
    gen = torch.Generator().manual_seed(100 + int(10 * q))
    f = mu + math.sqrt(v) * torch.randn(N_DRAWS, 1, generator=gen, dtype=DT)
    dist = MultivariateQExponential(f, torch.tensor([[s2]], dtype=DT), power=q)
    logp = dist.log_prob(torch.tensor([y], dtype=DT)).numpy()
    mc, se = logp.mean(), logp.std() / math.sqrt(N_DRAWS)
    bound = float(expected_log_likelihood(torch.tensor(y, dtype=DT), torch.tensor(mu, dtype=DT),
                                          torch.tensor(v, dtype=DT), torch.tensor(s2, dtype=DT), q))
    if q < 2:
        assert mc - K * se > bound, (mc, se, bound)
    elif q > 2:
        assert mc + K * se < bound, (mc, se, bound)
    else:
        assert abs(mc - bound) <= K * se


# ---------------------------------------------------------------------------------------------
# KL terms
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("q", [0.5, 1.0, 1.5, 2.0, 3.0])
def test_kl_formulas(q):
    mean, tril = random_unit_params(3, 5, seed=10)
    a = kl_authors(mean, tril, q)
    s = kl_scaled(mean, tril, q)
    assert a.shape == (3,) and s.shape == (3,)
    np.testing.assert_allclose(a.numpy(), spec_kl_authors(mean, tril, q), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(s.numpy(), spec_kl_scaled(mean, tril, q), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("m", [1, 5, 20])
def test_kl_q2_equals_gaussian_kl(m):
    mean, tril = random_unit_params(4, m, seed=20 + m)
    post = torch.distributions.MultivariateNormal(mean, scale_tril=tril)
    prior = torch.distributions.MultivariateNormal(torch.zeros(m, dtype=DT),
                                                   scale_tril=torch.eye(m, dtype=DT))
    want = torch.distributions.kl_divergence(post, prior)
    torch.testing.assert_close(kl_authors(mean, tril, 2.0), want, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(kl_scaled(mean, tril, 2.0), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("q", [0.5, 1.0, 1.5, 2.0, 3.0])
@pytest.mark.parametrize("m", [1, 5, 64])
def test_kl_at_prior(q, m):
    """KL_auth(0, I) = 0.  KL_sc(0, I) >= 0 for q <= 2 (an upper bound on the true KL, which is 0),
    = 0 at q = 2, > 0 strictly for q < 2 and M > 1 (Jensen is strict on a non-degenerate r)."""
    mean = torch.zeros(2, m, dtype=DT)
    tril = torch.eye(m, dtype=DT).expand(2, m, m)
    torch.testing.assert_close(kl_authors(mean, tril, q), torch.zeros(2, dtype=DT),
                               rtol=0, atol=1e-10 * max(1.0, m ** (q / 2)))
    ks = kl_scaled(mean, tril, q)
    if q == 2.0:
        torch.testing.assert_close(ks, torch.zeros(2, dtype=DT), rtol=0, atol=1e-12)
    elif q < 2.0:
        assert (ks > 0).all()


@pytest.mark.parametrize("q", [0.5, 1.0, 1.5, 2.0, 3.0])
@pytest.mark.parametrize("kl", [kl_authors, kl_scaled], ids=["authors", "scaled"])
def test_kl_gradcheck(q, kl):
    mean, tril = random_unit_params(2, 3, seed=30)
    mean.requires_grad_()
    tril.requires_grad_()
    assert torch.autograd.gradcheck(lambda m_, s_: kl(m_, torch.tril(s_), q), (mean, tril))


@pytest.mark.parametrize("q", [1.0, 1.5, 2.0])
def test_kl_scaled_bounds_monte_carlo_kl(q):
    """Exact KL(q-ED*(m, SS^T) || q-ED*(0, I)) by Monte Carlo, M = 5: mean over posterior draws
    of log p_post - log p_prior.  KL_sc is an upper bound for q <= 2 (assert it is not below the
    estimate by more than K standard errors), and equals the KL at q = 2 (two-sided).  At q = 1
    the bound is loose (2.33 vs 1.15 measured): assert the gap exceeds the MC error, so that a
    KL_sc formula collapsing onto the exact KL would be noticed too."""
    m = 5
    mean, tril = random_unit_params(1, m, seed=40)
    mean, tril = mean[0], tril[0]
    post = MultivariateQExponential(mean, scale_tril=tril, power=q, scaled=True)
    prior = MultivariateQExponential(torch.zeros(m, dtype=DT), scale_tril=torch.eye(m, dtype=DT),
                                     power=q, scaled=True)
    x = post.sample((N_DRAWS,), generator=torch.Generator().manual_seed(41 + int(10 * q)))
    ratio = (post.log_prob(x) - prior.log_prob(x)).numpy()
    assert np.isfinite(ratio).all()
    mc, se = ratio.mean(), ratio.std() / math.sqrt(N_DRAWS)
    bound = float(kl_scaled(mean, tril, q))
    assert bound >= mc - K * se, (bound, mc, se)
    if q == 2.0:
        assert abs(bound - mc) <= K * se
    if q == 1.0:
        assert bound > mc + K * se, (bound, mc, se)


# ---------------------------------------------------------------------------------------------
# Dirichlet classification targets
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_dirichlet_targets(dtype):
    labels = torch.tensor([0, 2, 1, 2, 0, 3])
    n_classes, eps = 4, 0.01
    targets, noise = dirichlet_targets(labels, n_classes, eps, dtype=dtype)
    assert targets.shape == noise.shape == (6, 4)
    assert targets.dtype == noise.dtype == dtype

    alpha = np.full((6, 4), eps)
    for i, c in enumerate(labels.tolist()):
        alpha[i, c] += 1.0
    want_noise = np.log(1.0 / alpha + 1.0)
    want_targets = np.log(alpha) - want_noise / 2.0
    tol = 1e-12 if dtype == torch.float64 else 1e-6
    np.testing.assert_allclose(noise.numpy(), want_noise, rtol=tol, atol=tol)
    np.testing.assert_allclose(targets.numpy(), want_targets, rtol=tol, atol=tol)
    # the matched log-normal has mean alpha: exp(target + noise / 2) = alpha
    np.testing.assert_allclose(np.exp(want_targets + want_noise / 2), alpha, rtol=1e-12)
