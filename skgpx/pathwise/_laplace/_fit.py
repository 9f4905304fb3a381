"""Fitting the Laplace classifier's hyperparameters: batched objectives, lock-step L-BFGS-B.

One-vs-rest has one binary problem per class on the same inputs, each with its own kernel
hyperparameters and its own L-BFGS-B run, as scikit-learn's ``OneVsRestClassifier`` fits
them.  Here the ``C`` runs advance in lock step: each run is scipy's own L-BFGS-B in a
thread, whose objective call posts its ``theta`` and waits; once every live run has posted,
the main thread evaluates all of them as one batched torch computation
(:meth:`LaplaceProblems.objective`) and hands each its value and gradient.  A run's
iterates depend only on its own objective, so they are scikit-learn's, evaluation for
evaluation; only the linear algebra is batched.
"""

import sys
import threading
import warnings

import numpy as np
import scipy.optimize
import torch
from sklearn.base import clone
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state

from ..._base import progress_bar
from ...kernels import ObjectRows, squared_distance_profile_
from ._newton import NewtonPosterior, SMALL_MAX, lml_gradient_weights, on_lapack, posterior_mode


# kernel matrices' pieces (elements, all problems of a batch) kept for the gradient
PIECES_MAX = SMALL_MAX


class HyperparameterMap:
    """The signal scale ``s``, length scale(s) ``l`` and noise level ``w`` of a stationary
    kernel (:meth:`skgpx.kernels.TorchKernel.stationary_signal`) as functions of theta.

    scikit-learn's ``theta`` holds the logarithms of the free hyperparameters, so each of
    ``s``, ``l_j`` and ``w`` is ``exp(theta_k)`` for one ``k`` or a fixed value: found once
    here (from the Jacobian of the kernel's own maps at its theta, checked at a second
    theta), it gives the values of a batch of thetas in one ``exp`` and the gradient in
    theta of any function of them as ``value * partial`` (no autograd), instead of a walk
    over the scikit-learn kernel's hyperparameters for each value of each problem.
    Kernels whose values are not of this form (two ``WhiteKernel`` summands, say) are
    evaluated through those maps as given.
    """

    def __init__(self, kernel, stationary):
        _, scale, length_scale = stationary
        self.n_length = length_scale(kernel.theta_tensor()).numel()
        self._maps = (scale, length_scale, kernel.noise_level)
        theta = kernel.theta_tensor()
        self.index = None
        if theta.numel() == 0:
            return
        J = torch.autograd.functional.jacobian(self._direct, theta)  # (m, p)
        fixed = self._direct(theta)
        moved = J != 0
        index = torch.full((J.shape[0],), -1, dtype=torch.long)
        for row in range(J.shape[0]):
            cols = moved[row].nonzero()[:, 0]
            if cols.numel() > 1 or (cols.numel() == 1
                                    and not bool(J[row, cols[0]] == fixed[row])):
                return  # not exp(theta_k): use the kernel's maps
            if cols.numel() == 1:
                index[row] = cols[0]
        self.index, self.free, self.fixed = index, index >= 0, fixed
        other = theta + 0.3125
        if not torch.allclose(self(other[None])[0], self._direct(other), rtol=1e-14,
                              atol=0.0):
            self.index = None

    def _direct(self, theta):
        scale, length_scale, noise = self._maps
        return torch.cat([scale(theta).reshape(1), length_scale(theta).reshape(-1),
                          noise(theta).reshape(1)])

    def __call__(self, thetas):
        """Values ``(s, l_1.., w)`` (B, m) of thetas (B, p)."""
        if self.index is None:
            return torch.stack([self._direct(theta) for theta in thetas])
        free = self.free.to(thetas.device)
        values = self.fixed.to(thetas).expand(thetas.shape[0], -1).clone()
        values[:, free] = torch.exp(thetas[:, self.index.to(thetas.device)[free]])
        return values

    def split(self, values):
        """``s``, ``l`` and ``w`` (0-d, (L,), 0-d) of one row of values."""
        return values[0], values[1: 1 + self.n_length], values[1 + self.n_length]

    def gradient(self, theta, values, d_scale, d_length, d_noise):
        """The gradient in ``theta`` of a function with partials ``d_scale``,
        ``d_length`` and ``d_noise`` in ``s``, ``l`` and ``w`` at ``values``."""
        partials = torch.cat([d_scale.reshape(1), d_length.reshape(-1), d_noise.reshape(1)])
        if self.index is not None:
            free = self.free.to(theta.device)
            return torch.zeros_like(theta).index_add_(
                0, self.index.to(theta.device)[free], (values * partials)[free])
        with torch.enable_grad():
            free = theta.detach().clone().requires_grad_(True)
            total = (self._direct(free) * partials).sum()
            if not total.requires_grad:
                return torch.zeros_like(theta)
            (grad,) = torch.autograd.grad(total, free, allow_unused=True)
        return torch.zeros_like(theta) if grad is None else grad


class LaplaceProblems:
    """``C`` binary problems on the rows ``X``: labels ``Y`` (C, n), one kernel structure.

    ``kernel`` is a :class:`skgpx.kernels.TorchKernel`; problem ``c`` evaluates it at its
    own ``theta``.  With ``warm_start`` each problem's Newton iterations start from the
    mode of its previous evaluation (scikit-learn's ``f_cached``), else from zero.
    """

    def __init__(self, kernel, X, Y, link, max_iter, warm_start):
        self.kernel, self.X, self.Y = kernel, X, Y
        self.link, self.max_iter, self.warm_start = link, max_iter, warm_start
        self.f_cache = [None] * Y.shape[0]
        # per problem, (theta, NewtonPosterior, row) of its last evaluation, when small: the fitted
        # mode at the optimizer's answer is then no second Newton search
        self.last = {}
        # ``[C *] RBF/Matern [+ White]``: closed-form kernel and gradient (see _stationary)
        self.stationary = (None if isinstance(X, ObjectRows)
                           else kernel.stationary_signal())
        self.hyper = (None if self.stationary is None
                      else HyperparameterMap(kernel, self.stationary))

    @property
    def n_problems(self):
        return self.Y.shape[0]

    def kernel_matrices(self, thetas, pieces=None):
        """(B, n, n) kernel matrices, one per row of ``thetas`` (B, p); for a stationary
        kernel, each one's closed-form pieces are appended to the list ``pieces``."""
        with torch.no_grad():
            if self.stationary is None:
                return torch.stack([self.kernel(self.X, theta=theta) for theta in thetas])
            values = self.hyper(thetas)
            if self._small(len(values), values):
                # on the CPU in numpy, all problems at once: torch's per-operation
                # dispatch costs more than the arithmetic of an iris-sized kernel matrix
                K, k, slope, factor, Xs = self._stationary_numpy(values)
                if pieces is not None:
                    pieces.extend(zip(values, k, slope, [factor] * len(k), Xs))
                return K
            Ks = []
            for row in values:
                K, *rest = self._stationary(row)
                Ks.append(K)
                if pieces is not None:
                    pieces.append((row, *rest))
            return torch.stack(Ks)

    def _stationary(self, values):
        """``K = s kappa(D) + w I`` with ``D`` the squared distances of ``X / l``, by one
        matrix product (``torch.cdist``'s exact differences and their backward pass cost
        six times as much for digits' 64 features), and ``dK/dD = s * factor * slope``;
        ``values`` is one row of :class:`HyperparameterMap`'s ``(s, l, w)``."""
        scale, length_scale, noise = self.hyper.split(values)
        Xs = self.X / length_scale
        norms = (Xs * Xs).sum(1)
        D = torch.addmm(norms[:, None] + norms[None, :], Xs, Xs.T, alpha=-2.0)
        D.diagonal().zero_()
        k, slope, factor = squared_distance_profile_(D, self.stationary[0])  # k overwrites D
        K = k * scale
        K.diagonal().add_(noise)
        return K, k, slope, factor, Xs

    def _small(self, n_problems, values):
        """Whether ``n_problems`` kernel matrices go the numpy way (see
        :data:`skgpx.pathwise._laplace._newton.SMALL_MAX`)."""
        n = self.X.shape[0]
        return n_problems * n * n <= SMALL_MAX and on_lapack(self.X, values)

    def _stationary_numpy(self, values):
        """:meth:`_stationary` on the CPU in numpy for a batch of ``values`` (B, m):
        ``K`` (a (B, n, n) tensor on numpy's memory) and (B, ...) arrays of the rest."""
        parts = [self.hyper.split(row) for row in values.numpy()]
        scale, noise = (np.array([part[i] for part in parts]) for i in (0, 2))
        Xs = self.X.numpy()[None] / np.stack([part[1] for part in parts])[:, None, :]
        n = Xs.shape[1]
        norms = (Xs * Xs).sum(-1)
        D = np.matmul(Xs, Xs.transpose(0, 2, 1))
        D *= -2.0
        D += norms[:, :, None] + norms[:, None, :]
        D.reshape(len(D), -1)[:, :: n + 1] = 0.0
        k, slope, factor = squared_distance_profile_(torch.from_numpy(D), self.stationary[0])
        k, slope = k.numpy(), slope.numpy()  # k overwrites D
        K = k * scale[:, None, None]
        K.reshape(len(K), -1)[:, :: n + 1] += noise[:, None]
        return torch.from_numpy(K), k, slope, factor, Xs

    def _stationary_gradient(self, theta, G, pieces=None):
        """``sum(G * dK/dtheta)`` in closed form: ``dK/ds = kappa``, ``dK/dw = I`` and
        ``dK/dl_j = -2 s kappa'(D) (x_j - x'_j)^2 / l_j^3``, whose sum against ``G`` is
        ``sum_i x_ij^2 (r_i + c_i) - 2 x_j^T H x_j`` (``H = s kappa' G``, ``r``, ``c`` its
        row and column sums, ``x`` scaled by ``l``): one ``(n, n) x (n, d)`` product.
        ``pieces`` are :meth:`kernel_matrices`' for this ``theta`` (else recomputed); the
        partials in ``s``, ``l`` and ``w`` map onto theta by :class:`HyperparameterMap`."""
        with torch.no_grad():
            if pieces is None:
                values = self.hyper(theta[None, :])
                if self._small(1, values):
                    _, (k,), (slope,), factor, (Xs,) = self._stationary_numpy(values)
                else:
                    _, k, slope, factor, Xs = self._stationary(values[0])
                values = values[0]
            else:
                values, k, slope, factor, Xs = pieces
            scale, length_scale, _ = self.hyper.split(values)
            if isinstance(k, np.ndarray):
                G = G.numpy()
                scale, length_scale = scale.numpy(), length_scale.numpy()
                d_scale = (G * k).sum()
                H = slope
                H *= G
                H *= factor * scale
                spread = (Xs * Xs * (H.sum(1) + H.sum(0))[:, None]).sum(0) \
                    - 2.0 * (Xs * (H @ Xs)).sum(0)
                d_noise = np.trace(G)
                d_length = -2.0 * spread / length_scale
                if length_scale.size == 1:
                    d_length = d_length.sum(keepdims=True)
                return self.hyper.gradient(theta, values, *(
                    torch.from_numpy(np.asarray(d)) for d in (d_scale, d_length, d_noise)))
            d_scale = (G * k).sum()
            H = slope.mul_(G).mul_(factor * scale)
            spread = (Xs * Xs * (H.sum(1) + H.sum(0))[:, None]).sum(0) \
                - 2.0 * (Xs * (H @ Xs)).sum(0)
            d_noise = G.diagonal().sum()
            d_length = (-2.0 * spread / length_scale.expand_as(spread)).sum_to_size(
                length_scale.shape)
            return self.hyper.gradient(theta, values, d_scale, d_length, d_noise)

    def start(self, members):
        n = self.X.shape[0]
        rows = []
        for c in members:
            cached = self.f_cache[c]
            rows.append(cached if self.warm_start and cached is not None
                        else self.Y.new_zeros(n))
        return torch.stack(rows)

    def mode(self, members, thetas, K=None, pieces=None):
        """The Laplace mode of problems ``members`` at ``thetas`` (B, p) (tensor)."""
        K = self.kernel_matrices(thetas, pieces) if K is None else K
        with torch.no_grad():
            mode = posterior_mode(K, self.Y[members], self.start(members), self.link,
                                  self.max_iter)
        for i, c in enumerate(members):
            self.f_cache[c] = mode.f[i]
        return K, mode

    def fitted_mode(self, thetas):
        """The Laplace mode of every problem at ``thetas`` (P, p) (tensor): the last
        evaluation's where it was at these thetas (the optimizer's answer is, but after a
        failed line search) and started from zero, else a new Newton search."""
        members = list(range(self.n_problems))
        if self.warm_start or not all(
                c in self.last and torch.equal(self.last[c][0], thetas[c]) for c in members):
            return self.mode(members, thetas)[1]
        rows = [self.last[c] for c in members]
        fields = {}
        for name in NewtonPosterior.__dataclass_fields__:
            if name == "L":  # L^T row-major, as posterior_mode returns it
                fields[name] = torch.stack([m.L[i].transpose(-1, -2) for _, m, i in rows]
                                           ).transpose(-1, -2)
            else:
                fields[name] = torch.stack([getattr(m, name)[i] for _, m, i in rows])
        return NewtonPosterior(**fields)

    def objective(self, members, thetas, eval_gradient):
        """Log marginal likelihoods (B,) and, if asked, their gradients (B, p), numpy."""
        thetas = torch.as_tensor(np.asarray(thetas, dtype=np.float64), dtype=self.Y.dtype,
                                 device=self.Y.device).reshape(len(members), -1)
        n = self.X.shape[0]
        # the kernels' closed-form pieces serve the gradient unless they are large
        # (recomputing them costs O(n^2 d), little beside the O(n^3) of the gradient)
        pieces = ([] if eval_gradient and self.stationary is not None
                  and len(members) * n * n <= PIECES_MAX else None)
        K, mode = self.mode(members, thetas, pieces=pieces)
        if len(members) * n * n <= PIECES_MAX:
            for i, c in enumerate(members):
                self.last[c] = (thetas[i], mode, i)
        lml = mode.lml.detach().cpu().numpy().astype(np.float64)
        if not eval_gradient:
            return lml, None
        with torch.no_grad():
            G = lml_gradient_weights(mode, K, self.Y[members])
        del K, mode
        grads = []
        for i in range(len(members)):
            if self.stationary is not None:
                grad = self._stationary_gradient(thetas[i], G[i],
                                                 None if pieces is None else pieces[i])
                grads.append(grad.detach().cpu().numpy().astype(np.float64))
                continue
            # one problem's kernel graph at a time: one backward pass gives sum(G dK/dtheta)
            theta = thetas[i].detach().clone().requires_grad_(True)
            if theta.numel() == 0:
                grads.append(np.zeros(0))
                continue
            with torch.enable_grad():
                (grad,) = torch.autograd.grad((self.kernel(self.X, theta=theta) * G[i]).sum(),
                                              theta)
            grads.append(grad.detach().cpu().numpy().astype(np.float64))
        return lml, np.stack(grads)


class _Exit(Exception):
    """Tells a waiting run that the batched evaluation failed."""


def lockstep_lbfgs(evaluate, starts, bounds, on_round=None):
    """Minimise ``B`` objectives with scipy's L-BFGS-B, evaluating them in batches.

    Parameters
    ----------
    evaluate : callable
        ``evaluate(members, thetas) -> (values (k,), grads (k, p))`` for the runs
        ``members`` (a list of indices) at ``thetas`` (k, p): the values to *minimise*.
    starts : list of ndarray
        Each run's initial point.
    bounds : ndarray of shape (p, 2)
    on_round : callable, optional
        Called with the values of each batched evaluation.

    Returns
    -------
    results : list of scipy.optimize.OptimizeResult
    """
    B = len(starts)
    # the main thread waits on ``lock`` and is woken once every live run has posted (not
    # at each post); each run waits on its own event (no run wakes for another's answer):
    # at iris's size a batched round takes a few milliseconds, and needless thread
    # switches were a tenth of it
    lock = threading.Condition()
    events = [threading.Event() for _ in range(B)]
    requests, answers, finished, results = {}, {}, set(), [None] * B

    def ready():
        return len(requests) + len(finished) == B

    def run(i):
        def objective(theta):
            with lock:
                requests[i] = np.array(theta, dtype=np.float64)
                if ready():
                    lock.notify()
            events[i].wait()
            events[i].clear()
            with lock:
                answer = answers.pop(i)
            if isinstance(answer, BaseException):
                raise answer
            return answer

        try:
            results[i] = scipy.optimize.minimize(objective, starts[i], method="L-BFGS-B",
                                                 jac=True, bounds=bounds)
        except BaseException as error:  # noqa: BLE001 (handed back to the main thread)
            results[i] = error
        finally:
            with lock:
                finished.add(i)
                lock.notify()

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(B)]
    for thread in threads:
        thread.start()
    try:
        while True:
            with lock:
                while not ready():
                    lock.wait()
                if len(finished) == B:
                    break
                members = sorted(requests)
                thetas = np.stack([requests.pop(i) for i in members])
            values, grads = evaluate(members, thetas)
            if on_round is not None:
                on_round(values)
            with lock:
                for k, i in enumerate(members):
                    answers[i] = (float(values[k]), np.asarray(grads[k], dtype=np.float64))
            for i in members:
                events[i].set()
    finally:
        # on an error here (or an interrupt), every run still waiting is told to stop, so
        # that no thread is left blocked
        with lock:
            while len(finished) < B:
                for i in set(range(B)) - finished - set(answers):
                    requests.pop(i, None)
                    answers[i] = _Exit()
                    events[i].set()
                lock.wait(timeout=0.05)
        for thread in threads:
            thread.join()
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results


def restart_thetas(params, kernel, n_problems):
    """Each problem's starting thetas, drawing from ``params.random_state`` as scikit-learn
    does: binary uses ``random_state`` itself, several problems a clone each."""
    starts = []
    for _ in range(n_problems):
        rng = check_random_state(params.random_state if n_problems == 1
                                 else clone(params.random_state, safe=False))
        runs = [kernel.theta]
        if params.optimizer is not None and kernel.n_dims > 0 and params.n_restarts_optimizer:
            bounds = kernel.bounds
            if not np.isfinite(bounds).all():
                raise ValueError("Multiple optimizer restarts (n_restarts_optimizer>0) "
                                 "requires that all bounds are finite.")
            runs += [np.exp(rng.uniform(bounds[:, 0], bounds[:, 1]))
                     for _ in range(params.n_restarts_optimizer)]
        starts.append(runs)
    return starts


def optimise(params, problems, kernel, starts, history):
    """Best theta and lml per problem (None for the lml when nothing is fitted), by the
    optimizer of ``params`` from ``starts``; appends each batched evaluation to ``history``."""
    n_problems = len(starts)
    if params.optimizer is None or kernel.n_dims == 0:
        return [kernel.theta] * n_problems, None
    best = [None] * n_problems
    with progress_bar(params.verbose, "PathwiseGPClassifier fit") as bar:
        def on_round(values):
            history.append(float(np.sum(values)))
            bar.update(1)
            bar.set_postfix(neg_log_marginal_likelihood=f"{history[-1]:.6g}")

        offset = 0
        for p in problems:
            members = list(range(offset, offset + p.n_problems))
            for run in range(len(starts[offset])):
                x0 = [starts[c][run] for c in members]
                for c, (theta, fmin) in zip(members, _runs(params.optimizer, p, x0, kernel,
                                                           on_round)):
                    if best[c] is None or fmin < best[c][1]:
                        best[c] = (theta, fmin)
                    if params.verbose >= 2:
                        bar.write(f"problem {c} run {run}: neg log marginal likelihood "
                                  f"{fmin:.6g}", file=sys.stderr)
            offset += p.n_problems
    return [b[0] for b in best], [-b[1] for b in best]


def _runs(optimizer, problems, x0, kernel, on_round):
    """One optimizer run per problem of ``problems`` (lock step for L-BFGS-B)."""
    bounds = kernel.bounds

    def evaluate(members, thetas, eval_gradient=True):
        values, grads = problems.objective(members, thetas, eval_gradient)
        return -values, (None if grads is None else -grads)

    if optimizer in ("auto", "fmin_l_bfgs_b"):  # "auto": scikit-learn's L-BFGS-B
        results = lockstep_lbfgs(evaluate, x0, bounds, on_round)
        out = []
        for result in results:
            if result.status != 0:  # scikit-learn's _check_optimize_result("lbfgs")
                warnings.warn(
                    f"lbfgs failed to converge after {result.nit} iteration(s) "
                    f"(status={result.status}):\n{result.message}\n\nYou might also "
                    "want to scale the data as shown in:\n    https://scikit-learn."
                    "org/stable/modules/preprocessing.html", ConvergenceWarning)
            out.append((np.asarray(result.x, dtype=np.float64), float(result.fun)))
        return out
    out = []
    for i, theta0 in enumerate(x0):  # a user's callable: one problem at a time
        def obj_func(theta, eval_gradient=True, i=i):
            values, grads = evaluate([i], np.atleast_2d(theta), eval_gradient)
            on_round(values)
            return (values[0], grads[0]) if eval_gradient else values[0]

        theta, fmin = optimizer(obj_func, theta0, bounds=bounds)
        out.append((np.asarray(theta, dtype=np.float64), float(fmin)))
    return out


__all__ = ["LaplaceProblems", "lockstep_lbfgs", "optimise", "restart_thetas"]
