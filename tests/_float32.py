"""float32's rounding, emulated in float64, and a fitted estimator's state in another dtype.

How far float32 may lie from float64 is not a property of one CPU: BLAS, LAPACK and ATen
pick kernels by CPU (``ATEN_CPU_CAPABILITY``, ``MKL_CBWR``) and each kernel rounds
differently.  At fixed parameters that difference is rounding, amplified by the conditioning
of the computation; along an iterative fit it is also the optimiser's: a line search, a
stopping test or a step acceptance that a last-bit difference flips sends the float32 fit
elsewhere, and no model of rounding says where.  So the float32 contract
(``tests/test_float32.py``) bounds rounding only at fixed parameters: the float64
fit's state cast to float32 (:func:`recast`), whose outputs are compared with float64's at
the bounds below; a float32 fit is judged by what a user sees.

What is machine-independent is the *distribution* of float32's error.  Monte Carlo
arithmetic (Parker, Pierce and Eggert, "Monte Carlo arithmetic", Comput. Sci. Eng. 2(4),
2000; the method of Verificarlo, Denis et al., ARITH 2016) samples it: run the computation in
a higher precision and perturb the result of every operation by a random relative error of
the size of the lower precision's rounding, ``x -> x (1 + d)``, ``d ~ U(-a u, a u)`` with
``u = 2**-24`` (float32's unit round-off).  This is the standard model of floating-point
error, ``fl(x op y) = (x op y)(1 + d)``, ``|d| <= u``, with random ``d``: each run is one
float32-like realisation, so the spread of a few runs around the float64 result measures
the float32 error of *this* computation, whichever kernels a CPU selects.  A float32
implementation that loses more digits than float32's rounding explains (a step in lower
precision, a cancellation the float64 path avoids, a wrong result) falls outside it, because
the emulation runs the float64 code path, not the float32 one.

:class:`Float32Rounding` is that perturbation, applied to the result of every torch function
that computes (not to views, copies, indexing, exact operations such as ``abs`` or ``max``,
or in-place updates), as a torch function mode.  It perturbs whole results, not the single
multiply-adds inside a matrix product or a factorisation, and ``a`` amplifies it (see
``AMPLIFY`` and ``MARGIN`` in ``tests/test_float32.py``, which say why).
"""

import copy
import warnings

import numpy as np
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


# ----------------------------------------------------------------------------- fixed state
# A fitted estimator's state at fixed parameters, in another dtype: the float64 fit's values
# in a float32 fit's layout.  Which tensors a float32 fit keeps in float32 is the family's
# choice (a Student-t likelihood keeps its two parameters in float64, every fit keeps its
# public numpy attributes in float64), so the layout is read off a float32 fit of the same
# configuration (``like``) rather than guessed: every tensor, module parameter and buffer,
# and float array takes the dtype of its counterpart there.  Objects are walked where they
# hold the state (skgpx's engines, the skorch net, scikit-learn's one-vs-rest wrapper); a
# value reached twice (``net_.module_`` is ``module_``) maps to one copy.
_WALKED = ("skgpx", "skorch", "sklearn")
_DTYPE_NAMES = frozenset({"float32", "float64", torch.float32, torch.float64})


def _is_float(dtype):
    return dtype.is_floating_point or dtype.is_complex


def _dtype_of(like, value):
    return like.dtype if isinstance(like, torch.Tensor) else value.dtype


def _walk(value, like, leaf, memo, rename):
    key = id(value)
    if key in memo:
        return memo[key]
    if isinstance(value, torch.Tensor):
        target = _dtype_of(like, value)
        out = leaf(value.detach(), target) if _is_float(value.dtype) else value
    elif isinstance(value, np.ndarray) and value.dtype.kind in "fc":
        target = torch.from_numpy(like).dtype if isinstance(like, np.ndarray) else None
        out = value if target is None else leaf(torch.from_numpy(value), target).numpy()
    elif isinstance(value, torch.nn.Module):
        out = _walk_module(value, like, leaf)
    elif isinstance(value, (list, tuple)) and type(value) in (list, tuple):
        likes = like if isinstance(like, (list, tuple)) and len(like) == len(value) else ()
        out = type(value)(_walk(v, likes[i] if likes else None, leaf, memo, rename)
                          for i, v in enumerate(value))
    elif isinstance(value, dict) and type(value) is dict:
        likes = like if isinstance(like, dict) else {}
        out = {k: _walk(v, likes.get(k), leaf, memo, rename) for k, v in value.items()}
    elif _holds_state(value):
        # a bare instance filled with the walked attributes: copy.copy would go through
        # __getstate__, which for skorch's net serialises the modules
        out = object.__new__(type(value))
        memo[key] = out
        likes = vars(like) if type(like) is type(value) else {}
        out.__dict__.update({k: _walk(v, likes.get(k), leaf, memo, rename)
                             for k, v in vars(value).items()})
    else:
        # immutable leaves are not memoised: equal strings share an id
        if rename and _is_dtype_name(value) and _is_dtype_name(like):
            return like  # ``dtype``, ``dtype_`` and the engines' torch dtypes
        return value
    memo[key] = out
    return out


def _holds_state(value):
    # (containers subclassed by these libraries, skorch's History say, hold no tensors)
    return (hasattr(value, "__dict__") and not isinstance(value, (type, list, tuple, dict))
            and type(value).__module__.split(".")[0] in _WALKED)


def _is_dtype_name(value):
    return isinstance(value, (str, torch.dtype)) and value in _DTYPE_NAMES


def _walk_module(module, like, leaf):
    out = copy.deepcopy(module)
    likes = dict(like.named_modules()) if isinstance(like, torch.nn.Module) else {}
    for name, sub in out.named_modules():
        twin = likes.get(name)
        for store in ("_parameters", "_buffers"):
            twins = getattr(twin, store, {})
            for key, tensor in getattr(sub, store).items():
                if tensor is None or not _is_float(tensor.dtype):
                    continue
                mapped = leaf(tensor.detach(), _dtype_of(twins.get(key), tensor))
                if store == "_parameters":
                    mapped = torch.nn.Parameter(mapped, tensor.requires_grad)
                getattr(sub, store)[key] = mapped
    return out


def recast(estimator, like, leaf=None, rename=True):
    """The fitted ``estimator`` with each float tensor ``t`` replaced by ``leaf(t, dtype)``,
    ``dtype`` that of its counterpart in ``like`` (a fit of the same configuration in the
    target dtype); by default the cast ``t.to(dtype)``.  ``rename``: the dtype names
    (``dtype``, ``dtype_``, the engines' torch dtypes) become ``like``'s too.
    ``estimator`` is left as it is."""
    leaf = leaf or (lambda tensor, dtype: tensor.to(dtype))
    return _walk(estimator, like, leaf, {}, rename)


def rounded_like(seed, amplify):
    """A ``recast`` leaf (with ``rename=False``) that keeps float64 but rounds, as the cast
    to float32 would, every value that the float32 layout stores in float32: ``t (1 + d)``
    with ``d`` as in :class:`Float32Rounding`.  The emulated run then starts from a state
    that carries the cast's rounding, as the float32 run does."""
    generator = torch.Generator().manual_seed(seed)
    unit = amplify * UNIT_ROUNDOFF

    def leaf(tensor, dtype):
        if tensor.dtype != torch.float64 or dtype != torch.float32:
            return tensor.clone()
        draw = torch.rand(tensor.shape, generator=generator, dtype=torch.float64)
        return tensor * (1.0 + unit * (2.0 * draw.to(tensor.device) - 1.0))

    return leaf


def layout(value, path="", out=None, seen=None):
    """{path: (dtype, shape)} of every float tensor, module parameter or buffer and float
    array in a fitted estimator, as :func:`recast` walks it."""
    out = {} if out is None else out
    seen = set() if seen is None else seen
    if id(value) in seen:
        return out
    seen.add(id(value))
    if isinstance(value, torch.Tensor) and _is_float(value.dtype):
        out[path] = (str(value.dtype), tuple(value.shape))
    elif isinstance(value, np.ndarray) and value.dtype.kind in "fc":
        out[path] = (str(value.dtype), value.shape)
    elif isinstance(value, torch.nn.Module):
        for name, tensor in value.state_dict(keep_vars=True).items():
            layout(tensor, f"{path}.{name}", out, seen)
    elif isinstance(value, (list, tuple)) and type(value) in (list, tuple):
        for i, item in enumerate(value):
            layout(item, f"{path}[{i}]", out, seen)
    elif isinstance(value, dict) and type(value) is dict:
        for key, item in value.items():
            layout(item, f"{path}.{key}", out, seen)
    elif _holds_state(value):
        layout(vars(value), path, out, seen)
    return out
