"""float32's rounding, emulated in float64: the scale of float32's error, derived at test time.

How far a float32 fit may lie from the float64 fit is not a property of one CPU: BLAS, LAPACK
and ATen pick kernels by CPU (``ATEN_CPU_CAPABILITY``, ``MKL_CBWR``), each kernel rounds
differently, and an iterative fit amplifies the difference by the conditioning of its matrices
and of its iterations.  A tolerance read off one machine's float32 error (as this suite's
were) fails on another machine's.

What is machine-independent is the *distribution* of float32's error.  Monte Carlo
arithmetic (Parker, Pierce and Eggert, "Monte Carlo arithmetic", Comput. Sci. Eng. 2(4),
2000; the method of Verificarlo, Denis et al., ARITH 2016) samples it: run the computation in
a higher precision and perturb the result of every operation by a random relative error of
the size of the lower precision's rounding, ``x -> x (1 + d)``, ``d ~ U(-a u, a u)`` with
``u = 2**-24`` (float32's unit round-off).  This is the standard model of floating-point
error, ``fl(x op y) = (x op y)(1 + d)``, ``|d| <= u``, with random ``d``: each run is one
float32-like realisation, so the spread of a few runs around the float64 result measures
the float32 error of *this* problem, whichever kernels a CPU selects.  A float32
implementation that loses more digits than float32's rounding explains (a step in lower
precision, a cancellation the float64 path avoids, a wrong result) falls outside it, because
the emulation runs the float64 code path, not the float32 one.

:class:`Float32Rounding` is that perturbation, applied to the result of every torch function
that computes (not to views, copies, indexing, exact operations such as ``abs`` or ``max``,
or in-place updates), as a torch function mode.  It perturbs whole results, not the single
multiply-adds inside a matrix product or a factorisation, and ``a`` amplifies it (see
``AMPLIFY`` and ``MARGIN`` in ``tests/test_common.py``, which say why).
"""

import warnings

import torch
from torch.overrides import TorchFunctionMode

UNIT_ROUNDOFF = 2.0**-24  # float32's: half its machine epsilon

# Operations whose float32 result carries no rounding (data movement, views, exact
# arithmetic, comparisons, creation of exact constants), or that are not computations.
_EXACT = frozenset("""
    __get__ __set__ __setitem__ __getitem__ __delitem__ __reduce_ex__ __deepcopy__
    __setstate__ __array__ __len__ __iter__ __format__ __repr__ __neg__ __abs__
    detach clone to cpu cuda contiguous numpy item tolist type double float size dim numel
    abs neg negative max min amax amin aminmax clamp clip clamp_min clamp_max maximum minimum
    relu sort topk sign floor ceil round trunc diagonal diag diag_embed tril triu transpose
    permute squeeze unsqueeze view view_as reshape reshape_as flatten unflatten expand
    expand_as broadcast_to narrow select unbind split chunk movedim t cat concat concatenate
    stack hstack vstack gather index_select take take_along_dim masked_fill masked_select
    where zeros_like ones_like empty empty_like full_like new_full new_zeros new_ones
    new_empty new_tensor eye zeros ones full arange repeat repeat_interleave tile flip roll
    index_copy index_put scatter masked_scatter isfinite isnan isinf all any argmax argmin
    argsort nonzero eq ne lt le gt ge equal allclose isclose is_floating_point
""".split())


class Float32Rounding(TorchFunctionMode):
    """Perturb each computed float64 tensor by ``(1 + d)``, ``d ~ U(-amplify u, amplify u)``.

    Parameters
    ----------
    seed : int
        Seeds a private generator (the global generators are untouched).
    amplify : float
        The rounding emulated, in units of float32's (``u = 2**-24``).
    """

    def __init__(self, seed, amplify):
        super().__init__()
        self._generator = torch.Generator().manual_seed(seed)
        self._unit = amplify * UNIT_ROUNDOFF

    def _round(self, value, args):
        if (not isinstance(value, torch.Tensor) or value.dtype != torch.float64
                or value.numel() == 0 or value._is_view() or any(value is a for a in args)):
            return value
        # the handler runs with this mode off, so these operations are not perturbed
        draw = torch.rand(value.shape, generator=self._generator, dtype=torch.float64)
        return value * (1.0 + self._unit * (2.0 * draw.to(value.device) - 1.0))

    def __torch_function__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        name = getattr(func, "__name__", "")
        # in-place updates (``add_``) keep their tensor: perturbing would replace it
        if name in _EXACT or (name.endswith("_") and not name.startswith("__")):
            return result
        if isinstance(result, torch.Tensor):
            return self._round(result, args)
        if type(result).__module__ == "torch.return_types":  # eigh, slogdet, ...
            return type(result)([self._round(value, args) for value in result])
        return result


def emulated(run, seed, amplify):
    """``run()`` (a float64 fit and its outputs) under :class:`Float32Rounding`; warnings
    that the perturbed run raises (a jitter it needed, say) are the run's, not the test's."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with Float32Rounding(seed, amplify):
            return run()
