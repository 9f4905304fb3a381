r"""Non-Gaussian likelihoods of ``PathwiseGPSampler`` as a mode object (interface:
:mod:`skgpx.pathwise._modes`).

``likelihood="student_t"`` and ``"heteroscedastic"`` run on the sparse variational engine of
``PathwiseGPClassifier`` (:mod:`~skgpx.pathwise._svgp._bound`, :mod:`~skgpx.pathwise._svgp._engine`)
with the likelihoods of :mod:`~skgpx.pathwise._likelihoods._regression`:

* Student-t: ``y_t = f_t(x) + sigma e``, ``e ~ t_nu``, one latent ``f_t ~ GP(0, k)`` per
  target column, ``nu > 2`` and ``sigma`` learned with the kernel;
* heteroscedastic: ``y_t ~ N(f_t(x), a + exp(c + g_t(x)))`` with ``g_t ~ GP(0, k_g)``
  (the ``noise_kernel``; :func:`default_noise_kernel` when None), its own hyperparameters
  and inducing inputs (shared with ``f`` or not), the offset ``c`` learned and the floor
  ``a = 1e-10`` (``_likelihoods._regression.NOISE_FLOOR``).

Both bound their noise in the units ``y`` is fitted in, so targets whose spread lies
outside what the noise can follow are refused before any torch work
(:func:`check_target_spread`).

With ``n_inducing`` or ``inducing_points`` the inducing inputs are k-means++ rows (learned
when ``optimize_inducing``); without, the *full-rank* route puts them at the training rows
and holds them there, so that ``q(u)`` is the variational posterior of ``f`` at every row
(``O(n^2)`` memory, refused beyond what fits).  Rows held by Dask workers take the
L-BFGS-B route, every pass a sum over their blocks.

Predictive moments of ``y`` at ``x``: ``E[y] = mu_f``, ``Var[y] = v_f + E[noise variance]``,
``sigma^2 nu / (nu - 2)`` for the Student-t, ``E[a + exp(c + g)] = a + exp(c + mu_g +
v_g / 2)`` for the heteroscedastic model.
"""

from dataclasses import dataclass

import numpy as np
import torch
from sklearn.base import clone
from sklearn.gaussian_process.kernels import ConstantKernel, RBF

from ..._base import check_memory, rows_per_chunk, to_numpy
from ..._dask import DaskRows, is_dask_collection
from ..._inducing._points import starting_inducing_inputs
from ..._inducing._rows import Rows
from ...kernels import split_white_noise
from .._draws._posterior import draw_functions
from .._interface import RegressionMode
from .._likelihoods._regression import HeteroscedasticGaussian, NOISE_RANGE, SCALE_RANGE, StudentT
from ._classification import restart_kernels
from ._engine import SVGPEngine

# the "adam" route's mini-batch when minibatch_size is None
DEFAULT_MINIBATCH = 1024
# Bounds on the prior variance of the default noise GP g, a log noise variance.  Where the
# data leave g free (the noise at the floor: constant targets, rows fitted exactly), the
# bound prefers a wide prior, and the predictive noise E[exp(c + g)] = exp(c + mu_g + v_g / 2)
# grows as exp(v_g / 2): scikit-learn's default upper bound 1e5 makes it infinite.  1e2 (a
# prior sd of 10 in log variance: noise variances e^-20 .. e^20 apart at one sd) is wider
# than any data need and keeps exp(v_g / 2) <= e^50.
NOISE_AMPLITUDE_BOUNDS = (1e-5, 1e2)


def default_noise_kernel():
    """The noise GP's kernel when ``noise_kernel`` is None: ``ConstantKernel(1.0,
    NOISE_AMPLITUDE_BOUNDS) * RBF()``."""
    return ConstantKernel(1.0, NOISE_AMPLITUDE_BOUNDS) * RBF()


def robust_scale(Y):
    """``1.4826 MAD`` of the targets pooled over columns (the standard deviation of Gaussian
    data, untouched by a few gross outliers); 1 for constant targets."""
    Y = np.asarray(Y, dtype=np.float64)
    scale = 1.4826 * float(np.median(np.abs(Y - np.median(Y, axis=0))))
    return scale if scale > 0 else 1.0


def _spread_range(likelihood):
    """The robust spreads of the targets whose starting noise (half the spread) lies in
    the likelihood's range: ``2 SCALE_RANGE`` for the Student-t ``sigma``, ``2 sqrt(
    NOISE_RANGE)`` for the heteroscedastic noise standard deviation ``exp(c / 2)``."""
    low, high = SCALE_RANGE if likelihood == "student_t" else np.sqrt(NOISE_RANGE)
    return 2.0 * low, 2.0 * high


def check_target_spread(params, Y):
    """ValueError, before any torch work, for targets whose spread the likelihood's noise
    cannot follow: its noise parameters are bounded in the units ``y`` is fitted in
    (normalised with ``normalize_y``), so targets whose spread lies below the smallest
    noise or far above the largest are a matter of units, and the message says which
    rescaling fits them."""
    spread = robust_scale(Y)
    low, high = _spread_range(params.likelihood)
    if low <= spread <= high:
        return spread
    where = "below" if spread < low else "above"
    head = (f"likelihood={params.likelihood!r} cannot fit these targets: their spread "
            f"(1.4826 x median absolute deviation) is {spread:.3g} in the units they are "
            f"fitted in, {where} the range [{low:g}, {high:g}] that its noise "
            "model covers (the noise starts at half the spread and is bounded there). ")
    std = float(np.std(np.asarray(Y, dtype=np.float64), axis=0).max())
    if not params.normalize_y:
        fix = ("Set normalize_y=True to fit y in units of its standard deviation, or "
               "divide y by a constant (for example its standard deviation) before fitting.")
    elif std < 0.5:  # normalize_y left the columns as they were
        tiny = 10 * np.finfo(np.float64).eps
        fix = (f"normalize_y=True does not rescale y: a standard deviation below "
               f"{tiny:.3g} (10 x machine epsilon) counts as a constant column, as in "
               "scikit-learn. Divide y by a constant (for example its standard deviation) "
               "before fitting, and multiply the predictions back.")
    else:
        fix = ("Most of y's values are (nearly) tied, so its spread is far below its "
               "standard deviation; transform y so that its values are spread (for "
               "example take ranks or a logarithm), or use likelihood='gaussian'.")
    raise ValueError(head + fix)


def make_likelihood(params, Y):
    """The likelihood of ``params.likelihood`` at its starting values for the targets ``Y``:
    a noise scale of half the targets' robust spread (the latent functions explain the
    rest), ``nu = 4`` for the Student-t.  ValueError for targets whose spread the noise
    model cannot follow (:func:`check_target_spread`)."""
    scale = 0.5 * check_target_spread(params, Y)
    if params.likelihood == "student_t":
        return StudentT(df=4.0, scale=scale, n_quadrature=params.n_quadrature)
    return HeteroscedasticGaussian(log_noise_offset=2.0 * np.log(scale))


@dataclass
class SVGPRegressionMode(RegressionMode):
    """The fitted :class:`~skgpx.pathwise._svgp._engine.SVGPEngine` (best bound over restarts)."""

    svgp: SVGPEngine = None
    n_targets: int = 1
    full_rank: bool = False
    X: torch.Tensor = None  # (n, d) rows held here (None for Dask rows)
    Y: torch.Tensor = None  # (n, T) targets as fitted
    dask_rows: tuple = None  # (X, Y) Dask collections
    exact_draws = False  # draws come from q(u), through random features

    @classmethod
    def plan(cls, context, kernel, n, d, n_targets=1):
        """Refuses what the variational mode cannot run: structured inputs, the
        weight-space baseline, and buffers that cannot fit in memory."""
        params, device = context.params, context.device
        if not kernel.requires_vector_input:
            raise ValueError(
                f"likelihood={params.likelihood!r} needs inducing inputs in a vector space, but "
                f"the kernel {kernel} takes structured inputs; use likelihood='gaussian'.")
        if params.method == "weight_space":
            raise ValueError("method='weight_space' is a baseline of the exact Gaussian GP; "
                             "use method='pathwise' with likelihood="
                             f"{params.likelihood!r}.")
        full_rank = params.n_inducing is None and params.inducing_points is None
        m = n if full_rank else min(params.n_inducing or len(params.inducing_points), n)
        n_latent = n_targets * (2 if params.likelihood == "heteroscedastic" else 1)
        itemsize = 4 if params.dtype == "float32" else 8
        chunk = min(rows_per_chunk(params.batch_size, 4 * m * n_latent, device), n)
        what = (f"likelihood={params.likelihood!r} on {n} rows "
                + ("(full rank: the inducing inputs are the rows)" if full_rank
                   else f"with {m} inducing points"))
        check_memory(itemsize * (10 * m * m * n_latent + 6 * chunk * m * n_latent
                                 + n * (d + n_targets)),
                     what=what, way_out="set n_inducing (say 512) for the sparse variational "
                     "fit" if full_rank else "use fewer inducing points (n_inducing)",
                     device=device)
        return cls(full_rank=full_rank)

    def fit(self, context, kernel, data):
        """Fit on ``X``, ``Y`` (n, T) (``noise``, the Gaussian ``alpha``, is not used:
        the likelihood carries the noise)."""
        params, device, dtype = context.params, context.device, context.dtype
        X, Y, shift, rng, history = data.X, data.Y, data.shift, context.rng, context.history
        self.n_targets = Y.shape[1]
        dask = is_dask_collection(X)
        if dask:
            likelihood = make_likelihood(params, np.asarray(Y[: min(X.shape[0], 100_000)]))
            rows = DaskRows(X, Y, 0.0, dtype, device)
            self.dask_rows = (X, Y)
            Z0 = starting_inducing_inputs(params.inducing_points, params.n_inducing, X, rng)
        else:
            likelihood = make_likelihood(params, Y)  # checks the targets before any tensor
            X_t, Y_t = context.as_tensor(X, device, dtype), context.as_tensor(Y, device, dtype)
            rows = Rows(X_t, Y_t, X_t.new_zeros(X_t.shape[0]))
            self.X, self.Y = X_t, Y_t
            shift = X_t.mean(0)
            Z0 = np.asarray(X) if self.full_rank else starting_inducing_inputs(
                params.inducing_points, params.n_inducing, X, rng)
        Z0 = context.as_tensor(Z0, device, dtype)
        groups = None
        if params.likelihood == "heteroscedastic":
            noise_kernel = default_noise_kernel() if params.noise_kernel is None else \
                params.noise_kernel
            groups = [(None, self.n_targets), (clone(noise_kernel), self.n_targets)]
        best = None
        for start in restart_kernels(params, kernel, rng):
            svgp = SVGPEngine(
                clone(start), likelihood, optimizer=params.optimizer,
                max_iter=params.max_iter, tol=params.tol, learning_rate=params.learning_rate,
                natgrad_step=params.natgrad_step,
                minibatch_size=params.minibatch_size or DEFAULT_MINIBATCH,
                optimize_inducing=params.optimize_inducing and not self.full_rank,
                jitter=params.jitter, batch_size=params.batch_size, verbose=params.verbose,
                groups=groups, share_inducing=params.share_inducing,
                label=f"PathwiseGPSampler fit (likelihood={params.likelihood!r})")
            svgp.fit(rows, Z0, rng)
            if best is None or svgp.elbo > best.elbo:
                best = svgp
        self.svgp = best
        history.extend(-v for v in best.history)
        self.kernel, self.theta = best.torch_kernel, best.theta
        # the jitter of f's K_zz (``jitter_``: what reproduces its factor)
        self.lml, self.jitter = float(best.elbo), float(best.jitters[0])
        self.shift = context.as_tensor(shift, device, dtype) if dask else shift
        return best.kernel_

    # ------------------------------------------------------------------ predict
    @property
    def likelihood(self):
        """The likelihood at its fitted hyperparameters."""
        return self.svgp.likelihood_

    def latent(self, Xq):
        """Means and variances (n*, L) of every latent of ``q`` at ``Xq``."""
        with torch.no_grad():
            return self.svgp.latent_mean_and_variance(Xq)

    def noise_variance(self, Xq, mean=None, var=None):
        """The expected noise variance (n*, T) at ``Xq`` in the fitted units."""
        T = self.n_targets
        if isinstance(self.likelihood, StudentT):
            value = self.likelihood.noise_variance()
            return value.expand(Xq.shape[0], T).to(Xq)
        if mean is None:
            mean, var = self.latent(Xq)
        return self.likelihood.noise_variance(mean[:, T:], var[:, T:])

    def predict(self, Xq, *, noise=None, batch_size, want_var=False, want_cov=False,
                observed=True):
        """Moments of ``y`` (``observed``) or of ``f`` at ``Xq``: ``mean`` (n*, T), ``var``
        (n*, T), ``cov`` (n*, n*, T).  ``noise`` as the other modes: None keeps a
        ``WhiteKernel`` of the kernel (latent noise at each row), a float replaces it."""
        T = self.n_targets
        mean, var = self.latent(Xq)
        f_mean, f_var = mean[:, :T], var[:, :T]
        white = self.kernel.noise_level(self.theta)
        extra = 0.0 if noise is None else noise - white
        out_var = out_cov = None
        with torch.no_grad():
            if want_var or want_cov:
                likelihood_var = (self.noise_variance(Xq, mean, var) if observed
                                  else torch.zeros_like(f_var))
            if want_var:
                out_var = (f_var + extra).clamp_min(0.0) + likelihood_var
            if want_cov:
                out_cov = self._latent_covariance(Xq, noise)
                out_cov.diagonal(dim1=0, dim2=1).add_(likelihood_var.T)
        return f_mean, out_var, out_cov

    def _latent_covariance(self, Xq, noise):
        """``Cov[f_t(Xq)]`` (n*, n*, T): ``K** - A^T A + A^T S_t A``, ``A = L_z^{-1} K_z*``."""
        svgp, T = self.svgp, self.n_targets
        K = self.prior_covariance(Xq, noise)
        cross = self.kernel(svgp.Zs[0], Xq, theta=self.theta, part="signal")
        A = svgp.L_inverses[0] @ cross
        excess = svgp.q.excess[:T]  # S_t - I of f's latents
        return K[..., None] + torch.einsum("mi,tmk,kj->ijt", A, excess, A)

    def posterior(self, **face):
        """The posterior of ``f`` for the draws (``_draws._posterior.draw_functions``)."""
        post = self.svgp.posterior(self.shift, face["n_features_in"], squeeze=face["squeeze"],
                                   group=0)
        post.y_mean, post.y_std = face["y_mean"], face["y_std"]
        return post

    def sample_noise(self, Xq, n_samples, generator, draw_options):
        """Observation noise (n*, S, T) in the fitted units for ``S`` draws at ``Xq``:
        ``sigma t_nu`` draws, or ``N(0, exp(c + g_s(x)))`` with ``g_s`` a path of the
        noise function's posterior (drawn as the latent draws are)."""
        T = self.n_targets
        shape = (Xq.shape[0], n_samples, T)
        if isinstance(self.likelihood, StudentT):
            return self.likelihood.sample_noise(shape, generator, Xq.dtype, Xq.device)
        post = self.svgp.posterior(self.shift, Xq.shape[1], squeeze=False, group=1)
        g = draw_functions(post, n_samples, generator, **draw_options).values(Xq)
        return self.likelihood.sample_noise(g, generator)

    # ------------------------------------------------------------------ the bound
    def rows(self, dtype, device):
        """The training rows, where they are held."""
        if self.dask_rows is None:
            return Rows(self.X, self.Y, self.X.new_zeros(self.X.shape[0]))
        return DaskRows(*self.dask_rows, 0.0, dtype, str(device))

    def log_marginal_likelihood(self, context, theta, eval_gradient=False, clone_kernel=True):
        """The bound at the kernel's ``theta`` (the noise model, ``Z`` and ``q`` as
        fitted) and its gradient in ``theta``."""
        svgp = self.svgp
        packed = torch.cat([theta, *svgp.thetas[1:]])
        ev = svgp._objective(self.rows(theta.dtype, theta.device), svgp.q, packed,
                             svgp.Z_packed, eval_gradient)
        if not eval_gradient:
            return float(ev.elbo)
        grad = ev.grad_theta[: theta.shape[0]]
        return float(ev.elbo), grad.detach().cpu().numpy().astype(np.float64)

    def attributes(self):
        svgp, T = self.svgp, self.n_targets
        out = {"inducing_points_": to_numpy(svgp.Zs[0]),
               "q_mu_": to_numpy(svgp.q.mean[:, :T]),
               "q_sqrt_": to_numpy(svgp.q_sqrt[:T])}
        likelihood = self.likelihood
        if isinstance(likelihood, StudentT):
            out["df_"] = float(likelihood.df)
            out["noise_scale_"] = float(likelihood.scale)
        else:
            out["noise_kernel_"] = svgp.kernels_[1]
            out["log_noise_offset_"] = float(likelihood.log_noise_offset)
            if not svgp.share_inducing:
                out["noise_inducing_points_"] = to_numpy(svgp.Zs[1])
        _, white = split_white_noise(svgp.kernel_)
        out["noise_variance_"] = np.float64(white)
        return out


__all__ = ["NOISE_AMPLITUDE_BOUNDS", "SVGPRegressionMode", "check_target_spread",
           "default_noise_kernel", "make_likelihood"]
