"""State, sum kernels and the mean objective of the deep Wishart process.

The model and objective are those of Aitchison, arXiv:2108.13097, Secs. 2-3.

Layers are numbered as in that paper: ``G_1 = X Omega X^T / nu_0`` is the input Gram
matrix, ``G_2 .. G_L`` are the learned hidden Gram matrices, and node ``j`` is the sum
kernel ``S_j`` built on ``G_j``.  For ``j < L`` it is the Wishart scale of ``G_{j+1}``,

    S_j = w_{j+1} K(G_j) + v_{j+1} G_j + eps I       (v only with skip connections),

and ``S_L = w_{L+1} K(G_L) + sigma^2 I`` is the covariance of every output column.
"""

import math
from dataclasses import dataclass, field, replace

import torch

from ..linalg import logdet_from_cholesky, solve_lower, try_cholesky
from ._grams import gram_kernel_derivatives

__all__ = [
    "Breakdown", "DKPConfig", "DKPState", "dkp_objective", "gaussian_term", "node_derivatives",
    "node_matrix", "prune_factors", "spd_factors",
]


@dataclass(frozen=True)
class DKPConfig:
    """Model and solver settings (resolved estimator parameters)."""

    kernel: str
    skip: bool
    input_scale: bool
    objective: str
    nu_input: float  # nu_1 of Omega (unused without input_scale)
    nu_hidden: tuple  # nu_2 .. nu_L
    mirror_reg: float
    kleinman_reg: float
    care_solver: str
    max_care_iter: int
    care_tol: float
    learn_noise: bool
    learn_weights: bool
    noise_floor: float = 1e-6
    input_scale_steps: int = 0  # joint Omega steps per sweep (skgpx.dkp._input_scale)
    input_scale_every: int = 1  # ... on sweeps 1, 1 + k, 1 + 2k, ...

    @property
    def alpha(self):
        """The CARE's ``alpha``: 1/2 with the ``log|G|`` terms (``'dkp'``), 0 without."""
        return 0.5 if self.objective == "dkp" else 0.0


@dataclass
class DKPState:
    """Everything the solver updates; tensors are replaced, never modified in place.

    ``weights[j-1]`` holds the learned weights of node ``j``: ``[w, v]`` (``[w]``
    without skip) for hidden nodes and ``[w, sigma^2]`` for the output node ``L``.
    """

    inputs: torch.Tensor  # X, (P, d), standardised
    targets: torch.Tensor  # Y, (P, t), standardised
    omega: torch.Tensor  # (d, d); the identity without input_scale
    hidden_grams: list  # [G_2 .. G_L]
    weights: list  # per node, 1-D tensors
    jitter: float  # eps of the Eye component of hidden nodes
    grams_cache: dict = field(default_factory=dict, repr=False)
    omega_step: float = 0.25  # last accepted joint Omega step (skgpx.dkp._input_scale)
    n_sweeps: int = 0  # sweeps done (the schedule of the joint Omega steps)

    @property
    def n_nodes(self):
        return len(self.hidden_grams) + 1

    @property
    def data_root(self):
        """``R`` with ``G_{L+1} = Y Y^T / nu_{L+1} = R R^T``."""
        return self.targets / math.sqrt(self.targets.shape[1])

    def input_gram(self):
        """``G_1 = X Omega X^T / nu_0``."""
        cached = self.grams_cache.get("input")
        if cached is not None and cached[0] is self.omega:
            return cached[1]
        inputs = self.inputs
        gram = inputs @ self.omega @ inputs.mT / inputs.shape[1]
        gram = 0.5 * (gram + gram.mT)
        self.grams_cache["input"] = (self.omega, gram)
        return gram

    def gram(self, j):
        """``G_j`` for ``j = 1 .. L``."""
        return self.input_gram() if j == 1 else self.hidden_grams[j - 2]

    def copy(self, **changes):
        fresh = replace(self, hidden_grams=list(self.hidden_grams), weights=list(self.weights))
        fresh.grams_cache = dict(self.grams_cache)
        for key, value in changes.items():
            setattr(fresh, key, value)
        return fresh


def node_components(config, state, j):
    """Names of node ``j``'s learned components, in the order of ``state.weights[j-1]``."""
    if j == state.n_nodes:
        return ("kernel", "eye")
    return ("kernel", "linear") if config.skip else ("kernel",)


def node_fixed_eye(state, j):
    """The fixed diagonal of node ``j``: the Eye jitter for hidden nodes, 0 at the output."""
    return 0.0 if j == state.n_nodes else state.jitter


def kernel_of(config, state, j):
    """``K(G_j)``, cached while ``G_j`` is the same tensor (tensors are never modified in
    place, so identity is a safe key)."""
    gram = state.gram(j)
    cached = state.grams_cache.get(("kernel", j))
    if cached is not None and cached[0] is gram:
        return cached[1]
    kernel_matrix = gram_kernel_derivatives(config.kernel, gram, derivatives=False)
    if not gram.requires_grad:
        state.grams_cache[("kernel", j)] = (gram, kernel_matrix)
    return kernel_matrix


def node_matrix(config, state, j, weights=None, kernel_matrix=None):
    """``S_j`` at ``G_j`` with the given (default: current) weights.

    With the current weights the result is cached while ``G_j``, the weights and the
    jitter are unchanged, so that :func:`spd_factors` can recognise it.
    """
    current = weights is None
    weights = state.weights[j - 1] if current else weights
    gram = state.gram(j)
    key = ("node", j)
    cached = state.grams_cache.get(key)
    if current and cached is not None and cached[0] is gram and cached[1] is weights \
            and cached[2] == state.jitter:
        return cached[3]
    if kernel_matrix is None:
        kernel_matrix = kernel_of(config, state, j)
    matrix = _assemble(config, state, j, weights, gram, kernel_matrix)
    if current and not (gram.requires_grad or weights.requires_grad):
        state.grams_cache[key] = (gram, weights, state.jitter, matrix)
    return matrix


class Breakdown(Exception):
    """A matrix of the model lost positive definiteness (the fit raises the jitter)."""


def spd_factors(state, matrix, name):
    """``(chol, inverse)`` of a symmetric positive-definite matrix, cached by identity.

    Factorisations are shared between the objective evaluation that ends a sweep and
    the next sweep, which factorises the same ``G_l`` and ``S_l``.  Raises
    :class:`Breakdown` when the factorisation fails.  The cache keeps the matrices of
    the latest sweep only (see :func:`prune_factors`).
    """
    cache = state.grams_cache.setdefault("factors", {})
    hit = cache.get(id(matrix))
    if hit is not None and hit[0] is matrix:
        return hit[1], hit[2]
    factor = try_cholesky(matrix)
    if factor is None:
        raise Breakdown(f"The {name} is not positive definite.")
    inverse = torch.cholesky_inverse(factor)
    cache[id(matrix)] = (matrix, factor, inverse)
    return factor, inverse


def prune_factors(state):
    """Drop cached factorisations of matrices the state no longer holds (called after
    each sweep: the hidden Grams and the current node matrices stay)."""
    cache = state.grams_cache.get("factors", {})
    nodes = [state.grams_cache.get(("node", j)) for j in range(1, state.n_nodes + 1)]
    alive = {id(matrix) for matrix in [*state.hidden_grams, *(node[3] for node in nodes if node)]}
    for key in [key for key in cache if key not in alive]:
        del cache[key]


def weighted_components(weights, names, kernel_block, gram_block):
    """``w K + v G`` of a sum kernel on any block of it; its Eye part is :func:`eye_weight`."""
    out = weights[0] * kernel_block
    return torch.add(out, gram_block * weights[1]) if "linear" in names else out


def eye_weight(weights, names, fixed_eye):
    """The diagonal of a sum kernel: its fixed jitter plus a learned Eye weight (``sigma^2``)."""
    return fixed_eye + (weights[1] if "eye" in names else 0.0)


def _assemble(config, state, j, weights, gram, kernel_matrix):
    names = node_components(config, state, j)
    matrix = weighted_components(weights, names, kernel_matrix, gram)
    # K(G) and G are symmetric, so S is: the diagonal is added in place on a fresh tensor
    matrix.diagonal().add_(eye_weight(weights, names, node_fixed_eye(state, j)))
    return matrix


def node_derivatives(config, state, j):
    """``(M, N)`` of ``S_j`` with respect to ``G_j`` (Aitchison, Sec. 3.4), and ``K(G_j)``."""
    weights = state.weights[j - 1]
    if config.kernel == "sqexp":  # M = K and N = -K/2: reuse the cached kernel
        kernel_matrix = kernel_of(config, state, j)
        m_kernel, n_kernel = kernel_matrix, -0.5 * kernel_matrix
    else:
        kernel_matrix, m_kernel, n_kernel = gram_kernel_derivatives(config.kernel, state.gram(j))
    m_matrix = weights[0] * m_kernel
    if "linear" in node_components(config, state, j):
        m_matrix = m_matrix + weights[1]
    return (m_matrix, weights[0] * n_kernel), kernel_matrix


def forward_prior_means(config, state, start=1):
    """Set the hidden Gram matrices above layer ``start`` to their prior means
    ``G_l = S_{l-1}`` (Aitchison, Alg. 1; the deterministic layers of ``'gp'``)."""
    for layer in range(start + 1, state.n_nodes + 1):
        state.hidden_grams[layer - 2] = node_matrix(config, state, layer - 1)
    return state


def gaussian_term(factor, root=None, gram=None, inverse=None):
    """``-log|S| - Tr(S^-1 G)`` from ``chol(S)``, with ``G`` given as a root ``R``
    (``G = R R^T``: one triangular solve), or densely together with ``S^-1``."""
    if root is not None:
        whitened = solve_lower(factor, root)
        trace = (whitened * whitened).sum()
    else:
        trace = (inverse * gram).sum()
    return -logdet_from_cholesky(factor) - trace


def dkp_objective(config, state, terms=False):
    """The mean objective of Aitchison (arXiv:2108.13097, Sec. 2.1), constants of the KL form.

    ::

        L = nu_1/2 (a log|Omega| - Tr Omega + d)
          + sum_{l=2..L} nu_l/2 (a log|G_l| - log|S_{l-1}| - Tr(S_{l-1}^-1 G_l) + P)
          + nu_{L+1}/2 (-log|S_L| - Tr(S_L^-1 G_{L+1}) - P log 2 pi)

    with ``a = 1`` for ``'dkp'`` and ``a = 0`` for ``'dgp'``.  For ``'dkp'`` each hidden
    term is ``-nu KL(N(0, G) || N(0, S))`` (zero at the prior); the last term is the
    Gaussian log-likelihood of the targets.  ``'gp'`` keeps the last term only (its
    hidden Grams equal their prior means).  Differentiable with autograd.

    Returns a 0-d tensor, or with ``terms=True`` the list of per-layer terms.
    """
    a = 1.0 if config.objective == "dkp" else 0.0
    n_points = state.inputs.shape[0]
    differentiable = torch.is_grad_enabled() and any(
        t.requires_grad for t in [state.omega, *state.hidden_grams, *state.weights])

    def factors(matrix, name):
        # under autograd: plain Cholesky; in the solver: factorisations (and inverses)
        # shared with the next sweep
        if differentiable:
            return torch.linalg.cholesky(matrix), None
        return spd_factors(state, matrix, name)

    values = []
    if config.objective != "gp":
        if config.input_scale:
            omega = state.omega
            logdet = torch.linalg.slogdet(omega)[1] if a else 0.0
            dim = omega.shape[0]
            values.append(0.5 * config.nu_input * (a * logdet - torch.diagonal(omega).sum() + dim))
        for layer in range(2, state.n_nodes + 1):
            gram = state.gram(layer)
            scale = node_matrix(config, state, layer - 1)
            nu = config.nu_hidden[layer - 2]
            gram_factor, _ = factors(gram, "Gram matrix")
            scale_factor, scale_inverse = factors(scale, "sum kernel")
            if scale_inverse is None:  # autograd: G through its Cholesky root
                term = gaussian_term(scale_factor, root=gram_factor)
            else:
                term = gaussian_term(scale_factor, gram=gram, inverse=scale_inverse)
            values.append(0.5 * nu * (a * logdet_from_cholesky(gram_factor) + term + n_points))
    n_targets = state.targets.shape[1]
    output_factor, _ = factors(node_matrix(config, state, state.n_nodes), "output covariance")
    term = gaussian_term(output_factor, root=state.data_root)
    values.append(0.5 * n_targets * (term - n_points * math.log(2 * math.pi)))
    return values if terms else sum(values)
