"""The inducing-point DKP's solvers against each other and against Adam.

It measures the convergence figures of ``doc/design_notes.rst``, "Inducing-point deep kernel
process".  Data: ``make_friedman1(n_samples=n_train + 10000, n_features=8,
noise=0.5, random_state=0)``; the first ``n_train`` rows train, the last 10 000 test.
X and y are standardised with the training part's mean and std (as the estimator does).
One thread, float64, ``kernel='sqexp'``, ``n_layers=2``, the estimator's default ``dof``
and learned settings (``DeepKernelProcessRegressor()._config``), ``m`` inducing inputs by
k-means++ (``skgpx._inducing._points.initial_inducing_points``, seed 0).  Every method
starts from the same state: the prior-mean Grams, ``Omega = I``, hidden weights 1/2,
``w_out = 1``, ``sigma^2 = 0.1``, and the same Z.

Methods (``--methods``)
-----------------------
* ``newton``: ``skgpx.dkp._sparse._solver.newton_fit(..., hand_over=False)`` (CARE sweeps
  with Anderson acceleration);
* ``auto``: the same with ``hand_over=True`` (sweeps, then L-BFGS);
* ``lbfgs``: ``skgpx.dkp._sparse._lbfgs.lbfgs_fit``;
* ``adam``: :func:`_adam.adam_fit` (this folder), mini-batches of 1024 rows on the
  uncollapsed bound, one run per learning rate in ``--adam-lrs``; its collapsed
  objective is evaluated after every epoch by a forward pass that is not counted in its
  passes or seconds.
A method whose module is not importable is skipped ("not available").

Reported per method: the final objective per row; passes over the rows and seconds to
reach ``L* - 1e-4 P``, where ``L*`` is the best final objective of all methods (">" marks
a lower bound: the method stopped at its cap without reaching it); the peak RSS during
the method (the kernel's high-water mark, reset before each method); test log-likelihood
and RMSE on the 10 000 held-out rows (original y scale) by Titsias' predictive
distribution on the fitted state.  Passes: an objective evaluation counts 1, a gradient
evaluation 2 (statistics pass, then the chunk graphs; the frozen ``_sparse_pass``
interface), an Adam epoch 1 (one forward and backward read of each row).  The seconds
column is the cost-neutral comparison.

``--parts predict``: Titsias prediction with the predictive std on 1 000 000 new rows in
chunks of ``--batch-size`` (the estimator's ``predict(return_std=True)`` when it has
``n_inducing``), with seconds and peak RSS.

Usage::

    .venv/bin/python benchmarks/dkp/inducing.py --n-train 20000 --m 128 --max-minutes 3
    .venv/bin/python benchmarks/dkp/inducing.py                       # P = 100 000, m = 256
    .venv/bin/python benchmarks/dkp/inducing.py --parts predict
"""

import os  # noqa: I001  (the shared kit's folder on the path, the kit, then numpy)
import sys

if (kit := os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) not in sys.path:
    sys.path.insert(0, kit)
import _common as C  # noqa: I001  (first: pins the threads before numpy is imported)
import _fits as F
from _adam import adam_fit

import argparse
import json
import importlib
import math
import time

import numpy as np
import torch

from skgpx import DeepKernelProcessRegressor
import skgpx.dkp._sparse._pass as _sparse_pass
from skgpx.dkp._sparse._model import SparseDKPState
from skgpx.dkp._sparse._model import inducing_blocks
from skgpx.dkp._sparse._model import prior_mean_grams
from skgpx.dkp._sparse._model import propagate_rows
from skgpx._inducing._rows import Rows
from skgpx._inducing._points import initial_inducing_points

N_TEST = 10_000
N_PREDICT = 1_000_000
METHODS = ("newton", "auto", "lbfgs", "adam")
SOLVER_MODULES = {"newton": "skgpx.dkp._sparse._solver", "auto": "skgpx.dkp._sparse._solver",
                  "lbfgs": "skgpx.dkp._sparse._lbfgs"}


class _Cap(BaseException):
    """Raised from a progress callback at the time cap (BaseException: a solver's
    ``except Exception`` must not swallow it)."""


# ---------------------------------------------------------------- memory


def reset_peak_rss():
    """Reset the kernel's RSS high-water mark (Linux ``clear_refs``); False if refused."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def peak_rss():
    """``VmHWM`` (peak RSS since the last reset), else the process's ``ru_maxrss``."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return C.peak_rss_bytes()


# ---------------------------------------------------------------- problem


def make_problem(args):
    from sklearn.datasets import make_friedman1

    from skgpx._base import column_standardisation

    X, y = make_friedman1(n_samples=args.n_train + N_TEST, n_features=8, noise=0.5,
                          random_state=0)
    Xtr, ytr = X[:args.n_train], y[:args.n_train, None]
    x_mean, x_scale = column_standardisation(Xtr)
    y_mean, y_scale = column_standardisation(ytr)
    dev, dt = torch.device(args.device), torch.float64

    def tensor(a):
        return torch.as_tensor(np.ascontiguousarray(a), dtype=dt, device=dev)

    estimator = DeepKernelProcessRegressor(n_layers=2, kernel="sqexp")
    config = estimator._config(estimator._resolve_dof())
    Xs = (Xtr - x_mean) / x_scale
    Z = initial_inducing_points(Xs, args.m, np.random.RandomState(0))
    width = 2 if config.skip else 1
    weights = [torch.full((width,), 0.5, dtype=dt, device=dev) for _ in range(2)]
    weights.append(torch.tensor([1.0, float(estimator.noise_variance)], dtype=dt, device=dev))
    state = SparseDKPState(inducing=tensor(Z), omega=torch.eye(8, dtype=dt, device=dev),
                           hidden_grams=[None, None], weights=weights,
                           jitter=float(estimator.jitter))
    state = state.copy(hidden_grams=prior_mean_grams(config, state))
    rows = Rows(tensor(Xs), tensor((ytr - y_mean) / y_scale),
                torch.zeros(args.n_train, dtype=dt, device=dev))
    return {"config": config, "state": state, "rows": rows, "x_mean": x_mean,
            "x_scale": x_scale, "y_mean": float(y_mean[0]), "y_scale": float(y_scale[0]),
            "X_test": X[args.n_train:], "y_test": y[args.n_train:], "tensor": tensor}


# ---------------------------------------------------------------- prediction


def titsias_factors(config, state, rows, batch_size):
    """``(blocks, L_B, mu_v)`` of the collapsed bound's optimal q(v) at ``state``
    (one forward pass)."""
    terms = _sparse_pass.objective_value(config, state, rows, batch_size)
    W = terms.statistics.W
    eye = torch.eye(W.shape[0], dtype=W.dtype, device=W.device)
    LB = torch.linalg.cholesky(0.5 * (W + W.mT) + eye)
    c = torch.linalg.solve_triangular(LB, terms.statistics.w, upper=False)
    with torch.no_grad():
        blocks = inducing_blocks(config, state)
    return blocks, LB, torch.linalg.solve_triangular(LB.mT, c, upper=True)


def titsias_predict(config, state, factors, Xq, batch_size):
    """Predictive mean and variance (with the noise), standardised scale, in chunks."""
    blocks, LB, mean_v = factors
    # the outputs are allocated once: small long-lived pieces between the chunks'
    # temporaries would fragment the heap and keep its memory resident
    mean = Xq.new_empty(Xq.shape[0])
    var = Xq.new_empty(Xq.shape[0])
    with torch.no_grad():
        for start in range(0, Xq.shape[0], batch_size):
            stop = min(start + batch_size, Xq.shape[0])
            cross, diag = propagate_rows(config, blocks, Xq[start:stop], state.jitter)
            a = cross @ blocks.whitening.mT
            b = torch.linalg.solve_triangular(LB, a.mT, upper=False)
            mean[start:stop] = (a @ mean_v)[:, 0]
            var[start:stop] = diag - (a * a).sum(1) + (b * b).sum(0) + blocks.noise
    return mean, var


def test_metrics(problem, state, args):
    config, rows = problem["config"], problem["rows"]
    Xq = problem["tensor"]((problem["X_test"] - problem["x_mean"]) / problem["x_scale"])
    factors = titsias_factors(config, state, rows, args.batch_size)
    mean, var = titsias_predict(config, state, factors, Xq, args.batch_size)
    mean = mean.cpu().numpy() * problem["y_scale"] + problem["y_mean"]
    std = np.sqrt(np.maximum(var.cpu().numpy(), 0.0)) * problem["y_scale"]
    return -F.gaussian_nll(problem["y_test"], mean, std), F.rmse(problem["y_test"], mean)


# ---------------------------------------------------------------- methods


class PassCounter:
    """Counts the rows' passes of ``_sparse_pass`` calls made by the solver modules
    (value = 1, gradients = 2), by wrapping the functions in those modules' namespaces,
    and keeps the best state they evaluated (the result when a fit stops at the cap)."""

    def __init__(self, modules):
        self.passes, self._undo, self._depth = 0, [], 0
        self.best_value, self.best_state = -math.inf, None
        originals = {_sparse_pass.objective_value: 1, _sparse_pass.objective_gradients: 2}
        for module in modules:
            for name, value in list(vars(module).items()):
                if callable(value) and value in originals:
                    self._undo.append((module, name, value))
                    setattr(module, name, self._wrap(value, originals[value]))

    def _wrap(self, function, cost):
        def counted(*args, **kwargs):
            # a pass function calling another wrapped one counts once
            self.passes += cost if self._depth == 0 else 0
            self._depth += 1
            try:
                result = function(*args, **kwargs)
            finally:
                self._depth -= 1
            terms = result[0] if isinstance(result, tuple) else result
            value = float(terms.value)
            if self._depth == 0 and math.isfinite(value) and value > self.best_value:
                state = args[1] if len(args) > 1 else kwargs["state"]
                self.best_value = value
                self.best_state = state.with_tensors([t.detach() for t in state.tensors()])
            return result
        return counted

    def close(self):
        for module, name, value in self._undo:
            setattr(module, name, value)


def run_solver(method, problem, args):
    """One solver fit: a trace of (seconds, passes, objective) and the fit (or None at the
    time cap)."""
    module = importlib.import_module(SOLVER_MODULES[method])
    modules = [module, _sparse_pass]
    try:
        modules.append(importlib.import_module("skgpx.dkp._sparse._lbfgs"))
    except ImportError:
        pass
    counter = PassCounter(modules)
    trace, t0 = [], time.perf_counter()
    cap = 60.0 * args.max_minutes

    def progress(iteration, value):
        elapsed = time.perf_counter() - t0
        trace.append((elapsed, counter.passes, float(value)))
        if elapsed > cap or counter.passes >= args.max_passes:
            raise _Cap()

    config, state, rows = problem["config"], problem["state"], problem["rows"]
    fit = None
    try:
        if method == "lbfgs":
            fit = module.lbfgs_fit(config, state, rows, max_iter=args.max_passes, tol=args.tol,
                                   batch_size=args.batch_size, progress=progress)
        else:
            fit = module.newton_fit(config, state, rows, max_iter=args.max_passes,
                                    tol=args.tol, batch_size=args.batch_size,
                                    hand_over=method == "auto", progress=progress)
    except _Cap:
        pass
    finally:
        counter.close()
    seconds = time.perf_counter() - t0
    if fit is not None:
        trace.append((seconds, counter.passes or fit.passes[-1], float(fit.history[-1])))
        final = fit.state
    else:  # stopped at the cap: the best state the solver evaluated
        final = counter.best_state
    return {"trace": trace, "fit": fit, "state": final, "seconds": seconds,
            "capped": fit is None, "solver_passes": None if fit is None else fit.passes[-1],
            "counted_passes": counter.passes}


def run_adam(lr, problem, args):
    t0 = time.perf_counter()
    fit = adam_fit(problem["config"], problem["state"], problem["rows"],
                   epochs=args.max_passes, batch_size=1024, lr=lr, seed=0,
                   max_seconds=60.0 * args.max_minutes)
    trace = list(zip(fit.seconds, fit.passes, fit.history))
    return {"trace": trace, "fit": fit, "state": fit.state, "seconds": time.perf_counter() - t0,
            "capped": fit.passes[-1] < args.max_passes, "solver_passes": fit.passes[-1],
            "evaluation_passes": fit.evaluation_passes}


def available_methods(methods):
    out = []
    for method in methods:
        if method in SOLVER_MODULES:
            try:
                importlib.import_module(SOLVER_MODULES[method])
            except ImportError as exc:
                print(f"  {method}: not available ({exc})", flush=True)
                continue
        out.append(method)
    return out


def to_target(trace, target):
    """(passes, seconds) of the first trace entry at or above ``target``, else None."""
    for seconds, passes, value in trace:
        if value >= target:
            return passes, seconds
    return None


def run_fit(problem, args):
    results = {}
    for method in available_methods(args.methods):
        runs = ([(f"adam lr={lr:g}", lr) for lr in args.adam_lrs] if method == "adam"
                else [(method, None)])
        for label, lr in runs:
            reset_peak_rss()
            start_rss = C.current_rss_bytes()
            res = run_adam(lr, problem, args) if lr is not None else \
                run_solver(method, problem, args)
            res["peak_rss"], res["start_rss"] = peak_rss(), start_rss
            fit = res["fit"]
            res["ll"], res["rmse"] = (test_metrics(problem, res["state"], args)
                                      if res["state"] is not None else (math.nan, math.nan))
            results[label] = res
            final = res["trace"][-1] if res["trace"] else (res["seconds"], 0, math.nan)
            print(f"  {label}: objective/row {final[2] / args.n_train:.6f} after "
                  f"{final[1]} passes, {res['seconds']:.1f} s"
                  + (" (cap)" if res["capped"] else "") + (
                      f"; warnings: {fit.warnings}" if fit is not None and fit.warnings
                      else ""), flush=True)
    return results


def report_fit(results, args):
    if not results:
        print("no method ran")
        return {}
    finals = {k: r["trace"][-1][2] for k, r in results.items() if r["trace"]}
    best = max(finals.values())
    target = best - 1e-4 * args.n_train
    rows, reach = [], {}
    for label, res in results.items():
        hit = to_target(res["trace"], target)
        last = res["trace"][-1] if res["trace"] else (res["seconds"], 0, math.nan)
        if hit is None:
            reach[label] = (last[1], last[0], True)
            cells = [f">{last[1]}", ">" + C.fmt_seconds(last[0])]
        else:
            reach[label] = (hit[0], hit[1], False)
            cells = [str(hit[0]), C.fmt_seconds(hit[1])]
        rows.append([label, f"{last[2] / args.n_train:.6f}",
                     f"{(last[2] - best) / args.n_train:+.2e}", *cells,
                     str(last[1]), C.fmt_seconds(res["seconds"]), C.fmt_bytes(res["start_rss"]),
                     C.fmt_bytes(res["peak_rss"]),
                     F.fmt_num(res["ll"], 4), F.fmt_num(res["rmse"], 4)])
    C.print_table(
        f"P={args.n_train}, m={args.m}, d=8, n_layers=2, sqexp; target L* - 1e-4 P, "
        f"L*/P = {best / args.n_train:.6f}",
        ["method", "final obj/row", "- L*/row", "passes to target", "s to target",
         "passes", "s total", "RSS at start", "peak RSS", "test LL", "test RMSE"],
        rows, align="lrrrrrrrrrr",
        notes=["passes: objective evaluation 1, gradient evaluation 2, Adam epoch 1; Adam's "
               "seconds exclude its per-epoch evaluation pass (not counted as a pass)",
               "'>' = not reached before the cap (passes or --max-minutes)",
               "peak RSS: the process's high-water mark, reset to the current RSS before "
               "each method; memory an earlier method left resident counts (RSS at start): "
               "run one method per process (--methods) for a clean figure",
               "test LL: mean log N(y | mean, std^2) per point, original scale, 10 000 rows"])
    adam = {k: v for k, v in reach.items() if k.startswith("adam")}
    if adam:
        reached = [v for v in adam.values() if not v[2]]
        best_adam = min(reached) if reached else max(adam.values())
        for ref in ("newton", "auto", "lbfgs"):
            if ref not in reach:
                continue
            if reach[ref][2]:
                print(f"  Adam passes / {ref} passes: n/a ({ref} did not reach the target)")
                continue
            ratio = best_adam[0] / max(reach[ref][0], 1)
            print(f"  Adam passes / {ref} passes: {C.fmt_ratio(ratio, best_adam[2])} "
                  f"(best Adam run {best_adam[0]} passes, {ref} {reach[ref][0]}); seconds "
                  f"{C.fmt_ratio(best_adam[1] / max(reach[ref][1], 1e-9), best_adam[2])}")
    print(flush=True)
    return {"best": best, "target": target,
            "methods": {k: {"trace": r["trace"], "peak_rss": r["peak_rss"],
                            "start_rss": r["start_rss"], "ll": r["ll"],
                            "rmse": r["rmse"], "seconds": r["seconds"],
                            "capped": r["capped"]} for k, r in results.items()}}


# ---------------------------------------------------------------- prediction part


def run_predict(problem, state, args):
    from sklearn.datasets import make_friedman1

    Xq, _ = make_friedman1(n_samples=N_PREDICT, n_features=8, noise=0.5, random_state=1)
    params = DeepKernelProcessRegressor().get_params()
    reset_peak_rss()
    start_rss = C.current_rss_bytes()
    if "n_inducing" in params:
        X = problem["rows"].X.cpu().numpy() * problem["x_scale"] + problem["x_mean"]
        y = problem["rows"].Y.cpu().numpy()[:, 0] * problem["y_scale"] + problem["y_mean"]
        model = DeepKernelProcessRegressor(n_layers=2, kernel="sqexp", n_inducing=args.m,
                                           max_iter=2, device=args.device).fit(X, y)
        reset_peak_rss()
        start_rss = C.current_rss_bytes()
        how = "DeepKernelProcessRegressor(n_inducing=m, max_iter=2).predict(return_std=True)"
        t0 = time.perf_counter()
        mean, std = model.predict(Xq, return_std=True)
    else:
        how = ("Titsias' formula from the inducing blocks (the estimator has no n_inducing "
               "yet), chunks of --batch-size rows")
        t0 = time.perf_counter()
        Xs = problem["tensor"]((Xq - problem["x_mean"]) / problem["x_scale"])
        del Xq
        factors = titsias_factors(problem["config"], state, problem["rows"], args.batch_size)
        mean, var = titsias_predict(problem["config"], state, factors, Xs, args.batch_size)
        std = torch.sqrt(var)
    seconds = time.perf_counter() - t0
    finite = all(bool(torch.isfinite(torch.as_tensor(v)).all()) for v in (mean, std))
    rss = peak_rss()
    print(f"  prediction on {N_PREDICT} rows with the std: {seconds:.1f} s, peak RSS "
          f"{C.fmt_bytes(rss)} from {C.fmt_bytes(start_rss)} at its start (the 1e6 x 8 input "
          f"alone is 64 MB; mean and std 16 MB); finite: {finite}\n  via {how}", flush=True)
    return {"seconds": seconds, "peak_rss": rss, "start_rss": start_rss, "how": how,
            "finite": finite}


# ---------------------------------------------------------------- main


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n-train", type=int, default=100_000, help="training rows (100000)")
    p.add_argument("--m", type=int, default=256, help="inducing inputs (256)")
    p.add_argument("--parts", default="fit,predict", help="comma list of fit, predict")
    p.add_argument("--methods", default=",".join(METHODS),
                   help=f"comma list from {','.join(METHODS)}")
    p.add_argument("--adam-lrs", default="1e-2,3e-3,1e-3", help="Adam learning rates")
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--max-minutes", type=float, default=30.0,
                   help="time cap per method (30); Adam checks it after each epoch")
    p.add_argument("--max-passes", type=int, default=300,
                   help="pass cap per method (300); also the solvers' max_iter")
    p.add_argument("--tol", type=float, default=1e-9,
                   help="the solvers' relative tolerance (1e-9: run to the caps)")
    p.add_argument("--batch-size", type=int, default=8192, help="rows per chunk of a pass")
    p.add_argument("--out", default=None, help="write the traces and figures as JSON")
    p.add_argument("--combine", default=None,
                   help="comma list of --out JSON files of fit runs (one method per process, "
                        "for clean peak RSS): report them against one L* and exit")
    args = p.parse_args(argv)
    C.check_device(p, args.device)
    args.parts = C.parse_choices(p, args.parts, ("fit", "predict"), "part")
    args.methods = C.parse_choices(p, args.methods, METHODS, "method")
    args.adam_lrs = [float(v) for v in args.adam_lrs.split(",") if v]
    return args


def combine(args):
    """The fit table of separate runs (same --n-train and --m) against their common L*."""
    results = {}
    for path in args.combine.split(","):
        with open(path) as handle:
            for label, res in json.load(handle)["fit"]["methods"].items():
                results[label] = {**res, "fit": None}
    report_fit(results, args)


def main(argv=None):
    args = parse_args(argv)
    if args.combine:
        return combine(args)
    C.print_header("dkp/inducing.py  -  inducing-point DKP: Newton-like sweeps, L-BFGS and Adam",
                   args, device=args.device)
    torch.set_num_threads(1)
    problem = make_problem(args)
    print(f"  RSS after building the problem: {C.fmt_bytes(C.current_rss_bytes())} "
          "(the peak RSS columns include it)", flush=True)
    out = {}
    state = problem["state"]
    if "fit" in args.parts:
        results = run_fit(problem, args)
        out["fit"] = report_fit(results, args)
        fitted = [(r["trace"][-1][2], r["state"]) for r in results.values()
                  if r["state"] is not None and r["trace"]]
        if fitted:
            state = max(fitted, key=lambda pair: pair[0])[1]
    if "predict" in args.parts:
        out["predict"] = run_predict(problem, state, args)
    if args.out:
        F.write_json(args.out, {**F.run_info(args), **out})


if __name__ == "__main__":
    main()
