"""The gallery examples (``examples/plot_*.py``): found by glob, so an example added later
is tested without touching this file, and each has the sphinx-gallery header (a module
docstring whose first line is a title underlined with ``=``).

Running every example in its small setting (``SKGPX_EXAMPLE_SIZE=small``) is the job of
``tests/test_docs.py::test_gallery_figures``: sphinx-gallery executes each file as
``__main__`` and the test checks that its figures reach the built pages.  Running them a
second time as plain scripts cost about two minutes of CPU in a suite that must stay
under 20 minutes.

``examples/demo.py`` (``make demo``) is run here, once, in its quick setting (a slow test):
its table must name every public estimator and the plots must be written.
"""
import ast
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

EXAMPLES_DIR = Path(__file__).resolve().parents[1] / "examples"
EXAMPLES = sorted(EXAMPLES_DIR.glob("plot_*.py"))


def test_examples_are_found():
    assert EXAMPLES, f"no plot_*.py in {EXAMPLES_DIR}"


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda path: path.name)
def test_example_has_gallery_title(path):
    docstring = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")), clean=True)
    assert docstring, f"{path.name} has no module docstring"
    lines = docstring.splitlines()
    assert len(lines) >= 2 and lines[0].strip(), f"{path.name}: no title line"
    underline = lines[1].strip()
    assert set(underline) == {"="} and len(underline) >= len(lines[0].strip()), (
        f"{path.name}: the title {lines[0]!r} must be underlined with '=' at least as long")


# ``examples/demo.py`` (``make demo``): a script, not a gallery example; ``--quick`` runs every
# fit in a tiny setting that checks the demo runs, not its numbers.
DEMO = EXAMPLES_DIR / "demo.py"
DEMO_PLOTS = ["sine_PathwiseGPSampler.png", "gap_pathwise_vs_weight_space.png",
              "robust_regression.png", "gp_classification.png",
              "sine_DeepKernelProcessRegressor.png", "qep_step_turn.png", "qep_rhombus.png",
              "kepsvgp_calibration.png", "drd_bumps.png"]


def _public_estimators():
    import skgpx
    from sklearn.base import BaseEstimator

    return [name for name in skgpx.__all__ if isinstance(getattr(skgpx, name), type)
            and issubclass(getattr(skgpx, name), BaseEstimator)]


def _table_column(stdout, column):
    """The cells of one column of the demo's table, read by the widths of its rule line."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("task "))
    spans, position = [], 0
    for rule in lines[start + 1].split("  "):
        spans.append((position, position + len(rule)))
        position += len(rule) + 2
    left, right = spans[column]
    cells = []
    for line in lines[start + 2:]:
        if not line.strip():
            break
        cells.append(line[left:right].strip())
    return cells


@pytest.mark.slow
def test_demo_shows_every_estimator_beside_its_reference(tmp_path):
    environ = dict(os.environ, MPLBACKEND="Agg", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
                   OPENBLAS_NUM_THREADS="1")
    result = subprocess.run([sys.executable, str(DEMO), "--quick", "--out", str(tmp_path)],
                            cwd=tmp_path, env=environ, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    estimators = _table_column(result.stdout, 1)
    assert len(estimators) >= 20, result.stdout
    missing = [name for name in _public_estimators()
               if not any(cell.startswith(name) for cell in estimators)]
    assert not missing, f"not in the demo's table: {missing}\n{result.stdout}"
    for mode in ("PathwiseGPSampler(n_inducing=", "PathwiseGPSampler(likelihood='student_t'",
                 "PathwiseGPSampler(likelihood='heteroscedastic'",
                 "PathwiseGPClassifier(n_inducing=", "DeepKernelProcessRegressor(n_inducing="):
        assert any(cell.startswith(mode) for cell in estimators), (mode, estimators)
    references = [cell for cell in estimators if cell.endswith("(reference)")]
    assert any(cell.startswith("sklearn GPC") for cell in references), references
    try:
        import gpytorch  # noqa: F401
    except ImportError:
        assert "GPyTorch is not installed" in result.stdout
    else:
        assert any(cell.startswith("GPyTorch SVGP") for cell in references), references
    for name in DEMO_PLOTS:
        path = tmp_path / name
        assert path.is_file(), f"{name} was not written"
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", f"{name} is not a PNG"


def test_demo_skips_the_gpytorch_reference_without_gpytorch(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLES_DIR))  # demo.py imports the plot_* helpers
    spec = importlib.util.spec_from_file_location("skgpx_demo", DEMO)
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)
    monkeypatch.setitem(sys.modules, "gpytorch", None)  # `import gpytorch` now fails
    X = np.array([[0.0], [1.0], [2.0], [3.0]])
    assert demo.gpytorch_svgp_probabilities(X, np.array([0, 1, 0, 1]), X, X[:2], 1, 0.05) is None
