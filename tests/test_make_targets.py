"""The two test commands of the Makefile: ``make test`` (the whole suite, what CI runs) and
``make test-fast`` (the same run less the ``slow`` marker).  Both are read from the Makefile
itself, so that a change to one that the other misses fails here rather than in CI."""

import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
MAKEFILE = ROOT / "Makefile"


def _recipe(target):
    """The recipe lines of ``target`` in the Makefile, tabs stripped."""
    lines = MAKEFILE.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if re.match(rf"^{re.escape(target)}:", line))
    recipe = []
    for line in lines[start + 1:]:
        if not line.startswith("\t"):
            break
        recipe.append(line[1:])
    return recipe


def test_fast_target_is_the_full_run_without_slow_tests():
    full, fast = _recipe("test"), _recipe("test-fast")
    assert full[0] == fast[0] == "$(PY) -m flake8"
    # same environment, interpreter, workers and scheduling; only the marker and the
    # optional extra arguments differ
    full_pytest = full[1].replace("--durations=25 ", "")
    fast_pytest = fast[1].replace("--durations=10 ", "")
    assert fast_pytest == full_pytest.replace(
        " tests", ' -m "not slow" $(PYTEST_ARGS) tests')


PAPER_LEVEL_MODULES = ["tests/qep/test_paper.py", "tests/kepsvgp/test_paper.py",
                       "tests/drd/test_simulation.py"]


def test_paper_level_modules_are_left_out_of_the_fast_run():
    # collect them as `make test-fast` would (one collection: its start-up is most of the cost)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
         "-m", "not slow", *PAPER_LEVEL_MODULES], cwd=ROOT, capture_output=True, text=True)
    collected = [line for line in result.stdout.splitlines() if "::" in line]
    assert collected == []
    assert result.returncode == 5, result.stdout[-2000:]  # pytest: no tests collected
