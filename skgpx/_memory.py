"""A memory guard for the quadratic allocations of skgpx estimators.

Exact GP solves, DKP Gram matrices, dense sDRD factors and joint draws hold ``n x n``
(or ``p x p``) arrays.  Past some size the allocation cannot succeed, and torch only
says so after minutes of work, with an allocator error that names no way out.  Every
family therefore estimates the bytes of its largest simultaneous buffers before any
torch work and calls :func:`check_memory`, which raises
:class:`InsufficientMemoryError` at once, naming the size, the memory available and
what to change.

The environment variable ``SKGPX_MEMORY_LIMIT`` (bytes, or a number with a unit such as
``"512MB"`` or ``"2GiB"``) caps the memory the guard assumes available: for machines
shared with other users, and for tests.
"""

import os
import re

import torch

try:
    import resource
except ImportError:  # Windows
    resource = None

__all__ = ["InsufficientMemoryError", "array_bytes", "available_memory", "check_memory"]

LIMIT_VARIABLE = "SKGPX_MEMORY_LIMIT"

# cgroup "no limit" is the largest page-aligned int64 (v1) or the string "max" (v2);
# anything from 2**60 bytes (an exbibyte) on is treated as no limit.
_ABSURD = 2**60
_UNITS = {
    "": 1, "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40,
    "ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
}
_LIMIT_PATTERN = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-zA-Z]*)\s*$")
_DTYPE_NAMES = {"float64": torch.float64, "float32": torch.float32}


class InsufficientMemoryError(MemoryError):
    """Raised before an allocation that cannot fit in the memory this process can use."""


def format_bytes(n_bytes):
    """``n_bytes`` in decimal units with three significant digits, e.g. ``'28.8 GB'``."""
    value = float(n_bytes)
    for unit in ("B", "kB", "MB", "GB", "TB", "PB", "EB"):
        if abs(value) < 999.95 or unit == "EB":
            return f"{int(value)} B" if unit == "B" else f"{value:.3g} {unit}"
        value /= 1000.0


def _parse_limit(text):
    """Bytes of a ``SKGPX_MEMORY_LIMIT`` value; None when it is unset or blank."""
    if text is None or not text.strip():
        return None
    match = _LIMIT_PATTERN.match(text)
    unit = match.group(2).lower() if match else None
    if match is None or unit not in _UNITS:
        raise ValueError(
            f"{LIMIT_VARIABLE}={text!r} is not understood; give a number of bytes, optionally "
            "with a unit: B, kB, MB, GB, TB (powers of 1000) or KiB, MiB, GiB, TiB (powers "
            "of 1024; K, M, G, T alone also mean powers of 1024), e.g. '512MB' or '2GiB'."
        )
    value = int(float(match.group(1)) * _UNITS[unit])
    if value <= 0:
        raise ValueError(f"{LIMIT_VARIABLE}={text!r} must be a positive number of bytes.")
    return value


def _read(path):
    try:
        with open(path) as handle:
            return handle.read()
    except OSError:
        return None


def _read_int(path):
    text = _read(path)
    if text is None:
        return None
    try:
        return int(text.strip())
    except ValueError:  # "max" (cgroup v2 without a limit)
        return None


def _stat_value(path, keys):
    """The first of ``keys`` found in a cgroup ``memory.stat`` file, or 0."""
    text = _read(path) or ""
    values = dict(line.split()[:2] for line in text.splitlines() if len(line.split()) >= 2)
    for key in keys:
        if key in values and values[key].isdigit():
            return int(values[key])
    return 0


def _meminfo_available():
    """``MemAvailable`` of ``/proc/meminfo``, else the free pages of ``os.sysconf``."""
    text = _read("/proc/meminfo")
    if text is not None:
        for line in text.splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


def _cgroup_directories(controller):
    """Directories of this process's cgroup and of its ancestors up to the mount point:
    ``controller`` None for the unified (v2) hierarchy, ``"memory"`` for v1."""
    text = _read("/proc/self/cgroup") or ""
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if (controller is None and parts[0] == "0" and parts[1] == "") or (
                controller is not None and controller in parts[1].split(",")):
            root = "/sys/fs/cgroup" if controller is None else f"/sys/fs/cgroup/{controller}"
            path = parts[2].strip("/")
            directories = []
            while True:
                directories.append(os.path.join(root, path) if path else root)
                if not path:
                    return directories
                path = os.path.dirname(path)
    return []


def _cgroup_headroom():
    """The smallest ``limit - (usage - reclaimable page cache)`` over this process's
    cgroups (v2 ``memory.max``/``memory.current``, v1 ``memory.limit_in_bytes``/
    ``memory.usage_in_bytes``); None where no limit is set."""
    headrooms = []
    for directory in _cgroup_directories(None):
        limit = _read_int(os.path.join(directory, "memory.max"))
        usage = _read_int(os.path.join(directory, "memory.current"))
        if limit is not None and usage is not None and limit < _ABSURD:
            usage -= _stat_value(os.path.join(directory, "memory.stat"), ("inactive_file",))
            headrooms.append(limit - max(usage, 0))
    for directory in _cgroup_directories("memory"):
        limit = _read_int(os.path.join(directory, "memory.limit_in_bytes"))
        usage = _read_int(os.path.join(directory, "memory.usage_in_bytes"))
        if limit is not None and usage is not None and limit < _ABSURD:
            usage -= _stat_value(os.path.join(directory, "memory.stat"),
                                 ("total_inactive_file", "inactive_file"))
            headrooms.append(limit - max(usage, 0))
    return min(headrooms) if headrooms else None


def _address_space_headroom():
    """``RLIMIT_AS`` (soft) minus the current virtual size, where a limit is set."""
    if resource is None:
        return None
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY or soft >= _ABSURD:
        return None
    statm = _read("/proc/self/statm")
    if statm is None:
        return None
    return soft - int(statm.split()[0]) * resource.getpagesize()


def _cuda_available(device):
    free, _ = torch.cuda.mem_get_info(device)
    # blocks torch's caching allocator holds but has not handed out are reusable
    cached = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    return free + max(cached, 0)


def _available(device):
    """``(bytes, capped)``: what :func:`available_memory` returns, and whether
    ``SKGPX_MEMORY_LIMIT`` is what set it."""
    device = torch.device(device)
    if device.type == "cuda":
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        measured = [_cuda_available(device)]
    else:
        measured = [_meminfo_available(), _cgroup_headroom(), _address_space_headroom()]
    measured = [max(int(value), 0) for value in measured if value is not None]
    system = min(measured) if measured else None
    limit = _parse_limit(os.environ.get(LIMIT_VARIABLE))
    if limit is not None and (system is None or limit <= system):
        return limit, True
    if system is None:  # nothing to read (no /proc, no sysconf): no guard
        return _ABSURD, False
    return system, False


def available_memory(device="cpu"):
    """Bytes this process can still allocate on ``device``.

    On the CPU: the smallest of ``MemAvailable`` (``/proc/meminfo``; the free pages of
    ``os.sysconf`` where ``/proc`` is absent), the headroom of this process's cgroups
    (limit minus usage, reclaimable page cache not counted as used), and the soft
    ``RLIMIT_AS`` minus the current virtual size where such a limit is set.  On CUDA:
    the free device memory plus what torch's caching allocator holds unused.  The
    environment variable ``SKGPX_MEMORY_LIMIT`` caps the result.

    Parameters
    ----------
    device : str or torch.device, default="cpu"
        ``"cpu"``, ``"cuda"`` or ``"cuda:N"``.

    Returns
    -------
    n_bytes : int
        Positive, unless the machine has nothing left.

    Raises
    ------
    ValueError
        If ``SKGPX_MEMORY_LIMIT`` is set to something that is not a positive size.
    """
    return _available(device)[0]


def array_bytes(*shape, dtype=torch.float64):
    """Bytes of a dense tensor of this shape and dtype.

    Parameters
    ----------
    *shape : int
        The dimensions (a single tuple of them is accepted too).
    dtype : torch.dtype or {"float64", "float32"}, default=torch.float64

    Returns
    -------
    n_bytes : int
        Exact (Python integers do not overflow).
    """
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    if isinstance(dtype, str):
        if dtype not in _DTYPE_NAMES:
            raise ValueError(f"dtype={dtype!r} is not supported; use 'float64' or 'float32'.")
        dtype = _DTYPE_NAMES[dtype]
    size = torch.empty((), dtype=dtype).element_size()
    for dim in shape:
        if int(dim) < 0:
            raise ValueError(f"shape={shape!r} has a negative dimension.")
        size *= int(dim)
    return size


def check_memory(n_bytes, *, what, way_out, device="cpu", fraction=0.9):
    """Raise :class:`InsufficientMemoryError` when ``n_bytes`` will not fit.

    Call it after validation and before any torch work, with the bytes of the largest
    set of buffers the computation holds at once.

    Parameters
    ----------
    n_bytes : int
        Bytes the computation needs.
    what : str
        What needs them, for the message (``"DeepKernelProcessRegressor.fit on 30000
        rows"``).
    way_out : str
        What the user can change, for the message.
    device : str or torch.device, default="cpu"
        Where the buffers live.
    fraction : float, default=0.9
        Share of the available memory the buffers may take.

    Raises
    ------
    InsufficientMemoryError
        When ``n_bytes > fraction * available_memory(device)``; the message reads
        ``"{what} needs {size}, but only {available} is available on {device}; {way_out}."``.
    """
    available, capped = _available(device)
    if n_bytes <= fraction * available:
        return None
    where = str(device)
    if capped:
        where += f" (capped by {LIMIT_VARIABLE}={os.environ.get(LIMIT_VARIABLE)!r})"
    raise InsufficientMemoryError(
        f"{what} needs {format_bytes(n_bytes)}, but only {format_bytes(available)} is "
        f"available on {where}; {way_out}."
    )
