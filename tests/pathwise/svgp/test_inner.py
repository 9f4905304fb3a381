"""The L-BFGS-B route's inner loop with ``A`` held (``skgpx.pathwise._svgp._inner``) and its
plateau rule (``_svgp._lbfgs._lbfgs_plateau``).

References: the chunked full pass of ``_svgp`` (``evaluate``, ``marginals``,
``WhitenedQ.natural_step``; itself checked against dense numpy in ``svgp/test_engine.py``), scipy's
L-BFGS-B on the bound in the moment parameters (``svgp.test_engine._moment_optimum``).  Tolerances:
identities between the held-``A`` pieces and the chunked pass, 1e-10 relative (float64
round-off of sums over <= 60 rows); optima, 1e-5 on m and S (both solvers stop within
their own tolerance, as ``svgp.test_engine``'s natural-gradient test).
"""

import warnings

import numpy as np
import pytest
import torch
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process.kernels import RBF, ConstantKernel

from skgpx.kernels import TorchKernel
from skgpx.pathwise._likelihoods._classification import Bernoulli, Softmax
from skgpx._inducing._rows import Rows
from skgpx._inducing._collapsed import inducing_cholesky, whitening
from skgpx.pathwise._svgp._bound import WhitenedQ, evaluate, marginals, triangular_inverse
from skgpx.pathwise._svgp import _engine as engine_module
from skgpx.pathwise._svgp._engine import PLATEAU_WINDOW, SVGPEngine
from skgpx.pathwise._svgp._inner import InnerProblem, optimal_q

from .test_engine import DT, JITTER, KERNELS, _data, _moment_optimum, _random_q

LIKELIHOODS = {"logit": (Bernoulli("logit"), 1), "probit-ovr": (Bernoulli("probit"), 2),
               "softmax": (Softmax(16, seed=2), 3)}


def _problem(kernel, lik, n_latent, n=50, m=6, seed=3):
    X, Y, Z = _data(n=n, m=m, n_latent=n_latent, classes=True, seed=seed)
    tk = TorchKernel(kernel)
    theta = tk.theta_tensor()
    L, _ = inducing_cholesky(tk, theta, Z, JITTER)
    rows = Rows(X, Y, torch.zeros(len(X), dtype=DT))
    return tk, theta, Z, L, rows, InnerProblem(tk, theta, Z, whitening(L), X, Y, lik, 16)


@pytest.mark.parametrize("name", ["rbf", "rq"])
@pytest.mark.parametrize("lik_name", list(LIKELIHOODS))
def test_held_pieces_equal_the_chunked_pass(name, lik_name):
    """Variances, E, H and the covariance step from the held A equal the chunked pass's
    marginals, sums and natural step (gamma = 1, which sets Lambda = I - 2 H)."""
    lik, n_latent = LIKELIHOODS[lik_name]
    tk, theta, Z, L, rows, problem = _problem(KERNELS[name], lik, n_latent)
    q = _random_q(Z.shape[0], n_latent, seed=5)
    ev = evaluate(tk, theta, Z, q, rows, lik, jitter=JITTER, batch_size=7)
    _, var = marginals(tk, theta, Z, whitening(L), q, rows.X, 7)
    state, f = problem.start(q)
    np.testing.assert_allclose(state["var"].numpy(), var.numpy(), rtol=1e-10, atol=1e-12)
    assert abs(f - ev.elbo) <= 1e-10 * abs(ev.elbo)
    H = problem.curvature(state["h"])
    np.testing.assert_allclose(H.numpy(), ev.sums.H.numpy(), rtol=1e-10, atol=1e-12)
    # the covariance step keeps the means; the natural step at gamma = 1 sets the same
    # precision (and moves the means)
    trial, _, _ = problem.precision_step(q, state, 1.0)
    stepped = q.natural_step(ev.sums, 1.0, 1.0)
    np.testing.assert_allclose(trial.precision.numpy(), stepped.precision.numpy(),
                               rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(trial.mean.numpy(), q.mean.numpy(), rtol=1e-12, atol=1e-14)
    moved = q.with_mean(q.mean + 1.0)
    np.testing.assert_allclose(moved.natural_mean.numpy(),
                               (q.precision @ (q.mean + 1.0).T[..., None])[..., 0].T.numpy(),
                               rtol=1e-12)


@pytest.mark.parametrize("link, n_latent", [("logit", 1), ("probit", 2)])
def test_inner_loop_reaches_the_moment_optimum_and_never_descends(link, n_latent):
    """From the prior, block coordinate ascent lands on the optimum that scipy's L-BFGS-B
    finds in the moment parameters, and each step's reported gain is the bound's rise."""
    lik = Bernoulli(link)
    tk, theta, Z, _, rows, problem = _problem(KERNELS["rbf"], lik, n_latent, n=40)
    ref_mean, ref_cov, ref_elbo = _moment_optimum(tk, theta, Z, rows, lik, n_latent)
    q = WhitenedQ.prior(Z.shape[0], n_latent, DT, "cpu")
    q, f, passes, _ = optimal_q(problem, q, tol=1e-14, dither_tol=0.0)
    np.testing.assert_allclose(q.mean.numpy(), ref_mean.numpy(), rtol=0, atol=1e-5)
    np.testing.assert_allclose(q.covariance.numpy(), ref_cov.numpy(), rtol=0, atol=1e-5)
    assert abs(f - ref_elbo) < 1e-8 * abs(ref_elbo)
    ev = evaluate(tk, theta, Z, q, rows, lik, jitter=JITTER, batch_size=16)
    assert abs(ev.elbo - f) <= 1e-10 * abs(f)  # the running bound is the bound
    assert passes < 40
    state, f0 = problem.start(WhitenedQ.prior(Z.shape[0], n_latent, DT, "cpu"))
    q_prior = WhitenedQ.prior(Z.shape[0], n_latent, DT, "cpu")
    q1, state1, gain = problem.mean_step(q_prior, state)
    ev1 = evaluate(tk, theta, Z, q1, rows, lik, jitter=JITTER, batch_size=16)
    assert gain > 0 and abs((ev1.elbo - f0) - gain) <= 1e-9 * abs(f0)


def test_softmax_inner_loop_matches_the_full_pass_loop(monkeypatch):
    """Softmax (Monte-Carlo bound, shared draws): the held-A loop ends at the fixed point
    of the full-pass natural step (Lambda = I - 2 H, m = r, with Price's h), its means
    centred, and its bound agrees with the full-pass loop's (which stops where a step
    first loses, not at the fixed point) to a hundredth of the estimate's own Monte-Carlo
    standard error; the gradient in the means, r - m (the exact derivative of the
    estimate), is at the mean loop's tolerance."""
    lik = Softmax(32, seed=1)
    X, Y, Z = _data(n=60, m=6, n_latent=3, classes=True, seed=7)
    rows = Rows(X, Y, torch.zeros(len(X), dtype=DT))
    held = []

    class Spy(InnerProblem):
        def __init__(self, *args):
            held.append(args[4].shape[0])
            super().__init__(*args)

    monkeypatch.setattr(engine_module, "InnerProblem", Spy)
    fits = {}
    for inner in ("cached", "full"):
        mode = SVGPEngine(ConstantKernel(1.0) * RBF(1.0), lik, multi_class="softmax",
                          optimizer=None, inner=inner, inner_tol=None)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            mode.fit(rows, Z, np.random.RandomState(0))
        fits[inner] = mode
    assert held == [len(X)]  # the held-A loop ran once (optimizer=None), only if asked for
    q = fits["cached"].q
    np.testing.assert_allclose(q.mean.sum(1).numpy(), 0.0, atol=1e-12)
    ev = fits["cached"]._objective(rows, q, fits["cached"].theta, Z, False)
    stepped = q.natural_step(ev.sums, 1.0, 1.0)
    np.testing.assert_allclose(stepped.precision.numpy(), q.precision.numpy(), atol=1e-6)
    np.testing.assert_allclose(stepped.mean.numpy(), q.mean.numpy(), atol=1e-5)
    mu, var = fits["cached"].latent_mean_and_variance(X)
    error = float(lik.standard_error(Y, mu, var).sum())
    assert abs(fits["cached"].elbo - fits["full"].elbo) <= 0.01 * error
    grad = ev.sums.r - q.mean
    # a mean step gains about g^T S g / 2 >= |g|^2 lambda_min(S) / 2 and the loop ran
    # until one gained under INNER_TOL n = 6e-9 nats; lambda_min(S) >= 1 / (1 + n / 2)
    assert float(grad.abs().max()) <= np.sqrt(2 * 6e-9 * (1 + len(X) / 2))


def test_lbfgs_plateau_rule_stops_early_without_a_warning():
    """With a tol that any rise meets, L-BFGS-B stops after PLATEAU_WINDOW + 1 iterations
    (or earlier evaluations) and warns nothing; tol=None runs on."""
    X, Y, Z = _data(n=60, m=6, classes=True, seed=1)
    rows = Rows(X, Y, torch.zeros(len(X), dtype=DT))
    runs = {}
    for tol in (1.0, None):
        mode = SVGPEngine(ConstantKernel(1.0) * RBF(1.0), Bernoulli("logit"),
                          optimizer="fmin_l_bfgs_b", max_iter=100, tol=tol)
        with warnings.catch_warnings():
            warnings.simplefilter("error", ConvergenceWarning)
            mode.fit(rows, Z, np.random.RandomState(0))
        runs[tol] = mode
    assert runs[1.0].n_iter <= 3 * (PLATEAU_WINDOW + 1) < runs[None].n_iter
    assert runs[1.0].elbo >= max(runs[1.0].history) - 1e-9 * abs(runs[1.0].elbo)


@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-12), (torch.float32, 1e-5)])
def test_triangular_inverse_equals_the_triangular_solve(dtype, tol):
    """LAPACK's trtri on the tensor's memory gives the triangular solve's L^{-1}, row-major
    and lower triangular (cond(L) ~ 10 here: round-off of order eps * cond)."""
    gen = torch.Generator().manual_seed(0)
    B = torch.randn(40, 40, generator=gen, dtype=torch.float64)
    L = torch.linalg.cholesky(B @ B.T + 40 * torch.eye(40, dtype=torch.float64)).to(dtype)
    inverse = triangular_inverse(L)
    assert inverse.dtype == dtype and inverse.is_contiguous()
    torch.testing.assert_close(inverse, whitening(L), rtol=0, atol=tol)
    assert float(inverse.triu(1).abs().max()) == 0.0
    torch.testing.assert_close(inverse @ L, torch.eye(40, dtype=dtype), rtol=0, atol=tol)


@pytest.mark.parametrize("name", ["rbf", "rq"])
@pytest.mark.parametrize("lik_name", list(LIKELIHOODS))
def test_gradient_without_H_equals_the_gradient_with_it(name, lik_name):
    """The L-BFGS-B route's gradient pass sums G_A A^T instead of forming H: the same
    bound and gradient in theta and Z (1e-10: round-off of the two orders of summation),
    over one chunk and over several."""
    lik, n_latent = LIKELIHOODS[lik_name]
    tk, theta, Z, _, rows, _ = _problem(KERNELS[name], lik, n_latent)
    q = _random_q(Z.shape[0], n_latent, seed=6)
    for batch_size in (7, 64):
        ref = evaluate(tk, theta, Z, q, rows, lik, jitter=JITTER, batch_size=batch_size,
                       want_grad=True)
        ev = evaluate(tk, theta, Z, q, rows, lik, jitter=JITTER, batch_size=batch_size,
                      want_grad=True, want_H=False)
        assert abs(ev.elbo - ref.elbo) <= 1e-12 * abs(ref.elbo)
        scale = float(ref.grad_theta.abs().max() + ref.grad_Z.abs().max())
        np.testing.assert_allclose(ev.grad_theta.numpy(), ref.grad_theta.numpy(), rtol=0,
                                   atol=1e-10 * scale)
        np.testing.assert_allclose(ev.grad_Z.numpy(), ref.grad_Z.numpy(), rtol=0,
                                   atol=1e-10 * scale)


def test_gradient_without_H_on_dask_blocks_equals_the_rows_in_memory():
    import dask.array as da
    from skgpx._dask import DaskRows

    lik, n_latent = LIKELIHOODS["probit-ovr"]
    tk, theta, Z, _, rows, _ = _problem(KERNELS["rbf"], lik, n_latent)
    q = _random_q(Z.shape[0], n_latent, seed=6)
    dask_rows = DaskRows(da.from_array(rows.X.numpy(), chunks=(20, 2)),
                         da.from_array(rows.Y.numpy(), chunks=(20, n_latent)), 0.0, DT, "cpu")
    ev_mem, ev_dask = (evaluate(tk, theta, Z, q, r, lik, jitter=JITTER, batch_size=16,
                                want_grad=True, want_H=False) for r in (rows, dask_rows))
    assert abs(ev_dask.elbo - ev_mem.elbo) <= 1e-12 * abs(ev_mem.elbo)
    np.testing.assert_allclose(ev_dask.grad_theta.numpy(), ev_mem.grad_theta.numpy(),
                               rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(ev_dask.grad_Z.numpy(), ev_mem.grad_Z.numpy(), rtol=1e-10,
                               atol=1e-12)
