"""Matrix-free kernel operator, pivoted Cholesky, preconditioners and block CG against
dense torch linear algebra."""

import numpy as np
import pytest
import torch
from sklearn.gaussian_process.kernels import (
    RBF,
    ConstantKernel,
    Matern,
    RationalQuadratic,
    WhiteKernel,
)

from skgpx.kernels import TorchKernel
from skgpx.linalg import (
    CGResult,
    ConjugateGradientError,
    JacobiPreconditioner,
    KernelOperator,
    PivotedCholeskyPreconditioner,
    block_cg,
    pivoted_cholesky,
)

N = 53  # prime: no chunk size below divides it


def _data(n=N, d=2, seed=0, dtype=torch.float64, device="cpu", low=0.0, high=5.0):
    g = torch.Generator().manual_seed(seed)
    X = low + (high - low) * torch.rand(n, d, generator=g, dtype=torch.float64)
    return X.to(device=device, dtype=dtype)


def _noise(n, seed=1, dtype=torch.float64, device="cpu", low=1e-2, high=5e-2):
    g = torch.Generator().manual_seed(seed)
    return (low + (high - low) * torch.rand(n, generator=g, dtype=torch.float64)).to(device, dtype)


def _dense(tk, X, noise, part="signal"):
    return tk(X, theta=None, part=part) + torch.diag(noise)


KERNELS = {
    "const*rbf": (ConstantKernel(2.0) * RBF(0.8), True),
    "rbf_ard": (RBF([0.5, 2.0]), True),
    "matern12 (generic path)": (ConstantKernel(0.5) * Matern(0.7, nu=0.5), False),
    "matern32": (Matern(1.1, nu=1.5), True),
    "matern52": (ConstantKernel(1.5) * Matern(0.9, nu=2.5), True),
    "rq (generic path)": (RationalQuadratic(1.0, alpha=0.7), False),
    "rbf+rq (generic path)": (RBF(1.0) + RationalQuadratic(0.5, alpha=2.0), False),
}


@pytest.mark.parametrize("name", sorted(KERNELS))
@pytest.mark.parametrize("rows_per_chunk", [1, 7, 16, N, None])
def test_operator_matches_dense_matrix(name, rows_per_chunk):
    kernel, fast = KERNELS[name]
    tk, X, noise = TorchKernel(kernel), _data(), _noise(N)
    op = KernelOperator(tk, X, None, noise, rows_per_chunk=rows_per_chunk)
    assert (op._fast is not None) == fast  # both evaluation paths are compared below
    dense = _dense(tk, X, noise)
    V = torch.randn(N, 4, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    # the fast path expands |x - y|^2: error ~ eps * max|x/l|^2 per entry
    torch.testing.assert_close(op.matmul(V), dense @ V, rtol=0, atol=1e-12)
    torch.testing.assert_close(op.matmul(V[:, 0]), dense @ V[:, 0], rtol=0, atol=1e-12)
    torch.testing.assert_close(op.diagonal(), dense.diagonal(), rtol=0, atol=1e-14)
    index = torch.tensor([0, 17, 52, 5])
    torch.testing.assert_close(op.rows(index), dense[index], rtol=0, atol=1e-14)
    torch.testing.assert_close(op.rows([3]), dense[[3]], rtol=0, atol=1e-14)
    assert op.shape == (N, N) and op.dtype == torch.float64 and op.device.type == "cpu"


@pytest.mark.parametrize("name", ["const*rbf", "rq (generic path)"])
@pytest.mark.parametrize("stop", [0, 1, 7, 20, N, N + 5])
def test_operator_leading_rows_of_the_product(name, stop):
    # what the pathwise CG fit times to estimate its cost: the first rows of K_A V alone
    tk, X, noise = TorchKernel(KERNELS[name][0]), _data(), _noise(N)
    op = KernelOperator(tk, X, None, noise, rows_per_chunk=7)
    V = torch.randn(N, 3, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    part = op.matmul(V, stop=stop)
    assert part.shape == (min(stop, N), 3)
    torch.testing.assert_close(part, op.matmul(V)[:stop], rtol=0, atol=1e-14)


@pytest.mark.parametrize("part", ["signal", "full"])
def test_operator_white_kernel_part(part):
    # Cross evaluations k(X_c, X) leave WhiteKernel out: with part="full" the operator
    # must still put it on the diagonal, as the dense k(X) does.
    tk = TorchKernel(ConstantKernel(1.3) * RBF(0.6) + WhiteKernel(0.07))
    X, noise = _data(), _noise(N)
    op = KernelOperator(tk, X, None, noise, part=part, rows_per_chunk=10)
    dense = _dense(tk, X, noise, part=part)
    V = torch.randn(N, 3, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    torch.testing.assert_close(op.matmul(V), dense @ V, rtol=0, atol=1e-12)
    torch.testing.assert_close(op.rows([4, 9]), dense[[4, 9]], rtol=0, atol=1e-14)
    white = 0.07 if part == "full" else 0.0
    torch.testing.assert_close(op.shift, noise + white, rtol=0, atol=1e-14)
    torch.testing.assert_close(op.diagonal(include_shift=False), torch.full((N,), 1.3,
                               dtype=torch.float64), rtol=0, atol=1e-14)


def test_operator_uses_given_theta_and_scalar_noise():
    kernel = ConstantKernel(1.0) * RBF(1.0)
    tk, X = TorchKernel(kernel), _data()
    theta = torch.tensor(np.log([3.0, 0.4]), dtype=torch.float64)
    op = KernelOperator(tk, X, theta, 0.05)
    dense = TorchKernel(ConstantKernel(3.0) * RBF(0.4))(X)
    dense = dense + 0.05 * torch.eye(N, dtype=torch.float64)
    V = torch.randn(N, 2, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    torch.testing.assert_close(op.matmul(V), dense @ V, rtol=0, atol=1e-12)


def test_operator_rejects_bad_input():
    tk, X = TorchKernel(RBF(1.0)), _data()
    with pytest.raises(ValueError, match="non-negative"):
        KernelOperator(tk, X, None, -1.0)
    with pytest.raises(ValueError, match=r"noise must be a scalar or have shape \(53,\)"):
        KernelOperator(tk, X, None, torch.ones(5, dtype=torch.float64))
    with pytest.raises(ValueError, match="rows_per_chunk=0"):
        KernelOperator(tk, X, None, 0.1, rows_per_chunk=0)


# ---------------------------------------------------------------- pivoted Cholesky

def _rbf_problem(n=N, noise=1e-2, seed=0, length_scale=0.8):
    tk, X = TorchKernel(ConstantKernel(1.0) * RBF(length_scale)), _data(n, seed=seed)
    return KernelOperator(tk, X, None, torch.full((n,), noise, dtype=torch.float64))


def _dense_of(op):
    return op.matmul(torch.eye(op.shape[0], dtype=op.dtype))


def test_pivoted_cholesky_full_rank_reproduces_matrix():
    op = _rbf_problem()
    A = _dense_of(op)
    L = pivoted_cholesky(op.diagonal(), op.rows, N)
    assert L.shape == (N, N)
    torch.testing.assert_close(L @ L.T, A, rtol=0, atol=1e-10)


def test_pivoted_cholesky_trace_error_decreases_with_rank():
    op = _rbf_problem()
    A = _dense_of(op)
    L = pivoted_cholesky(op.diagonal(), op.rows, N)
    errors = [float(torch.trace(A - L[:, :k] @ L[:, :k].T)) for k in range(N + 1)]
    assert all(b < a for a, b in zip(errors[:-1], errors[1:]))  # strictly, A has full rank
    # greedy: the first pivot is the largest diagonal, and a smaller rank gives a prefix
    L5 = pivoted_cholesky(op.diagonal(), op.rows, 5)
    torch.testing.assert_close(L5, L[:, :5], rtol=0, atol=1e-13)
    # the trace of the residual equals that of A - L L^T (exactly so for a PSD residual)
    assert errors[5] == pytest.approx(float(torch.trace(A)) - float((L5**2).sum()), rel=1e-10)


def test_pivoted_cholesky_stops_at_tol():
    op = _rbf_problem(noise=0.0)  # RBF: fast spectral decay, the trace tolerance bites early
    A = _dense_of(op)
    tol = 1e-3
    L = pivoted_cholesky(op.diagonal(), op.rows, N, tol=tol)
    k = L.shape[1]
    assert 0 < k < N
    trace = float(torch.trace(A))
    assert float(torch.trace(A - L @ L.T)) <= tol * trace * (1 + 1e-9)
    assert float(torch.trace(A - L[:, :-1] @ L[:, :-1].T)) > tol * trace


def test_woodbury_preconditioner_equals_dense_solve():
    op = _rbf_problem()
    L = pivoted_cholesky(op.diagonal(include_shift=False),
                         lambda i: op.rows(i, include_shift=False), 12)
    D = _noise(N, seed=5)  # heteroscedastic
    P = L @ L.T + torch.diag(D)
    R = torch.randn(N, 3, generator=torch.Generator().manual_seed(6), dtype=torch.float64)
    out = PivotedCholeskyPreconditioner(L, D)(R)
    torch.testing.assert_close(out, torch.linalg.solve(P, R), rtol=1e-10, atol=0)
    # tiny noise: the dense solve is itself ill-conditioned (cond ~ 1e10), so check the
    # normwise backward error ||P x - R|| / (||P|| ||x|| + ||R||), a few eps when stable
    tiny = torch.full((N,), 1e-9, dtype=torch.float64)
    out = PivotedCholeskyPreconditioner(L, tiny)(R)
    P = L @ L.T + torch.diag(tiny)
    backward = torch.linalg.norm(P @ out - R) / (
        torch.linalg.matrix_norm(P, 2) * torch.linalg.norm(out) + torch.linalg.norm(R))
    assert float(backward) < 1e-14


def test_preconditioners_from_operator():
    op = _rbf_problem()
    R = torch.randn(N, 2, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    torch.testing.assert_close(JacobiPreconditioner(op.diagonal())(R), R / op.diagonal()[:, None])
    pc = PivotedCholeskyPreconditioner.from_operator(op, N)  # full rank: P = K_A
    torch.testing.assert_close(pc(R), torch.linalg.solve(_dense_of(op), R), rtol=1e-9, atol=0)
    with pytest.raises(ValueError, match="positive noise"):
        PivotedCholeskyPreconditioner(pc.L, torch.zeros(N, dtype=torch.float64))
    with pytest.raises(ValueError, match="positive diagonal"):
        JacobiPreconditioner(torch.zeros(N, dtype=torch.float64))


# ---------------------------------------------------------------- block CG

def _rhs(n, r, seed=8, dtype=torch.float64):
    return torch.randn(n, r, generator=torch.Generator().manual_seed(seed), dtype=dtype)


@pytest.mark.parametrize("preconditioner", ["none", "jacobi", "pivchol"])
def test_block_cg_solves_to_tolerance(preconditioner):
    op = _rbf_problem(n=120, noise=5e-2)
    A = _dense_of(op)
    pre = {"none": None, "jacobi": JacobiPreconditioner(op.diagonal()),
           "pivchol": PivotedCholeskyPreconditioner.from_operator(op, 10)}[preconditioner]
    B = _rhs(120, 5)
    tol = 1e-8
    result = block_cg(op, B, preconditioner=pre, tol=tol)
    assert isinstance(result, CGResult) and result.converged and 0 < result.n_iter < 120
    true_rel = torch.linalg.norm(B - A @ result.solution, dim=0) / torch.linalg.norm(B, dim=0)
    # recursive and true residuals differ by ~ eps * cond * iterations, far below tol
    assert bool((true_rel <= tol + 1e-11).all())
    torch.testing.assert_close(result.relative_residuals, true_rel, rtol=0, atol=1e-11)
    exact = torch.linalg.solve(A, B)
    cond = float(torch.linalg.cond(A))
    error = torch.linalg.norm(result.solution - exact, dim=0) / torch.linalg.norm(exact, dim=0)
    assert bool((error <= cond * tol).all())


def test_block_cg_callback_sees_every_iteration():
    op = _rbf_problem(n=120, noise=1e-2)
    B = _rhs(120, 3)
    calls = []
    result = block_cg(op, B, tol=1e-8, callback=lambda k, rel: calls.append((k, rel.clone())))
    assert [k for k, _ in calls] == list(range(1, result.n_iter + 1))
    assert all(rel.shape == (3,) for _, rel in calls)
    assert float(calls[-1][1].max()) <= 1e-8 < float(calls[0][1].max())
    # a float32 solve that restarts from its true residual (see the test below): the
    # count runs on through the restart
    tk = TorchKernel(ConstantKernel(1.0) * RBF(0.5))
    op32 = KernelOperator(tk, _data(300).float(), None, 1e-3)
    first, calls = block_cg(op32, _rhs(300, 4).float(), tol=1e-4, max_iter=2000), []
    result = block_cg(op32, _rhs(300, 4).float(), tol=1e-4, max_iter=2000,
                      callback=lambda k, rel: calls.append(k))
    assert calls == list(range(1, result.n_iter + 1)) and result.n_iter == first.n_iter


def test_block_cg_zero_column_and_vector_rhs():
    op = _rbf_problem()
    B = _rhs(N, 3)
    B[:, 1] = 0.0
    result = block_cg(op, B, tol=1e-10)
    assert result.converged
    assert bool((result.solution[:, 1] == 0).all()) and float(result.relative_residuals[1]) == 0.0
    exact = torch.linalg.solve(_dense_of(op), B)
    torch.testing.assert_close(result.solution, exact, rtol=0, atol=1e-7)
    vector = block_cg(op.matmul, B[:, 0], tol=1e-10)  # a plain callable, a 1-D rhs
    assert vector.solution.shape == (N,) and vector.relative_residuals.shape == (1,)
    torch.testing.assert_close(vector.solution, exact[:, 0], rtol=0, atol=1e-7)
    all_zero = block_cg(op, torch.zeros(N, 2, dtype=torch.float64))
    assert all_zero.converged and all_zero.n_iter == 0 and not all_zero.solution.any()


def test_block_cg_warm_start():
    op = _rbf_problem(n=120, noise=1e-2)
    B = _rhs(120, 4)
    cold = block_cg(op, B, tol=1e-10)
    rough = block_cg(op, B, tol=1e-4)
    warm = block_cg(op, B, tol=1e-10, x0=rough.solution)
    assert cold.converged and warm.converged
    assert warm.n_iter < cold.n_iter
    torch.testing.assert_close(warm.solution, cold.solution, rtol=0, atol=1e-6)
    # starting at the solution: nothing to do, the start is returned
    done = block_cg(op, B, tol=1e-6, x0=cold.solution)
    assert done.n_iter == 0 and done.converged and torch.equal(done.solution, cold.solution)


def test_pivoted_cholesky_needs_fewer_iterations_than_jacobi():
    op = _rbf_problem(n=200, noise=1e-3, length_scale=1.0)  # ~250 vs ~15 iterations
    B = _rhs(200, 4)
    jacobi = block_cg(op, B, preconditioner=JacobiPreconditioner(op.diagonal()), tol=1e-6)
    pivchol = block_cg(op, B, preconditioner=PivotedCholeskyPreconditioner.from_operator(op, 50),
                       tol=1e-6)
    assert jacobi.converged and pivchol.converged
    assert pivchol.n_iter < jacobi.n_iter / 2
    A = _dense_of(op)
    for result in (jacobi, pivchol):  # both really solved the system (true residuals)
        true_rel = torch.linalg.norm(B - A @ result.solution, dim=0) / torch.linalg.norm(B, dim=0)
        assert bool((true_rel <= 1e-6 + 1e-9).all())


def test_block_cg_max_iter_reached():
    op = _rbf_problem(n=120, noise=1e-3)
    result = block_cg(op, _rhs(120, 3), tol=1e-12, max_iter=5)
    assert result.n_iter == 5 and not result.converged
    assert bool((result.relative_residuals > 1e-12).any())


def _check_float32(device):
    op64 = _rbf_problem(n=120, noise=5e-2)
    tk = TorchKernel(ConstantKernel(1.0) * RBF(0.8))
    X32 = _data(120, dtype=torch.float32, device=device)
    op32 = KernelOperator(tk, X32, None, torch.full((120,), 5e-2, device=device))
    B = _rhs(120, 3)
    tol = 1e-4
    result = block_cg(op32, B.float().to(device), tol=tol,
                      preconditioner=JacobiPreconditioner(op32.diagonal()))
    assert result.converged and result.solution.dtype == torch.float32
    solution = result.solution.cpu().double()
    A = _dense_of(op64)
    exact = torch.linalg.solve(A, B)
    # float32: the matrix itself carries ~1e-6 relative error (its GEMM expansion), so the
    # solution error is bounded by cond * (tol + 1e-5), cond ~ 350 here
    cond = float(torch.linalg.cond(A))
    error = torch.linalg.norm(solution - exact, dim=0) / torch.linalg.norm(exact, dim=0)
    assert bool((error <= cond * (tol + 1e-5)).all())
    true_rel = torch.linalg.norm(B - A @ solution, dim=0)
    assert bool((true_rel / torch.linalg.norm(B, dim=0) <= tol + 1e-5).all())


def test_block_cg_float32():
    _check_float32("cpu")


def test_block_cg_float32_reports_true_residual():
    # cond ~ 2e4: float32 cannot reach tol=1e-4 (attainable ~ eps * cond ~ 1e-3), although
    # the recursively updated residuals do; converged must say so, before max_iter.
    tk = TorchKernel(ConstantKernel(1.0) * RBF(0.5))
    op32 = KernelOperator(tk, _data(300).float(), None, 1e-3)
    B = _rhs(300, 4)
    result = block_cg(op32, B.float(), tol=1e-4, max_iter=2000)
    assert not result.converged and result.n_iter < 2000
    A = _dense_of(op32).double()
    true_rel = torch.linalg.norm(B - A @ result.solution.double(), dim=0)
    true_rel = true_rel / torch.linalg.norm(B, dim=0)
    assert float(true_rel.max()) > 1e-4
    torch.testing.assert_close(result.relative_residuals.double(), true_rel, rtol=0.1, atol=0)


def test_block_cg_errors():
    op = _rbf_problem()
    B = _rhs(N, 2)
    with pytest.raises(ConjugateGradientError, match="non-finite"):
        block_cg(lambda V: V * float("nan"), B)
    indefinite = torch.diag(torch.tensor([1.0, -1.0], dtype=torch.float64))
    with pytest.raises(ConjugateGradientError, match="not numerically positive definite"):
        block_cg(lambda V: indefinite @ V, torch.tensor([[1.0], [1.0]], dtype=torch.float64))
    assert issubclass(ConjugateGradientError, FloatingPointError)
    with pytest.raises(ValueError, match="rhs contains NaN"):
        block_cg(op, B * float("inf"))
    with pytest.raises(ValueError, match="tol=-1"):
        block_cg(op, B, tol=-1)
    with pytest.raises(ValueError, match="max_iter=1.5"):
        block_cg(op, B, max_iter=1.5)


@pytest.mark.gpu
def test_krylov_on_cuda():
    tk = TorchKernel(ConstantKernel(2.0) * Matern(0.8, nu=1.5))
    results = {}
    for device in ("cpu", "cuda"):
        X, noise = _data(300, device=device), _noise(300, device=device)
        op = KernelOperator(tk, X, None, noise, rows_per_chunk=64)
        B = _rhs(300, 6).to(device)
        dense = tk(X) + torch.diag(noise)
        torch.testing.assert_close(op.matmul(B), dense @ B, rtol=0, atol=1e-11)
        pre = PivotedCholeskyPreconditioner.from_operator(op, 30)
        result = block_cg(op, B, preconditioner=pre, tol=1e-10)
        assert result.converged and result.solution.device.type == device
        results[device] = result.solution.cpu()
        jacobi = block_cg(op, B, preconditioner=JacobiPreconditioner(op.diagonal()), tol=1e-10)
        torch.testing.assert_close(jacobi.solution.cpu(), results[device], rtol=0, atol=1e-6)
    torch.testing.assert_close(results["cuda"], results["cpu"], rtol=0, atol=1e-7)
    _check_float32("cuda")
