"""Grid factors of the SE priors: the FFT products against explicit bases (supplement App. A)."""

import math

import numpy as np
import pytest
import torch

from skgpx.drd._bases import (
    DenseAxis,
    FourierAxis,
    GridFactor,
    kept_frequency_count,
    se_correlation,
)
from skgpx.kernels import se_spectral_density

T = torch.float64


def _explicit_basis(n, M, k_max):
    """The real orthonormal Fourier basis on M points, columns cos_0..cos_kmax, sin_1..,
    restricted to the first n points, written from its definition."""
    t = np.arange(n)
    cols = [np.full(n, 1 / math.sqrt(M))]
    for k in range(1, k_max + 1):
        w = 1 / math.sqrt(M) if M % 2 == 0 and k == M // 2 else math.sqrt(2 / M)
        cols.append(w * np.cos(2 * math.pi * k * t / M))
    for k in range(1, min(k_max, (M - 1) // 2) + 1):
        cols.append(math.sqrt(2 / M) * np.sin(2 * math.pi * k * t / M))
    return np.stack(cols, 1)


@pytest.mark.parametrize("n, M, k_max", [(5, 10, 5), (5, 9, 4), (7, 12, 3), (1, 2, 1), (6, 6, 3)])
def test_fft_transform_and_synthesis_match_the_explicit_basis(n, M, k_max):
    axis = FourierAxis(n, M, k_max)
    E = _explicit_basis(n, M, k_max)
    x = torch.tensor(np.random.default_rng(0).standard_normal((3, n)))
    c = torch.tensor(np.random.default_rng(1).standard_normal((3, axis.rank)))
    np.testing.assert_allclose(axis.basis(T, "cpu").numpy(), E, atol=1e-14)
    np.testing.assert_allclose(axis.transform(x).numpy(), x.numpy() @ E, atol=1e-13)
    np.testing.assert_allclose(axis.synthesise(c).numpy(), c.numpy() @ E.T, atol=1e-13)


def test_full_basis_is_orthonormal_and_padded_gram_is_the_se_correlation():
    B = FourierAxis(8, 8, 4).basis(T, "cpu").numpy()
    np.testing.assert_allclose(B.T @ B, np.eye(8), atol=1e-14)
    # circulant embedding with padding: F F^T equals the SE correlation to rounding
    bound = FourierAxis(64, 128, 64).bind(5.0, T, "cpu")
    F = bound.matrix().numpy()
    np.testing.assert_allclose(F @ F.T, se_correlation(64, 5.0, T, "cpu").numpy(), atol=1e-12)


def test_kept_frequencies_follow_the_spectral_threshold():
    M, length, threshold = 128, 4.0, 1e4
    k = kept_frequency_count(M, length, threshold)

    def omega(j):
        return torch.tensor(2 * math.pi * j / M, dtype=T)

    def ratio(j):
        return float(se_spectral_density(omega(j), length)
                     / se_spectral_density(omega(0), length))

    assert ratio(k) > 1 / threshold >= ratio(k + 1)
    assert kept_frequency_count(M, 0.5, 10.0) == M // 2  # short lengths keep everything


@pytest.mark.parametrize("fft", [True, False])
@pytest.mark.parametrize("kinds", [("fourier", "dense"), ("dense", "dense"), ("fourier",)])
def test_grid_factor_is_the_kronecker_product(kinds, fft):
    shapes = (6, 4)[: len(kinds)]
    axes = [FourierAxis(n, 2 * n, n) if k == "fourier" else DenseAxis(n)
            for k, n in zip(kinds, shapes)]
    bound = [a.bind(1.7, T, "cpu") for a in axes]
    for b in bound:
        if hasattr(b, "fft"):
            b.fft = fft  # both product routes: FFT and the explicit axis matrix
    G = GridFactor(bound, shapes)
    dense = bound[0].matrix().numpy()
    for b in bound[1:]:
        dense = np.kron(dense, b.matrix().numpy())
    rng = np.random.default_rng(2)
    x = torch.tensor(rng.standard_normal((3, dense.shape[0])))
    c = torch.tensor(rng.standard_normal((3, dense.shape[1])))
    np.testing.assert_allclose(G.forward(x).numpy(), x.numpy() @ dense, atol=1e-12)
    np.testing.assert_allclose(G.adjoint(c).numpy(), c.numpy() @ dense.T, atol=1e-12)
    index = torch.tensor([0, 5, dense.shape[0] - 1, 2])
    np.testing.assert_allclose(G.rows(index).numpy(), dense[index.numpy()], atol=1e-14)
    gram = dense @ dense.T
    np.testing.assert_allclose(G.gram(index).numpy(), gram[np.ix_(index.numpy(), index.numpy())],
                               atol=1e-12)
    np.testing.assert_allclose(G.gram_diagonal().numpy(), np.diag(gram), atol=1e-12)
    S = rng.standard_normal((dense.shape[0], dense.shape[0]))
    S = S + S.T
    np.testing.assert_allclose(G.congruence(torch.tensor(S)).numpy(), dense.T @ S @ dense,
                               atol=1e-11)
    if all(k == "dense" for k in kinds):
        np.testing.assert_allclose(G.solve(x).numpy(), np.linalg.solve(dense, x.numpy().T).T,
                                   rtol=1e-9, atol=1e-9)


def test_dense_axis_is_the_jittered_cholesky_factor():
    F = DenseAxis(9).matrix(2.0, T, "cpu").numpy()
    K = se_correlation(9, 2.0, T, "cpu").numpy()
    np.testing.assert_allclose(F @ F.T, K + 1e-6 * np.eye(9), atol=1e-13)
    assert np.allclose(F, np.tril(F))


def test_fft_route_is_chosen_for_many_kept_frequencies_on_long_axes():
    assert FourierAxis(1024, 2048, 1024).uses_fft()
    assert not FourierAxis(1024, 2048, 3).uses_fft()
    # on a 64-point axis the explicit product wins even with every frequency kept
    assert not FourierAxis(64, 128, 64).uses_fft()


def test_largest_scales_bound_the_scales_over_the_length_range():
    axis = FourierAxis(20, 40, 12)
    low, high = 1.5, 6.0
    grid = np.exp(np.linspace(np.log(low), np.log(high), 2001))
    scales = np.array([axis.scales(float(scale), T, "cpu").numpy() for scale in grid])
    largest = axis.largest_scales(low, high, T, "cpu").numpy()
    assert np.all(scales <= largest * (1 + 1e-12))
    np.testing.assert_allclose(scales.max(0), largest, rtol=1e-5)  # attained inside the range
