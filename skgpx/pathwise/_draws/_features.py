"""Random Fourier features for pathwise prior draws (Bochner's theorem).

A stationary term ``sigma^2 rho((x - x')/l)`` gets the "sin/cos pair" map

.. math::

    \\phi(x) = \\sigma \\sqrt{2/F} [\\cos(\\Omega (x - x_0)), \\sin(\\Omega (x - x_0))],
    \\qquad E[\\phi(x)^T \\phi(x')] = k(x, x'),

with ``F/2`` frequencies ``Omega = omega / l`` drawn from the normalised spectral
density (or the random-phase cosine map with ``F`` frequencies).  Constant and linear
terms have exact finite features.  Every block carries a leading batch axis of size
``B``: 1 for a basis shared by all sample paths, ``S`` for one basis per path.

Evaluating many paths at many rows, :meth:`RandomFeatures.accumulate_transposed` forms
``W^T phi(X)^T`` in feature-major layout, block by block, into reused buffers: no
concatenated feature matrix, the scale folded into the product, and a (K x F)(F x n)
product that runs about twice as fast as (n x F)(F x K) for small K on MKL.
"""

import math

import torch

from ..._base import CPUPickleMixin
from ..._trig import cos_sin_rows
from ._spectra import ConstantTerm, LinearTerm, sample_unit_frequencies, spectral_terms


class _StationaryBlock(CPUPickleMixin):
    def __init__(self, frequencies, scale, shift, phases=None):
        self.frequencies = frequencies  # (B, P, d), input units
        self.scale = scale
        self.shift = shift  # (d,)
        self.phases = phases  # (B, P) for the cosine map, None for sin/cos

    @property
    def n_features(self):
        per = 1 if self.phases is not None else 2
        return per * self.frequencies.shape[1]

    def __call__(self, X):
        arg = (X - self.shift) @ self.frequencies.transpose(-1, -2)
        if self.phases is not None:
            return self.scale * torch.cos(arg + self.phases.unsqueeze(-2))
        return self.scale * torch.cat([torch.cos(arg), torch.sin(arg)], dim=-1)

    def accumulate_transposed(self, X, Wt, out, buffers):
        """``out += Wt @ phi(X)^T`` for ``Wt`` (B, K, width), ``out`` (B, K, n); no autograd."""
        B, P, n = self.frequencies.shape[0], self.frequencies.shape[1], X.shape[0]
        centred = buffers.get("centred", (X.shape[1], n), X)
        torch.sub(X.T, self.shift[:, None], out=centred)
        arg = torch.matmul(self.frequencies, centred, out=buffers.get("arg", (B, P, n), X))
        if self.phases is not None:
            arg.add_(self.phases.unsqueeze(-1))
            out.baddbmm_(Wt, arg.cos_(), alpha=self.scale)
            return
        # cos rows then sin rows of one buffer: one product over all F features
        trig = cos_sin_rows(arg, buffers.get("trig", (B, 2 * P, n), X))
        out.baddbmm_(Wt, trig, alpha=self.scale)

    def to(self, device):
        self.frequencies, self.shift = self.frequencies.to(device), self.shift.to(device)
        if self.phases is not None:
            self.phases = self.phases.to(device)
        return self


class _ExactBlock(CPUPickleMixin):
    """Constant (``sqrt(c)``) or linear (``sqrt(c) [sigma_0, x]``) features."""

    def __init__(self, variance, sigma_0=None):
        self.scale = math.sqrt(variance)
        self.sigma_0 = sigma_0

    def __call__(self, X):
        ones = torch.ones(*X.shape[:-1], 1, dtype=X.dtype, device=X.device)
        if self.sigma_0 is None:
            return self.scale * ones
        return self.scale * torch.cat([self.sigma_0 * ones, X], dim=-1)

    def accumulate_transposed(self, X, Wt, out, buffers):
        out.add_(Wt[..., :1], alpha=self.scale * (1.0 if self.sigma_0 is None else self.sigma_0))
        if self.sigma_0 is not None:
            out.baddbmm_(Wt[..., 1:], X.T.expand(Wt.shape[0], -1, -1), alpha=self.scale)

    def to(self, device):
        return self


class RandomFeatures:
    """Feature map built from spectral terms, with ``n_bases`` independent bases.

    ``phi(X)`` maps ``X`` of shape (n, d) to (B, n, F), every basis at every row, and
    ``X`` of shape (S, q, d) to (S, q, F), basis ``s`` (or the shared one) at ``X[s]``.
    """

    def __init__(self, blocks, n_bases):
        self.blocks = blocks
        self.n_bases = n_bases

    def __call__(self, X):
        X3 = X if X.dim() == 3 else X.unsqueeze(0)
        parts = [block(X3) for block in self.blocks]
        batch = max(part.shape[0] for part in parts)
        if X.dim() == 2:
            batch = max(batch, self.n_bases)
        return torch.cat([p.expand(batch, X3.shape[1], p.shape[-1]) for p in parts], dim=-1)

    def accumulate_transposed(self, X, Wt, out, buffers):
        """``out += (phi(X) @ W)^T`` block by block: ``X`` (n, d), ``Wt`` the transposed
        weights (B, K, F), ``out`` (B, K, n).  In place, without autograd; ``buffers``
        (a :class:`Buffers`) holds the per-block intermediates between calls."""
        start = 0
        for block in self.blocks:
            if isinstance(block, _ExactBlock):
                width = 1 if block.sigma_0 is None else 1 + X.shape[1]
            else:
                width = block.n_features
            block.accumulate_transposed(X, Wt[..., start : start + width], out, buffers)
            start += width

    def n_features(self, n_features_in):
        total = 0
        for block in self.blocks:
            if isinstance(block, _ExactBlock):
                total += 1 if block.sigma_0 is None else 1 + n_features_in
            else:
                total += block.n_features
        return total

    @property
    def frequencies(self):
        """Frequencies of the stationary blocks, concatenated: (B, P, d)."""
        freqs = [b.frequencies for b in self.blocks if isinstance(b, _StationaryBlock)]
        return torch.cat(freqs, dim=1) if freqs else None

    def to(self, device):
        self.blocks = [block.to(device) for block in self.blocks]
        return self


def _split(total, parts):
    base, extra = divmod(total, parts)
    return [base + (i < extra) for i in range(parts)]


def draw_random_features(
    kernel, n_features, feature_map, n_bases, n_features_in, shift, generator, dtype, device,
    qmc=False,
):
    """Draw a :class:`RandomFeatures` map for a signal kernel.

    Parameters
    ----------
    kernel : sklearn kernel
        Signal kernel (no top-level ``WhiteKernel``); see
        :func:`~skgpx.pathwise._draws._spectra.spectral_terms` for what is supported.
    n_features : int
        Number of random features ``F`` shared out among the stationary terms
        (in sin/cos pairs for ``feature_map="sincos"``).  Constant and linear terms
        add their exact features on top.
    feature_map : {"sincos", "cosine"}
    n_bases : int
        1 for a shared basis, ``S`` for one basis per sample path.
    n_features_in : int
        Input dimension ``d``.
    shift : Tensor of shape (d,)
        Input shift ``x_0`` (translation invariance keeps phases small).
    generator : torch.Generator
        CPU generator; frequencies (then phases) are drawn term by term in order.
    qmc : bool, default=False
        Randomised quasi-Monte Carlo frequencies for each basis (see
        :func:`~skgpx.pathwise._draws._spectra.sample_unit_frequencies`).
    """
    terms = spectral_terms(kernel)
    stationary = [t for t in terms if not isinstance(t, (ConstantTerm, LinearTerm))]
    units = n_features // 2 if feature_map == "sincos" else n_features
    sizes = _split(units, len(stationary)) if stationary else []
    if any(size == 0 for size in sizes):
        raise ValueError(
            f"n_features={n_features} is too small for the {len(stationary)} stationary "
            "terms of the kernel; each needs at least one frequency."
        )
    blocks, sizes = [], iter(sizes)
    for term in terms:
        if isinstance(term, ConstantTerm):
            blocks.append(_ExactBlock(term.variance))
            continue
        if isinstance(term, LinearTerm):
            blocks.append(_ExactBlock(term.variance, term.sigma_0))
            continue
        size = next(sizes)
        omega = torch.zeros(n_bases, size, n_features_in, dtype=torch.float64)
        for factor in term.factors:
            unit = sample_unit_frequencies(factor, (n_bases, size), n_features_in, generator, qmc)
            omega = omega + unit / torch.as_tensor(factor.length_scale, dtype=torch.float64)
        phases = None
        n_block = 2 * size
        if feature_map == "cosine":
            phases = 2 * math.pi * torch.rand(n_bases, size, generator=generator,
                                              dtype=torch.float64)
            phases = phases.to(device, dtype)
            n_block = size
        scale = math.sqrt(2.0 * term.variance / n_block)
        blocks.append(_StationaryBlock(omega.to(device, dtype), scale, shift, phases))
    return RandomFeatures(blocks, n_bases)
