"""The gallery examples (``examples/plot_*.py``): found by glob, so an example added later
is tested without touching this file, and each has the sphinx-gallery header (a module
docstring whose first line is a title underlined with ``=``).

Running every example in its small setting (``SKGPX_EXAMPLE_SIZE=small``) is the job of
``tests/test_docs.py::test_gallery_figures``: sphinx-gallery executes each file as
``__main__`` and the test checks that its figures reach the built pages.  Running them a
second time as plain scripts cost about two minutes of CPU in a suite that must stay
under 20 minutes.
"""
import ast
from pathlib import Path

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
