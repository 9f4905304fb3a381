"""Recovery of smooth, sparse coefficients: ``SmoothDRDRegressor``
against scikit-learn's linear models.

Data: ``skgpx.datasets.make_smooth_sparse_regression(kind, random_state=seed)`` for seeds 0, 1,
... (``--seeds``, 5); the seed changes X, the noise and the test set, not the bump coefficients
(it does change the GP draw of ``dense``).  Kinds (``--kinds``):

* ``bumps``: p = 200, three truncated Gaussian bumps (93 non-zero), n = 100, noise sd 0.5;
* ``dense``: p = 200, ``0.5 x`` an SE Gaussian-process draw (length 10), n = 100;
* ``bumps2d``: 16 x 16 image with two truncated blobs, n = 150;
* ``reference`` (not in the default list; slow): the authors' ``test_1D.m`` protocol, p = 1000,
  n = 400, 100 test rows.

Models, fitted one after the other in this process (order rotated per seed, so that load
changes on a shared machine hit every model alike), after one untimed warm-up fit each:

* ``sdrd`` ``SmoothDRDRegressor(coef_shape=d.coef_shape)`` (sDRD), ``drd`` the same with
  ``smoothness=False`` (DRD; kept on ``dense`` too),
  ``asd`` with ``sparsity=False`` (ASD-like); ``device=--device`` (cpu), other settings the
  estimator's defaults (``max_iter=100``; ``--max-iter`` overrides);
* ``ard`` ``ARDRegression()``, ``bayes`` ``BayesianRidge()``, ``ridgecv``
  ``RidgeCV(alphas=np.logspace(-3, 4, 15))``, ``lassocv`` ``LassoCV(cv=5)``.
  The reference kind fits ridge, lasso, ARD, DRD and sDRD only.

Metrics per model and seed: coefficient MSE ``mean((coef_ - coef)^2)``, held-out MSE on
``X_test, y_test``, support ROC-AUC of a relevance score against ``coef != 0``
(``prior_variance_`` for sDRD and DRD, ``|coef_|`` for scikit-learn's models; "–" for ASD-like,
whose prior variance is constant, and on ``dense``, where every coefficient is non-zero), the
fitted noise variance (``noise_variance_``, ``1 / alpha_`` for ARD and BayesianRidge), outer
iterations and fit seconds (wall clock of ``fit``).  Fits that raised a ConvergenceWarning are
counted.  For ``reference``: R^2 of w, train / test R^2 and % non-zero (|w| > 1e-4).

Per kind: a table of mean ± s.e. over seeds, then the per-seed coefficient MSE table with the
ratios ARD / sDRD and RidgeCV / sDRD of each seed and their minimum.

Target (PASS/MISS): sDRD coefficient MSE at least 20x below ARDRegression and below RidgeCV on
every seed of ``bumps`` and ``bumps2d``.  Further thresholds are printed with PASS/MISS too:
``bumps``: DRD <= ARD / 3, sDRD < ASD-like on every seed, sDRD support AUC >= 0.9, sDRD noise
variance within a factor 1.5 of the truth; ``bumps2d``: AUC >= 0.9; ``dense``: sDRD <= 1.5 x
ASD-like and <= RidgeCV / 20.

Usage::

    .venv/bin/python benchmarks/drd/recovery.py --quick     # 1 seed, reduced problems, < 1 min
    .venv/bin/python benchmarks/drd/recovery.py             # bumps, dense, bumps2d x 5 seeds
    .venv/bin/python benchmarks/drd/recovery.py --kinds reference --seeds 1

``--quick`` shrinks every kind (1-D: p = 60, n = 40; 2-D: 8 x 8, n = 50; 200 test rows) and
caps the sDRD-family fits at ``max_iter=5``, so its numbers are no test of the targets.
Everything runs in this one process, one thread, float64 (``_common`` pins it).  Records go
to ``--json`` / ``--csv`` (default ``benchmarks/results/drd_recovery.{json,csv}``, git-ignored).
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

import numpy as np

KINDS = ("bumps", "dense", "bumps2d", "reference")
DEFAULT_KINDS = ("bumps", "dense", "bumps2d")
MODELS = {"sdrd": "sDRD", "drd": "DRD", "asd": "ASD-like", "ard": "ARD",
          "bayes": "BayesianRidge", "ridgecv": "RidgeCV", "lassocv": "LassoCV"}
DRD_FLAGS = {"sdrd": {}, "drd": {"smoothness": False}, "asd": {"sparsity": False}}
REFERENCE_MODELS = ("ridgecv", "lassocv", "ard", "drd", "sdrd")
QUICK_DATA = {"bumps": {"shape": 60, "n_samples": 40, "n_test": 200},
              "dense": {"shape": 60, "n_samples": 40, "n_test": 200},
              "bumps2d": {"shape": (8, 8), "n_samples": 50, "n_test": 200},
              "reference": {"shape": 200, "n_samples": 80, "n_test": 50}}
QUICK_MAX_ITER = 5
RATIO_TARGET = 20.0
DASH = "–"


# ---------------------------------------------------------------- fits


def make_model(key, shape, args):
    from sklearn.linear_model import ARDRegression, BayesianRidge, LassoCV, RidgeCV

    from skgpx import SmoothDRDRegressor

    if key in DRD_FLAGS:
        extra = {} if args.max_iter is None else {"max_iter": args.max_iter}
        return SmoothDRDRegressor(coef_shape=tuple(shape), device=args.device,
                                  **DRD_FLAGS[key], **extra)
    return {"ard": ARDRegression, "bayes": BayesianRidge,
            "ridgecv": lambda: RidgeCV(alphas=np.logspace(-3, 4, 15)),
            "lassocv": lambda: LassoCV(cv=5)}[key]()


def run_fit(key, kind, seed, d, args):
    """Fit one model on one data set; never raises (errors and warnings go into the record)."""
    from sklearn.metrics import r2_score, roc_auc_score

    rec = {"kind": kind, "model": key, "seed": seed, "n": d.X.shape[0], "p": d.X.shape[1],
           "noise": d.noise, "error": None, "warnings": []}
    with C.recorded(rec):
        model = make_model(key, d.coef_shape, args)
        t0 = time.perf_counter()
        model.fit(d.X, d.y)
        rec["fit_s"] = time.perf_counter() - t0
        coef = np.asarray(model.coef_, dtype=float).ravel()
        rec["coef_mse"] = float(np.mean((coef - d.coef) ** 2))
        rec["test_mse"] = float(np.mean((model.predict(d.X_test) - d.y_test) ** 2))
        rec["coef_r2"] = float(r2_score(d.coef, coef))
        rec["train_r2"] = float(model.score(d.X, d.y))
        rec["test_r2"] = float(model.score(d.X_test, d.y_test))
        rec["nonzero_pct"] = 100.0 * float(np.mean(np.abs(coef) > 1e-4))
        support = d.coef != 0
        score = (model.prior_variance_ if key in ("sdrd", "drd")
                 else None if key == "asd" else np.abs(coef))
        if score is not None and 0 < support.sum() < support.size:
            rec["auc"] = float(roc_auc_score(support, score))
        if key in DRD_FLAGS:
            rec["noise_var"] = float(model.noise_variance_)
        elif key in ("ard", "bayes"):
            rec["noise_var"] = 1.0 / float(model.alpha_)
        if hasattr(model, "n_iter_"):
            rec["n_iter"] = int(model.n_iter_)
    rec["conv_warning"] = any(w.startswith("ConvergenceWarning") for w in rec["warnings"])
    return rec


def load(kind, seed, args):
    from skgpx.datasets import make_smooth_sparse_regression

    return make_smooth_sparse_regression(kind, random_state=seed,
                                         **(QUICK_DATA[kind] if args.quick else {}))


def models_for(kind, args):
    return [m for m in args.models if kind != "reference" or m in REFERENCE_MODELS]


def run(args):
    from skgpx.datasets import make_smooth_sparse_regression

    tiny = make_smooth_sparse_regression("bumps", shape=30, n_samples=20, n_test=10,
                                         random_state=0)
    warm = argparse.Namespace(**{**vars(args), "max_iter": 2})
    for key in args.models:  # untimed: lazy imports and first-call overheads
        run_fit(key, "warm-up", 0, tiny, warm)
    records = {}
    for i, kind in enumerate(args.kinds):
        keys = models_for(kind, args)
        if not keys:
            print(f"  {kind}: skipped (none of --models is fitted on this kind)")
            continue
        records[kind] = {k: [] for k in keys}
        for seed in args.seed_list:
            d = load(kind, seed, args)
            parts = []
            for key in C.rotated(keys, i + seed):
                rec = run_fit(key, kind, seed, d, args)
                records[kind][key].append(rec)
                parts.append(f"{key} " + ("ERROR" if rec["error"] else
                                          f"{rec['coef_mse']:.2e} {rec['fit_s']:.1f}s"
                                          + ("*" if rec["conv_warning"] else "")))
            print(f"  {kind} (n={d.X.shape[0]}, p={d.X.shape[1]}) seed {seed}: coef MSE  "
                  + " | ".join(parts), flush=True)
    return records


# ---------------------------------------------------------------- report


def pm(x, fmt=".3g"):
    """``"mean ± se"`` of ``x``: the mean in ``fmt``, the s.e. to 2 significant figures."""
    return F.pm(*F.mean_se(x), fmt, ".2g", missing=DASH)


def per_seed(recs, key):
    """{seed: value} of the records that did not fail."""
    return {r["seed"]: r.get(key, math.nan) for r in recs if not r["error"]}


def ratios(per_model, num, den="sdrd"):
    """Per-seed coefficient MSE ratio num / den (seeds where both exist)."""
    a = per_seed(per_model.get(num, []), "coef_mse")
    b = per_seed(per_model.get(den, []), "coef_mse")
    return {s: a[s] / b[s] for s in sorted(set(a) & set(b)) if b[s] > 0}


def report_kind(args, kind, per_model):
    first = next(r for recs in per_model.values() for r in recs)
    n_fits = sum(len(r) for r in per_model.values())
    if kind == "reference":
        cols = [("R² w", "coef_r2", ".3f"), ("train R²", "train_r2", ".3f"),
                ("test R²", "test_r2", ".3f"), ("% non-zero", "nonzero_pct", ".1f")]
    else:
        cols = [("coef MSE", "coef_mse", ".3g"), ("test MSE", "test_mse", ".3g"),
                ("support AUC", "auc", ".3f"), ("noise var", "noise_var", ".3g")]
    rows = []
    for key, recs in per_model.items():
        n_ok = sum(1 for r in recs if not r["error"])
        rows.append([MODELS[key]] + [pm(F.values(recs, k), f) for _, k, f in cols]
                    + [pm(F.values(recs, "n_iter"), ".0f"), pm(F.values(recs, "fit_s"), ".2f"),
                       f"{n_ok}/{len(recs)}",
                       f"{sum(r['conv_warning'] for r in recs)}/{len(recs)}"])
    n_conv = sum(r["conv_warning"] for recs in per_model.values() for r in recs)
    notes = [f"mean ± s.e. over {len(args.seed_list)} seed(s); "
             + ("R² w = r2_score(coef, coef_); % non-zero: |coef_| > 1e-4" if kind == "reference"
                else "support AUC: prior_variance_ (sDRD, DRD) or |coef_| against coef != 0; "
                     f"true noise var {first['noise'] ** 2:.3g}"),
             f"conv warn = fits that raised a ConvergenceWarning ({n_conv} of {n_fits} fits; "
             "marked * in the progress lines)"]
    notes += C.failure_notes(per_model, top=1)
    C.print_table(f"{kind}: p={first['p']}, n={first['n']}", ["model"] + [c for c, _, _ in cols]
                  + ["n_iter", "fit s", "ok", "conv warn"], rows, align="l" + "r" * (len(cols) + 4),
                  notes=notes)
    if kind == "reference":
        return {}

    ratio_ard, ratio_ridge = ratios(per_model, "ard"), ratios(per_model, "ridgecv")
    mse = {k: per_seed(recs, "coef_mse") for k, recs in per_model.items()}
    rows = [[str(s)] + [f"{mse[k][s]:.2e}" if s in mse[k] else "error" for k in per_model]
            + [C.fmt_ratio(r.get(s, math.nan)) for r in (ratio_ard, ratio_ridge)]
            for s in args.seed_list]
    mins = {name: min(r.values()) if r else math.nan
            for name, r in (("ard", ratio_ard), ("ridgecv", ratio_ridge))}
    rows.append(["min"] + [""] * len(per_model) + [C.fmt_ratio(v) for v in mins.values()])
    C.print_table(f"{kind}: coefficient MSE per seed", ["seed"] + [MODELS[k] for k in per_model]
                  + ["ARD/sDRD", "RidgeCV/sDRD"], rows)
    return {"min_ratio_ard": mins["ard"], "min_ratio_ridgecv": mins["ridgecv"],
            "ratio_ard": ratio_ard, "ratio_ridgecv": ratio_ridge}


def check(results, label, value, ok_if, text):
    """One PASS/MISS (n/a when ``value`` is NaN) target line; the verdict goes in results."""
    ok = ok_if(value) if math.isfinite(value) else None
    print(f"  {C.verdict(ok) if ok is not None else 'n/a ':4s}  {text}")
    results[label] = {"value": value, "pass": ok}


def targets(args, records, summary):
    if not set(records) & {"bumps", "bumps2d", "dense"}:
        return {}
    print("Targets" + (" (--quick: reduced problems and max_iter, not the target protocol)"
                       if args.quick else "") + "; min over seeds:")
    out = {}
    for kind in ("bumps", "bumps2d"):
        if kind in summary:
            for base, name in (("ard", "ARDRegression"), ("ridgecv", "RidgeCV")):
                v = summary[kind][f"min_ratio_{base}"]
                check(out, f"{kind}_{base}_over_sdrd", v, lambda x: x >= RATIO_TARGET,
                      f"{kind}: {name} / sDRD coef MSE = {C.fmt_ratio(v)} >= {RATIO_TARGET:g}x")
    print("Further thresholds:")

    def minimum(kind, key, field="coef_mse"):
        return min(per_seed(records[kind].get(key, []), field).values(), default=math.nan)

    def worst_ratio(kind, num, den):  # largest num / den over seeds
        return max(ratios(records[kind], num, den).values(), default=math.nan)

    if "bumps" in records:
        v = min(ratios(records["bumps"], "ard", "drd").values(), default=math.nan)
        check(out, "bumps_ard_over_drd", v, lambda x: x >= 3,
              f"bumps: ARD / DRD coef MSE = {C.fmt_ratio(v)} >= 3x")
        v = worst_ratio("bumps", "sdrd", "asd")
        check(out, "bumps_sdrd_over_asd", v, lambda x: x < 1,
              f"bumps: sDRD / ASD-like coef MSE = {v:.2f} < 1 (max over seeds)")
        v = minimum("bumps", "sdrd", "auc")
        check(out, "bumps_auc", v, lambda x: x >= 0.9, f"bumps: sDRD support AUC = {v:.3f} >= 0.9")
        true = next(r for recs in records["bumps"].values() for r in recs)["noise"] ** 2
        s2 = list(per_seed(records["bumps"].get("sdrd", []), "noise_var").values())
        v = max((max(s / true, true / s) for s in s2), default=math.nan)
        check(out, "bumps_noise", v, lambda x: x <= 1.5,
              f"bumps: sDRD noise variance within 1.5x of {true:g} (worst factor {v:.2f}; "
              f"range {min(s2, default=math.nan):.3g}-{max(s2, default=math.nan):.3g})")
    if "bumps2d" in records:
        v = minimum("bumps2d", "sdrd", "auc")
        check(out, "bumps2d_auc", v, lambda x: x >= 0.9,
              f"bumps2d: sDRD support AUC = {v:.3f} >= 0.9")
    if "dense" in records:
        v = worst_ratio("dense", "sdrd", "asd")
        check(out, "dense_sdrd_over_asd", v, lambda x: x <= 1.5,
              f"dense: sDRD / ASD-like coef MSE = {v:.2f} <= 1.5 (max over seeds)")
        v = summary["dense"]["min_ratio_ridgecv"]
        check(out, "dense_ridgecv_over_sdrd", v, lambda x: x >= RATIO_TARGET,
              f"dense: RidgeCV / sDRD coef MSE = {C.fmt_ratio(v)} >= {RATIO_TARGET:g}x")
    print(flush=True)
    return out


def report(args, records):
    summary = {kind: report_kind(args, kind, per_model) for kind, per_model in records.items()}
    summary["targets"] = targets(args, records, summary)
    return summary


# ---------------------------------------------------------------- main


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kinds", default=",".join(DEFAULT_KINDS),
                   help=f"comma list from {','.join(KINDS)} ({','.join(DEFAULT_KINDS)})")
    p.add_argument("--seeds", type=int, default=None, help="seeds 0..N-1 (5; --quick: 1)")
    p.add_argument("--models", default=",".join(MODELS),
                   help=f"comma list from {','.join(MODELS)} (all)")
    p.add_argument("--max-iter", type=int, default=None,
                   help=f"max_iter of the sDRD-family fits (estimator default 100; "
                        f"--quick: {QUICK_MAX_ITER})")
    p.add_argument("--device", default="cpu", help="device of the sDRD-family fits (cpu)")
    p.add_argument("--quick", action="store_true",
                   help=f"smoke run: 1 seed, reduced problems, max_iter={QUICK_MAX_ITER}")
    F.add_output_arguments(p, "drd_recovery")
    args = p.parse_args(argv)
    C.check_device(p, args.device)
    args.kinds = C.parse_choices(p, args.kinds, KINDS, "kind")
    args.models = C.parse_choices(p, args.models, MODELS, "model")
    if args.seeds is None:
        args.seeds = 1 if args.quick else 5
    if args.quick and args.max_iter is None:
        args.max_iter = QUICK_MAX_ITER
    args.seed_list = list(range(args.seeds))
    return args


CSV_KEYS = ["kind", "model", "seed", "coef_mse", "test_mse", "auc", "coef_r2", "train_r2",
            "test_r2", "nonzero_pct", "noise_var", "n_iter", "fit_s", "conv_warning", "error"]


def main(argv=None):
    args = parse_args(argv)
    records, summary = F.run_main(
        "drd/recovery.py  -  SmoothDRDRegressor (sDRD, DRD, ASD-like) vs ARD, BayesianRidge, "
        "RidgeCV, LassoCV: coefficient recovery", args,
        "float64 everywhere (torch default dtype set to float64)", run, report)
    rows = (((), r) for per_model in records.values() for recs in per_model.values()
            for r in recs)
    F.write_outputs(args, {"records": records, "summary": summary}, CSV_KEYS, rows)


if __name__ == "__main__":
    main()
