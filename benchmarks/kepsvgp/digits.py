"""The KEP-SVGP image protocol on scikit-learn's digits (Chen et al., ICML 2024): the
metrics table of Table 1, the corruption table of Table 2 and the OOD table of Table 3, with
KEP-SVGP attention against the same Transformer with softmax attention.

Protocol
--------
``load_digits``, X/16; ``train_test_split(test_size=0.3, stratify=y, random_state=seed)`` for
seed 0-9 (``tests/kepsvgp/test_paper.py`` uses seeds 3-7 in float64; this script covers
0-9). Every model is
``KEPSVGPClassifier(tokenizer="patches", patch_size=2, d_model=32, n_heads=4, depth=2, rank=5,
eta=0.1, kl_weight=1, n_mc_samples=10, max_iter=--epochs (100), batch_size=128, lr=3e-3,
weight_decay=1e-4, random_state=seed)``, in ``--dtype`` (float32 by default):

* ``MSP``: ``kep_layers=0``: two softmax-attention blocks, confidence = max softmax
  probability (the paper's baseline row);
* ``KEP add`` / ``KEP concat``: the last block's attention is KEP-SVGP, ``merge="add"`` /
  ``"concat"`` (T = 10 posterior draws, probabilities averaged);
* ``MSP+TS``: ``MSP`` trained on 90% of the training split, its temperature fitted by
  minimising the NLL on the stratified other 10% (``scipy.optimize.minimize_scalar`` on
  log T in [-3, 3]); the paper's post-hoc TS row.

Metrics (``skgpx.metrics.uncertainty_report``; ACC, AUROC, FPR95, ECE, Brier in %, AURC and
E-AURC x 1e3, NLL x 10 as the paper's tables): mean ± standard error over seeds, then the paired
per-seed differences against MSP with their standard errors and win counts (lower is better
except ACC and AUROC).

Corruptions (Table 2 analogue): every model of the main table on
``skgpx.datasets.corrupt_digits(X_test, kind, severity)`` for the five kinds at the five
severities (75 corrupted test sets per model, seeded by ``seed``); the table averages ACC, ECE,
NLL, Brier and AUROC over kinds and severities, then over seeds; a second table gives ECE per
severity.

OOD (Table 3 analogue, ``--no-ood`` skips it): MSP, KEP add and KEP concat trained on the
digits 0-4 of the training split, scored on the test split's 0-4 (in) against 5-9 (out) by the
maximum predicted probability; ``skgpx.metrics.ood_auroc`` / ``ood_aupr`` (in %).

Timing: wall-clock seconds per epoch of each fit (the training loop only, from ``history_``).
The per-epoch ratio KEP / MSP is the target (<= 1.15; the paper's Table 4: 1.04-1.08
outside IMDB). The models of a seed run in rotated order, so drift in the machine's load
spreads over all of them.

Usage::

    .venv/bin/python benchmarks/kepsvgp/digits.py --quick      # 2 seeds, 10 epochs
    .venv/bin/python benchmarks/kepsvgp/digits.py              # seeds 0-9, 100 epochs (~40 min)
    .venv/bin/python benchmarks/kepsvgp/digits.py --no-ood --no-corruption

Records go to ``--json`` / ``--csv`` (default ``benchmarks/results/kepsvgp_digits.{json,csv}``).
"""

import os  # noqa: I001  (the shared kit's folder on the path, the kit, then numpy)
import sys

if (kit := os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) not in sys.path:
    sys.path.insert(0, kit)
import _common as C  # noqa: I001  (first: pins the threads before numpy is imported)
import _fits as F
from _fits import column, fmt_pm, mean_se, nanmean, values

import argparse
import math
import time

import numpy as np

MODELS = {
    "msp": ("MSP", dict(kep_layers=0)),
    "kep-add": ("KEP add", dict(merge="add")),
    "kep-concat": ("KEP concat", dict(merge="concat")),
    "msp-ts": ("MSP+TS", dict(kep_layers=0)),
}
OOD_MODELS = ("msp", "kep-add", "kep-concat")
KEP_MODELS = ("kep-add", "kep-concat")
# report key, column title, lower is better
METRICS = (("accuracy", "ACC", False), ("aurc", "AURC", True), ("e_aurc", "E-AURC", True),
           ("misclassification_auroc", "AUROC", False), ("fpr_at_95_tpr", "FPR95", True),
           ("expected_calibration_error", "ECE", True), ("negative_log_likelihood", "NLL", True),
           ("brier_score", "Brier", True))
SHIFT_METRICS = (("accuracy", "ACC"), ("expected_calibration_error", "ECE"),
                 ("negative_log_likelihood", "NLL"), ("brier_score", "Brier"),
                 ("misclassification_auroc", "AUROC"))


# ---------------------------------------------------------------- data and models


def load_split(seed):
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    X, y = load_digits(return_X_y=True)
    return train_test_split(X / 16.0, y, test_size=0.3, stratify=y, random_state=seed)


def make_model(key, args, seed):
    from skgpx.kepsvgp import KEPSVGPClassifier

    return KEPSVGPClassifier(
        tokenizer="patches", patch_size=2, d_model=32, n_heads=4, depth=2, rank=5, eta=0.1,
        kl_weight=1.0, n_mc_samples=10, max_iter=args.epochs, batch_size=128, lr=3e-3,
        weight_decay=1e-4, device="cpu", dtype=args.dtype, random_state=seed,
        **MODELS[key][1])


def tempered(proba, temperature):
    """``softmax(log proba / T)``: the probabilities at temperature ``T``."""
    from scipy.special import softmax

    return softmax(np.log(np.clip(proba, 1e-300, None)) / temperature, axis=1)


def fit_temperature(proba, y, classes):
    """Temperature T minimising the NLL of ``tempered(proba, T)`` on ``(proba, y)``."""
    from scipy.optimize import minimize_scalar

    from skgpx.metrics import negative_log_likelihood

    def nll(log_t):
        return negative_log_likelihood(y, tempered(proba, math.exp(log_t)), labels=classes)

    return math.exp(minimize_scalar(nll, bounds=(-3.0, 3.0), method="bounded").x)


class Fitted:
    """A fitted model and its post-hoc temperature (1 except ``MSP+TS``)."""

    def __init__(self, model, temperature=1.0):
        self.model, self.temperature = model, temperature

    def predict_proba(self, X):
        proba = self.model.predict_proba(X)
        return proba if self.temperature == 1.0 else tempered(proba, self.temperature)


def train(key, args, seed, X, y, rec):
    """Fit ``key`` on ``(X, y)``; timing into ``rec``; returns a :class:`Fitted`."""
    from sklearn.model_selection import train_test_split

    X_fit, y_fit = X, y
    if key == "msp-ts":
        X_fit, X_cal, y_fit, y_cal = train_test_split(X, y, test_size=0.1, stratify=y,
                                                      random_state=seed)
    model = make_model(key, args, seed)
    t0 = time.perf_counter()
    model.fit(X_fit, y_fit)
    rec["fit_s"] = time.perf_counter() - t0
    epochs = [row["dur"] for row in model.history_]
    rec["epoch_s"] = float(np.mean(epochs[1:] if len(epochs) > 1 else epochs))
    rec["final_loss"] = float(model.objective_history_[-1])
    temperature = 1.0
    if key == "msp-ts":
        temperature = fit_temperature(model.predict_proba(X_cal), y_cal, model.classes_)
        rec["temperature"] = temperature
    return Fitted(model, temperature)


def evaluate(fitted, X, y, classes):
    from skgpx.metrics import uncertainty_report

    return uncertainty_report(y, fitted.predict_proba(X), labels=classes, paper_scale=True)


def shifted_scores(fitted, X, y, classes, seed):
    """Per kind and severity, the report on the corrupted test set."""
    from skgpx.datasets import DIGIT_CORRUPTIONS, corrupt_digits

    out = {}
    for kind in DIGIT_CORRUPTIONS:
        for severity in range(1, 6):
            Xc = corrupt_digits(X, kind, severity, scale=1.0, random_state=seed)
            out[f"{kind}/{severity}"] = evaluate(fitted, Xc, y, classes)
    return out


def ood_scores(key, args, seed, split, rec):
    from skgpx.metrics import ood_auroc, ood_aupr

    X_train, X_test, y_train, y_test = split
    keep = y_train < 5
    fitted = train(key, args, seed, X_train[keep], y_train[keep], {})
    confidence = fitted.predict_proba(X_test).max(1)
    inside = y_test < 5
    rec["ood_auroc"] = 100.0 * ood_auroc(confidence[inside], confidence[~inside])
    rec["ood_aupr"] = 100.0 * ood_aupr(confidence[inside], confidence[~inside])


def run_fit(key, args, seed, split):
    X_train, X_test, y_train, y_test = split
    rec = {"model": key, "seed": seed, "error": None, "warnings": []}
    with C.recorded(rec):
        fitted = train(key, args, seed, X_train, y_train, rec)
        classes = fitted.model.classes_
        rec.update(evaluate(fitted, X_test, y_test, classes))
        if args.corruption:
            rec["shift"] = shifted_scores(fitted, X_test, y_test, classes, seed)
        if args.ood and key in OOD_MODELS:
            ood_scores(key, args, seed, split, rec)
    return rec


def warm_up(args):
    """One short untimed fit per model (lazy imports, torch's first-call overheads)."""
    X_train, X_test, y_train, y_test = load_split(0)
    small = argparse.Namespace(**{**vars(args), "epochs": 2})
    for key in args.models:
        train(key, small, 0, X_train[:300], y_train[:300], {})


# ---------------------------------------------------------------- runs and reports


def run(args):
    records = {key: [] for key in args.models}
    warm_up(args)
    for k, seed in enumerate(args.seed_list):
        split = load_split(seed)
        parts = []
        for key in C.rotated(args.models, k):
            rec = run_fit(key, args, seed, split)
            records[key].append(rec)
            parts.append(f"{key} " + ("ERROR" if rec["error"] else
                                      f"acc {rec['accuracy']:.1f} ECE "
                                      f"{rec['expected_calibration_error']:.2f} "
                                      f"{rec['epoch_s'] * 1e3:.0f} ms/ep"))
        print(f"  seed {seed}: " + " | ".join(parts), flush=True)
    return records


def shift_values(recs, metric, severity=None):
    """Per seed, the mean of ``metric`` over the corrupted test sets (one severity or all)."""
    out = []
    for r in recs:
        if r["error"] or "shift" not in r:
            continue
        cells = [v[metric] for name, v in r["shift"].items()
                 if severity is None or name.endswith(f"/{severity}")]
        out.append(np.nanmean(cells))
    return np.array(out, dtype=float)


def report(args, records):
    summary, names = {}, {key: MODELS[key][0] for key in records}
    header = ", ".join(f"{t}" for _, t, _ in METRICS)
    rows = []
    for key, recs in records.items():
        rows.append([names[key]] + [fmt_pm(values(recs, m), 2) for m, _, _ in METRICS]
                    + [f"{nanmean(values(recs, 'epoch_s')) * 1e3:.0f}",
                       f"{sum(1 for r in recs if not r['error'])}/{len(recs)}"])
        summary[key] = {m: mean_se(values(recs, m)) for m, _, _ in METRICS}
    C.print_table(
        f"Table 1 analogue: digits, {len(args.seed_list)} seed(s), {args.epochs} epochs, "
        f"{args.dtype}", ["model"] + [t for _, t, _ in METRICS] + ["ms/epoch", "ok"], rows,
        align="l" + "r" * (len(METRICS) + 2),
        notes=[f"mean ± standard error over seeds; {header}: ACC, AUROC, FPR95, ECE, Brier in %,"
               " AURC and E-AURC x 1e3, NLL x 10 (the paper's scales)",
               "MSP+TS: temperature "
               + fmt_pm(values(records.get("msp-ts", []), "temperature"), 2)
               if "msp-ts" in records else ""] + C.failure_notes(records))

    if "msp" in records:
        rows = []
        for key in records:
            if key == "msp":
                continue
            row = [f"{names[key]} - MSP"]
            for m, _, lower in METRICS:
                d, mean, se = F.paired(column(records[key], m), column(records["msp"], m))
                wins = int(np.sum(d < 0) if lower else np.sum(d > 0))
                row.append(f"{mean:+.2f} ± {se:.2f} ({wins}/{d.size})")
            rows.append(row)
        C.print_table("Paired differences against MSP (same seed, same split)",
                      ["pair"] + [t for _, t, _ in METRICS], rows,
                      align="l" + "r" * len(METRICS),
                      notes=["mean ± standard error of the per-seed differences (wins: seeds "
                             "where the model is better than MSP)"])

    if args.corruption:
        rows = []
        for key, recs in records.items():
            rows.append([names[key]] + [fmt_pm(shift_values(recs, m), 2)
                                        for m, _ in SHIFT_METRICS])
        C.print_table("Table 2 analogue: corrupted digits (5 kinds x 5 severities, averaged)",
                      ["model"] + [t for _, t in SHIFT_METRICS], rows,
                      align="l" + "r" * len(SHIFT_METRICS),
                      notes=["kinds: gaussian_noise, salt_and_pepper, blur, contrast, shift "
                             "(skgpx.datasets.corrupt_digits); mean ± s.e. over seeds"])
        rows = [[names[key]] + [fmt_pm(shift_values(recs, "expected_calibration_error", s), 2)
                                for s in range(1, 6)] for key, recs in records.items()]
        C.print_table("ECE (%) on corrupted digits by severity", ["model"] + [
            f"severity {s}" for s in range(1, 6)], rows, align="lrrrrr")
        summary["shift"] = {key: {m: mean_se(shift_values(recs, m)) for m, _ in SHIFT_METRICS}
                            for key, recs in records.items()}

    if args.ood:
        rows = []
        for key in OOD_MODELS:
            if key in records:
                rows.append([names[key], fmt_pm(values(records[key], "ood_auroc"), 2),
                             fmt_pm(values(records[key], "ood_aupr"), 2)])
        C.print_table("Table 3 analogue: OOD detection (train on 0-4, out = 5-9)",
                      ["model", "AUROC", "AUPR"], rows, align="lrr",
                      notes=["in %, mean ± s.e. over seeds; score = maximum predicted "
                             "probability"])
        summary["ood"] = {key: {m: mean_se(values(records[key], m))
                                for m in ("ood_auroc", "ood_aupr")}
                          for key in OOD_MODELS if key in records}

    print("Targets and checks:")
    checks = {}
    if "msp" in records:
        msp_epoch = column(records["msp"], "epoch_s")
        for key in KEP_MODELS:
            if key not in records:
                continue
            ratio = column(records[key], "epoch_s") / msp_epoch  # per seed; NaN where failed
            ok = nanmean(ratio) <= 1.15
            checks[f"{key} per-epoch ratio"] = ok
            print(f"  {C.verdict(ok):4s}  {names[key]} / MSP seconds per epoch "
                  f"{fmt_pm(ratio, 3)} <= 1.15 (paper Table 4: 1.04-1.08 outside IMDB)")
        for key in KEP_MODELS:
            if key not in records:
                continue
            for m, title in (("negative_log_likelihood", "NLL"), ("brier_score", "Brier"),
                             ("expected_calibration_error", "ECE")):
                _, mean, se = F.paired(column(records[key], m), column(records["msp"], m))
                print(f"  info  {names[key]} - MSP {title} {mean:+.3f} ± {se:.3f} "
                      f"(z = {mean / se if se else math.nan:+.1f})")
    print(flush=True)
    summary["checks"] = checks
    return summary


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, default=None, help="seeds 0..n-1 (10)")
    p.add_argument("--epochs", type=int, default=None, help="epochs per fit (100)")
    p.add_argument("--quick", action="store_true", help="smoke run: 2 seeds, 10 epochs")
    p.add_argument("--models", default=",".join(MODELS),
                   help=f"comma list from {','.join(MODELS)} (all)")
    p.add_argument("--no-corruption", dest="corruption", action="store_false",
                   help="skip the corrupted test sets")
    p.add_argument("--no-ood", dest="ood", action="store_false", help="skip the OOD fits")
    F.add_dtype_argument(p, "networks")
    F.add_output_arguments(p, "kepsvgp_digits")
    args = p.parse_args(argv)
    if args.seeds is None:
        args.seeds = 2 if args.quick else 10
    if args.epochs is None:
        args.epochs = 10 if args.quick else 100
    args.models = C.parse_choices(p, args.models, MODELS, "model")
    args.seed_list = list(range(args.seeds))
    return args


CSV_KEYS = ["model", "seed", "fit_s", "epoch_s", "final_loss", "temperature"] + [
    m for m, _, _ in METRICS] + ["ood_auroc", "ood_aupr", "error"]


def main(argv=None):
    args = parse_args(argv)
    records, summary = F.run_main(
        "kepsvgp/digits.py  -  KEPSVGPClassifier vs softmax attention on digits (Tables 1-3 "
        "analogues)", args, f"networks {args.dtype}", run, report)
    rows = (((), r) for recs in records.values() for r in recs)
    F.write_outputs(args, {"records": records, "summary": summary}, CSV_KEYS, rows)


if __name__ == "__main__":
    main()
