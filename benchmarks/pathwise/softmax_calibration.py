"""Is the sparse softmax fit's underconfidence on digits its approximation's?

The fit (accuracy 0.971, mean confidence 0.921, ECE 0.050) is underconfident; each part
removes one approximation and asks whether the confidence moves.

One thread, float64, the data of ``pathwise/classifier.py`` (digits, 75/25 stratified,
standardised).  The kernel is fixed at the ``kernel_`` of the sparse softmax fit
(``PathwiseGPClassifier(multi_class="softmax", n_inducing=128, random_state=0)``); every
row reports the bound where one is defined, accuracy, log-loss, 15-bin ECE, the mean
top-label confidence and seconds.

Parts (``--parts``, comma-separated; all by default):

* ``full_rank``: the same model with ``Z`` = all training rows (fixed), ``optimizer=None``.
  With ``Z = X`` the sparse posterior is no longer a low-rank one: if confidence stayed
  near 0.92, the inducing points are not what holds it down.
* ``joint``: ``q(v) = N(mu, S)`` over the whitened inducing values of all ``C`` latents
  with a full ``(Cm x Cm)`` covariance, against the fit's block-diagonal (one block per
  class) ``q``.  With ``f_i = A_i^T v + r_i`` (``A = L_zz^{-1} K_zx``, ``r_i`` the residual
  variance) each row's marginal is ``N(m_i, V_i)``, ``V_i`` (C x C), and the bound is
  ``sum_i E log softmax_{y_i}(f_i) - KL(q || N(0, I))``.  Natural-gradient steps in the
  natural parameters, with ``g_i = E[y_i - p]`` and the exact expected Hessian of the
  log-softmax ``H_i = -E[diag p - p p^T] / 2`` (``dE/dV_i``, Monte Carlo, antithetic draws):
  ``Lambda <- (1 - gamma) Lambda + gamma (I - 2 sum_i A_i H_i A_i^T)``,
  ``eta <- (1 - gamma) eta + gamma (sum_i A_i g_i - 2 (sum_i A_i H_i A_i^T) mu)``.
  Masking the off-diagonal class blocks of the data term gives the factorised family's
  natural gradient, the fit's own q-update.  Check (PASS/FAIL): run with the fit's own
  Monte-Carlo draws from its ``q``, it starts at the fit's bound (to 1e-8) and finds
  nothing above it.  The table's runs use ``--draws`` fresh draws from the same start.
  A joint bound far above the factorised one with unchanged predictions says the
  factorisation costs evidence but not calibration.
* ``laplace``: the exact multiclass Laplace GP (GPML, Rasmussen and Williams 2006,
  Algorithms 3.3 and 3.4): Newton's iteration for the mode ``f`` of
  ``log p(y | f) - f^T K^{-1} f / 2`` with ``W = D - Pi Pi^T`` (all class couplings), the
  predictive ``N(K_*^T (y - pi), Sigma_*)`` with its full ``C x C`` covariance, averaged
  through the softmax by Monte Carlo.  The printed residual ``max |f - K (y - pi)|`` checks
  the mode's fixed-point equation.  The bound is the Laplace evidence
  ``-a^T f / 2 + y^T f - sum_i log sum_c exp f_ic - log|I + K W| / 2``.  Run at the fit's
  kernel and at two shorter length scales (``--quick``: the fit's only).

Usage::

    .venv/bin/python benchmarks/pathwise/softmax_calibration.py
    .venv/bin/python benchmarks/pathwise/softmax_calibration.py --quick --parts joint
"""

import os  # noqa: I001  (the shared kit's folder on the path, the kit, then numpy)
import sys

if (kit := os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) not in sys.path:
    sys.path.insert(0, kit)
import _common as C  # noqa: I001  (first: pins the threads before numpy is imported)
from _fits import bundled_classification as bundled
from _fits import classification_scores as scores
from _fits import rbf_classifier_kernel as kernel

import argparse
import time
import warnings

import numpy as np
import scipy.linalg as sl
import torch

PARTS = ("full_rank", "joint", "laplace")
HEADERS = ["model", "bound", "accuracy", "log-loss", "ECE", "confidence", "seconds"]


def row(label, bound, y, proba, classes, seconds):
    s = scores(y, proba, classes)
    conf = float(np.max(proba, 1).mean())
    return [label, "" if bound is None else f"{bound:.1f}", f"{s['accuracy']:.3f}",
            f"{s['log_loss']:.4f}", f"{s['ece']:.3f}", f"{conf:.3f}", C.fmt_seconds(seconds)]


def softmax(F):
    P = np.exp(F - F.max(-1, keepdims=True))
    return P / P.sum(-1, keepdims=True)


# ---------------------------------------------------------------- part: full rank


def part_full_rank(args, fit):
    from skgpx import PathwiseGPClassifier

    Xtr, Xte, ytr, yte = fit["data"]
    Z = Xtr[::4] if args.quick else Xtr
    est = PathwiseGPClassifier(kernel=fit["est"].kernel_, multi_class="softmax",
                               inducing_points=Z, optimize_inducing=False, optimizer=None,
                               random_state=0)
    start = time.perf_counter()
    est.fit(Xtr, ytr)
    seconds = time.perf_counter() - start
    return [row(f"Z = {len(Z)} training rows", est.log_marginal_likelihood_value_, yte,
                est.predict_proba(Xte), est.classes_, seconds)], []


# ---------------------------------------------------------------- part: joint q(v)


class JointQ:
    """Whitened ``q(v)`` over ``C`` latents sharing ``Z``; ``S`` is ``(Cm x Cm)``."""

    def __init__(self, est, Xtr, ytr, eps):
        k, Z = est.kernel_, est.inducing_points_
        Kzz = torch.tensor(k(Z))
        # jitter_ is the absolute jitter the fit added to K_zz
        self.L = torch.linalg.cholesky(Kzz + est.jitter_ * torch.eye(len(Z)))
        self.k, self.Z, self.m, self.C = k, Z, len(Z), est.q_mu_.shape[1]
        self.Y = torch.nn.functional.one_hot(torch.tensor(ytr), self.C).double()
        self.eps = eps  # (S, C), antithetic pairs, shared by every row
        self.train = self.project(Xtr)

    def project(self, X):
        A = torch.linalg.solve_triangular(self.L, torch.tensor(self.k(X, self.Z)).T,
                                          upper=False)  # (m, n)
        r = (torch.tensor(self.k.diag(X)) - (A * A).sum(0)).clamp_min(0)
        return A, r

    def marginals(self, mu, S, A, r):
        """Mean (n, C) and covariance (n, C, C) of ``f_i`` under ``q``."""
        C, m = self.C, self.m
        SA = torch.einsum("cidj,jn->cdin", S.reshape(C, m, C, m), A)
        cov = torch.einsum("in,cdin->ncd", A, SA)
        return A.T @ mu.T, cov + torch.diag_embed(r[:, None].expand(-1, C))

    def draws(self, mean, cov):
        L = torch.linalg.cholesky(cov + 1e-10 * torch.eye(self.C))
        return torch.log_softmax(mean[:, None, :] + torch.einsum("ncd,sd->nsc", L, self.eps), -1)

    def bound(self, mu, S):
        """(bound, MC standard error of its data term, g, H) at ``q``."""
        logp = self.draws(*self.marginals(mu, S, *self.train))
        p, values = logp.exp(), (logp * self.Y[:, None, :]).sum(-1).sum(0)  # (S,)
        half = len(self.eps) // 2
        se = float((0.5 * (values[:half] + values[half:])).std() / np.sqrt(half))
        Lc = torch.linalg.cholesky(S)
        kl = 0.5 * (S.diagonal().sum() + (mu * mu).sum() - len(S)
                    - 2 * Lc.diagonal().log().sum())
        H = -0.5 * (torch.diag_embed(p) - p[..., :, None] * p[..., None, :]).mean(1)
        return float(values.mean() - kl), se, (self.Y - p.mean(1)), H

    def proba(self, mu, S, A, r):
        return self.draws(*self.marginals(mu, S, A, r)).exp().mean(1).numpy()

    def run(self, mu, S, joint, steps, gamma=0.5):
        """``steps`` natural-gradient steps from ``(mu, S)``; returns the bound history."""
        A = self.train[0]
        Lam = torch.cholesky_inverse(torch.linalg.cholesky(S))
        eta, history = Lam @ mu.reshape(-1), []
        mask = torch.block_diag(*[torch.ones(self.m, self.m)] * self.C)
        for it in range(steps + 1):
            value, se, g, H = self.bound(mu, S)
            history.append((value, se))
            if it == steps:
                return mu, S, history
            Hb = torch.einsum("in,ncd,jn->cidj", A, H, A).reshape(len(S), len(S))
            Hb = Hb if joint else Hb * mask
            Lam = (1 - gamma) * Lam + gamma * (torch.eye(len(S)) - 2 * Hb)
            eta = (1 - gamma) * eta + gamma * ((A @ g).T.reshape(-1) - 2 * Hb @ mu.reshape(-1))
            Lam = 0.5 * (Lam + Lam.T)
            S = torch.cholesky_inverse(torch.linalg.cholesky(Lam))
            mu = (S @ eta).reshape(self.C, self.m)


def part_joint(args, fit):
    est, (Xtr, Xte, ytr, yte) = fit["est"], fit["data"]
    mu0 = torch.tensor(est.q_mu_).T.clone()
    S0 = torch.block_diag(*[s @ s.T for s in torch.tensor(est.q_sqrt_)])
    # consistency: with the fit's own draws the masked iteration starts at the fit's bound
    # and, the fit's q being the factorised optimum, finds nothing above it
    fit_eps = est._mode.svgp.likelihood._draws(mu0, len(mu0))
    check = JointQ(est, Xtr, ytr, fit_eps).run(mu0, S0, False, args.check_steps)[2]
    values, lml = [v for v, _ in check], est.log_marginal_likelihood_value_
    ok = abs(values[0] - lml) <= 1e-8 * abs(lml) and max(values) - lml <= 0.1
    half = torch.randn(args.draws // 2, len(mu0), generator=torch.Generator().manual_seed(0))
    q = JointQ(est, Xtr, ytr, torch.cat([half, -half]))
    test = q.project(Xte)
    rows, last = [], {}
    for joint, steps in ((False, args.steps // 2), (True, args.steps)):
        start = time.perf_counter()
        mu, S, history = q.run(mu0, S0, joint, steps)
        seconds = time.perf_counter() - start
        last[joint] = [f"{v:.1f}" for v, _ in history]
        rows.append(row(f"{'joint' if joint else 'factorised'} q, {steps} natural steps",
                        history[-1][0], yte, q.proba(mu, S, *test), est.classes_, seconds))
    return rows, [
        f"masked iteration with the fit's {len(fit_eps)} draws: step 0 bound {values[0]:.6f} vs "
        f"the fit's {lml:.6f}, best of {args.check_steps} steps {max(values):.3f} "
        f"(must not exceed it by 0.1): {'PASS' if ok else 'FAIL'}",
        f"{args.draws} draws, bounds by step: factorised {', '.join(last[False])}",
        f"{args.draws} draws, bounds by step: joint {', '.join(last[True])}"]


# ---------------------------------------------------------------- part: Laplace


def laplace_mode(K, Y, max_iter=100, tol=1e-10):
    """GPML Algorithm 3.3: Newton on the mode; returns ``F``, ``a``, the blocks ``E_c``."""
    n, n_classes = Y.shape
    F, old = np.zeros_like(Y), -np.inf
    for it in range(max_iter):
        P = softmax(F)
        E, L = [], []
        for c in range(n_classes):
            s = np.sqrt(P[:, c])
            L.append(np.linalg.cholesky(np.eye(n) + s[:, None] * K * s))
            E.append(s[:, None] * sl.cho_solve((L[-1], True), np.diag(s)))
        M = np.linalg.cholesky(sum(E))
        b = P * F - P * (P * F).sum(1, keepdims=True) + Y - P  # W f + y - pi
        cvec = np.stack([E[c] @ (K @ b[:, c]) for c in range(n_classes)], 1)
        z = sl.cho_solve((M, True), cvec.sum(1))
        a = b - cvec + np.stack([E[c] @ z for c in range(n_classes)], 1)
        F = K @ a
        lse = np.log(np.exp(F - F.max(1, keepdims=True)).sum(1)) + F.max(1)
        psi = -0.5 * (a * F).sum() + (Y * F).sum() - lse.sum()
        if abs(psi - old) <= tol * abs(psi):
            break
        old = psi
    return F, a, psi, it + 1


def laplace_fit(k, Xtr, Xte, ytr, n_draws):
    K, Ks, kss = k(Xtr), k(Xtr, Xte), k.diag(Xte)
    n_classes = int(ytr.max()) + 1
    Y = np.eye(n_classes)[ytr]
    F, a, psi, n_iter = laplace_mode(K, Y)
    P = softmax(F)
    # the same equation as K^{-1} f = y - pi (a = K^{-1} f): K's conditioning amplifies
    # a's round-off in the f form, not in this one
    residual = (float(np.abs(F - K @ (Y - P)).max()), float(np.abs(a - (Y - P)).max()))
    # log|I + K W| = sum_c log|B_c| + log|I - sum_c D_c (K - K E_c K) D_c|, W = D - Pi Pi^T
    E, logdet, inner = [], 0.0, np.eye(len(K))
    for c in range(n_classes):
        s = np.sqrt(P[:, c])
        L = np.linalg.cholesky(np.eye(len(K)) + s[:, None] * K * s)
        E.append(s[:, None] * sl.cho_solve((L, True), np.diag(s)))
        KD = K * P[:, c]
        inner -= P[:, c, None] * (KD - K @ E[c] @ KD)
        logdet += 2 * np.log(np.diag(L)).sum()
    sign, tail = np.linalg.slogdet(inner)
    evidence = psi - 0.5 * (logdet + tail) if sign > 0 else float("nan")
    # GPML Algorithm 3.4: predictive mean and full C x C covariance per test point
    M = np.linalg.cholesky(sum(E))
    B = [e @ Ks for e in E]
    V = [sl.cho_solve((M, True), b) for b in B]
    S = np.einsum("cnt,dnt->tcd", np.stack(V), np.stack(B))
    S[:, np.arange(n_classes), np.arange(n_classes)] += \
        kss[:, None] - np.stack([(b * Ks).sum(0) for b in B], 1)
    Ls = np.linalg.cholesky(S + 1e-9 * np.eye(n_classes))
    eps = np.random.default_rng(0).standard_normal((n_draws, len(kss), n_classes))
    proba = softmax(Ks.T @ (Y - P) + np.einsum("tij,stj->sti", Ls, eps)).mean(0)
    return evidence, proba, residual, n_iter


def part_laplace(args, fit):
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel

    est, (Xtr, Xte, ytr, yte) = fit["est"], fit["data"]
    kernels = [("fit's kernel_", est.kernel_)]
    if not args.quick:
        kernels += [(f"{a:.1f}^2 * RBF({ls})", ConstantKernel(a ** 2) * RBF(ls))
                    for a, ls in ((15.6, 23.7), (10.0, 15.0))]
    rows, lines = [], []
    for name, k in kernels:
        start = time.perf_counter()
        evidence, proba, residual, n_iter = laplace_fit(k, Xtr, Xte, ytr, args.draws)
        seconds = time.perf_counter() - start
        rows.append(row(f"Laplace, {name}", evidence, yte, proba, est.classes_, seconds))
        lines.append(f"Laplace {name} ({k}): {n_iter} Newton steps, max |f - K (y - pi)| "
                     f"= {residual[0]:.1e} (max |a - (y - pi)| = {residual[1]:.1e})")
    return rows, lines


# ---------------------------------------------------------------- main


def main():
    from skgpx import PathwiseGPClassifier

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default=",".join(PARTS))
    parser.add_argument("--quick", action="store_true", help="fewer steps, draws, kernels")
    parser.add_argument("--steps", type=int, default=None,
                        help="joint natural steps (30; the factorised run takes half)")
    parser.add_argument("--check-steps", type=int, default=5,
                        help="masked steps with the fit's draws (consistency check, 5)")
    parser.add_argument("--draws", type=int, default=None,
                        help="Monte-Carlo draws, antithetic (512)")
    args = parser.parse_args()
    args.steps = args.steps or (4 if args.quick else 30)
    args.draws = 2 * ((args.draws or (64 if args.quick else 512)) // 2)
    parts = C.parse_choices(parser, args.parts, PARTS, "parts")
    C.print_header(__doc__.splitlines()[0], args)
    warnings.filterwarnings("ignore")
    data = bundled("digits")
    Xtr, Xte, ytr, yte = data
    est = PathwiseGPClassifier(kernel=kernel(Xtr.shape[1]), multi_class="softmax",
                               n_inducing=128, random_state=0)
    start = time.perf_counter()
    est.fit(Xtr, ytr)
    seconds = time.perf_counter() - start
    print(f"sparse softmax fit (m = 128): kernel_ = {est.kernel_}")
    rows = [row("sparse softmax fit, m = 128", est.log_marginal_likelihood_value_, yte,
                est.predict_proba(Xte), est.classes_, seconds)]
    lines, fit = [], {"est": est, "data": data}
    for part in parts:
        new_rows, new_lines = globals()[f"part_{part}"](args, fit)
        rows += new_rows
        lines += new_lines
    C.print_table(f"digits, {len(Xtr)} training rows, kernel fixed at the fit's kernel_ "
                  f"(Laplace: also two shorter length scales)", HEADERS, rows,
                  notes=["bound: the ELBO (sparse, full-rank and q(v) rows); for the Laplace "
                         "rows the Laplace approximation of log p(y), not a bound"])
    C.finish("Softmax calibration", lines)


if __name__ == "__main__":
    main()
