"""Anderson extrapolation over the sweeps of the sparse Newton-like solver.

The sweep is a fixed-point map ``x -> f(x)`` on the stacked learned parameters (hidden
Grams, ``Omega``, log weights).  It converges only linearly (``doc/design_notes.rst``,
"Inducing-point deep kernel process", the convergence figures); Anderson's type-II
extrapolation over the last ``memory`` sweeps, used only when positive definite and not
worse than the plain sweep, is what made the full DKP's sweeps reach L-BFGS's optimum.
"""

import math

import torch

from ._model import prior_mean_grams

__all__ = ["Anderson", "pack", "unpack"]


def _sym(matrix):
    return 0.5 * (matrix + matrix.mT)


class Anderson:
    """Anderson(``memory``) extrapolation of the sweep map ``x -> f(x)`` (type II)."""

    def __init__(self, memory=5):
        self.memory = memory
        self.points, self.residuals = [], []

    def extrapolate(self, point, image):
        residual = image - point
        self.points = (self.points + [point])[-self.memory - 1:]
        self.residuals = (self.residuals + [residual])[-self.memory - 1:]
        if len(self.points) < 2:
            return None
        d_res = torch.stack([b - a for a, b in zip(self.residuals, self.residuals[1:])], 1)
        d_pts = torch.stack([b - a for a, b in zip(self.points, self.points[1:])], 1)
        # least squares through the pseudo-inverse (see _solver._fisher_step on gelsy)
        gamma = torch.linalg.pinv(d_res) @ residual
        return point + residual - (d_pts + d_res) @ gamma


def _learned_weights(config, state):
    """Per node, the mask of the learned weights (hidden: iff learn_weights)."""
    masks = [torch.full(w.shape, config.learn_weights, dtype=torch.bool)
             for w in state.weights[:-1]]
    return masks + [torch.tensor([config.learn_weights, config.learn_noise])]


def pack(config, state):
    parts = [] if config.objective == "gp" else [g.reshape(-1) for g in state.hidden_grams]
    if config.input_scale:
        parts.append(state.omega.reshape(-1))
    for weights, mask in zip(state.weights, _learned_weights(config, state)):
        parts.append(torch.log(weights[mask.to(weights.device)]))
    return torch.cat(parts)


def unpack(config, state, vector):
    """The state at ``vector``, or None where a matrix is not positive definite."""
    new, start = state.copy(), 0

    def take(shape):
        nonlocal start
        size = math.prod(shape)
        out = vector[start:start + size].reshape(shape)
        start += size
        return _sym(out)

    if config.objective != "gp":
        new.hidden_grams = [take(g.shape) for g in state.hidden_grams]
    if config.input_scale:
        new.omega = take(state.omega.shape)
    for j, (weights, mask) in enumerate(zip(state.weights, _learned_weights(config, state))):
        mask = mask.to(weights.device)
        count = int(mask.sum())
        fresh = weights.clone()
        fresh[mask] = torch.exp(vector[start:start + count])
        start += count
        new.weights[j] = fresh
    if new.weights[-1][1] < config.noise_floor:
        return None
    if config.objective == "gp":
        new.hidden_grams = prior_mean_grams(config, new)
    for matrix in [*new.hidden_grams, new.omega]:
        if int(torch.linalg.cholesky_ex(matrix)[1]) != 0:
            return None
    return new
