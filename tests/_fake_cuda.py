"""Pickle a CPU-fitted estimator as if it had been fitted on a GPU, on a machine without one.

A GPU fit leaves its tensors on the device and ``device_ = "cuda"``; torch's pickling records
each storage's device (``torch.serialization.location_tag``) and refuses to rebuild a CUDA
storage where CUDA is missing.  :func:`cuda_tagged_pickle` reproduces that on the CPU:

* every tensor the fitted object holds is "on the device": its storage is tagged ``'cuda:0'``
  when pickled, and so is every tensor computed from it (a deep copy, a clone, a view);
* a move to the CPU (``Tensor.to`` / ``Tensor.cpu``) makes a fresh, CPU-tagged copy, as it does
  from a real GPU, where on the CPU it would return the same storage;
* ``Tensor.numpy`` of a device tensor raises, as it does on CUDA;
* the recorded devices say ``"cuda"`` (``device_``, a skorch net's ``device``, the
  ``device`` that ``PathwiseFunctions`` reads off its tensors).

Anything left on the "device" when the pickle is written then fails to load with torch's own
``RuntimeError: Attempting to deserialize object on a CUDA device`` -- the failure of a real
GPU-fitted pickle -- and what was moved to the CPU loads.
"""

import contextlib
import gc
import pickle
import types

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten

_SKIP = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType,
         types.MethodType, types.CodeType, types.FrameType)


def _key(storage):
    """Identity of a storage (a tensor's, or the typed/untyped storage that pickling tags)."""
    if isinstance(storage, torch.Tensor):
        storage = storage.untyped_storage()
    if isinstance(storage, torch.TypedStorage):
        storage = storage._untyped_storage
    return storage._cdata


def _reachable_tensors(root):
    """Every tensor reachable from ``root`` through the garbage collector's references
    (attributes, containers, module parameters, optimiser state), classes and modules
    excluded."""
    seen, stack, tensors = set(), [root], []
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, _SKIP):
            continue
        seen.add(id(obj))
        if isinstance(obj, torch.Tensor):
            tensors.append(obj)
        stack.extend(gc.get_referents(obj))
    return tensors


class _OnDevice(TorchFunctionMode):
    """Tracks which tensors are "on the device" while the pickle is written."""

    def __init__(self, tensors):
        super().__init__()
        self.keys = set()
        self.alive = []  # keeps tracked storages alive, so that no address is reused
        for tensor in tensors:
            self._track(tensor)

    def _track(self, tensor):
        self.keys.add(_key(tensor))
        self.alive.append(tensor)

    def on_device(self, tensor):
        return isinstance(tensor, torch.Tensor) and _key(tensor) in self.keys

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        inputs = [leaf for leaf in tree_flatten((args, kwargs))[0] if self.on_device(leaf)]
        if inputs and func is torch.Tensor.numpy:
            raise TypeError("can't convert cuda:0 device type tensor to numpy. Use "
                            "Tensor.cpu() to copy the tensor to host memory first.")
        out = func(*args, **kwargs)
        if not inputs:
            return out
        if _moves_to_cpu(func, args, kwargs):
            if self.on_device(out):
                out = out.clone()  # a real move copies; the mode is off inside this method
            return out
        for leaf in tree_flatten(out)[0]:
            if isinstance(leaf, torch.Tensor):
                self._track(leaf)
        return out


def _moves_to_cpu(func, args, kwargs):
    if func is torch.Tensor.cpu:
        return True
    if func is torch.Tensor.to:
        device = torch._C._nn._parse_to(*args[1:], **kwargs)[0]
        return device is not None and device.type == "cpu"
    return False


def _shallow_copy(obj):
    """A new instance sharing ``obj``'s attributes (its ``__getstate__`` is not run)."""
    twin = object.__new__(type(obj))
    twin.__dict__.update(vars(obj))
    return twin


def _as_fitted_on_cuda(fitted):
    """A shallow copy of ``fitted`` with the recorded devices a GPU fit leaves: the
    estimator's ``device_`` and its skorch net's ``device`` (the net copied too)."""
    obj = _shallow_copy(fitted)
    if isinstance(getattr(obj, "device_", None), str):
        obj.device_ = "cuda"
    if getattr(obj, "net_", None) is not None:
        obj.net_ = _shallow_copy(obj.net_)
        obj.net_.device = "cuda"
    return obj


@contextlib.contextmanager
def _tagged(obj, mode):
    """Storages tracked by ``mode`` tagged ``'cuda:0'``; an object that reads its device off
    its tensors (``PathwiseFunctions.device``) reads ``cuda:0``."""
    original_tag = torch.serialization.location_tag
    cls = type(obj)
    original_device = cls.__dict__.get("device")

    def location_tag(storage):
        return "cuda:0" if _key(storage) in mode.keys else original_tag(storage)

    torch.serialization.location_tag = location_tag
    if isinstance(original_device, property):
        cls.device = property(lambda self: torch.device("cuda", 0))
    try:
        with mode:
            yield
    finally:
        torch.serialization.location_tag = original_tag
        if isinstance(original_device, property):
            cls.device = original_device


def cuda_tagged_pickle(fitted, dump=pickle.dumps):
    """``dump`` of ``fitted`` as a GPU fit would write it; returns what ``dump`` returns.

    ``dump`` is ``pickle.dumps`` or any function that pickles its argument (``joblib.dump``
    to a file, for instance).  ``fitted`` keeps its recorded devices: a shallow copy is
    pickled, whose tensors are ``fitted``'s own.
    """
    obj = _as_fitted_on_cuda(fitted)
    mode = _OnDevice(_reachable_tensors(obj))
    with _tagged(obj, mode):
        return dump(obj)
