"""Gram kernels and their derivatives (the paper's Sec. 4.2, Apps. C, I, J).

Oracles: T1, M and N against central finite differences of K(G + h dG); T2, D and T
against directional derivatives of log|K(G) + 0.1 I| and Tr((K(G) + 0.1 I)^-1 G').

Linearisation convention: for symmetric dG,
``dK = dG o M + Diag(dG) N + N^T Diag(dG)`` with ``Diag(A) = I o A``.
"""


import numpy as np
import pytest
import torch
from sklearn.gaussian_process.kernels import RBF

from skgpx.dkp._grams import (
    GRAM_KERNELS,
    chain_derivatives,
    contract_derivatives,
    gram_kernel,
    gram_kernel_derivatives,
    gram_kernel_diag,
)

DTYPE = torch.float64
KERNELS = ("sqexp", "arccos0", "arccos1")
P, D_IN = 7, 3
FD_STEP = 1e-6
T1_TOL = 1e-7
T2_TOL = 1e-6
T2_STEP = 1e-4
RIDGE = 0.1
# Sum kernel S = w K(G) + v G + eps I.
SUM_W, SUM_V, SUM_EPS = 0.7, 0.4, 1e-3


# ----------------------------------------------------------------------------- helpers


def _points(seed, n=P, d=D_IN):
    return np.random.default_rng(seed).standard_normal((n, d))


def _test_gram(seed=0):
    """``X X^T / d + 0.1 I``: full rank, off-diagonal cosines well away from +-1."""
    x = _points(seed)
    gram = torch.as_tensor(x @ x.T / D_IN + RIDGE * np.eye(P), dtype=DTYPE)
    # preconditions of the oracle, not of the code under test
    assert torch.linalg.eigvalsh(gram).min() > 0.05
    diag = gram.diagonal()
    cosine = gram / torch.sqrt(diag[:, None] * diag[None, :])
    off = ~torch.eye(P, dtype=torch.bool)
    assert cosine[off].abs().max() < 0.95
    return gram


def _sym(seed, n=P):
    a = torch.as_tensor(np.random.default_rng(seed).standard_normal((n, n)), dtype=DTYPE)
    return 0.5 * (a + a.mT)


def _pd(seed, n=P):
    a = torch.as_tensor(np.random.default_rng(seed).standard_normal((n, n)), dtype=DTYPE)
    return a @ a.mT / n + 0.5 * torch.eye(n, dtype=DTYPE)


def _linearised(m_matrix, n_matrix, d_gram):
    """``dG o M + Diag(dG) N + N^T Diag(dG)``."""
    diag = torch.diag(d_gram.diagonal())
    return d_gram * m_matrix + diag @ n_matrix + n_matrix.mT @ diag


def _central(func, gram, d_gram, step=FD_STEP):
    return (func(gram + step * d_gram) - func(gram - step * d_gram)) / (2.0 * step)


def _central5(func, gram, d_gram, step=T2_STEP):
    """Five-point central difference: a random direction can make the directional derivative
    small (cancellation), so T2's relative error needs the O(h^4) stencil."""
    near = func(gram + step * d_gram) - func(gram - step * d_gram)
    far = func(gram + 2.0 * step * d_gram) - func(gram - 2.0 * step * d_gram)
    return (8.0 * near - far) / (12.0 * step)


def _kernel(name):
    return lambda gram: gram_kernel_derivatives(name, gram, derivatives=False)


def _sum_kernel(name):
    def value(gram):
        eye = torch.eye(gram.shape[0], dtype=gram.dtype)
        kernel = gram_kernel_derivatives(name, gram, derivatives=False)
        return SUM_W * kernel + SUM_V * gram + SUM_EPS * eye

    return value


def _sum_kernel_derivatives(name, gram):
    kernel, m_k, n_k = gram_kernel_derivatives(name, gram)
    eye = torch.eye(gram.shape[0], dtype=gram.dtype)
    value = SUM_W * kernel + SUM_V * gram + SUM_EPS * eye
    return value, SUM_W * m_k + SUM_V, SUM_W * n_k


def _composite(case):
    """``(value(G), derivatives(G) -> (M, N))`` for every case T1/T2 check."""
    kind, name = case
    if kind == "kernel":
        return _kernel(name), lambda gram: gram_kernel_derivatives(name, gram)[1:]
    if kind == "sum":
        return _sum_kernel(name), lambda gram: _sum_kernel_derivatives(name, gram)[1:]
    if kind == "chain_arccos1_sqexp":

        def value(gram):
            return _kernel("sqexp")(_kernel("arccos1")(gram))

        def derivs(gram):
            inner_k, m_a, n_a = gram_kernel_derivatives("arccos1", gram)
            _, m_b, n_b = gram_kernel_derivatives("sqexp", inner_k)
            return chain_derivatives((m_a, n_a), (m_b, n_b))

        return value, derivs
    if kind == "chain_sum_sqexp":

        def value(gram):
            return _kernel("sqexp")(_sum_kernel(name)(gram))

        def derivs(gram):
            inner_k, m_a, n_a = _sum_kernel_derivatives(name, gram)
            _, m_b, n_b = gram_kernel_derivatives("sqexp", inner_k)
            return chain_derivatives((m_a, n_a), (m_b, n_b))

        return value, derivs
    raise AssertionError(case)


CASES = (
    [("kernel", k) for k in KERNELS]
    + [("sum", k) for k in KERNELS]
    + [("chain_arccos1_sqexp", None)]
    + [("chain_sum_sqexp", k) for k in KERNELS]
)
CASE_IDS = [f"{kind}-{name}" if name else kind for kind, name in CASES]


def test_kernel_names():
    assert tuple(GRAM_KERNELS) == KERNELS


# -------------------------------------------------- T1: M, N against finite differences


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_t1_linearisation_matches_finite_differences(case, seed):
    value, derivs = _composite(case)
    gram = _test_gram(seed)
    m_matrix, n_matrix = derivs(gram)
    for direction in range(3):
        d_gram = _sym(100 * seed + direction + 10)
        numeric = _central(value, gram, d_gram)
        predicted = _linearised(m_matrix, n_matrix, d_gram)
        assert torch.isfinite(predicted).all()
        err = (numeric - predicted).abs().max().item()
        assert err < T1_TOL, err


@pytest.mark.parametrize("name", KERNELS)
def test_t1_entrywise_jacobian(name):
    """Unit perturbations separate M_ij (dG = E_ij + E_ji) and row k of N (dG = E_kk)."""
    gram = _test_gram(3)
    func = _kernel(name)
    _, m_matrix, n_matrix = gram_kernel_derivatives(name, gram)
    for i in range(P):
        d_gram = torch.zeros(P, P, dtype=DTYPE)
        d_gram[i, i] = 1.0
        numeric = _central(func, gram, d_gram)
        expected = torch.zeros(P, P, dtype=DTYPE)
        expected[i, :] = n_matrix[i, :]
        expected[:, i] = n_matrix[i, :]
        expected[i, i] = m_matrix[i, i] + 2.0 * n_matrix[i, i]
        assert (numeric - expected).abs().max() < T1_TOL
        for j in range(i + 1, P):
            d_gram = torch.zeros(P, P, dtype=DTYPE)
            d_gram[i, j] = d_gram[j, i] = 1.0
            numeric = _central(func, gram, d_gram)
            expected = torch.zeros(P, P, dtype=DTYPE)
            expected[i, j] = expected[j, i] = m_matrix[i, j]
            assert (numeric - expected).abs().max() < T1_TOL


@pytest.mark.parametrize("name", KERNELS)
def test_derivative_shapes_and_diagonal_convention(name):
    """Linearisation convention (Eqs. 21-23): M symmetric; arc-cosine puts the diagonal slope
    in N (M_ii = 0)."""
    gram = _test_gram(4)
    kernel, m_matrix, n_matrix = gram_kernel_derivatives(name, gram)
    assert kernel.shape == m_matrix.shape == n_matrix.shape == (P, P)
    assert kernel.dtype == m_matrix.dtype == n_matrix.dtype == DTYPE
    torch.testing.assert_close(kernel, kernel.mT, rtol=0, atol=0)
    torch.testing.assert_close(m_matrix, m_matrix.mT, rtol=1e-13, atol=1e-13)
    assert torch.equal(gram_kernel_derivatives(name, gram, derivatives=False), kernel)
    if name == "sqexp":
        torch.testing.assert_close(m_matrix, kernel, rtol=0, atol=0)
        torch.testing.assert_close(n_matrix, -0.5 * kernel, rtol=0, atol=0)
    else:
        order = int(name[-1])
        assert torch.all(m_matrix.diagonal() == 0)
        torch.testing.assert_close(n_matrix.diagonal(), torch.full((P,), 0.5 * order, dtype=DTYPE))
        # N is not symmetric for the arc-cosine kernels (this is what T2's regression needs)
        assert (n_matrix - n_matrix.mT).abs().max() > 1e-2


# ----------------------------------------------------------------------------- values


def _joint_gram(seed, n_train=5, n_test=4):
    x = _points(seed, n_train + n_test, D_IN)
    gram = torch.as_tensor(x @ x.T, dtype=DTYPE)
    return x, gram, n_train


@pytest.mark.parametrize("name", KERNELS)
def test_cross_block_matches_joint_kernel(name):
    x, joint, n_train = _joint_gram(5)
    full = gram_kernel_derivatives(name, joint, derivatives=False)
    diag = joint.diagonal()
    d_i, d_t = diag[:n_train], diag[n_train:]
    cross = gram_kernel(name, joint[n_train:, :n_train], d_t, d_i)
    assert cross.shape == (joint.shape[0] - n_train, n_train)
    torch.testing.assert_close(cross, full[n_train:, :n_train], rtol=1e-14, atol=1e-14)
    transposed = gram_kernel(name, joint[:n_train, n_train:], d_i, d_t)
    torch.testing.assert_close(transposed, full[:n_train, n_train:], rtol=1e-14, atol=1e-14)
    torch.testing.assert_close(
        gram_kernel_diag(name, diag), full.diagonal(), rtol=1e-14, atol=1e-14
    )
    # the square-block route agrees off the diagonal too
    square = gram_kernel(name, joint, diag, diag)
    off = ~torch.eye(joint.shape[0], dtype=torch.bool)
    torch.testing.assert_close(square[off], full[off], rtol=1e-14, atol=1e-14)


def _np_angle(x, y):
    norms = np.linalg.norm(x, axis=1)[:, None] * np.linalg.norm(y, axis=1)[None, :]
    return np.arccos(np.clip(x @ y.T / norms, -1.0, 1.0)), norms


def _closed_form(name, x, y=None):
    if name == "sqexp":
        return RBF(length_scale=1.0)(x, y)
    theta, norms = _np_angle(x, x if y is None else y)
    if y is None:  # arccos of a rounded 1 is ~1e-8, not 0: the angle of x with itself is 0
        np.fill_diagonal(theta, 0.0)
    if name == "arccos0":
        return 1.0 - theta / np.pi
    return norms * (np.sin(theta) + (np.pi - theta) * np.cos(theta)) / np.pi


@pytest.mark.parametrize("name", KERNELS)
def test_kernel_values_match_closed_forms(name):
    x, joint, n_train = _joint_gram(6)
    full = gram_kernel_derivatives(name, joint, derivatives=False).numpy()
    np.testing.assert_allclose(full, _closed_form(name, x), rtol=1e-12, atol=1e-12)
    xi, xt = x[:n_train], x[n_train:]
    cross = gram_kernel(
        name,
        torch.as_tensor(xt @ xi.T, dtype=DTYPE),
        torch.as_tensor((xt * xt).sum(1), dtype=DTYPE),
        torch.as_tensor((xi * xi).sum(1), dtype=DTYPE),
    ).numpy()
    np.testing.assert_allclose(cross, _closed_form(name, xt, xi), rtol=1e-12, atol=1e-12)
    expected_diag = (x * x).sum(1) if name == "arccos1" else np.ones(len(x))
    diag = gram_kernel_diag(name, torch.as_tensor((x * x).sum(1), dtype=DTYPE)).numpy()
    np.testing.assert_allclose(diag, expected_diag, rtol=1e-14, atol=0)


# --------------------------------------------- T2: D, T against directional derivatives


def _seed_contract(m_matrix, n_matrix, weight):
    """The paper's printed form ``M o A + 2 Diag(A N)`` (Eqs. 25, 31): wrong for non-symmetric N."""
    return m_matrix * weight + 2.0 * torch.diag(torch.diagonal(weight @ n_matrix))


def _objectives(value, g_prime):
    eye = torch.eye(P, dtype=DTYPE)

    def logdet(gram):
        return torch.linalg.slogdet(value(gram) + RIDGE * eye)[1]

    def trace_inv(gram):
        return torch.trace(torch.linalg.solve(value(gram) + RIDGE * eye, g_prime))

    return logdet, trace_inv


def _gradients(value, derivs, gram, g_prime, contract=contract_derivatives):
    m_matrix, n_matrix = derivs(gram)
    z = torch.linalg.inv(value(gram) + RIDGE * torch.eye(P, dtype=DTYPE))
    z = 0.5 * (z + z.mT)
    h = z @ g_prime @ z
    h = 0.5 * (h + h.mT)
    return contract(m_matrix, n_matrix, z), contract(m_matrix, n_matrix, h)


def _t2_errors(case, seed, contract):
    value, derivs = _composite(case)
    gram = _test_gram(seed)
    g_prime = _pd(seed + 50)
    logdet, trace_inv = _objectives(value, g_prime)
    d_matrix, t_matrix = _gradients(value, derivs, gram, g_prime, contract)
    errors = []
    for direction in range(3):
        d_gram = _sym(100 * seed + direction + 20)
        for func, predicted in (
            (logdet, torch.trace(d_matrix @ d_gram)),
            (trace_inv, -torch.trace(t_matrix @ d_gram)),
        ):
            numeric = _central5(func, gram, d_gram)
            errors.append((abs(numeric - predicted) / abs(numeric)).item())
    return errors


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
@pytest.mark.parametrize("seed", [0, 1])
def test_t2_d_and_t_match_directional_derivatives(case, seed):
    errors = _t2_errors(case, seed, contract_derivatives)
    assert max(errors) < T2_TOL, errors


@pytest.mark.parametrize("name", ["arccos0", "arccos1"])
def test_t2_seed_diag_an_form_fails_for_arccos(name):
    """Regression (the paper's Eqs. 25, 31, 111, 115): Diag(A N) instead of Diag(N A) is
    wrong for arc-cosine."""
    errors = _t2_errors(("kernel", name), 0, _seed_contract)
    assert min(errors) > 1e-3, errors
    # the corrected form, on the very same data, passes
    assert max(_t2_errors(("kernel", name), 0, contract_derivatives)) < T2_TOL


def test_t2_seed_form_coincides_for_sqexp():
    gram = _test_gram(0)
    value, derivs = _composite(("kernel", "sqexp"))
    g_prime = _pd(50)
    ours = _gradients(value, derivs, gram, g_prime)
    seeds = _gradients(value, derivs, gram, g_prime, _seed_contract)
    for a, b in zip(ours, seeds):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_contract_derivatives_matches_explicit_formula_and_none():
    m_matrix, weight = _sym(1), _sym(3)
    n_matrix = torch.as_tensor(np.random.default_rng(2).standard_normal((P, P)), dtype=DTYPE)
    expected = m_matrix * weight + 2.0 * torch.diag(torch.diagonal(n_matrix @ weight))
    got = contract_derivatives(m_matrix, n_matrix, weight)
    torch.testing.assert_close(got, expected, rtol=1e-13, atol=1e-13)
    got = contract_derivatives(m_matrix, None, weight)
    torch.testing.assert_close(got, m_matrix * weight, rtol=0, atol=0)
    # inputs are not modified in place
    m_copy, w_copy = m_matrix.clone(), weight.clone()
    contract_derivatives(m_matrix, n_matrix, weight)
    assert torch.equal(m_matrix, m_copy) and torch.equal(weight, w_copy)


def test_chain_through_identity_is_neutral():
    """The identity kernel (M = 1, N = 0/None) as inner or outer leaves (M, N) unchanged."""
    _, m_matrix, n_matrix = gram_kernel_derivatives("arccos1", _test_gram(7))
    ones, zeros = torch.ones(P, P, dtype=DTYPE), torch.zeros(P, P, dtype=DTYPE)
    for inner in ((ones, zeros), (ones, None), (1.0, None)):
        m_out, n_out = chain_derivatives(inner, (m_matrix, n_matrix))
        torch.testing.assert_close(m_out * ones, m_matrix, rtol=0, atol=0)
        torch.testing.assert_close(n_out, n_matrix, rtol=0, atol=0)
    for outer in ((ones, zeros), (ones, None)):
        m_out, n_out = chain_derivatives((m_matrix, n_matrix), outer)
        torch.testing.assert_close(m_out, m_matrix, rtol=0, atol=0)
        torch.testing.assert_close(n_out, n_matrix, rtol=0, atol=0)


# ----------------------------------------------------------------------------- degenerate input


@pytest.mark.parametrize("name", KERNELS)
def test_zero_input_row_is_finite(name):
    x = _points(8)
    x[2] = 0.0
    gram = torch.as_tensor(x @ x.T, dtype=DTYPE)
    assert gram[2, 2] == 0.0
    kernel, m_matrix, n_matrix = gram_kernel_derivatives(name, gram)
    for tensor in (kernel, m_matrix, n_matrix):
        assert not torch.isnan(tensor).any()
        assert torch.isfinite(tensor).all()
    # cross block: rows 3.., columns 0..2 (row/column 2 is the zero point; no diagonal entries)
    cross = gram_kernel(name, gram[3:, :3], gram.diagonal()[3:], gram.diagonal()[:3])
    assert torch.isfinite(cross).all()
    torch.testing.assert_close(cross, kernel[3:, :3], rtol=1e-14, atol=1e-14)
    assert torch.isfinite(gram_kernel_diag(name, gram.diagonal())).all()
    if name == "arccos1":  # k(0, y) = 0 for the ReLU kernel
        assert torch.all(kernel[2] == 0) and torch.all(kernel[:, 2] == 0)
    if name == "sqexp":  # exp(-|y|^2 / 2)
        torch.testing.assert_close(kernel[2], torch.exp(-0.5 * gram.diagonal()), rtol=1e-14, atol=0)
