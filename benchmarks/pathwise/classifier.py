"""``PathwiseGPClassifier``: exact mode against scikit-learn, sparse mode against
the exact model, GPyTorch's SVGP and BoTorch's pathwise draws.

One thread, float64.  Data are split 75/25 (stratified, ``random_state=0``) and
standardised on the training rows; the kernel is ``ConstantKernel() * RBF(sqrt(d))``
(GPyTorch: ``ScaleKernel(RBFKernel())`` started at the same length scale).  Calibration is
the 15-bin top-label ECE of ``skgpx.metrics``.

Parts (``--parts``, comma-separated; all by default):

* ``exact``: scikit-learn's ``GaussianProcessClassifier`` and ours (exact mode, the same
  constructor arguments) on breast cancer, iris and digits (one-vs-rest): fit seconds (one
  fit each, after an untimed warm-up of ours on 50 rows), their ratio, the largest
  differences of ``kernel_.theta``, ``log_marginal_likelihood_value_`` and test
  probabilities, accuracy, log-loss and ECE.  Targets: ours <= sklearn's time; theta, LML
  and probabilities within 1e-6.
* ``sparse``: 5 000 training rows of ``make_classification(n_features=20)``: the exact
  Laplace model against sparse mode with m = 256.  Target: test log-loss within 2 % of the
  exact model's, ECE no worse.
* ``gpytorch``: n = 100 000, d = 20, m = 256, binary, batch 1024, Adam 0.01 on both sides:
  seconds per epoch (ours: natural-gradient steps on q(u) + Adam on theta and Z; GPyTorch:
  ``ApproximateGP`` + whitened ``VariationalStrategy`` + ``BernoulliLikelihood`` +
  ``VariationalELBO``, Adam on everything), test accuracy and log-loss after each of
  ``--epochs`` epochs; then the epochs our convergence rule takes with and without natural
  gradients.  Targets: time per epoch <= 0.5x GPyTorch's, log-loss no worse at equal epochs,
  fewer epochs to the plateau with natural gradients.
* ``scale``: 1 000 000 rows, d = 20, m = 256, ``optimizer="adam"``, in a fresh child
  process: fit seconds and peak RSS.  Targets: < 600 s, < 2 GB.
* ``softmax``: digits (10 classes), sparse mode (m = 128 for its 1347 training rows:
  ``--digits-m``) with ``multi_class="softmax"`` and with
  one-vs-rest, against scikit-learn's one-vs-rest GPC (the ``exact`` part's fit, or a fresh
  one).  Targets: accuracy within 0.01 of sklearn's, log-loss < 0.15, ECE < 0.05, fit time
  < 0.1x sklearn's.
* ``default-scale``: 250 000 training rows (50 000 test rows) of
  ``make_classification(n_features=16)``, m = 256 (``--m``): our fit with every other
  parameter at its default (``optimizer="auto"``: the mini-batch route at this size) and
  GPyTorch's SVGP trained 3 epochs (``--epochs``; batch 1024, Adam 0.01) from the same
  k-means++ inducing inputs, on the same split: seconds, accuracy, log-loss, ECE and the
  ratios.  The kernel is scikit-learn's default (``--scale-kernel default``:
  ``C(1.0, "fixed") * RBF(1.0, "fixed")``; GPyTorch's ``ScaleKernel(RBFKernel())`` at
  outputscale 1 and lengthscale 1, frozen) or ``C(1.0) * RBF(np.ones(16))``
  (``--scale-kernel ard``; GPyTorch's ARD kernel from the same values, trained).
  Targets: our fit < 300 s on one thread, test log-loss no worse than GPyTorch's.
* ``draws``: 64 latent draws at 100 000 points (F = 1024 features) from a sparse fit
  (m = 256) against BoTorch's ``draw_matheron_paths`` on a GPyTorch SVGP carrying our Z,
  kernel and q(u).  Target: ours >= 3x faster.

Usage::

    .venv/bin/python benchmarks/pathwise/classifier.py                      # everything
    .venv/bin/python benchmarks/pathwise/classifier.py --parts exact,sparse
    .venv/bin/python benchmarks/pathwise/classifier.py --quick              # smoke run
    .venv/bin/python benchmarks/pathwise/classifier.py --device cuda --parts scale,draws
    .venv/bin/python benchmarks/pathwise/classifier.py --parts default-scale
"""

import os  # noqa: I001  (the shared kit's folder on the path, the kit, then numpy)
import sys

if (kit := os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) not in sys.path:
    sys.path.insert(0, kit)
import _common as C  # noqa: I001  (first: pins the threads before numpy is imported)
import _baselines as B
from _fits import bundled_classification as bundled
from _fits import classification_scores as scores
from _fits import classification_split as split
from _fits import rbf_classifier_kernel as kernel

import argparse
import contextlib
import time
import warnings

import numpy as np

SCRIPT = os.path.abspath(__file__)
PARTS = ("exact", "sparse", "gpytorch", "scale", "softmax", "default-scale", "draws")
DEVICE = "cpu"


# ---------------------------------------------------------------- data, kernels, scores


def synthetic(n, d=20, seed=0, train_size=None, test_size=0.25):
    from sklearn.datasets import make_classification

    X, y = make_classification(n_samples=n, n_features=d, random_state=seed)
    return split(X, y, train_size=train_size, test_size=test_size)


def ours(**params):
    from skgpx import PathwiseGPClassifier

    return PathwiseGPClassifier(device=DEVICE, **params)


def timed_fit(est, X, y):
    C.sync(DEVICE)
    start = time.perf_counter()
    est.fit(X, y)
    C.sync(DEVICE)
    return time.perf_counter() - start


def score_row(label, seconds, s, extra=()):
    return [label, C.fmt_seconds(seconds), f"{s['accuracy']:.3f}", f"{s['log_loss']:.3f}",
            f"{s['ece']:.3f}", *extra]


# ---------------------------------------------------------------- part: exact


def part_exact(args, memo):
    from sklearn.gaussian_process import GaussianProcessClassifier

    names = ["breast_cancer", "iris"] + ([] if args.quick else ["digits"])
    Xw, _, yw, _ = bundled("iris")
    ours(kernel=kernel(4)).fit(Xw[:50], yw[:50])  # warm-up: imports, first torch calls
    rows, lines = [], []
    for name in names:
        Xtr, Xte, ytr, yte = bundled(name)
        params = dict(kernel=kernel(Xtr.shape[1]), random_state=0)
        theirs = GaussianProcessClassifier(**params)
        t_sk = timed_fit(theirs, Xtr, ytr)
        mine = ours(**params)
        t_us = timed_fit(mine, Xtr, ytr)
        p_sk, p_us = theirs.predict_proba(Xte), mine.predict_proba(Xte)
        d_theta = float(np.max(np.abs(mine.kernel_.theta - theirs.kernel_.theta)))
        d_lml = abs(float(mine.log_marginal_likelihood_value_)
                    - float(theirs.log_marginal_likelihood_value_))
        d_p = float(np.max(np.abs(p_us - p_sk)))
        s_sk, s_us = scores(yte, p_sk, theirs.classes_), scores(yte, p_us, mine.classes_)
        rows.append(score_row(f"{name} sklearn", t_sk, s_sk, ("", "", "", "")))
        rows.append(score_row(f"{name} ours", t_us, s_us, (
            C.fmt_ratio(t_sk / t_us), f"{d_theta:.1e}", f"{d_lml:.1e}", f"{d_p:.1e}")))
        memo[f"sklearn_{name}"] = (t_sk, s_sk)
        ok = t_us <= t_sk and max(d_theta, d_lml, d_p) <= 1e-6
        lines.append(f"exact {name}: ours {C.fmt_seconds(t_us)} s vs sklearn "
                     f"{C.fmt_seconds(t_sk)} s ({C.fmt_ratio(t_sk / t_us)} faster); max "
                     f"|d theta| {d_theta:.1e}, |d LML| {d_lml:.1e}, |d p| {d_p:.1e}: "
                     f"{C.verdict(ok)}")
    C.print_table("exact mode against scikit-learn's GaussianProcessClassifier",
                  ["fit", "seconds", "accuracy", "log-loss", "ECE", "speed-up", "|d theta|",
                   "|d LML|", "|d p|"], rows)
    return lines


# ---------------------------------------------------------------- part: sparse vs exact


def part_sparse(args, memo):
    n_train = 1000 if args.quick else 5000
    Xtr, Xte, ytr, yte = synthetic(int(n_train / 0.75) + 1, train_size=n_train)
    exact = ours(kernel=kernel(Xtr.shape[1]), random_state=0)
    t_exact = timed_fit(exact, Xtr, ytr)
    sparse = ours(kernel=kernel(Xtr.shape[1]), n_inducing=args.m, random_state=0)
    t_sparse = timed_fit(sparse, Xtr, ytr)
    s_e = scores(yte, exact.predict_proba(Xte), exact.classes_)
    s_s = scores(yte, sparse.predict_proba(Xte), sparse.classes_)
    C.print_table(f"sparse (m = {args.m}) against exact mode on {len(Xtr)} rows, d = 20",
                  ["fit", "seconds", "accuracy", "log-loss", "ECE"],
                  [score_row("exact (Laplace)", t_exact, s_e),
                   score_row("sparse (SVGP)", t_sparse, s_s)])
    excess = s_s["log_loss"] / s_e["log_loss"] - 1
    ok = excess <= 0.02 and s_s["ece"] <= s_e["ece"]
    return [f"sparse vs exact on {len(Xtr)} rows: log-loss {s_s['log_loss']:.4f} vs "
            f"{s_e['log_loss']:.4f} ({100 * excess:+.1f} %), ECE {s_s['ece']:.3f} vs "
            f"{s_e['ece']:.3f}: {C.verdict(ok)}"]


# ---------------------------------------------------------------- part: GPyTorch


def train_gpytorch(Xtr, ytr, Xte, yte, Z, epochs, batch, lr, seed=0, **kernel):
    """GPyTorch's SVGP classifier, Adam on every trainable parameter, on our device:
    (seconds per epoch, scores per epoch)."""
    return B.train_gpytorch_svgp(Xtr, ytr, Xte, yte, Z, epochs, batch, lr, seed,
                                 device=DEVICE, **kernel)


@contextlib.contextmanager
def adam_on_q(active):
    """The ablation: q(u) moved by Adam on its moment parameters instead of natural steps
    (``_adam_q.AdamQSVGP``), everything else unchanged."""
    from _adam_q import AdamQSVGP

    import skgpx.pathwise._svgp._classification as _classification

    engine = _classification.SVGPEngine
    if active:
        _classification.SVGPEngine = AdamQSVGP
    try:
        yield
    finally:
        _classification.SVGPEngine = engine


def part_gpytorch(args, memo):
    n = 20_000 if args.quick else 100_000
    Xtr, Xte, ytr, yte = synthetic(n)
    common = dict(kernel=kernel(Xtr.shape[1]), n_inducing=args.m, optimizer="adam",
                  minibatch_size=1024, learning_rate=0.01, random_state=0)
    rows, totals, ours_scores = [], [], []
    # untimed warm-up: one-time costs (CUDA context, JIT of the trig kernel) are not an epoch's
    ours(**common, max_iter=1, tol=None).fit(Xtr[:2048], ytr[:2048])
    for epochs in range(1, args.epochs + 1):
        est = ours(**common, max_iter=epochs, tol=None)
        totals.append(timed_fit(est, Xtr, ytr))
        ours_scores.append(scores(yte, est.predict_proba(Xte), est.classes_))
    # an epoch's cost is the marginal one, (T_E - T_1) / (E - 1); the rest of T_1 is the
    # set-up (k-means++ on a subset, the final bound on all rows), paid once per fit
    per_epoch = (totals[-1] - totals[0]) / max(args.epochs - 1, 1)
    setup = totals[0] - per_epoch
    ours_seconds = [per_epoch] * args.epochs
    Z0 = ours(**{**common, "optimizer": None}).fit(Xtr, ytr).inducing_points_
    g_seconds, g_scores = train_gpytorch(Xtr, ytr, Xte, yte, Z0, args.epochs, 1024, 0.01)
    for e in range(args.epochs):
        rows.append(score_row(f"ours, epoch {e + 1}", ours_seconds[e], ours_scores[e]))
        rows.append(score_row(f"GPyTorch, epoch {e + 1}", g_seconds[e], g_scores[e]))
    ratio = per_epoch / np.median(g_seconds)
    worse = [e + 1 for e in range(args.epochs)
             if ours_scores[e]["log_loss"] > g_scores[e]["log_loss"]]
    plateau = {}
    for natural in (True, False):
        probe = ours(**common, max_iter=50, tol=1e-4)
        with adam_on_q(not natural):
            timed_fit(probe, Xtr, ytr)
        plateau[natural] = len(probe.objective_history_)
    C.print_table(f"sparse mode against GPyTorch's SVGP: n = {len(Xtr)} training rows, d = 20,"
                  f" m = {args.m}, batch 1024 (seconds per epoch)",
                  ["fit", "s/epoch", "accuracy", "log-loss", "ECE"], rows,
                  notes=[f"ours: {C.fmt_seconds(per_epoch)} s per epoch (fits of 1..{args.epochs}"
                         f" epochs: {', '.join(C.fmt_seconds(t) for t in totals)} s) plus "
                         f"{C.fmt_seconds(setup)} s of set-up per fit",
                         f"epochs to the plateau (tol 1e-4): natural gradients "
                         f"{plateau[True]}, Adam alone {plateau[False]}"])
    return [f"vs GPyTorch: {C.fmt_ratio(ratio)} its time per epoch (target <= 0.5x): "
            f"{C.verdict(ratio <= 0.5)}; log-loss worse at epochs {worse or 'none'}: "
            f"{C.verdict(not worse)}; plateau in {plateau[True]} epochs with natural "
            f"gradients vs {plateau[False]} without: {C.verdict(plateau[True] < plateau[False])}"]


# ---------------------------------------------------------------- part: scale (child cell)


def scale_setup(cfg):
    global DEVICE
    warnings.filterwarnings("ignore")
    DEVICE = cfg.get("device", "cpu")
    from sklearn.datasets import make_classification

    X, y = make_classification(n_samples=cfg["n"], n_features=20, random_state=0)
    return {"X": X, "y": y, "cfg": cfg}


def scale_run(state):
    cfg = state["cfg"]
    est = ours(kernel=kernel(20), n_inducing=cfg["m"], optimizer=cfg["optimizer"],
               random_state=0)
    seconds = timed_fit(est, state["X"], state["y"])
    return {"total": seconds, "info": {"epochs": len(est.objective_history_),
                                       "train_accuracy": float(est.score(state["X"][:20000],
                                                                         state["y"][:20000]))}}


def part_scale(args, memo):
    n = 100_000 if args.quick else 1_000_000
    lines = []
    # the mini-batch route: L-BFGS-B's full passes (each to the optimal q) are the route
    # for Dask clusters, not for one thread on a million rows
    for optimizer in ("adam",):
        res = C.run_cell(SCRIPT, {"n": n, "m": args.m, "optimizer": optimizer,
                                  "device": DEVICE, "repeats": 1, "budget": 0},
                         cutoff=args.cutoff, label=f"scale {optimizer}")
        if res["status"] != "ok":
            lines.append(f"scale {optimizer}: {res['status']} ({res.get('note')})")
            continue
        seconds, rss = res["times"]["total"][0], res["peak_rss"]
        lines.append(f"scale n = {n}, m = {args.m}, optimizer={optimizer}: fit "
                     f"{C.fmt_seconds(seconds)} s, peak RSS {C.fmt_bytes(rss)}, "
                     f"{res['info']}: {C.verdict(seconds < 600 and rss < 2e9)}")
    return lines


# ---------------------------------------------------------------- part: softmax


def part_softmax(args, memo):
    from sklearn.gaussian_process import GaussianProcessClassifier

    Xtr, Xte, ytr, yte = bundled("digits")
    if "sklearn_digits" in memo:
        t_sk, s_sk = memo["sklearn_digits"]
    else:
        theirs = GaussianProcessClassifier(kernel(Xtr.shape[1]), random_state=0)
        t_sk = timed_fit(theirs, Xtr, ytr)
        s_sk = scores(yte, theirs.predict_proba(Xte), theirs.classes_)
    rows = [score_row("sklearn GPC (one-vs-rest)", t_sk, s_sk, ("",))]
    results = {}
    for multi_class in ("softmax", "one_vs_rest"):
        est = ours(kernel=kernel(Xtr.shape[1]), n_inducing=args.digits_m,
                   multi_class=multi_class, random_state=0)
        seconds = timed_fit(est, Xtr, ytr)
        s = scores(yte, est.predict_proba(Xte), est.classes_)
        results[multi_class] = (seconds, s)
        rows.append(score_row(f"ours sparse {multi_class}", seconds, s,
                              (C.fmt_ratio(t_sk / seconds),)))
    C.print_table(f"digits (10 classes, 1347 training rows), m = {args.digits_m}",
                  ["fit", "seconds", "accuracy", "log-loss", "ECE", "speed-up"], rows)
    seconds, s = results["softmax"]
    ok = (s["accuracy"] >= s_sk["accuracy"] - 0.01 and s["log_loss"] < 0.15
          and s["ece"] < 0.05 and seconds < 0.1 * t_sk)
    return [f"softmax on digits: accuracy {s['accuracy']:.3f} (sklearn {s_sk['accuracy']:.3f}),"
            f" log-loss {s['log_loss']:.3f}, ECE {s['ece']:.3f}, "
            f"{C.fmt_ratio(t_sk / seconds)} faster: {C.verdict(ok)}"]


# ---------------------------------------------------------------- part: default-scale


def part_default_scale(args, memo):
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel

    from skgpx._inducing._points import initial_inducing_points

    n_train, n_test, d = (50_000, 10_000, 16) if args.quick else (250_000, 50_000, 16)
    Xtr, Xte, ytr, yte = synthetic(n_train + n_test, d=d, train_size=n_train,
                                   test_size=n_test)
    if args.scale_kernel == "ard":
        start, gp_kernel = ConstantKernel(1.0) * RBF(np.ones(d)), dict(ard=True)
    else:  # kernel=None: scikit-learn's fixed C(1.0) * RBF(1.0)
        start, gp_kernel = None, dict(frozen=True)
    # untimed warm-up of the mini-batch route (first torch calls, the trig kernel's JIT)
    warm = ours(optimizer="adam", n_inducing=args.m, max_iter=1, tol=None)
    warm.fit(Xtr[:2048], ytr[:2048])
    est = ours(kernel=start, n_inducing=args.m, random_state=0)
    cpu = time.process_time()
    t_ours = timed_fit(est, Xtr, ytr)
    cpu_ours = time.process_time() - cpu  # one thread: the wall clock a quiet machine gives
    s_ours = scores(yte, est.predict_proba(Xte), est.classes_)
    # GPyTorch from our k-means++ inducing inputs (the draw our fit starts from: the first
    # use of its RandomState(random_state)), their choice not timed
    Z0 = initial_inducing_points(Xtr, args.m, np.random.RandomState(0))
    cpu = time.process_time()
    g_seconds, g_scores = train_gpytorch(Xtr, ytr, Xte, yte, Z0, args.epochs, 1024, 0.01,
                                         length_scale=1.0, outputscale=1.0, **gp_kernel)
    cpu_gp = time.process_time() - cpu  # with its per-epoch test predictions
    t_gp, s_gp = float(np.sum(g_seconds)), g_scores[-1]
    kernel_name = "C(1.0) * RBF(ones(16))" if start is not None else "default (fixed)"
    C.print_table(
        f"defaults at scale: {n_train} training rows, {n_test} test rows, d = {d}, "
        f"m = {args.m}, kernel {kernel_name}",
        ["fit", "seconds", "accuracy", "log-loss", "ECE"],
        [score_row(f"ours, defaults (optimizer_={est.optimizer_!r}, "
                   f"{est.n_iter_} {'epochs' if est.optimizer_ == 'adam' else 'evaluations'})",
                   t_ours, s_ours),
         score_row(f"GPyTorch SVGP, {args.epochs} epochs", t_gp, s_gp)],
        notes=[f"time ratio ours / GPyTorch: {C.fmt_ratio(t_ours / t_gp)}; log-loss ratio: "
               f"{s_ours['log_loss'] / s_gp['log_loss']:.3f}; accuracy difference: "
               f"{s_ours['accuracy'] - s_gp['accuracy']:+.4f}",
               f"process CPU seconds (one thread): ours {C.fmt_seconds(cpu_ours)}, GPyTorch "
               f"{C.fmt_seconds(cpu_gp)} (with its test predictions after each epoch)",
               "ours includes k-means++ and the final bound on all rows; GPyTorch's "
               "inducing inputs are given"])
    ok_time = t_ours < 300
    ok_loss = s_ours["log_loss"] <= s_gp["log_loss"]
    return [f"defaults on {n_train} rows: fit {C.fmt_seconds(t_ours)} s, CPU "
            f"{C.fmt_seconds(cpu_ours)} s (target < 300 s): "
            f"{C.verdict(ok_time)}; log-loss {s_ours['log_loss']:.4f} vs GPyTorch's "
            f"{s_gp['log_loss']:.4f} after {args.epochs} epochs: {C.verdict(ok_loss)}"]


# ---------------------------------------------------------------- part: draws


def part_draws(args, memo):
    n_query = 10_000 if args.quick else 100_000
    Xtr, _, ytr, _ = synthetic(20_000)
    est = ours(kernel=kernel(20), n_inducing=args.m, optimizer="adam", max_iter=2,
               random_state=0).fit(Xtr, ytr)
    Xq = np.random.default_rng(1).standard_normal((n_query, 20))
    amplitude = float(est.kernel_.k1.constant_value)
    length_scale = np.full(20, float(est.kernel_.k2.length_scale))
    model = B.botorch_variational_gp(Xtr, est.inducing_points_, est.q_mu_[:, 0],
                                     est.q_sqrt_[0], amplitude, length_scale, DEVICE)

    def run_ours():
        return est.sample_functions(64, random_state=0)(Xq)

    def run_botorch():
        return B.botorch_draws(model, Xq, 64, 1024, 0, DEVICE)[1]

    t_us = C.best_seconds(run_ours, args.repeats)
    t_bo = C.best_seconds(run_botorch, args.repeats)
    C.print_table(f"64 latent draws at {n_query} points, m = {args.m}, F = 1024 (best of "
                  f"{args.repeats})", ["draws", "seconds"],
                  [["ours sample_functions", C.fmt_seconds(t_us)],
                   ["BoTorch draw_matheron_paths", C.fmt_seconds(t_bo)]])
    return [f"draws: ours {C.fmt_seconds(t_us)} s vs BoTorch {C.fmt_seconds(t_bo)} s "
            f"({C.fmt_ratio(t_bo / t_us)}): {C.verdict(t_bo / t_us >= 3)}"]


# ---------------------------------------------------------------- main


def main():
    if C.run_child_cell(scale_setup, scale_run, warmup=False):
        return
    global DEVICE
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default=",".join(PARTS))
    parser.add_argument("--quick", action="store_true", help="small sizes (smoke run)")
    parser.add_argument("--m", type=int, default=256, help="inducing points (256)")
    parser.add_argument("--digits-m", type=int, default=128,
                        help="inducing points on digits' 1347 rows (128)")
    parser.add_argument("--epochs", type=int, default=3, help="GPyTorch comparison epochs (3)")
    parser.add_argument("--repeats", type=int, default=3, help="timed draw repeats (3)")
    parser.add_argument("--cutoff", type=float, default=900.0,
                        help="seconds before the scale cell is killed (900)")
    parser.add_argument("--scale-kernel", choices=("default", "ard"), default="default",
                        help="default-scale's kernel: scikit-learn's default or "
                             "C(1.0) * RBF(ones(16)) (default)")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    C.check_device(parser, args.device)
    DEVICE = args.device
    parts = C.parse_choices(parser, args.parts, PARTS, "parts")
    C.print_header(__doc__.splitlines()[0], args, device=DEVICE)
    warnings.filterwarnings("ignore")
    lines, memo = [], {}
    for part in parts:
        peers = part in ("gpytorch", "default-scale", "draws")
        if peers and not C.available("gpytorch", "botorch"):
            lines.append(f"{part}: skipped (pip install -e '.[bench]' for GPyTorch, BoTorch)")
            continue
        lines += globals()[f"part_{part.replace('-', '_')}"](args, memo)
    C.finish("Targets", lines)


if __name__ == "__main__":
    main()
