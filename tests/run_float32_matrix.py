"""Run the float32 tests under each CPU kernel selection a user's machine may make.

float32 results depend on the kernels that ATen (``ATEN_CPU_CAPABILITY``) and MKL
(``MKL_CBWR``, read when MKL loads) select for the CPU; the test suite runs under one
selection (``MKL_CBWR=AUTO,STRICT``, the CPU's default ATen kernels).  This script runs the
float32 tests (every test whose name contains ``float32``, outside the scikit-learn checks)
once per selection, each in a fresh interpreter, and prints a pass/fail matrix; for the
float32-against-float64 contract of ``tests/test_float32.py`` each cell also shows the largest
error / tolerance (the margin on this CPU): over the outputs at the float64 fit's parameters
(``test_float32_numerics_at_fixed_parameters``, rounding-derived bounds), and over the
objective shortfall and the predictions of a float32 fit
(``test_float32_fit_serves_the_float64_outcome``, the optimiser's and a user's tolerances).
A selection the CPU lacks falls back to one it has (ATen prints the capability it used in
the header).

Usage::

    python tests/run_float32_matrix.py [-k EXPRESSION] [--aten auto default avx2 ...]
        [--cbwr AUTO,STRICT COMPATIBLE ...]

Exit status 1 if any cell failed.
"""

import argparse
import itertools
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# "auto": ATEN_CPU_CAPABILITY unset, the CPU's best; "default" is ATen's name for its scalar
# (unvectorised) kernels, a selection as far from AVX-512's as any CPU makes
ATEN = ["auto", "default", "avx2", "avx512"]
# AUTO,STRICT is the suite's; AUTO lets MKL pick code paths by memory alignment as well
CBWR = ["AUTO,STRICT", "AUTO", "COMPATIBLE", "AVX2,STRICT", "AVX512,STRICT"]
CAPABILITY = "import torch; print(torch.backends.cpu.get_cpu_capability())"


def _environment(aten, cbwr):
    env = dict(os.environ, MKL_CBWR=cbwr, SCIPY_ARRAY_API="1", OMP_NUM_THREADS="1",
               MKL_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    env.pop("ATEN_CPU_CAPABILITY", None)
    if aten != "auto":
        env["ATEN_CPU_CAPABILITY"] = aten
    return env


def _run(aten, cbwr, expression, folder):
    """{test id: cell text}, and the capability ATen reports, under one selection."""
    env = _environment(aten, cbwr)
    capability = subprocess.run([sys.executable, "-c", CAPABILITY], env=env, cwd=ROOT,
                                capture_output=True, text=True).stdout.strip()
    report = Path(folder) / f"{aten}-{cbwr.replace(',', '-')}.xml"
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                    "-k", expression, "--ignore", "tests/test_sklearn_checks.py",
                    "-o", "junit_family=legacy",  # the family that keeps record_property
                    f"--junitxml={report}", "tests"], env=env, cwd=ROOT,
                   capture_output=True, text=True)
    cells = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        module = case.get("classname").removeprefix("tests.").replace(".", "/")
        name = f"{module}::{case.get('name')}"
        outcome = "ok"
        for tag, text in (("failure", "FAIL"), ("error", "ERROR"), ("skipped", "skip")):
            if case.find(tag) is not None:
                outcome = text
        worst = [p.get("value") for p in case.iter("property") if p.get("name")
                 == "float32_worst"]
        cells[name] = f"{outcome} {worst[0].split()[-1]}" if worst else outcome
    return cells, capability


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-k", default="float32", help="pytest -k expression")
    parser.add_argument("--aten", nargs="+", default=ATEN)
    parser.add_argument("--cbwr", nargs="+", default=CBWR)
    args = parser.parse_args(argv)
    columns, results = [], {}
    with tempfile.TemporaryDirectory() as folder:
        for aten, cbwr in itertools.product(args.aten, args.cbwr):
            cells, capability = _run(aten, cbwr, args.k, folder)
            column = f"{aten}({capability})/{cbwr}"
            columns.append(column)
            print(f"ran {column}: {sum(c.startswith('ok') for c in cells.values())} of "
                  f"{len(cells)} passed", flush=True)
            for name, cell in cells.items():
                results.setdefault(name, {})[column] = cell
    width = max(map(len, results), default=10)
    print("\nATEN_CPU_CAPABILITY(reported)/MKL_CBWR; cell: outcome [largest error/tolerance]")
    for i, column in enumerate(columns):
        print(f"  c{i}: {column}")
    print(" " * width + "".join(f"  {'c' + str(i):>9}" for i in range(len(columns))))
    for name, row in results.items():
        print(name.ljust(width) + "".join(f"  {row.get(c, '-'):>9}" for c in columns))
    failed = any(not cell.startswith(("ok", "skip")) for row in results.values()
                 for cell in row.values())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
