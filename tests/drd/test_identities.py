"""Identities of sDRD against direct forms, scipy and autograd: posterior, evidence,
gradients, Fisher matrix and Laplace identity.

Small random problems in float64: (p, n) = (24, 15) (dual, n < m) and (20, 40) (primal).
The paper's equations (supplementary App. B) are written out here in numpy
from the paper, independently of the package's whitened torch code.
"""

import math

import numpy as np
import pytest
import torch
from scipy.stats import multivariate_normal

from skgpx.drd._bases import DenseAxis, FourierAxis, GridFactor, se_correlation
from skgpx.drd._model import (
    Conditional,
    FrozenLaplaceLogdet,
    fisher_curvature,
    laplace_logdet,
    link,
    link_log_slope,
    log_evidence,
    log_evidence_dual,
    log_evidence_primal,
)

SIZES = [(24, 15), (20, 40)]
T = torch.float64


def _problem(p, n, seed, basis="fourier", lf=1.5):
    """X, y, u and a smoothness factor G (Fourier on an unpadded circle, all frequencies)."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, p))
    y = rng.standard_normal(n)
    u = -1.0 + 0.8 * rng.standard_normal(p)
    if basis == "fourier":
        axis = FourierAxis(p, p, p // 2)
    else:
        axis = DenseAxis(p)
    G = GridFactor([axis.bind(lf, T, "cpu")], (p,))
    return torch.tensor(X), torch.tensor(y), torch.tensor(u), G


def _dense(G):
    return G.adjoint(torch.eye(G.rank, dtype=T)).T.numpy()  # (p, m)


def _prior_cov(G, u, name="exp"):
    d = link(u, name).sqrt().numpy()
    Gm = _dense(G)
    return d[:, None] * (Gm @ Gm.T) * d[None, :]


# ----------------------------------------------------------------- 1. paper Eqs. 5-7


@pytest.mark.parametrize("p, n", SIZES)
def test_seed_eq5_eq6_eq7_equal_their_direct_forms(p, n):
    X, y, u, G = _problem(p, n, 0)
    s2 = 0.3
    C = _prior_cov(G, u)
    Xn, yn = X.numpy(), y.numpy()
    Lam_direct = np.linalg.inv(Xn.T @ Xn / s2 + np.linalg.inv(C))
    # Eq. 5, line 1: C_s^1/2 (C_s^1/2 X^T X C_s^1/2 / s2 + B^T C_f^-1 B)^-1 C_s^1/2
    d = np.sqrt(np.exp(u.numpy()))
    Kf = _dense(G) @ _dense(G).T
    line1 = d[:, None] * np.linalg.inv(
        (d[:, None] * (Xn.T @ Xn) * d[None, :]) / s2 + np.linalg.inv(Kf)) * d[None, :]
    # Eq. 5, line 2, with Z = X D G: D G (Z^T Z / s2 + I)^-1 G^T D
    Z = (X * link(u, "exp").sqrt()) @ torch.tensor(_dense(G))
    Zn = Z.numpy()
    DG = d[:, None] * _dense(G)
    inner = np.linalg.inv(Zn.T @ Zn / s2 + np.eye(Zn.shape[1]))
    line2 = DG @ inner @ DG.T
    np.testing.assert_allclose(line1, Lam_direct, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(line2, Lam_direct, rtol=1e-10, atol=1e-12)
    # Eq. 6 and Eq. 7
    mu = Lam_direct @ Xn.T @ yn / s2
    eq6 = yn @ Zn @ inner @ Zn.T @ yn / (2 * s2**2)
    np.testing.assert_allclose(0.5 * mu @ np.linalg.solve(Lam_direct, mu), eq6, rtol=1e-10)
    eq7 = 0.5 * np.linalg.slogdet(Zn.T @ Zn / s2 + np.eye(Zn.shape[1]))[1]
    direct7 = 0.5 * np.linalg.slogdet(C @ Xn.T @ Xn / s2 + np.eye(p))[1]
    np.testing.assert_allclose(eq7, direct7, rtol=1e-10)
    # the package's posterior (whitened, either form) is this Gaussian
    cond = Conditional.condition(Z, y, torch.tensor(s2, dtype=T))
    Sigma_w = DG @ cond.covariance().numpy() @ DG.T
    np.testing.assert_allclose(Sigma_w, Lam_direct, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(DG @ cond.mean.numpy(), mu, rtol=1e-9, atol=1e-12)


# ------------------------------------------------------------------ 2. evidence


@pytest.mark.parametrize("p, n", SIZES)
@pytest.mark.parametrize("basis", ["fourier", "dense"])
def test_dual_and_corrected_primal_evidence_equal_scipy(p, n, basis):
    X, y, u, G = _problem(p, n, 1, basis)
    s2 = torch.tensor(0.25, dtype=T)
    Z = (X * link(u, "exp").sqrt()) @ torch.tensor(_dense(G))
    C = _prior_cov(G, u)
    expected = multivariate_normal.logpdf(y.numpy(), np.zeros(n),
                                          X.numpy() @ C @ X.numpy().T + 0.25 * np.eye(n))
    for fn in (log_evidence_dual, log_evidence_primal, log_evidence):
        np.testing.assert_allclose(float(fn(Z, y, s2)), expected, rtol=1e-10)


def _literal_eq8_data_term(Z, y, s2):
    """The paper's printed Eq. 8 without the u-prior: no -(n-m)/2 log s2, no constant."""
    Zn, yn = Z.numpy(), y.numpy()
    S = Zn.T @ Zn + s2 * np.eye(Zn.shape[1])
    return (-0.5 * np.linalg.slogdet(S)[1] + yn @ Zn @ np.linalg.solve(S, Zn.T @ yn) / (2 * s2)
            - yn @ yn / (2 * s2))


@pytest.mark.parametrize("s2", [0.1, 2.0])
def test_literal_eq8_misses_exactly_the_erratum_terms(s2):
    p, n = 24, 15
    X, y, u, G = _problem(p, n, 2)
    Z = (X * link(u, "exp").sqrt()) @ torch.tensor(_dense(G))
    m = Z.shape[1]
    exact = float(log_evidence_primal(Z, y, torch.tensor(s2, dtype=T)))
    gap = exact - _literal_eq8_data_term(Z, y, s2)
    np.testing.assert_allclose(gap, -0.5 * n * math.log(2 * math.pi) + 0.5 * (m - n) * math.log(s2),
                               rtol=1e-10)


# ------------------------------------------------------------------ 3. gradients


def _eq9_data_gradient(X, y, u, G, s2, name):
    """The paper's Eq. 9 (data part) with
    dZ/du_i = X dC_s^1/2/du_i B^T C_f^1/2 B = 1/2 s_i D_ii x_i G_i."""
    Xn, yn, Gm = X.numpy(), y.numpy(), _dense(G)
    d = link(u, name).sqrt().numpy()
    slope = link_log_slope(u, name).numpy()
    Z = (Xn * d) @ Gm
    S = Z.T @ Z + s2 * np.eye(Z.shape[1])
    Si = np.linalg.inv(S)
    Zy = Z.T @ yn
    M = (Si @ np.outer(Zy, Zy) @ Si @ Z.T - Si @ np.outer(Zy, yn) + s2 * Si @ Z.T)  # (m, n)
    grad = np.empty(len(d))
    for i in range(len(d)):
        dZ = 0.5 * slope[i] * d[i] * np.outer(Xn[:, i], Gm[i])
        grad[i] = -np.trace(M @ dZ) / s2
    return grad


@pytest.mark.parametrize("p, n", SIZES)
@pytest.mark.parametrize("name", ["exp", "softplus"])
def test_autograd_u_gradient_equals_seed_eq9(p, n, name):
    X, y, u, G = _problem(p, n, 3)
    s2 = 0.4
    K = torch.tensor(0.7 * se_correlation(p, 3.0, T, "cpu").numpy() + 1e-3 * np.eye(p))
    b = -1.2
    uu = u.clone().requires_grad_(True)
    prior = torch.distributions.MultivariateNormal(torch.full((p,), b, dtype=T), K)
    objective = log_evidence((X * link(uu, name).sqrt()) @ torch.tensor(_dense(G)), y,
                             torch.tensor(s2, dtype=T)) + prior.log_prob(uu)
    (grad,) = torch.autograd.grad(objective, uu)
    expected = _eq9_data_gradient(X, y, u, G, s2, name) - np.linalg.solve(K.numpy(), u.numpy() - b)
    np.testing.assert_allclose(grad.numpy(), expected, rtol=1e-10, atol=1e-12)


def test_autograd_smoothness_gradient_equals_seed_eq10():
    p, n = 24, 15
    X, y, u, _ = _problem(p, n, 4)
    axis, s2, lf = FourierAxis(p, 2 * p, p // 2), 0.3, 2.0
    lf_t = torch.tensor(lf, dtype=T, requires_grad=True)
    G = GridFactor([axis.bind(lf_t, T, "cpu")], (p,))
    D = link(u, "exp").sqrt()
    value = log_evidence(G.forward(X * D), y, torch.tensor(s2, dtype=T))
    (grad,) = torch.autograd.grad(value, lf_t)
    # Eq. 10 with dZ/dl_f = X D B^T (dC_f^1/2 / dl_f) from central differences of C_f^1/2
    h = 1e-5
    basis = axis.basis(T, "cpu").numpy()
    dscale = (axis.scales(lf + h, T, "cpu") - axis.scales(lf - h, T, "cpu")).numpy() / (2 * h)
    Xn, yn, Dn = X.numpy(), y.numpy(), D.numpy()
    Z = (Xn * Dn) @ (basis * axis.scales(lf, T, "cpu").numpy())
    S = Z.T @ Z + s2 * np.eye(Z.shape[1])
    Si, Zy = np.linalg.inv(S), Z.T @ yn
    M = Si @ np.outer(Zy, Zy) @ Si @ Z.T - Si @ np.outer(Zy, yn) + s2 * Si @ Z.T
    expected = -np.trace(M @ ((Xn * Dn) @ (basis * dscale))) / s2
    np.testing.assert_allclose(float(grad), expected, rtol=1e-7)


def _eq11(Z, y, s2, corrected):
    Zn, yn = Z.numpy(), y.numpy()
    n, m = Zn.shape
    S = Zn.T @ Zn + s2 * np.eye(m)
    Si = np.linalg.inv(S)
    value = -0.5 * (yn @ (Zn @ Si @ Zn.T - np.eye(n)) @ yn / s2**2
                    + yn @ Zn @ Si @ Si @ Zn.T @ yn / s2 + np.trace(Si))
    return value + ((m - n) / (2 * s2) if corrected else 0.0)


@pytest.mark.parametrize("p, n", SIZES)
def test_noise_gradient_equals_corrected_eq11_and_not_the_printed_one(p, n):
    X, y, u, G = _problem(p, n, 5)
    Z = (X * link(u, "exp").sqrt()) @ torch.tensor(_dense(G))
    s2 = torch.tensor(0.35, dtype=T, requires_grad=True)
    (grad,) = torch.autograd.grad(log_evidence(Z, y, s2), s2)
    np.testing.assert_allclose(float(grad), _eq11(Z, y, 0.35, True), rtol=1e-10)
    if Z.shape[1] != n:
        assert not np.isclose(float(grad), _eq11(Z, y, 0.35, False), rtol=1e-10)


def test_prior_gradients_equal_seed_eq12_eq13():
    p = 12
    rng = np.random.default_rng(6)
    u = torch.tensor(rng.standard_normal(p) - 2.0)
    rho = torch.tensor(1.7, dtype=T, requires_grad=True)
    length = torch.tensor(2.5, dtype=T, requires_grad=True)
    b = torch.tensor(-2.2, dtype=T, requires_grad=True)
    t = torch.arange(p, dtype=T)
    dist2 = (t[:, None] - t[None, :]) ** 2

    def kernel(rho, length):
        return rho * torch.exp(-0.5 * dist2 / length**2) + 1e-4 * torch.eye(p, dtype=T)

    value = torch.distributions.MultivariateNormal(b * torch.ones(p, dtype=T),
                                                   kernel(rho, length)).log_prob(u)
    grads = torch.autograd.grad(value, (b, rho, length))
    K = kernel(rho, length).detach().numpy()
    r = u.numpy() - float(b.detach())
    Kr = np.linalg.solve(K, r)
    E = np.exp(-0.5 * dist2.numpy() / 2.5**2)
    dK = {"rho": E, "length": 1.7 * E * dist2.numpy() / 2.5**3}
    eq13 = {k: 0.5 * Kr @ v @ Kr - 0.5 * np.trace(np.linalg.solve(K, v)) for k, v in dK.items()}
    np.testing.assert_allclose(float(grads[0]), np.ones(p) @ Kr, rtol=1e-10)  # Eq. 12
    np.testing.assert_allclose(float(grads[1]), eq13["rho"], rtol=1e-10)
    np.testing.assert_allclose(float(grads[2]), eq13["length"], rtol=1e-10)


def test_theta_objective_profiles_b_by_eq12_and_has_the_quadratic_part_of_eq13():
    """With W = 0 the Laplace evidence's u-prior part is -1/2 (u - b)^T K^-1 (u - b): its
    b is the root of Eq. 12 and its gradients are Eq. 13 without the trace (which cancels
    against the Laplace log-determinant, identity 5)."""
    from skgpx.drd._solver import Config, Solver, State

    p, n = 12, 8
    rng = np.random.default_rng(12)
    X, y = torch.tensor(rng.standard_normal((n, p))), torch.tensor(rng.standard_normal(n))
    t = np.arange(p)
    dist2 = (t[:, None] - t[None, :]) ** 2.0
    E0 = np.exp(-0.5 * dist2 / 1.5**2)
    K = 1.7 * (E0 + 1e-6 * np.eye(p))  # the dense factor's jitter is part of the model
    u = torch.tensor(-2.0 + np.linalg.cholesky(K) @ rng.standard_normal(p))  # a prior draw
    config = Config(shape=(p,), smoothness=False, basis="dense")
    solver = Solver(config, X, y, State(b=0.0, log={}, u=u))
    log = {"rho": torch.tensor(math.log(1.7), dtype=T, requires_grad=True),
           "l": torch.tensor(math.log(1.5), dtype=T, requires_grad=True),
           "noise": torch.tensor(math.log(0.3), dtype=T)}
    E, b = solver.laplace_evidence(log, 0.0, u, None, [DenseAxis(p)], None, None)
    grads = torch.autograd.grad(E, (log["rho"], log["l"]))
    one, un = np.ones(p), u.numpy()
    gls_mean = one @ np.linalg.solve(K, un) / (one @ np.linalg.solve(K, one))
    np.testing.assert_allclose(float(b), gls_mean,
                               rtol=1e-10)
    Kr = np.linalg.solve(K, un - float(b))
    dK_dlogrho = K
    dK_dlogl = 1.7 * E0 * dist2 / 1.5**2
    np.testing.assert_allclose(float(grads[0]), 0.5 * Kr @ dK_dlogrho @ Kr, rtol=1e-10)
    np.testing.assert_allclose(float(grads[1]), 0.5 * Kr @ dK_dlogl @ Kr, rtol=1e-8)
    data = float(log_evidence(X * link(u, "exp").sqrt(), y, torch.tensor(0.3, dtype=T)))
    np.testing.assert_allclose(float(E), data - 0.5 * (un - float(b)) @ Kr, rtol=1e-10)


# ------------------------------------------------------------------ 4. curvature


def _sigma_of_u(X, G, s2, name):
    Gm = torch.tensor(_dense(G))

    def sigma(u):
        C = link(u, name).sqrt()[:, None] * (Gm @ Gm.T) * link(u, name).sqrt()[None, :]
        return X @ C @ X.T + s2 * torch.eye(X.shape[0], dtype=T)

    return sigma


@pytest.mark.parametrize("name", ["exp", "softplus"])
@pytest.mark.parametrize("smooth", [True, False])
def test_fisher_closed_form_is_the_trace_formula_and_minus_a_hessian(name, smooth):
    p, n = 10, 15
    X, y, u, G = _problem(p, n, 7)
    if not smooth:
        G = GridFactor([DenseAxis(p).bind(1e-3, T, "cpu")], (p,))  # K_f = (1 + 1e-6) I
    s2 = 0.3
    sigma = _sigma_of_u(X, G, s2, name)
    cond = Conditional.condition((X * link(u, name).sqrt()) @ torch.tensor(_dense(G)), y,
                                 torch.tensor(s2, dtype=T))
    index = torch.arange(p)
    C = torch.tensor(_prior_cov(G, u, name))
    W = fisher_curvature(cond, X, C, link_log_slope(u, name)).numpy()
    DG = link(u, name).sqrt()[:, None] * torch.tensor(_dense(G))  # C = DG DG^T, factorised path
    np.testing.assert_allclose(fisher_curvature(cond, X, None, link_log_slope(u, name), DG).numpy(),
                               W, rtol=1e-10, atol=1e-12)
    if not cond.dual:  # A as a rank-m correction of X^T X (the solver's primal route)
        np.testing.assert_allclose(
            fisher_curvature(cond, X, None, link_log_slope(u, name), DG,
                             gram_A=X.T @ X).numpy(), W, rtol=1e-9, atol=1e-11)
    XC = X @ C  # the rows X C passed by the caller (the solver's axis-product route)
    np.testing.assert_allclose(
        fisher_curvature(cond, X, None, link_log_slope(u, name), XC_A=XC).numpy(), W,
        rtol=1e-10, atol=1e-12)
    # 1/2 tr(S^-1 dS_i S^-1 dS_j) with dS by autograd
    dS = torch.autograd.functional.jacobian(sigma, u).numpy()  # (n, n, p)
    Si = np.linalg.inv(sigma(u).numpy())
    A = [Si @ dS[:, :, i] for i in range(p)]
    trace = 0.5 * np.array([[np.trace(A[i] @ A[j]) for j in range(p)] for i in range(p)])
    np.testing.assert_allclose(W, trace, rtol=1e-10, atol=1e-12)
    # minus the Hessian of -1/2 log|S(u)| - 1/2 tr(S(u)^-1 Y), Y = S(u0) frozen
    Y = sigma(u).detach()

    def frozen(v):
        S = sigma(v)
        return -0.5 * torch.logdet(S) - 0.5 * torch.trace(torch.linalg.solve(S, Y))

    H = torch.autograd.functional.hessian(frozen, u).numpy()
    np.testing.assert_allclose(W, -H, rtol=1e-10, atol=1e-12)
    assert np.linalg.eigvalsh(W).min() >= -1e-12 * np.abs(W).max()
    if not smooth:  # DRD special case: 1/2 (s s^T) o (c c^T) o A o A
        c = np.diag(C.numpy())
        s = link_log_slope(u, name).numpy()
        An = X.numpy().T @ Si @ X.numpy()
        np.testing.assert_allclose(W, 0.5 * np.outer(s, s) * np.outer(c, c) * An * An,
                                   rtol=1e-10, atol=1e-12)
    assert index.numel() == p


def test_exact_curvature_is_the_derivative_of_seed_eq9():
    from skgpx.drd._solver import Config, Solver, State

    p, n = 10, 15
    X, y, u, G = _problem(p, n, 8)
    solver = Solver(Config(shape=(p,)), X, y, State(b=0.0, log={}, u=u))
    index = torch.tensor([1, 3, 4, 8])
    W = solver._exact_curvature(u, G, torch.tensor(0.3, dtype=T), index).numpy()
    h = 1e-5
    columns = []
    for i in index.tolist():
        up, down = u.clone(), u.clone()
        up[i] += h
        down[i] -= h
        diff = (_eq9_data_gradient(X, y, up, G, 0.3, "exp")
                - _eq9_data_gradient(X, y, down, G, 0.3, "exp")) / (2 * h)
        columns.append(-diff[index.numpy()])
    np.testing.assert_allclose(W, np.array(columns).T, rtol=1e-6, atol=1e-8)


# ------------------------------------------------------------------ 5. Laplace identity


@pytest.mark.parametrize("rank", [6, 30])  # r <= p' and r > p' (Sylvester's side)
def test_laplace_identity_three_forms(rank):
    p = 16
    rng = np.random.default_rng(9)
    Phi = rng.standard_normal((p, rank)) * 0.5
    K = Phi @ Phi.T + (1e-3 * np.eye(p) if rank < p else 0.0)
    B = rng.standard_normal((p, p))
    W = B @ B.T / p
    b, u = -1.0, rng.standard_normal(p)
    r = u - b
    logp = multivariate_normal.logpdf(u, b * np.ones(p), K)
    left = logp + 0.5 * p * math.log(2 * math.pi) - 0.5 * np.linalg.slogdet(np.linalg.inv(K) + W)[1]
    middle = -0.5 * r @ np.linalg.solve(K, r) - 0.5 * np.linalg.slogdet(np.eye(p) + K @ W)[1]
    np.testing.assert_allclose(left, middle, rtol=1e-10)
    if rank >= p:  # K = Phi Phi^T exactly: the whitened form
        v = np.linalg.lstsq(Phi, r, rcond=None)[0]
        logdet = laplace_logdet(torch.tensor(Phi), torch.tensor(W))
        np.testing.assert_allclose(-0.5 * v @ v - 0.5 * float(logdet), middle, rtol=1e-9)
    logdet = laplace_logdet(torch.tensor(Phi), torch.tensor(W))
    expected = np.linalg.slogdet(np.eye(p) + Phi @ Phi.T @ W)[1]
    np.testing.assert_allclose(float(logdet), expected, rtol=1e-10)


def test_frozen_laplace_logdet_truncation_is_within_its_bound():
    """The truncated log|I + D W D| is below the exact one by at most ``tol`` for every
    ``D <= D_max``; without truncation (small r, or an indefinite W) it is exact."""
    rng = np.random.default_rng(12)
    r = 300
    # a PSD W with a fast-decaying spectrum, so that truncation pays
    Q = np.linalg.qr(rng.standard_normal((r, r)))[0]
    W = (Q * (10.0 * 0.9 ** np.arange(r))) @ Q.T
    d_max = np.exp(rng.uniform(-1, 1, r))
    tol = 1e-4
    logdet = FrozenLaplaceLogdet(torch.tensor(W), torch.tensor(d_max), tol=tol)
    assert 0 < logdet.rank <= r // 2
    for scale in (1.0, 0.3, rng.uniform(0, 1, r)):
        d = d_max * scale
        exact = np.linalg.slogdet(np.eye(r) + d[:, None] * W * d[None, :])[1]
        approx = float(logdet(torch.tensor(d)))
        assert 0.0 <= exact - approx <= tol
    # the bound is not vacuous: a larger tolerance drops enough to show an error
    coarse = FrozenLaplaceLogdet(torch.tensor(W), torch.tensor(d_max), tol=1.0)
    exact = np.linalg.slogdet(np.eye(r) + d_max[:, None] * W * d_max[None, :])[1]
    assert 1e-3 < exact - float(coarse(torch.tensor(d_max))) <= 1.0
    # an indefinite W keeps the full matrix, exactly
    small = W - 0.01 * np.eye(r)
    full = FrozenLaplaceLogdet(torch.tensor(small), torch.tensor(0.5 * np.ones(r)))
    assert full.rank == r
    np.testing.assert_allclose(float(full(torch.tensor(0.5 * np.ones(r)))),
                               np.linalg.slogdet(np.eye(r) + 0.25 * small)[1], rtol=1e-12)


# ------------------------------------------------------------------ 6. posterior


@pytest.mark.parametrize("p, n", SIZES)
def test_posterior_equals_direct_conditioning(p, n):
    X, y, u, G = _problem(p, n, 10)
    s2 = 0.2
    Z = (X * link(u, "exp").sqrt()) @ torch.tensor(_dense(G))
    cond = Conditional.condition(Z, y, torch.tensor(s2, dtype=T))
    assert cond.dual == (n <= Z.shape[1])
    C = _prior_cov(G, u)
    Xn, yn = X.numpy(), y.numpy()
    Sy = Xn @ C @ Xn.T + s2 * np.eye(n)
    mean = C @ Xn.T @ np.linalg.solve(Sy, yn)
    cov = C - C @ Xn.T @ np.linalg.solve(Sy, Xn @ C)
    DG = np.sqrt(np.exp(u.numpy()))[:, None] * _dense(G)
    np.testing.assert_allclose(DG @ cond.mean.numpy(), mean, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(DG @ cond.covariance().numpy() @ DG.T, cov, rtol=1e-9, atol=1e-12)
    quadratic = Xn.T @ np.linalg.solve(Sy, Xn)  # X^T S_n^-1 X, with and without X^T X
    for gram in (None, X.T @ X):
        np.testing.assert_allclose(cond.quadratic_form(X, gram).numpy(), quadratic, rtol=1e-9,
                                   atol=1e-10)
    Xq = torch.tensor(np.random.default_rng(11).standard_normal((5, p)))
    Zq = (Xq * link(u, "exp").sqrt()) @ torch.tensor(_dense(G))
    np.testing.assert_allclose(cond.variance(Zq).numpy(),
                               np.einsum("ij,jk,ik->i", Xq.numpy(), cov, Xq.numpy()),
                               rtol=1e-9, atol=1e-12)
