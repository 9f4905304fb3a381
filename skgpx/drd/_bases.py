"""Factors of the squared-exponential priors on a grid, dense or Fourier, one axis at a time.

Both priors of sDRD are unit-variance squared-exponential (SE) correlations on the feature
grid: ``K`` for the log-variance latent ``u`` (length ``l``) and ``K_f`` for the smoothness of
the coefficients (length ``l_f``).  On a grid they are separable, ``K = K_1 (x) K_2``, so
everything here acts on one axis and a :class:`GridFactor` chains the axes:

* :class:`DenseAxis`: ``F = chol(K_a + 1e-6 I)``, ``N_a x N_a``, exact up to the jitter.
* :class:`FourierAxis`: the circulant approximation on the axis padded to ``M_a`` points,
  ``F = B^T diag(sqrt(c(omega)))`` with ``B`` the real orthonormal Fourier basis restricted to
  the ``N_a`` real positions and ``c`` the SE spectral density

  .. math:: c(\\omega) = \\sqrt{2\\pi}\\, l\\, e^{-\\omega^2 l^2 / 2},\\quad
            \\omega_k = 2\\pi k / M_a,

  keeping only the frequencies ``k <= k_max`` whose spectral weight is not negligible (the
  FFT route of Wu et al., NIPS 2014, suppl. App. A).  Products go through ``torch.fft.rfft``
  / ``irfft``; no basis matrix is formed for them.

In both cases ``F F^T`` is the axis correlation, and a factor maps positions to coefficients
(``forward``: ``F^T x``) and back (``adjoint``: ``F c``).
"""

import math
from dataclasses import dataclass, field

import torch

from ..kernels import se_spectral_density, stationary_profile
from ..linalg import jittered_cholesky

DENSE_JITTER = 1e-6
_FFT_FLOP_COST = 4.0  # an FFT flop costs this many matrix-product flops (see uses_fft)


def se_correlation(n_points, length_scale, dtype, device):
    """The ``n x n`` SE correlation ``exp(-(i - j)^2 / (2 l^2))`` of grid indices."""
    t = torch.arange(n_points, dtype=dtype, device=device)
    return stationary_profile((t[:, None] - t[None, :]).abs() / length_scale, "rbf")


def kron_vectors(vectors):
    """The Kronecker product of 1-D tensors (C order), e.g. a separable diagonal."""
    out = vectors[0]
    for v in vectors[1:]:
        out = (out[:, None] * v[None, :]).reshape(-1)
    return out


def kept_frequency_count(n_circle, length_scale, threshold):
    """Largest ``k`` with ``c(2 pi k / M) / c(0) > 1 / threshold`` (capped at ``M // 2``)."""
    omega_max = math.sqrt(2.0 * math.log(threshold)) / length_scale
    return int(min(math.floor(omega_max * n_circle / (2 * math.pi) - 1e-12), n_circle // 2))


def _along(x, axis, fn):
    """Apply ``fn`` (acting on the last dimension) to dimension ``axis`` of ``x``."""
    return fn(x.movedim(axis, -1)).movedim(-1, axis)


class DenseAxis:
    """``F = chol(SE(l) + 1e-6 I)`` on ``n_points`` grid positions."""

    def __init__(self, n_points):
        self.n_points = n_points
        self.rank = n_points

    def matrix(self, length_scale, dtype, device):
        K = se_correlation(self.n_points, length_scale, dtype, device)
        factor, _ = jittered_cholesky(K, base_jitter=DENSE_JITTER, name="SE prior correlation",
                                      advice="use basis='fourier'")
        return factor

    def bind(self, length_scale, dtype, device):
        return _BoundDense(self.matrix(length_scale, dtype, device))


# The bound factors are dataclasses of tensors so that a fitted estimator's pickling moves
# them between devices (skgpx._base.move_to_device).


@dataclass
class _BoundDense:
    F: torch.Tensor

    @property
    def rank(self):
        return self.F.shape[1]

    def forward(self, x, axis):
        return _along(x, axis, lambda v: v @ self.F)

    def adjoint(self, c, axis):
        return _along(c, axis, lambda v: v @ self.F.T)

    def matrix(self):
        return self.F

    def solve(self, x, axis):
        """``F^{-1} x`` along ``axis`` (whitening of the dense u-prior)."""
        return _along(x, axis, lambda v: torch.linalg.solve_triangular(
            self.F, v.unsqueeze(-1), upper=False).squeeze(-1))


class FourierAxis:
    """Real Fourier factor of an SE correlation on ``n_points`` positions padded to
    ``n_circle``, keeping the frequencies ``0..k_max``.

    The coefficient layout is ``[cos_0, ..., cos_kmax, sin_1, ..., sin_ks]`` with
    ``ks = min(k_max, (M - 1) // 2)`` (a Nyquist frequency has no sine).
    """

    def __init__(self, n_points, n_circle, k_max):
        self.n_points, self.n_circle, self.k_max = n_points, n_circle, k_max
        self.n_sin = min(k_max, (n_circle - 1) // 2)
        self.rank = k_max + 1 + self.n_sin

    def frequencies(self, dtype, device):
        k = torch.arange(self.k_max + 1, dtype=dtype, device=device)
        omega = 2 * math.pi * k / self.n_circle
        return torch.cat([omega, omega[1:1 + self.n_sin]])

    def _cos_weights(self, dtype, device):
        # sqrt(2/M) for interior frequencies, 1/sqrt(M) for k = 0 and the Nyquist k = M/2
        M = self.n_circle
        w = torch.full((self.k_max + 1,), math.sqrt(2.0 / M), dtype=dtype, device=device)
        w[0] = 1.0 / math.sqrt(M)
        if M % 2 == 0 and self.k_max == M // 2:
            w[-1] = 1.0 / math.sqrt(M)
        return w

    def transform(self, x):
        """Real orthonormal Fourier coefficients (kept ones) of ``x`` on its last dim."""
        if x.numel() == 0:  # MKL's FFT rejects empty batches
            return x.new_zeros(*x.shape[:-1], self.rank)
        X = torch.fft.rfft(x, n=self.n_circle)[..., : self.k_max + 1]
        w = self._cos_weights(x.dtype, x.device)
        sin = -math.sqrt(2.0 / self.n_circle) * X.imag[..., 1:1 + self.n_sin]
        return torch.cat([w * X.real, sin], dim=-1)

    def synthesise(self, c):
        """Positions (the first ``n_points``) of the real Fourier series with coefficients
        ``c`` on its last dim: the adjoint of :meth:`transform`."""
        M, K = self.n_circle, self.k_max + 1
        if c.numel() == 0:
            return c.new_zeros(*c.shape[:-1], self.n_points)
        w = self._cos_weights(c.dtype, c.device)
        # irfft(Y)[t] = (Y_0 + 2 sum_k Re(Y_k e^{i w_k t}) + Y_{M/2} (-1)^t) / M
        half = torch.full_like(w, M / 2.0)
        half[0] = M
        if M % 2 == 0 and self.k_max == M // 2:
            half[-1] = M
        real = half * w * c[..., :K]
        imag = torch.zeros_like(real)
        imag[..., 1:1 + self.n_sin] = -(M / 2.0) * math.sqrt(2.0 / M) * c[..., K:]
        spectrum = torch.complex(real, imag)
        return torch.fft.irfft(spectrum, n=M)[..., : self.n_points]

    def scales(self, length_scale, dtype, device):
        """``sqrt(c(omega_k))`` for each kept coefficient."""
        return se_spectral_density(self.frequencies(dtype, device), length_scale).sqrt()

    def basis(self, dtype, device):
        """The kept real basis restricted to the positions, ``B^T``: (n_points, rank);
        computed once per dtype and device."""
        key = (dtype, str(device))
        cache = self.__dict__.setdefault("_basis", {})
        if key not in cache:
            cache[key] = self.synthesise(torch.eye(self.rank, dtype=dtype, device=device)).T
        return cache[key]

    def __getstate__(self):  # the cached bases are rebuilt where the axis is loaded
        return {k: v for k, v in self.__dict__.items() if k != "_basis"}

    def uses_fft(self):
        """FFT products cost about ``5 M log2 M`` flops per vector, the explicit ``(N x r)``
        product ``2 N r``.  A matrix product runs several times more flops per second than
        the FFT with its strided copies (measured on one CPU thread, N = 64, r = 57: the
        explicit product was 2x faster), hence the factor ``_FFT_FLOP_COST``."""
        M = self.n_circle
        return 2 * self.n_points * self.rank >= _FFT_FLOP_COST * 5 * M * math.log2(max(M, 2))

    def largest_scales(self, length_low, length_high, dtype, device):
        """``max sqrt(c_l(omega_k))`` over ``l`` in ``[length_low, length_high]``, per kept
        coefficient: ``l exp(-omega^2 l^2 / 2)`` peaks at ``l = 1 / omega``."""
        omega = self.frequencies(dtype, device)
        peak = torch.clamp(1.0 / omega.clamp_min(1e-300), length_low, length_high)
        return se_spectral_density(omega, peak).sqrt()

    def bind(self, length_scale, dtype, device):
        return _BoundFourier(self, self.scales(length_scale, dtype, device))

    def unscaled(self, dtype, device):
        """The bare basis ``B^T`` as a bound factor (all scales 1)."""
        return _BoundFourier(self, torch.ones(self.rank, dtype=dtype, device=device))


@dataclass
class _BoundFourier:
    axis: FourierAxis
    scales: torch.Tensor
    fft: bool = None  # None: the cheaper route, FourierAxis.uses_fft

    def __post_init__(self):
        if self.fft is None:
            self.fft = self.axis.uses_fft()

    @property
    def rank(self):
        return self.axis.rank

    def forward(self, x, axis):
        if not self.fft:
            F = self.matrix()
            return _along(x, axis, lambda v: v @ F)
        return _along(x, axis, lambda v: self.scales * self.axis.transform(v))

    def adjoint(self, c, axis):
        if not self.fft:
            F = self.matrix()
            return _along(c, axis, lambda v: v @ F.T)
        return _along(c, axis, lambda v: self.axis.synthesise(self.scales * v))

    def matrix(self):
        return self.axis.basis(self.scales.dtype, self.scales.device) * self.scales


@dataclass
class GridFactor:
    """A separable factor ``F = F_1 (x) ... (x) F_d`` on a grid of ``shape``.

    ``bound`` holds one bound axis factor per grid axis.  Arrays of positions have the grid
    as their trailing dimensions, coefficient arrays the axis ranks.
    """

    bound: list
    shape: tuple
    ranks: tuple = field(init=False)

    def __post_init__(self):
        self.shape = tuple(self.shape)
        self.ranks = tuple(b.rank for b in self.bound)

    @property
    def rank(self):
        return math.prod(self.ranks)

    def _per_axis(self, x, in_shape, method, last_first=False):
        """Apply ``method`` of every axis factor to rows ``x`` laid out as ``in_shape``.

        The axes commute; the contiguous last axis goes first when it shrinks the array
        (``forward``) and last when it grows it (``adjoint``), so the large arrays are never
        copied into another layout.
        """
        lead = x.shape[:-1]
        x = x.reshape(*lead, *in_shape)
        d = len(in_shape)
        order = reversed(range(d)) if last_first else range(d)
        for a in order:
            x = getattr(self.bound[a], method)(x, x.dim() - d + a)
        return x.reshape(*lead, math.prod(x.shape[len(lead):]))

    def forward(self, x):
        """``x F`` for rows ``x`` of shape (..., p): (..., rank)."""
        return self._per_axis(x, self.shape, "forward", last_first=True)

    def adjoint(self, c):
        """``c F^T`` for coefficient rows ``c`` of shape (..., rank): (..., p)."""
        return self._per_axis(c, self.ranks, "adjoint")

    def congruence(self, W):
        """``F^T W F`` for a symmetric ``W`` (p, p), one axis at a time: (rank, rank)."""
        return self.forward(self.forward(W).T)

    def solve(self, x):
        """``F^{-1} x`` for rows ``x`` (..., p); dense factors only."""
        return self._per_axis(x, self.shape, "solve")

    def spectral_scales(self):
        """``sqrt(c(omega))`` of a Fourier factor, flattened like its coefficients."""
        return kron_vectors([b.scales for b in self.bound])

    def rows(self, index):
        """Explicit rows ``F[index]`` (a Kronecker product of axis rows): (len(index), rank)."""
        out = None
        for a, i in enumerate(self._axis_indices(index)):
            rows = self.bound[a].matrix()[i]
            out = rows if out is None else (out[:, :, None] * rows[:, None, :]).reshape(
                len(index), -1)
        return out

    def gram(self, index):
        """``(F F^T)[index][:, index]``: the correlation among the positions ``index``."""
        out = None
        for a, i in enumerate(self._axis_indices(index)):
            M = self.bound[a].matrix()
            block = (M @ M.T)[i][:, i]
            out = block if out is None else out * block
        return out

    def gram_diagonal(self):
        """``diag(F F^T)`` over all positions: (p,)."""
        return kron_vectors([(b.matrix() ** 2).sum(1) for b in self.bound])

    def _axis_indices(self, index):
        return torch.unravel_index(index, self.shape)
