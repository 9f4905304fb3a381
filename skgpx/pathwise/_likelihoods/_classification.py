r"""Likelihoods of the sparse variational GP classifier: expectations under Gaussian marginals.

The variational bound needs, for each row ``i`` and latent function ``c``, the expected
log-likelihood under the marginal ``q(f_ic) = N(mu_ic, v_ic)`` and its derivatives

.. math::

    E_i = \mathbb{E}_{q(f_i)}[\log p(y_i \mid f_i)], \qquad
    g_{ic} = \frac{\partial E_i}{\partial \mu_{ic}}
           = \mathbb{E}\Big[\frac{\partial \log p}{\partial f_{ic}}\Big], \qquad
    h_{ic} = \frac{\partial E_i}{\partial v_{ic}}
           = \tfrac12\,\mathbb{E}\Big[\frac{\partial^2 \log p}{\partial f_{ic}^2}\Big],

the last two by Bonnet's and Price's theorems (Opper and Archambeau, Neural Computation
2009).  Every likelihood here is log-concave in ``f``, so ``h <= 0``: the natural-gradient
update of ``q(u)`` (``_svgp``) then keeps its precision positive definite.  The derivatives are
returned in closed form, not by autograd: one pass over the quadrature nodes or Monte-Carlo
draws gives the value and both derivatives.

* :class:`Bernoulli` (one latent per column of 0/1 labels; ``link="logit"`` or
  ``"probit"``): Gauss-Hermite quadrature with ``n_quadrature`` nodes,
  ``E[t(f)] ~ pi^{-1/2} sum_k w_k t(mu + sqrt(2 v) x_k)``.
* :class:`Softmax` (``C`` latents, one-hot labels): Monte Carlo with ``n_mc_samples``
  antithetic draws shared by all rows (:class:`Softmax` says what its error is).
* :class:`Gaussian`: the conjugate case, in closed form, with its noise variance a
  likelihood hyperparameter (``theta = log noise``).

**Protocol** (the SVGP engine, ``_svgp``): ``theta`` (k,) free hyperparameters (unconstrained,
log-type; k = 0 for the classifier's likelihoods), ``bounds`` (k, 2), ``names`` (k),
``log_concave`` (False: natural steps are safeguarded), ``shift_invariant``,
``expectations(Y, mu, var, theta=None)`` with ``E`` differentiable in ``theta`` when it
requires grad (``g``, ``h`` may be detached), and ``with_theta(theta)`` (a copy at another
theta).
"""

import functools
import math

import numpy as np
import torch
import torch.nn.functional as F

from ._quadrature import gauss_hermite

LINKS = ("logit", "probit")
# Below -PROBIT_TAIL the curvature's factor z + r (r = phi(z) / Phi(z), the inverse Mills
# ratio) comes from its asymptotic series: formed directly it cancels to 1/|z| and keeps
# only eps z^2 relative accuracy (2e-13 at |z| = 40 in float64).
PROBIT_TAIL = 40.0
_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


def _log_sigmoid_derivatives(z):
    """``log sigma(z) = -softplus(-z)``, its first and second derivatives in ``z``.

    Stable for every ``|z|``: softplus never overflows, and the derivatives
    ``sigma(-z)`` and ``-sigma(z) sigma(-z)`` stay in [0, 1] and [-1/4, 0].
    """
    value = -F.softplus(-z)
    first = torch.sigmoid(-z)
    second = -torch.sigmoid(z) * first
    return value, first, second


def _log_ndtr_derivatives(z):
    """``log Phi(z)``, ``r = phi(z) / Phi(z)`` and ``-r (z + r)`` (the derivatives).

    ``torch.special.log_ndtr`` is accurate in both tails.  For ``z < 0`` the ratio is
    ``sqrt(2 / pi) / erfcx(-z / sqrt 2)`` (``Phi(z) = erfcx(-z/sqrt 2) exp(-z^2/2) / 2``),
    accurate to rounding; ``exp(log phi - log Phi)`` there would lose ``eps z^2`` of its
    relative accuracy and ``z + r`` then ``eps z^4``.  Below ``-PROBIT_TAIL`` ``z + r`` is
    the series ``1/t - 2/t^3 + 10/t^5 - 74/t^7 + 706/t^9`` (``t = -z``, the reciprocal of
    the Mills ratio's expansion, Abramowitz and Stegun 26.2.12), truncated below 1e-12.
    """
    value = torch.special.log_ndtr(z)
    upper = torch.exp(-0.5 * z * z - _LOG_SQRT_2PI - value)
    lower = math.sqrt(2.0 / math.pi) / torch.special.erfcx(-z.clamp_max(0.0) / math.sqrt(2.0))
    ratio = torch.where(z < 0, lower, upper)
    gap = z + ratio
    t = (-z).clamp_min(PROBIT_TAIL)
    inv = 1.0 / (t * t)
    series = (1.0 + inv * (-2.0 + inv * (10.0 + inv * (-74.0 + 706.0 * inv)))) / t
    tail = z < -PROBIT_TAIL
    gap = torch.where(tail, series, gap)
    ratio = torch.where(tail, t + series, ratio)
    return value, ratio, -(ratio * gap).clamp_min(0.0)


# scikit-learn's erf mixture for the averaged logistic (Williams and Barber, 1998, App. A):
# sigmoid(x) ~ sum_i c_i (1 + erf(lambda_i x)) / 2, the constants of sklearn's _gpc.py
LAMBDAS = (0.41, 0.4, 0.37, 0.44, 0.39)
COEFS = (-1854.8214151, 3516.89893646, 221.29346712, 128.12323805, -2010.49422654)


def positive_probability(mean, var, link):
    """``E[p(y=1 | f)]`` under ``f ~ N(mean, var)``.

    Logit: scikit-learn's mixture of five error functions (GPML Algorithm 3.2, line 7 as
    scikit-learn approximates it), ``sum_i c_i (1 + erf(lambda_i mu / sqrt(1 + 2 lambda_i^2
    var))) / 2``.  Probit: exactly ``Phi(mu / sqrt(1 + var))``.
    """
    if link == "probit":
        return torch.special.ndtr(mean / torch.sqrt(1.0 + var))
    lam = torch.tensor(LAMBDAS, dtype=mean.dtype, device=mean.device).reshape(-1, *[1] * mean.dim())
    coefs = torch.tensor(COEFS, dtype=mean.dtype, device=mean.device).reshape(lam.shape)
    erf = torch.erf(lam * mean / torch.sqrt(1.0 + 2.0 * lam * lam * var))
    return (coefs * erf).sum(0) / 2.0 + float(np.sum(COEFS)) / 2.0


# Gauss-Hermite points of the logit's predictive probability (Bernoulli.predict)
PREDICT_QUADRATURE = 40
# Above this marginal variance the logit's expectations split log sigma (_wide_logit)
WIDE_VARIANCE = 4.0
# ... with Gauss-Legendre points on [0, WIDE_WINDOW] for log1p(exp(-|t|)) (4e-18 beyond)
WIDE_NODES, WIDE_WINDOW = 64, 40.0


@functools.lru_cache(maxsize=4)
def _legendre(n, window):
    x, w = np.polynomial.legendre.leggauss(int(n))
    return 0.5 * window * (x + 1.0), 0.5 * window * w


def _wide_logit(m, v):
    r"""``E[log sigma(t)]`` for ``t ~ N(m, v)`` with its exact derivatives in ``m`` and ``v``,
    accurate for wide marginals, where Gauss-Hermite nodes straddle the kink of
    ``log sigma`` (20 nodes: 2e-3 off at ``v = 25``, 3e-2 at ``v = 100``).

    ``log sigma(t) = min(t, 0) - b(t)`` with ``b(t) = log(1 + exp(-|t|))``:

    .. math::

        E[\min(t, 0)] = -\bigl(-m \Phi(-m/s) + s \phi(m/s)\bigr), \qquad
        E[b(t)] = \int_0^T b(u) \bigl(N(u; m, v) + N(-u; m, v)\bigr) du

    in closed form and by Gauss-Legendre on ``[0, T]`` (``b`` is smooth there and
    ``b(T) = 4e-18``); derivatives of the same sums, so the value and its gradient agree.
    """
    x, w = _legendre(WIDE_NODES, WIDE_WINDOW)
    u = torch.as_tensor(x, dtype=m.dtype, device=m.device)
    weights = torch.as_tensor(w, dtype=m.dtype, device=m.device) * torch.log1p(torch.exp(-u))
    s = v.sqrt()
    normal = torch.distributions.Normal(0.0, 1.0)
    z = m / s
    pdf, cdf_neg = torch.exp(normal.log_prob(z)), torch.special.ndtr(-z)
    kink = -(-m * cdf_neg + s * pdf)  # E[min(t, 0)]
    d_kink_m, d_kink_v = cdf_neg, -pdf / (2.0 * s)
    mm, vv = m[..., None], v[..., None]
    up, down = u - mm, -u - mm  # (t - m) at +u and -u
    dens_up = torch.exp(-0.5 * up * up / vv) / torch.sqrt(2.0 * math.pi * vv)
    dens_down = torch.exp(-0.5 * down * down / vv) / torch.sqrt(2.0 * math.pi * vv)
    bump = (dens_up + dens_down) @ weights
    d_bump_m = (dens_up * up + dens_down * down) @ weights / v
    d_bump_v = (dens_up * (up * up - vv) + dens_down * (down * down - vv)) @ weights / (
        2.0 * v * v)
    return kink - bump, d_kink_m - d_bump_m, d_kink_v - d_bump_v


class _Fixed:
    """The protocol's hyperparameter attributes of a likelihood without any (k = 0)."""

    log_concave = True
    names = ()

    @property
    def theta(self):
        return torch.zeros(0, dtype=torch.float64)

    @property
    def bounds(self):
        return np.zeros((0, 2))

    def with_theta(self, theta):
        if len(theta) != 0:
            raise ValueError(f"{type(self).__name__} has no hyperparameters; got "
                             f"{len(theta)} values.")
        return self


class Bernoulli(_Fixed):
    r"""Bernoulli likelihood ``p(y = 1 | f) = sigma(f)`` (logit) or ``Phi(f)`` (probit).

    Labels are 0/1 per latent column (binary: one column; one-vs-rest: one column per
    class).  With ``s = 2 y - 1`` both links are functions of ``z = s f``
    (``log p = log sigma(z)`` or ``log Phi(z)``), log-concave, so ``h <= 0``.

    Parameters
    ----------
    link : {"logit", "probit"}
    n_quadrature : int
        Gauss-Hermite nodes.  The rule integrates polynomials of degree ``2 Q - 1``
        exactly; ``log p`` is analytic only in a strip around the real axis (the logit's
        poles at ``z = i pi``), so the error grows with the marginal variance.  Measured
        against ``scipy.integrate.quad`` at ``mu = 0.7``: ``Q = 20`` gives 1e-11 for
        ``v = 1``, 1e-6 (logit) and 3e-7 (probit) for ``v = 4``, 1e-3 for ``v = 25``;
        ``Q = 40`` gives 2e-9 / 1e-8 for ``v = 4`` and 2e-5 / 3e-4 for ``v = 25``.
    """

    shift_invariant = False

    def __init__(self, link="logit", n_quadrature=20):
        if link not in LINKS:
            raise ValueError(f"link={link!r} must be one of {LINKS}.")
        self.link, self.n_quadrature = link, int(n_quadrature)

    def _derivatives(self, z):
        if self.link == "logit":
            return _log_sigmoid_derivatives(z)
        return _log_ndtr_derivatives(z)

    def log_likelihood(self, Y, f):
        """``sum_c log p(y_ic | f_ic)`` per row, for ``Y`` and ``f`` of shape (b, L)."""
        return self._derivatives((2.0 * Y - 1.0) * f)[0].sum(1)

    def expectations(self, Y, mu, var, theta=None):
        """``(E, g, h)``: ``E`` (b,) summed over latents; ``g``, ``h`` (b, L) (module doc).

        ``var`` below zero (round-off of ``k_ii - q_ii``) counts as zero.
        """
        nodes, weights = gauss_hermite(self.n_quadrature, mu)
        sign = (2.0 * Y - 1.0)[..., None]
        f = mu[..., None] + var.clamp_min(0.0).sqrt()[..., None] * nodes  # (b, L, Q)
        value, first, second = self._derivatives(sign * f)
        E = value @ weights
        g = sign[..., 0] * (first @ weights)  # d log p / d f = s t'(z)
        h = 0.5 * (second @ weights)  # s^2 = 1
        if self.link == "logit":
            wide = var > WIDE_VARIANCE
            if bool(wide.any()):
                s = sign[..., 0][wide]
                E_w, g_w, h_w = _wide_logit(s * mu[wide], var[wide])
                E, g, h = E.clone(), g.clone(), h.clone()
                E[wide], g[wide], h[wide] = E_w, s * g_w, h_w
        return E.sum(1), g, h

    def predict(self, mu, var):
        """``E_q[p(y = 1 | f)]`` (b, L): ``Phi(mu / sqrt(1 + v))`` (probit, exact), or for
        the logit the better of two approximations: 40-point Gauss-Hermite where
        ``v <= 9`` (error < 5e-6; its nodes straddle the sigmoid's step beyond: 4e-4 at
        ``v = 25``, 1e-2 at ``v = 100``) and scikit-learn's mixture of error functions
        elsewhere (error < 1e-4 there; 4e-4 near ``v = 0``)."""
        var = var.clamp_min(0.0)
        if self.link == "probit":
            return torch.special.ndtr(mu / torch.sqrt(1.0 + var))
        nodes, weights = gauss_hermite(PREDICT_QUADRATURE, mu)
        quadrature = torch.sigmoid(mu[..., None] + var.sqrt()[..., None] * nodes) @ weights
        mixture = positive_probability(mu, var, self.link)
        return torch.where(var <= 9.0, quadrature, mixture).clamp_(0.0, 1.0)


class Softmax(_Fixed):
    r"""Softmax likelihood over ``C`` latents, ``log p(y | f) = f_y - log sum_c exp f_c``.

    The expectations under independent marginals ``f_c ~ N(mu_c, v_c)`` are Monte-Carlo
    averages over ``S = n_mc_samples`` standard normal draws ``eps_s`` (shape ``(S, C)``,
    antithetic: the second half is the negated first), shared by every row and drawn
    once from ``seed``, with ``f_s = mu + sqrt(v) * eps_s``:

    .. math::

        \hat E = \frac1S \sum_s \log \mathrm{softmax}_y(f_s), \quad
        g_c = \frac1S \sum_s (\delta_{yc} - p_{sc}), \quad
        h_c = -\frac1{2S} \sum_s p_{sc} (1 - p_{sc}),

    with ``p_s = softmax(f_s)``: ``g`` is the exact derivative of ``\hat E`` in ``mu``,
    ``h`` Price's estimate of ``dE/dv`` (unbiased, always <= 0, with lower variance than
    the derivative of ``\hat E`` itself, which can be positive).  The estimates are
    deterministic for a given seed and do not depend on which other rows are evaluated.

    **Error.**  The draws are independent across pairs, so a row's ``\hat E`` has standard
    error ``sd(pair means) / sqrt(S / 2)`` (:meth:`standard_error`); the antithetic pairs
    cancel the odd part of ``log softmax`` around ``mu``, which is all of the first-order
    noise.  As the draws are shared, a bound summed over rows has a correlated error, not
    one that averages out: its optimum is that of a fixed, slightly perturbed objective.
    With ``S = 64`` the per-row error is of order ``1e-3`` nats for ``v`` near 1.

    Parameters
    ----------
    n_mc_samples : int
        ``S`` (an odd count is rounded up to keep the pairs).
    seed : int
        Seeds the CPU generator of the draws.
    """

    # log softmax(f + t 1) = log softmax(f): the bound can centre the latents' means
    shift_invariant = True

    def __init__(self, n_mc_samples=64, seed=0):
        half = max(1, (int(n_mc_samples) + 1) // 2)
        self.n_mc_samples, self.seed = 2 * half, int(seed)

    def _draws(self, like, n_classes):
        generator = torch.Generator(device="cpu").manual_seed(self.seed)
        half = torch.randn((self.n_mc_samples // 2, n_classes), generator=generator,
                           dtype=torch.float64)
        return torch.cat([half, -half]).to(dtype=like.dtype, device=like.device)

    def _samples(self, mu, var):
        eps = self._draws(mu, mu.shape[1])
        return mu[:, None, :] + var.clamp_min(0.0).sqrt()[:, None, :] * eps  # (b, S, C)

    def log_likelihood(self, Y, f):
        """``log softmax_y(f)`` per row for one-hot ``Y`` and ``f`` of shape (b, C)."""
        return (Y * torch.log_softmax(f, dim=1)).sum(1)

    def expectations(self, Y, mu, var, theta=None):
        """``(E, g, h)`` for one-hot ``Y`` (b, C): ``E`` (b,), ``g``, ``h`` (b, C).

        The draws are laid out class-major, ``(C, b, S)``: the reductions over the few
        classes are then elementwise operations on whole ``(b, S)`` slices (a reduction
        over a last axis of 10 runs several times slower).  ``E`` uses
        ``f_{sy} = mu_y + sqrt(v_y) eps_{sy}``, so only ``log sum_c exp f_sc`` is formed.
        """
        eps = self._draws(mu, mu.shape[1])  # (S, C)
        sd = var.clamp_min(0.0).sqrt()
        f = torch.addcmul(mu.T[:, :, None], sd.T[:, :, None], eps.T[:, None, :])  # (C, b, S)
        top = f.amax(0)
        if torch.is_grad_enabled() and f.requires_grad:  # autograd: no in-place steps
            f = (f - top).exp()
            total = f.sum(0)
            f = f / total
            log_total = total.log()
            square = f.square()
        else:
            f.sub_(top).exp_()
            total = f.sum(0)  # (b, S)
            f.div_(total)  # p_sc
            log_total = total.log_()
            square = None
        E = (Y * (mu + sd * eps.mean(0))).sum(1) - (log_total + top).mean(1)
        p_mean = f.mean(2).T
        square = f.square_() if square is None else square
        h = -0.5 * (p_mean - square.mean(2).T)
        return E, Y - p_mean, h

    def standard_error(self, Y, mu, var):
        """The Monte-Carlo standard error of each row's ``\\hat E`` (b,) (class docstring)."""
        values = (torch.log_softmax(self._samples(mu, var), dim=2) * Y[:, None, :]).sum(2)
        half = self.n_mc_samples // 2
        pairs = 0.5 * (values[:, :half] + values[:, half:])
        if half < 2:
            return torch.full_like(pairs[:, 0], math.inf)
        return pairs.std(1) / math.sqrt(half)

    def predict(self, mu, var):
        """Class probabilities ``E_q[softmax(f)]`` (b, C), by the same draws; rows sum to 1."""
        return torch.softmax(self._samples(mu, var), dim=2).mean(1)


class Gaussian:
    """``y ~ N(f, noise)``: ``E``, ``g = (y - mu) / noise``, ``h = -1 / (2 noise)`` exactly.

    ``theta = (log noise,)`` within ``log(noise_bounds)``: an SVGP with this likelihood and
    its noise learned reaches the optimum of Titsias' collapsed bound
    (``skgpx._inducing._collapsed``) with the noise as a ``WhiteKernel``.
    """

    shift_invariant = False
    log_concave = True
    names = ("log_noise_variance",)

    def __init__(self, noise, noise_bounds=(1e-6, 1e6)):
        self.noise, self.noise_bounds = float(noise), tuple(noise_bounds)

    @property
    def theta(self):
        return torch.tensor([math.log(self.noise)], dtype=torch.float64)

    @property
    def bounds(self):
        return np.log(np.asarray([self.noise_bounds], dtype=np.float64))

    def with_theta(self, theta):
        return Gaussian(math.exp(float(theta[0])), self.noise_bounds)

    def log_likelihood(self, Y, f):
        return (-0.5 * math.log(2 * math.pi * self.noise)
                - 0.5 * (Y - f) ** 2 / self.noise).sum(1)

    def expectations(self, Y, mu, var, theta=None):
        if theta is None:
            s2 = self.noise
            E = (-0.5 * math.log(2 * math.pi * s2) - 0.5 * ((Y - mu) ** 2 + var) / s2).sum(1)
            return E, (Y - mu) / s2, torch.full_like(mu, -0.5 / s2)
        log_s2 = theta[0]
        inv = torch.exp(-log_s2)
        E = (-0.5 * (math.log(2 * math.pi) + log_s2) - 0.5 * ((Y - mu) ** 2 + var) * inv).sum(1)
        inv = inv.detach()
        return E, (Y - mu) * inv, (-0.5 * inv).expand_as(mu).clone()

    def predict(self, mu, var):
        return mu


__all__ = ["Bernoulli", "COEFS", "Gaussian", "LAMBDAS", "LINKS", "Softmax", "positive_probability"]
