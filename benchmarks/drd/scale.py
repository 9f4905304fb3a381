"""Fit time of ``SmoothDRDRegressor`` (sDRD) against the number of features p on 2-D grids:
``basis="fourier"`` (FFT products on the padded grid, trimmed frequencies;
``doc/design_notes.rst``, "Scaling") against ``basis="dense"`` (exact SE factors per axis).

Data: ``make_smooth_sparse_regression("bumps2d", shape=(s, s), n_samples=500, random_state=0)``
(two truncated blobs scaled with the grid, noise sd 0.5, 1000 test rows) for s in ``--grids``
(16, 32, 64: p = 256, 1024, 4096).  Model: ``SmoothDRDRegressor(coef_shape=(s, s),
basis=..., device=--device)``, everything else at the estimator's defaults (``max_iter=100``,
``tol=1e-4``; ``compute_covariance="auto"`` stores the p x p ``sigma_`` for p <= 1024, which
is part of the timed fit, as for a user).

Protocol: every (grid, basis) cell runs in a fresh child process (``_common.run_cell``).  Its
set-up draws the data and does one untimed fit on an 8 x 8 grid (``max_iter=2``, same basis)
to pay the lazy imports and first-call costs; then ``--repeats`` (1) timed fits of the full
problem, the median counts.  Fits take from seconds to many minutes, so there is no full-size
warm-up and one timed fit per cell by default: the times are single measurements.  A fit
longer than ``--cutoff`` seconds (900) is killed and reported "DNF"; a basis that did not
finish at one grid is not run at the larger ones ("skipped").

Printed: grid, p, basis, fit seconds, ``n_iter_``, seconds per outer iteration, coefficient
MSE, held-out MSE, the child's peak RSS, and per grid the fourier / dense time ratio; then the
scaling exponent of each basis, the least-squares slope of log(fit time) against log(p) over
the grids (and of the time per outer iteration, since ``n_iter_`` differs between cells).

Target (PASS/MISS): the 64 x 64 Fourier fit under 60 s on one CPU thread (only judged with
``--device cpu``; on CUDA its time is printed as information).

Usage::

    .venv/bin/python benchmarks/drd/scale.py --quick        # 8x8, 12x12, n=100, max_iter=3
    .venv/bin/python benchmarks/drd/scale.py                # 16, 32, 64; both bases
    .venv/bin/python benchmarks/drd/scale.py --grids 64 --basis fourier --repeats 3
    .venv/bin/python benchmarks/drd/scale.py --device cuda  # where a GPU is available

Threads are pinned to one by ``_common`` (in the children too), float64.  Records go to
``--json`` / ``--csv`` (default ``benchmarks/results/drd_scale.{json,csv}``, git-ignored).
"""

import os  # noqa: I001  (the shared kit's folder on the path, the kit, then numpy)
import sys

if (kit := os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) not in sys.path:
    sys.path.insert(0, kit)
import _common as C  # noqa: I001  (first: pins the threads before numpy is imported)
import _fits as F

import argparse
import math
import time
import warnings

import numpy as np

SCRIPT = os.path.abspath(__file__)
BASES = ("fourier", "dense")
GRIDS, QUICK_GRIDS = (16, 32, 64), (8, 12)
N_SAMPLES, QUICK_N_SAMPLES, QUICK_MAX_ITER = 500, 100, 3
TARGET_GRID, TARGET_SECONDS = 64, 60.0


# ---------------------------------------------------------------- child side


def make_model(cfg, shape, max_iter=None):
    from skgpx import SmoothDRDRegressor

    max_iter = cfg["max_iter"] if max_iter is None else max_iter
    return SmoothDRDRegressor(coef_shape=shape, basis=cfg["basis"], device=cfg["device"],
                              **({} if max_iter is None else {"max_iter": max_iter}))


def setup(cfg):
    from skgpx.datasets import make_smooth_sparse_regression

    warnings.filterwarnings("ignore")
    tiny = make_smooth_sparse_regression("bumps2d", shape=(8, 8), n_samples=30, n_test=1,
                                         random_state=1)
    make_model(cfg, (8, 8), max_iter=2).fit(tiny.X, tiny.y)  # untimed warm-up
    s = cfg["grid"]
    return {"cfg": cfg, "data": make_smooth_sparse_regression(
        "bumps2d", shape=(s, s), n_samples=cfg["n_samples"], random_state=0)}


def run_once(state):
    cfg, d = state["cfg"], state["data"]
    model = make_model(cfg, d.coef_shape)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with C.Timer(cfg["device"]) as t:
            model.fit(d.X, d.y)
    return {"total": t.seconds, "info": {
        "n_iter": int(model.n_iter_), "basis_": model.basis_,
        "coef_mse": float(np.mean((model.coef_ - d.coef) ** 2)),
        "test_mse": float(np.mean((model.predict(d.X_test) - d.y_test) ** 2)),
        "noise_variance": float(model.noise_variance_),
        "conv_warning": any(w.category.__name__ == "ConvergenceWarning" for w in caught)}}


# ---------------------------------------------------------------- parent side


def run_all(args):
    records, stopped = [], {}
    for s in args.grids:
        for basis in args.basis:
            rec = {"grid": s, "p": s * s, "basis": basis}
            if basis in stopped:
                rec.update(status="skipped", note=f"not run: {stopped[basis]}")
            else:
                cfg = {"grid": s, "basis": basis, "n_samples": args.n_samples,
                       "max_iter": args.max_iter, "device": args.device,
                       "repeats": args.repeats, "budget": args.cutoff}
                label = f"{s}x{s} {basis}"
                print(f"  running {label} (p={s * s}) ...", flush=True)
                rec.update(C.run_cell(SCRIPT, cfg, cutoff=args.cutoff, label=label))
                if rec["status"] != "ok":
                    stopped[basis] = f"{rec['status']} at {s}x{s}"
            if rec["status"] == "ok":
                rec["fit_s"] = C.median(rec["times"]["total"])
                rec.update(rec["info"])
            outcome = (f"{rec['fit_s']:.2f} s, n_iter {rec['n_iter']}"
                       if rec["status"] == "ok" else rec["status"])
            print(f"  {s}x{s} {basis}: " + outcome
                  + (f"  [{rec['note']}]" if rec.get("note") else ""), flush=True)
            records.append(rec)
    return records


def time_ratio(fourier, dense, cutoff):
    """Fourier / dense fit time, as text ("<x" when dense was killed at the cut-off)."""
    if not fourier or fourier["status"] != "ok" or not dense:
        return "-"
    if dense["status"] == "ok":
        return C.fmt_ratio(fourier["fit_s"] / dense["fit_s"])
    if dense["status"] == "DNF" and dense.get("dnf") == "time":
        return "<" + C.fmt_ratio(fourier["fit_s"] / cutoff)
    return "-"


def report(args, records):
    by = {(r["grid"], r["basis"]): r for r in records}
    rows = []
    for r in records:
        ok = r["status"] == "ok"
        ratio = (time_ratio(r, by.get((r["grid"], "dense")), args.cutoff)
                 if r["basis"] == "fourier" else "")
        rows.append([f"{r['grid']}x{r['grid']}", str(r["p"]), r["basis"],
                     C.fmt_seconds(r["fit_s"]) if ok else r["status"],
                     str(len(r["times"]["total"])) if ok else "",
                     f"{r['n_iter']}" + ("*" if r["conv_warning"] else "") if ok else "",
                     C.fmt_seconds(r["fit_s"] / r["n_iter"]) if ok else "",
                     f"{r['coef_mse']:.2e}" if ok else "", f"{r['test_mse']:.3f}" if ok else "",
                     C.fmt_bytes(r.get("peak_rss")), ratio])
    notes = [f"n={args.n_samples} training rows, 1000 test rows (bumps2d, noise sd 0.5: "
             "held-out MSE floor 0.25); device " + args.device
             + ("" if args.max_iter is None else f"; max_iter={args.max_iter}"),
             "fit s = wall clock of fit (median of the timed fits; 'runs' of them, no "
             "full-size warm-up); s/iter = fit s / n_iter",
             "n_iter* = the fit stopped at max_iter (ConvergenceWarning)",
             f"DNF = a fit exceeded the {args.cutoff:g} s cut-off (or 75% of RAM) and was "
             "killed; skipped = not run after a DNF at a smaller grid",
             "peak RSS = ru_maxrss of the child process (imports and data included)"]
    notes += [f"{r['grid']}x{r['grid']} {r['basis']}: {r['note']}" for r in records
              if r["status"] not in ("ok", "skipped") and r.get("note")]
    C.print_table("sDRD fit time against p on 2-D grids (bumps2d)",
                  ["grid", "p", "basis", "fit s", "runs", "n_iter", "s/iter", "coef MSE",
                   "test MSE", "peak RSS", "fourier/dense"], rows, align="lrl" + "r" * 8,
                  notes=notes)

    slopes, rows = {}, []
    for basis in args.basis:
        done = [r for r in records if r["basis"] == basis and r["status"] == "ok"]
        p = [r["p"] for r in done]
        slopes[basis] = {"fit": F.slope(p, [r["fit_s"] for r in done]),
                         "per_iter": F.slope(p, [r["fit_s"] / r["n_iter"] for r in done]),
                         "p": p}
        rows.append([basis] + [F.fmt_num(slopes[basis][k]) for k in ("fit", "per_iter")]
                    + [",".join(map(str, p))])
    C.print_table("Scaling exponent: least-squares slope of log time against log p",
                  ["basis", "fit time", "time per iteration", "p used"], rows, align="lrrl",
                  notes=["1 = linear in p, 2 = quadratic, 3 = cubic; needs two finished grids"])

    print("Target")
    rec = by.get((TARGET_GRID, "fourier"))
    target = {"grid": TARGET_GRID, "seconds": math.nan, "pass": None}
    what = f"{TARGET_GRID}x{TARGET_GRID} Fourier fit"
    if rec is None:
        print(f"  n/a   {what} < {TARGET_SECONDS:g} s: grid {TARGET_GRID} or basis fourier "
              "not run")
    elif args.device != "cpu":
        print(f"  info  {what} on {args.device}: "
              + (f"{rec['fit_s']:.1f} s" if rec["status"] == "ok" else rec["status"])
              + f" (the < {TARGET_SECONDS:g} s target is for one CPU thread)")
    elif rec["status"] == "ok" or rec.get("dnf") == "time":
        t = rec["fit_s"] if rec["status"] == "ok" else math.inf
        target.update(seconds=t, **{"pass": t < TARGET_SECONDS})
        print(f"  {C.verdict(target['pass']):4s}  {what} = "
              + (f"{t:.1f} s" if math.isfinite(t) else f"DNF (> {args.cutoff:g} s)")
              + f" < {TARGET_SECONDS:g} s on one CPU thread"
              + (f" (n_iter {rec['n_iter']})" if rec["status"] == "ok" else ""))
    else:
        print(f"  n/a   {what} < {TARGET_SECONDS:g} s: {rec['status']} ({rec.get('note', '')})")
    print(flush=True)
    return {"slopes": slopes, "target": target}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--grids", default=None,
                   help="comma list of grid sides s (s x s grids; 16,32,64; --quick 8,12)")
    p.add_argument("--basis", default=",".join(BASES), help="comma list from fourier,dense")
    p.add_argument("--n-samples", type=int, default=None,
                   help=f"training rows ({N_SAMPLES}; --quick {QUICK_N_SAMPLES})")
    p.add_argument("--max-iter", type=int, default=None,
                   help=f"max_iter of the fits (estimator default 100; --quick {QUICK_MAX_ITER})")
    p.add_argument("--repeats", type=int, default=1,
                   help="timed fits per cell, the median counts (1; no full-size warm-up)")
    p.add_argument("--cutoff", type=float, default=900.0,
                   help="seconds: a fit longer than this is killed -> DNF (900)")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"),
                   help="device of the fits (cpu)")
    p.add_argument("--quick", action="store_true",
                   help=f"smoke run: grids {QUICK_GRIDS}, n={QUICK_N_SAMPLES}, "
                        f"max_iter={QUICK_MAX_ITER}")
    F.add_output_arguments(p, "drd_scale")
    args = p.parse_args(argv)
    C.check_device(p, args.device)
    args.grids = sorted({int(v) for v in args.grids.split(",") if v}) if args.grids else list(
        QUICK_GRIDS if args.quick else GRIDS)
    args.basis = C.parse_choices(p, args.basis, BASES, "basis")
    if args.n_samples is None:
        args.n_samples = QUICK_N_SAMPLES if args.quick else N_SAMPLES
    if args.max_iter is None and args.quick:
        args.max_iter = QUICK_MAX_ITER
    return args


CSV_KEYS = ["grid", "p", "basis", "status", "fit_s", "n_iter", "coef_mse", "test_mse",
            "noise_variance", "conv_warning", "peak_rss", "note"]


def main(argv=None):
    if C.run_child_cell(setup, run_once, warmup=False):
        return
    args = parse_args(argv)
    C.print_header("drd/scale.py  -  SmoothDRDRegressor fit time against p on s x s grids, "
                   "basis='fourier' vs 'dense'", args,
                   device=args.device)
    print(f"load:     load average at start {C.load_average()} on os.cpu_count()="
          f"{os.cpu_count()}\n", flush=True)
    t0 = time.perf_counter()
    records = run_all(args)
    child = next((r["threads"] for r in records if r["status"] == "ok"), None)
    if child:
        print("threads in the child processes: " + C.format_threads(child))
    summary = report(args, records)
    print(f"total wall time: {time.perf_counter() - t0:.1f} s; load average at end: "
          f"{C.load_average()}", flush=True)
    F.write_outputs(args, {"records": records, **summary}, CSV_KEYS,
                    (((), r) for r in records))


if __name__ == "__main__":
    main()
