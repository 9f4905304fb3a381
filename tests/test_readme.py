"""The Python code blocks of README.md run, in order, as a reader would paste them.

Every fenced block tagged ``python`` is executed; the blocks share one namespace, in the
order of the README, because a later block may continue an earlier one (the conjugate-gradient
block reuses the sparse fit before it), as it would in one interactive session.  They run in a
fresh interpreter, in a temporary working directory, with one BLAS/OpenMP thread and a time
limit; a failure names the block and its first line in README.md.

Blocks of shell commands are fenced as ``bash`` (or ``console``) and are not executed: they
install, build and test the project (``make demo``, ``make test``), which is what this test
suite is part of.  Every fenced block must carry a language tag, so that a Python block cannot
be skipped by being left untagged.
"""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
PYTHON_TAGS = {"python", "py"}
TIMEOUT_S = 300

FENCE = re.compile(r"^```(?P<tag>[^\s`]*)[^\n]*\n(?P<body>.*?)^```[ \t]*$", re.M | re.S)

# Runs the blocks given as JSON on stdin in one namespace; on an error, prints which block
# failed and exits with status 1.
RUNNER = """
import json, sys, traceback
blocks = json.load(sys.stdin)
namespace = {"__name__": "__main__"}
for line, source in blocks:
    try:
        # padded so that tracebacks give line numbers in README.md
        exec(compile("\\n" * (line - 1) + source, "README.md", "exec"), namespace)
    except BaseException:
        traceback.print_exc()
        print(f"README.md: the python block at line {line} failed", file=sys.stderr)
        sys.exit(1)
"""


def _blocks():
    """(tag, first line number of the code, code) of every fenced block of README.md."""
    text = README.read_text(encoding="utf-8")
    return [(m["tag"].lower(), text.count("\n", 0, m.start("body")) + 1, m["body"])
            for m in FENCE.finditer(text)]


def test_readme_blocks_are_tagged():
    blocks = _blocks()
    assert any(tag in PYTHON_TAGS for tag, _, _ in blocks)
    untagged = [line for tag, line, _ in blocks if not tag]
    assert not untagged, f"README.md: fenced blocks without a language at lines {untagged}"


@pytest.mark.slow
def test_readme_python_blocks_run(tmp_path):
    blocks = [(line, code) for tag, line, code in _blocks() if tag in PYTHON_TAGS]
    env = dict(os.environ, MPLBACKEND="Agg", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
               OPENBLAS_NUM_THREADS="1")
    result = subprocess.run([sys.executable, "-c", RUNNER], input=json.dumps(blocks),
                            cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=TIMEOUT_S)
    assert result.returncode == 0, result.stderr[-5000:]
