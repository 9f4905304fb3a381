"""Torch plumbing shared by every skgpx estimator.

Device and dtype resolution, seeds drawn from ``random_state``, numpy <-> torch
copies and CPU-safe pickling live here once.  Private scikit-learn helpers are
imported in this module only, so that a scikit-learn change is fixed in one place.
"""

import contextlib
import copy
import dataclasses
import numbers
import re
import sys
import warnings

import numpy as np
import torch
from sklearn.utils import check_random_state
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils._param_validation import (  # noqa: F401  (re-exported)
    HasMethods,
    Interval,
    StrOptions,
)

from ._memory import (  # noqa: F401  (re-exported: families import them from here)
    InsufficientMemoryError,
    array_bytes,
    available_memory,
    check_memory,
)
from ._pickle_versions import add_version, pop_version

__all__ = [
    "HasMethods",
    "Interval",
    "StrOptions",
    "InsufficientMemoryError",
    "array_bytes",
    "available_memory",
    "check_memory",
    "CPUPickleMixin",
    "ProbabilisticClassifierMixin",
    "TorchEstimatorMixin",
    "MAX_MAGNITUDE",
    "check_draw_memory",
    "check_magnitude",
    "check_n_samples",
    "column_standardisation",
    "cpu_generator",
    "fit_seeds",
    "loadable_device",
    "prediction_generator",
    "draw_seed",
    "encode_classes",
    "MovableState",
    "fenced_global_rng",
    "progress_bar",
    "resolve_device",
    "rows_per_chunk",
    "standard_normal",
    "resolve_dtype",
    "move_to_device",
    "state_to_device",
    "to_numpy",
    "to_probabilities",
]

_DTYPES = {"float64": torch.float64, "float32": torch.float32}
_DEVICE_PATTERN = re.compile(r"^(auto|cpu|cuda(:\d+)?)$")


def resolve_device(device):
    """Turn a ``device`` parameter into a concrete device string.

    ``"auto"`` picks ``"cuda"`` when torch sees a GPU and ``"cpu"`` otherwise.

    Raises
    ------
    ValueError
        If the string is not one of ``"auto"``, ``"cpu"``, ``"cuda"``, ``"cuda:N"``,
        or CUDA is requested where it is not available.
    """
    if not isinstance(device, str) or not _DEVICE_PATTERN.match(device):
        raise ValueError(
            f"device={device!r} is not understood; use 'auto', 'cpu', 'cuda' or 'cuda:N'."
        )
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(
            f"device={device!r} requested but CUDA is not available; "
            "use device='auto' or 'cpu'."
        )
    return device


def resolve_dtype(dtype):
    """Map the ``dtype`` parameter string to a torch dtype."""
    try:
        return _DTYPES[dtype]
    except (KeyError, TypeError):
        raise ValueError(
            f"dtype={dtype!r} is not supported; use 'float64' or 'float32'."
        ) from None


def check_n_samples(n_samples, minimum=1):
    """The number of posterior draws asked for, as an int; ValueError if it is not an
    integer (bools excluded) of at least ``minimum``."""
    if (not isinstance(n_samples, numbers.Integral) or isinstance(n_samples, bool)
            or n_samples < minimum):
        raise ValueError(f"n_samples={n_samples!r} must be an integer >= {minimum}.")
    return int(n_samples)


# Largest |value| accepted in X and y, per computation dtype.  Kernels, standardisation
# and likelihoods square values and differences of values (up to twice the bound) and sum
# them: 1e150 in float64 and 1e15 in float32 are the largest powers of ten for which
# (2 * bound)**2 summed over 10**7 terms stays below the dtype's largest finite value
# (about 1.8e308 and 3.4e38), so no square, sum of squares or variance can overflow.
MAX_MAGNITUDE = {torch.float64: 1e150, torch.float32: 1e15}


def check_magnitude(array, name, dtype=torch.float64):
    """ValueError when ``max |array|`` exceeds the largest magnitude supported in
    ``dtype`` computations (:data:`MAX_MAGNITUDE`: 1e150 in float64, 1e15 in float32).

    Called right after ``validate_data`` on X (fit and every prediction method) and on y
    (fit).  Non-numeric arrays (objects for structured kernels) pass unchecked.
    """
    if isinstance(dtype, str):
        dtype = resolve_dtype(dtype)
    values = np.asarray(array)
    if values.size == 0 or values.dtype.kind not in "fiu":
        return array
    largest = max(abs(float(values.max())), abs(float(values.min())))
    bound = MAX_MAGNITUDE[dtype]
    if largest > bound:
        name_of = str(dtype).replace("torch.", "")
        raise ValueError(
            f"{name} has values of magnitude up to {largest:.3g}, above the largest "
            f"supported magnitude {bound:.0e} (dtype='{name_of}': squares of larger values "
            f"may overflow); divide {name} by a constant (for example its largest absolute "
            "value) before fitting and predicting."
        )
    return array


def check_draw_memory(n_samples, per_draw, *, what, way_out, device="cpu"):
    """Raise :class:`InsufficientMemoryError` before drawing when ``n_samples`` draws of
    ``per_draw`` values each (the output and the draw buffers, counted in float64, the
    dtype of the normal draws) cannot fit on ``device``.

    ``what`` names the call (``"PathwiseGPSampler.sample_y on 30 rows"``) and
    ``way_out`` what to change; both go into the message of :func:`check_memory`.
    """
    check_memory(
        array_bytes(n_samples, per_draw, dtype=torch.float64),
        what=f"{what} with n_samples={n_samples} ({per_draw} values per draw: the draws "
             "and their buffers)",
        way_out=way_out, device=device,
    )


def encode_classes(estimator, y):
    """``classes_`` (sorted) and the int64 code of each label, for a classifier's fit;
    ValueError for a regression target or a single class."""
    check_classification_targets(y)
    classes, codes = np.unique(y, return_inverse=True)
    if len(classes) < 2:
        raise ValueError(
            f"{type(estimator).__name__} needs at least 2 classes; y has 1 class: "
            f"{classes[0].item()!r}."
        )
    return classes, codes.astype(np.int64)


def draw_seed(random_state):
    """Draw one integer seed in ``[0, 2**31)`` from anything ``check_random_state`` takes."""
    if isinstance(random_state, (int, np.integer)) and not isinstance(random_state, bool):
        return int(random_state)
    return int(check_random_state(random_state).randint(np.iinfo(np.int32).max))


@contextlib.contextmanager
def fenced_global_rng(seed, device="cpu"):
    """Seed torch's global generators for code that only uses them (module constructors,
    third-party training loops), restoring the caller's state on exit.

    The CPU generator is always fenced, and the generator of ``device`` when it is CUDA.
    """
    devices = []
    if str(device).startswith("cuda"):
        devices = [torch.device(device).index or torch.cuda.current_device()]
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(int(seed))
        yield


def standard_normal(shape, generator, dtype=torch.float64, device="cpu"):
    """Standard normal draws of ``shape``, made in float64 where ``generator`` lives (on
    ``device`` from the global generator when it is None), then cast and moved.

    torch's normal stream differs between dtypes and devices: drawing from a CPU generator
    in float64 is what makes float32 and CUDA runs see the same draws (rounded).
    """
    z = torch.randn(shape, generator=generator, dtype=torch.float64,
                    device=generator.device if generator is not None else device)
    return z.to(device=device, dtype=dtype)


def cpu_generator(seed):
    """A CPU ``torch.Generator`` seeded with ``seed``.

    Small random draws are made on the CPU and then moved, so that CPU and GPU runs
    see the same numbers.
    """
    return torch.Generator(device="cpu").manual_seed(int(seed))


def fit_seeds(random_state, names):
    """Named integer seeds of one fit, drawn in the order of ``names``.

    The seed policy of every estimator: ``fit`` draws the seeds it needs, by name, from
    ``check_random_state(random_state)`` (an int gives the same seeds on every call, a
    ``RandomState`` advances), and builds one CPU generator per named stream, so that adding
    a stream never changes what the others draw.  The ``"prediction"`` seed, stored as
    ``_prediction_seed``, is what :func:`prediction_generator` uses when a prediction-time
    draw gets ``random_state=None``.
    """
    rng = check_random_state(random_state)
    return {name: draw_seed(rng) for name in names}


def prediction_generator(estimator, random_state):
    """The CPU generator of a prediction-time draw (``sample_y``, Monte-Carlo averages).

    ``random_state`` when given; otherwise the fit's ``_prediction_seed``, so that repeated
    calls of a fitted estimator agree (as scikit-learn's ``sample_y`` with its default
    ``random_state=0``).  An estimator whose fit is deterministic (DKP, sDRD), or one not
    fitted yet, has no prediction seed: None then means seed 0, never fresh entropy.
    """
    if random_state is None:
        seed = getattr(estimator, "_prediction_seed", 0)
    else:
        seed = draw_seed(random_state)
    return cpu_generator(seed)


def loadable_device(device, owner=None):
    """The device an unpickled object fitted on ``device`` goes to: that device, or the CPU
    with a warning naming ``owner`` when it is a CUDA device and CUDA is not available here.

    ``owner=None`` falls back without a warning: for a part (an estimator's skorch net) whose
    owner warns, so that loading a model warns once.
    """
    device = str(device)
    if device.startswith("cuda") and not torch.cuda.is_available():
        if owner is not None:
            warnings.warn(
                f"{owner} was fitted on {device!r} but CUDA is not available here; its "
                "tensors are loaded on the CPU.",
                UserWarning,
            )
        return "cpu"
    return device


# Elements of one (rows x width) intermediate: 8 MB of float64 on the CPU, where blocks
# that stay in cache are several times faster than large fresh allocations, and 256 MB
# on a GPU, where large blocks keep the device busy.
_CHUNK_ELEMENTS = {"cpu": 2**20, "cuda": 2**25}


def rows_per_chunk(batch_size, width, device="cpu"):
    """Rows per chunk of a row-wise computation with ``width`` values per row.

    At most ``batch_size`` rows, and few enough that one (rows x width) float64
    intermediate stays within the device's budget (8 MB on the CPU, 256 MB on CUDA).
    """
    budget = _CHUNK_ELEMENTS["cuda" if str(device).startswith("cuda") else "cpu"]
    return max(1, min(batch_size, budget // max(width, 1)))


def column_standardisation(values):
    """Column means and standard deviations of a 2-D array, for standardising it.

    A (numerically) constant column gets scale 1, as scikit-learn's ``normalize_y``
    does, so that standardising never divides by zero.
    """
    mean = values.mean(axis=0)
    return mean, safe_scale(values.std(axis=0))


def safe_scale(scale):
    """Standard deviations with (numerically) zero entries replaced by 1, in place."""
    scale[scale < 10 * np.finfo(scale.dtype).eps] = 1.0
    return scale


def to_numpy(tensor):
    """Detach a tensor and return it as a float64 numpy array (a copy off the GPU)."""
    return tensor.detach().to("cpu", torch.float64).numpy()


def to_probabilities(tensor):
    """Class probabilities (rows of a tensor) as float64 numpy rows that sum to one: the
    rows are renormalised after the copy, so float32 rounding cannot leave them off 1."""
    proba = to_numpy(tensor)
    return proba / proba.sum(axis=1, keepdims=True)


def move_to_device(value, device):
    """``value`` with its tensors on ``device``: tensors, modules, lists, tuples, dicts,
    and dataclass instances (moved field by field into a shallow copy); anything else
    is returned as is."""
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, torch.nn.Module):
        # Module.to moves in place: move a copy, so that pickling a GPU-fitted estimator
        # leaves the live one where it is
        return copy.deepcopy(value).to(device)
    if isinstance(value, (list, tuple)):
        return type(value)(move_to_device(item, device) for item in value)
    if isinstance(value, dict):
        return {key: move_to_device(item, device) for key, item in value.items()}
    if isinstance(value, MovableState):
        moved = copy.copy(value)
        moved.__dict__.update(state_to_device(value.__dict__, device))
        return moved
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        moved = copy.copy(value)
        for item in dataclasses.fields(value):
            object.__setattr__(moved, item.name, move_to_device(getattr(value, item.name), device))
        return moved
    return value


class MovableState:
    """Marks a plain object whose attributes :func:`move_to_device` moves (into a shallow
    copy), as it does a dataclass's fields: fitted engines that keep tensors."""


def state_to_device(state, device):
    """A copy of an attribute dict with its tensors and modules moved to ``device``."""
    return {key: move_to_device(value, device) for key, value in state.items()}


class CPUPickleMixin:
    """Pickle an object's tensors from the CPU, so that it loads without a GPU."""

    def __getstate__(self):
        return state_to_device(self.__dict__, "cpu")


class ProbabilisticClassifierMixin:
    """``predict`` and ``predict_log_proba`` of a classifier from its ``predict_proba``."""

    def predict(self, X):
        """The class of largest ``predict_proba``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        y_pred : ndarray of shape (n_samples,)
        """
        proba = self.predict_proba(X)  # checks the fit before classes_ is read
        return self.classes_[np.argmax(proba, axis=1)]

    def predict_log_proba(self, X):
        """Logarithm of ``predict_proba``: ndarray of shape (n_samples, n_classes)."""
        return np.log(self.predict_proba(X))


class TorchEstimatorMixin:
    """Device, dtype and pickling support for estimators that keep torch state.

    Place it before :class:`~sklearn.base.BaseEstimator` in the bases so that its
    ``__getstate__``/``__setstate__`` are the ones that run.  Fitted tensors and
    modules stored as instance attributes are moved to the CPU when pickled and
    back to ``device_`` when loaded; ``device_`` is always a string.  The pickled state
    records the skgpx version, checked when loaded (``_pickle_versions``).
    """

    def _fit_device_dtype(self):
        """Resolve the ``device`` and ``dtype`` parameters (called at the start of fit)."""
        return resolve_device(self.device), resolve_dtype(self.dtype)

    def _current_device_dtype(self):
        """The device and dtype that predictions use: fitted ones, else the parameters."""
        if hasattr(self, "device_"):
            return self.device_, resolve_dtype(self.dtype_)
        return resolve_device(self.device), resolve_dtype(self.dtype)

    def _as_tensor(self, array, device, dtype):
        """Copy a numpy array into a new tensor; user data is never aliased."""
        return torch.tensor(np.ascontiguousarray(array), dtype=dtype, device=device)

    def __getstate__(self):
        return add_version(state_to_device(super().__getstate__(), "cpu"))

    def __setstate__(self, state):
        state = pop_version(state, type(self).__name__)  # warns for another version, refuses 0.1.0
        device = state.get("device_")
        if isinstance(device, str) and device.startswith("cuda"):
            state["device_"] = device = loadable_device(device, type(self).__name__)
            state = state_to_device(state, device)
        super().__setstate__(state)


class _SilentBar:
    """Stands in for a progress bar when ``verbose=0``: prints and creates nothing."""

    def update(self, n=1):
        pass

    def set_postfix(self, **kwargs):
        pass

    def write(self, message, file=None):
        pass

    def close(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def progress_bar(verbose, desc, total=None):
    """One ``tqdm.auto`` bar on stderr when ``verbose >= 1``, else a silent stand-in.

    Use it as a context manager so that the bar closes even when fit raises.
    """
    if not verbose:
        return _SilentBar()
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, file=sys.stderr, leave=True)
