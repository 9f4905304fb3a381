"""Table B.1 analogue for ``DeepQEPRegressor`` (Chang et al., AABI 2025): the
two-output step/turn time series, against the paper's figures and GPyTorch's deep GP.

Data
----
``X, y, _ = skgpx.datasets.make_step_turn_series(n_samples=100, noise_std=0.1,
random_state=seed)`` (x on [0, 1], t = 2x; outputs [u_J(t), u_T(t)] + N(0, 0.1^2) noise), one
noise draw per seed.  Test: the 50 points ``x = linspace(0, 1, 50)`` against the noise-free
truth ``make_step_turn_series(n_samples=50, noise_std=0.0)[2]`` (same formula).  Seeds are
2024, 2034, 2044, ... (the authors' sequence); each seed sets the noise and every model's
initialisation and training noise.

Models (the authors' recipe: hidden width 3, M = 64 inducing points per unit,
Matérn-1.5 ARD kernel times an output scale per unit, linear mean in the hidden layer and
constant mean in the last, S = 10 Monte-Carlo paths in training, Adam lr 0.05, full batch,
``--epochs`` (1000) epochs, the final state kept, no target standardisation)
-------------------------------------------------------------------------------------------
* ``QEP q=1``: ``DeepQEPRegressor(q=1, bound="authors", normalize_y=False, tol=None)``
  (the paper's deep Q-EP);
* ``QEP q=1 scaled``: the same with ``bound="scaled"`` (the self-consistent bound,
  ``doc/design_notes.rst``; leave it out with ``--models``);
* ``QEP q=2``: the same estimator at ``q = 2``, i.e. our deep GP;
* ``GPyTorch DGP``: a ``gpytorch.models.deep_gps.DeepGP`` written here (class ``GPyTorchDeepGP``)
  with two ``DeepGPLayer`` s (``VariationalStrategy`` whitened, ``CholeskyVariationalDistribution``,
  learned inducing inputs), ``ScaleKernel(MaternKernel(nu=1.5, ard_num_dims=d))`` per unit
  (batched), ``LinearMean`` (hidden) / ``ConstantMean`` (last) per unit,
  ``MultitaskGaussianLikelihood(num_tasks=2, has_global_noise=False)`` (per-output noise, as
  ours), loss ``-DeepApproximateMLL(VariationalELBO(..., num_data=100))`` under
  ``gpytorch.settings.num_likelihood_samples(10)``, Adam lr 0.05, ``torch.manual_seed(seed)``.
  It is given our initialisation: inputs standardised with the training mean/std, first-layer
  inducing inputs on a random subset of them, last-layer ones N(0, 1), length and output scales
  1, noise 0.1 per output (GPyTorch's own defaults would be 0.69).

Structure of the two implementations (relevant to the timing comparison): both evaluate the
first layer ONCE (its input is the same for every path; GPyTorch's ``DeepGPLayer.__call__``
expands the deterministic-input output to S samples, ours ``DeepQEPModule.propagate`` the
same) and the last layer S = 10 times; both compute only marginal variances for the hidden
draws and the expected log-likelihood.  GPyTorch goes through ``linear_operator`` lazy tensors
(a ``BlockDiagLinearOperator`` / ``MultitaskMultivariateNormal`` per layer, Cholesky of K_ZZ via
``psd_safe_cholesky``, triangular solves); ours uses one batched product per layer with an
explicit triangular inverse.  GPyTorch's loop is a plain torch loop here; ours runs through
skorch (its per-epoch overhead is inside our timings).  So the comparison is like for like
in the model and the arithmetic that matters; the difference is implementation overhead.

Metrics (test points, original units; both outputs pooled)
----------------------------------------------------------
With, per path s = 1..S_pred (S_pred = 32 for every model: ``n_mc_samples_predict=32`` for ours,
``num_likelihood_samples(32)`` at prediction for GPyTorch), the last layer's location mu_s and
scale v_s (ours: ``model._latent(X)``, v WITHOUT the c_q factor; GPyTorch: the per-sample
predictive mean and latent variance), and the noise scale sigma^2 (ours:
``likelihood_.noise``; GPyTorch: the task noises):

* MAE: mean |y_hat - y_true| over points and outputs, y_hat = mean_s mu_s (``predict``);
* R2: ``sklearn.metrics.r2_score(y_true, y_hat)`` (uniform average over the 2 outputs);
* PSD (authors'): mean over points and outputs of sqrt(mean_s(v_s + sigma^2)) - the paper's
  "PSD": a scale, no c_q, no between-path spread;
* std (total): mean over points and outputs of the total-variance predictive std
  (ours: ``predict(return_std=True)``, i.e. sqrt(mean_s(c v_s + c_q sigma^2) + var_s(mu_s)) with
  c = c_q for ``bound="authors"`` and 1 for ``"scaled"``; GPyTorch: sqrt(mean_s(v_s + sigma^2) +
  var_s(mu_s)) from its samples);
* NLL (authors'): minus the path-average of per-point log densities,
  ``-mean_i mean_s sum_d log p(y_true[i, d] | mu_s[i, d], v_s[i, d] + sigma_d^2)`` with p the
  univariate q-ED density (N = 1, scale C = v + sigma^2; Gaussian at q = 2, so
  GPyTorch's is the Gaussian one); "per point" = both outputs of a test point (summed over d),
  averaged over the 50 points;
* NLL (mixture): the same densities combined as a mixture over paths,
  ``-mean_i log mean_s prod_d p(...)`` (a Gaussian mixture for q = 2 and GPyTorch);
* fit s, s/epoch: wall clock of ``fit`` (ours) or of model construction + training loop
  (GPyTorch), divided by the epochs run.

NLL values of q = 1 and q = 2 models are not comparable with each other (different densities;
the q = 1 density is infinite at its mode), as the paper itself notes.

Timing target: fit time per epoch ours / GPyTorch <= 1.0 at equal dtype, same thread
count (one), measured in this run.  float32: from the accuracy runs above (the authors'
dtype).  float64: ``--timing-seeds`` (3) extra fits of ``--timing-epochs`` (200)
epochs each for q = 1, q = 2 and GPyTorch.  Models are interleaved per seed, in an order
rotated from seed to seed, so that load changes on a shared machine hit every model alike;
each model gets one untimed 5-epoch warm-up fit per dtype before the timed fits.

Usage::

    .venv/bin/python benchmarks/qep/timeseries.py --quick          # 2 seeds, 50 epochs
    .venv/bin/python benchmarks/qep/timeseries.py                  # 10 seeds, 1000 epochs

Results (all per-fit records and the summaries) go to ``--json`` and ``--csv`` (default
``benchmarks/results/qep_timeseries.{json,csv}``, git-ignored).
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
import torch

SEED0, SEED_STEP = 2024, 10
N_TRAIN, N_TEST, NOISE_STD = 100, 50, 0.1
HIDDEN, N_INDUCING, LR, S_TRAIN, S_PRED = 3, 64, 0.05, 10, 32

# model key -> (label, q, bound) ; q None = GPyTorch
MODELS = {
    "q1": ("QEP q=1", 1.0, "authors"),
    "q1-scaled": ("QEP q=1 scaled", 1.0, "scaled"),
    "q2": ("QEP q=2", 2.0, "authors"),
    "gpytorch": ("GPyTorch DGP", None, None),
}
TIMING_MODELS = ("q1", "q2", "gpytorch")

# the paper's Table B.1: mean, s.e.
PAPER = {
    "Deep GP": {"mae": (0.058, 0.040), "psd": (0.180, 0.051), "r2": (0.951, 0.061),
                "nll": (-1.432, 0.617), "fit_s": (48.409, 0.369)},
    "Deep QEP": {"mae": (0.049, 0.007), "psd": (0.087, 0.004), "r2": (0.977, 0.008),
                 "nll": (-2.265, 0.158), "fit_s": (49.332, 0.475)},
}
PAPER_ROW = {"q1": "Deep QEP", "q1-scaled": "Deep QEP", "q2": "Deep GP", "gpytorch": "Deep GP"}
OTHER_PAPER_ROWS = {  # printed for reference only
    "DKL-GP": "MAE 0.108 ± 0.135, PSD 0.163 ± 0.039, R2 0.830 ± 0.382, NLL 0.102 ± 5.055, "
              "10.0 s",
    "DSPP": "MAE 0.070 ± 0.047, PSD 0.249 ± 0.062, R2 0.929 ± 0.094, NLL -2.192 ± 0.684, "
            "36.5 s",
}


# ---------------------------------------------------------------- data


def seeds(n):
    return [SEED0 + SEED_STEP * k for k in range(n)]


def load_data(seed):
    from skgpx.datasets import make_step_turn_series

    X, y, _ = make_step_turn_series(n_samples=N_TRAIN, noise_std=NOISE_STD, random_state=seed)
    Xte, _, yte = make_step_turn_series(n_samples=N_TEST, noise_std=0.0)
    return X, y, Xte, yte


# ---------------------------------------------------------------- densities


def qed1_logpdf(y, mean, scale, q):
    """Univariate q-ED log density (Li, O'Connor and Lan, NeurIPS 2023; N = 1), scale
    ``C = scale``:
    ``log(q/2) - log(2 pi)/2 - log(C)/2 + (q/2 - 1)/2 log r - r^(q/2)/2``, r = (y-mu)^2/C."""
    r = (y - mean) ** 2 / scale
    if q == 2.0:
        return -0.5 * np.log(2.0 * np.pi * scale) - 0.5 * r
    with np.errstate(divide="ignore"):
        log_r = np.log(r)
    return (np.log(q / 2.0) - 0.5 * np.log(2.0 * np.pi * scale) + 0.5 * (q / 2.0 - 1.0) * log_r
            - 0.5 * np.exp(0.5 * q * log_r))


def path_metrics(y_true, mu, scale, q, y_hat, total_std):
    """The metrics of the docstring from per-path locations ``mu`` and scales
    ``scale = v + sigma^2`` of shape (S, n, D), the point prediction ``y_hat`` (n, D) and the
    total-variance std (n, D)."""
    from scipy.special import logsumexp
    from sklearn.metrics import r2_score

    logp = qed1_logpdf(y_true[None], mu, scale, q).sum(-1)  # (S, n): per path and point
    return {
        "mae": float(np.mean(np.abs(y_hat - y_true))),
        "r2": float(r2_score(y_true, y_hat)),
        "psd": float(np.mean(np.sqrt(scale.mean(0)))),
        "std_total": float(np.mean(total_std)),
        "nll": float(-np.mean(logp.mean(0))),
        "nll_mix": float(-np.mean(logsumexp(logp, axis=0) - np.log(logp.shape[0]))),
    }


# ---------------------------------------------------------------- ours


def fit_ours(key, X, y, epochs, dtype, seed):
    from skgpx.qep import DeepQEPRegressor

    _, q, bound = MODELS[key]
    model = DeepQEPRegressor(q=q, hidden_dims=(HIDDEN,), n_inducing=N_INDUCING,
                             kernel="matern32", ard=True, bound=bound, n_mc_samples=S_TRAIN,
                             n_mc_samples_predict=S_PRED, normalize_y=False, max_iter=epochs,
                             batch_size=None, lr=LR, optimizer="adam", tol=None,
                             device="cpu", dtype=dtype, random_state=seed)
    t0, c0 = time.perf_counter(), time.process_time()
    model.fit(X, y)
    return model, time.perf_counter() - t0, time.process_time() - c0, model.n_iter_


def evaluate_ours(model, Xte, yte):
    y_hat, std = model.predict(Xte, return_std=True)
    mean, var, _ = model._latent(Xte)  # standardised units, v without c_q
    scale_y = np.asarray(model.y_scale_, dtype=float)
    mu = mean.detach().cpu().double().numpy() * scale_y + model.y_mean_
    v = var.detach().cpu().double().numpy() * scale_y**2
    sigma2 = model.likelihood_.noise.detach().cpu().double().numpy() * scale_y**2
    out = path_metrics(yte, mu, v + sigma2, model.q, y_hat, std)
    out["noise_var"] = [float(s) for s in model.noise_variance_]  # c_q sigma^2
    # consistency: predict's mean is the path average of _latent's means
    out["check_mean"] = float(np.max(np.abs(mu.mean(0) - y_hat)))
    return out


# ---------------------------------------------------------------- GPyTorch


def build_gpytorch_model(Xt, n_tasks, dtype):
    """GPyTorch's deep GP (two ``DeepGPLayer`` s), initialised as ours (see the docstring)."""
    from _baselines import gpytorch_deep_gp

    return gpytorch_deep_gp(Xt, n_tasks, dtype, n_inducing=N_INDUCING, hidden=HIDDEN)


def fit_gpytorch(X, y, epochs, dtype, seed):
    import gpytorch

    tdtype = getattr(torch, dtype)
    t0, c0 = time.perf_counter(), time.process_time()
    torch.manual_seed(seed)
    mu, sd = X.mean(0), X.std(0)
    sd[sd == 0] = 1.0
    Xt = torch.tensor((X - mu) / sd, dtype=tdtype)
    yt = torch.tensor(y, dtype=tdtype)
    model = build_gpytorch_model(Xt, y.shape[1], tdtype)
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    mll = gpytorch.mlls.DeepApproximateMLL(
        gpytorch.mlls.VariationalELBO(model.likelihood, model, num_data=Xt.shape[0]))
    losses = []
    with gpytorch.settings.num_likelihood_samples(S_TRAIN):
        for _ in range(epochs):
            optimizer.zero_grad()
            loss = -mll(model(Xt), yt)
            loss.backward()
            optimizer.step()
            losses.append(float(loss))
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    model.eval()
    model.x_stats_ = (mu, sd)
    model.losses_ = losses
    return model, seconds, cpu, epochs


def evaluate_gpytorch(model, Xte, yte, seed):
    import gpytorch

    mu_x, sd_x = model.x_stats_
    dtype = next(model.parameters()).dtype
    Xt = torch.tensor((Xte - mu_x) / sd_x, dtype=dtype)
    torch.manual_seed(seed + 1)
    with torch.no_grad(), gpytorch.settings.num_likelihood_samples(S_PRED):
        latent = model(Xt)
        pred = model.likelihood(latent)
        mu = latent.mean.double().numpy()  # (S, n, D)
        scale = pred.variance.double().numpy()  # latent variance + task noise
        noise = model.likelihood.task_noises.double().numpy()
    y_hat = mu.mean(0)
    total_std = np.sqrt(scale.mean(0) + mu.var(0))
    out = path_metrics(yte, mu, scale, 2.0, y_hat, total_std)
    out["noise_var"] = [float(s) for s in noise]
    lat_var = latent.variance.double().numpy()
    out["check_mean"] = float(np.max(np.abs(scale - lat_var - noise)))  # noise added per task
    return out


# ---------------------------------------------------------------- one fit


def run_fit(key, seed, epochs, dtype, data, evaluate=True):
    """Fit (and evaluate) one model; never raises (errors become the record's ``error``)."""
    X, y, Xte, yte = data
    rec = {"model": key, "seed": seed, "dtype": dtype, "epochs": epochs, "error": None,
           "warnings": []}
    with C.recorded(rec):  # errors and warnings go into rec (reported in the tables)
        if key == "gpytorch":
            model, seconds, cpu, n_iter = fit_gpytorch(X, y, epochs, dtype, seed)
        else:
            model, seconds, cpu, n_iter = fit_ours(key, X, y, epochs, dtype, seed)
        rec.update(fit_s=seconds, fit_cpu_s=cpu, n_iter=n_iter,
                   s_per_epoch=seconds / n_iter, cpu_per_epoch=cpu / n_iter)
        if evaluate:
            rec.update(evaluate_gpytorch(model, Xte, yte, seed) if key == "gpytorch"
                       else evaluate_ours(model, Xte, yte))
    return rec


def warm_up(models, dtype, data):
    for key in models:
        run_fit(key, SEED0, 5, dtype, data, evaluate=True)


# ---------------------------------------------------------------- runs


def run_accuracy(args):
    records = {k: [] for k in args.models}
    print(f"Accuracy runs: {len(args.seed_list)} seed(s) x {len(args.models)} models, "
          f"{args.epochs} epochs, {args.dtype}", flush=True)
    warm_up(args.models, args.dtype, load_data(SEED0))
    for k, seed in enumerate(args.seed_list):
        data = load_data(seed)
        parts = []
        for key in C.rotated(args.models, k):
            rec = run_fit(key, seed, args.epochs, args.dtype, data)
            records[key].append(rec)
            if rec["error"]:
                parts.append(f"{key} ERROR")
            else:
                parts.append(f"{key} MAE {rec['mae']:.3f} R2 {rec['r2']:.3f} "
                             f"{rec['fit_s']:.1f}s" + (f" W{len(rec['warnings'])}"
                                                       if rec["warnings"] else ""))
        print(f"  seed {seed}: " + " | ".join(parts), flush=True)
    return records


def run_timing(args):
    records = {k: [] for k in TIMING_MODELS}
    if args.timing_seeds <= 0:
        return records
    print(f"float64 timing runs: {args.timing_seeds} seed(s) x {len(TIMING_MODELS)} models, "
          f"{args.timing_epochs} epochs", flush=True)
    warm_up(TIMING_MODELS, "float64", load_data(SEED0))
    for k, seed in enumerate(seeds(args.timing_seeds)):
        data = load_data(seed)
        parts = []
        for key in C.rotated(list(TIMING_MODELS), k):
            rec = run_fit(key, seed, args.timing_epochs, "float64", data, evaluate=False)
            records[key].append(rec)
            parts.append(f"{key} " + ("ERROR" if rec["error"]
                                      else f"{1000 * rec['s_per_epoch']:.1f} ms/epoch"))
        print(f"  seed {seed}: " + " | ".join(parts), flush=True)
    return records


# ---------------------------------------------------------------- reports


def report_accuracy(args, records):
    rows = []
    for key in args.models:
        recs = records[key]
        ok = [r for r in recs if not r["error"]]
        rows.append([MODELS[key][0], fmt_pm(values(recs, "mae")), fmt_pm(values(recs, "r2")),
                     fmt_pm(values(recs, "psd")), fmt_pm(values(recs, "std_total")),
                     fmt_pm(values(recs, "nll")), fmt_pm(values(recs, "nll_mix")),
                     f"{nanmean(values(recs, 'fit_s')):.1f}",
                     f"{1000 * nanmean(values(recs, 's_per_epoch')):.1f}",
                     f"{len(ok)}/{len(recs)}",
                     str(sum(len(r["warnings"]) for r in recs))])
    notes = ["mean ± standard error over seeds; 50 test points vs the noise-free truth",
             "PSD = authors' mean sqrt(mean_s(v_s + sigma^2)) (no c_q, no between-path "
             "spread); std = total-variance predictive std (predict(return_std=True))",
             "NLL = authors': -mean_points mean_paths sum_outputs log q-ED_1(y | mu_s, "
             "v_s + sigma^2) (Gaussian for q=2/GPyTorch); NLL mix = -mean_points log "
             "mean_paths of the same densities",
             f"S_pred = {S_PRED} paths for every model; fit s = wall clock of the fit"]
    notes += C.failure_notes({key: records[key] for key in args.models}, top=2)
    C.print_table(f"Time series (Table B.1 analogue): N={N_TRAIN}, 2 outputs, hidden ({HIDDEN},), "
                  f"M={N_INDUCING}, {args.epochs} epochs, lr {LR}, {args.dtype}, "
                  f"{len(args.seed_list)} seed(s)",
                  ["model", "MAE", "R2", "PSD (auth)", "std (total)", "NLL (auth)",
                   "NLL (mix)", "fit s", "ms/epoch", "ok", "warn"],
                  rows, align="lrrrrrrrrrr", notes=notes)

    rows = []
    for key in args.models:
        paper = PAPER[PAPER_ROW[key]]
        cells = [MODELS[key][0], PAPER_ROW[key]]
        for metric in ("mae", "psd", "r2", "nll"):
            m = nanmean(values(records[key], metric))
            p = paper[metric][0]
            cells += [f"{m:.3f}", f"{p:.3f} ± {paper[metric][1]:.3f}", f"{m - p:+.3f}"]
        m = nanmean(values(records[key], "fit_s"))
        cells += [f"{m:.1f}", f"{paper['fit_s'][0]:.1f}"]
        rows.append(cells)
    C.print_table("Against the paper's Table B.1 (gap = ours - paper; PSD and NLL in the "
                  "authors' definitions)",
                  ["model", "paper row", "MAE", "paper", "gap", "PSD", "paper", "gap", "R2",
                   "paper", "gap", "NLL", "paper", "gap", "fit s", "paper s"],
                  rows, align="ll" + "r" * 14,
                  notes=[f"paper {k}: {v}" for k, v in OTHER_PAPER_ROWS.items()]
                  + ["paper: torch seed 2024 noise, 51 test points, GPU/CPU unknown; ours: "
                     "numpy noise per seed, 50 test points, one CPU thread"])


def timing_ratio(records, key, field="s_per_epoch", ref="gpytorch"):
    """Median per-epoch seconds (``field``: wall clock or CPU) of ``key`` and ``ref``, the
    ratio of the medians, and the median and max of the per-seed paired ratios."""
    a = {r["seed"]: r[field] for r in records.get(key, []) if not r["error"]}
    b = {r["seed"]: r[field] for r in records.get(ref, []) if not r["error"]}
    if not a or not b:
        return None
    common = sorted(set(a) & set(b))
    paired = [a[s] / b[s] for s in common]
    return {"ours": C.median(list(a.values())), "ref": C.median(list(b.values())),
            "ratio": C.median(list(a.values())) / C.median(list(b.values())),
            "paired_median": C.median(paired) if paired else math.nan,
            "paired_max": max(paired) if paired else math.nan, "n": len(common)}


def report_timing(args, acc, timing):
    checks = {}
    rows = []
    for dtype, recs, epochs in ((args.dtype, acc, args.epochs),
                                ("float64", timing, args.timing_epochs)):
        if "gpytorch" not in recs or not recs["gpytorch"]:
            continue
        for key in [k for k in recs if k != "gpytorch"]:
            wall = timing_ratio(recs, key)
            cpu = timing_ratio(recs, key, field="cpu_per_epoch")
            if wall is None:
                rows.append([dtype, MODELS[key][0], "-", "-", "-", "-", "-", "-", "n/a"])
                continue
            ok = wall["ratio"] <= 1.0
            verdict = ("PASS" if ok else "FAIL") if key in TIMING_MODELS else "info"
            rows.append([dtype, MODELS[key][0], str(epochs), f"{1000 * wall['ours']:.2f}",
                         f"{1000 * wall['ref']:.2f}", f"{wall['ratio']:.2f}x",
                         f"{wall['paired_median']:.2f}x / {wall['paired_max']:.2f}x "
                         f"(n={wall['n']})",
                         f"{cpu['ratio']:.2f}x ({1000 * cpu['ours']:.1f} / "
                         f"{1000 * cpu['ref']:.1f})",
                         verdict])
            checks[f"{dtype} {key}"] = {"wall": wall, "cpu": cpu, "pass": ok}
    if rows:
        C.print_table("Timing target: fit time per epoch ours / GPyTorch DeepGP <= 1.0 "
                      "(equal dtype, one thread, this run)",
                      ["dtype", "ours", "epochs", "ours ms/epoch", "GPyTorch ms/epoch",
                       "ratio of medians", "per-seed ratio median / max", "CPU-time ratio (ms)",
                       "verdict"],
                      rows, align="llrrrrrrl",
                      notes=["wall clock: medians over seeds of fit seconds / epochs; the "
                             "verdict is on the ratio of the wall-clock medians",
                             "CPU-time ratio: the same with this process's CPU time "
                             "(insensitive to other load on a shared machine)",
                             f"{args.dtype}: the accuracy fits; float64: the timing fits "
                             "(no prediction)"])
    return checks


def report_checks(args, records):
    """The paper-level accuracy check and the paper's qualitative claims, as lines."""
    checks = {}
    print("Paper-level check (mean over seeds: MAE <= 0.10 and R2 >= 0.90):")
    for key in [k for k in ("q1", "q2") if k in records]:
        mae = nanmean(values(records[key], "mae"))
        r2 = nanmean(values(records[key], "r2"))
        ok = mae <= 0.10 and r2 >= 0.90
        print(f"  {C.verdict(ok):4s}  {MODELS[key][0]}: MAE {mae:.3f}, R2 {r2:.3f}")
        checks[f"paper-level {key}"] = ok
    print("Paper's claims (information, not targets):")
    if "q1" in records and "q2" in records:
        for metric, word in (("mae", "MAE"), ("psd", "PSD (authors')")):
            a, b = values(records["q1"], metric), values(records["q2"], metric)
            n = min(a.size, b.size)
            wins = int(np.sum(a[:n] < b[:n]))
            print(f"  info  q=1 {word} < q=2 {word}: means {np.nanmean(a):.3f} vs "
                  f"{np.nanmean(b):.3f}; q=1 lower in {wins}/{n} seeds")
    if "q2" in records and "gpytorch" in records:
        a, b = values(records["q2"], "mae"), values(records["gpytorch"], "mae")
        print(f"  info  our q=2 vs GPyTorch DeepGP MAE: {np.nanmean(a):.3f} vs "
              f"{np.nanmean(b):.3f} (same model class and settings)")
    print(flush=True)
    return checks


# ---------------------------------------------------------------- main


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, default=None, help="seeds of the accuracy table (10)")
    p.add_argument("--epochs", type=int, default=None, help="epochs per accuracy fit (1000)")
    p.add_argument("--quick", action="store_true",
                   help="smoke run: 2 seeds, 50 epochs; timing 1 seed x 20 epochs")
    p.add_argument("--models", default=",".join(MODELS),
                   help=f"comma list from {','.join(MODELS)} (all)")
    Q.add_dtype_argument(p, "accuracy fits")
    p.add_argument("--timing-seeds", type=int, default=None,
                   help="seeds of the float64 timing fits (3; 0 skips them)")
    p.add_argument("--timing-epochs", type=int, default=None,
                   help="epochs per float64 timing fit (200)")
    Q.add_output_arguments(p, "qep_timeseries")
    args = p.parse_args(argv)
    if args.seeds is None:
        args.seeds = 2 if args.quick else 10
    if args.epochs is None:
        args.epochs = 50 if args.quick else 1000
    if args.timing_seeds is None:
        args.timing_seeds = 1 if args.quick else 3
    if args.timing_epochs is None:
        args.timing_epochs = 20 if args.quick else 200
    args.models = C.parse_choices(p, args.models, MODELS, "model")
    if "gpytorch" in args.models and not C.available("gpytorch"):
        print("GPyTorch not installed: its rows and the timing target are skipped")
        args.models.remove("gpytorch")
    args.seed_list = seeds(args.seeds)
    return args


def run(args):
    acc = run_accuracy(args)
    timing = run_timing(args) if "gpytorch" in args.models else {}
    return {"accuracy": acc, "timing_float64": timing}


def report(args, records):
    acc, timing = records["accuracy"], records["timing_float64"]
    report_accuracy(args, acc)
    summary = {"timing": report_timing(args, acc, timing), "checks": report_checks(args, acc)}
    summary["table"] = {
        key: {m: mean_se(values(acc[key], m)) for m in
              ("mae", "r2", "psd", "std_total", "nll", "nll_mix", "fit_s", "s_per_epoch")}
        for key in args.models}
    return summary


CSV_KEYS = ["model", "seed", "dtype", "epochs", "n_iter", "fit_s", "fit_cpu_s", "s_per_epoch",
            "cpu_per_epoch", "mae", "r2", "psd", "std_total", "nll", "nll_mix", "error"]


def main(argv=None):
    args = parse_args(argv)
    records, summary = Q.run_main(
        "qep/timeseries.py  -  DeepQEPRegressor, Table B.1 analogue (step/turn series) vs the "
        "paper and GPyTorch's DeepGP", args,
        f"accuracy fits {args.dtype} (every model), timing fits float64; torch default "
        "dtype float64", run, report, extra=("gpytorch",))
    rows = (((part,), r) for part, recs in (("accuracy", records["accuracy"]),
                                            ("timing", records["timing_float64"]))
            for per_model in recs.values() for r in per_model)
    Q.write_outputs(args, {**records, "summary": summary, "paper": PAPER}, CSV_KEYS, rows,
                    prefix=("part",), extra=("gpytorch",))


if __name__ == "__main__":
    main()
