"""The SVGP engine's latent groups, likelihood hyperparameters and safeguarded natural
steps (``skgpx.pathwise._svgp``: ``_bound``, ``_engine``, ``_inner``): the engine that the
Student-t and heteroscedastic regressions run on.

Oracles: Titsias' collapsed bound (``_sgpr._bound.elbo_value_and_grad``, an SGPR with the noise
as a WhiteKernel) for a Gaussian likelihood whose noise is learned; torch autograd through
a dense implementation of the two-group bound written here; the stationarity conditions
of the bound in ``q`` (``m = A g``, ``Lambda = I - 2 A diag(h) A^T``) for a Student-t
likelihood that is not log-concave, from Gauss-Hermite quadrature written here.
"""

import math
import warnings

import numpy as np
import pytest
import torch
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process.kernels import RBF, ConstantKernel, DotProduct, WhiteKernel

from skgpx.kernels import TorchKernel
from skgpx.linalg import NotPositiveDefiniteError
from skgpx.pathwise._likelihoods._classification import Gaussian
from skgpx._inducing._rows import Rows
from skgpx.pathwise._sgpr._bound import elbo_value_and_grad
from skgpx.pathwise._svgp._bound import Groups, WhitenedQ, evaluate
from skgpx.pathwise._svgp._engine import SVGPEngine

DT = torch.float64
JITTER = 1e-8


def _regression(n=60, m=12, seed=0, T=1):
    rng = np.random.RandomState(seed)
    X = rng.uniform(-2, 2, size=(n, 2))
    f = np.sin(2 * X[:, :1]) + 0.5 * X[:, 1:2]
    Y = f + (0.1 + 0.2 * np.abs(X[:, :1])) * rng.randn(n, T)
    Z = X[rng.choice(n, m, replace=False)]
    t = lambda a: torch.tensor(a, dtype=DT)  # noqa: E731
    return Rows(t(X), t(Y), torch.zeros(n, dtype=DT)), t(Z)


def _finite_difference(F, x, h):
    out = np.empty_like(x)
    for i in range(len(x)):
        e = np.zeros_like(x)
        e[i] = h
        out[i] = (F(x + e) - F(x - e)) / (2 * h)
    return out


# ---------------------------------------------------------------- (a) Gaussian = SGPR
def test_gaussian_likelihood_with_learned_noise_reaches_the_collapsed_bound():
    """An SVGP with a Gaussian likelihood whose log noise variance is a likelihood
    hyperparameter, fitted by the L-BFGS-B route (q optimal at each evaluation): its bound
    equals Titsias' collapsed bound of an SGPR with the noise as a WhiteKernel at the
    fitted theta, Z and noise (1e-8 relative: the optimal q of a Gaussian likelihood is
    one natural step, and both bounds are the same number), and the fitted point is
    stationary for the collapsed bound (its gradient in (theta, log noise, Z) per row
    below 1e-4: L-BFGS-B's projected-gradient test is 1e-6 per row; a wrong likelihood
    gradient would stop it elsewhere)."""
    rows, Z = _regression()
    n = rows.X.shape[0]
    mode = SVGPEngine(ConstantKernel(1.0) * RBF([1.0, 1.0]), Gaussian(0.3),
                      optimizer="fmin_l_bfgs_b", max_iter=200, tol=None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        mode.fit(rows, Z, np.random.RandomState(0))
    noise = mode.likelihood_.noise
    assert noise != 0.3 and isinstance(mode.likelihood_, Gaussian)
    sgpr = TorchKernel(mode.kernel_ + WhiteKernel(noise))
    x = torch.cat([mode.theta, torch.tensor([math.log(noise)], dtype=DT)])
    value, grad_theta, grad_Z = elbo_value_and_grad(sgpr, x, mode.Z, rows, jitter=JITTER,
                                                    batch_size=8192, grad_Z=True)
    assert abs(mode.elbo - value) <= 1e-8 * abs(value)
    assert float(grad_theta.abs().max()) / n <= 1e-4
    assert float(grad_Z.abs().max()) / n <= 1e-4


def test_likelihood_gradient_is_the_envelope_gradient_of_the_collapsed_bound():
    """At the optimal q the bound's gradient in the likelihood's theta (log noise) equals
    central differences of the collapsed bound (q re-optimised at each noise: the
    envelope theorem) and of the bound at that fixed q, to 1e-6 relative (h = 1e-4:
    truncation ~h^2 times the third derivative)."""
    rows, Z = _regression(seed=3)
    kernel = TorchKernel(ConstantKernel(1.3) * RBF([0.8, 1.5]))
    theta = kernel.theta_tensor()
    lik = Gaussian(0.05)
    q = WhitenedQ.prior(Z.shape[0], 1, DT, "cpu")
    ev = evaluate(kernel, theta, Z, q, rows, lik, jitter=JITTER, batch_size=7)
    q = q.natural_step(ev.sums, 1.0, 1.0)  # the optimal q of a Gaussian likelihood
    ev = evaluate(kernel, theta, Z, q, rows, lik, jitter=JITTER, batch_size=7, want_grad=True)
    sgpr = ConstantKernel(1.3) * RBF([0.8, 1.5]) + WhiteKernel(0.05)
    theta_sgpr = TorchKernel(sgpr).theta_tensor()

    def collapsed(log_noise):
        x = theta_sgpr.clone()
        x[-1] = float(log_noise[0])
        return elbo_value_and_grad(TorchKernel(sgpr), x, Z, rows, jitter=JITTER,
                                   batch_size=7, grad_theta=False)[0]

    def fixed_q(log_noise):
        return evaluate(kernel, theta, Z, q, rows, lik.with_theta(log_noise), jitter=JITTER,
                        batch_size=7).elbo

    x0 = np.array([math.log(0.05)])
    assert abs(ev.elbo - collapsed(x0)) <= 1e-10 * abs(ev.elbo)
    for F in (collapsed, fixed_q):
        fd = _finite_difference(F, x0, h=1e-4)
        np.testing.assert_allclose(ev.grad_lik.numpy(), fd, rtol=1e-6)


# ---------------------------------------------------------------- (b) two groups
class _Heteroscedastic:
    """y ~ N(f, exp(c + g)) with latents [f_1..f_T, g_1..g_T] and theta = (c,): the
    closed forms of the design note (a test double of the regression likelihood)."""

    shift_invariant, log_concave, names = False, True, ("c",)

    def __init__(self, c=-1.0):
        self.c = float(c)

    @property
    def theta(self):
        return torch.tensor([self.c], dtype=DT)

    @property
    def bounds(self):
        return np.array([[-10.0, 10.0]])

    def with_theta(self, theta):
        return _Heteroscedastic(float(theta[0]))

    def expectations(self, Y, mu, var, theta=None):
        c = self.theta if theta is None else theta
        T = Y.shape[1]
        mf, vf, mg, vg = mu[:, :T], var[:, :T], mu[:, T:], var[:, T:]
        w = torch.exp(-(c + mg) + vg / 2)
        r2 = (Y - mf) ** 2 + vf
        E = -0.5 * math.log(2 * math.pi) - 0.5 * (c + mg) - 0.5 * r2 * w
        g = torch.cat([(Y - mf) * w, -0.5 + 0.5 * r2 * w], 1).detach()
        h = torch.cat([-0.5 * w, -0.25 * r2 * w], 1).detach()
        return E.sum(1), g, h


def _dense_bound(kernels, thetas, Zs, sizes, q, X, Y, c):
    """The two-group bound with dense torch matrices: each group's
    ``L_z = chol(K_zz + jitter mean(diag K_zz) I)``, ``A = L_z^{-1} K_zx``, the marginals
    of whitened q, the closed-form expected log-likelihood and the KL."""
    mus, vars_ = [], []
    start = 0
    for kernel, theta, Z, size in zip(kernels, thetas, Zs, sizes):
        Kzz = kernel(Z, theta=theta, part="signal")
        Kzz = Kzz + JITTER * Kzz.diagonal().mean() * torch.eye(len(Z), dtype=DT)
        A = torch.linalg.solve_triangular(torch.linalg.cholesky(Kzz),
                                          kernel(Z, X, theta=theta, part="signal"),
                                          upper=False)
        cols = slice(start, start + size)
        mus.append(A.T @ q.mean[:, cols])
        excess = q.covariance[cols] - torch.eye(len(Z), dtype=DT)
        vars_.append(kernel.diag(X, theta, part="full")[:, None]
                     + torch.einsum("mi,lmk,ki->il", A, excess, A))
        start += size
    mu, var = torch.cat(mus, 1), torch.cat(vars_, 1)
    T = Y.shape[1]
    w = torch.exp(-(c + mu[:, T:]) + var[:, T:] / 2)
    E = (-0.5 * math.log(2 * math.pi) - 0.5 * (c + mu[:, T:])
         - 0.5 * ((Y - mu[:, :T]) ** 2 + var[:, :T]) * w).sum()
    return E - q.kl()


@pytest.mark.parametrize("share", [True, False])
@pytest.mark.parametrize("want_H", [True, False])
def test_two_groups_gradient_equals_autograd_of_a_dense_bound(share, want_H):
    """Two latent groups (f: an ARD RBF, its gradient in closed form; g: RBF + DotProduct,
    by autograd) with T = 2 targets, shared Z or one Z per group: the bound and its
    gradient at fixed q in (theta_f, theta_g, the likelihood's c, Z) equal torch autograd
    through :func:`_dense_bound` (1e-8 of the gradient's scale), over several row chunks,
    with H formed or G_A A^T summed."""
    rows, Z = _regression(n=30, m=6, seed=5, T=2)
    sk = [ConstantKernel(1.2) * RBF([0.7, 1.4]),
          ConstantKernel(0.5) * RBF(1.1) + DotProduct(0.3)]
    kernels = [TorchKernel(k) for k in sk]
    groups = Groups(kernels, [2, 2], share_inducing=share)
    theta = torch.cat([k.theta_tensor() for k in kernels])
    Zp = Z.clone() if share else torch.stack([Z, Z + 0.1])
    gen = torch.Generator().manual_seed(2)
    B = 0.3 * torch.randn(4, 6, 6, generator=gen, dtype=DT)
    q = WhitenedQ.from_moments(torch.randn(6, 4, generator=gen, dtype=DT),
                               B @ B.transpose(1, 2) + 0.2 * torch.eye(6, dtype=DT))
    lik = _Heteroscedastic(-0.7)
    ev = evaluate(groups, theta, Zp, q, rows, lik, jitter=JITTER, batch_size=7,
                  want_grad=True, want_H=want_H)

    theta_ = theta.clone().requires_grad_(True)
    Z_ = Zp.clone().requires_grad_(True)
    c_ = lik.theta.clone().requires_grad_(True)
    Zs = [Z_, Z_] if share else [Z_[0], Z_[1]]
    thetas = [theta_[s] for s in groups.thetas]
    dense = _dense_bound(kernels, thetas, Zs, [2, 2], q, rows.X, rows.Y, c_)
    dense.backward()
    value = float(dense.detach())
    assert abs(ev.elbo - value) <= 1e-10 * abs(value)
    scale = float(theta_.grad.abs().max() + Z_.grad.abs().max() + c_.grad.abs().max())
    for ours, ref in ((ev.grad_theta, theta_.grad), (ev.grad_lik, c_.grad),
                      (ev.grad_Z, Z_.grad)):
        assert ours.shape == ref.shape
        np.testing.assert_allclose(ours.numpy(), ref.numpy(), rtol=0, atol=1e-8 * scale)


@pytest.mark.parametrize("optimizer", ["adam", "fmin_l_bfgs_b"])
def test_two_group_fit_learns_the_likelihood_theta_and_predicts_every_latent(optimizer):
    """A two-group fit (separate Z) raises its bound, moves the likelihood's theta, keeps
    the groups' thetas apart, returns all 2T latents from latent_mean_and_variance, and
    each group's posterior draws through its own kernel, Z and L_z: the draws' mean
    at the inducing inputs converges to the latent means (4 sd of S = 4000 draws)."""
    rows, Z = _regression(n=50, m=8, seed=1)
    mode = SVGPEngine(ConstantKernel(1.0) * RBF(1.0), _Heteroscedastic(0.0),
                      optimizer=optimizer, max_iter=15, learning_rate=0.05,
                      natgrad_step=0.5, minibatch_size=25,
                      groups=[(None, 1), (ConstantKernel(0.5) * RBF(2.0), 1)],
                      share_inducing=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        mode.fit(rows, Z, np.random.RandomState(0))
    assert mode.elbo > mode.history[0] and mode.likelihood_.c != 0.0
    assert len(mode.thetas) == 2 and mode.Z_packed.shape == (2, 8, 2)
    assert not torch.equal(mode.Zs[0], mode.Zs[1])  # each group's Z moved on its own
    mean, var = mode.latent_mean_and_variance(rows.X[:5])
    assert mean.shape == var.shape == (5, 2)
    for g in (0, 1):
        post = mode.posterior(torch.zeros(2, dtype=DT), 2, group=g)
        assert post.kernel is mode.torch_kernels[g] and post.centers is mode.Zs[g]
        np.testing.assert_array_equal(post._mean.numpy(), mode.q.mean[:, g:g + 1].numpy())


# ---------------------------------------------------------------- (d) not log-concave
class _StudentT:
    """Student-t ``y ~ f + sigma t_nu`` by Gauss-Hermite (a test double): ``h > 0`` where
    the residual is moderate beside the marginal's spread (not log-concave).  ``g`` and
    ``h`` are the exact derivatives of the quadrature ``E`` (``h = sum_k w_k
    (d log p / df)(f_k) x_k / (2 sqrt v)``): the natural step is then an ascent direction
    of the very bound that is evaluated."""

    shift_invariant, log_concave, names = False, False, ()
    theta, bounds = torch.zeros(0, dtype=DT), np.zeros((0, 2))

    def __init__(self, df=4.0, scale=0.3, n_quadrature=40):
        self.df, self.scale = df, scale
        x, w = np.polynomial.hermite.hermgauss(n_quadrature)
        self.nodes = torch.tensor(math.sqrt(2) * x, dtype=DT)
        self.weights = torch.tensor(w / math.sqrt(math.pi), dtype=DT)

    def with_theta(self, theta):
        return self

    def expectations(self, Y, mu, var, theta=None):
        nu, s2 = self.df, self.scale ** 2
        sd = var.clamp_min(1e-300).sqrt()[..., None]
        r = Y[..., None] - (mu[..., None] + sd * self.nodes)
        u = nu * s2 + r * r
        logp = (math.lgamma((nu + 1) / 2) - math.lgamma(nu / 2) - 0.5 * math.log(
            math.pi * nu * s2) - 0.5 * (nu + 1) * torch.log(u / (nu * s2)))
        d1 = (nu + 1) * r / u  # d log p / d f
        h = (d1 * self.nodes / (2.0 * sd)) @ self.weights
        return (logp @ self.weights).sum(1), d1 @ self.weights, h


def _outliers(n=40):
    rng = np.random.RandomState(4)
    X = np.sort(rng.uniform(0, 6, n))[:, None]
    Y = np.sin(X) + 0.02 * rng.randn(n, 1)
    Y[::5] += 1.0  # ~ sqrt(3 nu) sigma: the residual of the largest positive curvature
    t = lambda a: torch.tensor(a, dtype=DT)  # noqa: E731
    return Rows(t(X), t(Y), torch.zeros(n, dtype=DT)), t(X[::2])


def test_natural_step_with_positive_curvature_is_halved_until_it_factorises():
    """Next to a q fitted to the clean function by a Gaussian likelihood (small marginal
    variances), targets shifted by ~sqrt(3 nu) sigma have h > 0 at every row: I - 2 H is
    indefinite and the full natural step does not factorise (before the fix H dropped
    the positive h and the step went through, to a wrong fixed point); the mode's step
    is the one of the largest gamma = 2^-k that factorises."""
    rows, Z = _outliers()
    kernel = TorchKernel(ConstantKernel(1.0) * RBF(1.0))
    theta = kernel.theta_tensor()
    q = WhitenedQ.prior(Z.shape[0], 1, DT, "cpu")
    clean = Rows(rows.X, torch.sin(rows.X), rows.alpha)
    q = q.natural_step(evaluate(kernel, theta, Z, q, clean, Gaussian(0.01), jitter=JITTER,
                                batch_size=64).sums, 1.0, 1.0)
    shifted = Rows(rows.X, torch.sin(rows.X) + 1.0, rows.alpha)
    lik = _StudentT()
    ev = evaluate(kernel, theta, Z, q, shifted, lik, jitter=JITTER, batch_size=64)
    _, _, h = lik.expectations(shifted.Y, *_marginals(kernel, theta, Z, q, rows.X))
    assert float(h.min()) > 0.1
    with pytest.raises(NotPositiveDefiniteError):
        q.natural_step(ev.sums, 1.0, 1.0)
    mode = SVGPEngine(ConstantKernel(1.0) * RBF(1.0), lik)
    mode.q = q
    stepped = mode._safe_step(ev.sums, 1.0, 1.0)
    gamma = 0.5
    while True:
        try:
            expected = q.natural_step(ev.sums, 1.0, gamma)
            break
        except NotPositiveDefiniteError:
            gamma *= 0.5
    np.testing.assert_array_equal(stepped.precision.numpy(), expected.precision.numpy())


def _marginals(kernel, theta, Z, q, X):
    Kzz = kernel(Z, theta=theta, part="signal")
    eye = torch.eye(len(Z), dtype=DT)
    L = torch.linalg.cholesky(Kzz + JITTER * Kzz.diagonal().mean() * eye)
    A = torch.linalg.solve_triangular(L, kernel(Z, X, theta=theta, part="signal"),
                                      upper=False)
    var = kernel.diag(X, theta) + ((q.covariance[0] - torch.eye(len(Z), dtype=DT)) @ A
                                   * A).sum(0)
    return A.T @ q.mean, var[:, None]


@pytest.mark.parametrize("inner", ["cached", "full"])
def test_fit_with_a_likelihood_that_is_not_log_concave_reaches_the_stationary_q(inner):
    """With a Student-t likelihood and the kernel fixed (optimizer=None), the fitted q is
    stationary for the bound: m = A g and Lambda = I - 2 A diag(h) A^T with g and h of
    the quadrature here (the positive h included: a curvature that drops them stops at
    another q), to 1e-4 of Lambda's scale."""
    rows, Z = _outliers()
    mode = SVGPEngine(ConstantKernel(1.0) * RBF(1.0), _StudentT(), optimizer=None,
                      inner=inner, inner_tol=None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        mode.fit(rows, Z, np.random.RandomState(0))
    kernel, q = mode.torch_kernel, mode.q
    mu, var = _marginals(kernel, mode.theta, Z, q, rows.X)
    _, g, h = mode.likelihood.expectations(rows.Y, mu, var)
    Kzz = kernel(Z, theta=mode.theta, part="signal")
    eye = torch.eye(len(Z), dtype=DT)
    L = torch.linalg.cholesky(Kzz + JITTER * Kzz.diagonal().mean() * eye)
    A = torch.linalg.solve_triangular(L, kernel(Z, rows.X, theta=mode.theta, part="signal"),
                                      upper=False)
    assert float(h.max()) > 0.01  # some rows' curvature is positive at the optimum
    target = torch.eye(len(Z), dtype=DT) - 2.0 * (A * h[:, 0]) @ A.T
    scale = float(target.abs().max())
    np.testing.assert_allclose(q.precision[0].numpy(), target.numpy(), rtol=0,
                               atol=1e-4 * scale)
    np.testing.assert_allclose(q.mean.numpy(), (A @ g).numpy(), rtol=0, atol=1e-4)


def test_adam_route_halves_the_steps_that_do_not_factorise(monkeypatch):
    """Mini-batches of 20 of the 40 rows scale H by 2 and gamma = 1 after the warm-up: some
    natural steps of the Student-t are indefinite (counted by a spy on ``_step``); each is
    retried at half the size, so the fit runs its epochs to a finite bound instead of
    raising (before the fix no step failed: H dropped the positive curvature)."""
    rows, Z = _outliers()
    failures = []
    step = SVGPEngine._step

    def spy(self, *args):
        try:
            return step(self, *args)
        except NotPositiveDefiniteError:
            failures.append(args[2])
            raise

    monkeypatch.setattr(SVGPEngine, "_step", spy)
    mode = SVGPEngine(ConstantKernel(1.0) * RBF(1.0), _StudentT(), optimizer="adam",
                      natgrad_step=1.0, minibatch_size=20, max_iter=5, tol=None)
    mode.fit(rows, Z, np.random.RandomState(0))
    assert len(failures) > 0 and mode.n_iter == 5
    assert np.isfinite(mode.elbo) and np.all(np.isfinite(mode.history))
