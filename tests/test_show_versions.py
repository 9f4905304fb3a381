"""skgpx.show_versions prints the system, the versions of the dependencies and the devices."""
from importlib.metadata import PackageNotFoundError, version

import numpy
import pytest
import scipy
import sklearn
import skorch
import threadpoolctl
import torch

import skgpx
from skgpx import _show_versions


def test_show_versions_lists_packages_and_versions(capsys):
    assert "show_versions" in skgpx.__all__
    assert skgpx.show_versions() is None
    out = capsys.readouterr().out
    for title in ("System:", "Python dependencies:", "Optional dependencies:", "Torch:",
                  "threadpoolctl info:"):
        assert title in out
    expected = {
        "skgpx": skgpx.__version__,
        "numpy": numpy.__version__,
        "scipy": scipy.__version__,
        "scikit-learn": sklearn.__version__,
        "torch": torch.__version__,
        "skorch": skorch.__version__,
        "threadpoolctl": threadpoolctl.__version__,
    }
    lines = [line.strip() for line in out.splitlines()]
    for name, value in expected.items():
        assert f"{name}: {value}" in lines, name
    for name in ("dask", "distributed", "dask-ml", "matplotlib"):
        line = next(line for line in lines if line.startswith(f"{name}: "))
        value = line.split(": ", 1)[1]
        try:
            installed = version(name)
        except PackageNotFoundError:
            installed = "not installed"
        assert value == installed, name
    assert f"CUDA available: {torch.cuda.is_available()}" in lines
    for i in range(torch.cuda.device_count() if torch.cuda.is_available() else 0):
        assert f"cuda:{i}: {torch.cuda.get_device_name(i)}" in lines
    # numpy's BLAS is loaded in this process, so threadpoolctl reports at least one library
    assert any(line.startswith("internal_api: ") for line in lines)


def test_missing_optional_package_is_reported(capsys, monkeypatch):
    monkeypatch.setattr(_show_versions, "_OPTIONAL", ("skgpx-no-such-distribution",))
    skgpx.show_versions()
    lines = [line.strip() for line in capsys.readouterr().out.splitlines()]
    assert "skgpx-no-such-distribution: not installed" in lines


@pytest.mark.gpu
def test_show_versions_names_cuda_devices(capsys):
    skgpx.show_versions()
    lines = [line.strip() for line in capsys.readouterr().out.splitlines()]
    assert "CUDA available: True" in lines
    assert f"cuda:0: {torch.cuda.get_device_name(0)}" in lines
