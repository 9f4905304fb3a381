"""The sparse variational mode of ``PathwiseGPClassifier``: its face on the SVGP engine.

The estimator validates the data and options, then hands them here once; the fitted
:class:`~skgpx.pathwise._svgp._engine.SVGPEngine` answers every later question (latent moments,
probabilities, the posterior of the draws, the bound at another ``theta``).  Latent
problems are encoded as columns of the label matrix given to the engine:

* two classes: one Bernoulli latent (column: ``y == classes_[1]``), whatever
  ``multi_class`` says, as scikit-learn;
* ``"one_vs_rest"``: ``C`` Bernoulli latents, one per class, sharing ``Z`` and the kernel;
* ``"softmax"``: ``C`` latents under the softmax likelihood (one-hot columns).
"""

import copy
from dataclasses import dataclass

import numpy as np
import torch
from sklearn.base import clone
from sklearn.utils import check_random_state

from ..._base import check_memory, draw_seed, rows_per_chunk, to_numpy, to_probabilities
from ..._dask import is_dask_collection
from ..._inducing._points import starting_inducing_inputs
from ..._inducing._rows import Rows
from ...kernels import TorchKernel
from .._interface import ClassificationMode
from .._laplace._draws import link_probabilities
from .._likelihoods._classification import Bernoulli, Softmax
from ._engine import SVGPEngine

# optimizer="auto" trains the sparse mode by mini-batches above this many training rows.
# Up to it L-BFGS-B on full passes is both faster and tighter (q is optimal at each
# evaluation, and up to batch_size rows the inner loop of ``_svgp._inner`` holds the
# cross-covariances); beyond it each of its evaluations costs several full passes (the
# inner optimal-q loop, then the gradient), tens of times an epoch's work per iteration,
# while an epoch of natural steps on mini-batches costs about one pass.  Measured on 16
# features, m = 256: L-BFGS-B about twice as fast at 8 000 rows, 1.7 times slower at
# 16 000, 12 times slower at 50 000 (the guide's figures).
AUTO_MINIBATCH_ROWS = 10_000


def is_sparse(params):
    """Whether ``params`` asks for the sparse mode (``n_inducing`` or ``inducing_points``)."""
    return params.n_inducing is not None or params.inducing_points is not None


def check_sparse_options(params, structured):
    """Refuse, before any work, what the sparse mode cannot do."""
    if params.n_inducing is not None and params.inducing_points is not None:
        raise ValueError("Set at most one of inducing_points and n_inducing; got both.")
    if structured:
        raise ValueError(f"The kernel {params.kernel} takes structured inputs "
                         "(requires_vector_input=False): the sparse mode needs inducing "
                         "points in a vector space; unset n_inducing and inducing_points.")
    if params.multi_class == "one_vs_one":
        raise ValueError("multi_class='one_vs_one' is an exact-mode option (as scikit-learn,"
                         " without probabilities); the sparse mode offers 'one_vs_rest' and "
                         "'softmax'.")
    if params.warm_start:
        raise ValueError("warm_start (the Newton search's cached mode) is an exact-mode "
                         "option; unset it in the sparse mode.")


def resolve_optimizer(optimizer, n_rows, in_memory=True):
    """The sparse route ``optimizer`` names: ``"auto"`` is ``"adam"`` (mini-batches) for
    more than :data:`AUTO_MINIBATCH_ROWS` rows held in memory, else ``"fmin_l_bfgs_b"``
    (full passes: also the route of rows on Dask workers); any other value is itself."""
    if not (isinstance(optimizer, str) and optimizer == "auto"):
        return optimizer
    if in_memory and n_rows > AUTO_MINIBATCH_ROWS:
        return "adam"
    return "fmin_l_bfgs_b"


def encode_latents(codes, n_classes, multi_class):
    """The engine's label matrix (n, L) and its ``multi_class`` name."""
    if n_classes == 2:
        return (codes == 1).astype(np.float64)[:, None], "binary"
    one_hot = (codes[:, None] == np.arange(n_classes)[None, :]).astype(np.float64)
    return one_hot, multi_class


def check_sparse_memory(params, n, d, n_latent, dtype, device, rows_here=True):
    """Refuse a sparse fit whose buffers cannot fit: O(L m^2 + chunk m + n d), not O(n m)
    (without the ``n d`` when the rows stay on Dask workers)."""
    m = min(params.n_inducing or len(params.inducing_points), n)
    itemsize = 4 if dtype == "float32" else 8
    chunk = min(rows_per_chunk(params.batch_size, 4 * m * n_latent, device), n)
    check_memory(itemsize * (10 * m * m * n_latent + 6 * chunk * m * n_latent
                             + rows_here * n * (d + n_latent)),
                 what=f"PathwiseGPClassifier (sparse mode) with {m} inducing points and "
                      f"{n_latent} latent functions on {n} rows",
                 way_out="use fewer inducing points (n_inducing) or a smaller batch_size",
                 device=device)


def restart_kernels(params, kernel, rng):
    """The kernels each fit starts from: ``kernel``, then ``n_restarts_optimizer`` thetas
    drawn log-uniformly within the bounds (as scikit-learn's restarts)."""
    kernels = [kernel]
    if params.optimizer is None or kernel.n_dims == 0 or not params.n_restarts_optimizer:
        return kernels
    bounds = kernel.bounds
    if not np.isfinite(bounds).all():
        raise ValueError("Multiple optimizer restarts (n_restarts_optimizer>0) requires that "
                         "all bounds are finite.")
    for _ in range(params.n_restarts_optimizer):
        kernels.append(kernel.clone_with_theta(rng.uniform(bounds[:, 0], bounds[:, 1])))
    return kernels


@dataclass
class SVGPClassificationMode(ClassificationMode):
    """The fitted :class:`~skgpx.pathwise._svgp._engine.SVGPEngine` with the best bound over
    the restarts, answering as the classifier's modes do (``_engine``)."""

    svgp: SVGPEngine = None
    codes: np.ndarray = None  # (n,) class codes of the training rows (in memory)
    dask_labels: object = None  # the latent label matrix (Dask fits): lazy, on the workers
    n_classes: int = 2
    multi_class: str = "one_vs_rest"  # the estimator's option
    optimizer: object = None  # the route taken (``"auto"`` resolved)
    link: str = "logit"
    seed: int = 0  # prediction seed drawn after the fit

    def fit(self, context, kernel, data):
        """Fit the SVGP engine from each restart's kernel and keep the best bound: on
        in-memory rows (``data.Y``: the class codes), or on Dask arrays."""
        params, device, dtype = context.params, context.device, context.dtype
        if is_dask_collection(data.X):
            return self._fit_dask(context, kernel, data)
        X, codes, n_classes = data.X, data.Y, data.n_classes
        rng = check_random_state(params.random_state)
        Y, multi_class = encode_latents(codes, n_classes, params.multi_class)
        check_sparse_memory(params, X.shape[0], X.shape[1], Y.shape[1], params.dtype, device)
        Z0 = starting_inducing_inputs(params.inducing_points, params.n_inducing, X, rng)
        Z0 = context.as_tensor(Z0, device, dtype)
        X_t, Y_t = context.as_tensor(X, device, dtype), context.as_tensor(Y, device, dtype)
        rows = Rows(X_t, Y_t, X_t.new_zeros(X_t.shape[0]))
        self.codes = codes
        self.optimizer = resolve_optimizer(params.optimizer, X.shape[0])
        return self._fit_rows(params, kernel, rows, Z0, X_t.mean(0), n_classes, multi_class, rng)

    def _fit_dask(self, context, kernel, data):
        """Fit on Dask arrays (``data.Y``: the label matrix of
        ``skgpx._dask.dask_class_labels``, ``data.shift``: the column means of X): every
        pass over the rows is a sum over their blocks, computed where the blocks are
        (``DaskRows``)."""
        from ..._dask import DaskRows

        params, device, dtype = context.params, context.device, context.dtype
        X, Y, x_mean, n_classes = data.X, data.Y, data.shift, data.n_classes
        if params.optimizer == "adam":
            raise ValueError("optimizer='adam' (mini-batches) needs the rows in memory; on "
                             "Dask arrays use optimizer='fmin_l_bfgs_b' (or the default 'auto'),"
                             " whose full-data passes are sums over the blocks.")
        rng = check_random_state(params.random_state)
        multi_class = "binary" if n_classes == 2 else params.multi_class
        check_sparse_memory(params, X.shape[0], X.shape[1], Y.shape[1], params.dtype, device,
                            rows_here=False)
        Z0 = starting_inducing_inputs(params.inducing_points, params.n_inducing, X, rng)
        Z0 = context.as_tensor(Z0, device, dtype)
        self.dask_labels = Y
        self.optimizer = resolve_optimizer(params.optimizer, X.shape[0], in_memory=False)
        rows = DaskRows(X, Y, 0.0, dtype, device)
        shift = context.as_tensor(x_mean, device, dtype)
        return self._fit_rows(params, kernel, rows, Z0, shift, n_classes, multi_class, rng)

    def _fit_rows(self, params, kernel, rows, Z0, shift, n_classes, multi_class, rng):
        if multi_class == "softmax":
            likelihood = Softmax(params.n_mc_samples, seed=int(rng.randint(2**31 - 1)))
        else:
            likelihood = Bernoulli(params.link, params.n_quadrature)
        best = None
        for start in restart_kernels(params, kernel, rng):
            svgp = SVGPEngine(
                clone(start), likelihood, multi_class=multi_class, optimizer=self.optimizer,
                max_iter=params.max_iter, tol=params.tol, learning_rate=params.learning_rate,
                natgrad_step=params.natgrad_step, minibatch_size=params.minibatch_size,
                optimize_inducing=params.optimize_inducing, jitter=params.jitter,
                batch_size=params.batch_size, verbose=params.verbose)
            svgp.fit(rows, Z0, rng)
            if best is None or svgp.elbo > best.elbo:
                best = svgp
        self.svgp, self.n_classes = best, n_classes
        self.multi_class, self.link = params.multi_class, params.link
        self.kernel, self.theta, self.lml = best.torch_kernel, best.theta, np.float64(best.elbo)
        self.jitter, self.shift = float(best.jitter_), shift
        self.seed = draw_seed(rng)
        return self

    def attributes(self):
        """The public fitted attributes: the kernel, the bound and its history, ``Z``,
        ``q(u)`` and the route taken (``optimizer_``)."""
        svgp = self.svgp
        return {"kernel_": svgp.kernel_, "log_marginal_likelihood_value_": self.lml,
                "objective_history_": [-float(v) for v in svgp.history],
                "n_iter_": max(1, int(svgp.n_iter)), "inducing_points_": to_numpy(svgp.Z),
                "q_mu_": to_numpy(svgp.q_mu), "q_sqrt_": to_numpy(svgp.q_sqrt),
                "jitter_": self.jitter, "optimizer_": self.optimizer}

    def latent(self, Xq, problems=None):
        """Latent mean and variance (L, n*) of ``q(f)`` at ``Xq`` (the latents
        ``problems``, or all)."""
        with torch.no_grad():
            mean, var = self.svgp.latent_mean_and_variance(Xq)
        keep = slice(None) if problems is None else list(problems)
        return mean.T[keep], var.T[keep]

    def predict_proba(self, Xq):
        """Class probabilities (n*, C), numpy."""
        with torch.no_grad():
            return to_probabilities(self.svgp.predict_proba(Xq))

    def posteriors(self, n_features_in):
        """The posterior of ``q(u)`` for the draws (one, of all the latents)."""
        return [self.svgp.posterior(self.shift, n_features_in)]

    def draw_probabilities(self, f):
        """Class-probability draws (n*, C, S) of latent draws ``f``."""
        return link_probabilities(f, self.link, self.n_classes,
                                  softmax=self.svgp.multi_class == "softmax")

    def log_marginal_likelihood(self, context, theta, eval_gradient=False, clone_kernel=True):
        """The bound ``ELBO(q, theta)`` at the fitted ``q(u)`` and ``Z`` (and its gradient
        in theta) on the training rows ``context.X_train``: at the fitted theta it is
        ``log_marginal_likelihood_value_``.  Computed on a copy of the fitted engine;
        ``clone_kernel=False`` sets ``kernel_.theta``."""
        svgp = copy.copy(self.svgp)
        Z = svgp.Z
        if self.dask_labels is not None:  # the rows stay where they are
            from ..._dask import DaskRows

            rows = DaskRows(context.X_train, self.dask_labels, 0.0, Z.dtype, str(Z.device))
        else:
            X = context.as_tensor(np.asarray(context.X_train, dtype=np.float64), Z.device, Z.dtype)
            Y, _ = encode_latents(self.codes, self.n_classes, self.multi_class)
            rows = Rows(X, context.as_tensor(Y, Z.device, Z.dtype), X.new_zeros(X.shape[0]))
        theta_t = torch.as_tensor(np.asarray(theta, dtype=np.float64), dtype=Z.dtype,
                                  device=Z.device)
        if theta_t.shape != svgp.theta.shape:
            raise ValueError(f"theta has {theta_t.shape[0]} entries, but the kernel has "
                             f"{svgp.theta.shape[0]} free hyperparameters.")
        svgp.torch_kernel = TorchKernel(svgp.kernel_)
        ev = svgp._objective(rows, svgp.q, theta_t, Z, eval_gradient)
        value = np.float64(ev.elbo)
        if not clone_kernel:
            self.svgp.kernel_.theta = theta
        if not eval_gradient:
            return value
        return value, ev.grad_theta.detach().cpu().numpy().astype(np.float64)


__all__ = ["AUTO_MINIBATCH_ROWS", "SVGPClassificationMode", "check_sparse_options", "is_sparse",
           "resolve_optimizer"]
