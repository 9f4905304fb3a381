"""Protocol B: accuracy of posterior draws against the exact GP.

Set-up (d = 1, default): n = 1000 training inputs X ~ U(0, 1), y = sin(4 pi x) + noise,
kernel ``ConstantKernel(1.0, "fixed") * Matern(0.1, "fixed", nu=2.5) + WhiteKernel(1e-2,
"fixed")`` (``optimizer=None``); a grid of n* = 64 query points on [-0.3, 1.3] (40 inside
the data range, 24 outside: interpolation and extrapolation).  ``--d2`` adds d = 2:
X ~ U([0, 1]^2), y = sin(2 pi x1) cos(2 pi x2) + noise, an 8 x 8 grid on [-0.3, 1.3]^2.

For each method, F and seed (S = 2000 draws, 5 seeds) we fit N(m_hat, C_hat) to the
latent draws on the grid and report

* W2 to the exact latent posterior N(m, C):
  W2^2 = ||m_hat - m||^2 + tr(C_hat + C - 2 (C^1/2 C_hat C^1/2)^1/2), computed with
  symmetrised eigendecompositions (negative eigenvalues clipped to 0);
* the MC floor: W2 of S exact location-scale draws m + C^1/2 z (same S, same seeds);
* max_i |m_hat_i - m_i| / sqrt(C_ii / S) and max_i |v_hat_i / v_i - 1|.

Methods: ours (PathwiseGPSampler, predict_noise="latent") with F in {256, 1024, 4096},
shared basis and independent bases (shared_basis=False); BoTorch draw_matheron_paths
at the same F (shared basis; float64, fixed noise 1e-2, zero mean, hyperparameters
copied); ours method="weight_space"; ours prior="exact" (a sanity row at the floor);
and, when this skgpx has it, ours with ``frequency_sampling="qmc"`` (shared basis,
for information: the targets use the default "iid" frequencies).
Mean +- sd over seeds.

Usage::

    .venv/bin/python benchmarks/pathwise/accuracy.py            # d = 1, 5 seeds
    .venv/bin/python benchmarks/pathwise/accuracy.py --d2       # d = 1 and d = 2
    .venv/bin/python benchmarks/pathwise/accuracy.py --quick    # 2 seeds, F in {256, 1024}
"""

import os  # noqa: I001  (the shared kit's folder on the path, the kit, then numpy)
import sys

if (kit := os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) not in sys.path:
    sys.path.insert(0, kit)
import _common as C  # noqa: I001  (first: pins the threads before numpy is imported)
from _fits import draw_metrics, floor_draws, fmt_mean_sd, paired, sym_sqrt

import argparse
import time
import warnings

import numpy as np

SCRIPT = os.path.abspath(__file__)
LENGTH_SCALE, NOISE, NU, N_TRAIN, N_GRID = 0.1, 1e-2, 2.5, 1000, 64


def make_kernel(white=True):
    from sklearn.gaussian_process.kernels import ConstantKernel, Matern, WhiteKernel

    k = ConstantKernel(1.0, "fixed") * Matern(LENGTH_SCALE, "fixed", nu=NU)
    return k + WhiteKernel(NOISE, "fixed") if white else k


def make_problem(d, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(0.0, 1.0, size=(N_TRAIN, d))
    if d == 1:
        f = np.sin(4 * np.pi * X[:, 0])
        Xg = np.linspace(-0.3, 1.3, N_GRID)[:, None]
    else:
        f = np.sin(2 * np.pi * X[:, 0]) * np.cos(2 * np.pi * X[:, 1])
        g = np.linspace(-0.3, 1.3, int(round(N_GRID ** (1 / d))))
        Xg = np.stack(np.meshgrid(*([g] * d), indexing="ij"), -1).reshape(-1, d)
    y = f + np.sqrt(NOISE) * rng.standard_normal(N_TRAIN)
    return X, y, Xg


def exact_posterior(X, y, Xg):
    """Exact latent posterior mean and covariance (sklearn, noise as alpha)."""
    from sklearn.gaussian_process import GaussianProcessRegressor

    gp = GaussianProcessRegressor(make_kernel(white=False), alpha=NOISE + 1e-10,
                                  optimizer=None).fit(X, y)
    m, Cov = gp.predict(Xg, return_cov=True)
    return m, 0.5 * (Cov + Cov.T)


# ---------------------------------------------------------------- samplers


def draw_ours(X, y, Xg, S, seed, *, F, **options):
    from skgpx import PathwiseGPSampler

    est = PathwiseGPSampler(make_kernel(), optimizer=None, n_features=F,
                            predict_noise="latent", device="cpu", **options).fit(X, y)
    return est.sample_y(Xg, n_samples=S, random_state=seed)


def draw_botorch(X, y, Xg, S, seed, *, F):
    from _baselines import botorch_draws, botorch_exact_gp

    model = botorch_exact_gp(X, y, noise=NOISE, nu=NU, length_scale=LENGTH_SCALE,
                             amplitude=1.0)
    return botorch_draws(model, Xg, S, F, seed)[1].T.numpy()


METHOD_KEYS = {"ours prior='exact'": "exact", "ours shared": "shared",
               "ours shared qmc": "qmc",
               "ours independent": "independent", "botorch (shared)": "botorch",
               "ours weight_space": "weight_space"}


# ---------------------------------------------------------------- driver


FLOOR = "MC floor (exact loc.-scale)"


def make_sampler(name, F, X, y, Xg, m, C_half, S):
    """A function seed -> draws (n*, S) for one method."""
    if name == FLOOR:
        return lambda s: floor_draws(m, C_half, S, s)
    if name == "ours prior='exact'":
        return lambda s: draw_ours(X, y, Xg, S, s, F=1024, prior="exact")
    if name == "ours shared":
        return lambda s: draw_ours(X, y, Xg, S, s, F=F)
    if name == "ours shared qmc":
        return lambda s: draw_ours(X, y, Xg, S, s, F=F, frequency_sampling="qmc")
    if name == "ours independent":
        return lambda s: draw_ours(X, y, Xg, S, s, F=F, shared_basis=False)
    if name == "botorch (shared)":
        return lambda s: draw_botorch(X, y, Xg, S, s, F=F)
    if name == "ours weight_space":
        return lambda s: draw_ours(X, y, Xg, S, s, F=F, method="weight_space")
    raise ValueError(name)


def cell_setup(cfg):
    """Child process: data, exact posterior and the sampler of one (method, F)."""
    warnings.filterwarnings("ignore")
    X, y, Xg = make_problem(cfg["d"], seed=cfg["data_seed"])
    m, Cov = exact_posterior(X, y, Xg)
    C_half = sym_sqrt(Cov)
    fn = make_sampler(cfg["name"], cfg["F"], X, y, Xg, m, C_half, cfg["S"])
    return {"cfg": cfg, "fn": fn, "m": m, "Cov": Cov, "C_half": C_half, "n_star": Xg.shape[0]}


def cell_run(state):
    cfg, per_seed = state["cfg"], []
    t_all = time.perf_counter()
    for seed in range(cfg["seeds"]):
        t0 = time.perf_counter()
        draws = state["fn"](seed)
        elapsed = time.perf_counter() - t0
        assert draws.shape == (state["n_star"], cfg["S"]), draws.shape
        per_seed.append({**draw_metrics(draws, state["m"], state["Cov"], state["C_half"]),
                         "seconds": elapsed})
    return {"total": time.perf_counter() - t_all, "info": {"per_seed": per_seed}}


def run_dimension(args, d):
    X, y, Xg = make_problem(d, seed=args.data_seed)
    m, Cov = exact_posterior(X, y, Xg)
    inside = np.all((Xg >= 0) & (Xg <= 1), axis=1)
    print(f"d={d}: n={N_TRAIN}, n*={Xg.shape[0]} ({inside.sum()} inside the data range, "
          f"{(~inside).sum()} outside), exact posterior var in [{np.diag(Cov).min():.2e}, "
          f"{np.diag(Cov).max():.2f}], tr C = {np.trace(Cov):.2f}", flush=True)

    specs = [(FLOOR, None), ("ours prior='exact'", None)]
    for F in args.features:
        specs += [("ours shared", F), ("ours shared qmc", F), ("ours independent", F),
                  ("botorch (shared)", F), ("ours weight_space", F)]
    specs = [(name, F) for name, F in specs
             if name == FLOOR or METHOD_KEYS[name] in args.methods]
    results = {}
    mem_limit = args.mem_fraction * C.total_ram_bytes()
    for name, F in specs:
        if name == "botorch (shared)" and not C.available("botorch", "gpytorch"):
            results[(name, F)] = {"status": "not installed"}
            continue
        cfg = {"d": d, "name": name, "F": F, "S": args.S, "seeds": args.seeds,
               "data_seed": args.data_seed, "repeats": 1, "budget": 0.0}
        rec = C.run_cell(SCRIPT, cfg, cutoff=args.cutoff, mem_limit=mem_limit,
                         label=f"{name} F={F}", verbose=False)
        results[(name, F)] = rec
        if rec["status"] == "ok":
            per_seed = rec["info"]["per_seed"]
            w2 = [r["w2"] for r in per_seed]
            print(f"  {name:28s} F={F or '-':>5}: W2 {fmt_mean_sd(w2, '.4f')}  "
                  f"({np.median([r['seconds'] for r in per_seed]):.2f} s/seed, peak RSS "
                  f"{C.fmt_bytes(rec['peak_rss'])})", flush=True)
        else:
            print(f"  {name:28s} F={F or '-':>5}: {rec['status']}: {rec.get('note', '')}",
                  flush=True)
    return results


def report(args, d, results):
    seeds = {key: rec["info"]["per_seed"] for key, rec in results.items()
             if rec.get("status") == "ok"}
    floor = np.array([r["w2"] for r in seeds[(FLOOR, None)]])
    headers = ["method", "F", "W2 (mean +- sd)", "W2 / floor", "max |z| mean",
               "max |v_hat/v - 1|", "s / seed", "peak RSS"]
    rows = []
    for (name, F), rec in results.items():
        if rec.get("status") != "ok":
            text = rec.get("status", "error")
            if text == "DNF":
                text += " (memory)" if rec.get("dnf") == "memory" else " (time)"
            rows.append([name, F or "-", text, "", "", "", "", C.fmt_bytes(
                rec.get("peak_rss_seen"))])
            continue
        per_seed = seeds[(name, F)]
        w2 = np.array([r["w2"] for r in per_seed])
        rows.append([name, F or "-", fmt_mean_sd(w2, ".4f"), f"{w2.mean() / floor.mean():.2f}",
                     fmt_mean_sd([r["z"] for r in per_seed], ".2f"),
                     fmt_mean_sd([r["var"] for r in per_seed], ".3f"),
                     C.fmt_seconds(float(np.median([r["seconds"] for r in per_seed]))),
                     C.fmt_bytes(rec["peak_rss"])])
    C.print_table(
        f"Protocol B, d={d}: n={N_TRAIN}, n*={N_GRID}, S={args.S}, {args.seeds} seeds, "
        f"Matern-5/2 ell={LENGTH_SCALE}, noise {NOISE}", headers, rows, align="lrrrrrrr",
        notes=["W2 between N(mean, cov) of the draws and the exact latent posterior; "
               "the MC floor is W2 of exact draws with the same S",
               "max |z| = max_i |m_hat_i - m_i| / sqrt(C_ii / S); s / seed = median "
               "seconds per set of S draws (fit included for ours/botorch)",
               "each (method, F) runs in a child process: peak RSS is its ru_maxrss; "
               "DNF (memory) = killed when its RSS exceeded --mem-fraction of RAM"])

    print(f"Targets (d={d}), measured in this run:")
    for F in args.features:
        if ("ours shared", F) not in seeds:
            continue
        ours = np.array([r["w2"] for r in seeds[("ours shared", F)]])
        bo = seeds.get(("botorch (shared)", F))
        if bo is None:
            status = results.get(("botorch (shared)", F), {}).get("status", "not run")
            print(f"  n/a   F={F}: BoTorch {status}")
        else:
            bo = np.array([r["w2"] for r in bo])
            ratio = ours.mean() / bo.mean()
            k = len(ours)
            _, diff, se = paired(ours, bo)
            wins = int(np.sum(ours <= bo))
            print(f"  {C.verdict(ratio <= 1.0)}  F={F}: W2(ours shared) / W2(BoTorch) = "
                  f"{ratio:.3f} ({ours.mean():.4f} vs {bo.mean():.4f}; target <= 1; "
                  f"difference {diff:+.4f} +- {se:.4f} (paired se); "
                  f"ours <= BoTorch in {wins}/{k} seeds)")
            qmc = seeds.get(("ours shared qmc", F))
            if qmc is not None:
                qmc = np.array([r["w2"] for r in qmc])
                ratio = qmc.mean() / bo.mean()
                _, diff, se = paired(qmc, bo)
                print(f"  {C.verdict(ratio <= 1.0)}  F={F}: W2(ours shared, frequency_sampling="
                      f"'qmc') / W2(BoTorch, Sobol) = {ratio:.3f} ({qmc.mean():.4f} vs "
                      f"{bo.mean():.4f}; difference {diff:+.4f} +- {se:.4f} "
                      f"(paired se); ours <= BoTorch in {int(np.sum(qmc <= bo))}/{k} seeds)")
    for F in args.features:
        if ("ours independent", F) not in results:
            continue
        if ("ours independent", F) not in seeds:
            rec = results[("ours independent", F)]
            print(f"  MISS  F={F}: ours independent did not finish ({rec.get('status')}: "
                  f"{rec.get('note', '')})")
            continue
        ind = np.array([r["w2"] for r in seeds[("ours independent", F)]])
        ratio = ind.mean() / floor.mean()
        print(f"  {C.verdict(ratio <= 1.5)}  F={F}: W2(ours independent) / MC floor = "
              f"{ratio:.3f} ({ind.mean():.4f} vs {floor.mean():.4f}; target <= 1.5)")
    print(flush=True)


def main(argv=None):
    if C.run_child_cell(cell_setup, cell_run, warmup=False):
        return
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--d2", action="store_true", help="also run d = 2")
    p.add_argument("--only-d2", action="store_true", help="run d = 2 only")
    p.add_argument("--quick", action="store_true", help="2 seeds, F in {256, 1024}")
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--S", type=int, default=2000, help="draws per seed (2000)")
    p.add_argument("--features", default="256,1024,4096", help="comma list of F")
    p.add_argument("--data-seed", type=int, default=0)
    p.add_argument("--methods",
                   default="exact,shared,qmc,independent,botorch,weight_space",
                   help="comma list (the MC floor always runs)")
    p.add_argument("--cutoff", type=float, default=3600.0,
                   help="seconds per (method, F) cell, all seeds together (3600)")
    p.add_argument("--mem-fraction", type=float, default=0.75,
                   help="kill a cell whose RSS exceeds this fraction of RAM (0.75)")
    args = p.parse_args(argv)
    args.features = [int(v) for v in args.features.split(",")]
    args.methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = set(args.methods) - set(METHOD_KEYS.values())
    if unknown:
        p.error(f"unknown methods {sorted(unknown)}")
    if args.quick:
        args.seeds = min(args.seeds, 2)
        args.features = [F for F in args.features if F <= 1024]
    warnings.filterwarnings("ignore")
    C.print_header("pathwise/accuracy.py  -  Protocol B: W2 to the exact posterior", args,
                   extra=("gpytorch", "botorch"))
    dims = [2] if args.only_d2 else ([1, 2] if args.d2 else [1])
    for d in dims:
        results = run_dimension(args, d)
        report(args, d, results)


if __name__ == "__main__":
    main()
