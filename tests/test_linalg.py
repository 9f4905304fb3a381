"""Jittered Cholesky, solves and log-determinants against numpy/scipy."""

import numpy as np
import pytest
import scipy.linalg
import torch

from skgpx.linalg import (
    NotPositiveDefiniteError,
    cholesky_solve,
    jittered_cholesky,
    logdet_from_cholesky,
    lower_matmul,
    matheron_update,
    solve_lower,
    spd_logdet,
)

RNG = np.random.RandomState(0)
A = RNG.randn(6, 6)
SPD = A @ A.T + 6 * np.eye(6)
B = RNG.randn(6, 3)


def test_positive_definite_matrix_gets_no_jitter(recwarn):
    L, extra = jittered_cholesky(torch.tensor(SPD))
    assert extra == 0.0 and not recwarn.list
    np.testing.assert_allclose(L.numpy(), np.linalg.cholesky(SPD), atol=1e-12)


def test_input_is_not_modified():
    matrix = torch.tensor(np.ones((4, 4)))  # rank one: needs jitter
    before = matrix.clone()
    with pytest.warns(UserWarning, match="jitter"):
        jittered_cholesky(matrix)
    assert torch.equal(matrix, before)


def test_singular_matrix_escalates_and_warns():
    v = RNG.randn(5, 2)
    singular = torch.tensor(v @ v.T)  # rank 2
    with pytest.warns(UserWarning, match=r"added a jitter of .* of its mean diagonal"):
        L, extra = jittered_cholesky(singular, jitter=1e-8)
    scale = float(singular.diagonal().mean())
    ratio = extra / scale
    # the jitter is one of the escalation steps 1e-8, 1e-7, ..., 1e-3
    assert 1e-8 <= ratio <= 1e-3
    assert np.isclose(np.log10(ratio), np.round(np.log10(ratio)))
    np.testing.assert_allclose((L @ L.T).numpy(), singular.numpy() + extra * np.eye(5),
                               atol=1e-10)


def test_base_jitter_is_always_added():
    L, extra = jittered_cholesky(torch.tensor(SPD), base_jitter=0.5)
    assert extra == 0.0
    np.testing.assert_allclose((L @ L.T).numpy(), SPD + 0.5 * np.eye(6), atol=1e-10)


def test_hopeless_matrix_raises_linalg_error_with_advice():
    indefinite = torch.tensor(np.diag([1.0, -1.0, 1.0]))
    with pytest.raises(np.linalg.LinAlgError, match="not positive definite.*noise"):
        jittered_cholesky(indefinite)
    with pytest.raises(NotPositiveDefiniteError, match="try something"):
        jittered_cholesky(indefinite, jitter=0.0, advice="try something")


def test_non_finite_matrix_raises():
    bad = torch.tensor(SPD.copy())
    bad[0, 1] = np.nan
    with pytest.raises(NotPositiveDefiniteError, match="NaN or infinite"):
        jittered_cholesky(bad)


def test_solves_and_logdet():
    L = torch.tensor(np.linalg.cholesky(SPD))
    np.testing.assert_allclose(cholesky_solve(L, torch.tensor(B)).numpy(),
                               np.linalg.solve(SPD, B), atol=1e-12)
    np.testing.assert_allclose(solve_lower(L, torch.tensor(B)).numpy(),
                               scipy.linalg.solve_triangular(L.numpy(), B, lower=True),
                               atol=1e-12)
    np.testing.assert_allclose(float(logdet_from_cholesky(L)), np.linalg.slogdet(SPD)[1],
                               rtol=1e-12)


def test_spd_logdet_gradient_is_the_inverse():
    rng = np.random.default_rng(13)
    B = rng.standard_normal((7, 7))
    base = torch.tensor(B @ B.T + 7 * np.eye(7))
    direction = torch.tensor(rng.standard_normal((7, 7)))
    direction = direction + direction.T
    t = torch.zeros((), dtype=torch.float64, requires_grad=True)
    (grad,) = torch.autograd.grad(spd_logdet(base + t * direction), t)
    expected = np.trace(np.linalg.solve(base.numpy(), direction.numpy()))
    np.testing.assert_allclose(float(grad), expected, rtol=1e-12)
    np.testing.assert_allclose(float(spd_logdet(base)), np.linalg.slogdet(base.numpy())[1],
                               rtol=1e-13)


def test_quiet_jitter_factorises_a_singular_matrix_without_warning(recwarn):
    v = torch.tensor(RNG.randn(5, 2))
    singular = v @ v.T  # rank 2
    L, extra = jittered_cholesky(singular, jitter=1e-12, warn=False)
    assert extra > 0 and not recwarn.list
    np.testing.assert_allclose((L @ L.T).numpy(), singular.numpy() + extra * np.eye(5), atol=1e-10)


def test_matheron_update_is_the_solve_of_the_residual_with_broadcasting():
    L = torch.linalg.cholesky(torch.tensor(SPD))
    y = torch.tensor(RNG.randn(6, 1, 2))
    f = torch.tensor(RNG.randn(6, 4, 2))
    e = torch.tensor(RNG.randn(6, 4, 2))
    v = matheron_update(L, y, f, e)
    expected = np.linalg.solve(SPD, (y.numpy() - f.numpy() - e.numpy()).reshape(6, -1))
    assert v.shape == (6, 4, 2)
    np.testing.assert_allclose(v.numpy().reshape(6, -1), expected, rtol=1e-10)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_gram_equals_the_plain_product(dtype):
    # gram (syrk) against numpy, on its BLAS route and on the plain route (a
    # non-contiguous view, autograd)
    from skgpx.linalg import gram

    rng = np.random.default_rng(0)
    A = torch.tensor(rng.standard_normal((7, 40)), dtype=dtype)
    tol = 1e-12 if dtype == torch.float64 else 1e-4
    a = A.double().numpy()
    for G in (gram(A), gram(A.T.contiguous().T), gram(A.clone().requires_grad_())):
        assert G.dtype == dtype
        np.testing.assert_allclose(G.detach().double().numpy(), a @ a.T, rtol=tol, atol=tol)


@pytest.mark.parametrize("m", [7, 64, 257])
def test_lower_matmul_equals_the_full_product(m):
    # row blocks that skip the zeros: the same product, whatever m and the block edges
    rng = np.random.default_rng(m)
    L = torch.tril(torch.tensor(rng.standard_normal((m, m))))
    B = torch.tensor(rng.standard_normal((m, 33)))
    out = torch.full((m, 33), np.nan, dtype=torch.float64)
    assert lower_matmul(L, B, out) is out
    np.testing.assert_allclose(out.numpy(), (L @ B).numpy(), rtol=1e-12, atol=1e-12)
    # a column-major factor: the blocks are strided views, handed to BLAS as they are
    out.fill_(np.nan)
    lower_matmul(L.T.contiguous().T, B, out)
    np.testing.assert_allclose(out.numpy(), (L @ B).numpy(), rtol=1e-12, atol=1e-12)


def test_a_differentiable_base_jitter_stays_on_the_graph():
    # d logdet(K + c s I) / d s includes the jitter's share c tr((K + c s I)^-1)
    s = torch.tensor(2.0, dtype=torch.float64, requires_grad=True)
    K = s * torch.tensor(SPD)
    factor, _ = jittered_cholesky(K, base_jitter=0.1 * s)
    logdet_from_cholesky(factor).backward()
    expected = np.trace(np.linalg.solve(2.0 * SPD + 0.2 * np.eye(6), SPD + 0.1 * np.eye(6)))
    assert float(s.grad) == pytest.approx(expected, rel=1e-12)
