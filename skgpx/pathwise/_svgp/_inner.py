r"""The optimal ``q(v)`` at fixed ``(theta, Z)`` for rows held in memory: the inner loop of
the sparse classifier's L-BFGS-B route when the whitened cross-covariances fit in memory.

With ``A = L_z^{-1} K_zx`` (m x n) held for the whole inner loop, the bound of
``q(v_c) = N(m_c, S_c)`` is

.. math::

    \mathcal L(m, S) = \sum_i E_i(\mu_i, v_i) - \sum_c \mathrm{KL}_c, \qquad
    \mu = A^T m, \quad v_{ic} = k_{ii} + a_i^T (S_c - I) a_i,

and its two blocks are optimised in turn (block coordinate ascent; the fixed point is the
natural-gradient one of ``_svgp``, ``Lambda_c = I - 2 H_c`` and ``m_c = r_c``):

* **Means at fixed S** (:meth:`InnerProblem.mean_step`).  ``mu`` is linear in ``m`` and
  the variances do not move, so a trial costs ``O(n m L)`` and one likelihood evaluation,
  not the ``O(n m^2 L)`` of a full pass.  The direction is the Newton step of each latent's
  own block, ``d_c = S_c (r_c - m_c)`` (``r_c = A g_c``; for a Bernoulli latent with
  ``Lambda_c = I - 2 H_c`` this is Newton's step exactly, as ``d^2 E / d mu^2 = 2 h``
  (Bonnet-Price)).  For the softmax the latents are coupled (its Hessian
  ``diag(p) - p p^T`` is a Laplacian over classes whose diagonal alone overstates the
  step up to twofold, which makes the undamped step oscillate), so the step length
  ``alpha`` comes from the secant of the directional derivative between ``alpha = 0`` and
  ``1`` (exact for a quadratic), and the best of the trials is kept.  ``g`` is the exact
  derivative of the (Monte-Carlo) estimate, so these steps climb the very bound that is
  reported.
* **Covariances at fixed m** (:meth:`InnerProblem.precision_step`).
  ``d L / d S_c = H_c - (I - Lambda_c) / 2`` vanishes at ``Lambda_c = I - 2 H_c`` with
  ``H_c = A diag(h_c) A^T``; the step ``Lambda <- (1 - gamma) Lambda + gamma (I - 2 H)`` is
  taken with ``gamma = 1``, halved while it lowers the bound.  It costs a pass of
  ``O(n m^2 L)`` (``H`` and the new variances).

Memory: ``A`` is ``m x n``: the route is taken for in-memory rows with ``n <= batch_size``
(``O(m * batch_size)``, the bound of a chunked pass); larger or Dask rows keep the
full-pass loop of ``_svgp._engine``.
"""

import math

import torch

from ..._base import rows_per_chunk
from ..._buffers import Buffers
from ..._inducing._cross import stationary_cross
from ...linalg import NotPositiveDefiniteError, gram, lower_matmul, matmul
from ._bound import Groups, WhitenedQ, as_groups, cross_block

# a covariance step that loses after a round that gained under NEAR * tol per row ends
# the loop: the remaining gap is at the Monte-Carlo floor (optimal_q)
NEAR = 100.0


class InnerProblem:
    """The bound of ``q`` at fixed ``(theta, Z)`` with ``A`` held (module docstring).

    Parameters
    ----------
    kernel : TorchKernel or _svgp._bound.Groups
        Groups: one ``A`` per group, each group's latents through its own.
    theta : Tensor
    Z : Tensor of shape (m, d) (or (G, m, d), as ``_svgp._bound.Groups``)
    L_inverse : Tensor of shape (m, m), or a tuple of them (one per group)
        ``L_z^{-1}``.
    X : Tensor of shape (n, d)
    Y : Tensor of shape (n, L)
    likelihood : likelihood object (``_likelihoods`` protocol), at its fitted theta
    batch_size : int
        Rows per chunk of the ``O(n m^2)`` products.
    """

    def __init__(self, kernel, theta, Z, L_inverse, X, Y, likelihood, batch_size):
        self.Y, self.likelihood = Y, likelihood
        n_latent = Y.shape[1] if not isinstance(kernel, Groups) else kernel.latents[-1].stop
        groups = as_groups(kernel, n_latent)
        L_inverses = L_inverse if isinstance(L_inverse, (tuple, list)) else (L_inverse,)
        m, n = L_inverses[0].shape[0], X.shape[0]
        self.step = rows_per_chunk(batch_size, 3 * m, X.device)
        self.latents, self.As, self.kxxs = groups.latents, [], []
        with torch.no_grad():
            for g, kern in enumerate(groups.kernels):
                theta_g, Z_g = theta[groups.thetas[g]], groups.inducing(Z, g)
                cross = stationary_cross(kern, theta_g, Z_g)
                buffers = Buffers()
                A = X.new_empty(m, n)
                for start in range(0, n, self.step):
                    rows = slice(start, start + self.step)
                    K, _, _ = cross_block(kern, theta_g, Z_g, X[rows], cross, buffers)
                    lower_matmul(L_inverses[g], K.contiguous(), A[:, rows])
                self.As.append(A)
                self.kxxs.append(kern.diag(X, theta_g, part="full"))
        self.A, self.kxx = self.As[0], self.kxxs[0]
        self.n = n

    # ------------------------------------------------------------------ pieces
    def _groups(self):
        return zip(self.latents, self.As, self.kxxs)

    def variances(self, q):
        """``v`` (n, L) of ``q(f)`` at the rows."""
        n_latent = q.mean.shape[1]
        var = self.A.new_empty(self.n, n_latent)
        with torch.no_grad():
            for cols, A_all, kxx in self._groups():
                for start in range(0, self.n, self.step):
                    rows = slice(start, start + self.step)
                    A = A_all[:, rows]
                    for c in range(cols.start, cols.stop):
                        U = matmul(q.excess[c], A)
                        var[rows, c] = kxx[rows] + (U * A).sum(0)
        return var

    def mean_map(self, mean):
        """``mu = A^T m`` (n, L), each group's latents through its own ``A``."""
        if len(self.As) == 1:
            return matmul(self.A.T, mean)
        return torch.cat([matmul(A.T, mean[:, cols]) for cols, A, _ in self._groups()], 1)

    def row_map(self, g):
        """``r = A g`` (m, L), each group's latents through its own ``A``."""
        if len(self.As) == 1:
            return matmul(self.A, g)
        return torch.cat([matmul(A, g[:, cols]) for cols, A, _ in self._groups()], 1)

    def value(self, mean, var):
        """``(sum_i E_i, g, h)`` at the means ``mean`` (m, L) and the variances ``var``."""
        with torch.no_grad():
            mu = self.mean_map(mean)
            E, g, h = self.likelihood.expectations(self.Y, mu, var)
        return E.sum(), g, h

    def curvature(self, h):
        """``H_c = A diag(h_c) A^T`` (L, m, m), by rank-n updates of ``A sqrt(-h_c)`` (and
        of ``A sqrt(h_c)`` for a likelihood that is not log-concave)."""
        H = []
        with torch.no_grad():
            for cols, A, _ in self._groups():
                for c in range(cols.start, cols.stop):
                    scaled = A * (-h[:, c]).clamp_min(0.0).sqrt()
                    H.append(-gram(scaled.contiguous()))
                    if not self.likelihood.log_concave:
                        scaled = A * h[:, c].clamp_min(0.0).sqrt()
                        H[-1] = H[-1] + gram(scaled.contiguous())
        return torch.stack(H)

    # ------------------------------------------------------------------ steps
    def mean_step(self, q, state):
        """One step on the means (module docstring); returns the new ``(q, state)`` and
        the gain of the bound (>= 0; 0 when no trial improved).

        The direction is preconditioned conjugate gradients with the preconditioner
        ``S_c`` per latent (the Newton step of each latent's own block) and the
        Polak-Ribiere+ coefficient: with the softmax's coupled latents, preconditioned
        steepest ascent alone gains only a factor of about two per step.  ``state``
        carries the last gradient and direction; a covariance step resets them.
        """
        with torch.no_grad():
            grad = state.get("grad")
            if grad is None:
                grad = self.row_map(state["g"]) - q.mean  # dL/dm: r - m
            z = self._shifted((q.covariance @ grad.T[..., None])[..., 0].T)
            d = z
            if "z" in state:  # Polak-Ribiere+ with the preconditioner S
                beta = float((z * (grad - state["grad_old"])).sum()) / float(
                    (state["z"] * state["grad_old"]).sum())
                if beta > 0:
                    d = z + beta * state["d"]
                    if not float((grad * d).sum()) > 0:
                        d = z
            slope0 = float((grad * d).sum())
            if not slope0 > 0:
                return q, state, 0.0
            f0 = float(state["E"]) - 0.5 * float((q.mean * q.mean).sum())
            best = (f0, None, None)
            alpha = 1.0
            for _ in range(2):
                mean = q.mean + alpha * d
                E, g, h = self.value(mean, state["var"])
                f = float(E) - 0.5 * float((mean * mean).sum())
                grad_trial = self.row_map(g) - mean
                if f > best[0]:
                    best = (f, mean, dict(state, E=E, g=g, h=h, grad=grad_trial))
                # the secant of the directional derivative between 0 and alpha
                slope = float((grad_trial * d).sum())
                if not slope0 - slope > 0:
                    break
                alpha_next = alpha * slope0 / (slope0 - slope)
                if abs(alpha_next - alpha) <= 0.1 * alpha:
                    break
                alpha = alpha_next
        if best[1] is None:  # restart the conjugate directions
            return q, {k: v for k, v in state.items() if k not in ("z", "d")}, 0.0
        # the next step's Polak-Ribiere coefficient needs this step's z, d and gradient
        new_state = dict(best[2], z=z, d=d, grad_old=grad)
        return q.with_mean(best[1]), new_state, best[0] - f0

    def _shifted(self, d):
        """``d`` with its mean over latents removed when the likelihood sees only
        differences (softmax): the means stay centred (``WhitenedQ.centred``)."""
        if self.likelihood.shift_invariant:
            return d - d.mean(1, keepdim=True)
        return d

    def precision_step(self, q, state, gamma):
        """``Lambda <- (1 - gamma) Lambda + gamma (I - 2 H)`` at fixed means; returns the
        trial ``(q, state)`` and its bound."""
        H = self.curvature(state["h"])
        eye = torch.eye(H.shape[1], dtype=H.dtype, device=H.device)
        precision = (1.0 - gamma) * q.precision + gamma * (eye - 2.0 * H)
        precision = 0.5 * (precision + precision.transpose(1, 2))
        trial = WhitenedQ(precision, (precision @ q.mean.T[..., None])[..., 0].T)
        var = self.variances(trial)
        E, g, h = self.value(trial.mean, var)
        return trial, dict(E=E, g=g, h=h, var=var), float(E - trial.kl())

    def start(self, q):
        var = self.variances(q)
        E, g, h = self.value(q.mean, var)
        return dict(E=E, g=g, h=h, var=var), float(E - q.kl())


def optimal_q(problem, q, *, tol, dither_tol, gamma=1.0, max_iter=100, mean_iter=20):
    """Block coordinate ascent from ``q`` to the optimal ``q`` at fixed ``(theta, Z)``.

    Each round takes a covariance step of size ``gamma`` (a warm start's covariances
    belong to other hyperparameters; with them refreshed first, the steps on the means
    converge in a few steps instead of dozens) and then mean steps until one gains under
    ``tol`` per row.  A covariance step that lowers the bound is retried at half the size
    unless it lost under ``dither_tol`` per row, or the previous round gained under
    ``NEAR * tol`` per row: then the covariances are taken as optimal (the floor of a
    Monte-Carlo bound, whose ``h`` is Price's estimate and not the derivative of the
    estimate, so that at its optimum every covariance step loses a little) and the loop
    ends after the means.  It also ends when a round gains under ``tol`` per row.  The
    size grows by half after each accepted step, to at most 1.

    Returns ``(q, bound, n_passes, gamma)``: ``n_passes`` counts the ``O(n m^2 L)``
    passes, ``gamma`` is the size to start from next time (a softmax's covariance
    iteration can oscillate at ``gamma = 1``, and the next evaluation's would too).
    """
    n = problem.n
    if problem.likelihood.shift_invariant:
        q = q.centred()
    state, f = problem.start(q)
    passes, last_round = 1, math.inf
    for _ in range(max_iter):
        try:
            trial, trial_state, f_trial = problem.precision_step(q, state, gamma)
        except NotPositiveDefiniteError:  # h > 0 somewhere (not log-concave): shorter
            gamma *= 0.5
            if gamma < 1e-6:
                break
            continue
        passes += 1
        gain, done = f_trial - f, False
        if gain >= 0:
            q, state, f = trial, trial_state, f_trial
            gamma = min(1.0, 1.5 * gamma)
        elif -gain <= dither_tol * n or last_round <= NEAR * tol * n:
            gain, done = 0.0, True
        else:  # a non-conjugate step overshot: shorter
            gamma *= 0.5
            if gamma < 1e-6:
                break
            continue
        round_gain = gain
        for _ in range(mean_iter):
            q, state, gain = problem.mean_step(q, state)
            round_gain += gain
            f += gain
            if gain <= tol * n:
                break
        last_round = round_gain
        if done or round_gain <= tol * n:
            break
    if not math.isfinite(f):
        raise RuntimeError("The variational bound is not finite at these hyperparameters.")
    return q, f, passes, max(gamma, 1e-3)


__all__ = ["InnerProblem", "optimal_q"]
