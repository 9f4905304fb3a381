"""The exact GP's hyperparameter fit."""

import torch

from .._optimize import restart_points, run_optimizer
from ._algebra import log_marginal_likelihood


def optimize_exact(params, torch_kernel, X, Y, alpha, rng, history):
    """Minimise the negative log marginal likelihood over theta (sklearn's protocol)."""
    device, dtype = X.device, X.dtype

    def value_and_grad(theta, eval_gradient):
        theta_t = torch.as_tensor(theta, dtype=dtype, device=device)
        result = log_marginal_likelihood(torch_kernel, theta_t, X, Y, alpha, eval_gradient)
        return (-result[0], -result[1]) if eval_gradient else -result

    x, fmin = run_optimizer(params, value_and_grad, restart_points(params, torch_kernel, rng),
                            torch_kernel.bounds, history)
    return x, -fmin


__all__ = ["optimize_exact"]
