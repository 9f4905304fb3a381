"""Robust and heteroscedastic regression: ``PathwiseGPSampler(likelihood=...)`` against
the Gaussian model and GPyTorch's Student-t SVGP.

One thread, float64.  Every model of ours is sparse (``n_inducing=m``, inducing inputs by the
estimator's k-means++ seeding, ``normalize_y=True``) with the signal kernel
``ConstantKernel() * RBF(ones(d))`` (ARD); the Gaussian model adds ``WhiteKernel(0.1)`` (its
noise), the Student-t and heteroscedastic ones do not (their noise is the likelihood's).
Statistics over seeds are paired: seed ``s`` draws one data set on which every model is fitted
(the models in an order rotated by seed, so that load changes hit each alike), and a ratio or
difference is formed seed by seed before its mean and standard error (sd / sqrt(seeds)).

Parts (``--parts``, comma-separated; all by default):

* ``outliers``: ``make_friedman_outliers`` (make_friedman1, d = 10, n = 2 000, noise 1, 5 % of
  the targets shifted by +-30), 1 000 held-out rows, ``--seeds`` seeds, m = ``--m`` (64: on
  seeds 0 and 1 the Gaussian model's RMSE on clean data was 0.153 and 0.146 at m = 64, 0.151
  and 0.151 at 128, and learning the inducing inputs changed it by < 0.005).  Models: the
  Student-t model on the contaminated data; the Gaussian model (today's SGPR) on the clean data
  (``make_friedman1`` of the same seed) and on the contaminated data; GPyTorch's SVGP with
  ``StudentTLikelihood`` on the contaminated data (``ApproximateGP``, whitened
  ``VariationalStrategy`` learning its inducing inputs from a k-means++ start, Cholesky
  ``q(u)``, ``ConstantMean``, ``ScaleKernel(RBFKernel(ard_num_dims=10))``, standardised y,
  ``VariationalELBO``; full-batch Adam on everything, ``--gpytorch-steps`` steps (2 000) at
  lr 0.05, divided by 10 at 50 % and 75 % of the steps.  Chosen on seeds 0-2: at a constant
  lr of 0.01 its ELBO and RMSE still improved between 2 000 and 3 000 steps, at 0.05 the
  RMSE oscillated (0.21-0.33); with this schedule the ELBO per row moved by < 3e-4 over the
  last 500 steps of 2 000, while 1 000 steps stopped 0.01-0.015 per row short of it.  Its
  fit time covers the k-means++ start, the standardisation and the steps.  Reported: RMSE to
  the noise-free function on the held-out rows and fit seconds.  Targets:
  Student-t RMSE <= 1.2x the Gaussian model's on clean data and <= 0.5x its RMSE on the
  contaminated data; GPyTorch's RMSE no better than ours; our fit <= 0.5x GPyTorch's time.
* ``hetero``: ``make_heteroscedastic`` in 1 and 5 dimensions (noise std from 0.05 to 0.5,
  log-linear in the first feature), n = 2 000 training and 2 000 held-out rows, m =
  ``--hetero-m`` (512: in 5-D, ``f``'s approximation error at smaller m is taken for noise
  where the noise is small, and the quietest decile is over-covered, 94.9 % at m = 256 and
  92.0 % at 512 over 10 seeds; in 1-D m = 64 does), ``--seeds`` seeds:
  ``likelihood="heteroscedastic"`` (noise kernel
  ``ConstantKernel() * RBF(ones(d))``) against the Gaussian model.  Coverage of the central
  90 % predictive interval of the held-out y, per decile of the true noise std (deciles and
  coverage pooled over seeds: about 2 000 points per decile, s.e. 0.7 %), for both models:
  ``mean +- 1.645 std`` for the Gaussian model; for the heteroscedastic model, whose
  predictive is a scale mixture of Gaussians over the noise GP ``q(g)``, the 5 % and 95 %
  quantiles of 1 000 ``sample_y`` draws.  Held-out NLPD per seed,
  ``-mean log p(y | x)``, exact for both: the heteroscedastic model's by its likelihood's
  ``log_predictive_density`` (adaptive Gauss-Hermite over ``q(g)``).  Targets: the
  heteroscedastic model's
  NLPD lower by more than 2 paired s.e., coverage 90 +- 3 % in every decile.
* ``scale``: 1 000 000 rows of ``make_friedman_outliers`` (d = 10), m = 256, Student-t,
  ``optimizer="adam"`` with ``minibatch_size=1024``, at most ``--scale-epochs`` (12) epochs, in
  a fresh child process: fit seconds, peak RSS, RMSE to the noise-free function on 20 000
  further rows, the bound's relative rise over the last epoch.  At a million rows the
  plateau rule (``tol=1e-4`` per epoch) has not fired after 12 epochs (the bound still rises
  by about 1e-3 per epoch while the RMSE is already below the converged 100 000-row fit's),
  hence the cap.  Targets: < 600 s, < 2 GB.  ``--device cuda`` gives the GPU row.

A model that cannot be built or fitted (an skgpx without ``likelihood=``, or a failure)
shows its error in its row and its verdicts say "no result"; nothing is filled in.

Usage::

    .venv/bin/python benchmarks/pathwise/robust.py                         # everything
    .venv/bin/python benchmarks/pathwise/robust.py --parts outliers --seeds 10
    .venv/bin/python benchmarks/pathwise/robust.py --quick                 # smoke run
    .venv/bin/python benchmarks/pathwise/robust.py --device cuda --parts scale
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
import torch

SCRIPT = os.path.abspath(__file__)
PARTS = ("outliers", "hetero", "scale")
DEVICE = "cpu"
Z90 = 1.6448536269514722  # the 95 % quantile of N(0, 1): a central 90 % interval


# ---------------------------------------------------------------- kernels, models, fits


def signal_kernel(d):
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel

    return ConstantKernel() * RBF(np.ones(d))


def gaussian_model(d, m, seed):
    from sklearn.gaussian_process.kernels import WhiteKernel

    from skgpx import PathwiseGPSampler

    return PathwiseGPSampler(signal_kernel(d) + WhiteKernel(0.1), n_inducing=m,
                             normalize_y=True, random_state=seed, device=DEVICE)


def student_t_model(d, m, seed, **extra):
    from skgpx import PathwiseGPSampler

    return PathwiseGPSampler(signal_kernel(d), likelihood="student_t", n_inducing=m,
                             normalize_y=True, random_state=seed, device=DEVICE, **extra)


def heteroscedastic_model(d, m, seed):
    from skgpx import PathwiseGPSampler

    return PathwiseGPSampler(signal_kernel(d), likelihood="heteroscedastic",
                             noise_kernel=signal_kernel(d), n_inducing=m, normalize_y=True,
                             random_state=seed, device=DEVICE)


def explain(error):
    """The error of a failed row, with a hint when it is the missing ``likelihood=`` option."""
    if "unexpected keyword argument 'likelihood'" in error:
        return "not available: PathwiseGPSampler has no likelihood= option in this skgpx"
    return error


def then(rec, fn):
    """Run ``fn(rec)`` (scoring a fitted model) if ``rec`` has no error, recording a failure as
    its error without losing the warnings of the fit."""
    if rec["error"]:
        return rec
    sub = {"error": None}
    with C.recorded(sub):
        fn(rec)
    rec["error"] = sub["error"]
    rec["warnings"] += sub["warnings"]
    return rec


def fit_ours(build, X, y):
    """Build (``build()``) and fit one model of ours: a record with ``est`` and ``seconds``,
    or with ``error`` (see ``C.recorded``); never raises."""
    rec = {"error": None}
    with C.recorded(rec):
        est = build()
        C.sync(DEVICE)
        start = time.perf_counter()
        est.fit(X, y)
        C.sync(DEVICE)
        rec["seconds"] = time.perf_counter() - start
        rec["est"] = est
    if rec["error"]:
        rec["error"] = explain(rec["error"])
    return rec


# ---------------------------------------------------------------- GPyTorch's Student-t SVGP


def gpytorch_student_t(Xtr, ytr, Xte, m, steps, lr, seed):
    """Fit GPyTorch's SVGP with ``StudentTLikelihood`` (see the module docstring) and return
    ``(seconds, predictive mean of f at Xte in y units, fitted degrees of freedom)``."""
    import gpytorch
    from _baselines import gpytorch_svgp
    from sklearn.cluster import kmeans_plusplus

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)  # GPyTorch's module constructors use the global generator
        C.sync(DEVICE)
        start = time.perf_counter()
        Z = kmeans_plusplus(Xtr, m, random_state=seed)[0]
        mu, sd = float(np.mean(ytr)), float(np.std(ytr))
        X = torch.as_tensor(Xtr, device=DEVICE)
        y = torch.as_tensor((ytr - mu) / sd, device=DEVICE)
        model = gpytorch_svgp(torch.as_tensor(Z), ard_dims=Z.shape[1], mean="constant")
        model = model.to(DEVICE)
        likelihood = gpytorch.likelihoods.StudentTLikelihood().to(DEVICE)
        elbo = gpytorch.mlls.VariationalELBO(likelihood, model, num_data=len(Xtr))
        optimizer = torch.optim.Adam(list(model.parameters()) + list(likelihood.parameters()),
                                     lr=lr)
        schedule = torch.optim.lr_scheduler.MultiStepLR(optimizer, [steps // 2, 3 * steps // 4],
                                                        0.1)
        for _ in range(steps):
            optimizer.zero_grad()
            loss = -elbo(model(X), y)
            loss.backward()
            optimizer.step()
            schedule.step()
        C.sync(DEVICE)
        seconds = time.perf_counter() - start
    model.eval()
    with torch.no_grad():
        mean = model(torch.as_tensor(Xte, device=DEVICE)).mean.cpu().numpy() * sd + mu
    return seconds, mean, float(likelihood.deg_free.item())


# ---------------------------------------------------------------- part: outliers


OUTLIER_MODELS = ("student_t", "gauss_clean", "gauss_contam", "gpytorch_t")
OUTLIER_LABELS = {"student_t": "ours Student-t, contaminated",
                  "gauss_clean": "ours Gaussian, clean",
                  "gauss_contam": "ours Gaussian, contaminated",
                  "gpytorch_t": "GPyTorch SVGP Student-t, contaminated"}


def outlier_fit(name, data, args, seed):
    Xtr, ytr, yclean, Xte, fte = data
    d = Xtr.shape[1]
    if name == "gpytorch_t":
        rec = {"error": None}
        with C.recorded(rec):
            rec["seconds"], mean, rec["nu"] = gpytorch_student_t(
                Xtr, ytr, Xte, args.m, args.gpytorch_steps, 0.05, seed)
            rec["rmse"] = F.rmse(fte, mean)
        return rec
    build = {"student_t": lambda: student_t_model(d, args.m, seed),
             "gauss_clean": lambda: gaussian_model(d, args.m, seed),
             "gauss_contam": lambda: gaussian_model(d, args.m, seed)}[name]
    rec = fit_ours(build, Xtr, yclean if name == "gauss_clean" else ytr)
    then(rec, lambda r: r.update(rmse=F.rmse(fte, r["est"].predict(Xte))))
    rec.pop("est", None)
    return rec


def paired_ratio(num, den):
    """Mean and s.e. over seeds of the seed-by-seed ratio ``num / den`` (pairs where both are
    finite), and the two as text."""
    ratio = np.asarray(num, dtype=float) / np.asarray(den, dtype=float)
    mean, se = F.mean_se(ratio)
    return mean, se, F.pm(mean, se, ".3f")


def part_outliers(args, memo):
    from sklearn.datasets import make_friedman1

    from skgpx.datasets import make_friedman_outliers

    n, n_test = args.n, 1000
    models = [m for m in OUTLIER_MODELS if m != "gpytorch_t" or C.available("gpytorch")]
    recs = {name: [] for name in OUTLIER_MODELS}
    # untimed warm-up of every model on 200 rows: one-time costs (imports, first torch calls)
    # are not a fit's
    X, y, f, _ = make_friedman_outliers(400, random_state=99)
    warm = argparse.Namespace(**{**vars(args), "gpytorch_steps": 5})
    for name in models:
        outlier_fit(name, (X[:200], y[:200], y[:200], X[200:], f[200:]), warm, 99)
    for seed in range(args.seeds):
        X, y, f, _ = make_friedman_outliers(n + n_test, random_state=seed)
        yclean = make_friedman1(n + n_test, noise=1.0, random_state=seed)[1]
        data = (X[:n], y[:n], yclean[:n], X[n:], f[n:])
        for name in C.rotated(models, seed):
            rec = outlier_fit(name, data, args, seed)
            recs[name].append(rec)
            print(f"    seed {seed} {name}: " + (rec["error"][:100] if rec["error"] else
                  f"RMSE {rec['rmse']:.3f}, {C.fmt_seconds(rec['seconds'])} s"), flush=True)
    if "gpytorch_t" not in models:
        recs["gpytorch_t"] = [{"error": "GPyTorch not installed (pip install -e '.[bench]')",
                               "warnings": []}] * args.seeds
    rmse = {k: F.column(v, "rmse") for k, v in recs.items()}
    secs = {k: F.column(v, "seconds") for k, v in recs.items()}
    rows = []
    for name in OUTLIER_MODELS:
        errors = [r["error"] for r in recs[name] if r["error"]]
        if len(errors) == len(recs[name]):
            rows.append([OUTLIER_LABELS[name], "-", "-", "-", errors[0][:90]])
            continue
        r_t = paired_ratio(rmse["student_t"], rmse[name])[2] if name != "student_t" else ""
        rows.append([OUTLIER_LABELS[name], F.fmt_pm(rmse[name]), C.fmt_seconds(C.median(
            list(F.values(recs[name], "seconds")))), r_t,
            f"{len(errors)} failed: {errors[0][:60]}" if errors else ""])
    nu = F.values(recs["gpytorch_t"], "nu")
    C.print_table(
        f"outliers: make_friedman1 n = {n}, d = 10, noise 1, 5 % of targets +-30; m = {args.m};"
        f" {args.seeds} seeds; RMSE to the noise-free f on {n_test} held-out rows",
        ["model", "RMSE (mean ± s.e.)", "fit s (median)", "Student-t RMSE / this",
         "note"], rows, align="lrrrl",
        notes=[f"GPyTorch: full-batch Adam, {args.gpytorch_steps} steps, lr 0.05 (x0.1 at 50 %"
               f" and 75 %); fitted degrees of freedom {F.fmt_pm(nu, 2)}",
               "ratios are paired: formed seed by seed, then mean ± s.e. over seeds"]
        + C.failure_notes({k: [r for r in v if not r["error"]] for k, v in recs.items()}))
    lines = [f"outliers anchors: Gaussian clean RMSE {F.fmt_pm(rmse['gauss_clean'])}, "
             f"Gaussian contaminated {F.fmt_pm(rmse['gauss_contam'])}, GPyTorch Student-t "
             f"{F.fmt_pm(rmse['gpytorch_t'])} in {F.fmt_pm(secs['gpytorch_t'], 2)} s per fit "
             f"(ours Gaussian {F.fmt_pm(secs['gauss_contam'], 2)} s); GPyTorch / Gaussian clean"
             f" RMSE {paired_ratio(rmse['gpytorch_t'], rmse['gauss_clean'])[2]}"]
    if not np.isfinite(rmse["student_t"]).any():
        err = next(r["error"] for r in recs["student_t"] if r["error"])
        return lines + [f"outliers: Student-t model: no result ({err[:120]})"]
    for other, bound, what in (("gauss_clean", 1.2, "Gaussian on clean data"),
                               ("gauss_contam", 0.5, "Gaussian on contaminated data"),
                               ("gpytorch_t", 1.0, "GPyTorch Student-t SVGP")):
        mean, se, text = paired_ratio(rmse["student_t"], rmse[other])
        ok = math.isfinite(mean) and mean <= bound
        lines.append(f"outliers: Student-t RMSE / {what} = {text} (target <= {bound}): "
                     + (C.verdict(ok) if math.isfinite(mean) else "no result"))
    mean, se, text = paired_ratio(secs["student_t"], secs["gpytorch_t"])
    lines.append(f"outliers: Student-t fit time / GPyTorch's = {text} (target <= 0.5): "
                 + (C.verdict(mean <= 0.5) if math.isfinite(mean) else "no result"))
    return lines


# ---------------------------------------------------------------- part: hetero


def log_density(est, X, y):
    """Per-row log predictive density of ``y``: for the heteroscedastic model its
    likelihood's ``log_predictive_density`` (``N(y; mu_f, v_f + exp(c + g))`` integrated
    over ``q(g)`` by adaptive Gauss-Hermite, in the fitted units, less ``log y_scale_``: the
    estimator's private mode object, as a benchmark may), for the Gaussian model the
    Gaussian with its predictive mean and std (exact)."""
    mean, std = est.predict(X, return_std=True)
    if est.likelihood == "heteroscedastic":
        engine = est._mode
        like = dict(dtype=engine.theta.dtype, device=engine.theta.device)
        mu, var = engine.latent(torch.as_tensor(X, **like))
        Y = torch.as_tensor(((y - est.y_mean_[0]) / est.y_scale_[0])[:, None], **like)
        with torch.no_grad():
            lpd = engine.likelihood.log_predictive_density(Y, mu, var).cpu().numpy()
        return lpd - np.log(est.y_scale_[0]), mean, std, "exact"
    lpd = -0.5 * np.log(2 * np.pi * std**2) - 0.5 * ((y - mean) / std) ** 2
    return lpd, mean, std, "gaussian"


def central_interval(est, X, mean, std, draws=1000):
    """The central 90 % interval of the predictive distribution of y: ``mean +- 1.645 std``
    for the Gaussian model; for the heteroscedastic model, whose predictive is a scale
    mixture of Gaussians over ``q(g)``, not a Gaussian, the 5 % and 95 % quantiles of ``draws``
    ``sample_y`` draws."""
    if est.likelihood != "heteroscedastic":
        return mean - Z90 * std, mean + Z90 * std
    samples = est.sample_y(X, draws, random_state=1)
    return np.quantile(samples, 0.05, axis=1), np.quantile(samples, 0.95, axis=1)


def hetero_fit(name, data, args, seed):
    Xtr, ytr, Xte, yte = data
    d = Xtr.shape[1]
    build = {"hetero": lambda: heteroscedastic_model(d, args.hetero_m, seed),
             "gauss": lambda: gaussian_model(d, args.hetero_m, seed)}[name]

    def score(r):
        lpd, mean, std, r["density"] = log_density(r["est"], Xte, yte)
        r["nlpd"] = float(-np.mean(lpd))
        low, high = central_interval(r["est"], Xte, mean, std)
        r["covered"] = (yte >= low) & (yte <= high)

    rec = then(fit_ours(build, Xtr, ytr), score)
    rec.pop("est", None)
    return rec


def part_hetero(args, memo):
    from skgpx.datasets import make_heteroscedastic

    n, n_test = args.hetero_n, args.hetero_n
    lines = []
    for d in (1, 5):
        recs, noise, oracle = {"hetero": [], "gauss": []}, [], []
        for seed in range(args.seeds):
            X, y, s, f = make_heteroscedastic(n + n_test, n_features=d, random_state=seed,
                                              return_noise=True)
            noise.append(s[n:])
            # the oracle (true mean and noise std): the floor of the NLPD, and a check of the
            # coverage machinery (90 % in every decile up to Monte Carlo error)
            z = (y[n:] - f[n:]) / s[n:]
            oracle.append({"error": None, "warnings": [], "density": "exact",
                           "nlpd": float(np.mean(0.5 * np.log(2 * np.pi * s[n:] ** 2)
                                                 + 0.5 * z**2)),
                           "covered": np.abs(z) <= Z90})
            for name in C.rotated(list(recs), seed):
                rec = hetero_fit(name, (X[:n], y[:n], X[n:], y[n:]), args, seed)
                recs[name].append(rec)
                print(f"    d={d} seed {seed} {name}: " + (rec["error"][:100] if rec["error"]
                      else f"NLPD {rec['nlpd']:.3f}, {C.fmt_seconds(rec['seconds'])} s"),
                      flush=True)
        # deciles of the true noise std, pooled over seeds (the same law for every seed)
        s_all = np.concatenate(noise)
        edges = np.quantile(s_all, np.linspace(0, 1, 11))
        decile = np.clip(np.searchsorted(edges, s_all, side="right") - 1, 0, 9)
        rows, cover, failed = [], {}, []
        for name, label in (("hetero", "heteroscedastic"), ("gauss", "Gaussian"),
                            ("oracle", "oracle (true mean, noise std)")):
            ok = oracle if name == "oracle" else [r for r in recs[name] if not r["error"]]
            if name != "oracle" and len(ok) < len(recs[name]):
                err = next(r["error"] for r in recs[name] if r["error"])
                rows.append([label, "-"] + ["-"] * 10)
                failed.append(f"{label}: {len(recs[name]) - len(ok)} failed fit(s): "
                              f"{err[:120]}")
                continue
            hit = np.concatenate([r["covered"] for r in ok])
            cover[name] = np.array([100 * np.mean(hit[decile == k]) for k in range(10)])
            rows.append([label, F.fmt_pm(F.column(ok, "nlpd"))]
                        + [f"{c:.1f}" for c in cover[name]])
        C.print_table(
            f"hetero d = {d}: make_heteroscedastic (noise std 0.05..0.5), n = {n}, "
            f"{n_test} held-out rows, m = {args.hetero_m}, {args.seeds} seeds: NLPD and "
            f"coverage (%) of the 90 % interval per decile of the true noise std",
            ["model", "NLPD (mean ± s.e.)"] + [f"D{k + 1}" for k in range(10)], rows,
            notes=[f"decile edges of the noise std: "
                   f"{', '.join(f'{e:.3f}' for e in edges)}",
                   "NLPD density: " + ", ".join(
                       f"{k}={sorted({r.get('density', '-') for r in v})}"
                       for k, v in recs.items())] + failed
            + C.failure_notes({k: [r for r in v if not r["error"]] for k, v in recs.items()}))
        if "gauss" in cover:
            worst = max(abs(cover["gauss"] - 90))
            lines.append(f"hetero d={d}: Gaussian model's coverage {cover['gauss'][0]:.1f} % in"
                         f" the quietest decile, {cover['gauss'][-1]:.1f} % in the loudest "
                         f"(worst |cov - 90| {worst:.1f} points); NLPD "
                         f"{F.fmt_pm(F.column(recs['gauss'], 'nlpd'))}")
        if "hetero" not in cover:
            err = next(r["error"] for r in recs["hetero"] if r["error"])
            lines.append(f"hetero d={d}: heteroscedastic model: no result ({err[:120]})")
            continue
        _, mean, se = F.paired(F.column(recs["gauss"], "nlpd"),
                               F.column(recs["hetero"], "nlpd"))
        ok = math.isfinite(se) and mean > 2 * se
        lines.append(f"hetero d={d}: NLPD Gaussian - heteroscedastic = {F.pm(mean, se)} "
                     f"(target > 2 s.e.): {C.verdict(ok)}")
        worst = float(np.max(np.abs(cover["hetero"] - 90)))
        lines.append(f"hetero d={d}: heteroscedastic coverage per decile "
                     f"{cover['hetero'].min():.1f}..{cover['hetero'].max():.1f} % (target "
                     f"90 +- 3 in every decile): {C.verdict(worst <= 3)}")
    return lines


# ---------------------------------------------------------------- part: scale (child cell)


def scale_setup(cfg):
    global DEVICE
    warnings.filterwarnings("ignore")
    DEVICE = cfg.get("device", "cpu")
    from skgpx.datasets import make_friedman_outliers

    X, y, f, _ = make_friedman_outliers(cfg["n"] + 20_000, random_state=0)
    n = cfg["n"]
    return {"X": X[:n], "y": y[:n], "Xte": X[n:], "fte": f[n:], "cfg": cfg}


def scale_run(state):
    cfg = state["cfg"]
    d = state["X"].shape[1]
    extra = dict(optimizer="adam", minibatch_size=1024, max_iter=cfg["epochs"])
    if cfg["likelihood"] == "student_t":
        est = student_t_model(d, cfg["m"], 0, **extra)
    else:  # the Gaussian reference: today's SGPR on the mini-batch route
        est = gaussian_model(d, cfg["m"], 0).set_params(**extra)
    C.sync(DEVICE)
    start = time.perf_counter()
    try:
        est.fit(state["X"], state["y"])
    except TypeError as exc:
        raise TypeError(explain(str(exc))) from exc
    C.sync(DEVICE)
    seconds = time.perf_counter() - start
    history = est.objective_history_  # negative bounds, one per epoch
    rise = (history[-2] - history[-1]) / abs(history[-1]) if len(history) > 1 else math.nan
    return {"total": seconds, "info": {
        "epochs": int(est.n_iter_),
        "rmse": round(F.rmse(state["fte"], est.predict(state["Xte"])), 4),
        # the bound's rise over the last epoch, relative (the plateau rule: <= tol = 1e-4)
        "last_rise": float(f"{rise:.2g}")}}


def part_scale(args, memo):
    n = 100_000 if args.quick else 1_000_000
    res = C.run_cell(SCRIPT, {"n": n, "m": args.scale_m, "likelihood": args.scale_likelihood,
                              "epochs": args.scale_epochs,
                              "device": DEVICE, "repeats": 1, "budget": 0},
                     cutoff=args.cutoff, label=f"scale {args.scale_likelihood}")
    what = (f"scale n = {n}, d = 10, m = {args.scale_m}, {args.scale_likelihood}, adam "
            f"(mini-batches of 1024), {DEVICE}")
    if res["status"] != "ok":
        return [f"{what}: {res['status']} ({explain(str(res.get('note')))}): no result"]
    seconds, rss = res["times"]["total"][0], res["peak_rss"]
    gpu = res["info"].pop("cuda_max_memory_allocated", None)
    C.print_table("scale (fresh child process)", ["fit", "seconds", "peak RSS", "GPU memory",
                                                  "info"],
                  [[what, C.fmt_seconds(seconds), C.fmt_bytes(rss), C.fmt_bytes(gpu),
                    str(res["info"])]])
    verdict = (C.verdict(seconds < 600 and rss < 2e9) if args.scale_likelihood == "student_t"
               else "reference, no target")
    return [f"{what}: fit {C.fmt_seconds(seconds)} s, peak RSS {C.fmt_bytes(rss)} (targets "
            f"< 600 s, < 2 GB): {verdict}"]


# ---------------------------------------------------------------- main


def main():
    if C.run_child_cell(scale_setup, scale_run, warmup=False):
        return
    global DEVICE
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default=",".join(PARTS))
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: 3 seeds, 1 000 rows in hetero, 100 000 in scale")
    parser.add_argument("--seeds", type=int, default=None, help="seeds (10; --quick: 3)")
    parser.add_argument("--n", type=int, default=2000, help="outliers: training rows (2000)")
    parser.add_argument("--m", type=int, default=64, help="outliers: inducing points (64)")
    parser.add_argument("--gpytorch-steps", type=int, default=2000,
                        help="outliers: GPyTorch's full-batch Adam steps (2000)")
    parser.add_argument("--hetero-n", type=int, default=None,
                        help="hetero: training (and held-out) rows (2000; --quick: 1000)")
    parser.add_argument("--hetero-m", type=int, default=512,
                        help="hetero: inducing points (512)")
    parser.add_argument("--scale-m", type=int, default=256, help="scale: inducing points (256)")
    parser.add_argument("--scale-epochs", type=int, default=12,
                        help="scale: epochs at most (12; the plateau rule may stop sooner)")
    parser.add_argument("--scale-likelihood", default="student_t",
                        choices=("student_t", "gaussian"),
                        help="scale: the model (student_t; gaussian is today's SGPR, a "
                             "reference)")
    parser.add_argument("--cutoff", type=float, default=900.0,
                        help="seconds before the scale cell is killed (900)")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    C.check_device(parser, args.device)
    DEVICE = args.device
    args.seeds = args.seeds or (3 if args.quick else 10)
    args.hetero_n = args.hetero_n or (1000 if args.quick else 2000)
    parts = C.parse_choices(parser, args.parts, PARTS, "parts")
    C.print_header(__doc__.splitlines()[0], args, extra=("gpytorch",), device=DEVICE)
    print(f"load average at start: {C.load_average()}", flush=True)
    warnings.filterwarnings("ignore")
    lines, memo = [], {}
    for part in parts:
        lines += globals()[f"part_{part}"](args, memo)
    C.finish("Targets", lines)


if __name__ == "__main__":
    main()
