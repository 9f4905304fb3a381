"""Cosine and sine of one array in one pass (float64 on the CPU).

Random Fourier features need both ``cos(a)`` and ``sin(a)`` of the same phases, and at
a million query points they are a third of a draw's cost.  torch evaluates them
separately, each with its own argument reduction, at about 4 ns per value on one AVX2
core.  Both share the reduction

.. math::

    a = k \\frac{\\pi}{2} + r, \\qquad k = \\operatorname{round}(2a/\\pi),
    \\quad |r| \\le \\pi/4,

after which ``sin(r)`` and ``cos(r)`` are two short polynomials and the quadrant
``k mod 4`` only permutes and negates them:

====  =========  =========
k%4   sin(a)     cos(a)
====  =========  =========
0     sin r      cos r
1     cos r      -sin r
2     -sin r     -cos r
3     -cos r     sin r
====  =========  =========

``r`` is formed with pi/2 split into three parts (Cody and Waite): the first two
carry 30 significant bits, so ``k`` times either is exact for ``|k| < 2**23``; past
``|a| = 2**22`` (and for inf or NaN) torch recomputes that value.  Every value depends on its
own phase only, never on the other phases of the call: the vectorised loop is elementwise
and a far phase sends only itself to torch, so a function draw keeps its bits whichever
rows it is evaluated with.  The polynomials are
the Taylor series to ``r**17`` (sine) and ``r**16`` (cosine), whose truncation errors on
``|r| <= pi/4`` are below 1e-19 and 2e-18.  The results are within 2 ulp of NumPy's and
within 2.3e-16 absolutely (the tests check both, next to the quadrant boundaries too).

The loop is branch-free, so LLVM vectorises it: with numba installed
(``pip install skgpx[fast]``) a (cos, sin) pair takes 3.1-3.6 ns on one AVX2 core against
torch's 7.6-8 ns; without numba, or with the environment variable
``SKGPX_DISABLE_NUMBA=1``, torch's two calls run.
"""

import functools
import math
import os
from decimal import Decimal
from fractions import Fraction

import torch

__all__ = ["cos_sin_rows"]

# Past this |a| the reduction could lose bits: torch takes the array.
_LIMIT = 2.0 ** 22


def _half_pi_parts():
    """pi/2 as three doubles ``p1 + p2 + p3``, the first two with 30 significant bits."""
    # a Decimal from a string, and a Fraction from that, are exact: no rounding below
    pi = Decimal("3.14159265358979323846264338327950288419716939937510582097494")
    rest = Fraction(pi) / 2
    parts = []
    for _ in range(2):
        exponent = math.frexp(float(rest))[1]
        unit = Fraction(2) ** (exponent - 30)
        lead = Fraction(math.floor(rest / unit)) * unit
        parts.append(float(lead))
        rest -= lead
    parts.append(float(rest))
    return parts, float(1 / (Fraction(pi) / 2))


(_P1, _P2, _P3), _TWO_OVER_PI = _half_pi_parts()
_S = [(-1) ** i / math.factorial(2 * i + 1) for i in range(1, 9)]  # r^3 ... r^17
_C = [(-1) ** i / math.factorial(2 * i) for i in range(1, 9)]  # r^2 ... r^16


def _build_kernel():
    import numba
    import numpy as np

    p1, p2, p3, two_over_pi = _P1, _P2, _P3, _TWO_OVER_PI
    s1, s2, s3, s4, s5, s6, s7, s8 = _S
    c1, c2, c3, c4, c5, c6, c7, c8 = _C
    limit = _LIMIT

    # "contract" lets LLVM fuse a*b+c into one FMA (one rounding fewer); no other
    # reassociation, so the error analysis above holds.  Every inner loop runs over
    # the n columns, unit stride and branch-free, which LLVM vectorises.
    @numba.njit(nogil=True, cache=True, fastmath={"contract"}, error_model="numpy")
    def kernel(phases, out):
        B, P, n = phases.shape
        far = 0.0
        for row in range(B * P):
            b, p = row // P, row % P
            arg, cos_row, sin_row = phases[b, p], out[b, p], out[b, P + p]
            # its own loop: a flag set in the next one stops vectorisation
            for i in range(n):
                far += 0.0 if abs(arg[i]) <= limit else 1.0  # NaN counts as far
            for i in range(n):  # far values come out wrong here; the caller redoes them
                v = arg[i]
                k = np.floor(v * two_over_pi + 0.5)
                r = ((v - k * p1) - k * p2) - k * p3
                z = r * r
                sin_r = r + r * z * (s1 + z * (s2 + z * (s3 + z * (s4 + z * (
                    s5 + z * (s6 + z * (s7 + z * s8)))))))
                cos_r = 1.0 + z * (c1 + z * (c2 + z * (c3 + z * (c4 + z * (
                    c5 + z * (c6 + z * (c7 + z * c8)))))))
                q = k - 4.0 * np.floor(k * 0.25)  # k mod 4, a float in {0, 1, 2, 3}
                half = np.floor(q * 0.5)  # 1 for q in {2, 3}
                odd = q - 2.0 * half  # 1 for q in {1, 3}
                flip_cos = odd + half - 2.0 * odd * half  # 1 for q in {1, 2}
                sin_row[i] = (1.0 - 2.0 * half) * (odd * cos_r + (1.0 - odd) * sin_r)
                cos_row[i] = (1.0 - 2.0 * flip_cos) * (odd * sin_r + (1.0 - odd) * cos_r)
        return far

    return kernel


@functools.cache
def _kernel():
    """The compiled kernel, or None without numba (or with ``SKGPX_DISABLE_NUMBA=1``)."""
    if os.environ.get("SKGPX_DISABLE_NUMBA", "") not in ("", "0"):
        return None
    try:
        return _build_kernel()
    except ImportError:  # numba is optional: torch's cos and sin serve
        return None


def cos_sin_rows(phases, out):
    """``out = [cos(phases); sin(phases)]``, stacked along the rows of each matrix.

    Parameters
    ----------
    phases : Tensor of shape (P, n) or (B, P, n)
        Not modified.
    out : Tensor of shape (2 P, n) or (B, 2 P, n)
        Cosines in the first ``P`` rows of each matrix, sines in the last; must not
        overlap ``phases``.

    Returns
    -------
    out : Tensor

    Notes
    -----
    Contiguous float64 CPU tensors without autograd, with torch on one thread, go
    through the one-pass kernel of this module when numba is installed; anything else
    (float32, CUDA, a strided view, several torch threads) through ``torch.cos`` and
    ``torch.sin``, and so does each phase beyond ``2**22`` in magnitude, inf or NaN (that
    value alone).  The two routes agree to 2 ulp; either way a value depends on its own
    phase only.  Several threads go to torch because its parallel loops run on its
    own pool: a second pool beside it measured no faster on two cores.  A batch is one
    call of the kernel (independent bases have one small matrix per path: a call per
    matrix cost 16 us of Python each).
    """
    fast = (out.device.type == "cpu" and out.dtype == torch.float64
            and phases.dtype == out.dtype and phases.is_contiguous() and out.is_contiguous()
            and not (phases.requires_grad or out.requires_grad)
            and torch.get_num_threads() == 1)
    kernel = _kernel() if fast else None
    P, n = phases.shape[-2:]
    if kernel is None:
        torch.cos(phases, out=out[..., :P, :])
        torch.sin(phases, out=out[..., P:, :])
        return out
    if kernel(phases.numpy().reshape(-1, P, n), out.numpy().reshape(-1, 2 * P, n)):
        far = ~(phases.abs() <= _LIMIT)  # NaN too
        values = phases[far]
        out[..., :P, :][far] = torch.cos(values)
        out[..., P:, :][far] = torch.sin(values)
    return out
