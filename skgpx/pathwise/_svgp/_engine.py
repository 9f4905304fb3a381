r"""Training drivers of the sparse variational GP engine (the classifier's, and the
non-Gaussian regression's), and its mode object.

Interface (the exact-mode Laplace object of ``_laplace`` has the same shape)::

    mode = SVGPEngine(kernel, likelihood, multi_class=..., optimizer=..., ...,
                    groups=None, share_inducing=True)
    mode.fit(rows, Z0, rng)     # rows: _inducing._rows.Rows or DaskRows, labels/targets as Y
    mode.latent_mean_and_variance(Xq)   # -> (mean, var), each (n*, L): all latents
    mode.predict_proba(Xq)              # -> (n*, C), rows sum to one (classifiers)
    mode.posterior(shift, n_features_in, group=0)  # -> SVGPPosterior of one group
    mode.elbo, mode.history, mode.n_iter, mode.theta, mode.kernel_, mode.Z,
    mode.q_mu, mode.q_sqrt, mode.jitter_, mode.epoch_end_seconds ("adam": wall-clock
    seconds from the start of training to the end of each epoch), mode.likelihood_
    (the likelihood at its fitted theta)

Classifier labels are encoded per latent by the caller: 0/1 in one column (binary), one
0/1 column per class (one-vs-rest: ``L = C`` Bernoulli latents sharing Z and the kernel),
or one-hot (softmax).  ``rows.Y`` carries them; ``rows.alpha`` is ignored.

**Latent groups** (``_svgp._bound.Groups``).  ``groups=None``: one group of
``L = rows.Y.shape[1]`` latents with ``kernel`` (the classifier).  Otherwise a list of
``(kernel_g, n_g)``, ``kernel_g=None`` meaning ``kernel``: group ``g`` owns the next
``n_g`` latents, its own theta and ``L_z``; ``L = sum n_g`` (the heteroscedastic model:
``[(None, T), (noise_kernel, T)]`` with ``Y`` of ``T`` columns).  ``share_inducing``: one
``Z`` (m, d) for all groups, or one per group (``(G, m, d)``, each from ``Z0``).  Fitted
per group: ``thetas``, ``kernels_`` (sklearn), ``torch_kernels``, ``Zs``, ``Ls``,
``L_inverses``, ``latents`` (slices of the L latents); packed: ``theta_packed``
(the groups' thetas end to end), ``Z_packed``; group 0's also as ``theta``, ``kernel_``,
``torch_kernel``, ``Z``, ``L``, ``L_inverse``; ``jitter_`` the largest group's.

**Likelihood hyperparameters** (``likelihood.theta``, k of them, may be 0): learned with
the kernels' by either route, in ``likelihood.bounds``: Adam steps them (clamped) with
theta and Z; L-BFGS-B packs ``x = [theta_1 .. theta_G, theta_lik, vec Z]``.  The mode's
``_objective(rows, q, theta_packed, Z_packed, want_grad, likelihood=...)`` evaluates the
bound at any of them (``likelihood.with_theta``).

**Likelihoods that are not log-concave** (``likelihood.log_concave = False``): a natural
step whose precision does not factorise is retried with ``gamma`` halved (the "adam"
route: that step only, :meth:`SVGPEngine._safe_step`; the full-batch loop and the held-A
loop: as a step that lowers the bound, their existing shortening).

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
  the inner loop of ``_svgp._inner`` (``A = L_z^{-1} K_zx`` held: covariance steps, then
  conjugate steps on the means that cost ``O(n m L)`` each); other rows full-batch
  natural steps (``gamma = 1``, halved while a step lowers the bound).  The inner
  tolerance (``inner_tol="adaptive"``) is :data:`INNER_RATIO` times the per-row change of
  the bound between the last two evaluations, within [:data:`INNER_TOL`,
  :data:`INNER_LOOSE`] (far from the optimum L-BFGS-B needs no exact ``q``; near it the
  tolerance tightens to ``INNER_TOL``); ``inner_tol=None`` keeps ``INNER_TOL``.
  L-BFGS-B itself uses ``_optimize.lbfgs``'s settings (per-row projected-gradient test) and
  the plateau rule of the "adam" route on ``tol`` (``_svgp._lbfgs._lbfgs_plateau``); ``max_iter``
  counts its iterations, ``n_iter`` and ``history`` its evaluations.
* a callable (scikit-learn's ``optimizer(obj_func, initial_theta, bounds)``) gets the same
  objective as L-BFGS-B; ``None`` keeps theta and Z and only fits ``q``.
"""

import math
import time
import warnings

import numpy as np
import torch
from sklearn.exceptions import ConvergenceWarning

from ..._base import MovableState, progress_bar
from ..._inducing._collapsed import inducing_cholesky, whitening
from ..._inducing._rows import Rows
from ...kernels import TorchKernel
from ...linalg import NotPositiveDefiniteError
from .._likelihoods._classification import Softmax
from ._bound import Groups, WhitenedQ, as_groups, evaluate, marginals, triangular_inverse
from ._inner import InnerProblem, optimal_q
from ._lbfgs import INNER_LOOSE, INNER_TOL, PLATEAU_WINDOW, fit_full
from ._posterior import SVGPPosterior

# the warm-up of the natural step size (module docstring)
NATGRAD_WARMUP = 5
GAMMA_START = 1e-4
INNER_MAX_ITER = 100
# ... or once a step loses less than this per row (the dither of a Monte-Carlo bound)
DITHER_TOL = 1e-6
# the held-A inner loop keeps A (m x n) when n <= batch_size and m n <= this (32 MB in
# float64: m = 256 up to 16 384 rows)
INNER_HELD_ELEMENTS = 2 ** 22
# a natural step whose precision does not factorise is retried at half the size this often
MAX_HALVINGS = 30


def natgrad_schedule(step, natgrad_step, warmup=NATGRAD_WARMUP):
    """``gamma`` at step ``step`` (from 0): log-linear from 1e-4 to ``natgrad_step``."""
    if step >= warmup or natgrad_step <= GAMMA_START:
        return float(natgrad_step)
    frac = step / warmup
    return float(math.exp((1 - frac) * math.log(GAMMA_START) + frac * math.log(natgrad_step)))


class SVGPEngine(MovableState):
    """The sparse variational mode of ``PathwiseGPClassifier`` (module docstring).

    Parameters
    ----------
    kernel : sklearn kernel
        The initial kernel (not modified) of the first latent group; a top-level
        ``WhiteKernel`` is latent noise at each row, outside ``u = f(Z)``.
    likelihood : likelihood object
        ``_likelihoods._classification.Bernoulli``, ``Softmax``, ``Gaussian`` or one of
        ``_likelihoods._regression`` (the protocol of ``_likelihoods._classification``); its
        ``theta`` is the start of its hyperparameters, learned with the kernels' (``likelihood_``).
    multi_class : {"binary", "one_vs_rest", "softmax"}
    optimizer : {"adam", "fmin_l_bfgs_b"}, callable or None
    max_iter, tol, learning_rate, natgrad_step, minibatch_size, optimize_inducing,
    jitter, batch_size, verbose :
        As ``PathwiseGPClassifier``.
    groups : list of (kernel or None, int), default=None
        Latent groups (module docstring): ``None`` is one group of ``rows.Y.shape[1]``
        latents with ``kernel``; else group ``g`` has ``n_g`` latents and its own kernel
        (``None``: ``kernel``), e.g. ``[(None, T), (noise_kernel, T)]``.
    share_inducing : bool, default=True
        One ``Z`` for all groups, or one per group (each starts at ``Z0``).
    label : str
        The progress bar's title (``verbose``).
    """

    def __init__(self, kernel, likelihood, *, multi_class="binary", optimizer="adam",
                 max_iter=100, tol=1e-4, learning_rate=0.01, natgrad_step=0.1,
                 minibatch_size=1024, optimize_inducing=True, jitter=1e-8, batch_size=8192,
                 verbose=0, inner="cached", inner_tol="adaptive",
                 groups=None, share_inducing=True, label="PathwiseGPClassifier fit (sparse)"):
        self.kernel, self.likelihood, self.multi_class = kernel, likelihood, multi_class
        self.optimizer, self.max_iter, self.tol = optimizer, max_iter, tol
        self.learning_rate, self.natgrad_step = learning_rate, natgrad_step
        self.minibatch_size, self.optimize_inducing = minibatch_size, optimize_inducing
        self.jitter, self.batch_size, self.verbose = jitter, batch_size, verbose
        self.inner, self.inner_tol = inner, inner_tol
        self.groups, self.share_inducing, self.label = groups, share_inducing, label
        self.inner_passes, self._inner_tol, self._gamma = 0, INNER_TOL, 1.0

    # ------------------------------------------------------------------ fit
    def _setup(self, rows, Z0):
        """Kernels, latent slices, the packed theta and Z and the likelihood's theta."""
        specs = self.groups if self.groups is not None else [(None, rows.Y.shape[1])]
        self.kernels = [self.kernel if k is None else k for k, _ in specs]
        self.torch_kernels = [TorchKernel(k) for k in self.kernels]
        self.torch_kernel = self.torch_kernels[0]
        self._sizes = [int(size) for _, size in specs]
        groups = Groups(self.torch_kernels, self._sizes, self.share_inducing)
        self.latents, self._theta_slices = groups.latents, groups.thetas
        dtype, device = Z0.dtype, Z0.device
        thetas = [k.theta_tensor(device, dtype) for k in self.torch_kernels]
        theta = thetas[0] if len(thetas) == 1 else torch.cat(thetas)
        Z = Z0.detach().clone()
        if not groups.shared:
            Z = Z.expand(len(specs), *Z.shape).clone()
        bounds = [np.asarray(k.bounds, dtype=np.float64).reshape(-1, 2)
                  for k in self.torch_kernels]
        self._theta_bounds = np.vstack(bounds)
        self.likelihood_ = self.likelihood
        return theta, Z

    def _engine_kernel(self):
        """What ``_svgp._bound.evaluate`` takes: the kernel (one group) or the :class:`Groups`."""
        if self.groups is None:
            return self.torch_kernel
        return Groups([self.torch_kernel] + self.torch_kernels[1:], self._sizes,
                      self.share_inducing)

    def _current(self):
        """The likelihood at its current (during fit) or fitted theta."""
        return getattr(self, "likelihood_", self.likelihood)

    def _lik_at(self, lik_theta):
        """The likelihood at ``lik_theta`` (None: as given)."""
        if lik_theta is None:
            return self.likelihood
        return self.likelihood.with_theta(lik_theta.detach().cpu().to(torch.float64))

    def fit(self, rows, Z0, rng):
        """Fit ``q``, theta and Z on ``rows`` from inducing inputs ``Z0`` (m, d)."""
        theta, Z = self._setup(rows, Z0)
        dtype, device = Z0.dtype, Z0.device
        n_latent = sum(self._sizes)
        self.q = WhitenedQ.prior(Z0.shape[0], n_latent, dtype, device)
        self.history, self.n_iter, self.epoch_end_seconds = [], 0, []
        self.inner_passes, self._gamma = 0, 1.0
        self._inner_tol = INNER_LOOSE if self.inner_tol == "adaptive" else INNER_TOL
        with progress_bar(self.verbose, self.label,
                          total=self.max_iter if self.optimizer == "adam" else None) as bar:
            self._bar = bar
            if self.optimizer == "adam":
                theta, Z = self._fit_adam(rows, theta, Z, rng)
            else:
                theta, Z = self._fit_full(rows, theta, Z)
        del self._bar
        self._finish(theta.detach(), Z.detach())
        if self.optimizer == "adam":  # the bound on all rows at the final parameters
            self.elbo = self._objective(rows, self.q, self.theta_packed, self.Z_packed,
                                        False).elbo
        return self

    def _finish(self, theta, Z):
        """The fitted state per group (module docstring: ``thetas``, ``kernels_``, ``Zs``,
        ``Ls``); group 0's also as ``theta``, ``kernel_``, ``Z``, ``L``, ``L_inverse``."""
        self.theta_packed, self.Z_packed = theta, Z
        self.thetas = [theta[s] for s in self._theta_slices]
        self.kernels_ = [k.clone_with_theta(t.cpu().numpy().astype(np.float64))
                         for k, t in zip(self.kernels, self.thetas)]
        self.torch_kernels = [TorchKernel(k) for k in self.kernels_]
        self.Zs = [Z if self.groups is None or self.share_inducing else Z[g]
                   for g in range(len(self.kernels))]
        self.Ls, self.L_inverses, jitters = [], [], []
        with torch.no_grad():
            for kern, theta_g, Z_g in zip(self.torch_kernels, self.thetas, self.Zs):
                L, jitter = inducing_cholesky(kern, theta_g, Z_g, self.jitter, warn=True)
                self.Ls.append(L)
                self.L_inverses.append(whitening(L))
                jitters.append(jitter)
        self.theta, self.kernel_, self.torch_kernel = (self.thetas[0], self.kernels_[0],
                                                       self.torch_kernels[0])
        self.Z, self.L, self.L_inverse = self.Zs[0], self.Ls[0], self.L_inverses[0]
        self.jitters, self.jitter_ = jitters, max(jitters)

    def _objective(self, rows, q, theta, Z, want_grad, n_total=None, want_H=True,
                   likelihood=None):
        """The bound at the packed ``theta`` and ``Z`` (``_svgp._bound.evaluate``), with
        ``likelihood`` (default: the fitted or current ``likelihood_``)."""
        return evaluate(self._engine_kernel(), theta, Z, q, rows,
                        self._current() if likelihood is None else likelihood,
                        jitter=self.jitter, batch_size=self.batch_size, n_total=n_total,
                        want_grad=want_grad, want_H=want_H)

    def _fit_adam(self, rows, theta, Z, rng):
        if not isinstance(rows, Rows):
            raise ValueError("optimizer='adam' needs the rows in memory (numpy or torch "
                             "input); use optimizer='fmin_l_bfgs_b' for Dask arrays.")
        X, Y, alpha = rows.X, rows.Y, rows.alpha
        n = X.shape[0]
        b = min(int(self.minibatch_size), n)
        low, high = (torch.as_tensor(self._theta_bounds[:, j], dtype=theta.dtype,
                                     device=theta.device) for j in (0, 1))
        theta = theta.clone().requires_grad_(True)
        Z = Z.clone().requires_grad_(True)
        lik_theta = None
        if len(self.likelihood.names):
            lik_theta = self.likelihood.theta.to(dtype=theta.dtype, device=theta.device)
            lik_theta = lik_theta.clone().requires_grad_(True)
            lik_bounds = np.asarray(self.likelihood.bounds, dtype=np.float64).reshape(-1, 2)
            lik_low, lik_high = (torch.as_tensor(lik_bounds[:, j], dtype=theta.dtype,
                                                 device=theta.device) for j in (0, 1))
        params = ([theta] + ([lik_theta] if lik_theta is not None else [])
                  + ([Z] if self.optimize_inducing else []))
        opt = torch.optim.Adam(params, lr=self.learning_rate) if params else None
        step, converged = 0, False
        start_time = time.perf_counter()
        for epoch in range(self.max_iter):
            order = torch.as_tensor(rng.permutation(n), device=X.device)
            estimates, sizes = [], []
            for start in range(0, n, b):
                idx = order[start: start + b]
                q = self.q
                self.likelihood_ = self._lik_at(lik_theta)
                ev = self._objective(Rows(X[idx], Y[idx], alpha[idx]), q, theta, Z, True,
                                     n_total=n)
                if not math.isfinite(ev.elbo):
                    raise RuntimeError(
                        f"The variational bound became non-finite at epoch {epoch + 1}; use "
                        "a smaller learning_rate or natgrad_step.")
                estimates.append(ev.elbo)
                sizes.append(ev.sums.n)
                gamma = natgrad_schedule(step, self.natgrad_step)
                self.q = self._safe_step(ev.sums, ev.scale, gamma)
                if opt is not None:
                    opt.zero_grad()
                    theta.grad = -ev.grad_theta
                    if lik_theta is not None:
                        lik_theta.grad = -ev.grad_lik
                    if self.optimize_inducing:
                        Z.grad = -ev.grad_Z
                    opt.step()
                    with torch.no_grad():
                        theta.copy_(torch.maximum(torch.minimum(theta, high), low))
                        if lik_theta is not None:
                            lik_theta.copy_(torch.maximum(torch.minimum(lik_theta, lik_high),
                                                          lik_low))
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
        self.likelihood_ = self._lik_at(lik_theta)
        return theta.detach(), Z.detach()

    def _step(self, sums, scale, gamma):
        """A natural step, centred over latents for a shift-invariant likelihood."""
        q = self.q.natural_step(sums, scale, gamma)
        return q.centred() if self.likelihood.shift_invariant else q

    def _safe_step(self, sums, scale, gamma):
        """:meth:`_step`, retried at half the size while its precision does not factorise
        (a non-log-concave likelihood's ``h > 0``: ``I - 2 s H`` may be indefinite, and
        the mixture with the current precision only for a smaller ``gamma``)."""
        for _ in range(MAX_HALVINGS):
            try:
                return self._step(sums, scale, gamma)
            except NotPositiveDefiniteError:
                gamma *= 0.5
        return self._step(sums, scale, gamma)

    def _optimal_q(self, rows, theta, Z):
        """From the current ``q`` to the optimum at (theta, Z): block coordinate ascent
        with ``A`` held (``_svgp._inner``) for in-memory rows that fit a chunk, else
        full-batch natural steps (a step whose precision does not factorise counts as
        one that lowers the bound)."""
        if (self.inner == "cached" and isinstance(rows, Rows)
                and rows.X.shape[0] <= self.batch_size
                and rows.X.shape[0] * Z.shape[-2] * len(self.groups or [None])
                <= INNER_HELD_ELEMENTS):  # one A (m, n) per group
            kernel = self._engine_kernel()
            groups = as_groups(kernel, self.q.mean.shape[1])
            with torch.no_grad():
                L_inverses = []
                for g, kern in enumerate(groups.kernels):
                    L, _ = inducing_cholesky(kern, theta[groups.thetas[g]],
                                             groups.inducing(Z, g), self.jitter)
                    L_inverses.append(triangular_inverse(L))
                L_inverse = L_inverses[0] if len(groups) == 1 else tuple(L_inverses)
                problem = InnerProblem(kernel, theta, Z, L_inverse, rows.X, rows.Y,
                                       self._current(), self.batch_size)
            self.q, _, passes, self._gamma = optimal_q(
                problem, self.q, tol=self._inner_tol, dither_tol=DITHER_TOL,
                gamma=self._gamma)
            self.inner_passes += passes
            return problem.n
        ev = self._objective(rows, self.q, theta, Z, False)
        n, gamma = ev.sums.n, 1.0
        for _ in range(INNER_MAX_ITER):
            try:
                q_new = self._step(ev.sums, 1.0, gamma)
            except NotPositiveDefiniteError:
                q_new = None
            if q_new is not None:
                ev_new = self._objective(rows, q_new, theta, Z, False)
                self.inner_passes += 1
                gain = ev_new.elbo - ev.elbo
            else:
                gain = -math.inf
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
        return fit_full(self, rows, theta, Z)

    # ------------------------------------------------------------------ predict
    def latent_mean_and_variance(self, Xq):
        """Mean and variance (n*, L) of each latent function's ``q(f)`` at ``Xq`` (all
        groups' latents, in their order)."""
        if self.groups is None:
            return marginals(self.torch_kernel, self.theta, self.Z, self.L_inverse, self.q,
                             Xq, self.batch_size)
        return marginals(self._engine_kernel(), self.theta_packed, self.Z_packed,
                         tuple(self.L_inverses), self.q, Xq, self.batch_size)

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

    def posterior(self, shift, n_features_in, squeeze=None, group=0):
        """The :class:`SVGPPosterior` of the fitted ``q`` of one latent group (for draws of
        its latents: ``f``, or ``g`` for a heteroscedastic model's noise)."""
        cols = self.latents[group]
        squeeze = cols.stop - cols.start == 1 if squeeze is None else squeeze
        return SVGPPosterior(self, shift, n_features_in, squeeze, group)


__all__ = ["NATGRAD_WARMUP", "SVGPEngine", "SVGPPosterior", "natgrad_schedule"]
