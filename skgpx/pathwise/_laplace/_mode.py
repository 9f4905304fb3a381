"""The Laplace classifier as a mode object (interface: :mod:`skgpx.pathwise._interface`).

Exact mode of ``PathwiseGPClassifier``: one binary problem (two classes), one per class
(one-vs-rest, sharing the rows: ``(C, n, n)`` batched matrices, L-BFGS-B runs in lock
step) or one per pair of classes (one-vs-one, each on its pair's rows).  Problems on the
same rows form a *group*; the object keeps, per group, the rows, the labels and the
Laplace approximation at the mode
(:class:`skgpx.pathwise._laplace._newton.NewtonPosterior`), and per problem the fitted
scikit-learn kernel and log marginal likelihood.
"""

from dataclasses import dataclass

import numpy as np
import torch
from sklearn.gaussian_process.kernels import CompoundKernel, ConstantKernel
from sklearn.utils import check_random_state

from ..._base import (
    array_bytes, check_memory, cpu_generator, draw_seed, rows_per_chunk, standard_normal, to_numpy,
    to_probabilities,
)
from ...kernels import ObjectRows, TorchKernel, split_white_noise
from ...linalg import jittered_cholesky, solve_lower
from .._draws._spectra import has_random_features
from .._interface import ClassificationMode
from ._draws import LaplacePosterior, link_probabilities
from ._fit import LaplaceProblems, optimise, restart_thetas
from ._newton import latent_moments, positive_probability
from ._views import LaplaceBinaryView, LaplaceEnsembleView, ovo_scores, select_problems


def _copy(tensor):
    """A float64 numpy copy that shares no memory with the fitted tensor."""
    return np.array(to_numpy(tensor), dtype=np.float64, copy=True)


def problem_groups(codes, n_classes, multi_class):
    """Binary problems as ``(rows, [labels...])`` groups sharing their rows."""
    if n_classes == 2:
        return [(None, [codes])]
    if multi_class == "one_vs_rest":
        return [(None, [codes == c for c in range(n_classes)])]
    groups = []
    for i in range(n_classes):
        for j in range(i + 1, n_classes):
            rows = np.flatnonzero((codes == i) | (codes == j))
            groups.append((rows, [codes[rows] == j]))
    return groups


def check_fit_memory(optimizer, groups, n_rows, dtype, device):
    """Refuse, before any work, problems whose dense matrices cannot fit."""
    # K, B/L and the Newton temporaries per problem; when fitting also R, C and G, and
    # one problem's kernel graph at a time
    per_problem = 8 if optimizer is not None else 4
    largest = max(len(labels) * (n_rows if rows is None else len(rows)) ** 2
                  for rows, labels in groups)
    check_memory(
        per_problem * array_bytes(largest, dtype=dtype),
        what=f"PathwiseGPClassifier (exact Laplace mode) on {n_rows} rows "
             f"({per_problem} dense n x n matrices per binary problem)",
        way_out="use the sparse mode (n_inducing=256), fewer rows, or a GPU "
                "(device='cuda')", device=device)


@dataclass
class LaplaceMode(ClassificationMode):
    """Laplace's approximation of each binary problem (``theta``: (P, p), one row per
    problem; ``lml``: the mean over the problems)."""

    groups: list = None  # [(X_g, Y_g (C_g, n_g), _newton.NewtonPosterior)] problems sharing rows
    kernels: list = None  # fitted scikit-learn kernel per problem
    lml_values: np.ndarray = None  # (P,) log marginal likelihood per problem
    history: list = None  # negative lml of each batched optimizer evaluation
    link: str = "logit"
    max_iter_predict: int = 100
    warm_start: bool = False
    batch_size: int = 8192
    multi_class: str = "one_vs_rest"
    n_classes: int = 2
    seed: int = 0  # prediction seed drawn after the fit

    def fit(self, context, kernel, data):
        """Fit every binary problem's Laplace approximation (and its ``theta``) on the
        validated ``X`` with the class codes ``data.Y``."""
        params, device, dtype = context.params, context.device, context.dtype
        X, codes, n_classes = data.X, data.Y, data.n_classes
        self.link, self.max_iter_predict = params.link, params.max_iter_predict
        self.warm_start, self.batch_size = params.warm_start, params.batch_size
        self.multi_class, self.n_classes = params.multi_class, n_classes
        structured = context.structured
        torch_kernel = TorchKernel(kernel)
        groups = problem_groups(codes, n_classes, params.multi_class)
        check_fit_memory(params.optimizer, groups, len(codes), dtype, device)
        X_t = (ObjectRows.of(np.copy(X), dtype, device) if structured
               else context.as_tensor(X, device, dtype))
        problems = []
        for rows, labels in groups:
            index = rows if structured or rows is None else torch.as_tensor(rows,
                                                                            device=device)
            Xg = X_t if rows is None else X_t[index]
            Y = context.as_tensor(np.stack(labels).astype(np.float64), device, dtype)
            problems.append(LaplaceProblems(torch_kernel, Xg, Y, self.link,
                                            self.max_iter_predict, self.warm_start))
        n_problems = sum(p.n_problems for p in problems)
        starts = restart_thetas(params, kernel, n_problems)
        history = []
        thetas, lmls = optimise(params, problems, kernel, starts, history)
        kernels = [kernel.clone_with_theta(theta) for theta in thetas]
        for k in kernels:
            if params.optimizer is not None and kernel.n_dims > 0:
                k._check_bounds_params()
        theta_t = torch.as_tensor(np.asarray(thetas, dtype=np.float64).reshape(n_problems, -1),
                                  dtype=dtype, device=device)
        modes, offset = [], 0
        for p in problems:
            mode = p.fitted_mode(theta_t[offset: offset + p.n_problems])
            modes.append(mode)
            offset += p.n_problems
        if lmls is None:  # no optimisation: scikit-learn's lml at the kernel's theta
            lmls = np.concatenate([m.lml.cpu().numpy() for m in modes]).astype(np.float64)
            history.append(-float(np.sum(lmls)))
        self.kernels, self.lml_values = kernels, np.asarray(lmls, dtype=np.float64)
        self.lml = np.float64(np.mean(lmls))
        self.history = [float(v) for v in history]
        self.kernel, self.theta = torch_kernel, theta_t
        self.groups = [(p.X, p.Y, mode) for p, mode in zip(problems, modes)]
        self.shift = None if structured else X_t.mean(0)
        self.seed = draw_seed(check_random_state(params.random_state))
        return self

    def attributes(self):
        """The public fitted attributes: ``kernel_`` (a ``CompoundKernel`` of one kernel
        per problem for several), the lml and the optimizer's history."""
        return {"kernel_": (self.kernels[0] if len(self.kernels) == 1
                            else CompoundKernel(self.kernels)),
                "log_marginal_likelihood_value_": self.lml,
                "objective_history_": list(self.history),
                "n_iter_": len(self.history)}

    def views(self, owner, classes):
        """``base_estimator_``: read-only views of each binary problem of the fitted
        classifier ``owner`` with labels ``classes``."""
        if self.n_classes == 2:
            return LaplaceBinaryView(owner, 0, classes)
        if self.multi_class == "one_vs_rest":
            views = [LaplaceBinaryView(owner, c, [0, 1]) for c in range(self.n_classes)]
        else:
            # OneVsOneClassifier encodes each pair's labels 0 (first class) and 1
            n_pairs = self.n_classes * (self.n_classes - 1) // 2
            views = [LaplaceBinaryView(owner, k, [0, 1]) for k in range(n_pairs)]
        return LaplaceEnsembleView(self.multi_class, views, classes)

    def problem_state(self, problem, name):
        """One binary problem's fitted state as scikit-learn's binary Laplace estimator
        holds it (``name``: ``X_train_``, ``y_train_``, ``pi_``, ``W_sr_`` or ``L_``),
        a float64 numpy copy (the objects themselves for structured inputs)."""
        offset = 0
        for X_g, Y_g, mode in self.groups:
            if problem < offset + Y_g.shape[0]:
                local = problem - offset
                break
            offset += Y_g.shape[0]
        else:
            raise IndexError(problem)
        if name == "X_train_":
            return X_g.values.copy() if isinstance(X_g, ObjectRows) else _copy(X_g)
        y = _copy(Y_g[local])
        if name == "y_train_":
            return y.astype(np.int64)
        if name == "pi_":
            # g = y - pi at the last step's latent values (logit); the probit link keeps
            # no such pi: its probability at the mode
            if self.link == "logit":
                return y - to_numpy(mode.g[local])
            return _copy(torch.special.ndtr(mode.f[local]))
        return _copy({"W_sr_": mode.W_sr, "L_": mode.L}[name][local])

    # ------------------------------------------------------------ prediction

    def latent(self, Xq, problems=None):
        """Latent mean and variance (P, n*) tensors of the problems (all, or the indices
        ``problems``) at the query rows ``Xq`` (GPML Algorithm 3.2, lines 4-6)."""
        means, variances, offset = [], [], 0
        for X_g, Y_g, mode in self.groups:
            members = [c for c in range(offset, offset + Y_g.shape[0])
                       if problems is None or c in problems]
            local = [c - offset for c in members]
            offset += Y_g.shape[0]
            if not members:
                continue
            sub = select_problems(mode, local)
            m = Xq.shape[0]
            step = rows_per_chunk(self.batch_size, len(members) * X_g.shape[0],
                                  self.theta.device)
            mean = self.theta.new_zeros(len(members), m)
            var = torch.zeros_like(mean)
            with torch.no_grad():
                for i in range(0, m, step):
                    rows = Xq[i: i + step]
                    cross = torch.stack([self.kernel(X_g, rows, theta=self.theta[c])
                                         for c in members])
                    diag = torch.stack([self.kernel.diag(rows, self.theta[c])
                                        for c in members])
                    mean[:, i: i + step], var[:, i: i + step] = latent_moments(sub, cross, diag)
            means.append(mean)
            variances.append(var)
        return torch.cat(means), torch.cat(variances)

    def positive_probability(self, Xq, problems=None):
        """Averaged predictive probability of each problem's positive class: (P, n*)."""
        mean, var = self.latent(Xq, problems)
        return to_numpy(positive_probability(mean, var, self.link))

    def predict_proba(self, Xq):
        """Class probabilities (n*, C), numpy; one-vs-rest normalised per row."""
        p = self.positive_probability(Xq)
        if self.n_classes == 2:
            return np.stack([1.0 - p[0], p[0]], axis=1)
        return to_probabilities(torch.from_numpy(p.T.copy()))

    def ovo_scores(self, Xq):
        """One-vs-one votes with confidences (n*, C), as scikit-learn combines them."""
        mean, var = self.latent(Xq)
        confidences = to_numpy(positive_probability(mean, var, self.link)).T
        return ovo_scores(to_numpy(mean).T > 0, confidences, self.n_classes)

    def posteriors(self, n_features_in):
        """One :class:`LaplacePosterior` per binary problem, at the fitted hyperparameters
        (also after ``log_marginal_likelihood(..., clone_kernel=False)`` moved them)."""
        posts, offset = [], 0
        for X_g, Y_g, mode in self.groups:
            for local in range(Y_g.shape[0]):
                c = offset + local
                fitted = self.kernels[c].clone_with_theta(to_numpy(self.theta[c]))
                signal, white = split_white_noise(fitted)
                posts.append(LaplacePosterior(
                    kernel=self.kernel, signal_kernel=signal or ConstantKernel(0.0),
                    theta=self.theta[c], X=X_g, g=mode.g[local], W_sr=mode.W_sr[local],
                    L=mode.L[local], white=white, shift=self.shift,
                    n_features_in=n_features_in))
            offset += Y_g.shape[0]
        return posts

    def without_random_features(self):
        """Whether the kernel has no random-feature map (structured inputs included), so
        that latent draws are made exactly at the query rows (:meth:`draw_at_queries`)."""
        signal, _ = split_white_noise(self.kernels[0])
        return isinstance(self.groups[0][0], ObjectRows) or (
            signal is not None and not has_random_features(signal))

    def draw_at_queries(self, Xq, n_samples, generator, jitter):
        """Latent draws at the query rows, jointly, from each problem's Laplace posterior
        there: (n*, S) for one problem, (n*, P, S) for several.

        Mean ``k(X*, X) g`` and covariance ``k(X*, X*) - V^T V`` with
        ``V = L^{-1} W^{1/2} k(X, X*)`` (GPML Algorithm 3.2 with the full covariance), of
        the signal as the function draws carry it (a ``WhiteKernel`` is the nugget of the
        training rows only), plus ``jitter`` times the mean prior variance at X*.
        Problem ``p``'s normal draws come from its own stream (seed ``+ p``), so they do
        not depend on the number of problems.
        """
        m, S = Xq.shape[0], n_samples
        n_problems = self.theta.shape[0]
        n_train = max(X_g.shape[0] for X_g, _, _ in self.groups)
        check_memory(
            array_bytes(3 * m * m + 2 * m * n_train, dtype=self.theta.dtype),
            what=f"PathwiseGPClassifier.sample_y on {m} rows by exact joint latent draws "
                 f"(the kernel {self.kernels[0]} has no random-feature map; dense {m} x {m} "
                 "covariance matrices per binary problem)",
            way_out="draw at fewer query rows per call (draws of separate calls are "
                    "independent), or use a kernel with a random-feature map (sums and "
                    "products of RBF, Matern, RationalQuadratic, DotProduct and "
                    "ConstantKernel terms)", device=self.theta.device)
        seed = int(torch.randint(2**62, (1,), generator=generator))
        draws, offset = [], 0
        for X_g, Y_g, mode in self.groups:
            for local in range(Y_g.shape[0]):
                theta = self.theta[offset + local]
                cross = self.kernel(X_g, Xq, theta=theta)
                v = solve_lower(mode.L[local], mode.W_sr[local][:, None] * cross)
                prior = self.kernel(Xq, theta=theta, part="signal")
                scale = float(prior.diagonal().mean().abs()) or 1.0
                L, _ = jittered_cholesky(
                    prior - v.T @ v, base_jitter=jitter * scale, jitter=max(jitter, 1e-12),
                    name="latent posterior covariance at the query rows",
                    advice="check that the kernel is positive semi-definite, increase "
                           "jitter, or draw at fewer or less clustered query rows")
                z = standard_normal((m, S), cpu_generator(seed + offset + local),
                                    self.theta.dtype, self.theta.device)
                draws.append((mode.g[local] @ cross)[:, None] + L @ z)
            offset += Y_g.shape[0]
        return draws[0] if n_problems == 1 else torch.stack(draws, dim=1)

    def draw_probabilities(self, f):
        """Class-probability draws (n*, C, S) of latent draws ``f`` (n*, P, S)."""
        return link_probabilities(f, self.link, self.n_classes)

    # ------------------------------------------------------------ likelihood

    def problem_lml(self, problem, theta, eval_gradient):
        """Log marginal likelihood (and gradient) of one binary problem at ``theta``."""
        offset = 0
        for X_g, Y_g, mode in self.groups:
            if problem < offset + Y_g.shape[0]:
                local = problem - offset
                evaluator = LaplaceProblems(self.kernel, X_g, Y_g, self.link,
                                            self.max_iter_predict, self.warm_start)
                evaluator.f_cache[local] = mode.f[local]
                values, grads = evaluator.objective([local], theta[None, :], eval_gradient)
                return np.float64(values[0]), None if grads is None else grads[0]
            offset += Y_g.shape[0]
        raise IndexError(problem)

    def log_marginal_likelihood(self, context, theta, eval_gradient=False, clone_kernel=True):
        """The approximate lml at ``theta`` (float64 array): one problem's, or the mean
        over the problems of one kernel's theta (or of the ``CompoundKernel``'s, problem
        by problem); ``clone_kernel=False`` sets the fitted kernels' theta."""
        n_problems, n_dims = len(self.kernels), self.kernels[0].n_dims
        if n_problems == 1:
            value, grad = self.problem_lml(0, theta, eval_gradient)
            thetas = [theta]
        else:
            if eval_gradient:
                raise NotImplementedError(
                    "Gradient of log-marginal-likelihood not implemented for multi-class GPC.")
            if theta.shape[0] == n_dims:
                thetas = [theta] * n_problems
            elif theta.shape[0] == n_dims * n_problems:
                thetas = np.split(theta, n_problems)
            else:
                raise ValueError("Shape of theta must be either %d or %d. Obtained theta with "
                                 "shape %d." % (n_dims, n_dims * n_problems, theta.shape[0]))
            value = np.float64(np.mean([self.problem_lml(c, t, False)[0]
                                        for c, t in enumerate(thetas)]))
        if not clone_kernel:
            for kernel, t in zip(self.kernels, thetas):
                kernel.theta = t
        return (value, grad) if eval_gradient else value


__all__ = ["LaplaceMode", "check_fit_memory", "problem_groups"]
