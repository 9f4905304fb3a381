"""The benchmarks' kit of statistics, number formatting and output files, and the ``main()``
body of the scripts that fit several models per seed in one process.

Import it right AFTER ``_common`` (which must stay the first import of every benchmark
script: it pins the threads before numpy is loaded)::

    import _common as C  # noqa: I001  (first: pins the threads before numpy is imported)
    import _fits as F

``_common`` holds the process, thread, timing and table machinery; this module holds:

* statistics: :func:`values` / :func:`column` (one metric of a list of records),
  :func:`nanmean`, :func:`mean_se`, :func:`paired` (differences per seed or split, with the
  one standard-error convention of every benchmark: the sample standard deviation, ddof=1,
  over sqrt(n)), :func:`slope` (least squares in log-log), :func:`rmse`,
  :func:`gaussian_nll`; of posterior draws against a Gaussian: :func:`draw_metrics` (W2,
  largest z-score of the mean, variance ratio; :func:`w2_gaussian`, :func:`sym_sqrt`) and
  :func:`floor_draws` (its Monte-Carlo floor); :func:`classification_scores` (accuracy,
  log-loss, ECE);
* classification data: :func:`classification_split`, :func:`bundled_classification`,
  :func:`rbf_classifier_kernel`;
* formatting: :func:`fmt_num`, :func:`pm` / :func:`fmt_pm` ("mean ± s.e."),
  :func:`fmt_mean_sd` ("mean +- sd");
* outputs: :func:`add_output_arguments` (``--json`` / ``--csv``, by default
  ``benchmarks/results/<script>.{json,csv}``, git-ignored), :func:`write_json`,
  :func:`run_info` and :func:`write_outputs`;
* :func:`add_dtype_argument` (``--dtype``, float32 by default, as the authors) and
  :func:`run_main`: the common body of ``main()`` of the in-process fit scripts (header with
  the dtype note, load average, the runs under a warnings filter, the reports, wall time and
  load at the end).  Their records (one dict per fit) carry ``"error"`` (None or the error
  text) and ``"warnings"`` (see ``_common.recorded``).

Running this file directly does nothing except print what it is.
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


def column(records, key):
    """``key`` of every record, failed ones included, as a float array (NaN where missing):
    one entry per seed or split, so two columns pair up entry by entry."""
    return np.array([r.get(key, math.nan) for r in records], dtype=float)


def _finite(x):
    x = np.asarray(x, dtype=float)
    return x[np.isfinite(x)]


def nanmean(x):
    """Mean of the finite entries of ``x`` (NaN when there are none)."""
    x = _finite(x)
    return float(np.mean(x)) if x.size else math.nan


def mean_se(x):
    """Mean and standard error (sd with ddof=1 over sqrt(n)) of the finite entries of ``x``;
    NaN s.e. for one entry."""
    x = _finite(x)
    if x.size == 0:
        return math.nan, math.nan
    se = float(np.std(x, ddof=1) / math.sqrt(x.size)) if x.size > 1 else math.nan
    return float(np.mean(x)), se


def paired(a, b):
    """Paired differences ``a - b``, entry by entry (seed by seed), over the pairs where both
    are finite: ``(d, mean, se)`` with :func:`mean_se` of ``d``."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    n = min(a.size, b.size)
    d = _finite(a[:n] - b[:n])
    return (d, *mean_se(d))


def slope(sizes, seconds):
    """Least-squares slope of log(seconds) against log(sizes) over the points with a finite,
    positive time (NaN with fewer than two)."""
    pts = [(n, t) for n, t in zip(sizes, seconds) if math.isfinite(t) and t > 0]
    if len(pts) < 2:
        return math.nan
    x, y = np.log([p[0] for p in pts]), np.log([p[1] for p in pts])
    return float(np.polyfit(x, y, 1)[0])


def rmse(y_true, y_pred):
    return float(np.sqrt(np.mean((np.ravel(y_true) - np.ravel(y_pred)) ** 2)))


def gaussian_nll(y, mean, std):
    """Mean per-point ``-log N(y; mean, std^2)``."""
    return float(np.mean(0.5 * np.log(2 * np.pi * std**2) + 0.5 * ((y - mean) / std) ** 2))


def sym_sqrt(A):
    """The symmetric square root of a PSD matrix (negative eigenvalues clipped to 0)."""
    lam, U = np.linalg.eigh(0.5 * (A + A.T))
    return (U * np.sqrt(np.clip(lam, 0.0, None))) @ U.T


def w2_gaussian(m_hat, C_hat, m, C, C_half=None):
    """2-Wasserstein distance between N(m_hat, C_hat) and N(m, C)."""
    C_half = sym_sqrt(C) if C_half is None else C_half
    M = C_half @ C_hat @ C_half
    mu = np.linalg.eigvalsh(0.5 * (M + M.T))
    cross = np.sqrt(np.clip(mu, 0.0, None)).sum()
    w2sq = np.sum((m_hat - m) ** 2) + np.trace(C_hat) + np.trace(C) - 2.0 * cross
    return float(np.sqrt(max(w2sq, 0.0)))


def draw_metrics(draws, m, C, C_half):
    """Of ``draws`` (n*, S) against N(m, C): the W2 of their sample moments, the largest
    z-score of their mean and the largest relative error of their variances."""
    S = draws.shape[1]
    m_hat = draws.mean(1)
    C_hat = np.cov(draws)
    v = np.diag(C)
    return {
        "w2": w2_gaussian(m_hat, C_hat, m, C, C_half),
        "z": float(np.max(np.abs(m_hat - m) / np.sqrt(v / S))),
        "var": float(np.max(np.abs(np.diag(C_hat) / v - 1.0))),
    }


def floor_draws(m, C_half, S, seed):
    """S exact draws (n*, S) of N(m, C_half^2): the Monte-Carlo floor of
    :func:`draw_metrics`."""
    z = np.random.default_rng(10_000 + seed).standard_normal((m.shape[0], S))
    return m[:, None] + C_half @ z


def classification_scores(y, proba, classes):
    """Accuracy, log-loss and the 15-bin top-label ECE of ``skgpx.metrics``."""
    from sklearn.metrics import log_loss

    from skgpx.metrics import expected_calibration_error

    return {"accuracy": float(np.mean(classes[np.argmax(proba, 1)] == y)),
            "log_loss": float(log_loss(y, proba, labels=classes)),
            "ece": float(expected_calibration_error(y, proba, labels=classes))}


# ---------------------------------------------------------------- classification data


def classification_split(X, y, train_size=None, test_size=0.25, seed=0):
    """A stratified split, standardised on the training rows."""
    from sklearn.model_selection import train_test_split
    from sklearn.preprocessing import StandardScaler

    Xtr, Xte, ytr, yte = train_test_split(X, y, train_size=train_size, test_size=test_size,
                                          stratify=y, random_state=seed)
    scaler = StandardScaler().fit(Xtr)
    return scaler.transform(Xtr), scaler.transform(Xte), ytr, yte


def bundled_classification(name):
    """Breast cancer, iris or digits, split 75/25 by :func:`classification_split`."""
    from sklearn import datasets

    loader = {"breast_cancer": datasets.load_breast_cancer, "iris": datasets.load_iris,
              "digits": datasets.load_digits}[name]
    return classification_split(*loader(return_X_y=True))


def rbf_classifier_kernel(d):
    """The classification benchmarks' kernel, ``ConstantKernel() * RBF(sqrt(d))``."""
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel

    return ConstantKernel() * RBF(np.sqrt(d))


# ---------------------------------------------------------------- formatting


def fmt_num(value, decimals=2, g_from=math.inf, sig=None, missing="-"):
    """``value`` with ``decimals`` decimals, or with ``sig`` (default ``decimals``)
    significant figures when its size is ``g_from`` or more; ``missing`` for None and
    non-finite values."""
    if value is None or not math.isfinite(value):
        return missing
    if abs(value) >= g_from:
        return f"{value:.{decimals if sig is None else sig}g}"
    return f"{value:.{decimals}f}"


def pm(mean, se, spec=".3f", se_spec=None, missing="-"):
    """``"mean ± se"`` in the format specs ``spec`` and ``se_spec`` (default ``spec``): the mean
    alone when the s.e. is not finite (one value), ``missing`` when the mean is not."""
    if not math.isfinite(mean):
        return missing
    return f"{mean:{spec}}" + (f" ± {se:{se_spec or spec}}" if math.isfinite(se) else "")


def fmt_pm(x, digits=3, g_from=math.inf):
    """:func:`pm` of :func:`mean_se` of ``x`` with ``digits`` decimals; a mean of size
    ``g_from`` or more gets ``digits`` significant figures."""
    m, se = mean_se(x)
    spec = f".{digits}g" if math.isfinite(m) and abs(m) >= g_from else f".{digits}f"
    return pm(m, se, spec, f".{digits}f")


def fmt_mean_sd(x, spec=".3f"):
    """``"mean +- sd"`` of ``x`` (sd with ddof=1; 0 for one value): the spread over seeds."""
    x = np.asarray(x, dtype=float)
    sd = x.std(ddof=1) if x.size > 1 else 0.0
    return f"{x.mean():{spec}} +- {sd:{spec}}"


# ---------------------------------------------------------------- arguments and main


def add_dtype_argument(parser, what="deep models"):
    """``--dtype`` of the deep models: float32 (the authors' dtype) or float64."""
    parser.add_argument("--dtype", default="float32", choices=("float32", "float64"),
                        help=f"dtype of the {what} (float32, as the authors)")


def add_output_arguments(parser, name, rows="fit"):
    """``--json`` and ``--csv``, by default ``benchmarks/results/<name>.{json,csv}``."""
    parser.add_argument("--json", default=os.path.join(RESULTS, f"{name}.json"),
                        help="records + summaries ('' to skip)")
    parser.add_argument("--csv", default=os.path.join(RESULTS, f"{name}.csv"),
                        help=f"one row per {rows} ('' to skip)")


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


# ---------------------------------------------------------------- output files


def _make_folder(path):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)


def write_json(path, payload):
    """Write ``payload`` to the JSON file ``path`` (nothing when ``path`` is empty) and say so."""
    if not path:
        return
    _make_folder(path)
    with open(path, "w") as fh:
        json.dump(payload, fh, indent=1, default=str)
    print(f"records written to {path}")


def run_info(args, extra=()):
    """The options, versions (``extra`` packages too) and commit of this run, for its JSON."""
    return {"options": vars(args), "versions": C.versions(extra), "commit": C.skgpx_revision()}


def write_outputs(args, payload, keys, rows, prefix=(), extra=(), what="per-fit rows"):
    """Write ``--json``: :func:`run_info` and then the entries of ``payload``; and ``--csv``:
    the header ``prefix + keys`` and, for each ``(prefix_values, record)`` of ``rows``,
    ``prefix_values`` + the record's ``keys``."""
    if args.json:
        write_json(args.json, {**run_info(args, extra), **payload})
    if args.csv:
        _make_folder(args.csv)
        with open(args.csv, "w", newline="") as fh:
            writer = csv.writer(fh)
            writer.writerow(list(prefix) + list(keys))
            for first, r in rows:
                writer.writerow(list(first) + [r.get(k, "") for k in keys])
        print(f"{what} written to {args.csv}")


if __name__ == "__main__":
    print("benchmarks/_fits.py: statistics, formatting and output kit (nothing to run).")
