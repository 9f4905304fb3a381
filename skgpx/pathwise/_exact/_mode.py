"""The exact GP as a mode object (interface: :mod:`skgpx.pathwise._interface`).

One object covers the three exact routes of ``PathwiseGPSampler``: a Cholesky factor of
``K_A = k(X, X) + diag(noise)`` (hyperparameters fitted by scikit-learn's protocol), block
CG on kernel products at fixed hyperparameters (``_exact._solver``), and structured inputs
(``ObjectRows`` evaluated by a scikit-learn kernel, Cholesky only).
"""

from dataclasses import dataclass
from functools import partial

import numpy as np
import torch

from ..._base import check_memory, to_numpy
from ...kernels import ObjectRows, TorchKernel, split_white_noise
from ...linalg import cholesky_solve, jittered_cholesky
from .._interface import RegressionMode, with_theta
from . import _algebra
from ._fit import optimize_exact
from ._solver import FIT_CHOLESKY_MAX_N, cg_fit_solve, check_cholesky_cost, resolve_solver


@dataclass
class ExactMode(RegressionMode):
    """The exact GP: ``L = chol(K_A)`` or a CG solver of ``K_A``, and ``a = K_A^{-1} Y``."""

    solver: str = "cholesky"  # "cholesky" | "cg"
    structured: bool = False  # inputs are objects for a scikit-learn kernel
    X: object = None  # (n, d) tensor, or ObjectRows
    Y: torch.Tensor = None  # (n, T) targets as fitted
    noise_var: torch.Tensor = None  # (n,) alpha + white noise
    L: torch.Tensor = None  # chol(K_A) (Cholesky solver)
    a: torch.Tensor = None  # K_A^{-1} Y
    cg: object = None  # CGSolver (CG solver)

    @classmethod
    def plan(cls, context, kernel, n, d, n_targets=1):
        """The solver for ``n`` rows (``resolve_solver``), refusing before any work a
        hyperparameter fit that needs CG and Cholesky buffers that cannot fit."""
        params, device = context.params, context.device
        itemsize = 4 if params.dtype == "float32" else 8
        structured = context.structured
        free = params.optimizer is not None and TorchKernel(kernel).n_dims > 0
        solver = "cholesky" if structured else resolve_solver(params, n, itemsize, free, device)
        if free and solver == "cg":
            limit = (f": {FIT_CHOLESKY_MAX_N} rows when fitting"
                     if params.cholesky_max_n == "auto" else "")
            raise ValueError(
                f"Fitting kernel hyperparameters on n={n} rows needs the exact Cholesky "
                f"solver (cholesky_max_n={params.cholesky_max_n!r}{limit}, "
                f"solver={params.solver!r}); "
                "use sparse mode (n_inducing=512, say) to fit them on large data, then "
                "solver='cg' with optimizer=None and the fitted kernel_ for exact draws."
            )
        if solver == "cholesky":
            buffers = 5 if free else 3  # K, K_A, L (+ K_A^-1 and the gradient weights)
            check_memory(
                buffers * n * n * itemsize,
                what=f"The exact GP on {n} rows ({buffers} dense {n} x {n} matrices)",
                way_out="use sparse mode (n_inducing=512, say), or solver='cg' with "
                        "optimizer=None for exact predictions and draws at fixed "
                        "hyperparameters, fewer rows, or a GPU (device='cuda')",
                device=device)
        return cls(solver=solver, structured=structured)

    def fit(self, context, kernel, data):
        """Fit on in-memory ``X`` (objects when ``structured``), ``Y`` (n, T) and the
        per-row ``noise`` (alpha)."""
        params, device, dtype = context.params, context.device, context.dtype
        X, Y, noise, history = data.X, data.Y, data.noise, context.history
        X = ObjectRows.of(np.copy(X), dtype, device) if self.structured else (
            context.as_tensor(X, device, dtype))
        Y, alpha = context.as_tensor(Y, device, dtype), context.as_tensor(noise, device, dtype)
        torch_kernel = TorchKernel(kernel)
        fitting = params.optimizer is not None and torch_kernel.n_dims > 0
        if self.solver == "cholesky" and not self.structured:
            check_cholesky_cost(params, torch_kernel, torch_kernel.theta_tensor(device, dtype),
                                X, Y, alpha, fitting)
        lml = None  # from the factorisation below unless the optimizer gives it
        if fitting:
            theta, lml = optimize_exact(params, torch_kernel, X, Y, alpha, context.rng, history)
            kernel, torch_kernel = with_theta(kernel, theta)
        theta = torch_kernel.theta_tensor(device, dtype)
        _, white = split_white_noise(kernel)
        self.kernel, self.theta, self.X, self.Y = torch_kernel, theta, X, Y
        self.noise_var = alpha + white
        self._solve(params, alpha, white)
        if lml is None:
            # as scikit-learn: -inf when the matrix as given is not positive definite
            lml = (np.nan if self.L is None else -np.inf if self.jitter
                   else _algebra.lml_from_factor(self.L, Y, self.a))
            history.append(-lml)
        self.lml = lml
        self.shift = None if self.structured else X.mean(0)  # the random features' centre
        return kernel

    def _solve(self, params, alpha, white):
        """Cholesky factor or CG solver of ``K_A``, ``a = K_A^{-1} Y`` and the jitter."""
        with torch.no_grad():
            if self.solver == "cg":
                self.cg, self.a = cg_fit_solve(params, self.kernel, self.X, self.theta,
                                               alpha + white, self.Y)
                self.jitter = 0.0
                return
            K_A = self.kernel(self.X, theta=self.theta)  # white noise on the diagonal
            K_A.diagonal().add_(alpha)
            self.L, self.jitter = jittered_cholesky(
                K_A, jitter=params.jitter, max_jitter=1e-3, name="training kernel matrix",
                advice="increase alpha or add a WhiteKernel, or check for duplicated inputs",
            )
            self.a = cholesky_solve(self.L, self.Y)

    def attributes(self):
        out = {"noise_variance_": to_numpy(self.noise_var)}
        if self.cg is not None:
            out["cg_n_iter_"] = int(self.cg.n_iter)
        return out

    def predict(self, Xq, *, noise=None, batch_size, want_var=False, want_cov=False,
                observed=True):
        def cross(Xc):
            return self.kernel(Xc, self.X, theta=self.theta, part="signal")

        # this mode has the X, L and cg that the exact predictive moments read
        mean, var = _algebra.predictive_mean_var(
            cross, partial(self.prior_variance, noise=noise), self, self.a, Xq, batch_size,
            want_var)
        cov = _algebra.predictive_cov(cross, partial(self.prior_covariance, noise=noise), self,
                                      Xq) if want_cov else None
        return mean, var, cov

    def _posterior_fields(self):
        return dict(X=self.X, Y=self.Y, L=self.L, cg=self.cg, noise_var=self.noise_var)

    def log_marginal_likelihood(self, context, theta, eval_gradient=False, clone_kernel=True):
        if self.L is None:
            raise NotImplementedError(
                "The log marginal likelihood needs a log-determinant, which the CG solver "
                "does not compute; use solver='cholesky' (small n) or sparse mode "
                "(n_inducing), whose bound this method returns."
            )
        alpha = self.noise_var - self.kernel.noise_level(self.theta)
        return _algebra.log_marginal_likelihood(self.kernel, theta, self.X, self.Y, alpha,
                                                eval_gradient)


def check_structured_options(params, sparse):
    """Structured inputs have the exact GP only: no features, no inducing inputs."""
    kernel = f"The kernel {params.kernel} takes structured inputs (requires_vector_input=False)"
    if sparse:
        raise ValueError(f"{kernel}: sparse mode needs inducing points in a vector "
                         "space; unset n_inducing and inducing_points.")
    if params.method == "weight_space":
        raise ValueError(f"{kernel}: method='weight_space' needs random features; "
                         "use method='pathwise'.")
    if params.solver == "cg":
        raise ValueError(f"{kernel}: it is evaluated by scikit-learn on the objects, "
                         "so only solver='cholesky' (or 'auto') is supported.")


def random_features_error(kernel, call):
    """The error of a ``call`` that needs random features of a structured-input kernel."""
    return NotImplementedError(
        f"{call} needs random features, which the kernel {kernel} on structured "
        "inputs (requires_vector_input=False) has no expansion into; draw exactly with "
        "sample_y(X, n_samples) and prior='exact'."
    )


__all__ = ["ExactMode", "check_structured_options", "random_features_error"]
