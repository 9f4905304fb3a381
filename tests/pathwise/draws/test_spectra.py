"""Spectral terms and frequency sampling of random Fourier features."""

import numpy as np
import pytest
import torch
from scipy import stats
from sklearn.gaussian_process import kernels as sk

from skgpx.pathwise._draws._spectra import (
    ConstantTerm, LinearTerm, StationaryTerm, sample_unit_frequencies, scrambled_sobol,
    spectral_terms,
)


def _torch(a):
    return torch.tensor(a, dtype=torch.float64)


def test_spectral_terms_compose():
    kernel = (sk.ConstantKernel(2.0) * sk.RBF(0.5) * sk.Matern(0.3, nu=1.5)
              + sk.DotProduct(0.4) + sk.ConstantKernel(0.7))
    terms = spectral_terms(kernel)
    assert [type(t) for t in terms] == [StationaryTerm, LinearTerm, ConstantTerm]
    assert terms[0].variance == pytest.approx(2.0)
    assert [f.kind for f in terms[0].factors] == ["rbf", "matern"]
    assert terms[1].sigma_0 == pytest.approx(0.4) and terms[2].variance == pytest.approx(0.7)
    # a product distributes over a sum
    terms = spectral_terms(sk.ConstantKernel(3.0) * (sk.RBF(1.0) + sk.ConstantKernel(0.5)))
    assert [type(t) for t in terms] == [StationaryTerm, ConstantTerm]
    assert terms[1].variance == pytest.approx(1.5)


@pytest.mark.parametrize("kernel", [sk.ExpSineSquared(), sk.Exponentiation(sk.RBF(), 2.0),
                                    sk.DotProduct() * sk.RBF(), sk.RBF() * sk.WhiteKernel()],
                         ids=str)
def test_spectral_terms_refuse_unsupported(kernel):
    with pytest.raises(NotImplementedError, match="prior='exact'"):
        spectral_terms(kernel)


@pytest.mark.parametrize(
    "kernel, rho",
    [
        (sk.RBF(1.0), lambda r: np.exp(-0.5 * r**2)),
        (sk.Matern(1.0, nu=1.5), lambda r: (1 + np.sqrt(3) * r) * np.exp(-np.sqrt(3) * r)),
        (sk.Matern(1.0, nu=2.5),
         lambda r: (1 + np.sqrt(5) * r + 5 * r**2 / 3) * np.exp(-np.sqrt(5) * r)),
        (sk.Matern(1.0, nu=0.7), None),
        (sk.RationalQuadratic(1.0, alpha=1.5), lambda r: (1 + r**2 / 3.0) ** -1.5),
    ],
    # repr-stable ids (a lambda's repr holds its address, which differs between workers)
    ids=lambda v: str(v) if isinstance(v, sk.Kernel) else ("sklearn" if v is None else "closed"),
)
@pytest.mark.parametrize("qmc", [False, True], ids=["iid", "qmc"])
def test_unit_frequencies_reproduce_the_kernel(kernel, rho, qmc):
    """Bochner: E[cos(omega * tau)] = rho(tau); 5 Monte-Carlo standard errors.

    For these smooth integrands scrambled Sobol points are far more accurate than iid
    draws, so the iid standard error is a conservative tolerance for both samplers, and a
    bias in either fails the test.
    """
    (term,) = spectral_terms(kernel)
    generator = torch.Generator().manual_seed(0)
    n = 200_000
    omega = sample_unit_frequencies(term.factors[0], (100, n // 100), 1, generator,
                                    qmc=qmc).numpy().reshape(-1)
    tau = np.array([0.0, 0.3, 0.8, 1.5, 3.0])
    cosines = np.cos(np.outer(omega, tau))
    estimate, se = cosines.mean(0), cosines.std(0) / np.sqrt(n)
    expected = kernel(tau[:, None], np.zeros((1, 1)))[:, 0] if rho is None else rho(tau)
    assert np.all(np.abs(estimate - expected) <= 5 * se + 1e-12)


@pytest.mark.parametrize("kernel", [sk.RBF(1.0), sk.Matern(1.0, nu=1.5)], ids=str)
def test_qmc_frequencies_reproduce_the_kernel_in_three_dimensions(kernel):
    """The radius mapping keeps the d-dimensional spectral law: E[cos(omega.tau)] = k(tau)."""
    (term,) = spectral_terms(kernel)
    omega = sample_unit_frequencies(term.factors[0], (100, 2048), 3,
                                    torch.Generator().manual_seed(1), qmc=True).numpy()
    taus = np.array([[0.2, 0.0, 0.1], [0.5, -0.4, 0.3], [1.0, 0.7, -0.9], [2.0, 1.0, 1.5]])
    cosines = np.cos(omega.reshape(-1, 3) @ taus.T)
    estimate, se = cosines.mean(0), cosines.std(0) / np.sqrt(cosines.shape[0])
    expected = kernel(taus, np.zeros((1, 3)))[:, 0]
    assert np.all(np.abs(estimate - expected) <= 5 * se + 1e-12)


def _rms_kernel_error(kernel, Xq, F, qmc):
    from skgpx._base import cpu_generator
    from skgpx.pathwise._draws._features import draw_random_features

    K, d = kernel(Xq), Xq.shape[1]
    errors = []
    for seed in range(10):
        phi = draw_random_features(kernel, F, "sincos", 1, d, torch.zeros(d, dtype=torch.float64),
                                   cpu_generator(seed), torch.float64, "cpu",
                                   qmc=qmc)(_torch(Xq))[0].numpy()
        errors.append(np.sqrt(((phi @ phi.T - K) ** 2).mean()))
    return np.mean(errors)


@pytest.mark.parametrize("kernel", [sk.RBF(0.5), sk.Matern(0.5, nu=1.5)], ids=str)
def test_qmc_frequencies_converge_faster_in_one_dimension(kernel):
    """In d=1 the QMC kernel error decays faster than F^-1/2 and beats iid draws.

    Measured (10 seeds, 40 points on [-1, 5]): log-log slope about -1.0 (RBF) and -0.9
    (Matern-3/2) against -0.5 for iid; a sampler that lost the point-set structure
    (e.g. shuffled coordinates) would give -0.5.
    """
    Xq = np.linspace(-1.0, 5.0, 40)[:, None]
    sizes = [64, 256, 1024, 4096]
    iid = [_rms_kernel_error(kernel, Xq, F, False) for F in sizes]
    qmc = [_rms_kernel_error(kernel, Xq, F, True) for F in sizes]
    assert all(q < i for q, i in zip(qmc, iid))
    slope = np.polyfit(np.log(sizes), np.log(qmc), 1)[0]
    assert slope <= -0.75, f"QMC error slope {slope:.2f}"


@pytest.mark.parametrize("kernel", [sk.RBF([0.5, 0.8]), sk.Matern([0.5, 0.8], nu=2.5)], ids=str)
def test_qmc_frequencies_beat_iid_in_two_dimensions(kernel):
    """In d=2 the QMC error is below the iid error at every F (10 seeds averaged)."""
    Xq = np.random.RandomState(0).uniform(-2.0, 2.0, size=(50, 2))
    for F in [64, 256, 1024]:
        assert _rms_kernel_error(kernel, Xq, F, True) < _rms_kernel_error(kernel, Xq, F, False)


def test_scrambled_sobol_sets_are_nets_with_uniform_points():
    # What scipy's scrambled Sobol engine guarantees, for every set at once: the first 2^m
    # points of the first two coordinates form a (0, m, 2)-net (one point in each
    # elementary box of area 2^-m), and each point is uniform; sets are independent.
    sets = scrambled_sobol(400, 64, 3, np.random.default_rng(0))
    assert sets.shape == (400, 64, 3) and sets.min() >= 0 and sets.max() < 1
    for a in range(7):
        boxes = (np.floor(sets[..., 0] * 2**a) * 2**(6 - a)
                 + np.floor(sets[..., 1] * 2**(6 - a)))
        assert all(len(np.unique(row)) == 64 for row in boxes), a
    for point in (0, 1, 37):  # point 0 is the shift alone
        for dim in range(3):
            assert stats.kstest(sets[:, point, dim], "uniform").pvalue > 1e-3
    corr = np.corrcoef(sets[:200, 5, 0], sets[200:, 5, 0])[0, 1]  # 4.4 s.e. at n = 200
    assert abs(corr) < 0.31
    # fewer points than a power of two: the prefix of the same construction
    odd = scrambled_sobol(50, 24, 1, np.random.default_rng(1))
    assert all(len(np.unique(np.floor(row * 16))) == 16 for row in odd[:, :16, 0])
