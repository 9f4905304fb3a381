r"""Training drivers of the sparse variational GP classifier, and its mode object.

Interface (the exact-mode Laplace object of ``_laplace`` has the same shape)::

    mode = SVGPMode(kernel, likelihood, multi_class=..., optimizer=..., ...)
    mode.fit(rows, Z0, rng)     # rows: _sparse.Rows or DaskRows, labels as Y (n, L)
    mode.latent_mean_and_variance(Xq)   # -> (mean, var), each (n*, L)
    mode.predict_proba(Xq)              # -> (n*, C), rows sum to one
    mode.posterior(shift, n_features_in)  # -> SVGPPosterior for _predict.draw_functions
    mode.elbo, mode.history, mode.n_iter, mode.theta, mode.kernel_, mode.Z,
    mode.q_mu, mode.q_sqrt, mode.jitter_, mode.epoch_end_seconds ("adam": wall-clock
    seconds from the start of training to the end of each epoch)

Labels are encoded per latent by the caller: 0/1 in one column (binary), one 0/1 column
per class (one-vs-rest: ``L = C`` Bernoulli latents sharing Z and the kernel), or one-hot
(softmax).  ``rows.Y`` carries them; ``rows.alpha`` is ignored.

Routes (``optimizer``):

* ``"adam"`` (Salimbeni, Eleftheriadis and Hensman, AISTATS 2018): per mini-batch of
  ``minibatch_size`` rows (a fresh permutation per epoch from the fit's ``RandomState``),
  one natural-gradient step on ``q`` and one Adam step on ``(log theta, Z)``, both from the
  same pass (the gradient in theta and Z is taken at the ``q`` before its step).  The
  step size follows a warm-up: ``gamma_t`` grows log-linearly from ``1e-4`` to
  ``natgrad_step`` over the first :data:`NATGRAD_WARMUP` steps, which keeps the first,
  large non-conjugate steps from overshooting while Adam moves the hyperparameters (the
  schedule Salimbeni et al. use).  ``max_iter`` counts epochs.  An epoch's value in
  ``history`` is the row-weighted mean of its batch estimates, ``sum_b (|B_b| / n) L_b``:
  every row is visited once per epoch, so this is ``sum_i E_i - KL`` along the epoch's
  trajectory, free of the batches' sampling noise (an unweighted mean would overweight
  the last, smaller batch).  **Stopping rule:** the fit stops after epoch ``e`` when that
  value rose by at most ``tol * |value_e|`` per epoch over the last
  :data:`PLATEAU_WINDOW` epochs (a window, so that one epoch whose drift hides a steady
  rise does not stop the fit).  ``tol=None`` runs ``max_iter`` epochs.
* ``"fmin_l_bfgs_b"``: full-data passes through ``rows.map_sum`` (so Dask rows work).  At
  each L-BFGS-B evaluation ``q`` is brought to its optimum, warm-started from the best
  evaluation's ``q``; the gradient at the optimal ``q`` is then the total gradient
  (envelope theorem).  Rows in memory with ``n <= batch_size`` and ``m n <=``
  :data:`INNER_HELD_ELEMENTS` (``inner="cached"``) take
  the inner loop of ``_svgp_inner`` (``A = L_z^{-1} K_zx`` held: covariance steps, then
  conjugate steps on the means that cost ``O(n m L)`` each); other rows full-batch
  natural steps (``gamma = 1``, halved while a step lowers the bound).  The inner
  tolerance (``inner_tol="adaptive"``) is :data:`INNER_RATIO` times the per-row change of
  the bound between the last two evaluations, within [:data:`INNER_TOL`,
  :data:`INNER_LOOSE`] (far from the optimum L-BFGS-B needs no exact ``q``; near it the
  tolerance tightens to ``INNER_TOL``); ``inner_tol=None`` keeps ``INNER_TOL``.
  L-BFGS-B itself uses ``_solver.lbfgs``'s settings (per-row projected-gradient test) and
  the plateau rule of the "adam" route on ``tol`` (:func:`_lbfgs_plateau`); ``max_iter``
  counts its iterations, ``n_iter`` and ``history`` its evaluations.
* a callable (scikit-learn's ``optimizer(obj_func, initial_theta, bounds)``) gets the same
  objective as L-BFGS-B; ``None`` keeps theta and Z and only fits ``q``.
"""

import math
import time
import warnings

import numpy as np
import scipy.optimize
import torch
from sklearn.exceptions import ConvergenceWarning

from .._base import MovableState, progress_bar
from ..kernels import TorchKernel, split_white_noise
from ..linalg import NotPositiveDefiniteError, positive_tril, positive_tril_raw, solve_lower
from ._likelihoods import Softmax
from ._predict import TargetStreams
from ._solver import SPARSE_GRADIENT_TOL, SPARSE_LBFGS_MEMORY, Packing
from ._sparse import Rows, inducing_cholesky, whitening
from ._svgp import WhitenedQ, evaluate, marginals, triangular_inverse
from ._svgp_inner import InnerProblem, optimal_q

# the warm-up of the natural step size (module docstring)
NATGRAD_WARMUP = 5
GAMMA_START = 1e-4
# the "adam" route's stopping rule compares epoch means this many epochs apart
PLATEAU_WINDOW = 3
# the inner natural-gradient loop of the L-BFGS-B route stops once a step gains less than
# this per row: the bound's gap is then ~1e-10 per row, and the gradient's error (first
# order in the distance to the optimal q) ~1e-5 of its size, below L-BFGS-B's tolerance
INNER_TOL = 1e-10
INNER_MAX_ITER = 100
# ... or once a step loses less than this per row (the dither of a Monte-Carlo bound)
DITHER_TOL = 1e-6
# inner_tol="adaptive": the per-row tolerance of an evaluation's inner loop is INNER_RATIO
# times the per-row change of the bound between the last two evaluations, within
# [INNER_TOL, INNER_LOOSE]
INNER_RATIO = 1e-2
INNER_LOOSE = 1e-5
# the held-A inner loop keeps A (m x n) when n <= batch_size and m n <= this (32 MB in
# float64: m = 256 up to 16 384 rows)
INNER_HELD_ELEMENTS = 2 ** 22


class _Plateau(Exception):
    """Raised inside L-BFGS-B's objective when the plateau rule fires there."""


def _lbfgs_plateau(value_and_grad, x0, bounds, max_iter, n_rows, tol):
    """scipy's L-BFGS-B on ``value / n_rows`` with ``_solver.lbfgs``'s sparse settings
    (projected-gradient test, memory), which also stops by the "adam" route's rule: once
    the bound at the accepted iterates rose by at most ``PLATEAU_WINDOW * tol * |bound|``
    over the last :data:`PLATEAU_WINDOW` iterations (``tol=None``: never).  Without it
    the fit spends most of its evaluations on the last ``1e-3`` of the bound (digits,
    softmax: 30 of 43 evaluations for 1.3 nats of 455).  Returns the last iterate; warns
    ``ConvergenceWarning`` when L-BFGS-B stops otherwise than by either test.
    """
    values, best = [], []

    def objective(x):
        value, grad = value_and_grad(x)
        best.append(max(-value, best[-1]) if best else -value)
        # a line search at the floor of a Monte-Carlo bound can take a dozen trials for
        # nothing: the same rule over evaluations, once past the first iterations
        lag = 2 * PLATEAU_WINDOW
        if (tol is not None and len(values) >= PLATEAU_WINDOW and len(best) > lag
                and best[-1] - best[-1 - lag] <= PLATEAU_WINDOW * tol * abs(best[-1])):
            raise _Plateau
        return value / n_rows, grad / n_rows

    def callback(intermediate_result):
        values.append(-float(intermediate_result.fun) * n_rows)
        if tol is not None and len(values) > PLATEAU_WINDOW:
            rise = values[-1] - values[-1 - PLATEAU_WINDOW]
            if rise <= PLATEAU_WINDOW * tol * abs(values[-1]):
                raise StopIteration

    try:
        result = scipy.optimize.minimize(
            objective, x0, method="L-BFGS-B", jac=True, bounds=bounds, callback=callback,
            options={"maxiter": max_iter, "gtol": SPARSE_GRADIENT_TOL,
                     "maxcor": SPARSE_LBFGS_MEMORY})
    except _Plateau:
        return None  # the caller takes the best point evaluated
    if result.status not in (0, 99):  # 99: the plateau rule's StopIteration
        warnings.warn(
            f"L-BFGS-B stopped without converging ({result.message}); increase max_iter "
            "or check the kernel's bounds.", ConvergenceWarning)
    return np.asarray(result.x, dtype=np.float64)


def natgrad_schedule(step, natgrad_step, warmup=NATGRAD_WARMUP):
    """``gamma`` at step ``step`` (from 0): log-linear from 1e-4 to ``natgrad_step``."""
    if step >= warmup or natgrad_step <= GAMMA_START:
        return float(natgrad_step)
    frac = step / warmup
    return float(math.exp((1 - frac) * math.log(GAMMA_START) + frac * math.log(natgrad_step)))


class MomentQ(MovableState):
    """``q(v_c) = N(m_c, R_c R_c^T)`` in moment parameters: the ``q_update="adam"`` ablation
    (plain Adam on ``q``, as GPyTorch's SVGP), with the interface of ``WhitenedQ``."""

    def __init__(self, mean, raw):
        self.mean, self.raw = mean, raw
        self.root = positive_tril(raw)
        self.covariance = self.root @ self.root.transpose(1, 2)
        eye = torch.eye(raw.shape[1], dtype=raw.dtype, device=raw.device)
        self.excess = self.covariance - eye

    def kl(self):
        m, n_latent = self.mean.shape
        log_det = 2.0 * torch.log(self.root.diagonal(dim1=1, dim2=2)).sum()
        return 0.5 * (self.covariance.diagonal(dim1=1, dim2=2).sum()
                      + (self.mean * self.mean).sum() - m * n_latent - log_det)


class SVGPPosterior:
    """The fitted ``q(u)`` as a ``_predict.Posterior`` for :func:`_predict.draw_functions`.

    A draw is ``f_s(.) + k(., Z) v_s`` with ``u_s = L_z (m + R xi_s)`` and
    ``v_s = K_zz^{-1} (u_s - f_s(Z))`` (Wilson et al., ICML 2020, eq. 13), one latent per
    target column; ``xi`` comes from the per-target streams.
    """

    def __init__(self, mode, shift, n_features_in, squeeze):
        self.kernel, self.theta = mode.torch_kernel, mode.theta
        signal, _ = split_white_noise(mode.kernel_)
        self.signal_kernel = signal
        self.shift, self.n_features_in, self.squeeze = shift, n_features_in, squeeze
        self.n_targets = mode.q.mean.shape[1]
        dtype, device = self.theta.dtype, self.theta.device
        self.y_mean = torch.zeros(self.n_targets, dtype=dtype, device=device)
        self.y_std = torch.ones(self.n_targets, dtype=dtype, device=device)
        self.centers, self.fitted = mode.Z, True
        self._L, self._mean, self._root = mode.L, mode.q.mean, mode.q.root

    def streams(self, generator):
        return TargetStreams(generator, self.n_targets, self.theta.dtype, self.theta.device)

    def update(self, prior_at_centers, streams):
        """Update weights ``v`` (m, S, T) from the prior paths at Z (m, S, T)."""
        xi = streams.normal(prior_at_centers.shape[:-1])
        m, S, T = xi.shape
        whitened = torch.einsum("tij,jst->ist", self._root, xi) + self._mean[:, None, :]
        inner = whitened - solve_lower(self._L, prior_at_centers.reshape(m, S * T)).reshape(
            m, S, T)
        out = torch.linalg.solve_triangular(self._L.T, inner.reshape(m, S * T), upper=True)
        return out.reshape(m, S, T)


class SVGPMode(MovableState):
    """The sparse variational mode of ``PathwiseGPClassifier`` (module docstring).

    Parameters
    ----------
    kernel : sklearn kernel
        The initial kernel (not modified); a top-level ``WhiteKernel`` is latent noise
        at each row, outside ``u = f(Z)``.
    likelihood : _likelihoods.Bernoulli or _likelihoods.Softmax
    multi_class : {"binary", "one_vs_rest", "softmax"}
    optimizer : {"adam", "fmin_l_bfgs_b"}, callable or None
    max_iter, tol, learning_rate, natgrad_step, minibatch_size, optimize_inducing,
    jitter, batch_size, verbose :
        As ``PathwiseGPClassifier``.
    q_update : {"natgrad", "adam"}
        Private: ``"adam"`` moves ``q`` by Adam on its moment parameters instead of
        natural steps (the benchmark's ablation; ``"adam"`` route only).
    """

    def __init__(self, kernel, likelihood, *, multi_class="binary", optimizer="adam",
                 max_iter=100, tol=1e-4, learning_rate=0.01, natgrad_step=0.1,
                 minibatch_size=1024, optimize_inducing=True, jitter=1e-8, batch_size=8192,
                 verbose=0, q_update="natgrad", inner="cached", inner_tol="adaptive"):
        self.kernel, self.likelihood, self.multi_class = kernel, likelihood, multi_class
        self.optimizer, self.max_iter, self.tol = optimizer, max_iter, tol
        self.learning_rate, self.natgrad_step = learning_rate, natgrad_step
        self.minibatch_size, self.optimize_inducing = minibatch_size, optimize_inducing
        self.jitter, self.batch_size, self.verbose = jitter, batch_size, verbose
        self.q_update, self.inner, self.inner_tol = q_update, inner, inner_tol
        self.inner_passes, self._inner_tol, self._gamma = 0, INNER_TOL, 1.0

    # ------------------------------------------------------------------ fit
    def fit(self, rows, Z0, rng):
        """Fit ``q``, theta and Z on ``rows`` from inducing inputs ``Z0`` (m, d)."""
        self.torch_kernel = TorchKernel(self.kernel)
        dtype, device = Z0.dtype, Z0.device
        theta = self.torch_kernel.theta_tensor(device, dtype)
        Z = Z0.detach().clone()
        n_latent = rows.Y.shape[1]
        self.q = WhitenedQ.prior(Z.shape[0], n_latent, dtype, device)
        self.history, self.n_iter, self.epoch_end_seconds = [], 0, []
        self.inner_passes, self._gamma = 0, 1.0
        self._inner_tol = INNER_LOOSE if self.inner_tol == "adaptive" else INNER_TOL
        with progress_bar(self.verbose, "PathwiseGPClassifier fit (sparse)",
                          total=self.max_iter if self.optimizer == "adam" else None) as bar:
            self._bar = bar
            if self.optimizer == "adam":
                theta, Z = self._fit_adam(rows, theta, Z, rng)
            else:
                theta, Z = self._fit_full(rows, theta, Z)
        del self._bar
        self.theta, self.Z = theta.detach(), Z.detach()
        self.kernel_ = self.kernel.clone_with_theta(self.theta.cpu().numpy().astype(np.float64))
        self.torch_kernel = TorchKernel(self.kernel_)
        with torch.no_grad():
            self.L, self.jitter_ = inducing_cholesky(self.torch_kernel, self.theta, self.Z,
                                                     self.jitter, warn=True)
            self.L_inverse = whitening(self.L)
        if self.optimizer == "adam":  # the bound on all rows at the final parameters
            self.elbo = evaluate(self.torch_kernel, self.theta, self.Z, self.q, rows,
                                 self.likelihood, jitter=self.jitter,
                                 batch_size=self.batch_size).elbo
        return self

    def _objective(self, rows, q, theta, Z, want_grad, n_total=None, want_H=True):
        return evaluate(self.torch_kernel, theta, Z, q, rows, self.likelihood,
                        jitter=self.jitter, batch_size=self.batch_size, n_total=n_total,
                        want_grad=want_grad, want_H=want_H)

    def _fit_adam(self, rows, theta, Z, rng):
        if not isinstance(rows, Rows):
            raise ValueError("optimizer='adam' needs the rows in memory (numpy or torch "
                             "input); use optimizer='fmin_l_bfgs_b' for Dask arrays.")
        X, Y, alpha = rows.X, rows.Y, rows.alpha
        n = X.shape[0]
        b = min(int(self.minibatch_size), n)
        bounds = np.asarray(self.torch_kernel.bounds, dtype=np.float64).reshape(-1, 2)
        low = torch.as_tensor(bounds[:, 0], dtype=theta.dtype,
                              device=theta.device)
        high = torch.as_tensor(bounds[:, 1], dtype=theta.dtype,
                               device=theta.device)
        theta = theta.clone().requires_grad_(True)
        Z = Z.clone().requires_grad_(True)
        params = [theta] + ([Z] if self.optimize_inducing else [])
        opt = torch.optim.Adam(params, lr=self.learning_rate) if params else None
        if self.q_update == "adam":
            q_mean = self.q.mean.clone().requires_grad_(True)
            root = torch.linalg.cholesky(self.q.covariance)
            q_raw = positive_tril_raw(root).clone().requires_grad_(True)
            q_opt = torch.optim.Adam([q_mean, q_raw], lr=self.learning_rate)
        step, converged = 0, False
        start_time = time.perf_counter()
        for epoch in range(self.max_iter):
            order = torch.as_tensor(rng.permutation(n), device=X.device)
            estimates, sizes = [], []
            for start in range(0, n, b):
                idx = order[start: start + b]
                if self.q_update == "adam":
                    q = MomentQ(q_mean.detach(), q_raw.detach())
                else:
                    q = self.q
                ev = self._objective(Rows(X[idx], Y[idx], alpha[idx]), q, theta, Z, True,
                                     n_total=n)
                if not math.isfinite(ev.elbo):
                    raise RuntimeError(
                        f"The variational bound became non-finite at epoch {epoch + 1}; use "
                        "a smaller learning_rate or natgrad_step.")
                estimates.append(ev.elbo)
                sizes.append(ev.sums.n)
                if self.q_update == "adam":
                    q_opt.zero_grad()
                    moving = MomentQ(q_mean, q_raw)
                    # E is linear in m and S to first order: dE/dm = r, dE/dS = H
                    surrogate = -(ev.scale * ((ev.sums.r * q_mean).sum()
                                              + (ev.sums.H * moving.covariance).sum())
                                  - moving.kl())
                    surrogate.backward()
                    q_opt.step()
                    self.q = MomentQ(q_mean.detach(), q_raw.detach())
                else:
                    gamma = natgrad_schedule(step, self.natgrad_step)
                    self.q = self._step(ev.sums, ev.scale, gamma)
                if opt is not None:
                    opt.zero_grad()
                    theta.grad = -ev.grad_theta
                    if self.optimize_inducing:
                        Z.grad = -ev.grad_Z
                    opt.step()
                    with torch.no_grad():
                        theta.copy_(torch.maximum(torch.minimum(theta, high), low))
                step += 1
            mean = float(np.dot(sizes, estimates) / n)
            self.history.append(mean)
            self.epoch_end_seconds.append(time.perf_counter() - start_time)
            self.n_iter = epoch + 1
            self._bar.update(1)
            self._bar.set_postfix(elbo=f"{mean:.6g}")
            if self.verbose >= 2:
                self._bar.write(f"epoch {epoch + 1}: bound {mean:.6g}")
            if self.tol is not None and len(self.history) > PLATEAU_WINDOW:
                rise = mean - self.history[-1 - PLATEAU_WINDOW]
                if rise <= PLATEAU_WINDOW * self.tol * abs(mean):
                    converged = True
                    break
        if self.tol is not None and not converged:
            warnings.warn(
                f"The sparse variational fit stopped at max_iter={self.max_iter} epochs "
                f"before its bound levelled off (tol={self.tol}); increase max_iter.",
                ConvergenceWarning)
        if self.q_update == "adam":
            self.q = WhitenedQ.from_moments(self.q.mean, self.q.covariance)
        return theta.detach(), Z.detach()

    def _step(self, sums, scale, gamma):
        """A natural step, centred over latents for a shift-invariant likelihood."""
        q = self.q.natural_step(sums, scale, gamma)
        return q.centred() if self.likelihood.shift_invariant else q

    def _optimal_q(self, rows, theta, Z):
        """From the current ``q`` to the optimum at (theta, Z): block coordinate ascent
        with ``A`` held (``_svgp_inner``) for in-memory rows that fit a chunk, else
        full-batch natural steps."""
        if (self.inner == "cached" and isinstance(rows, Rows)
                and rows.X.shape[0] <= self.batch_size
                and rows.X.shape[0] * Z.shape[0] <= INNER_HELD_ELEMENTS):
            with torch.no_grad():
                L, _ = inducing_cholesky(self.torch_kernel, theta, Z, self.jitter)
                problem = InnerProblem(self.torch_kernel, theta, Z, triangular_inverse(L), rows.X,
                                       rows.Y, self.likelihood, self.batch_size)
            self.q, _, passes, self._gamma = optimal_q(
                problem, self.q, tol=self._inner_tol, dither_tol=DITHER_TOL,
                gamma=self._gamma)
            self.inner_passes += passes
            return problem.n
        ev = self._objective(rows, self.q, theta, Z, False)
        n, gamma = ev.sums.n, 1.0
        for _ in range(INNER_MAX_ITER):
            q_new = self._step(ev.sums, 1.0, gamma)
            ev_new = self._objective(rows, q_new, theta, Z, False)
            self.inner_passes += 1
            gain = ev_new.elbo - ev.elbo
            if gain >= 0:
                self.q, ev, gamma = q_new, ev_new, min(1.0, 2.0 * gamma)
            if abs(gain) <= self._inner_tol * n:  # converged
                break
            if gain < 0 and -gain <= DITHER_TOL * n:
                # the floor of a Monte-Carlo bound (softmax): Price's dE/dv is not the
                # derivative of the estimate, and steps end in a dither of about this size
                break
            if gain < 0:  # a non-conjugate step overshot: shorter
                gamma *= 0.5
                if gamma < 1e-6:
                    break
        return n

    def _fit_full(self, rows, theta, Z):
        learn_Z = self.optimize_inducing and self.optimizer is not None
        packing = Packing(self.torch_kernel.bounds, Z.shape, learn_Z)
        device, dtype = Z.device, Z.dtype
        n = self._optimal_q(rows, theta, Z)
        if self.optimizer is None:
            self.elbo = self._objective(rows, self.q, theta, Z, False).elbo
            self.history.append(self.elbo)
            self.n_iter = 1
            return theta, Z

        best = {"elbo": -math.inf, "q": self.q, "x": None}
        values = []

        def value_and_grad(x, eval_gradient=True):
            theta_x, Z_x = packing.unpack(np.asarray(x, dtype=np.float64), Z, device, dtype)
            # warm start from the best point so far: a line search's next trial lies
            # between it and the last trial, often closer to it
            self.q = best["q"]
            if self.inner_tol == "adaptive" and len(values) >= 2:
                # the inner loop's gap, small beside the last outer change
                change = abs(values[-1] - values[-2]) / n
                self._inner_tol = min(INNER_LOOSE, max(INNER_TOL, INNER_RATIO * change))
            try:
                self._optimal_q(rows, theta_x, Z_x)
                # no natural step follows: the gradient without H (_svgp.block_sums)
                ev = self._objective(rows, self.q, theta_x, Z_x, eval_gradient,
                                     want_H=False)
            except NotPositiveDefiniteError:
                # a trial point beyond what float arithmetic factorises: the line search
                # steps back from +inf
                return (math.inf, np.zeros_like(x)) if eval_gradient else math.inf
            values.append(ev.elbo)
            if ev.elbo > best["elbo"]:
                best.update(elbo=ev.elbo, q=self.q, x=np.array(x, dtype=np.float64))
            self.history.append(ev.elbo)
            self._bar.update(1)
            self._bar.set_postfix(elbo=f"{ev.elbo:.6g}")
            if not eval_gradient:
                return -ev.elbo
            parts = [ev.grad_theta.cpu().numpy()]
            if learn_Z:
                parts.append(ev.grad_Z.cpu().numpy().ravel())
            return -ev.elbo, -np.concatenate(parts).astype(np.float64)

        x0 = packing.pack(theta.cpu().numpy(), Z)
        if callable(self.optimizer):
            x, _ = self.optimizer(value_and_grad, x0, bounds=packing.bounds)
        else:
            x = _lbfgs_plateau(value_and_grad, x0, packing.bounds, self.max_iter, n,
                               self.tol)
            x = best["x"] if x is None else x
        theta, Z = packing.unpack(np.asarray(x, dtype=np.float64), Z, device, dtype)
        self.q = best["q"]
        self._inner_tol = INNER_TOL
        self._optimal_q(rows, theta, Z)  # q at the returned point (not the last trial)
        self.elbo = self._objective(rows, self.q, theta, Z, False).elbo
        self.n_iter = len(self.history)
        return theta, Z

    # ------------------------------------------------------------------ predict
    def latent_mean_and_variance(self, Xq):
        """Mean and variance (n*, L) of each latent function's ``q(f)`` at ``Xq``."""
        return marginals(self.torch_kernel, self.theta, self.Z, self.L_inverse, self.q, Xq,
                         self.batch_size)

    def predict_proba(self, Xq):
        """Class probabilities (n*, C): ``E_q[p(y | f)]``; one-vs-rest normalised by the
        row sum as scikit-learn's ``OneVsRestClassifier``."""
        mean, var = self.latent_mean_and_variance(Xq)
        with torch.no_grad():
            p = self.likelihood.predict(mean, var)
            if isinstance(self.likelihood, Softmax):
                return p
            if p.shape[1] == 1:
                return torch.cat([1.0 - p, p], 1)
            return p / p.sum(1, keepdim=True).clamp_min(torch.finfo(p.dtype).tiny)

    @property
    def q_mu(self):
        """Whitened variational means ``m`` (m, L) (``u_c = L_z v_c``)."""
        return self.q.mean

    @property
    def q_sqrt(self):
        """Lower Cholesky factors (L, m, m) of the whitened covariances ``S_c``."""
        return torch.linalg.cholesky(self.q.covariance)

    def posterior(self, shift, n_features_in, squeeze=None):
        """The :class:`SVGPPosterior` of the fitted ``q`` (for draws)."""
        squeeze = self.q.mean.shape[1] == 1 if squeeze is None else squeeze
        return SVGPPosterior(self, shift, n_features_in, squeeze)


__all__ = ["MomentQ", "NATGRAD_WARMUP", "SVGPMode", "SVGPPosterior", "natgrad_schedule"]
