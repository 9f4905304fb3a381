"""Cost of ``DeepKernelProcessRegressor.fit``: wall time, achieved flop rate, scaling in P.

Three measurements, float64 on ONE CPU thread (the design's estimate of a sweep:
about 20-30 P^3 flops per hidden layer):

1. **The limit**: the machine's float64 matmul rate, ``torch.mm`` of two n x n
   matrices for n = 1000 and 2000, GFLOP/s = 2 n^3 / t, best of several runs.  The
   rates of the other dense primitives the solver uses (Cholesky, ``cholesky_inverse``,
   triangular solves, ``eigh``) are measured at n = P of the profiled fit, with the
   flop conventions below, to show what each one can reach here.
2. **Headline**: one 10-sweep fit at P = 1000 on ``make_friedman1(n_samples=1000,
   noise=0.5, random_state=0)``, ``n_layers=2``, default settings, ``device='cpu'``.
   Target: wall time < 20 s.  The flops of the fit are counted from a second,
   profiled fit (``torch.profiler`` with ``record_shapes=True``): every call of a
   dense linear-algebra op gets the standard count for its input shapes, and the
   total over the timed (unprofiled) wall time is the achieved GFLOP/s, printed as a
   fraction of the matmul rate.  Flop conventions (real, float64; n x n matrices,
   m right-hand sides; elementwise ops, reductions and copies count 0):

   * ``mm``/``addmm``/``bmm``/``matmul`` (a x b)(b x c): 2abc; ``mv``: 2ab;
   * Cholesky: n^3/3; ``cholesky_inverse`` (LAPACK potri): 2n^3/3;
   * ``solve_triangular``: n^2 m; ``cholesky_solve``: 2 n^2 m;
   * ``eigh`` with vectors: 4 n^3 (LAPACK syevd: 4/3 n^3 tridiagonalisation + 2 n^3
     back-transformation + up to 4/3 n^3 divide and conquer, less with deflation);
     the total with Golub & Van Loan's 9 n^3 (symmetric QR with vectors) is printed
     too.  ``eigvalsh``: 4/3 n^3;
   * LU / ``slogdet``: 2n^3/3; ``inv``: 2n^3; ``lstsq`` (m x n): 2mn^2.

   ``torch.profiler``'s own ``with_flops`` is not used: it counts matmul-type ops
   only (0 for Cholesky, ``cholesky_inverse``, ``eigh``, triangular solves; checked
   with torch 2.13), and it made the profiled fit much slower and larger.  The
   same profile gives the time breakdown per op (self CPU time) and the part of the
   wall time spent outside aten ops (Python, dispatch).
3. **Scaling**: the 10-sweep fit time for P in {250, 500, 1000, 2000} (one run
   each), and the least-squares slope of log(time) against log(P) (3 for pure dense
   O(P^3) work; less while O(P^2) elementwise work and overheads still weigh).

Every P runs in its own child process (``_common.run_cell``): a fresh process whose
threads are pinned to one, a warm-up fit at the smallest P, then the timed fit (and,
at the headline P, the profiled fit).  ``--quick`` runs P in {125, 250, 500},
profiles the P = 500 fit and prints no P = 1000 headline verdict.

Usage::

    .venv/bin/python benchmarks/dkp/cost.py --quick                    # about 1 min
    .venv/bin/python benchmarks/dkp/cost.py --json benchmarks/results/dkp_cost.json
"""

import os  # noqa: I001  (the shared kit's folder on the path, the kit, then numpy)
import sys

if (kit := os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) not in sys.path:
    sys.path.insert(0, kit)
import _common as C  # noqa: I001  (first: pins the threads before numpy is imported)
import _fits as F

import argparse
import math
import re
import time
import warnings

import torch

SCRIPT = os.path.abspath(__file__)
HEADLINE_P = 1000
TARGET_SECONDS = 20.0
FULL_SIZES = (250, 500, 1000, 2000)
QUICK_SIZES = (125, 250, 500)
EIGH_FACTOR = 4.0  # flops of eigh with vectors per n^3 (see the module docstring)
EIGH_FACTOR_GVL = 9.0


# ---------------------------------------------------------------- flop model


def _numel(shape):
    return math.prod(shape) if shape else 1


def _batch(shape):
    return _numel(shape[:-2]) if len(shape) > 2 else 1


def _mm(shapes, offset=0):
    a, b = shapes[offset], shapes[offset + 1]
    if len(a) < 2 or len(b) < 2:
        return 0.0
    return 2.0 * _batch(a) * a[-2] * a[-1] * b[-1]


def _mv(shapes, offset=0):
    a = shapes[offset]
    return 2.0 * _numel(a) if len(a) >= 2 else 0.0


def _cube(shapes, factor, index=0):
    a = shapes[index]
    return factor * _batch(a) * a[-1] ** 3 if len(a) >= 2 else 0.0


def _triangular(shapes):  # (A, B, ...): n^2 per right-hand side
    a, b = shapes[0], shapes[1]
    if len(a) < 2 or not b:
        return 0.0
    n = a[-1]
    return float(n * n * (_numel(b) // n))  # numel(B) / n right-hand sides, batch included


def _chol_solve(shapes):  # (B, L, ...): two triangular solves
    b, a = shapes[0], shapes[1]
    if len(a) < 2 or not b:
        return 0.0
    n = a[-1]
    return 2.0 * n * n * (_numel(b) // n)


def _lstsq(shapes):
    a, b = shapes[0], shapes[1]
    if len(a) < 2:
        return 0.0
    m, n = a[-2], a[-1]
    k = b[-1] if len(b) >= 2 else 1
    return _batch(a) * (2.0 * m * n * n + 2.0 * m * n * k)


FLOP_MODEL = {
    "aten::mm": _mm,
    "aten::bmm": _mm,
    "aten::addmm": lambda s: _mm(s, 1),
    "aten::baddbmm": lambda s: _mm(s, 1),
    "aten::mv": _mv,
    "aten::addmv": lambda s: _mv(s, 1),
    "aten::dot": lambda s: 2.0 * _numel(s[0]),
    "aten::vdot": lambda s: 2.0 * _numel(s[0]),
    "aten::cholesky": lambda s: _cube(s, 1.0 / 3.0),
    "aten::linalg_cholesky": lambda s: _cube(s, 1.0 / 3.0),
    "aten::linalg_cholesky_ex": lambda s: _cube(s, 1.0 / 3.0),
    "aten::cholesky_inverse": lambda s: _cube(s, 2.0 / 3.0),
    "aten::cholesky_solve": _chol_solve,
    "aten::_cholesky_solve_helper": _chol_solve,
    "aten::linalg_solve_triangular": _triangular,
    "aten::triangular_solve": lambda s: _triangular([s[1], s[0]]),
    "aten::linalg_eigh": lambda s: _cube(s, EIGH_FACTOR),
    "aten::_linalg_eigh": lambda s: _cube(s, EIGH_FACTOR),
    "aten::linalg_eigvalsh": lambda s: _cube(s, 4.0 / 3.0),
    "aten::linalg_lu_factor_ex": lambda s: _cube(s, 2.0 / 3.0),
    "aten::linalg_lu_factor": lambda s: _cube(s, 2.0 / 3.0),
    "aten::linalg_slogdet": lambda s: _cube(s, 2.0 / 3.0),
    "aten::_linalg_slogdet": lambda s: _cube(s, 2.0 / 3.0),
    "aten::linalg_det": lambda s: _cube(s, 2.0 / 3.0),
    "aten::linalg_inv": lambda s: _cube(s, 2.0),
    "aten::linalg_inv_ex": lambda s: _cube(s, 2.0),
    "aten::linalg_lstsq": _lstsq,
}
# op names that look like dense linear algebra but only dispatch to counted ops
_WRAPPERS = {"aten::matmul", "aten::linalg_matmul", "aten::einsum", "aten::tensordot",
             "aten::_linalg_check_errors"}
_DENSE_PATTERN = re.compile(
    r"^aten::_?(linalg_\w+|cholesky\w*|\w*eig\w*|svd|qr|lu\w*|det|logdet|inverse"
    r"|(\w*_)?solve\w*|\w*mm|\w*mv|v?dot|matmul|einsum|tensordot)$")


def _category(name):
    if name in ("aten::mm", "aten::bmm", "aten::addmm", "aten::baddbmm", "aten::mv",
                "aten::addmv", "aten::dot", "aten::vdot"):
        return "matmul"
    if "eigh" in name or "eigvalsh" in name:
        return "eigh"
    if name == "aten::cholesky_inverse":
        return "cholesky_inverse"
    if "cholesky_solve" in name or "solve_triangular" in name or "triangular_solve" in name:
        return "triangular solves"
    if "cholesky" in name:
        return "cholesky"
    if "lu_factor" in name or "slogdet" in name or "lstsq" in name or "inv" in name:
        return "other linalg"
    return "elementwise/other aten"


def count_flops(events):
    """Flops of the dense ops in a profile, each counted once, at the innermost counted op.

    A counted op that calls another counted op (``linalg_cholesky`` ->
    ``linalg_cholesky_ex``, ``linalg_eigh`` -> ``_linalg_eigh``, ``matmul`` -> ``mm``) is
    counted at the inner one, which is also where the profiler books the self time, so
    flops and self time line up per op.

    Parameters
    ----------
    events : list of torch.autograd.profiler_util.FunctionEvent
        ``prof.events()`` of a profile taken with ``record_shapes=True``.

    Returns
    -------
    dict
        ``by_op`` (name -> [calls, flops]), ``eigh_n3`` (sum of n^3 over eigh calls
        with vectors) and ``uncounted`` (dense-looking op names outside the model).
    """
    memo = {}

    def counted_below(event):
        key = id(event)
        if key not in memo:
            memo[key] = any(child.name in FLOP_MODEL or counted_below(child)
                            for child in event.cpu_children)
        return memo[key]

    def ancestors(event):
        parent = event.cpu_parent
        while parent is not None:
            yield parent.name
            parent = parent.cpu_parent

    by_op, uncounted, eigh_n3 = {}, set(), 0.0
    for event in events:
        name = event.name
        if name not in FLOP_MODEL:
            if (_DENSE_PATTERN.match(name) and name not in _WRAPPERS
                    and not counted_below(event)
                    and not any(a in FLOP_MODEL for a in ancestors(event))):
                uncounted.add(name)
            continue
        if counted_below(event):
            continue
        shapes = [list(s) for s in (event.input_shapes or [])]
        try:
            flops = float(model_flops(name, shapes, event))
        except (IndexError, TypeError, ZeroDivisionError):
            flops = 0.0
            uncounted.add(name + " (shapes not understood)")
        if name in ("aten::linalg_eigh", "aten::_linalg_eigh") and flops:
            if "aten::linalg_eigvalsh" not in set(ancestors(event)):
                eigh_n3 += flops / EIGH_FACTOR
        entry = by_op.setdefault(name, [0, 0.0])
        entry[0] += 1
        entry[1] += flops
    return {"by_op": by_op, "eigh_n3": eigh_n3, "uncounted": sorted(uncounted)}


def model_flops(name, shapes, event=None):
    """Flops of one call of ``name`` with ``shapes`` (``_linalg_eigh`` under ``eigvalsh``
    computes no vectors and gets 4/3 n^3)."""
    if name == "aten::_linalg_eigh" and event is not None:
        parent = event.cpu_parent
        while parent is not None:
            if parent.name == "aten::linalg_eigvalsh":
                return FLOP_MODEL["aten::linalg_eigvalsh"](shapes)
            parent = parent.cpu_parent
    return FLOP_MODEL[name](shapes)


# ---------------------------------------------------------------- child side


def _data(n):
    """``make_friedman1(n, noise=0.5, random_state=0)``."""
    from sklearn.datasets import make_friedman1

    return make_friedman1(n_samples=n, noise=0.5, random_state=0)


def _fit(X, y, n_layers):
    """One default 10-sweep fit on the CPU."""
    from skgpx import DeepKernelProcessRegressor

    return DeepKernelProcessRegressor(n_layers=n_layers, device="cpu").fit(X, y)


def setup(cfg):
    """Child cell set-up (untimed): the data at P and at the warm-up size."""
    warnings.filterwarnings("ignore")
    import skgpx  # noqa: F401  (import outside the timed region)

    return {"cfg": cfg, "data": _data(cfg["P"]), "warm": _data(cfg["warmup_P"]),
            "profiled": None}


def warmup(state):
    """One fit at the smallest P: imports, allocator and first-call overheads."""
    with C.Timer() as timer:
        _fit(*state["warm"], state["cfg"]["n_layers"])
    return {"total": timer.seconds}


def profile_fit(X, y, n_layers):
    """One fit under ``torch.profiler``: flop count and self-time breakdown per op."""
    from torch.profiler import ProfilerActivity, profile

    # no with_flops: it counts matmul-type ops only, and in a test at P=500 it raised the
    # profiled fit's time by ~50 % and the peak RSS from 2 GB to 5 GB
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        start = time.perf_counter()
        model = _fit(X, y, n_layers)
        wall = time.perf_counter() - start
    counted = count_flops(prof.events())
    self_time, calls = {}, {}
    for item in prof.key_averages():
        self_time[item.key] = self_time.get(item.key, 0.0) + item.self_cpu_time_total * 1e-6
        calls[item.key] = calls.get(item.key, 0) + item.count
    ops = {}
    for name in set(self_time) | set(counted["by_op"]):
        flop_calls, flops = counted["by_op"].get(name, [0, 0.0])
        ops[name] = {"self_s": self_time.get(name, 0.0), "calls": calls.get(name, flop_calls),
                     "flops": flops, "category": _category(name)}
    return {
        "wall_profiled": wall,
        "self_total": sum(self_time.values()),
        "ops": ops,
        "total_flops": sum(v["flops"] for v in ops.values()),
        "eigh_n3": counted["eigh_n3"],
        "uncounted": counted["uncounted"],
        "n_iter": int(model.n_iter_),
    }


def run_once(state):
    """The timed fit at P; at the profiled P, then one fit under the profiler."""
    cfg = state["cfg"]
    X, y = state["data"]
    with C.Timer() as timer:
        model = _fit(X, y, cfg["n_layers"])
    info = {"objective": float(model.objective_), "n_iter": int(model.n_iter_),
            "jitter": float(model.jitter_),
            # ru_maxrss is a lifetime peak: take it after the first timed fit, before the
            # profiled fit (the profiler itself holds GBs of event records)
            "peak_rss_fit": state.setdefault("peak_rss_fit", C.peak_rss_bytes())}
    if cfg["profile"] and state["profiled"] is None:
        # after the timed fit, so the profiler's overhead never enters the wall time
        state["profiled"] = profile_fit(X, y, cfg["n_layers"])
    if state["profiled"] is not None:
        info["profile"] = state["profiled"]
    return {"total": timer.seconds, "info": info}


# ---------------------------------------------------------------- parent side


def matmul_rates(sizes, repeats):
    """Best float64 ``torch.mm`` rate (GFLOP/s) for each n."""
    generator = torch.Generator().manual_seed(0)
    out = {}
    for n in sizes:
        a = torch.randn(n, n, generator=generator, dtype=torch.float64)
        b = torch.randn(n, n, generator=generator, dtype=torch.float64)
        seconds = C.best_seconds(lambda a=a, b=b: a @ b, repeats)
        out[n] = {"seconds": seconds, "gflops": 2.0 * n**3 / seconds * 1e-9}
    return out


def primitive_rates(n, repeats):
    """Rates of the solver's dense primitives at size n, with the script's flop model."""
    generator = torch.Generator().manual_seed(1)
    a = torch.randn(n, n, generator=generator, dtype=torch.float64)
    spd = a @ a.mT / n + torch.eye(n, dtype=torch.float64)
    factor = torch.linalg.cholesky(spd)
    rhs = torch.randn(n, n, generator=generator, dtype=torch.float64)
    cases = [
        ("mm (n x n)(n x n)", lambda: spd @ rhs, FLOP_MODEL["aten::mm"]([[n, n], [n, n]])),
        ("cholesky", lambda: torch.linalg.cholesky(spd), n**3 / 3.0),
        ("cholesky_inverse", lambda: torch.cholesky_inverse(factor), 2.0 * n**3 / 3.0),
        ("solve_triangular (n rhs)",
         lambda: torch.linalg.solve_triangular(factor, rhs, upper=False), float(n**3)),
        ("cholesky_solve (n rhs)", lambda: torch.cholesky_solve(rhs, factor), 2.0 * n**3),
        ("eigh (values + vectors)", lambda: torch.linalg.eigh(spd), EIGH_FACTOR * n**3),
    ]
    out = []
    for name, fn, flops in cases:
        seconds = C.best_seconds(fn, repeats)
        out.append({"op": name, "seconds": seconds, "gflops": flops / seconds * 1e-9,
                    "flops": flops})
    return out


def report_limit(rates, prims, n_prim):
    """Print the matmul and primitive rates; return the limit (best matmul GFLOP/s)."""
    rows = [[f"{n}", C.fmt_seconds(r["seconds"]), f"{r['gflops']:.2f}"] for n, r in rates.items()]
    C.print_table("The limit: float64 torch.mm on one thread (best of the timed runs)",
                  ["n", "best s", "GFLOP/s"], rows,
                  notes=["GFLOP/s = 2 n^3 / t"])
    limit = max(r["gflops"] for r in rates.values())
    rows = [[p["op"], C.fmt_seconds(p["seconds"]), f"{p['flops'] * 1e-9:.3f}",
             f"{p['gflops']:.2f}", f"{p['gflops'] / limit:.0%}"] for p in prims]
    C.print_table(f"Dense primitives at n = {n_prim} (float64, one thread, best of the timed "
                  "runs)", ["op", "best s", "GFLOP (model)", "GFLOP/s", "of matmul limit"],
                  rows, align="lrrrr",
                  notes=[f"eigh counted as {EIGH_FACTOR:g} n^3 (see the script docstring)"])
    return limit


def report_profile(P, rec, limit, headline):
    """Print wall time, flops, achieved rate and the per-op breakdown of the profiled P."""
    info = rec["info"]
    prof = info["profile"]
    wall = C.median(rec["times"]["total"])
    total = prof["total_flops"]
    gvl_total = total + (EIGH_FACTOR_GVL - EIGH_FACTOR) * prof["eigh_n3"]
    n_layers = rec.get("n_layers", 2)
    per_unit = total / (prof["n_iter"] * max(n_layers, 1) * P**3)
    achieved = total / wall * 1e-9
    title = (f"Headline: 10-sweep fit, make_friedman1 P={P}, n_layers={n_layers}, "
             "default settings, one CPU thread" if headline else
             f"Profiled fit (--quick: P={P}, no target), make_friedman1, n_layers={n_layers}")
    print()
    print(title)
    print(f"  wall time (unprofiled fit):      {wall:.2f} s")
    print(f"  flops (model, eigh = {EIGH_FACTOR:g} n^3):     {total * 1e-9:.2f} GFLOP"
          f"  (= {per_unit:.1f} P^3 per sweep per hidden layer; the design's estimate 20-30)")
    print(f"  flops with eigh = {EIGH_FACTOR_GVL:g} n^3 (GVL):   {gvl_total * 1e-9:.2f} GFLOP")
    print(f"  achieved rate:                   {achieved:.2f} GFLOP/s = "
          f"{achieved / limit:.1%} of the matmul limit {limit:.2f} GFLOP/s "
          f"(eigh = {EIGH_FACTOR_GVL:g} n^3: {gvl_total / wall * 1e-9:.2f} GFLOP/s, "
          f"{gvl_total / wall * 1e-9 / limit:.1%})")
    print(f"  profiled fit wall time:          {prof['wall_profiled']:.2f} s "
          f"(profiler overhead {prof['wall_profiled'] / wall - 1:+.0%}); aten self time "
          f"{prof['self_total']:.2f} s, outside aten ops (Python, dispatch, profiler) "
          f"{max(prof['wall_profiled'] - prof['self_total'], 0.0):.2f} s")
    if prof["uncounted"]:
        print(f"  dense-looking ops without a flop count: {', '.join(prof['uncounted'])}")
    if headline:
        ok = wall < TARGET_SECONDS
        print(f"  {C.verdict(ok):4s}  P={P} 10-sweep fit: {wall:.2f} s (target < "
              f"{TARGET_SECONDS:g} s)")

    ops = prof["ops"]
    self_total = prof["self_total"] or float("nan")
    categories = {}
    for item in ops.values():
        cat = categories.setdefault(item["category"], {"self_s": 0.0, "flops": 0.0})
        cat["self_s"] += item["self_s"]
        cat["flops"] += item["flops"]
    rows = []
    for name, cat in sorted(categories.items(), key=lambda kv: -kv[1]["self_s"]):
        rate = cat["flops"] / cat["self_s"] * 1e-9 if cat["self_s"] > 0 and cat["flops"] else None
        rows.append([name, f"{cat['self_s']:.2f}", f"{cat['self_s'] / self_total:.0%}",
                     f"{cat['flops'] * 1e-9:.3g}" if cat["flops"] else "-",
                     f"{rate:.3g}" if rate else "-",
                     f"{rate / limit:.0%}" if rate else "-"])
    outside = max(prof["wall_profiled"] - prof["self_total"], 0.0)
    rows.append(["outside aten ops", f"{outside:.2f}", "-", "-", "-", "-"])
    C.print_table(f"Time by op type (profiled fit, self CPU time, P={P})",
                  ["op type", "self s", "share", "GFLOP", "GFLOP/s", "of limit"], rows,
                  align="lrrrrr",
                  notes=["share = of the total aten self time; GFLOP/s = counted flops / self "
                         "time of that type; profiler overhead inflates small ops"])
    rows = []
    for name, item in sorted(ops.items(), key=lambda kv: -kv[1]["self_s"])[:15]:
        rate = item["flops"] / item["self_s"] * 1e-9 if item["self_s"] > 0 and item["flops"] \
            else None
        rows.append([name, str(item["calls"]), f"{item['self_s']:.3f}",
                     f"{item['self_s'] / self_total:.1%}",
                     f"{item['flops'] * 1e-9:.2f}" if item["flops"] else "-",
                     f"{rate:.2f}" if rate else "-"])
    C.print_table(f"Top 15 aten ops by self CPU time (profiled fit, P={P})",
                  ["op", "calls", "self s", "share", "GFLOP", "GFLOP/s"], rows, align="lrrrrr")
    return {"wall": wall, "gflop": total * 1e-9, "gflop_gvl": gvl_total * 1e-9,
            "gflops": achieved, "fraction_of_limit": achieved / limit,
            "p3_per_sweep_layer": per_unit}


def report_scaling(args, records):
    """Print the time-against-P table; return the least-squares exponent."""
    rows, sizes, times = [], [], []
    previous = None
    for P, rec in records.items():
        if rec.get("status") != "ok":
            note = rec.get("status", "?")
            if note == "DNF":
                note = f"DNF ({rec.get('dnf', '')}: {rec.get('note', '')})"
            elif note == "error":
                note = "error: " + rec.get("note", "")[:60]
            rows.append([str(P), note, "", "", "", ""])
            previous = None
            continue
        t = C.median(rec["times"]["total"])
        local = (math.log(t / previous[1]) / math.log(P / previous[0])) if previous else None
        rows.append([str(P), C.fmt_seconds(t), f"{t / rec['info']['n_iter']:.3f}",
                     "-" if local is None else f"{local:.2f}",
                     C.fmt_bytes(rec["info"].get("peak_rss_fit", rec["peak_rss"])),
                     f"{rec['info']['objective']:.4f}"])
        sizes.append(P)
        times.append(t)
        previous = (P, t)
    fitted = F.slope(sizes, times)
    C.print_table("Scaling: 10-sweep fit time against P (make_friedman1, noise 0.5, "
                  "n_layers=2, one CPU thread)",
                  ["P", "fit s", "s / sweep", "local slope", "peak RSS", "objective"], rows,
                  notes=[f"one child process per P: warm-up fit at P={args.warmup_p}, then "
                         f"{args.repeats} timed fit(s) (median shown)",
                         "local slope = log(t_P / t_prev) / log(P / P_prev)",
                         "peak RSS = the child's ru_maxrss right after the timed fit (imports "
                         "included, before any profiling)",
                         f"least-squares slope of log(time) vs log(P) over {len(sizes)} "
                         f"points: {fitted:.2f} (3 = dense O(P^3))"])
    print(f"  info  scaling exponent (least squares, P in {sizes}): {fitted:.2f}")
    return fitted


def main(argv=None):
    """Parse the options, measure the limit, run one child cell per P, report."""
    if C.run_child_cell(setup, run_once, warmup=warmup):
        return
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true",
                   help="P in {125, 250, 500}, profile P=500, no P=1000 headline")
    p.add_argument("--sizes", default=None, help="comma list of P (default 250,500,1000,2000)")
    p.add_argument("--n-layers", type=int, default=2, help="hidden Gram layers (2)")
    p.add_argument("--matmul-repeats", type=int, default=5,
                   help="timed matmuls per n after a warm-up; the best counts (5)")
    C.add_timing_arguments(p, unit="fit")
    p.set_defaults(repeats=1)
    p.add_argument("--json", default=None, help="also write all records to this JSON file")
    args = p.parse_args(argv)
    sizes = QUICK_SIZES if args.quick else FULL_SIZES
    if args.sizes:
        sizes = tuple(int(v) for v in args.sizes.split(",") if v)
    sizes = tuple(sorted(sizes))
    args.warmup_p = min(sizes)
    args.budget = args.cutoff if args.budget is None else args.budget
    headline = HEADLINE_P in sizes and not args.quick
    profile_p = HEADLINE_P if headline else max(sizes)
    C.print_header("dkp/cost.py  -  DeepKernelProcessRegressor fit cost: wall time, GFLOP/s, "
                   "scaling in P (float64, one CPU thread)", args)

    print("  timing torch.mm ...", flush=True)
    rates = matmul_rates((1000, 2000), args.matmul_repeats)
    print(f"  timing dense primitives at n={profile_p} ...", flush=True)
    prims = primitive_rates(profile_p, 3)
    limit = report_limit(rates, prims, profile_p)

    records = {}
    for P in sizes:
        cell = {"P": P, "warmup_P": args.warmup_p, "n_layers": args.n_layers,
                "profile": P == profile_p, "repeats": args.repeats, "budget": args.budget}
        label = f"P={P}" + (" (+ profiled fit)" if cell["profile"] else "")
        print(f"  running {label} ...", flush=True)
        records[P] = C.run_cell(SCRIPT, cell, cutoff=args.cutoff, label=label)
        records[P]["n_layers"] = args.n_layers

    summary = None
    rec = records.get(profile_p, {})
    if rec.get("status") == "ok":
        summary = report_profile(profile_p, rec, limit, headline)
    else:
        print(f"\n  P={profile_p} fit did not finish ({rec.get('status')}: {rec.get('note')}); "
              "no flop count")
        if headline:
            print(f"  {C.verdict(False):4s}  P={profile_p} 10-sweep fit: "
                  f"{rec.get('status')} (target < {TARGET_SECONDS:g} s)")
    exponent = report_scaling(args, records)
    print(flush=True)

    if args.json:
        F.write_json(args.json, {**F.run_info(args),
                                 "matmul": {str(k): v for k, v in rates.items()},
                                 "primitives": prims, "limit_gflops": limit,
                                 "profile_P": profile_p, "headline": headline,
                                 "summary": summary, "exponent": exponent,
                                 "cells": {str(k): v for k, v in records.items()}})


if __name__ == "__main__":
    main()
