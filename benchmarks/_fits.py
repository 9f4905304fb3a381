"""Shared pieces of the benchmarks that fit several models per seed in one process
(``benchmarks/qep_*.py``, ``benchmarks/kepsvgp_digits.py``).

Import it right AFTER ``_common`` (which must stay the first import of every benchmark
script: it pins the threads before numpy is loaded)::

    import _common as C  # noqa: I001  (first: pins the threads before numpy is imported)
    import _fits as F

The scripts fit several models per seed in one process and keep one record (a dict) per
fit, with ``"error"`` (None or the error text) and ``"warnings"`` (see
``_common.recorded``).  This module holds:

* :func:`values`, :func:`mean_se`, :func:`fmt_pm`: one metric over the records that did not
  fail, its mean and standard error, and the "mean ± s.e." table cell;
* :func:`add_dtype_argument`: ``--dtype`` (float32 by default, as the authors);
* :func:`add_output_arguments` / :func:`write_outputs`: the ``--json`` / ``--csv`` options
  (default ``benchmarks/results/<script>.{json,csv}``, git-ignored) and the files;
* :func:`run_main`: the common body of ``main()``: header (with the dtype note), load
  average, the runs under a warnings filter, the reports, wall time and load at the end.

Running this file directly does nothing except print what it is (``make bench`` runs every
``benchmarks/*.py``).
"""

import _common as C  # noqa: I001  (first: pins the threads before numpy is imported)

import csv
import json
import math
import os
import time
import warnings

import numpy as np

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


# ---------------------------------------------------------------- statistics


def values(records, key):
    """``key`` of every record that did not fail, as a float array (NaN where missing)."""
    return np.array([r.get(key, math.nan) for r in records if not r["error"]], dtype=float)


def mean_se(x):
    """Mean and standard error of the finite entries of ``x`` (NaN s.e. for one entry)."""
    x = x[np.isfinite(x)]
    if x.size == 0:
        return math.nan, math.nan
    se = float(np.std(x, ddof=1) / math.sqrt(x.size)) if x.size > 1 else math.nan
    return float(np.mean(x)), se


def fmt_pm(x, digits=3, g_from=math.inf):
    """``"mean ± se"`` of ``x`` with ``digits`` decimals ("-" when empty, the mean alone for
    one entry); a mean of size ``g_from`` or more gets ``digits`` significant figures."""
    m, se = mean_se(x)
    if not math.isfinite(m):
        return "-"
    text = f"{m:.{digits}g}" if abs(m) >= g_from else f"{m:.{digits}f}"
    return text + (f" ± {se:.{digits}f}" if math.isfinite(se) else "")


# ---------------------------------------------------------------- main and outputs


def add_dtype_argument(parser, what="deep models"):
    """``--dtype`` of the deep models: float32 (the authors' dtype) or float64."""
    parser.add_argument("--dtype", default="float32", choices=("float32", "float64"),
                        help=f"dtype of the {what} (float32, as the authors)")


def add_output_arguments(parser, name):
    """``--json`` and ``--csv``, by default ``benchmarks/results/<name>.{json,csv}``."""
    parser.add_argument("--json", default=os.path.join(RESULTS, f"{name}.json"),
                        help="records + summaries ('' to skip)")
    parser.add_argument("--csv", default=os.path.join(RESULTS, f"{name}.csv"),
                        help="one row per fit ('' to skip)")


def run_main(title, args, dtype_note, run, report, extra=()):
    """Print the header (``dtype_note`` as its dtype line) and the load average, call
    ``records = run(args)`` with warnings ignored (each fit records its own), then
    ``summary = report(args, records)``; print the wall time and the load average at the
    end.  Returns ``(records, summary)``."""
    C.print_header(title, args, extra=extra, dtype_note=dtype_note)
    print(f"load:     load average at start {C.load_average()} "
          f"on os.cpu_count()={os.cpu_count()}\n", flush=True)
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # per-fit warnings are recorded inside run_fit
        records = run(args)
    summary = report(args, records)
    print(f"total wall time: {time.perf_counter() - t0:.1f} s; load average at end: "
          f"{C.load_average()}", flush=True)
    return records, summary


def write_outputs(args, payload, keys, rows, prefix=(), extra=()):
    """Write ``--json``: the options, versions (``extra`` packages too), commit and then the
    entries of ``payload``; and ``--csv``: the header ``prefix + keys`` and, for each
    ``(prefix_values, record)`` of ``rows``, ``prefix_values`` + the record's ``keys``."""
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as fh:
            json.dump({"options": vars(args), "versions": C.versions(extra),
                       "commit": C.skgpx_revision(), **payload}, fh, indent=1, default=str)
        print(f"records written to {args.json}")
    if args.csv:
        os.makedirs(os.path.dirname(os.path.abspath(args.csv)), exist_ok=True)
        with open(args.csv, "w", newline="") as fh:
            writer = csv.writer(fh)
            writer.writerow(list(prefix) + list(keys))
            for first, r in rows:
                writer.writerow(list(first) + [r.get(k, "") for k in keys])
        print(f"per-fit rows written to {args.csv}")


if __name__ == "__main__":
    print("benchmarks/_fits.py: helpers of the in-process fit benchmarks (nothing to run).")
