"""Table B.2 / B.3 analogue for ``DeepQEPClassifier`` (Chang et al., AABI 2025): the
annular rhombus and the annulus, tested on the 50 x 50 grid of [-3, 3]^2.

Data sets (N = 500 training points, X ~ N(0, I_2), three classes, no label noise)
--------------------------------------------------------------------------------
* ``rhombus``: ``skgpx.datasets.make_annular_rhombus(500, shape="script")``, the labels of the
  authors' script, ``round(cos(a |x1| + |x2|) + 1)`` with ``a = 0.4 u pi``, u = 0.857396;
* ``rhombus-authors``: ``skgpx.datasets.load_authors_rhombus()``, the one training set of the
  authors' script (torch seed 2019, u = 0.8573957, class counts 131/226/143), the data behind
  the paper's Table B.2, with the same labels;
* ``rhombus-paper``: the same as ``rhombus`` with ``shape="paper"``, the printed formula
  ``round(cos(a (|x1| + |x2|))) + 1`` (``doc/design_notes.rst``, "Data");
* ``annulus`` (Table B.3; no generator in ``skgpx.datasets``, so it is built here in
  :func:`make_annulus`): ``y = round(cos(a ||x||_2) + 1)`` with the same ``a``, i.e. the
  rhombus rule with the Euclidean instead of the (script's) L1-like norm: three classes in
  concentric radius bands (class 2 for r < 0.97, 1 for 0.97 <= r < 1.94, 0 for 1.94 <= r < 3.89,
  1 again beyond, which only the grid's corners reach).  The paper does not print the annulus
  formula; it shows the data in Figure B.2 ("a classification problem defined on annulus",
  circles and triangles for three classes).  This rule is the commented-out alternative
  ``data_fn = cos(0.4 * u * pi * sqrt(x^2 + y^2)) + 1`` next to the rhombus rule in the
  authors' ``classification/run_Deep_QEP.py`` (github lanzithinking/DeepQEP), with their
  ``torch.round`` and one ``u`` for the whole data set.

Seed k seeds every model and, except on ``rhombus-authors``, draws the training inputs (numpy
``random_state=seed``), so the spread over seeds includes the data.  The paper fixed the data
(torch seed 2019, hence its "± 0" for the deterministic GP and QEP rows); on
``rhombus-authors`` the seeds vary only the models, as in the paper (sklearn's GPC, whose
seed is unused without optimizer restarts, then gives one value).  Test: labels of the 2500
grid points (``rhombus_labels`` / :func:`annulus_labels`).

Why ``rhombus-authors``: on our own draws (``rhombus``) the deep Q-EP reached 0.754 and 0.793
(seeds 0, 1; sklearn's GPC 0.80-0.82), well below the paper's 0.856; on the authors' data the
same estimator reached 0.895, 0.859 and 0.878 (model seeds 0-2, float32, outside this
script; 0.892 at seed 0 in a run of this script) and 0.888, 0.864, 0.876 in float64, above
the paper; sklearn's GPC 0.845.  The gap was the data draw, not the model: 59% of the grid has
``max |x_j| > 2``, where only 10% of 500 standard-normal training points lie, so grid accuracy
is mostly extrapolation and varies with the particular 500 points.

Models
------
* ``QEP q=1``: ``DeepQEPClassifier(q=1, hidden_dims=(3,), n_inducing=64, lr=0.05,
  max_iter=--epochs (1000), tol=None, n_mc_samples=10, n_mc_samples_predict=32)`` with the
  default softmax likelihood (the deep Q-EP of Table B.2);
* ``QEP q=2``: the same at q = 2 (our deep GP);
* ``QEP q=1 dirichlet`` (not in the default run; ``--models``): the authors' Dirichlet
  "regression on labels" likelihood (on the rhombus it collapsed towards the majority class
  in our runs: grid accuracy 0.469 ± 0.073, training accuracy 0.672 over 3 seeds, where q = 2
  with the same likelihood reached 0.798 on seed 0);
* ``sklearn GPC``: ``GaussianProcessClassifier(1.0 * Matern(nu=1.5, length_scale=[1, 1]))``
  (Laplace, one-vs-rest, ARD), the shallow-GP baseline.

Metrics on the grid: accuracy, AUC (``roc_auc_score(y, predict_proba, multi_class="ovr",
average="macro")``), log-loss (info; the paper's NLL column is not comparable), training
accuracy, fit seconds and the fit time relative to sklearn's GPC; mean ± standard error over
seeds.  A "majority class" line gives the accuracy of always predicting the grid's most
frequent class.  The paper's Table B.2 / B.3 values are printed beside.

Timing: about 40 ms per epoch of a deep model on one core in float32 (the default ``--dtype``,
as the authors), i.e. about 40 s per 1000-epoch fit, so the default run (3 data sets x 3
seeds x 2 deep models, plus 9 GPC fits of about 3.5 s) takes about 13 minutes.

Usage::

    .venv/bin/python benchmarks/qep/rhombus.py --quick        # 1 seed, 30 epochs
    .venv/bin/python benchmarks/qep/rhombus.py                # 3 seeds, 1000 epochs
    .venv/bin/python benchmarks/qep/rhombus.py --datasets rhombus-authors --models q1,gpc

Records go to ``--json`` / ``--csv`` (default ``benchmarks/results/qep_rhombus.{json,csv}``).
"""

import os  # noqa: I001  (the shared kit's folder on the path, the kit, then numpy)
import sys

if (kit := os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) not in sys.path:
    sys.path.insert(0, kit)
import _common as C  # noqa: I001  (first: pins the threads before numpy is imported)
import _fits as Q
from _fits import fmt_pm, mean_se, nanmean, values

import argparse
import math
import time

import numpy as np

N_TRAIN, U = 500, 0.857396
DATASETS = ("rhombus", "rhombus-authors", "rhombus-paper", "annulus")
DEFAULT_DATASETS = ("rhombus", "rhombus-authors", "annulus")
MODELS = {
    "q1": ("QEP q=1", 1.0, "softmax"),
    "q2": ("QEP q=2", 2.0, "softmax"),
    "q1-dirichlet": ("QEP q=1 dirichlet", 1.0, "dirichlet"),
    "gpc": ("sklearn GPC", None, None),
}
DEFAULT_MODELS = ("q1", "q2", "gpc")

# the paper's (ACC, ACC s.e., AUC) per row
PAPER = {
    "rhombus": {"GP": (0.810, 0.0, 0.940), "Deep GP": (0.825, 0.026, 0.905),
                "QEP": (0.834, 0.0, 0.935), "Deep QEP": (0.856, 0.015, 0.878),
                "DKL-GP": (0.664, 0.196, 0.732), "DSPP": (0.744, 0.023, 0.829)},
    "annulus": {"GP": (0.951, 0.0, 0.989), "Deep GP": (0.953, 0.03, 0.991),
                "QEP": (0.952, 0.0, 0.985), "Deep QEP": (0.950, 0.008, 0.992),
                "DKL-GP": (0.854, 0.080, 0.941), "DSPP": (0.922, 0.026, 0.970)},
}
PAPER_ROW = {"q1": "Deep QEP", "q1-dirichlet": "Deep QEP", "q2": "Deep GP", "gpc": "GP"}


# ---------------------------------------------------------------- data


def annulus_labels(X, u=U):
    """``round(cos(0.4 u pi ||x||_2) + 1)`` (ties to even, as ``torch.round``): 0, 1 or 2."""
    X = np.asarray(X, dtype=np.float64)
    radius = np.sqrt((X**2).sum(1))
    return np.rint(np.cos(0.4 * u * np.pi * radius) + 1.0).astype(np.int64)


def make_annulus(n_samples=N_TRAIN, u=U, random_state=None):
    """Annulus data (see the module docstring): X ~ N(0, I_2), labels by radius band."""
    from sklearn.utils import check_random_state

    X = check_random_state(random_state).standard_normal((n_samples, 2))
    return X, annulus_labels(X, u)


def grid():
    g = np.linspace(-3.0, 3.0, 50)
    x1, x2 = np.meshgrid(g, g)
    return np.column_stack([x1.ravel(), x2.ravel()])


def load_data(name, seed):
    from skgpx.datasets import load_authors_rhombus, make_annular_rhombus, rhombus_labels

    G = grid()
    if name == "annulus":
        X, y = make_annulus(N_TRAIN, random_state=seed)
        return X, y, G, annulus_labels(G)
    if name == "rhombus-authors":
        # One fixed training set for every seed; its u (0.8573957) labels the grid as U does.
        X, y = load_authors_rhombus()
        return X, y, G, rhombus_labels(G)
    shape = "paper" if name == "rhombus-paper" else "script"
    X, y = make_annular_rhombus(n_samples=N_TRAIN, shape=shape, random_state=seed)
    return X, y, G, rhombus_labels(G, shape=shape)


# ---------------------------------------------------------------- models


def make_model(key, args, seed):
    if key == "gpc":
        from sklearn.gaussian_process import GaussianProcessClassifier
        from sklearn.gaussian_process.kernels import Matern

        return GaussianProcessClassifier(1.0 * Matern(nu=1.5, length_scale=[1.0, 1.0]),
                                         random_state=seed)
    from skgpx.qep import DeepQEPClassifier

    _, q, likelihood = MODELS[key]
    return DeepQEPClassifier(q=q, hidden_dims=(3,), n_inducing=64, kernel="matern32", ard=True,
                             n_mc_samples=10, n_mc_samples_predict=32, likelihood=likelihood,
                             max_iter=args.epochs, lr=0.05, tol=None, device="cpu",
                             dtype=args.dtype, random_state=seed)


def run_fit(key, args, seed, data):
    from sklearn.metrics import log_loss, roc_auc_score

    X, y, G, yg = data
    rec = {"model": key, "seed": seed, "error": None, "warnings": []}
    with C.recorded(rec):  # errors and warnings go into rec (reported in the table)
        model = make_model(key, args, seed)
        t0, c0 = time.perf_counter(), time.process_time()
        model.fit(X, y)
        rec["fit_s"] = time.perf_counter() - t0
        rec["fit_cpu_s"] = time.process_time() - c0
        proba = model.predict_proba(G)
        pred = model.classes_[np.argmax(proba, axis=1)]
        rec["acc"] = float(np.mean(pred == yg))
        rec["auc"] = float(roc_auc_score(yg, proba, multi_class="ovr", average="macro",
                                         labels=model.classes_))
        rec["log_loss"] = float(log_loss(yg, proba, labels=model.classes_))
        rec["train_acc"] = float(np.mean(model.predict(X) == y))
        if hasattr(model, "n_iter_"):
            rec["n_iter"] = int(model.n_iter_)
            rec["final_loss"] = float(model.objective_history_[-1])
    return rec


def warm_up(args):
    """One short untimed fit per model (lazy imports, first-call overheads)."""
    X, y, G, yg = load_data("rhombus", 0)
    small = argparse.Namespace(**{**vars(args), "epochs": 3})
    for key in args.models:
        run_fit(key, small, 0, (X[:100], y[:100], G[:10], yg[:10]))


# ---------------------------------------------------------------- runs and reports


def run(args):
    records = {}
    warm_up(args)
    for name in args.datasets:
        records[name] = {k: [] for k in args.models}
        print(f"  {name}: N={N_TRAIN}, test grid 50x50 of [-3,3]^2", flush=True)
        for k, seed in enumerate(args.seed_list):
            data = load_data(name, seed)
            parts = []
            for key in C.rotated(args.models, k):
                rec = run_fit(key, args, seed, data)
                records[name][key].append(rec)
                parts.append(f"{key} " + ("ERROR" if rec["error"] else
                                          f"acc {rec['acc']:.3f} auc {rec['auc']:.3f} "
                                          f"{rec['fit_s']:.1f}s"))
            print(f"    seed {seed}: " + " | ".join(parts), flush=True)
    return records


def report(args, records):
    summary = {}
    for name, per_model in records.items():
        paper = PAPER["annulus" if name == "annulus" else "rhombus"]
        yg = load_data(name, 0)[3]
        majority = float(np.max(np.bincount(yg)) / yg.size)
        t_gpc = nanmean(values(per_model.get("gpc", []), "fit_cpu_s")) if "gpc" in per_model \
            else math.nan
        rows, summary[name] = [], {"majority": majority}
        for key, recs in per_model.items():
            acc, auc = values(recs, "acc"), values(recs, "auc")
            fit = nanmean(values(recs, "fit_s"))
            cpu = nanmean(values(recs, "fit_cpu_s"))
            p = paper[PAPER_ROW[key]]
            n_ok = sum(1 for r in recs if not r["error"])
            rows.append([MODELS[key][0], fmt_pm(acc), fmt_pm(auc),
                         fmt_pm(values(recs, "log_loss")), fmt_pm(values(recs, "train_acc")),
                         f"{fit:.1f}", f"{cpu:.1f}",
                         C.fmt_ratio(cpu / t_gpc) if math.isfinite(t_gpc) else "-",
                         f"{PAPER_ROW[key]} {p[0]:.3f}" + (f" ± {p[1]:.3f}" if p[1] else ""),
                         f"{nanmean(acc) - p[0]:+.3f}", f"{p[2]:.3f}",
                         f"{nanmean(auc) - p[2]:+.3f}", f"{n_ok}/{len(recs)}",
                         str(sum(len(r["warnings"]) for r in recs))])
            summary[name][key] = {m: mean_se(values(recs, m))
                                  for m in ("acc", "auc", "log_loss", "train_acc", "fit_s",
                                            "fit_cpu_s")}
        rows.append(["majority class", f"{majority:.3f}"] + [""] * 12)
        varied = "model seeds, one fixed training set" if name == "rhombus-authors" \
            else "data and model seeds"
        notes = [f"mean ± standard error over seeds ({varied}); grid of 2500 points",
                 "AUC = one-vs-rest macro roc_auc_score of predict_proba; log-loss on the grid "
                 "(info: the paper's NLL column is a different, model-specific quantity)",
                 "fit s = wall clock, CPU s = this process's CPU time of the fit; fit / GPC "
                 "on CPU time",
                 "paper rows: " + "; ".join(f"{k} {v[0]:.3f}/{v[2]:.3f}"
                                            for k, v in paper.items()) + " (ACC/AUC)"]
        notes += C.failure_notes(per_model, top=2)
        table = "B.3" if name == "annulus" else "B.2"
        C.print_table(f"{name} (Table {table} analogue): N={N_TRAIN}, hidden (3,), M=64, "
                      f"{args.epochs} epochs, lr 0.05, {args.dtype}, "
                      f"{len(args.seed_list)} seed(s)",
                      ["model", "ACC", "AUC", "log-loss", "train ACC", "fit s", "CPU s",
                       "fit / GPC", "paper ACC", "gap", "paper AUC", "gap", "ok", "warn"],
                      rows, align="l" + "r" * 13, notes=notes)
    print("Checks (the thresholds are test oracles on the script's rhombus labels):")
    checks = {}
    for name, per_model in records.items():
        if "q1" in per_model and name == "rhombus":
            acc = nanmean(values(per_model["q1"], "acc"))
            ok = acc >= 0.78
            print(f"  {C.verdict(ok):4s}  {name}: QEP q=1 grid accuracy {acc:.3f} >= 0.78 "
                  f"(majority {summary[name]['majority']:.3f}; paper 0.856)")
            checks[f"{name} q1>=0.78"] = ok
        if "q1" in per_model and name == "rhombus-authors":
            # The floor of tests/qep/test_paper.py on the same data (float64 seeds 0-2 gave
            # 0.888, 0.864, 0.876; sklearn's GPC 0.845, 1-NN 0.821).
            acc = nanmean(values(per_model["q1"], "acc"))
            ok = acc >= 0.83
            print(f"  {C.verdict(ok):4s}  {name}: QEP q=1 grid accuracy {acc:.3f} >= 0.83 "
                  f"(majority {summary[name]['majority']:.3f}; paper 0.856 on this data)")
            checks[f"{name} q1>=0.83"] = ok
        if "q1" in per_model and "gpc" in per_model:
            a = values(per_model["q1"], "acc")
            b = values(per_model["gpc"], "acc")
            n = min(a.size, b.size)
            print(f"  info  {name}: QEP q=1 - sklearn GPC accuracy {np.mean(a) - np.mean(b):+.3f}"
                  f" (q=1 higher in {int(np.sum(a[:n] > b[:n]))}/{n} seeds; paper: deep QEP "
                  f"{'+0.046' if name != 'annulus' else '-0.001'} over GP)")
        if "q1" in per_model and "q2" in per_model:
            a, b = values(per_model["q1"], "acc"), values(per_model["q2"], "acc")
            n = min(a.size, b.size)
            print(f"  info  {name}: QEP q=1 - QEP q=2 accuracy {np.mean(a) - np.mean(b):+.3f} "
                  f"(q=1 higher in {int(np.sum(a[:n] > b[:n]))}/{n} seeds; paper: "
                  f"{'+0.031' if name != 'annulus' else '-0.003'})")
    print(flush=True)
    summary["checks"] = checks
    return summary


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, default=None, help="seeds per data set (3)")
    p.add_argument("--epochs", type=int, default=None, help="epochs per deep fit (1000)")
    p.add_argument("--quick", action="store_true", help="smoke run: 1 seed, 30 epochs")
    p.add_argument("--datasets", default=",".join(DEFAULT_DATASETS),
                   help=f"comma list from {','.join(DATASETS)} ({','.join(DEFAULT_DATASETS)})")
    p.add_argument("--models", default=",".join(DEFAULT_MODELS),
                   help=f"comma list from {','.join(MODELS)} ({','.join(DEFAULT_MODELS)})")
    Q.add_dtype_argument(p)
    Q.add_output_arguments(p, "qep_rhombus")
    args = p.parse_args(argv)
    if args.seeds is None:
        args.seeds = 1 if args.quick else 3
    if args.epochs is None:
        args.epochs = 30 if args.quick else 1000
    args.datasets = C.parse_choices(p, args.datasets, DATASETS, "data set")
    args.models = C.parse_choices(p, args.models, MODELS, "model")
    args.seed_list = list(range(args.seeds))
    return args


CSV_KEYS = ["model", "seed", "fit_s", "fit_cpu_s", "n_iter", "final_loss", "acc", "auc",
            "log_loss", "train_acc", "error"]


def main(argv=None):
    args = parse_args(argv)
    records, summary = Q.run_main(
        "qep/rhombus.py  -  DeepQEPClassifier, Table B.2/B.3 analogue (annular rhombus, "
        "annulus) vs the paper and sklearn's GPC", args,
        f"deep models {args.dtype}; sklearn's GPC float64", run, report)
    rows = (((name,), r) for name, per_model in records.items()
            for recs in per_model.values() for r in recs)
    Q.write_outputs(args, {"records": records, "summary": summary, "paper": PAPER}, CSV_KEYS,
                    rows, prefix=("dataset",))


if __name__ == "__main__":
    main()
