"""Protocol A / A': cost of S posterior draws at n* query points.

Default (headline, protocol A'): d = 2, fixed kernel
``ConstantKernel(1.0, "fixed") * Matern(0.5, "fixed", nu=2.5) + WhiteKernel(1e-2, "fixed")``,
``optimizer=None`` everywhere, S = 64 draws, F = 1024 random features, one thread, float64:

* n = 500,  n* = 4 000
* n = 2000, n* = 8 000
* n = 1000, n* = 100 000   (peak memory)

``--sweep`` runs protocol A instead: n = 1000, n* in {1k, 2k, 4k, 8k, 16k, 32k, 100k},
S in {10, 100} (slow: sklearn is cubic in n*; cubic methods are skipped once an O(n*^3)
extrapolation from the previous n* exceeds the cut-off, and labelled as such).

Methods (each configuration of each method runs in a fresh child process, which does one
warm-up run and then ``--repeats`` timed runs and reports its peak RSS):

(i)   sklearn        GaussianProcessRegressor(kernel, optimizer=None).fit + sample_y (SVD)
(ii)  numpy-chol     same fit, predict(return_cov=True), Cholesky (+ jitter only on
                     failure), mean + L z: the fair exact location-scale baseline
(iii) ours-exact     PathwiseGPSampler(prior="exact") (only when n + n* <= --exact-max)
(iv)  ours           PathwiseGPSampler(kernel, optimizer=None, n_features=F).fit.sample_y
(v)   botorch        SingleTaskGP(train_Yvar=1e-2, ScaleKernel(MaternKernel(2.5)),
                     outcome_transform=None), lengthscale/outputscale copied in, zero mean,
                     draw_matheron_paths(num_features=F) evaluated at X* (+ observation
                     noise, as sample_y has), under torch.no_grad()

"end-to-end" = fit / model construction with the fixed hyperparameters + drawing +
evaluation at X*, numpy in and numpy out for every method.  For ours and BoTorch we also
time "functions built once, then evaluated": build = ``sample_functions`` /
``draw_matheron_paths`` on the fitted model, eval = evaluating those functions at X*.

Usage::

    .venv/bin/python benchmarks/pathwise/scaling.py                 # headline (A')
    .venv/bin/python benchmarks/pathwise/scaling.py --quick         # smoke run
    .venv/bin/python benchmarks/pathwise/scaling.py --sweep --repeats 1
"""

import os  # noqa: I001  (the shared kit's folder on the path, the kit, then numpy)
import sys

if (kit := os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) not in sys.path:
    sys.path.insert(0, kit)
import _common as C  # noqa: I001  (first: pins the threads before numpy is imported)
from _fits import write_json

import argparse
import math
import warnings

import numpy as np
import scipy.linalg
import torch

SCRIPT = os.path.abspath(__file__)
LENGTH_SCALE, NOISE, NU, AMPLITUDE = 0.5, 1e-2, 2.5, 1.0
METHODS = ("sklearn", "numpy-chol", "ours-exact", "ours", "botorch")
CUBIC = ("sklearn", "numpy-chol", "ours-exact")
N_CHECK = 256  # query points used for the (untimed) sanity checks


def make_kernel():
    from sklearn.gaussian_process.kernels import ConstantKernel, Matern, WhiteKernel

    return (ConstantKernel(AMPLITUDE, "fixed")
            * Matern(length_scale=LENGTH_SCALE, length_scale_bounds="fixed", nu=NU)
            + WhiteKernel(NOISE, "fixed"))


def make_data(n, n_star, seed):
    from skgpx.datasets import make_matern_2d

    X, y = make_matern_2d(n, length_scale=LENGTH_SCALE, noise_variance=NOISE,
                          random_state=seed)
    Xs, _ = make_matern_2d(n_star, length_scale=LENGTH_SCALE, noise_variance=NOISE,
                           random_state=seed + 1)
    return X, y, Xs


# ---------------------------------------------------------------- estimates


def memory_estimate(method, n, n_star):
    """Rough peak bytes of the O(n*^2)-memory methods (None: linear, not estimated)."""
    b = 8.0
    if method == "sklearn":  # K**, V^T V, cov, SVD (u, vh, work, copy), scaled vh
        return 7 * n_star**2 * b + 3 * n * n_star * b
    if method == "numpy-chol":  # K**, V^T V / cov, Cholesky in place, draws
        return 3 * n_star**2 * b + 2 * n * n_star * b
    if method == "ours-exact":  # joint prior K, its Cholesky, temporaries
        return 3 * (n + n_star) ** 2 * b
    return None


# ---------------------------------------------------------------- child side


def _reference(X, y, Xq):
    """Exact predictive mean and variance (with the white noise) at Xq, in numpy."""
    from sklearn.gaussian_process import GaussianProcessRegressor

    gp = GaussianProcessRegressor(make_kernel(), optimizer=None).fit(X, y)
    mean, std = gp.predict(Xq, return_std=True)
    return mean, std**2


def _draw_check(draws, ref_mean, ref_var):
    """max |z| of the S-draw sample mean at the check points (about 3-4 if correct)."""
    draws = np.asarray(draws)[:N_CHECK]
    S = draws.shape[1]
    z = (draws.mean(1) - ref_mean) / np.sqrt(ref_var / S)
    return {"finite": bool(np.isfinite(draws).all()), "max_abs_z_mean": float(np.abs(z).max())}


def setup(cfg):
    warnings.filterwarnings("ignore")
    X, y, Xs = make_data(cfg["n"], cfg["n_star"], cfg["seed"])
    state = {"cfg": cfg, "X": X, "y": y, "Xs": Xs, "kernel": make_kernel()}
    state["ref_mean"], state["ref_var"] = _reference(X, y, Xs[:N_CHECK])
    method = cfg["method"]
    if method == "botorch":
        model = _botorch_model(state)  # loads BoTorch outside the timed region
        with torch.no_grad():
            X_check = torch.as_tensor(Xs[:N_CHECK], dtype=torch.float64, device=cfg["device"])
            post_mean = model.posterior(X_check).mean.squeeze(-1).cpu()
        state["parity"] = float(np.abs(post_mean.numpy() - state["ref_mean"]).max())
    elif method in ("ours", "ours-exact"):
        from skgpx import PathwiseGPSampler

        est = PathwiseGPSampler(make_kernel(), optimizer=None, device=cfg["device"]).fit(X, y)
        state["parity"] = float(np.abs(est.predict(Xs[:N_CHECK]) - state["ref_mean"]).max())
    return state


def _botorch_model(state):
    from _baselines import botorch_exact_gp

    return botorch_exact_gp(state["X"], state["y"], noise=NOISE, nu=NU,
                            length_scale=LENGTH_SCALE, amplitude=AMPLITUDE,
                            device=state["cfg"]["device"])


def run_once(state):
    cfg, X, y, Xs = state["cfg"], state["X"], state["y"], state["Xs"]
    method, S, F, dev, seed = cfg["method"], cfg["S"], cfg["F"], cfg["device"], cfg["seed"]
    out = {}
    if method in ("sklearn", "numpy-chol"):
        from sklearn.gaussian_process import GaussianProcessRegressor

        with C.Timer() as t_all:
            with C.Timer() as t_fit:
                gp = GaussianProcessRegressor(state["kernel"], optimizer=None).fit(X, y)
            if method == "sklearn":
                draws = gp.sample_y(Xs, n_samples=S, random_state=seed)
            else:
                mean, cov = gp.predict(Xs, return_cov=True)
                L, jitter = _cholesky_with_jitter(cov)
                del cov
                z = np.random.default_rng(seed).standard_normal((Xs.shape[0], S))
                draws = mean[:, None] + L @ z
        out.update(total=t_all.seconds, fit=t_fit.seconds)
        info = {"shape": list(draws.shape), **_draw_check(draws, state["ref_mean"],
                                                          state["ref_var"])}
        if method == "numpy-chol":
            info["jitter"] = jitter
    elif method in ("ours", "ours-exact"):
        from skgpx import PathwiseGPSampler

        prior = "exact" if method == "ours-exact" else "rff"
        with C.Timer(dev) as t_all:
            with C.Timer(dev) as t_fit:
                est = PathwiseGPSampler(state["kernel"], optimizer=None, n_features=F,
                                        prior=prior, device=dev).fit(X, y)
            draws = est.sample_y(Xs, n_samples=S, random_state=seed)
        out.update(total=t_all.seconds, fit=t_fit.seconds)
        info = {"shape": list(draws.shape), "parity_mean_vs_sklearn": state["parity"],
                **_draw_check(draws, state["ref_mean"], state["ref_var"])}
        if method == "ours":
            with C.Timer(dev) as t_build:
                functions = est.sample_functions(S, random_state=seed)
            with C.Timer(dev) as t_eval:
                values = functions(Xs)
            out.update(build=t_build.seconds, eval=t_eval.seconds)
            info["eval_shape"] = list(values.shape)
    elif method == "botorch":
        from _baselines import botorch_paths

        torch.manual_seed(seed)
        gen = torch.Generator(device="cpu").manual_seed(seed)
        with C.Timer(dev) as t_all:
            with C.Timer(dev) as t_fit:
                model = _botorch_model(state)
            with torch.no_grad():
                with C.Timer(dev) as t_build:
                    paths = botorch_paths(model, S, F)
                Xs_t = torch.as_tensor(Xs, dtype=torch.float64, device=dev)
                values = paths(Xs_t)  # (S, n*), latent
                noise = torch.randn(values.shape, generator=gen, dtype=torch.float64)
                values = values + math.sqrt(NOISE) * noise.to(dev)
                draws = values.T.cpu().numpy()  # sklearn layout (n*, S)
        with torch.no_grad(), C.Timer(dev) as t_eval:
            latent = paths(torch.as_tensor(Xs, dtype=torch.float64, device=dev)).T.cpu().numpy()
        out.update(total=t_all.seconds, fit=t_fit.seconds, build=t_build.seconds,
                   eval=t_eval.seconds)
        info = {"shape": list(draws.shape), "eval_shape": list(latent.shape),
                "parity_mean_vs_sklearn": state["parity"],
                **_draw_check(draws, state["ref_mean"], state["ref_var"])}
    else:
        raise ValueError(method)
    out["info"] = info
    return out


def _cholesky_with_jitter(cov):
    """Cholesky of the posterior covariance, adding jitter only if it fails."""
    scale = float(np.mean(np.diag(cov)))
    for jitter in (0.0, 1e-10, 1e-8, 1e-6, 1e-4):
        try:
            mat = cov if jitter == 0 else cov + jitter * scale * np.eye(cov.shape[0])
            return scipy.linalg.cholesky(mat, lower=True, check_finite=False), jitter * scale
        except np.linalg.LinAlgError:
            continue
    raise np.linalg.LinAlgError("posterior covariance not PD even with jitter 1e-4")


# ---------------------------------------------------------------- parent side


def run_config(args, n, n_star, S, history):
    """All methods at one (n, n*, S).  ``history[method]`` holds (n*, seconds) measured."""
    ram = C.total_ram_bytes()
    rows = {}
    for method in args.methods:
        label = f"{method} n={n} n*={n_star} S={S}"
        est = memory_estimate(method, n, n_star)
        rec = {"method": method, "n": n, "n_star": n_star, "S": S, "mem_estimate": est}
        if method == "botorch" and not C.available("botorch", "gpytorch"):
            rec.update(status="not installed", note="botorch/gpytorch not installed")
        elif method == "ours-exact" and n + n_star > args.exact_max:
            rec.update(status="skipped", note=f"n+n*={n + n_star} > {args.exact_max}")
        elif est is not None and est > args.mem_fraction * ram:
            rec.update(status="DNF", note=(f"memory pre-estimate {C.fmt_bytes(est)} > "
                                           f"{args.mem_fraction:.0%} of RAM"))
        else:
            prev = [(ns, t) for ns, t in history.get(method, []) if ns < n_star]
            extrap = None
            if method in CUBIC and prev:
                ns0, t0 = max(prev)
                extrap = t0 * (n_star / ns0) ** 3
            if extrap is not None and args.skip_extrapolated and extrap > args.cutoff:
                rec.update(status="DNF", note=(f"skipped: O(n*^3) extrapolation from "
                                               f"n*={max(prev)[0]} gives ~{extrap:.0f} s "
                                               f"(extrapolated) > {args.cutoff:.0f} s"))
            else:
                print(f"  running {label} ...", flush=True)
                cfg = {"method": method, "n": n, "n_star": n_star, "S": S, "F": args.features,
                       "device": args.device, "seed": args.seed, "repeats": args.repeats,
                       "budget": args.budget}
                res = C.run_cell(SCRIPT, cfg, cutoff=args.cutoff, label=label,
                                 mem_limit=args.mem_fraction * ram)
                rec.update(res)
                if res["status"] == "ok":
                    history.setdefault(method, []).append(
                        (n_star, C.median(res["times"]["total"])))
        if rec.get("status") == "DNF" and method in CUBIC:
            prev = [(ns, t) for ns, t in history.get(method, []) if ns < n_star]
            if prev:
                ns0, t0 = max(prev)
                rec["extrapolated"] = t0 * (n_star / ns0) ** 3
                rec["extrapolated_from"] = ns0
        rows[method] = rec
    return rows


def describe(rec):
    """Formatted cells for one method's record."""
    status = rec.get("status")
    if status != "ok":
        text = {"DNF": "DNF", "skipped": "skipped", "not installed": "not installed"}.get(
            status, "error")
        note = rec.get("note", "")
        if rec.get("extrapolated") is not None and "extrapolat" not in note:
            note += (f"; ~{rec['extrapolated']:.0f} s by O(n*^3) extrapolation from "
                     f"n*={rec['extrapolated_from']} (extrapolated, not run)")
        return {"e2e": text, "note": note}
    t = rec["times"]
    tot = t["total"]
    runs = f"{len(tot)}" + ("*" if rec.get("reduced") or len(tot) < 5 else "")
    info = rec.get("info", {})
    checks = [f"z={info['max_abs_z_mean']:.1f}"] if "max_abs_z_mean" in info else []
    if "parity_mean_vs_sklearn" in info:
        checks.append(f"mean-parity={info['parity_mean_vs_sklearn']:.1e}")
    if info.get("jitter"):
        checks.append(f"jitter={info['jitter']:.1e}")
    if "cuda_max_memory_allocated" in info:
        checks.append(f"cuda-peak={C.fmt_bytes(info['cuda_max_memory_allocated'])}")
    return {
        "e2e": C.fmt_seconds(C.median(tot)),
        "range": f"{C.fmt_seconds(min(tot))}-{C.fmt_seconds(max(tot))}",
        "runs": runs,
        "fit": C.fmt_seconds(C.median(t.get("fit", []))) if t.get("fit") else "-",
        "build": C.fmt_seconds(C.median(t["build"])) if t.get("build") else "-",
        "eval": C.fmt_seconds(C.median(t["eval"])) if t.get("eval") else "-",
        "rss": C.fmt_bytes(rec["peak_rss"]),
        "drss": C.fmt_bytes(rec["peak_rss"] - rec["baseline_rss"]),
        "note": " ".join(checks),
    }


def e2e_seconds(rec):
    if rec.get("status") == "ok":
        return C.median(rec["times"]["total"]), False
    if rec.get("status") == "DNF" and rec.get("dnf") == "time":
        return None, True  # lower bound: the cut-off
    return None, False


def print_config_table(args, n, n_star, S, rows):
    ours = rows.get("ours", {})
    t_ours = C.median(ours["times"]["total"]) if ours.get("status") == "ok" else None
    headers = ["method", "e2e median s", "range", "runs", "fit s", "build s", "eval s",
               "peak RSS", "dRSS", "e2e / ours", "notes"]
    table = []
    for method in args.methods:
        rec = rows[method]
        d = describe(rec)
        t, lower = e2e_seconds(rec)
        if lower:
            t = args.cutoff
        ratio = C.fmt_ratio(t / t_ours, lower) if (t and t_ours) else "-"
        table.append([method, d["e2e"], d.get("range", ""), d.get("runs", ""), d.get("fit", ""),
                      d.get("build", ""), d.get("eval", ""), d.get("rss", ""),
                      d.get("drss", ""), ratio, d["note"]])
    C.print_table(
        f"n={n}, n*={n_star}, d=2, S={S}, F={args.features}, device={args.device}",
        headers, table, align="lrrrrrrrrrl",
        notes=[
            "e2e = fit/model construction + draw + evaluation at X* (numpy in, numpy out); "
            "median of the timed runs after 1 warm-up",
            "build/eval = functions drawn once from the fitted model, then evaluated at X* "
            "(eval excludes build)",
            "runs marked * are fewer than 5 (--repeats, or the per-cell --budget was spent)",
            "peak RSS = ru_maxrss of the child process (imports + data included); dRSS = peak"
            " minus RSS after set-up",
            "z = max |mean of S draws - exact mean| / sqrt(var/S) over 256 points "
            "(about 3-4 when correct); mean-parity = max |posterior mean - sklearn|",
        ])


def check_targets(args, results):
    """PASS/MISS lines for the targets (when their configuration was run)."""
    lines = []

    def get(n, n_star, method):
        return results.get((n, n_star, args.samples), {}).get(method)

    ours, sk, bo = get(500, 4000, "ours"), get(500, 4000, "sklearn"), get(500, 4000, "botorch")
    if ours and ours.get("status") == "ok":
        t_ours = C.median(ours["times"]["total"])
        if sk:
            t_sk, lower = e2e_seconds(sk)
            if lower:
                t_sk = args.cutoff
            if t_sk:
                r = t_sk / t_ours
                lines.append(f"{C.verdict(r >= 100)}  n=500, n*=4000: sklearn/ours = "
                             f"{'>' if lower else ''}{r:.1f}x (target >= 100x; "
                             f"{t_sk:.2f} s vs {t_ours:.3f} s)")
            else:
                lines.append(f"n/a   n=500, n*=4000 sklearn: {sk.get('status')}")
        if bo and bo.get("status") == "ok":
            r = C.median(bo["times"]["total"]) / t_ours
            rb = C.median(bo["times"]["eval"]) / C.median(ours["times"]["eval"])
            lines.append(f"{C.verdict(r >= 3)}  n=500, n*=4000: botorch/ours = {r:.2f}x "
                         f"(target >= 3x; e2e {C.median(bo['times']['total']):.3f} s vs "
                         f"{t_ours:.3f} s; eval-only ratio {rb:.2f}x)")
        elif bo:
            lines.append(f"n/a   n=500, n*=4000 botorch: {bo.get('status')}")
    ours = get(2000, 8000, "ours")
    if ours and ours.get("status") == "ok":
        t = C.median(ours["times"]["total"])
        lines.append(f"{C.verdict(t < 1.5)}  n=2000, n*=8000: ours e2e = {t:.3f} s "
                     "(target < 1.5 s)")
    for (n, n_star, S), rows in sorted(results.items()):
        ours = rows.get("ours")
        if n_star >= 100_000 and S == args.samples and ours and ours.get("status") == "ok":
            peak = ours["peak_rss"]
            lines.append(f"{C.verdict(peak < 2e9)}  n={n}, n*={n_star}: ours peak RSS = "
                         f"{C.fmt_bytes(peak)} (target < 2 GB; whole process incl. "
                         f"imports; {C.fmt_bytes(peak - ours['baseline_rss'])} above "
                         "the post-set-up RSS)")
    if lines:
        print("Targets, measured in this run:")
        for line in lines:
            print("  " + line)
        print(flush=True)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sweep", action="store_true",
                   help="protocol A: n=1000, n* in {1k..100k}, S in {10,100}")
    p.add_argument("--quick", action="store_true",
                   help="smoke run: n=500/n*=2000 and n=1000/n*=10000, 2 repeats")
    p.add_argument("--configs", default=None,
                   help="comma list of NxNSTAR, e.g. 500x4000,2000x8000 (overrides)")
    p.add_argument("--n-star", default=None,
                   help="sweep: comma list of n* (default 1000,...,100000)")
    p.add_argument("--sweep-samples", default="10,100", help="sweep: comma list of S")
    p.add_argument("--samples", type=int, default=64, help="S for the headline (64)")
    p.add_argument("--features", type=int, default=1024, help="F random features (1024)")
    p.add_argument("--methods", default=",".join(METHODS),
                   help=f"comma list from {','.join(METHODS)}")
    C.add_timing_arguments(p, unit="run")
    p.add_argument("--mem-fraction", type=float, default=0.75,
                   help="DNF when the O(n*^2) memory pre-estimate exceeds this RAM fraction")
    p.add_argument("--exact-max", type=int, default=8000,
                   help="ours-exact only when n + n* <= this (8000)")
    p.add_argument("--no-skip-extrapolated", dest="skip_extrapolated", action="store_false",
                   help="sweep: also run cubic methods whose extrapolation exceeds the cut-off")
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None, help="also write all records to this JSON file")
    args = p.parse_args(argv)
    C.check_device(p, args.device)
    args.methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = set(args.methods) - set(METHODS)
    if unknown:
        p.error(f"unknown methods {sorted(unknown)}")
    if args.budget is None:
        args.budget = args.cutoff
    if args.quick:
        args.repeats = min(args.repeats, 2)
    return args


def main(argv=None):
    if C.run_child_cell(setup, run_once):
        return
    args = parse_args(argv)
    if args.sweep:
        n_stars = [int(v) for v in (args.n_star or "1000,2000,4000,8000,16000,32000,100000")
                   .split(",")]
        plan = [(1000, ns, int(S)) for S in args.sweep_samples.split(",") for ns in n_stars]
        title = "Protocol A: scaling in n* (n=1000, d=2, Matern-5/2, noise 1e-2)"
        args.skip_extrapolated = args.skip_extrapolated
    else:
        configs = args.configs or ("500x2000,1000x10000" if args.quick
                                   else "500x4000,2000x8000,1000x100000")
        plan = [(int(a), int(b), args.samples)
                for a, b in (c.lower().split("x") for c in configs.split(","))]
        title = "Protocol A': headline settings (d=2, Matern-5/2 ell=0.5, noise 1e-2, S=64)"
        args.skip_extrapolated = False
    C.print_header(f"pathwise/scaling.py  -  {title}", args, extra=("gpytorch", "botorch"),
                   device=args.device)
    results, history = {}, {}
    for n, n_star, S in plan:
        rows = run_config(args, n, n_star, S, history)
        results[(n, n_star, S)] = rows
        print_config_table(args, n, n_star, S, rows)
    child_threads = next((r["threads"] for rows in results.values() for r in rows.values()
                          if r.get("status") == "ok"), None)
    if child_threads:
        print("threads in the child processes: " + C.format_threads(child_threads))
        print()
    if args.sweep:
        print_sweep_summary(args, results)
    check_targets(args, results)
    write_json(args.json, {f"{n}x{ns}xS{S}": rows for (n, ns, S), rows in results.items()})


def print_sweep_summary(args, results):
    for S in sorted({S for (_, _, S) in results}):
        keys = sorted(k for k in results if k[2] == S)
        headers = ["n*"] + args.methods + ["sklearn/ours", "botorch/ours"]
        table = []
        for key in keys:
            rows = results[key]
            cells = [str(key[1])]
            for m in args.methods:
                d = describe(rows[m])
                if rows[m].get("status") == "DNF" and rows[m].get("extrapolated"):
                    cells.append(f"DNF(~{rows[m]['extrapolated']:.0f}s extrap.)")
                else:
                    cells.append(d["e2e"])
            t_ours = e2e_seconds(rows.get("ours", {}))[0]
            for m in ("sklearn", "botorch"):
                rec = rows.get(m, {})
                t, lower = e2e_seconds(rec)
                t = args.cutoff if lower else t
                if t and t_ours:
                    cells.append(C.fmt_ratio(t / t_ours, lower))
                elif rec.get("extrapolated") and t_ours:
                    cells.append("~" + C.fmt_ratio(rec["extrapolated"] / t_ours)
                                 + " (extrap.)")
                else:
                    cells.append("-")
            table.append(cells)
        C.print_table(f"Protocol A summary: end-to-end median seconds, n=1000, S={S}, "
                      f"F={args.features}", headers, table,
                      notes=["DNF(~X s extrap.) = not run; X is an O(n*^3) extrapolation "
                             "from the largest n* measured for that method"])


if __name__ == "__main__":
    main()
