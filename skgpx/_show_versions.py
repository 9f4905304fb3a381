"""``skgpx.show_versions``: the system, package versions and devices to paste into a bug report."""

import platform
import sys
from importlib.metadata import PackageNotFoundError, version

import torch
from threadpoolctl import threadpool_info

from ._version import __version__

# distribution names, in the order they are printed (skgpx itself comes first)
_REQUIRED = ("numpy", "scipy", "scikit-learn", "torch", "skorch", "threadpoolctl",
             "tqdm")
_OPTIONAL = ("numba", "dask", "distributed", "dask-ml", "pandas", "matplotlib")


def _version_of(distribution):
    """Installed version of a distribution, or ``"not installed"``."""
    try:
        return version(distribution)
    except PackageNotFoundError:
        return "not installed"


def _system_info():
    return {
        "python": sys.version.replace("\n", " "),
        "executable": sys.executable,
        "machine": platform.platform(),
    }


def _torch_info():
    """Torch's build, threads and the devices ``device="auto"`` can choose from."""
    info = {
        "threads": str(torch.get_num_threads()),
        "MKL": str(torch.backends.mkl.is_available()),
        "built with CUDA": torch.version.cuda or "no (CPU-only build)",
        "CUDA available": str(torch.cuda.is_available()),
    }
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            info[f"cuda:{i}"] = torch.cuda.get_device_name(i)
    return info


def _threadpool_info():
    """One entry per BLAS/OpenMP library loaded in this process (threadpoolctl)."""
    keys = ("user_api", "internal_api", "version", "num_threads", "threading_layer",
            "architecture", "prefix", "filepath")
    return [{key: pool[key] for key in keys if key in pool} for pool in threadpool_info()]


def _print_section(title, items):
    print(f"\n{title}:")
    width = max(len(key) for key in items)
    for key, value in items.items():
        print(f"{key:>{width + 4}}: {value}")


def show_versions():
    """Print the system, the versions of skgpx and its dependencies, and the devices.

    Paste the output into a bug report.  It lists Python and the platform; the installed
    versions of skgpx, numpy, scipy, scikit-learn, torch, skorch, threadpoolctl and tqdm; the
    optional packages (dask, distributed, dask-ml, pandas, matplotlib), shown as
    ``not installed`` where absent; torch's thread count, whether CUDA is available, the CUDA
    version torch was built with and the name of each visible CUDA device; and the BLAS and
    OpenMP libraries loaded in the process with their thread counts, as reported by
    threadpoolctl.

    Versions are read from the installed package metadata, so an optional package is never
    imported.

    See Also
    --------
    sklearn.show_versions : The same report for scikit-learn.

    Examples
    --------
    >>> import skgpx
    >>> skgpx.show_versions()  # doctest: +SKIP
    <BLANKLINE>
    System:
            python: 3.11...
    ...
    """
    _print_section("System", _system_info())
    versions = {"skgpx": __version__}
    versions.update((name, _version_of(name)) for name in _REQUIRED)
    _print_section("Python dependencies", versions)
    _print_section("Optional dependencies", {name: _version_of(name) for name in _OPTIONAL})
    _print_section("Torch", _torch_info())
    pools = _threadpool_info()
    print("\nthreadpoolctl info:")
    if not pools:
        print("    no BLAS or OpenMP library loaded")
    for pool in pools:
        width = max(len(key) for key in pool)
        for key, value in pool.items():
            print(f"    {key:>{width}}: {value}")
        print()
