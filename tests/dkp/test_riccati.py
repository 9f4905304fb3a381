"""Riccati (CARE) and Lyapunov solvers of the DKP layer update against scipy."""

import numpy as np
import pytest
import scipy.linalg
import torch

from skgpx.dkp._riccati import (
    CARENoSolutionError,
    CARESolveError,
    solve_care,
    solve_care_closed_form,
    solve_care_kleinman,
    solve_lyapunov_symmetrizable,
)


def _random_spd(rng, P, floor):
    M = rng.randn(P, P)
    return M @ M.T / P + floor * np.eye(P)


def _care_rel_residual(alpha, U, Q, G):
    return np.abs(2 * alpha * G - G @ U @ G + Q).max() / np.abs(Q).max()


def _rel(a, b):
    return np.linalg.norm(a - b) / np.linalg.norm(b)


@pytest.mark.parametrize("P", [5, 50, 200])
@pytest.mark.parametrize("alpha", [0.5, 0.0])
def test_care_solvers_match_scipy(P, alpha):
    rng = np.random.RandomState(1000 + P)
    U, Q = _random_spd(rng, P, 0.5), _random_spd(rng, P, 0.1)
    expected = scipy.linalg.solve_continuous_are(alpha * np.eye(P), np.eye(P), Q,
                                                 np.linalg.inv(U))
    Ut, Qt = torch.tensor(U), torch.tensor(Q)
    G_cf = solve_care_closed_form(alpha, Ut, Qt).numpy()
    G_kl, n_iter, converged = solve_care_kleinman(alpha, Ut, Qt, None, max_iter=200)
    G_auto, info = solve_care(alpha, Ut, Qt)
    assert converged and 0 < n_iter < 30
    assert info == {"method": "closed_form", "n_iter": 0, "converged": True}
    for G in (G_cf, G_kl.numpy(), G_auto.numpy()):
        assert _rel(G, expected) < 1e-10
        assert _care_rel_residual(alpha, U, Q, G) < 1e-10
        np.testing.assert_array_equal(G, G.T)
    # Kleinman through solve_care, and from the identity (cold) start
    for init in (None, torch.eye(P, dtype=torch.float64)):
        G, info = solve_care(alpha, Ut, Qt, method="kleinman", initial=init)
        assert info["method"] == "kleinman" and info["converged"]
        assert _rel(G.numpy(), expected) < 1e-10


def test_closed_form_negative_alpha_and_cancellation():
    # alpha < 0 with mu << alpha^2: alpha + sqrt(alpha^2 + mu) would lose all digits
    rng = np.random.RandomState(7)
    P, alpha = 6, -1e4
    U, Q = _random_spd(rng, P, 0.5), 1e-6 * _random_spd(rng, P, 0.1)
    G = solve_care_closed_form(alpha, torch.tensor(U), torch.tensor(Q)).numpy()
    expected = scipy.linalg.solve_continuous_are(alpha * np.eye(P), np.eye(P), Q,
                                                 np.linalg.inv(U))
    assert _rel(G, expected) < 1e-8  # G ~ Q / (2 |alpha|)
    assert np.linalg.eigvalsh(G).min() > 0


@pytest.mark.parametrize("shift", [0.0, 0.3, -1.0])
def test_lyapunov_symmetrizable_matches_scipy(shift):
    rng = np.random.RandomState(11)
    n = 30
    P, U = _random_spd(rng, n, 0.5), _random_spd(rng, n, 0.5)
    R = rng.randn(n, n)
    R = R + R.T
    A = shift * np.eye(n) - P @ U
    expected = scipy.linalg.solve_continuous_lyapunov(A, -R)
    X = solve_lyapunov_symmetrizable(torch.tensor(P), torch.tensor(U), torch.tensor(R),
                                     shift).numpy()
    assert _rel(X, expected) < 1e-10
    assert np.abs(A @ X + X @ A.T + R).max() / np.abs(R).max() < 1e-10


def test_lyapunov_symmetrizable_rejects_unstable_operator():
    rng = np.random.RandomState(12)
    P, U = torch.tensor(_random_spd(rng, 5, 0.5)), torch.tensor(_random_spd(rng, 5, 0.5))
    R = torch.eye(5, dtype=torch.float64)
    with pytest.raises(CARESolveError, match="not stable"):
        solve_lyapunov_symmetrizable(P, U, R, shift=100.0)
    with pytest.raises(CARESolveError, match="not positive definite"):
        solve_lyapunov_symmetrizable(-P, U, R, shift=0.0)


@pytest.mark.parametrize("r", [0.1, 1.0, 3.0])
def test_linear_deep_kernel_process_care(r):
    # (1 - r) G - G G_prev^-1 G + r G_next = 0; for r = 1, G = G_prev # G_next
    rng = np.random.RandomState(int(10 * r))
    P = 20
    G_prev, G_next = _random_spd(rng, P, 0.1), _random_spd(rng, P, 0.1)
    U, Q = np.linalg.inv(G_prev), r * G_next
    U = (U + U.T) / 2
    for method in ("closed_form", "kleinman"):
        G, info = solve_care((1 - r) / 2, torch.tensor(U), torch.tensor(Q), method=method)
        G = G.numpy()
        assert info["method"] == method and info["converged"]
        residual = (1 - r) * G - G @ np.linalg.solve(G_prev, G) + r * G_next
        assert np.abs(residual).max() / np.abs(r * G_next).max() < 1e-8
        assert np.linalg.eigvalsh(G).min() > 0
        if r == 1.0:
            half = np.real(scipy.linalg.sqrtm(G_prev))
            half_inv = np.linalg.inv(half)
            mean = half @ np.real(scipy.linalg.sqrtm(half_inv @ G_next @ half_inv)) @ half
            assert _rel(G, mean) < 1e-8


def _indefinite_care(P, alpha, seed):
    # G* PD and M = G*^1/2 U G*^1/2 with one eigenvalue in (alpha, 0): U is indefinite
    # (congruent to M), Q = G*^1/2 (M - 2 alpha I) G*^1/2 is PD for alpha < 0, and the
    # eigenvalues of G* U (those of M) exceed alpha, so G* is the stabilising solution.
    rng = np.random.RandomState(seed)
    O1, O2 = (np.linalg.qr(rng.randn(P, P))[0] for _ in range(2))
    g, m = np.geomspace(0.1, 10.0, P), np.geomspace(0.1, 10.0, P)
    m[0] = 0.4 * alpha
    half = (O1 * np.sqrt(g)) @ O1.T
    M = (O2 * m) @ O2.T
    U = np.linalg.solve(half, np.linalg.solve(half, M).T)
    Q = half @ (M - 2 * alpha * np.eye(P)) @ half
    return (U + U.T) / 2, (Q + Q.T) / 2, (O1 * g) @ O1.T


@pytest.mark.parametrize("start", ["default", "identity", "far"])
def test_indefinite_U_falls_back_to_kleinman(start):
    alpha = -0.3
    U, Q, G_star = _indefinite_care(20, alpha, seed=0)
    assert np.linalg.eigvalsh(U).min() < 0 < np.linalg.eigvalsh(Q).min()
    Ut, Qt = torch.tensor(U), torch.tensor(Q)
    with pytest.raises(CARESolveError):
        solve_care_closed_form(alpha, Ut, Qt)
    # the default start lies below G*, from where the iteration converges directly (from
    # the identity it runs off to infinity here, and solve_care has to retry)
    _, n_iter, converged = solve_care_kleinman(alpha, Ut, Qt)
    assert converged and n_iter < 20
    initial = {"default": None, "identity": torch.eye(20, dtype=torch.float64),
               "far": 30.0 * torch.eye(20, dtype=torch.float64)}[start]
    G, info = solve_care(alpha, Ut, Qt, initial=initial)
    G = G.numpy()
    assert info["method"] == "kleinman" and info["converged"]
    assert np.isfinite(G).all() and np.linalg.eigvalsh(G).min() > 0
    assert _care_rel_residual(alpha, U, Q, G) < 1e-8
    assert _rel(G, G_star) < 1e-8


def test_no_positive_definite_solution_raises_with_advice():
    # alpha >= 0, Q PD and U indefinite: G U G = Q + 2 alpha G would be PD, so U would
    # be PD by congruence; no PD solution exists and nothing finite may be returned
    rng = np.random.RandomState(5)
    U = _random_spd(rng, 10, 0.5)
    v = rng.randn(10)
    v /= np.linalg.norm(v)
    U -= (np.linalg.eigvalsh(U).max() + 1.0) * np.outer(v, v)
    with pytest.raises(CARESolveError, match="increase jitter, noise_variance, dof or mirror_reg"):
        solve_care(0.5, torch.tensor(U), torch.eye(10, dtype=torch.float64))
    G, n_iter, converged = solve_care_kleinman(0.5, torch.tensor(U),
                                               torch.eye(10, dtype=torch.float64))
    assert not converged and torch.isfinite(G).all()
    assert bool((torch.linalg.eigvalsh(G) > 0).all())


def test_care_bad_inputs_raise():
    rng = np.random.RandomState(6)
    U, Q = torch.tensor(_random_spd(rng, 5, 0.5)), torch.tensor(_random_spd(rng, 5, 0.1))
    not_pd = torch.tensor(np.diag([1.0, -1.0, 1.0, 1.0, 1.0]))
    with pytest.raises(CARESolveError, match="starting point is not positive definite"):
        solve_care_kleinman(0.5, U, Q, not_pd)
    bad = U.clone()
    bad[0, 1] = bad[1, 0] = float("nan")
    for method in ("auto", "closed_form", "kleinman"):
        with pytest.raises(CARESolveError):
            solve_care(0.5, bad, Q, method=method)
    with pytest.raises(CARESolveError, match="no real solution"):
        solve_care_closed_form(0.0, U, -Q)  # alpha^2 + mu < 0
    with pytest.raises(CARENoSolutionError, match="no positive definite solution"):
        solve_care_closed_form(-1.0, U, torch.zeros_like(Q))  # G = 0
    # with U positive definite the closed form is conclusive: auto does not try Kleinman
    with pytest.raises(CARENoSolutionError):
        solve_care(0.0, U, -Q, method="auto")
    with pytest.raises(ValueError, match="Unknown CARE method"):
        solve_care(0.5, U, Q, method="schur")


def test_care_closed_form_float32():
    rng = np.random.RandomState(8)
    P = 40
    U, Q = _random_spd(rng, P, 0.5), _random_spd(rng, P, 0.1)
    G = solve_care_closed_form(0.5, torch.tensor(U, dtype=torch.float32),
                               torch.tensor(Q, dtype=torch.float32))
    assert G.dtype == torch.float32
    assert _care_rel_residual(0.5, U, Q, G.double().numpy()) < 1e-4
    # the default tol (1e-10) is floored for float32, so Kleinman can converge
    G, n_iter, converged = solve_care_kleinman(0.5, torch.tensor(U, dtype=torch.float32),
                                               torch.tensor(Q, dtype=torch.float32))
    assert converged and n_iter < 30 and G.dtype == torch.float32
    assert _care_rel_residual(0.5, U, Q, G.double().numpy()) < 1e-4


@pytest.mark.gpu
def test_care_solvers_on_cuda_match_cpu():
    rng = np.random.RandomState(9)
    U, Q = _random_spd(rng, 30, 0.5), _random_spd(rng, 30, 0.1)
    cpu = solve_care_closed_form(0.5, torch.tensor(U), torch.tensor(Q)).numpy()
    Uc, Qc = torch.tensor(U, device="cuda"), torch.tensor(Q, device="cuda")
    for method in ("closed_form", "kleinman"):
        G, info = solve_care(0.5, Uc, Qc, method=method)
        assert G.device.type == "cuda" and info["converged"]
        assert _rel(G.cpu().numpy(), cpu) < 1e-10
