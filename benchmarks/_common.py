"""Process, thread, timing and table machinery shared by every ``benchmarks/*.py`` script.

Import this module FIRST in every benchmark script (before numpy, scipy, sklearn or
torch): it pins every thread pool to one thread by setting the OpenMP / BLAS
environment variables before any numerical library is loaded, then limits torch and
the already-loaded BLAS/OpenMP pools with ``torch.set_num_threads(1)`` and
``threadpoolctl.threadpool_limits(1)``.

It also holds the small machinery the scripts share:

* :func:`print_header` prints versions, CPU, RAM, dtype and the thread counts;
* :func:`run_cell` runs ONE benchmark configuration in a fresh child process (the
  script itself, re-invoked with ``--_cell JSON``).  The child does one warm-up run,
  then up to ``repeats`` timed runs, and reports the times and its own peak RSS
  (``ru_maxrss``), so every row of a table gets a clean process and an honest
  peak-memory figure.  The parent kills the child (by its pid) when a single run
  exceeds the cut-off and reports "DNF";
* :func:`cell_main` is the child side of :func:`run_cell`;
* :func:`format_table` / :func:`print_table` print aligned text tables;
* :func:`recorded`, :func:`failure_notes`, :func:`rotated`, :func:`parse_choices` and
  :func:`load_average` serve the scripts that fit several models per seed in one process
  (``dkp/table1.py``, ``qep/*.py``);
* :class:`Timer` and :func:`best_seconds` time code in this process; :func:`available`
  says whether optional peers (GPyTorch, BoTorch) can be imported.

The statistics, number formatting and output files (JSON, CSV) are in ``_fits.py``.

Running this file directly does nothing except print what it is (``make bench``
runs every ``benchmarks/*.py``).
"""

import os
import sys

_THREAD_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
               "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS", "BLIS_NUM_THREADS")
_LATE = [m for m in ("numpy", "scipy", "torch", "sklearn") if m in sys.modules]
for _var in _THREAD_ENV:
    os.environ[_var] = "1"

import contextlib  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import platform  # noqa: E402
import queue  # noqa: E402
import resource  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
import warnings  # noqa: E402

import numpy as np  # noqa: E402
import threadpoolctl  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)
try:
    torch.set_num_interop_threads(1)
except RuntimeError:  # already set, or parallel work already started
    pass
_LIMITER = threadpoolctl.threadpool_limits(limits=1)
torch.set_default_dtype(torch.float64)
if _LATE:
    warnings.warn(f"{_LATE} were imported before benchmarks/_common.py; their thread pools "
                  "are limited by threadpoolctl but the env vars came too late.")

CELL_PREFIX = "@@CELL "


# ---------------------------------------------------------------- environment


def total_ram_bytes():
    """Physical RAM, or the cgroup memory limit when that is smaller."""
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(path) as fh:
                text = fh.read().strip()
            if text.isdigit():
                ram = min(ram, int(text))
        except OSError:
            pass
    return ram


def cpu_model():
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def current_rss_bytes():
    """Resident set size of this process now (Linux /proc), or NaN."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return float("nan")


def peak_rss_bytes():
    """Peak RSS of this process so far (``ru_maxrss`` is in KiB on Linux)."""
    scale = 1 if sys.platform == "darwin" else 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale


def thread_summary():
    """Thread counts of torch and of every BLAS/OpenMP pool loaded in this process."""
    pools = {}
    for info in threadpoolctl.threadpool_info():
        key = f"{info['internal_api']}({os.path.basename(info['filepath']).split('.')[0]})"
        pools[key] = info["num_threads"]
    return {
        "torch.get_num_threads": torch.get_num_threads(),
        "torch.get_num_interop_threads": torch.get_num_interop_threads(),
        "threadpoolctl": pools,
        "env": {v: os.environ.get(v) for v in _THREAD_ENV[:3]},
    }


def format_threads(summary):
    pools = ", ".join(f"{k}={v}" for k, v in summary["threadpoolctl"].items())
    env = " ".join(f"{k}={v}" for k, v in summary["env"].items())
    return (f"torch threads={summary['torch.get_num_threads']} "
            f"(interop {summary['torch.get_num_interop_threads']}); pools: {pools}; {env}")


def versions(extra=()):
    import scipy
    import sklearn

    out = {"python": platform.python_version(), "numpy": np.__version__,
           "scipy": scipy.__version__, "scikit-learn": sklearn.__version__,
           "torch": torch.__version__}
    for name in extra:
        try:
            module = __import__(name)
            out[name] = module.__version__
        except ImportError:
            out[name] = "not installed"
    try:
        import skgpx

        out["skgpx"] = skgpx.__version__
    except ImportError:
        out["skgpx"] = "not importable"
    return out


def skgpx_revision():
    """Git commit of the working tree and whether skgpx/ has local changes."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root,
                              capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "skgpx"], cwd=root,
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"{head or 'unknown'} ({'skgpx/ modified' if dirty else 'skgpx/ clean'})"


def print_header(title, args=None, extra=(), device="cpu", dtype_note=None):
    """Print the benchmark's environment: versions, CPU, RAM, dtype, threads.

    ``dtype_note`` replaces the default dtype line ("float64 everywhere") for a script
    whose models run in another dtype, e.g. ``"deep models float32; sklearn float64"``.
    """
    print("=" * 100)
    print(title)
    print("=" * 100)
    print("versions: " + ", ".join(f"{k} {v}" for k, v in versions(extra).items()))
    print(f"commit:   {skgpx_revision()}")
    print(f"machine:  {cpu_model()}; os.cpu_count()={os.cpu_count()}; "
          f"RAM {fmt_bytes(total_ram_bytes())}; device={device}")
    if device.startswith("cuda") and torch.cuda.is_available():
        print(f"GPU:      {torch.cuda.get_device_name(device)}")
    default_note = "float64 everywhere (torch default dtype set to float64)"
    print("dtype:    " + (dtype_note if dtype_note is not None else default_note))
    print("threads:  " + format_threads(thread_summary()))
    if args is not None:
        print("options:  " + " ".join(f"--{k.replace('_', '-')}={v}"
                                      for k, v in sorted(vars(args).items())
                                      if not k.startswith("_")))
    print(f"started:  {time.strftime('%Y-%m-%d %H:%M:%S')}")
    print(flush=True)


# ---------------------------------------------------------------- formatting


def fmt_bytes(value):
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(value) >= size:
            return f"{value / size:.2f} {unit}"
    return f"{value:.0f} B"


def fmt_seconds(value):
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    if value >= 100:
        return f"{value:.0f}"
    if value >= 1:
        return f"{value:.2f}"
    if value >= 0.01:
        return f"{value:.3f}"
    return f"{value:.2e}"


def fmt_ratio(value, lower_bound=False):
    if value is None or not math.isfinite(value):
        return "-"
    text = f"{value:.1f}x" if value >= 10 else f"{value:.2f}x"
    return (">" + text) if lower_bound else text


def format_table(headers, rows, align=None):
    """Aligned plain-text table.  ``align``: string of 'l'/'r' per column."""
    rows = [["" if c is None else str(c) for c in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in rows:
        for j, cell in enumerate(row):
            widths[j] = max(widths[j], len(cell))
    align = align or "l" + "r" * (len(headers) - 1)

    def line(cells):
        return "  ".join(c.ljust(w) if a == "l" else c.rjust(w)
                         for c, w, a in zip(cells, widths, align))

    sep = "  ".join("-" * w for w in widths)
    return "\n".join([line(headers), sep] + [line(r) for r in rows])


def print_table(title, headers, rows, align=None, notes=()):
    print()
    print(title)
    print(format_table(headers, rows, align))
    for note in notes:
        print(f"  * {note}")
    print(flush=True)


def verdict(ok):
    return "PASS" if ok else "MISS"


def median(values):
    return statistics.median(values) if values else float("nan")


def load_average():
    """The 1, 5 and 15 minute load averages, as ``"0.12, 0.34, 0.56"``."""
    return ", ".join(f"{v:.2f}" for v in os.getloadavg())


def finish(title, lines):
    """The closing block of a benchmark: load average and the target verdicts of ``lines``
    under ``title``."""
    print(f"load average at end: {load_average()}")
    print()
    print(f"{title}, measured in this run:")
    for line in lines:
        print("  " + line)
    print(flush=True)


def rotated(items, k):
    """``items`` rotated left by ``k`` (the order in which to run the models of seed k, so
    that load changes on a shared machine hit every model alike)."""
    k %= len(items)
    return list(items[k:]) + list(items[:k])


def available(*modules):
    """Whether every one of ``modules`` (optional peers such as gpytorch) can be imported."""
    try:
        for name in modules:
            __import__(name)
    except ImportError:
        return False
    return True


def check_device(parser, device):
    """Refuse ``--device cuda[:N]`` where CUDA is absent, with argparse's usage error."""
    if device.startswith("cuda") and not torch.cuda.is_available():
        parser.error(f"--device {device}: CUDA is not available here")


def parse_choices(parser, text, choices, what):
    """The comma list ``text`` as a list; ``parser.error`` on a name not in ``choices``."""
    names = [name for name in text.split(",") if name]
    for name in names:
        if name not in choices:
            parser.error(f"unknown {what} {name!r}; choose from {','.join(choices)}")
    return names


# ---------------------------------------------------------------- in-process fits


@contextlib.contextmanager
def recorded(rec):
    """``with recorded(rec): fit ...``: never raises.  An exception ends the block and
    becomes ``rec["error"]`` (``"Type: message"``) and ``rec["traceback"]``; the warnings
    the block raised are recorded (not shown) as ``rec["warnings"]``, a list of
    ``"Category: message"`` strings (messages cut at 160 characters)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            yield rec
        except Exception as exc:  # noqa: BLE001  (reported by the caller)
            rec["error"] = f"{type(exc).__name__}: {exc}"
            rec["traceback"] = traceback.format_exc()
    rec["warnings"] = [f"{w.category.__name__}: {str(w.message)[:160]}" for w in caught]


def failure_notes(per_key, top=2, failed="{key}: {n} failed fit(s), first: {first}"):
    """Lines on the errors and the ``top`` most frequent warnings of each key's records
    (``{key: [record, ...]}`` with the ``"error"`` and ``"warnings"`` of :func:`recorded`);
    empty when everything was clean.  ``failed`` formats the error line from ``key``, ``n``
    (failed records), ``total`` (records) and ``first`` (the first error, 160 characters)."""
    lines = []
    for key, recs in per_key.items():
        errors = [r["error"] for r in recs if r["error"]]
        if errors:
            lines.append(failed.format(key=key, n=len(errors), total=len(recs),
                                       first=errors[0][:160]))
        counts = {}
        for r in recs:
            for w in r["warnings"]:
                counts[w] = counts.get(w, 0) + 1
        for text, count in sorted(counts.items(), key=lambda kv: -kv[1])[:top]:
            lines.append(f"{key}: warning x{count}: {text}")
    return lines


# ---------------------------------------------------------------- timing


def sync(device):
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()


class Timer:
    """``with Timer(device) as t: ...`` then ``t.seconds`` (synchronises CUDA)."""

    def __init__(self, device="cpu"):
        self.device = device
        self.seconds = float("nan")

    def __enter__(self):
        sync(self.device)
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc):
        sync(self.device)
        self.seconds = time.perf_counter() - self._start


def best_seconds(fn, repeats):
    """Best of ``repeats`` timed calls of ``fn()`` after one warm-up call (no CUDA sync)."""
    fn()
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


# ---------------------------------------------------------------- child cells


def _emit(kind, payload):
    print(CELL_PREFIX + kind + " " + json.dumps(payload), flush=True)


def cell_main(config, setup, run_once, warmup=None, device="cpu"):
    """Child side of :func:`run_cell`.

    ``setup(config) -> state`` (untimed: data, models that are not part of the timed
    region); ``run_once(state) -> dict`` runs the timed operation once and returns at
    least ``{"total": seconds}`` plus optional named sub-timings (e.g. "build", "eval")
    and, under the key "info", anything to report (checks, metrics).  ``warmup(state)``
    defaults to ``run_once``; ``warmup=False`` skips it.  Emits ``RUN`` lines as it goes
    and one ``RESULT`` line.
    """
    try:
        if device.startswith("cuda"):
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False
        state = setup(config)
        baseline = current_rss_bytes()
        _emit("READY", {"baseline_rss": baseline})
        repeats, budget = config["repeats"], config["budget"]
        start = time.perf_counter()
        first = {} if warmup is False else (warmup or run_once)(state)
        t_warm = time.perf_counter() - start
        if warmup is not False:
            _emit("RUN", {"i": 0, "warmup": True, "seconds": t_warm})
        runs, info = [], first.get("info", {}) if isinstance(first, dict) else {}
        reduced = False
        for i in range(repeats):
            if runs and time.perf_counter() - start > budget:
                reduced = True
                break
            result = run_once(state)
            info = result.pop("info", info)
            runs.append(result)
            _emit("RUN", {"i": i + 1, "warmup": False, "seconds": result["total"]})
        if device.startswith("cuda"):
            info["cuda_max_memory_allocated"] = torch.cuda.max_memory_allocated()
        keys = sorted({k for r in runs for k in r})
        _emit("RESULT", {
            "times": {k: [r[k] for r in runs if k in r] for k in keys},
            "warmup_seconds": t_warm,
            "reduced": reduced,
            "peak_rss": peak_rss_bytes(),
            "baseline_rss": baseline,
            "threads": thread_summary(),
            "info": info,
        })
    except Exception as exc:  # report, do not hang the parent
        _emit("ERROR", {"error": f"{type(exc).__name__}: {exc}",
                        "traceback": traceback.format_exc()})
        sys.exit(1)


def _reader(stream, out_queue):
    for line in iter(stream.readline, ""):
        out_queue.put(line)
    out_queue.put(None)


def rss_of(pid):
    """Current RSS of another process (Linux /proc), or 0."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def run_cell(script, config, *, cutoff, setup_timeout=None, verbose=True, label="",
             mem_limit=None):
    """Run one configuration in a fresh child process (``script --_cell JSON``).

    Returns a dict: ``status`` in {"ok", "DNF", "error"}, the child's ``RESULT``
    payload merged in, ``wall`` (child wall time) and ``note``.  A single run
    (warm-up included) longer than ``cutoff`` seconds kills the child: "DNF".  So does
    a child RSS above ``mem_limit`` bytes (default: 75 % of RAM; polled every 0.2 s),
    rather than letting the kernel's OOM killer take down the whole benchmark.
    """
    mem_limit = 0.75 * total_ram_bytes() if mem_limit is None else mem_limit
    setup_timeout = setup_timeout or max(cutoff, 120)
    cmd = [sys.executable, script, "--_cell", json.dumps(config)]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ))
    lines = queue.Queue()
    threading.Thread(target=_reader, args=(proc.stdout, lines), daemon=True).start()
    err_lines = []
    threading.Thread(target=lambda: err_lines.extend(iter(proc.stderr.readline, "")),
                     daemon=True).start()
    deadline = time.perf_counter() + setup_timeout
    result = {"status": "error", "note": "child produced no result"}
    runs_seen, max_rss = 0, 0
    while True:
        timeout = deadline - time.perf_counter()
        try:
            line = lines.get(timeout=min(max(timeout, 0.01), 0.2))
        except queue.Empty:
            rss = rss_of(proc.pid)
            max_rss = max(max_rss, rss)
            if rss > mem_limit:
                proc.kill()  # the child we started, by its pid
                proc.wait()
                result = {"status": "DNF", "dnf": "memory", "peak_rss_seen": max_rss,
                          "note": (f"RSS {fmt_bytes(rss)} exceeded the memory cut-off "
                                   f"{fmt_bytes(mem_limit)} (75% of RAM)")}
                break
            if time.perf_counter() < deadline:
                continue
            proc.kill()  # the child we started, by its pid
            proc.wait()
            what = "setup" if runs_seen == 0 and "ready" not in result else "a run"
            result = {"status": "DNF", "dnf": "time",
                      "note": f"{what} exceeded the {cutoff:.0f} s cut-off"}
            break
        if line is None:
            break
        if not line.startswith(CELL_PREFIX):
            continue
        kind, _, payload = line[len(CELL_PREFIX):].partition(" ")
        payload = json.loads(payload)
        if kind == "READY":
            result["ready"] = True
            deadline = time.perf_counter() + cutoff
        elif kind == "RUN":
            runs_seen += 1
            if verbose:
                tag = "warm-up" if payload["warmup"] else f"run {payload['i']}"
                print(f"    [{label}] {tag}: {payload['seconds']:.3f} s", flush=True)
            deadline = time.perf_counter() + cutoff
        elif kind == "RESULT":
            result = {"status": "ok", "note": "", **payload}
        elif kind == "ERROR":
            result = {"status": "error", "note": payload["error"]}
            if verbose:
                print(payload["traceback"], file=sys.stderr)
    proc.wait()
    result["wall"] = time.perf_counter() - t0
    if result["status"] == "error" and err_lines and verbose:
        print("".join(err_lines[-20:]), file=sys.stderr)
    return result


def child_config():
    """Return the JSON config when this process is a child cell, else None."""
    if "--_cell" in sys.argv:
        return json.loads(sys.argv[sys.argv.index("--_cell") + 1])
    return None


def run_child_cell(setup, run_once, warmup=None):
    """Run this process as the child cell that :func:`run_cell` started, if it is one.

    Returns True when it was (the script's ``main`` then returns), False otherwise.
    The cell's device comes from its config (``"cpu"`` when it names none).
    """
    cfg = child_config()
    if cfg is None:
        return False
    cell_main(cfg, setup, run_once, warmup=warmup, device=cfg.get("device", "cpu"))
    return True


if __name__ == "__main__":
    print("benchmarks/_common.py: shared helpers (nothing to run). "
          + format_threads(thread_summary()))


def add_timing_arguments(parser, unit="run"):
    """The --repeats/--cutoff/--budget options shared by the timing scripts."""
    parser.add_argument("--repeats", type=int, default=5,
                        help=f"timed {unit}s after 1 warm-up (5)")
    parser.add_argument("--cutoff", type=float, default=600.0,
                        help=f"seconds: a single {unit} longer than this is killed -> DNF (600)")
    parser.add_argument("--budget", type=float, default=None,
                        help="seconds per cell after which no further repeat starts "
                             "(default: --cutoff)")
