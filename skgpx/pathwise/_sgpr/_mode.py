"""Sparse GP regression (SGPR) as a mode object (interface: :mod:`skgpx.pathwise._interface`).

Titsias' collapsed bound needs the training rows only through sums over them
(:mod:`skgpx._inducing._collapsed`), which it reaches through one interface,
``rows.map_sum``: :class:`~skgpx.pathwise.Rows` for rows held in this process,
:class:`skgpx._dask.DaskRows` for rows held by Dask workers.  So this one object fits,
predicts and draws for both; only the ``m x m`` factors of the optimal ``q(u)`` stay here.
"""

from dataclasses import dataclass
from functools import partial

import numpy as np
import torch

from ..._base import check_memory, rows_per_chunk, to_numpy
from ..._dask import DaskRows, is_dask_collection
from ..._inducing._points import starting_inducing_inputs
from ..._inducing._rows import Rows
from ...kernels import TorchKernel, split_white_noise
from .._interface import RegressionMode, with_theta
from ._bound import elbo_value_and_grad
from ._fit import optimize_sparse
from ._posterior import check_sparse_noise, fit_factors, predictive_cov, predictive_mean_var


@dataclass
class SGPRMode(RegressionMode):
    """Inducing inputs ``Z`` and the optimal ``q(u)`` (``SparseFactors``)."""

    factors: object = None  # SparseFactors
    X: torch.Tensor = None  # (n, d) rows held here (None for Dask rows)
    Y: torch.Tensor = None  # (n, T) targets as fitted
    noise_var: torch.Tensor = None  # (n,) alpha + white noise; () for Dask rows
    dask_rows: tuple = None  # (X, Y, alpha) Dask collections and scalar alpha
    dask_noise: np.ndarray = None  # () float64 alpha + white noise of Dask rows

    @classmethod
    def plan(cls, context, kernel, n, d, n_targets=1):
        """Refuses what sparse mode cannot run, before any work: the weight-space
        baseline, and factors and row chunks that cannot fit in memory."""
        params, device = context.params, context.device
        if params.method == "weight_space":
            raise ValueError("method='weight_space' is a baseline of the exact GP; "
                             "unset n_inducing and inducing_points to use it.")
        itemsize = 4 if params.dtype == "float32" else 8
        m = min(params.n_inducing or len(params.inducing_points), n)
        chunk = rows_per_chunk(params.batch_size, 4 * m, device)
        check_memory(itemsize * (8 * m * m + 6 * chunk * m + n * (d + 4)),
                     what=f"Sparse mode with {m} inducing points on {n} rows",
                     way_out="use fewer inducing points (n_inducing)", device=device)
        return cls()

    @staticmethod
    def check_dask_options(params):
        """Refuses what fits on Dask collections cannot do (``skgpx._dask.DaskRows``
        serves the bound's sums over rows, with one noise level, and nothing else)."""
        if params.inducing_points is None and params.n_inducing is None:
            raise ValueError(
                "Fitting on Dask collections needs sparse mode: set n_inducing (say 512) "
                "or inducing_points. The exact GP needs the n x n kernel matrix in one "
                "process; call fit on in-memory arrays for it.")
        if np.ndim(params.alpha) != 0:
            raise ValueError("Fitting on Dask collections takes a scalar alpha; put "
                             "per-row noise into a WhiteKernel or fit in memory.")
        if params.optimizer == "adam" and params.likelihood != "gaussian":
            raise ValueError(f"likelihood={params.likelihood!r} with optimizer='adam' takes "
                             "mini-batches of rows in memory; on Dask collections use the "
                             "default optimizer='fmin_l_bfgs_b', whose full-data passes are "
                             "sums over the blocks.")
        if params.optimizer == "adam" and params.minibatch_size is not None:
            raise ValueError("minibatch_size (SVGP mini-batches) needs in-memory data; on "
                             "Dask collections use optimizer='adam' with minibatch_size=None "
                             "or the default L-BFGS-B, which take two passes per step.")

    def fit(self, context, kernel, data):
        """Fit on ``X``, ``Y`` (n, T): numpy arrays with per-row ``noise`` (alpha), or
        Dask collections with a scalar ``noise`` and the column means ``shift`` of X."""
        params, device, dtype = context.params, context.device, context.dtype
        X, Y, noise, shift = data.X, data.Y, data.noise, data.shift
        rng, history = context.rng, context.history
        Z = starting_inducing_inputs(params.inducing_points, params.n_inducing, X, rng)
        Z = context.as_tensor(Z, device, dtype)
        if is_dask_collection(X):
            rows = DaskRows(X, Y, noise, dtype, device)
            self.dask_rows = (X, Y, float(noise))
            noise_min = float(noise)
        else:
            rows = Rows(*(context.as_tensor(a, device, dtype) for a in (X, Y, noise)))
            self.X, self.Y = rows.X, rows.Y
            noise_min = float(np.min(noise))
        torch_kernel = TorchKernel(kernel)
        _, white = split_white_noise(kernel)
        check_sparse_noise(noise_min + white, white > 0)
        fitting = params.optimizer is not None and (torch_kernel.n_dims > 0
                                                    or params.optimize_inducing)
        if fitting:
            theta, Z = optimize_sparse(params, torch_kernel, rows, Z, rng, history)
            kernel, torch_kernel = with_theta(kernel, theta)
        theta = torch_kernel.theta_tensor(device, dtype)
        self.lml, self.factors = fit_factors(torch_kernel, theta, Z, rows, jitter=params.jitter,
                                             batch_size=params.batch_size)
        if not fitting:
            history.append(-self.lml)
        _, white = split_white_noise(kernel)  # at the fitted hyperparameters
        self.kernel, self.theta, self.jitter = torch_kernel, theta, self.factors.jitter
        if self.dask_rows is None:
            self.noise_var = rows.alpha + white
            self.shift = rows.X.mean(0)  # the random features' centre
        else:
            self.dask_noise = np.asarray(float(noise) + white)
            self.noise_var = context.as_tensor(self.dask_noise, device, dtype)
            self.shift = context.as_tensor(shift, device, dtype)
        return kernel

    def rows(self, dtype, device):
        """The training rows, where they are held (for the bound at another theta)."""
        if self.dask_rows is None:
            alpha = self.noise_var - self.kernel.noise_level(self.theta)
            return Rows(self.X, self.Y, alpha)
        X, Y, alpha = self.dask_rows
        return DaskRows(X, Y, alpha, dtype, str(device))

    def attributes(self):
        noise = to_numpy(self.noise_var) if self.dask_noise is None else self.dask_noise
        return {"noise_variance_": noise, "inducing_points_": to_numpy(self.factors.Z),
                "q_mu_": to_numpy(self.factors.q_mu), "q_sqrt_": to_numpy(self.factors.q_sqrt)}

    def predict(self, Xq, *, noise=None, batch_size, want_var=False, want_cov=False,
                observed=True):
        factors = self.factors

        def cross(Xc):
            return self.kernel(factors.Z, Xc, theta=self.theta, part="signal")

        mean, var = predictive_mean_var(
            factors, cross, partial(self.prior_variance, noise=noise), Xq, batch_size, want_var)
        cov = predictive_cov(factors, cross, partial(self.prior_covariance, noise=noise),
                             Xq) if want_cov else None
        return mean, var, cov

    def _posterior_fields(self):
        return dict(X=self.X, Y=self.Y, inducing=self.factors, noise_var=self.noise_var)

    def log_marginal_likelihood(self, context, theta, eval_gradient=False, clone_kernel=True):
        params = context.params
        rows = self.rows(theta.dtype, theta.device)
        elbo, grad, _ = elbo_value_and_grad(
            self.kernel, theta, self.factors.Z, rows, jitter=params.jitter,
            batch_size=params.batch_size, grad_theta=eval_gradient)
        if not eval_gradient:
            return elbo
        return elbo, grad.detach().cpu().numpy().astype(np.float64)


__all__ = ["SGPRMode"]
