"""Cost of ONE attention layer against the token count N: softmax, KEP-SVGP and SGPA.

Forward + backward time of a single attention layer on tokens ``Z`` of shape (B, N, C),
B = 8, C = 64, h = 4 heads, KSVD rank s = 10, for N in {64, 256, 1024, 4096}:

* ``softmax``: ``skgpx.kepsvgp._model._SoftmaxAttention(64, 4, dropout=0.0)``, loss
  ``out.sum()``;
* ``kep-add``: ``KEPAttention(64, 4, 10, N, projection="data", merge="add")``;
* ``kep-concat``: the same with ``merge="concat"`` (full token-mixing W1, 2N -> N);
* ``kep-concat-lr``: ``merge="concat", concat_rank=10`` (low-rank W1);
  the KEP loss is ``out.sum() + kl + ksvd`` (the layer's three outputs);
* ``sgpa``: a minimal *standard* SGPA layer (Chen & Li, "Calibrating Transformers via Sparse
  Gaussian Processes", ICLR 2023), written below (:class:`SGPAttention`): per head, queries,
  keys and values from linear maps of Z; the exponential (squared-distance) kernel
  ``k(x, x') = sf2 exp(-||x - x'||^2 / (2 l^2))`` with learnable ``sf2`` and ``l`` per head;
  the keys are the inducing locations, the values the variational mean ``m_u = v`` and
  ``S_u = L_S L_S^T`` with an amortised lower-triangular ``L_S`` (N x N per head, computed from
  Z, shared by the d_h output dimensions of the head).  Posterior at the queries:
  mean ``K_qk K_kk^-1 v``, covariance ``K_qq - K_qk K_kk^-1 K_kq + K_qk K_kk^-1 S_u K_kk^-1 K_kq``;
  one draw per output dimension through the Cholesky factor of the FULL jittered N x N
  posterior covariance (jitter 1e-4 I, escalated tenfold by ``skgpx.linalg.jittered_cholesky``
  when a factorisation fails, as the authors' code does; retries are part of the timed cost).
  Loss ``out.sum() + kl`` with the KL of q(u) = N(v_d, S_u) from the prior N(0, K_kk),
  summed over heads and output dimensions, averaged over the batch.  Cost: two N x N
  Cholesky factorisations, three N x N triangular solves and three N x N products per head,
  O(N^3).

Protocol: everything runs in this one process, one model and one N at a time (sizes in
increasing order).  Each cell builds its module after ``torch.manual_seed(0)``, draws
``Z = torch.randn(B, N, C)`` (requires_grad, so the backward also gives dZ as inside a
network), casts both to ``--dtype`` (float32 by default, as a deep-learning layer) and
``--device``, does one untimed warm-up forward + backward, then ``--repeats`` timed ones
(gradients cleared outside the timed region; ``_common.Timer`` synchronises CUDA; TF32 is
off on CUDA); the table gives the median.  Threads are pinned to one by ``_common``.

Skips, never silent (each cell prints why):

* cut-off: a single run cannot be interrupted in-process; once one run of a model took
  longer than ``--cutoff`` seconds, its remaining repeats at that N are dropped (a warm-up
  over the cut-off is followed by exactly one timed run, the measurement; the cell is marked
  ``*``) and all its larger N are skipped ("skipped").  A model whose time extrapolated to
  the next N with its nominal exponent (softmax 2, SGPA 3, KEP add / concat-lr 1, KEP
  concat 2) exceeds 10 x the cut-off is skipped as well;
* memory: the peak of a model's N x N tensors is estimated as a count of B h N^2 tensors
  (softmax 4: the saved attention weights, the scores and two gradients; SGPA 20: about 13
  saved for the backward - the three kernel matrices and their pre-activations, both
  Cholesky factors, V1, V2, L_S, V3, W - plus backward temporaries).  A cell whose
  estimate exceeds ``--max-memory-gb`` (CPU default 6 GiB; CUDA default 85 % of the device)
  is "skipped (memory)": on CPU in float32 SGPA at N = 2048 is estimated at 10 GiB, at
  N = 4096 at 40 GiB; softmax at N = 4096 at 8 GiB (``--max-memory-gb 10`` runs it);
* out of memory: ``torch.OutOfMemoryError`` (or a RuntimeError about memory) is caught and
  printed "OOM"; larger N of that model are skipped.

Targets (printed with PASS/MISS):

* KEP add is linear in N: least-squares slope of log(time) against log(N) over the sizes
  N >= 256 at most 1.2 (small N is overhead-dominated; the slopes over all sizes and over
  the two largest sizes are printed too);
* SGPA / KEP add >= 4x at N = 1024;
* (the per-epoch KEP / softmax ratio <= 1.15 on the digits protocol is measured by
  ``benchmarks/kepsvgp/digits.py``, not here).

``--selftest`` checks the SGPA layer on a tiny case (N = 5, float64): output shape, finite
gradients for every parameter and the input, and the posterior mean, covariance and KL
against a direct dense computation (explicit pairwise distances, ``torch.linalg.inv``,
``torch.distributions``).

Usage::

    .venv/bin/python benchmarks/kepsvgp/timing.py --quick        # N in {64, 256}, 2 repeats
    .venv/bin/python benchmarks/kepsvgp/timing.py                # N in {64, 256, 1024, 4096}
    .venv/bin/python benchmarks/kepsvgp/timing.py --device cuda --dtype float64
    .venv/bin/python benchmarks/kepsvgp/timing.py --selftest

Records go to ``--json`` / ``--csv`` (default ``benchmarks/results/kepsvgp_timing.{json,csv}``,
git-ignored).
"""

import os  # noqa: I001  (the shared kit's folder on the path, the kit, then numpy)
import sys

if (kit := os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) not in sys.path:
    sys.path.insert(0, kit)
import _common as C  # noqa: I001  (first: pins the threads before numpy is imported)
import _fits as F

import argparse
import gc
import math
import time

import torch
from torch import nn

from skgpx.kernels import unit_stationary_kernel
from skgpx.linalg import jittered_cholesky

B, WIDTH, HEADS, RANK = 8, 64, 4, 10
FULL_SIZES = (64, 256, 1024, 4096)
QUICK_SIZES = (64, 256)
MODELS = ("softmax", "kep-add", "kep-concat", "kep-concat-lr", "sgpa")
LABELS = {"softmax": "softmax", "kep-add": "KEP add", "kep-concat": "KEP concat",
          "kep-concat-lr": "KEP concat lr", "sgpa": "SGPA"}
# nominal exponent of the time in N (for the extrapolation guard only)
NOMINAL_EXPONENT = {"softmax": 2, "kep-add": 1, "kep-concat": 2, "kep-concat-lr": 1, "sgpa": 3}
# B h N^2 tensors alive at the peak of forward + backward (rough counts, see the docstring)
NXN_TENSORS = {"softmax": 4, "sgpa": 20}
EXTRAPOLATION_FACTOR = 10.0
SLOPE_FROM = 256  # the target slope uses N >= this
SLOPE_TARGET = 1.2
RATIO_N, RATIO_TARGET = 1024, 4.0
GiB = 1024.0**3


# ---------------------------------------------------------------- the SGPA layer


def sgpa_kernel(x, y, log_sf2, log_lengthscale):
    """Per-head squared-exponential kernel ``sf2 exp(-||x - y||^2 / (2 l^2))``: x (..., h, N, d),
    y (..., h, M, d), per-head ``log_sf2`` and ``log_lengthscale`` (h,) -> (..., h, N, M)."""
    return unit_stationary_kernel(x, y, log_lengthscale.exp()[:, None, None], log_sf2.exp(),
                                  "rbf")


def sgpa_cholesky(A, jitter):
    """Lower Cholesky factor of ``A + jitter I``, with the library's escalation when that
    fails (a warning names the extra jitter).  Returns (factor, jitter used)."""
    factor, extra = jittered_cholesky(A, base_jitter=jitter, name="SGPA covariance")
    return factor, jitter + extra


class SGPAttention(nn.Module):
    """Minimal standard SGPA layer (Chen & Li, ICLR 2023): ``forward(Z) -> (out, kl, None)``.

    Per head (``d_h = C / h``): queries ``q``, keys ``k`` and values ``v`` (B, h, N, d_h) from
    one linear map of Z; the keys are the inducing locations and ``v`` the variational mean
    of the inducing values of each of the d_h output dimensions; their covariance
    ``S_u = L_S L_S^T`` is shared by the d_h dimensions, with the amortised lower-triangular

    .. math::

        L_S = \\mathrm{diag}(\\mathrm{softplus}(c) + 10^{-3})
              + \\mathrm{tril}(a a^T, -1) / \\sqrt{N d_h},

    ``a`` (B, h, N, d_h) and ``c`` (B, h, N) from a second linear map of Z.  The layer output
    is one draw of the posterior at the queries per output dimension, through the Cholesky
    factor of the full (jittered) N x N posterior covariance, then the output linear map.
    """

    def __init__(self, d_model, n_heads, jitter=1e-4):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} must be divisible by n_heads={n_heads}.")
        self.n_heads, self.d_head, self.jitter = n_heads, d_model // n_heads, jitter
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.cov_factor = nn.Linear(d_model, d_model + n_heads)  # a (d_h per head) and c
        self.out = nn.Linear(d_model, d_model)
        self.log_sf2 = nn.Parameter(torch.zeros(n_heads))
        # l^2 = d_h: squared distances of the initial q, k are O(d_h)
        self.log_lengthscale = nn.Parameter(torch.full((n_heads,), 0.5 * math.log(self.d_head)))
        self.last_jitter = (math.nan, math.nan)

    def _split(self, Z):
        Bz, N, Cz = Z.shape
        h, d = self.n_heads, self.d_head
        q, k, v = self.qkv(Z).view(Bz, N, 3, h, d).permute(2, 0, 3, 1, 4)  # (B, h, N, d)
        fac = self.cov_factor(Z)
        a = fac[..., :Cz].view(Bz, N, h, d).transpose(1, 2)  # (B, h, N, d)
        c = fac[..., Cz:].transpose(1, 2)  # (B, h, N)
        tril = torch.tril(a @ a.transpose(-1, -2), diagonal=-1) / math.sqrt(N * d)
        L_S = tril + torch.diag_embed(nn.functional.softplus(c) + 1e-3)
        return q, k, v, L_S

    def posterior(self, Z):
        """Posterior moments at the queries and the KL: a dict with ``mean`` (B, h, N, d_h),
        ``cov`` (B, h, N, N) (jitter not included), ``kl`` (scalar) and the pieces used."""
        q, k, v, L_S = self._split(Z)
        N, d = q.shape[-2], self.d_head
        K_qq = sgpa_kernel(q, q, self.log_sf2, self.log_lengthscale)
        K_qk = sgpa_kernel(q, k, self.log_sf2, self.log_lengthscale)
        K_kk = sgpa_kernel(k, k, self.log_sf2, self.log_lengthscale)
        L_k, jitter_kk = sgpa_cholesky(K_kk, self.jitter)
        V1 = torch.linalg.solve_triangular(L_k, K_qk.transpose(-1, -2), upper=False)
        V2 = torch.linalg.solve_triangular(L_k.transpose(-1, -2), V1, upper=True)  # K^-1 K_kq
        white_v = torch.linalg.solve_triangular(L_k, v, upper=False)  # L_k^-1 v
        mean = V1.transpose(-1, -2) @ white_v  # K_qk K_kk^-1 v
        V3 = V2.transpose(-1, -2) @ L_S  # K_qk K_kk^-1 L_S
        cov = K_qq - V1.transpose(-1, -2) @ V1 + V3 @ V3.transpose(-1, -2)
        # KL(N(v_d, S_u) || N(0, K_kk)) summed over the d_h output dims and heads, batch mean
        W = torch.linalg.solve_triangular(L_k, L_S, upper=False)  # L_k^-1 L_S
        logdet_k = 2.0 * L_k.diagonal(dim1=-2, dim2=-1).log().sum(-1)
        logdet_s = 2.0 * L_S.diagonal(dim1=-2, dim2=-1).log().sum(-1)
        kl = 0.5 * (d * W.pow(2).sum((-2, -1)) + white_v.pow(2).sum((-2, -1))
                    + d * (logdet_k - logdet_s - N))
        return {"mean": mean, "cov": cov, "kl": kl.sum(-1).mean(), "v": v, "L_S": L_S,
                "K_qq": K_qq, "K_qk": K_qk, "K_kk": K_kk, "jitter_kk": jitter_kk}

    def forward(self, Z, eps=None):
        """One posterior draw per output dimension: ``(out (B, N, C), kl, None)``."""
        Bz, N, Cz = Z.shape
        post = self.posterior(Z)
        L_post, jitter_post = sgpa_cholesky(post["cov"], self.jitter)
        self.last_jitter = (post["jitter_kk"], jitter_post)
        if eps is None:
            eps = torch.randn_like(post["mean"])
        sample = post["mean"] + L_post @ eps  # (B, h, N, d_h)
        return self.out(sample.transpose(1, 2).reshape(Bz, N, Cz)), post["kl"], None


def selftest():
    """SGPA on a tiny case (float64): shape, gradients, posterior and KL against dense
    formulas computed independently."""
    torch.manual_seed(0)
    Bt, N, Ct, h = 2, 5, 8, 2
    layer = SGPAttention(Ct, h).double()
    with torch.no_grad():  # non-trivial hyperparameters
        layer.log_sf2.copy_(torch.tensor([0.3, -0.2]))
        layer.log_lengthscale.copy_(torch.tensor([0.1, 0.4]))
    Z = torch.randn(Bt, N, Ct, dtype=torch.float64, requires_grad=True)
    out, kl, extra = layer(Z)
    ok = out.shape == (Bt, N, Ct) and extra is None and kl.ndim == 0
    print(f"  output shape {tuple(out.shape)} (expected {(Bt, N, Ct)}), "
          f"kl {float(kl.detach()):.4f}: {'ok' if ok else 'WRONG'}")
    (out.sum() + kl).backward()
    missing = [n for n, p in layer.named_parameters()
               if p.grad is None or not torch.isfinite(p.grad).all() or p.grad.abs().sum() == 0]
    grads_ok = not missing and Z.grad is not None and bool(torch.isfinite(Z.grad).all())
    print(f"  gradients: {'ok' if grads_ok else 'MISSING/NON-FINITE for ' + str(missing)} "
          f"(parameters: {', '.join(n for n, _ in layer.named_parameters())}; input too)")
    ok = ok and grads_ok

    with torch.no_grad():
        post = layer.posterior(Z)
        q, k, v, L_S = layer._split(Z)
        jitter = post["jitter_kk"]
        worst = {"mean": 0.0, "cov": 0.0, "kernel": 0.0}
        kl_direct = torch.zeros(())
        for b in range(Bt):
            for j in range(h):
                sf2 = float(layer.log_sf2[j].exp())
                l2 = float(layer.log_lengthscale[j].exp()) ** 2

                def kern(x, y):
                    diff = x[:, None, :] - y[None, :, :]
                    return sf2 * torch.exp(-(diff**2).sum(-1) / (2.0 * l2))

                qb, kb = q[b, j], k[b, j]
                Kqq, Kqk, Kkk = kern(qb, qb), kern(qb, kb), kern(kb, kb)
                Kinv = torch.linalg.inv(Kkk + jitter * torch.eye(N, dtype=torch.float64))
                S = L_S[b, j] @ L_S[b, j].T
                mean = Kqk @ Kinv @ v[b, j]
                cov = Kqq - Kqk @ Kinv @ Kqk.T + Kqk @ Kinv @ S @ Kinv @ Kqk.T
                kernel_error = float((Kqk - post["K_qk"][b, j]).abs().max())
                worst["kernel"] = max(worst["kernel"], kernel_error)
                worst["mean"] = max(worst["mean"], float((mean - post["mean"][b, j]).abs().max()))
                worst["cov"] = max(worst["cov"], float((cov - post["cov"][b, j]).abs().max()))
                prior = torch.distributions.MultivariateNormal(
                    torch.zeros(N, dtype=torch.float64),
                    Kkk + jitter * torch.eye(N, dtype=torch.float64))
                for dim in range(layer.d_head):
                    qd = torch.distributions.MultivariateNormal(v[b, j, :, dim],
                                                                scale_tril=L_S[b, j])
                    kl_direct = kl_direct + torch.distributions.kl_divergence(qd, prior) / Bt
        kl_err = abs(float(kl_direct) - float(post["kl"])) / max(1.0, abs(float(kl_direct)))
    checks = [("K_qk vs explicit pairwise kernel", worst["kernel"], 1e-12),
              ("posterior mean vs K_qk (K_kk + jI)^-1 v", worst["mean"], 1e-8),
              ("posterior covariance vs dense formula", worst["cov"], 1e-8),
              ("KL vs torch.distributions (relative)", kl_err, 1e-8)]
    for name, err, tol in checks:
        print(f"  {name}: max |diff| {err:.2e} (tol {tol:g}): {'ok' if err <= tol else 'WRONG'}")
        ok = ok and err <= tol
    print(f"  jitter used on K_kk: {jitter:g}")
    print(f"selftest: {'PASS' if ok else 'FAIL'}")
    return ok


# ---------------------------------------------------------------- timing


def make_module(name, N):
    """The attention layer ``name`` for N tokens, built after ``torch.manual_seed(0)``."""
    from skgpx.kepsvgp._attention import KEPAttention
    from skgpx.kepsvgp._model import _SoftmaxAttention

    torch.manual_seed(0)
    if name == "softmax":
        return _SoftmaxAttention(d_model=WIDTH, n_heads=HEADS, dropout=0.0)
    if name == "sgpa":
        return SGPAttention(WIDTH, HEADS)
    merge = "add" if name == "kep-add" else "concat"
    rank = RANK if name == "kep-concat-lr" else None
    return KEPAttention(WIDTH, HEADS, RANK, N, projection="data", merge=merge, concat_rank=rank)


def forward_backward(module, Z):
    """One forward and backward: loss ``out.sum()`` plus the layer's KL / KSVD terms."""
    out, kl, ksvd = module(Z)
    loss = out.sum()
    for term in (kl, ksvd):
        if term is not None:
            loss = loss + term
    loss.backward()


def is_oom(exc):
    if isinstance(exc, torch.OutOfMemoryError):
        return True
    text = str(exc).lower()
    return isinstance(exc, RuntimeError) and ("out of memory" in text or "can't allocate" in text
                                              or "not enough memory" in text)


def estimated_bytes(name, N, itemsize):
    """Rough peak of the model's N x N tensors (0 for the KEP layers)."""
    return NXN_TENSORS.get(name, 0) * B * HEADS * N * N * itemsize


def time_cell(name, N, args, device, dtype):
    """Warm-up + timed forward/backward runs of one model at N: a record dict."""
    rec = {"model": name, "N": N, "status": "ok", "times": [], "median": math.nan,
           "warmup": math.nan, "note": "", "over_cutoff": False}
    module = Z = None
    try:
        module = make_module(name, N).to(device=device, dtype=dtype)
        torch.manual_seed(0)
        Z = torch.randn(B, N, WIDTH, dtype=dtype).to(device).requires_grad_(True)
        with C.Timer(device) as timer:
            forward_backward(module, Z)
        rec["warmup"] = timer.seconds
        # a warm-up over the cut-off still gets ONE timed run (the measurement), no more
        repeats = 1 if timer.seconds > args.cutoff else args.repeats
        if repeats < args.repeats:
            rec["over_cutoff"] = True
            rec["note"] = (f"warm-up took {timer.seconds:.1f} s > cut-off {args.cutoff:g} s; "
                           "one timed run only")
        for _ in range(repeats):
            module.zero_grad(set_to_none=True)
            Z.grad = None
            with C.Timer(device) as timer:
                forward_backward(module, Z)
            rec["times"].append(timer.seconds)
            if timer.seconds > args.cutoff and len(rec["times"]) < args.repeats:
                rec["over_cutoff"] = True
                rec["note"] = (f"a run took {timer.seconds:.1f} s > cut-off "
                               f"{args.cutoff:g} s; repeats stopped")
                break
            if timer.seconds > args.cutoff:
                rec["over_cutoff"] = True
        rec["median"] = C.median(rec["times"])
        if name == "sgpa":
            rec["sgpa_jitter"] = list(module.last_jitter)
    except Exception as exc:  # noqa: BLE001  (reported in the table)
        rec["status"] = "OOM" if is_oom(exc) else "error"
        rec["note"] = f"{type(exc).__name__}: {str(exc)[:200]}"
    finally:
        del module, Z
        gc.collect()
        if str(device).startswith("cuda"):
            torch.cuda.empty_cache()
    return rec


def skipped(name, N, status, note):
    return {"model": name, "N": N, "status": status, "times": [], "median": math.nan,
            "warmup": math.nan, "note": note, "over_cutoff": False}


def run_all(args, device, dtype, models, mem_limit):
    """Every model at every N (increasing N), with the skip rules of the docstring."""
    itemsize = torch.finfo(dtype).bits // 8
    records, stop, last = [], {}, {}
    for N in args.sizes:
        for name in models:
            if name in stop:
                rec = skipped(name, N, "skipped", stop[name])
            elif estimated_bytes(name, N, itemsize) > mem_limit:
                rec = skipped(name, N, "skipped (memory)",
                              f"estimated {estimated_bytes(name, N, itemsize) / GiB:.1f} GiB "
                              f"of N x N tensors > {mem_limit / GiB:.1f} GiB")
            else:
                est = math.nan
                if name in last:
                    N0, t0 = last[name]
                    est = t0 * (N / N0) ** NOMINAL_EXPONENT[name]
                if est > EXTRAPOLATION_FACTOR * args.cutoff:
                    rec = skipped(name, N, "skipped",
                                  f"extrapolated {est:.0f} s per run (N^"
                                  f"{NOMINAL_EXPONENT[name]} from N={last[name][0]}) > "
                                  f"{EXTRAPOLATION_FACTOR:g} x cut-off; not run")
                else:
                    rec = time_cell(name, N, args, device, dtype)
            records.append(rec)
            shown = (f"{rec['median'] * 1e3:.2f} ms (median of {len(rec['times'])})"
                     if rec["times"] else rec["status"])
            print(f"  N={N:5d}  {LABELS[name]:14s} {shown}"
                  + (f"  [{rec['note']}]" if rec["note"] else ""), flush=True)
            if rec["status"] == "ok" and rec["times"]:
                last[name] = (N, max(rec["median"], rec["warmup"]))
            if rec["over_cutoff"]:
                stop[name] = f"a run at N={N} exceeded the cut-off {args.cutoff:g} s"
            elif rec["status"] in ("OOM", "error") and name not in stop:
                stop[name] = f"{rec['status']} at N={N}"
            elif rec["status"] == "skipped (memory)" and name not in stop:
                stop[name] = f"skipped (memory) from N={N}"
    return records


# ---------------------------------------------------------------- report


def cell_text(rec):
    if rec is None:
        return "-"
    if rec["times"]:
        return C.fmt_seconds(rec["median"] * 1e3) + ("*" if rec["over_cutoff"] else "")
    return {"skipped (memory)": "skipped(mem)"}.get(rec["status"], rec["status"])


def report(args, records, models):
    """Print the table, the slopes and the targets; return the summary dict."""
    by = {(r["model"], r["N"]): r for r in records}

    def t(name, N):
        rec = by.get((name, N))
        return rec["median"] if rec and rec["times"] else math.nan

    def ratio(a, b, N):
        return t(a, N) / t(b, N) if a in models and b in models else math.nan

    headers = ["N"] + [f"{LABELS[m]} ms" for m in models]
    ratio_cols = [(a, b) for a, b in (("sgpa", "kep-add"), ("softmax", "kep-add"))
                  if a in models and b in models]
    headers += [f"{LABELS[a]}/{LABELS[b]}" for a, b in ratio_cols]
    rows = []
    for N in args.sizes:
        rows.append([str(N)] + [cell_text(by.get((m, N))) for m in models]
                    + [C.fmt_ratio(ratio(a, b, N)) for a, b in ratio_cols])
    notes = [f"forward + backward of one layer, B={B}, C={WIDTH}, h={HEADS}, s={RANK}, "
             f"{args.dtype} on {args.device_resolved}; median of {args.repeats} timed runs after "
             "one warm-up; one thread",
             "KEP loss out.sum() + kl + ksvd; SGPA out.sum() + kl; softmax out.sum()",
             "* = a run exceeded the cut-off (fewer timed runs than asked, larger N skipped); "
             "skipped / skipped(mem) / OOM / error: see the per-cell lines above"]
    jit = sorted({tuple(r["sgpa_jitter"]) for r in records if "sgpa_jitter" in r})
    if jit:
        notes.append("SGPA jitter used (K_kk, posterior) in the last run of each N: "
                     + ", ".join(f"({a:g}, {b:g})" for a, b in jit))
    C.print_table("Time per forward + backward (ms) of one attention layer against N",
                  headers, rows, notes=notes)

    slopes, rows = {}, []
    big = [N for N in args.sizes if N >= SLOPE_FROM]
    for m in models:
        times = [t(m, N) for N in args.sizes]
        done = [(N, x) for N, x in zip(args.sizes, times) if math.isfinite(x)]
        last2 = done[-2:]
        s = {"all": F.slope(args.sizes, times),
             f">={SLOPE_FROM}": F.slope(big, [t(m, N) for N in big]),
             "two largest": F.slope([p[0] for p in last2], [p[1] for p in last2]),
             "two largest N": [p[0] for p in last2]}
        slopes[m] = s
        rows.append([LABELS[m], F.fmt_num(s["all"]), F.fmt_num(s[f">={SLOPE_FROM}"]),
                     F.fmt_num(s["two largest"])
                     + (f" ({last2[0][0]}-{last2[1][0]})" if len(last2) == 2 else "")])
    C.print_table("Log-log slope of time against N (least squares)",
                  ["model", "all sizes", f"N >= {SLOPE_FROM}", "two largest timed N"], rows,
                  align="lrrr",
                  notes=["1 = linear, 2 = quadratic, 3 = cubic; small N is dominated by "
                         "per-call overheads, so the slopes over the larger sizes are the "
                         "meaningful ones"])

    print("Targets")
    targets = {}
    kep_slope = slopes.get("kep-add", {}).get(f">={SLOPE_FROM}", math.nan)
    used = [N for N in big if math.isfinite(t("kep-add", N))]
    if math.isfinite(kep_slope):
        ok = kep_slope <= SLOPE_TARGET
        print(f"  {C.verdict(ok):4s}  KEP add slope {kep_slope:.2f} <= {SLOPE_TARGET} "
              f"(least squares over N in {used}, i.e. N >= {SLOPE_FROM})")
    else:
        ok = None
        print(f"  n/a   KEP add slope <= {SLOPE_TARGET}: needs two timed sizes N >= "
              f"{SLOPE_FROM} (have {used})")
    targets["kep_add_slope"] = {"value": kep_slope, "target": SLOPE_TARGET, "pass": ok,
                                "sizes": used}
    r = ratio("sgpa", "kep-add", RATIO_N)
    if math.isfinite(r):
        ok = r >= RATIO_TARGET
        print(f"  {C.verdict(ok):4s}  SGPA / KEP add at N={RATIO_N}: {C.fmt_ratio(r)} "
              f">= {RATIO_TARGET:g}x")
    else:
        ok = None
        why = ("N=1024 not in --sizes" if RATIO_N not in args.sizes else
               f"SGPA {cell_text(by.get(('sgpa', RATIO_N)))}, KEP add "
               f"{cell_text(by.get(('kep-add', RATIO_N)))}")
        print(f"  n/a   SGPA / KEP add at N={RATIO_N} >= {RATIO_TARGET:g}x: {why}")
    targets["sgpa_over_kep_add"] = {"N": RATIO_N, "value": r, "target": RATIO_TARGET, "pass": ok}
    print("  info  per-epoch KEP / softmax time ratio <= 1.15 on the digits protocol: "
          "measured by benchmarks/kepsvgp/digits.py")
    print(flush=True)
    return {"slopes": slopes, "targets": targets}


CSV_KEYS = ["model", "N", "status", "median_ms", "warmup_ms", "n_runs", "times_ms", "dtype",
            "device", "note"]


def write_outputs(args, records, summary):
    """``--json`` (records and summary) and ``--csv`` (one row per (model, N), in ms)."""
    rows = (((), {"model": r["model"], "N": r["N"], "status": r["status"],
                  "median_ms": r["median"] * 1e3, "warmup_ms": r["warmup"] * 1e3,
                  "n_runs": len(r["times"]),
                  "times_ms": " ".join(f"{x * 1e3:.4f}" for x in r["times"]),
                  "dtype": args.dtype, "device": args.device_resolved, "note": r["note"]})
            for r in records)
    F.write_outputs(args, {"records": records, **summary}, CSV_KEYS, rows, what="per-cell rows")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    F.add_dtype_argument(p, "layers and inputs")
    p.add_argument("--device", default="auto", choices=("cpu", "cuda", "auto"),
                   help="auto = cuda when available (auto)")
    p.add_argument("--sizes", default=None,
                   help="comma list of N (default 64,256,1024,4096; --quick 64,256)")
    p.add_argument("--models", default=",".join(MODELS),
                   help=f"comma list out of {','.join(MODELS)} (all)")
    p.add_argument("--repeats", type=int, default=None,
                   help="timed runs after one warm-up; the median counts (5; --quick 2)")
    p.add_argument("--cutoff", type=float, default=20.0,
                   help="seconds: after a single run longer than this, the model's larger N "
                        "are skipped (20)")
    p.add_argument("--max-memory-gb", type=float, default=None,
                   help="skip a cell whose estimated N x N tensors exceed this many GiB "
                        "(CPU 6; CUDA 85%% of the device memory)")
    p.add_argument("--quick", action="store_true", help="N in {64, 256}, 2 repeats")
    p.add_argument("--selftest", action="store_true",
                   help="check the SGPA layer on N = 5 against dense formulas and exit")
    F.add_output_arguments(p, "kepsvgp_timing", rows="(model, N)")
    args = p.parse_args(argv)
    if args.selftest:
        raise SystemExit(0 if selftest() else 1)
    models = C.parse_choices(p, args.models, MODELS, "model")
    sizes = QUICK_SIZES if args.quick else FULL_SIZES
    if args.sizes:
        sizes = tuple(int(v) for v in args.sizes.split(",") if v)
    args.sizes = tuple(sorted(set(sizes)))
    if args.repeats is None:
        args.repeats = 2 if args.quick else 5
    C.check_device(p, args.device)
    device = "cuda" if args.device == "cuda" or (
        args.device == "auto" and torch.cuda.is_available()) else "cpu"
    args.device_resolved = device
    dtype = getattr(torch, args.dtype)
    if device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        default_limit = 0.85 * torch.cuda.get_device_properties(0).total_memory
    else:
        default_limit = 6.0 * GiB
    mem_limit = default_limit if args.max_memory_gb is None else args.max_memory_gb * GiB
    C.print_header("kepsvgp/timing.py  -  forward + backward time of one attention layer "
                   "against N: softmax, KEP-SVGP (add, concat, concat low-rank), standard SGPA",
                   args, device=device,
                   dtype_note=f"{args.dtype} layers and inputs (TF32 off on CUDA)")
    print(f"load:     load average at start {C.load_average()} on os.cpu_count()="
          f"{os.cpu_count()}; memory limit for N x N tensors {mem_limit / GiB:.1f} GiB\n",
          flush=True)
    t0 = time.perf_counter()
    records = run_all(args, device, dtype, models, mem_limit)
    summary = report(args, records, models)
    write_outputs(args, records, summary)
    print(f"total wall time: {time.perf_counter() - t0:.1f} s; load average at end: "
          f"{C.load_average()}", flush=True)


if __name__ == "__main__":
    main()
