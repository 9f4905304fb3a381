"""The whitened SVGP classification engine (``skgpx.pathwise._svgp._bound``, ``_svgp._engine``).

References: dense whitened formulas on scikit-learn kernel objects written here with numpy
(marginals, bound), scikit-learn's / skgpx's SGPR optimum (``_sgpr._posterior.fit_factors``:
Titsias' collapsed q(u) and bound, which share no code with the natural step), central finite
differences, and scipy's L-BFGS-B on the bound in the moment parameters.  Tolerances:

* identities between chunkings and against dense numpy: 1e-10 relative (float64 round-off
  of sums over <= 60 rows with cond(Kzz) <= 1e3 at the fixed Z);
* the Gaussian natural step against Titsias' optimum: 1e-8 (the two solve the same normal
  equations through different factorizations);
* finite differences: step 1e-6 in log theta and in Z, truncation h^2 f''' / 6 ~ 1e-12 and
  round-off eps |f| / h ~ 1e-9 for |f| ~ 30: 1e-6 relative to the gradient's norm;
* natural gradients against a generic optimiser: both stop at the optimum within their own
  tolerance (L-BFGS-B's gtol 1e-10 on ~44 parameters): 1e-5 on m and S.
"""

import warnings

import numpy as np
import pytest
import scipy.optimize
import torch
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process.kernels import (RBF, ConstantKernel, DotProduct, Matern,
                                              RationalQuadratic, WhiteKernel)

from skgpx.kernels import TorchKernel, split_white_noise
from skgpx.pathwise._likelihoods._classification import Bernoulli, Gaussian, Softmax
from skgpx._inducing._rows import Rows
from skgpx.pathwise._sgpr._posterior import fit_factors
from skgpx._inducing._collapsed import inducing_cholesky, whitening
from skgpx.pathwise._draws._posterior import draw_exact
from skgpx.pathwise._svgp._bound import WhitenedQ, evaluate, marginals
from skgpx.pathwise._svgp._engine import PLATEAU_WINDOW, SVGPEngine

from .._oracles import COV_Z_MAX, MEAN_Z_MAX, moment_z_scores

JITTER = 1e-8
DT = torch.float64


def _data(n=40, d=2, m=8, n_latent=1, seed=0, classes=False):
    rng = np.random.RandomState(seed)
    X = rng.uniform(-2, 2, size=(n, d))
    Z = X[rng.choice(n, m, replace=False)] + 0.05 * rng.randn(m, d)
    f = np.sin(2 * X[:, :1]) + 0.5 * X[:, 1:2]
    if classes:
        if n_latent > 1:
            Y = np.eye(n_latent)[rng.randint(n_latent, size=n)]
        else:
            Y = (f > 0).astype(float)
    else:
        Y = f + 0.1 * rng.randn(n, 1)
    t = lambda a: torch.tensor(a, dtype=DT)  # noqa: E731
    return t(X), t(np.asarray(Y, dtype=float)), t(Z)


def _random_q(m, n_latent, seed=1):
    gen = torch.Generator().manual_seed(seed)
    mean = torch.randn(m, n_latent, generator=gen, dtype=DT)
    B = 0.3 * torch.randn(n_latent, m, m, generator=gen, dtype=DT)
    cov = B @ B.transpose(1, 2) + 0.2 * torch.eye(m, dtype=DT)
    return WhitenedQ.from_moments(mean, cov)


def _dense_reference(kernel, X, Y, Z, q, likelihood):
    """The bound and the marginals with explicit numpy matrices (sklearn kernel objects).

    A top-level WhiteKernel is latent noise at each row, not part of u = f(Z): the inducing
    covariances use the signal, the prior variance k(x, x) the whole kernel."""
    signal, _ = split_white_noise(kernel)
    Xn, Zn = X.numpy(), Z.numpy()
    Kzz = signal(Zn)
    Kzz = Kzz + JITTER * np.mean(np.diag(Kzz)) * np.eye(len(Zn))
    Lz = np.linalg.cholesky(Kzz)
    A = np.linalg.solve(Lz, signal(Zn, Xn))
    mean, cov = q.mean.numpy(), q.covariance.numpy()
    mu = A.T @ mean
    var = np.stack([kernel.diag(Xn) - (A * A).sum(0) + (A * (S @ A)).sum(0)
                    for S in cov], 1)
    E, _, _ = likelihood.expectations(Y, torch.tensor(mu), torch.tensor(var))
    m = len(Zn)
    kl = sum(0.5 * (np.trace(S) + mean[:, c] @ mean[:, c] - m - np.linalg.slogdet(S)[1])
             for c, S in enumerate(cov))
    return float(E.sum()) - kl, mu, var


KERNELS = {
    "rbf": ConstantKernel(1.3) * RBF([0.8, 1.4]),
    "matern52": ConstantKernel(0.7) * Matern(1.1, nu=2.5),
    "rbf+white": ConstantKernel(1.3) * RBF(0.9) + WhiteKernel(0.05),
    "rq": RationalQuadratic(0.9, 1.5),  # no fast cross-kernel: autograd route
}


@pytest.mark.parametrize("name", list(KERNELS))
def test_bound_and_marginals_against_dense_numpy(name):
    sk = KERNELS[name]
    X, Y, Z = _data(classes=True)
    tk = TorchKernel(sk)
    theta = tk.theta_tensor()
    q = _random_q(Z.shape[0], 1)
    lik = Bernoulli("logit")
    ref_elbo, ref_mu, ref_var = _dense_reference(sk, X, Y, Z, q, lik)
    for batch_size in (7, 1000):  # 6 chunks and one
        ev = evaluate(tk, theta, Z, q, Rows(X, Y, torch.zeros(len(X), dtype=DT)), lik,
                      jitter=JITTER, batch_size=batch_size)
        assert abs(ev.elbo - ref_elbo) <= 1e-10 * abs(ref_elbo)
    L, _ = inducing_cholesky(tk, theta, Z, JITTER)
    mu, var = marginals(tk, theta, Z, whitening(L), q, X, batch_size=7)
    np.testing.assert_allclose(mu.numpy(), ref_mu, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(var.numpy(), ref_var, rtol=1e-10, atol=1e-12)


def _finite_difference(fun, x, h=1e-6):
    grad = np.zeros_like(x)
    for j in range(x.size):
        e = np.zeros_like(x)
        e.flat[j] = h
        grad.flat[j] = (fun(x + e) - fun(x - e)) / (2 * h)
    return grad


@pytest.mark.parametrize("name, n_latent, lik", [
    ("rbf", 1, Bernoulli("logit")), ("matern52", 1, Bernoulli("probit")),
    ("rbf+white", 1, Bernoulli("logit")), ("rq", 1, Bernoulli("logit")),
    # several latents (one-vs-rest): Softmax's Price estimate of dE/dv is the derivative
    # of the expectation, not of its Monte-Carlo value, so finite differences cannot check it
    ("rbf", 3, Bernoulli("logit")), ("rq", 3, Bernoulli("probit")),
])
def test_gradient_against_finite_differences(name, n_latent, lik):
    X, Y, Z = _data(n=30, m=6, n_latent=n_latent, classes=True)
    tk = TorchKernel(KERNELS[name])
    theta0 = tk.theta.copy()
    q = _random_q(Z.shape[0], n_latent)
    rows = Rows(X, Y, torch.zeros(len(X), dtype=DT))

    def value(theta, Zv):
        return evaluate(tk, torch.tensor(theta), torch.tensor(Zv), q, rows, lik, jitter=JITTER,
                        batch_size=7).elbo

    ev = evaluate(tk, torch.tensor(theta0), Z, q, rows, lik, jitter=JITTER, batch_size=7,
                  want_grad=True)
    fd_theta = _finite_difference(lambda t: value(t, Z.numpy()), theta0)
    fd_Z = _finite_difference(lambda z: value(theta0, z), Z.numpy())
    scale = np.linalg.norm(fd_theta) + np.linalg.norm(fd_Z)
    np.testing.assert_allclose(ev.grad_theta.numpy(), fd_theta, rtol=0, atol=1e-6 * scale)
    np.testing.assert_allclose(ev.grad_Z.numpy(), fd_Z, rtol=0, atol=1e-6 * scale)


def test_gaussian_natural_step_lands_on_titsias_optimum():
    """One full-batch step with gamma = 1 from any q gives the optimal q of a Gaussian
    likelihood, whose bound is Titsias' collapsed bound (``_sgpr._posterior.fit_factors``)."""
    X, Y, Z = _data(n=60, m=10)
    noise = 0.04
    tk = TorchKernel(KERNELS["rbf"])
    theta = tk.theta_tensor()
    rows = Rows(X, Y, torch.full((len(X),), noise, dtype=DT))
    elbo_collapsed, factors = fit_factors(tk, theta, Z, rows, jitter=JITTER, batch_size=7)
    L = factors.L
    ref_mean = torch.linalg.solve_triangular(L, factors.q_mu, upper=False)
    whitened_root = torch.linalg.solve_triangular(L, factors.q_sqrt, upper=False)
    ref_cov = whitened_root @ whitened_root.T
    lik = Gaussian(noise)
    q = _random_q(Z.shape[0], 1)
    ev = evaluate(tk, theta, Z, q, rows, lik, jitter=JITTER, batch_size=7)
    q1 = q.natural_step(ev.sums, ev.scale, gamma=1.0)
    np.testing.assert_allclose(q1.mean[:, 0].numpy(), ref_mean[:, 0].numpy(), rtol=1e-8,
                               atol=1e-8 * float(ref_mean.abs().max()))
    np.testing.assert_allclose(q1.covariance[0].numpy(), ref_cov.numpy(), rtol=0, atol=1e-8)
    ev1 = evaluate(tk, theta, Z, q1, rows, lik, jitter=JITTER, batch_size=7)
    assert abs(ev1.elbo - elbo_collapsed) <= 1e-8 * abs(elbo_collapsed)
    assert ev1.elbo > ev.elbo


def _moment_optimum(tk, theta, Z, rows, lik, n_latent):
    """The optimal q by scipy's L-BFGS-B on (m, tril R) with the bound's autograd."""
    m = Z.shape[0]
    L, _ = inducing_cholesky(tk, theta, Z, JITTER)
    A = torch.linalg.solve_triangular(L, tk(Z, rows.X, theta=theta, part="signal"),
                                      upper=False)
    kxx = tk.diag(rows.X, theta)
    rows_t, cols_t = torch.tril_indices(m, m)

    def unpack(x):
        x = torch.as_tensor(x, dtype=DT)
        mean = x[: m * n_latent].reshape(m, n_latent)
        R = torch.zeros(n_latent, m, m, dtype=DT)
        R[:, rows_t, cols_t] = x[m * n_latent:].reshape(n_latent, -1)
        return mean, R

    def objective(x):
        x = torch.tensor(x, dtype=DT, requires_grad=True)
        mean, R = unpack(x)
        S = R @ R.transpose(1, 2)
        mu = A.T @ mean
        var = kxx[:, None] + torch.stack([((S[c] @ A) * A).sum(0) - (A * A).sum(0)
                                          for c in range(n_latent)], 1)
        E, _, _ = lik.expectations(rows.Y, mu, var)
        logdet = 2 * torch.log(R.diagonal(dim1=1, dim2=2).abs()).sum()
        kl = 0.5 * (S.diagonal(dim1=1, dim2=2).sum() + (mean**2).sum() - m * n_latent - logdet)
        loss = -(E.sum() - kl)
        (grad,) = torch.autograd.grad(loss, x)
        return float(loss.detach()), grad.numpy()

    x0 = torch.cat([torch.zeros(m * n_latent),
                    torch.eye(m, dtype=DT)[rows_t, cols_t].repeat(n_latent)]).numpy()
    res = scipy.optimize.minimize(objective, x0, jac=True, method="L-BFGS-B",
                                  options={"gtol": 1e-10, "ftol": 1e-15, "maxiter": 5000})
    mean, R = unpack(res.x)
    return mean, R @ R.transpose(1, 2), -res.fun


@pytest.mark.parametrize("link, n_latent", [("logit", 1), ("probit", 2)])
def test_bernoulli_natural_gradients_reach_the_optimum_monotonically(link, n_latent):
    X, Y, Z = _data(n=40, m=6, n_latent=n_latent, classes=True, seed=3)
    tk = TorchKernel(KERNELS["rbf"])
    theta = tk.theta_tensor()
    rows = Rows(X, Y, torch.zeros(len(X), dtype=DT))
    lik = Bernoulli(link)
    ref_mean, ref_cov, ref_elbo = _moment_optimum(tk, theta, Z, rows, lik, n_latent)
    for gamma in (0.5, 1.0):
        q = WhitenedQ.prior(Z.shape[0], n_latent, DT, "cpu")
        elbos = []
        for _ in range(60 if gamma < 1 else 25):
            ev = evaluate(tk, theta, Z, q, rows, lik, jitter=JITTER, batch_size=16)
            elbos.append(ev.elbo)
            q = q.natural_step(ev.sums, ev.scale, gamma)
        assert all(b >= a - 1e-12 for a, b in zip(elbos, elbos[1:])), elbos
        np.testing.assert_allclose(q.mean.numpy(), ref_mean.numpy(), rtol=0, atol=1e-5)
        np.testing.assert_allclose(q.covariance.numpy(), ref_cov.numpy(), rtol=0, atol=1e-5)
        assert abs(elbos[-1] - ref_elbo) < 1e-8 * abs(ref_elbo)


# ---------------------------------------------------------------- drivers and mode object


def _classification(n=80, m=8, seed=0):
    X, Y, Z = _data(n=n, m=m, classes=True, seed=seed)
    return Rows(X, Y, torch.zeros(len(X), dtype=DT)), Z


def test_lbfgs_route_gradient_is_the_envelope_gradient():
    """At each evaluation q is optimal, so the gradient returned is the derivative of
    F(theta) = max_q ELBO(theta, q): central differences of F (q re-optimised from the
    prior at each point) agree to 1e-5 of the gradient's norm (F's own error: the inner
    loop's gap, ~1e-12 here, over the step 1e-4)."""
    rows, Z = _classification()
    sk = ConstantKernel(1.0) * RBF(1.0)
    mode = SVGPEngine(sk, Bernoulli("logit"), optimizer="fmin_l_bfgs_b", max_iter=3,
                      batch_size=16)
    mode.torch_kernel = TorchKernel(sk)
    theta0 = mode.torch_kernel.theta_tensor()

    def F(theta):
        mode.q = WhitenedQ.prior(Z.shape[0], 1, DT, "cpu")
        mode._optimal_q(rows, torch.tensor(theta), Z)
        return mode._objective(rows, mode.q, torch.tensor(theta), Z, False).elbo

    F(theta0.numpy())
    ev = mode._objective(rows, mode.q, theta0, Z, True)
    fd = _finite_difference(F, theta0.numpy(), h=1e-4)
    np.testing.assert_allclose(ev.grad_theta.numpy(), fd, rtol=0,
                               atol=1e-5 * np.linalg.norm(fd))


def test_lbfgs_route_fits_and_q_is_optimal():
    rows, Z = _classification()
    mode = SVGPEngine(ConstantKernel(1.0) * RBF(1.0), Bernoulli("probit"),
                      optimizer="fmin_l_bfgs_b", max_iter=200, batch_size=16)
    mode.fit(rows, Z, np.random.RandomState(0))
    start = mode.history[0]
    assert mode.elbo > start
    assert mode.kernel_.theta.shape == (2,) and mode.Z.shape == Z.shape
    # q is at its optimum: the inner loop stopped once a step gained < INNER_TOL n = 8e-9
    # nats; the gain is quadratic in the step with curvature >= 1 (the prior's), so one
    # more step moves q by at most sqrt(8e-9) ~ 1e-4
    ev = mode._objective(rows, mode.q, mode.theta, mode.Z, False)
    q1 = mode.q.natural_step(ev.sums, 1.0, 1.0)
    np.testing.assert_allclose(q1.mean.numpy(), mode.q.mean.numpy(), rtol=0, atol=1e-4)
    assert abs(ev.elbo - mode.elbo) <= 1e-12 * abs(mode.elbo)
    # the Dask route gives the same bound and gradient as the rows in memory
    import dask.array as da
    from skgpx._dask import DaskRows

    dask_rows = DaskRows(da.from_array(rows.X.numpy(), chunks=(25, 2)),
                         da.from_array(rows.Y.numpy(), chunks=(25, 1)), 0.0, DT, "cpu")
    ev_mem = mode._objective(rows, mode.q, mode.theta, mode.Z, True)
    ev_dask = mode._objective(dask_rows, mode.q, mode.theta, mode.Z, True)
    assert abs(ev_dask.elbo - ev_mem.elbo) <= 1e-12 * abs(ev_mem.elbo)
    np.testing.assert_allclose(ev_dask.grad_theta.numpy(), ev_mem.grad_theta.numpy(),
                               rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(ev_dask.grad_Z.numpy(), ev_mem.grad_Z.numpy(), rtol=1e-10,
                               atol=1e-12)


def test_adam_route_is_seeded_and_warns_at_max_iter():
    rows, Z = _classification(n=200, m=8)
    options = dict(optimizer="adam", minibatch_size=50, learning_rate=0.05, natgrad_step=0.5,
                   batch_size=32)
    fits = []
    for _ in range(2):
        mode = SVGPEngine(ConstantKernel(1.0) * RBF(1.0), Bernoulli("logit"), max_iter=3,
                          tol=None, **options)
        with warnings.catch_warnings():
            warnings.simplefilter("error", ConvergenceWarning)  # tol=None: no warning
            fits.append(mode.fit(rows, Z, np.random.RandomState(5)))
    assert len(fits[0].history) == 3 and fits[0].n_iter == 3
    assert fits[0].history == fits[1].history  # same RandomState: same fit
    np.testing.assert_array_equal(fits[0].q_mu.numpy(), fits[1].q_mu.numpy())
    mode = SVGPEngine(ConstantKernel(1.0) * RBF(1.0), Bernoulli("logit"), max_iter=2,
                      tol=1e-12, **options)
    with pytest.warns(ConvergenceWarning, match="max_iter=2"):
        mode.fit(rows, Z, np.random.RandomState(5))


def test_predictions_and_posterior_draws():
    """OvR probabilities are normalised per row; the draws' update reproduces q(f) at new
    points (exact joint prior draws, 20 000 paths: z-scores as the regressor's oracles)."""
    X, Y, Z = _data(n=90, m=7, n_latent=3, classes=True, seed=4)
    rows = Rows(X, Y, torch.zeros(len(X), dtype=DT))
    sk = ConstantKernel(1.0) * RBF(1.0)
    mode = SVGPEngine(sk, Bernoulli("logit"), multi_class="one_vs_rest", optimizer=None,
                      batch_size=16).fit(rows, Z, np.random.RandomState(0))
    Xq = torch.tensor(np.random.RandomState(1).uniform(-2, 2, (5, 2)), dtype=DT)
    proba = mode.predict_proba(Xq)
    mean, var = mode.latent_mean_and_variance(Xq)
    p = Bernoulli("logit").predict(mean, var)
    np.testing.assert_allclose(proba.numpy(), (p / p.sum(1, keepdim=True)).numpy(), rtol=1e-12)
    post = mode.posterior(shift=torch.zeros(2, dtype=DT), n_features_in=2)
    draws = draw_exact(post, Xq, 20_000, torch.Generator().manual_seed(0), 1e-10)
    for c in range(3):
        L = mode.L
        A = torch.linalg.solve_triangular(L, mode.torch_kernel(Z, Xq, part="signal"),
                                          upper=False)
        cov = (mode.torch_kernel(Xq, part="signal") - A.T @ A
               + A.T @ mode.q.covariance[c] @ A)
        mean_z, cov_z, _, _ = moment_z_scores(draws[:, :, c].numpy(), mean[:, c].numpy(),
                                              cov.numpy())
        assert mean_z < MEAN_Z_MAX and cov_z < COV_Z_MAX
        np.testing.assert_allclose(np.diag(cov.numpy()), var[:, c].numpy(), rtol=1e-10)


def test_softmax_mode_probabilities_sum_to_one_and_fit_improves():
    X, Y, Z = _data(n=90, m=7, n_latent=3, classes=True, seed=4)
    rows = Rows(X, Y, torch.zeros(len(X), dtype=DT))
    mode = SVGPEngine(ConstantKernel(1.0) * RBF(1.0), Softmax(32, seed=0),
                      multi_class="softmax", optimizer="fmin_l_bfgs_b", max_iter=5,
                      batch_size=16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        mode.fit(rows, Z, np.random.RandomState(0))
    assert mode.elbo >= mode.history[0]
    proba = mode.predict_proba(X[:10])
    np.testing.assert_allclose(proba.sum(1).numpy(), 1.0, rtol=1e-12)


def test_adam_route_stopping_rule_and_silence(capfd):
    """The window rule stops as soon as it can when any rise is within tol; verbose=0
    prints nothing."""
    rows, Z = _classification(n=120, m=6)
    mode = SVGPEngine(ConstantKernel(1.0) * RBF(1.0), Bernoulli("logit"), optimizer="adam",
                      max_iter=20, tol=1.0, minibatch_size=40, batch_size=32)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        mode.fit(rows, Z, np.random.RandomState(0))
    assert mode.n_iter == PLATEAU_WINDOW + 1 == len(mode.history)
    assert isinstance(mode.q, WhitenedQ) and np.isfinite(mode.elbo)
    out, err = capfd.readouterr()
    assert out == "" and err == ""
    mode.verbose = 1
    mode.fit(rows, Z, np.random.RandomState(0))
    assert "PathwiseGPClassifier" in capfd.readouterr().err


def test_softmax_centring_keeps_the_likelihood_term_and_lowers_the_kl():
    """log softmax sees only differences of the latents: moving every m_c by one vector
    leaves sum_i E_i unchanged (same draws, exactly up to rounding) and the KL is least at
    sum_c m_c = 0, so centring is the bound's maximum along that direction."""
    X, Y, Z = _data(n=50, m=6, n_latent=3, classes=True, seed=2)
    rows = Rows(X, Y, torch.zeros(len(X), dtype=DT))
    tk = TorchKernel(KERNELS["rbf"])
    q = _random_q(Z.shape[0], 3, seed=4)
    lik = Softmax(16, seed=1)
    ev = evaluate(tk, tk.theta_tensor(), Z, q, rows, lik, jitter=JITTER, batch_size=16)
    qc = q.centred()
    evc = evaluate(tk, tk.theta_tensor(), Z, qc, rows, lik, jitter=JITTER, batch_size=16)
    np.testing.assert_allclose(qc.mean.sum(1).numpy(), 0.0, atol=1e-12)
    np.testing.assert_allclose(qc.covariance.numpy(), q.covariance.numpy(), atol=1e-12)
    assert abs(float(evc.sums.E) - float(ev.sums.E)) <= 1e-10 * abs(float(ev.sums.E))
    shift = float((q.mean.mean(1) ** 2).sum()) * 3 / 2  # KL drops by C |mean of m_c|^2 / 2
    assert abs((evc.elbo - ev.elbo) - shift) <= 1e-8 * shift


def test_adam_route_epoch_value_is_the_full_bound_when_nothing_moves():
    """With learning_rate=0 and natgrad_step=0 nothing moves, and an epoch's value (the
    row-weighted mean of its batch estimates, batches of 50, 50 and 20 rows) is the bound
    on all rows exactly; an unweighted mean would be off by the last batch's weight."""
    rows, Z = _classification(n=120, m=6)
    # q stays at the prior: a DotProduct term makes k(x, x), hence E_i, differ between rows
    mode = SVGPEngine(ConstantKernel(1.0) * RBF(1.0) + DotProduct(1.0), Bernoulli("logit"),
                      optimizer="adam",
                      max_iter=2, tol=None, minibatch_size=50, learning_rate=0.0,
                      natgrad_step=0.0, batch_size=32)
    mode.fit(rows, Z, np.random.RandomState(0))
    assert mode.history[0] == pytest.approx(mode.elbo, rel=1e-12)
    assert mode.history[1] == pytest.approx(mode.elbo, rel=1e-12)
