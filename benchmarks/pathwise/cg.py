"""Exact mode with ``solver="cg"``: 64 draws past the Cholesky limit, and the
moment oracle for CG draws against Cholesky draws.

Kernel (fixed, ``optimizer=None``): ``ConstantKernel(1.0, "fixed") * RBF(0.5, "fixed") +
WhiteKernel(1e-2, "fixed")``; data ``skgpx.datasets.make_matern_2d`` (X ~ U([-2, 2]^2), a
smooth surface, noise variance 1e-2).  float64; on the CPU (default) one thread.

Part "scale": n = 50 000 training points, n* = 10 000 query points (``random_state=1``),
S = 64 draws, F = 1024 features, ``PathwiseGPSampler(kernel, optimizer=None,
solver="cg", cg_preconditioner_rank=r)`` for r in {100, 0} (``--ranks``; r = 0 is the
Jacobi preconditioner, which for a stationary kernel is plain CG).  Each r runs once
(no warm-up: one run is minutes on one core) in a fresh child process: fit (the
preconditioner and the CG solve of K_A^-1 y, ``cg_n_iter_``), ``sample_functions(64)``
(the block CG solve of the 64 draws' updates) and the evaluation at X*; peak RSS of the
child (target < 3 GB).  Plain CG needs hundreds of iterations (see the n = 4000 table)
at about 10 s each on one core at this n, so r = 0 gets its own cut-off
(``--rank0-cutoff``) and reads DNF on the CPU.  What Cholesky would need is printed
from the sizes: one n x n float64 matrix is n^2 * 8 bytes, and a Cholesky solve holds at
least two (K_A and its factor; scikit-learn's GPR three: distances, K, L).

Part "oracle": n = 4000 (the same data generator), 40 query points in [-2.5, 2.5]^2,
S = 2000 latent draws (``predict_noise="latent"``) with independent bases
(``shared_basis=False``, F = 64: the covariance of the draws is then exact, so the tight
test applies), the same ``random_state`` for every solver so that they share every random
number.  Rows: ``solver="cholesky"`` and ``solver="cg"`` with rank 100 (``--oracle-ranks``).
The test is the moment oracle of ``tests/pathwise/test_moments.py`` (its helpers are imported): the
exact latent posterior (dense numpy), max_i |m_hat_i - m_i| / sqrt(C_ii / S) <= 5 and
max_ij |C_hat_ij - C_ij| / sqrt((C_ii C_jj + C_ij^2) / S) <= 5.5.  Also printed: max |CG
draws - Cholesky draws| (same random numbers: the solver error alone) and the
iterations of the fit solve (1 right-hand side) for ranks 0 and 100 at this n.

Part "switch": where ``solver="auto"`` should factorise.  For each n
in ``--switch-n`` (2000, 5000, 10 000; the same data and kernel, ``optimizer=None``,
rank 100), in this process and interleaved (Cholesky first at even n positions, CG
first at odd ones; ``--switch-repeats`` runs each, median): the fit with
``solver="cholesky"`` and with ``solver="cg"`` (``cg_n_iter_``), then
``predict(X*, return_std=True)`` on 256 query rows (one CG block of 256 right-hand
sides) and 64 draws evaluated there (``sample_functions(64)(X*)``).  Printed: the
ratios Cholesky / CG of the fit and of the three together; the fit's cost estimate
(the timed kernel-block product times ``cg_n_iter_``: what the warning of a CG fit
projects) against the measured CG fit; an extrapolation from the largest n to larger
ones by the stated scalings (Cholesky fit ``n^3``, which overstates it where the
``n^2`` kernel evaluation still dominates; CG fit ``n^2`` at the measured iterations,
which understates it as they grow with n); and the bytes of the three Cholesky buffers
against the memory available, which is what ``cholesky_max_n="auto"`` decides by.

Usage::

    .venv/bin/python benchmarks/pathwise/cg.py                  # full protocol (CPU)
    .venv/bin/python benchmarks/pathwise/cg.py --quick          # smoke run
    .venv/bin/python benchmarks/pathwise/cg.py --device cuda    # the same on a GPU
    .venv/bin/python benchmarks/pathwise/cg.py --parts switch   # the Cholesky/CG switch
"""

import os  # noqa: I001  (the shared kit's folder on the path, the kit, then numpy)
import sys

if (kit := os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) not in sys.path:
    sys.path.insert(0, kit)
import _common as C  # noqa: I001  (first: pins the threads before numpy is imported)
from _fits import write_json

import argparse
import time
import warnings

import numpy as np

SCRIPT = os.path.abspath(__file__)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(SCRIPT)))  # the repository
PARTS = ("scale", "oracle", "switch")
LENGTH_SCALE, NOISE = 0.5, 1e-2
N_CHECK = 256


def make_kernel(white=True):
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel

    signal = ConstantKernel(1.0, "fixed") * RBF(LENGTH_SCALE, "fixed")
    return signal + WhiteKernel(NOISE, "fixed") if white else signal


def make_data(n, seed=0):
    from skgpx.datasets import make_matern_2d

    return make_matern_2d(n, length_scale=0.5, noise_variance=NOISE, random_state=seed)


def oracles():
    """The moment oracle of tests/pathwise (imported, not copied)."""
    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    from tests.pathwise import _oracles

    return _oracles


def ours(**params):
    from skgpx import PathwiseGPSampler

    return PathwiseGPSampler(make_kernel(), optimizer=None, **params)


class SolveCounter:
    """Counts the iterations of the draws' CG solve by wrapping the fitted solver's
    ``solve`` (a private attribute: diagnostics only, "-" when it is not there)."""

    def __init__(self, est):
        self.n_iter = None
        solver = getattr(getattr(est, "_engine", None), "cg", None)
        if solver is None or not hasattr(solver, "solve"):
            return
        original = solver.solve

        def solve(*args, **kwargs):
            out = original(*args, **kwargs)
            self.n_iter = int(out[1])
            return out

        solver.solve = solve


# ---------------------------------------------------------------- child cells


def setup(cfg):
    warnings.filterwarnings("ignore")
    import skgpx  # noqa: F401  (outside the timed region)

    if cfg["kind"] == "scale":
        X, y = make_data(cfg["n"])
        Xs, _ = make_data(cfg["n_star"], seed=1)
        return {"cfg": cfg, "X": X, "y": y, "Xs": Xs}
    return {"cfg": cfg}


def run_once(state):
    if state["cfg"]["kind"] == "scale":
        return _run_scale(state)
    return _run_oracle(state)


def _run_scale(state):
    cfg, X, y, Xs = state["cfg"], state["X"], state["y"], state["Xs"]
    dev = cfg["device"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with C.Timer(dev) as t_all:
            with C.Timer(dev) as t_fit:
                est = ours(solver="cg", cg_preconditioner_rank=cfg["rank"],
                           n_features=cfg["F"], device=dev).fit(X, y)
            counter = SolveCounter(est)
            with C.Timer(dev) as t_build:
                functions = est.sample_functions(cfg["S"], random_state=0)
            with C.Timer(dev) as t_eval:
                values = functions(Xs)
        mean = est.predict(Xs[:N_CHECK])
    draws = values[:N_CHECK]
    S = draws.shape[1]
    sd = np.sqrt(np.maximum(draws.var(1, ddof=1), 1e-300))
    info = {"shape": list(values.shape), "finite": bool(np.isfinite(values).all()),
            "cg_n_iter": int(est.cg_n_iter_), "draw_n_iter": counter.n_iter,
            "mean_check": mean.tolist(),
            "max_abs_z_vs_predict": float(np.max(np.abs(draws.mean(1) - mean) / (sd / np.sqrt(S)))),
            "warnings": sorted({f"{w.category.__name__}: {str(w.message)[:150]}"
                                for w in caught})}
    return {"total": t_all.seconds, "fit": t_fit.seconds, "build": t_build.seconds,
            "eval": t_eval.seconds, "info": info}


def _run_oracle(state):
    cfg = state["cfg"]
    orc = oracles()
    X, y = make_data(cfg["n"])
    Xq = np.random.default_rng(3).uniform(-2.5, 2.5, size=(40, 2))
    mean, cov = orc.exact_posterior(make_kernel(white=False), X, y, Xq, NOISE)
    rows, draws = {}, {}
    t0 = time.perf_counter()
    for label, params in cfg["methods"]:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            t = time.perf_counter()
            est = ours(shared_basis=False, n_features=cfg["F"], predict_noise="latent",
                       device=cfg["device"], **params).fit(X, y)
            t_fit = time.perf_counter() - t
            counter = SolveCounter(est)
            t = time.perf_counter()
            d = est.sample_y(Xq, n_samples=cfg["S"], random_state=cfg["seed"])
            t_draw = time.perf_counter() - t
        mean_z, cov_z, _, _ = orc.moment_z_scores(d, mean, cov)
        draws[label] = d
        rows[label] = {"fit": t_fit, "draw": t_draw, "mean_z": mean_z, "cov_z": cov_z,
                       "cg_n_iter": getattr(est, "cg_n_iter_", None),
                       "draw_n_iter": counter.n_iter,
                       "warnings": sorted({f"{w.category.__name__}: {str(w.message)[:150]}"
                                           for w in caught})}
    ref = draws.get("cholesky")
    for label, d in draws.items():
        if ref is not None and label != "cholesky":
            rows[label]["max_diff_vs_cholesky"] = float(np.abs(d - ref).max())
    iterations = {}
    for rank in cfg["iter_ranks"]:
        t = time.perf_counter()
        est = ours(solver="cg", cg_preconditioner_rank=rank, device=cfg["device"])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est.fit(X, y)
        iterations[str(rank)] = {"cg_n_iter": int(est.cg_n_iter_),
                                 "seconds": time.perf_counter() - t}
    var = np.diag(cov)
    info = {"rows": rows, "iterations": iterations, "mean_z_max": orc.MEAN_Z_MAX,
            "cov_z_max": orc.COV_Z_MAX, "var_range": [float(var.min()), float(var.max())]}
    return {"total": time.perf_counter() - t0, "info": info}


# ---------------------------------------------------------------- parent side


def part_scale(args):
    out = {}
    for rank in args.ranks:
        cutoff = args.rank0_cutoff if rank == 0 else args.cutoff
        label = f"cg rank={rank} n={args.n} n*={args.n_star}"
        print(f"  running {label} (cut-off {cutoff:.0f} s) ...", flush=True)
        cfg = {"kind": "scale", "n": args.n, "n_star": args.n_star, "S": args.samples,
               "F": args.features, "rank": rank, "device": args.device, "repeats": 1,
               "budget": 0.0}
        rec = C.run_cell(SCRIPT, cfg, cutoff=cutoff, label=label,
                         mem_limit=args.mem_fraction * C.total_ram_bytes())
        if rec["status"] != "ok":
            print(f"    {label}: {rec['status']}: {rec.get('note', '')}", flush=True)
        out[rank] = rec
    return out


def part_oracle(args):
    methods = [("cholesky", {"solver": "cholesky"})]
    methods += [(f"cg rank={r}", {"solver": "cg", "cg_preconditioner_rank": r})
                for r in args.oracle_ranks]
    cfg = {"kind": "oracle", "n": args.oracle_n, "S": args.oracle_S, "F": 64, "seed": 1,
           "methods": methods, "iter_ranks": sorted({0, 100} | set(args.oracle_ranks)),
           "device": args.device, "repeats": 1, "budget": 0.0}
    label = f"oracle n={args.oracle_n} S={args.oracle_S}"
    print(f"  running {label} ...", flush=True)
    rec = C.run_cell(SCRIPT, cfg, cutoff=args.cutoff, label=label,
                     mem_limit=args.mem_fraction * C.total_ram_bytes())
    if rec["status"] != "ok":
        print(f"    {label}: {rec['status']}: {rec.get('note', '')}", flush=True)
    return rec


def cholesky_bytes(n):
    return n * n * 8.0


def report_scale(args, res, lines):
    headers = ["rank", "total s", "fit s", "build s", "eval s", "cg_n_iter_ (fit)",
               "draw solve iters", "peak RSS", "dRSS", "check", "warnings"]
    rows = []
    means = {}
    for rank in args.ranks:
        rec = res[rank]
        if rec.get("status") != "ok":
            note = rec.get("note", "")
            rows.append([rank, "DNF" if rec.get("status") == "DNF" else rec.get("status"),
                         "", "", "", "", "", C.fmt_bytes(rec.get("peak_rss_seen")), "",
                         note[:70], ""])
            continue
        t, info = rec["times"], rec["info"]
        means[rank] = np.array(info["mean_check"])
        rows.append([rank, C.fmt_seconds(t["total"][0]), C.fmt_seconds(t["fit"][0]),
                     C.fmt_seconds(t["build"][0]), C.fmt_seconds(t["eval"][0]),
                     info["cg_n_iter"], info["draw_n_iter"] if info["draw_n_iter"] else "-",
                     C.fmt_bytes(rec["peak_rss"]),
                     C.fmt_bytes(rec["peak_rss"] - rec["baseline_rss"]),
                     f"z={info['max_abs_z_vs_predict']:.1f} finite={info['finite']}",
                     len(info["warnings"])])
    n = args.n
    one = cholesky_bytes(n)
    ram = C.total_ram_bytes()
    notes = [f"n={n}, n*={args.n_star}, d=2, S={args.samples}, F={args.features}, RBF(0.5) + "
             f"noise {NOISE}, device={args.device}; one run each (no warm-up); "
             "total = fit + sample_functions + evaluation at X*",
             "cg_n_iter_ = the fit's solve K_A^-1 y (1 right-hand side); draw solve iters = "
             f"the block solve of the {args.samples} draws' updates",
             "peak RSS = the child's ru_maxrss (imports and data included); dRSS = peak minus "
             "the RSS after loading the data",
             "check: max |z| of the S-draw mean against predict()'s mean at 256 points, with "
             "the draws' own sd (about 3-4 when right)",
             f"Cholesky at this n: one n x n float64 matrix = n^2 * 8 B = {C.fmt_bytes(one)}; "
             f"K_A + its factor (2 buffers) = {C.fmt_bytes(2 * one)}, scikit-learn's GPR (3: "
             f"distances, K, L) = {C.fmt_bytes(3 * one)}; this machine has "
             f"{C.fmt_bytes(ram)} of RAM"]
    if 0 in means and 100 in means:
        notes.append(f"max |predict mean (rank 0) - predict mean (rank 100)| at the check "
                     f"points = {np.abs(means[0] - means[100]).max():.2e}")
    for rank in args.ranks:
        rec = res[rank]
        for w in rec.get("info", {}).get("warnings", []):
            notes.append(f"rank {rank}: {w}")
    C.print_table("Exact draws with solver='cg' past the Cholesky limit", headers, rows,
                  align="rrrrrrrrrll", notes=notes)
    for rank in args.ranks:
        rec = res[rank]
        if rec.get("status") == "ok":
            peak = rec["peak_rss"]
            lines.append(f"{C.verdict(peak < 3e9)}  n={n}, rank={rank}: peak RSS = "
                         f"{C.fmt_bytes(peak)} (target < 3 GB; Cholesky would need >= "
                         f"{C.fmt_bytes(2 * one)}); {args.samples} draws in "
                         f"{rec['times']['total'][0]:.1f} s, cg_n_iter_={rec['info']['cg_n_iter']}")
        elif rec.get("status") == "DNF":
            lines.append(f"n/a   n={n}, rank={rank}: DNF ({rec.get('note', '')}); peak RSS "
                         f"seen {C.fmt_bytes(rec.get('peak_rss_seen'))}")
        else:
            lines.append(f"MISS  n={n}, rank={rank}: {rec.get('status')}: {rec.get('note', '')}")


def report_oracle(args, rec, lines):
    if rec.get("status") != "ok":
        lines.append(f"MISS  oracle: {rec.get('status')}: {rec.get('note', '')}")
        return
    info = rec["info"]
    zm, zc = info["mean_z_max"], info["cov_z_max"]
    headers = ["solver", "fit s", "draw s", "cg_n_iter_ (fit)", "draw solve iters",
               "max mean z", "max cov z", "max |draws - cholesky|", "verdict"]
    rows = []
    for label, row in info["rows"].items():
        ok = row["mean_z"] <= zm and row["cov_z"] <= zc
        rows.append([label, C.fmt_seconds(row["fit"]), C.fmt_seconds(row["draw"]),
                     row["cg_n_iter"] if row["cg_n_iter"] is not None else "-",
                     row["draw_n_iter"] if row["draw_n_iter"] else "-",
                     f"{row['mean_z']:.2f}", f"{row['cov_z']:.2f}",
                     f"{row['max_diff_vs_cholesky']:.1e}" if "max_diff_vs_cholesky" in row
                     else "-", C.verdict(ok)])
        lines.append(f"{C.verdict(ok)}  n={args.oracle_n} {label}: max mean z = "
                     f"{row['mean_z']:.2f} (<= {zm}), max cov z = {row['cov_z']:.2f} "
                     f"(<= {zc}), S={args.oracle_S}")
    notes = [f"n={args.oracle_n}, 40 query points in [-2.5, 2.5]^2 (exact posterior variances "
             f"in [{info['var_range'][0]:.2g}, {info['var_range'][1]:.2g}]), S={args.oracle_S}, "
             "shared_basis=False, F=64, the same random_state for every solver",
             "z-scores and thresholds: tests/pathwise/_oracles.moment_z_scores; "
             "max |draws - cholesky| = the solver error alone (same random numbers)",
             "iterations of the fit solve (1 right-hand side) at this n: " + ", ".join(
                 f"rank {r}: {v['cg_n_iter']} ({v['seconds']:.1f} s)"
                 for r, v in info["iterations"].items())]
    for label, row in info["rows"].items():
        for w in row["warnings"]:
            notes.append(f"{label}: {w}")
    C.print_table("Moment oracle: CG draws vs Cholesky draws against the exact posterior",
                  headers, rows, align="lrrrrrrrl", notes=notes)


def _median_seconds(fn, repeats, device):
    times, out = [], None
    for _ in range(repeats):
        with C.Timer(device) as t:
            out = fn()
        times.append(t.seconds)
    return float(np.median(times)), out


def _switch_row(n, order, args, Xs):
    from skgpx.pathwise._exact._solver import seconds_per_product

    X, y = make_data(n)
    row = {}
    for solver in order:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fit, est = _median_seconds(
                lambda: ours(solver=solver, device=args.device).fit(X, y),
                args.switch_repeats, args.device)
            predict, _ = _median_seconds(lambda: est.predict(Xs, return_std=True),
                                         args.switch_repeats, args.device)
            draws, _ = _median_seconds(lambda: est.sample_functions(64, random_state=0)(Xs),
                                       args.switch_repeats, args.device)
        row[solver] = {"fit": fit, "predict_std": predict, "draws": draws}
        if solver == "cg":
            operator = est._mode.cg.operator()  # private: diagnostics only
            row["cg_n_iter"] = int(est.cg_n_iter_)
            row["per_product"] = seconds_per_product(operator, 1)
    return row


def part_switch(args):
    from skgpx._memory import available_memory

    Xs, _ = make_data(256, seed=1)
    out = {}
    for position, n in enumerate(args.switch_n):
        order = ("cholesky", "cg") if position % 2 == 0 else ("cg", "cholesky")
        print(f"  running switch n={n} ({' then '.join(order)}) ...", flush=True)
        out[n] = _switch_row(n, order, args, Xs)
    out["available"] = int(available_memory(args.device))
    return out


def report_switch(args, res, lines):
    from skgpx.pathwise._exact._solver import AUTO_MEMORY_FRACTION
    from skgpx.pathwise._exact._solver import CHOLESKY_BUFFERS

    available = res["available"]
    headers = ["n", "chol fit s", "cg fit s", "cg iters", "fit chol/cg", "chol predict+draws s",
               "cg predict+draws s", "all chol/cg", "cg estimate s", "estimate/fit",
               "3 buffers", "auto picks"]
    rows = []
    for n in args.switch_n:
        r = res[n]
        chol, cg = r["cholesky"], r["cg"]
        post_chol = chol["predict_std"] + chol["draws"]
        post_cg = cg["predict_std"] + cg["draws"]
        estimate = r["per_product"] * r["cg_n_iter"]
        need = CHOLESKY_BUFFERS * n * n * 8
        picks = "cholesky" if need <= AUTO_MEMORY_FRACTION * available else "cg"
        rows.append([n, C.fmt_seconds(chol["fit"]), C.fmt_seconds(cg["fit"]), r["cg_n_iter"],
                     C.fmt_ratio(chol["fit"] / cg["fit"]), C.fmt_seconds(post_chol),
                     C.fmt_seconds(post_cg),
                     C.fmt_ratio((chol["fit"] + post_chol) / (cg["fit"] + post_cg)),
                     C.fmt_seconds(estimate), C.fmt_ratio(estimate / cg["fit"]),
                     C.fmt_bytes(need), picks])
        lines.append(f"info  n={n}: Cholesky / CG = {chol['fit'] / cg['fit']:.2f} (fit), "
                     f"{(chol['fit'] + post_chol) / (cg['fit'] + post_cg):.2f} (fit + "
                     f"predict(return_std) on 256 rows + 64 draws); CG estimate / CG fit = "
                     f"{estimate / cg['fit']:.2f}")
    big = args.switch_n[-1]
    r = res[big]
    notes = [f"d=2, RBF(0.5) + noise {NOISE}, optimizer=None, cg_preconditioner_rank=100, "
             f"cg_tol=1e-4, device={args.device}, float64; median of {args.switch_repeats} "
             "run(s) each, the two solvers interleaved in this process",
             "predict+draws: predict(X*, return_std=True) + sample_functions(64)(X*) on "
             "256 query rows (CG: one block solve of 256 and one of 64 right-hand sides)",
             "cg estimate: seconds_per_product (one timed block of kernel rows, scaled to n) "
             "x cg_n_iter_ (the warning's projection once the iterations are known)",
             f"3 buffers = 3 n^2 x 8 B (float64); 'auto picks' compares them with "
             f"{AUTO_MEMORY_FRACTION:g} x available memory ({C.fmt_bytes(available)} now)"]
    for N in args.switch_extrapolate:
        chol = r["cholesky"]["fit"] * (N / big) ** 3
        cg = r["cg"]["fit"] * (N / big) ** 2
        need = CHOLESKY_BUFFERS * N * N * 8
        notes.append(f"extrapolated from n={big} to n={N}: Cholesky fit ~{chol:.0f} s (n^3), "
                     f"CG fit ~{cg:.0f} s (n^2, {r['cg_n_iter']} iterations), ratio "
                     f"{chol / cg:.2f}; Cholesky needs {C.fmt_bytes(need)}")
    C.print_table("Where solver='auto' should factorise: Cholesky vs CG", headers, rows,
                  align="r" * 11 + "l", notes=notes)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help="smoke run: n=5000/n*=2000 (rank 100 only), oracle n=1000, S=1000")
    p.add_argument("--parts", default=",".join(PARTS), help=f"comma list from {PARTS}")
    p.add_argument("--n", type=int, default=50_000)
    p.add_argument("--n-star", type=int, default=10_000)
    p.add_argument("--ranks", default="100,0", help="cg_preconditioner_rank values (100,0)")
    p.add_argument("--samples", type=int, default=64)
    p.add_argument("--features", type=int, default=1024)
    p.add_argument("--oracle-n", type=int, default=4000)
    p.add_argument("--oracle-S", type=int, default=2000)
    p.add_argument("--oracle-ranks", default="100",
                   help="CG ranks in the moment oracle (100)")
    p.add_argument("--cutoff", type=float, default=3600.0,
                   help="seconds: a cell running longer is killed -> DNF (3600)")
    p.add_argument("--rank0-cutoff", type=float, default=300.0,
                   help="cut-off of the rank-0 cell of the scale part (300)")
    p.add_argument("--switch-n", default="2000,5000,10000",
                   help="training sizes of the switch part (2000,5000,10000)")
    p.add_argument("--switch-repeats", type=int, default=1)
    p.add_argument("--switch-extrapolate", default="20000,50000",
                   help="sizes the switch part extrapolates to (20000,50000)")
    p.add_argument("--mem-fraction", type=float, default=0.75)
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    p.add_argument("--json", default=None, help="also write all records to this JSON file")
    args = p.parse_args(argv)
    C.check_device(p, args.device)
    args.parts = C.parse_choices(p, args.parts, PARTS, "part")
    args.ranks = [int(r) for r in args.ranks.split(",") if r]
    args.oracle_ranks = [int(r) for r in args.oracle_ranks.split(",") if r]
    args.switch_n = [int(n) for n in args.switch_n.split(",") if n]
    args.switch_extrapolate = [int(n) for n in args.switch_extrapolate.split(",") if n]
    if args.quick:
        args.n, args.n_star, args.ranks = 5000, 2000, [100]
        args.oracle_n, args.oracle_S = 1000, 1000
        args.switch_n = [1000, 2000]
    return args


def main(argv=None):
    if C.run_child_cell(setup, run_once, warmup=False):
        return
    args = parse_args(argv)
    C.print_header("pathwise/cg.py  -  exact draws with solver='cg'", args,
                   device=args.device)
    print(f"load average at start: {C.load_average()}")
    results, lines = {}, []
    if "scale" in args.parts:
        results["scale"] = part_scale(args)
        report_scale(args, results["scale"], lines)
    if "oracle" in args.parts:
        results["oracle"] = part_oracle(args)
        report_oracle(args, results["oracle"], lines)
    if "switch" in args.parts:
        results["switch"] = part_switch(args)
        report_switch(args, results["switch"], lines)
    records = {k: ({str(r): v for r, v in res.items()} if k in ("scale", "switch") else res)
               for k, res in results.items()}
    C.finish("Targets (CG)", lines)
    write_json(args.json, records)


if __name__ == "__main__":
    main()
