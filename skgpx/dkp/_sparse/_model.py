"""The inducing-point deep kernel process: state, inducing blocks, rows, objective.

Sparse mode of the deep Wishart process point solver
(``doc/design_notes.rst``, "Inducing-point deep kernel process").  Each hidden layer keeps
its Gram matrix on ``m`` inducing inputs ``Z`` only, ``G_l`` (m x m), with the prior terms
of Aitchison (arXiv:2108.13097, Sec. 2.1) written on those blocks::

    L = nu_1/2 (a log|Omega| - Tr Omega + d)                                   [input_scale]
      + sum_{l=2..L} nu_l/2 (a log|G_l| - log|S_{l-1}| - Tr(S_{l-1}^-1 G_l) + m)
      + F(Y)                                                                    (data)

Node ``j`` is the sum kernel ``S_j = w_{j+1} K(G_j) + v_{j+1} G_j + eps I`` on the inducing
block, as in :mod:`skgpx.dkp._model`.  The training rows travel through the layers as the
paper's prediction equations carry test points (App. H, Eqs. 139-141), diagonal only:
with ``A_l = S_{l-1}^-1 G_l`` and ``E_l = S_{l-1}^-1 (G_l - S_{l-1}) S_{l-1}^-1``::

    c_t^1 = Z Omega x_t / d,   g_t^1 = x_t^T Omega x_t / d
    sigma_t = w K(c_t; g_t, diag G_j) + v c_t + eps e_t,   s_t = w K_diag(g_t) + v g_t + eps
    c_t^{j+1} = A_{j+1}^T sigma_t,   g_t^{j+1} = s_t + sigma_t^T E_{j+1} sigma_t

``e_t`` marks the inducing inputs equal to ``x_t`` (bitwise, on the standardised scale): the
Eye component is a white-noise field indexed by the input, so a row that *is* an inducing
input shares its nugget.  With it, inducing inputs equal to the training rows give back the
full model's rows exactly (without it the reduction is off by O(eps)).

The output layer is Titsias' collapsed bound on the latent kernel
``k_t = w_out K(c_t^L; g_t^L, diag G_L)``, ``k_tt = w_out K_diag(g_t^L)``, with
``K_uu = w_out K(G_L) + delta I`` and ``delta = inducing_jitter * mean diag(w_out K(G_L))``
(the pathwise convention: ``K_uu`` scales exactly with ``w_out``).  Its row sums are those
of :mod:`skgpx._inducing._collapsed`; ``F = F_fit + F_volume`` with
``F_fit = |c|^2/2 - yy/2`` (the data fit, ``-Tr((Q + sigma^2 I)^-1 Y Y^T)/2``) and
``F_volume`` the log-determinant, normalisation and trace terms.
"""

from dataclasses import dataclass, field, replace

import torch

from ..._inducing._collapsed import SparseStatistics, collapsed_elbo
from ...linalg import gram, logdet_from_cholesky, matmul
from .._grams import gram_kernel, gram_kernel_derivatives, gram_kernel_diag
from .._model import Breakdown, gaussian_term

__all__ = [
    "InducingBlocks", "SparseDKPState", "SparseFit", "SparseTerms", "coincidence",
    "inducing_blocks", "prior_mean_grams", "prior_terms", "propagate_rows", "reference_objective",
    "row_statistics", "split_data_terms",
]


@dataclass
class SparseDKPState:
    """Everything a sparse fit updates; tensors are replaced, never modified in place.

    ``weights`` is laid out as :class:`skgpx.dkp._model.DKPState`'s: ``[w, v]`` (``[w]``
    without skip) per hidden node, ``[w_out, sigma^2]`` for the output node.
    """

    inducing: torch.Tensor  # Z (m, d), standardised
    omega: torch.Tensor  # (d, d); the identity without input_scale
    hidden_grams: list  # [G_2 .. G_L], (m, m) each
    weights: list
    jitter: float  # eps of the hidden nodes' Eye component
    inducing_jitter: float = 1e-8  # delta / mean diag of the output kernel on Z
    coincide: bool = True  # share the Eye nugget between a row and an equal inducing input
    extras: dict = field(default_factory=dict, repr=False)

    @property
    def n_nodes(self):
        return len(self.hidden_grams) + 1

    @property
    def n_inducing(self):
        return self.inducing.shape[0]

    def tensors(self):
        """The learnable tensors, in a fixed order: Omega, the hidden Grams, the weights, Z."""
        return [self.omega, *self.hidden_grams, *self.weights, self.inducing]

    def with_tensors(self, tensors):
        """A copy holding ``tensors`` (the order of :meth:`tensors`)."""
        n_hidden, n_weights = len(self.hidden_grams), len(self.weights)
        return replace(
            self, omega=tensors[0], hidden_grams=list(tensors[1:1 + n_hidden]),
            weights=list(tensors[1 + n_hidden:1 + n_hidden + n_weights]),
            inducing=tensors[1 + n_hidden + n_weights], extras={})

    def copy(self, **changes):
        fresh = replace(self, hidden_grams=list(self.hidden_grams), weights=list(self.weights),
                        extras={})
        for key, value in changes.items():
            setattr(fresh, key, value)
        return fresh


@dataclass
class InducingBlocks:
    """The ``m x m`` quantities that the rows need, built once per evaluation.

    Differentiable in the state's tensors: the chunked passes take them as leaves and sum
    the rows' gradients with respect to them; one backward through this small graph then
    gives the gradients in the state.
    """

    inducing: torch.Tensor  # Z (m, d)
    omega: torch.Tensor  # (d, d)
    diags: list  # diag G_j for j = 1..L, (m,)
    maps: list  # A_l = S_{l-1}^-1 G_l for l = 2..L
    corrections: list  # E_l = S_{l-1}^-1 (G_l - S_{l-1}) S_{l-1}^-1 for l = 2..L
    hidden_weights: list  # weights of nodes 1..L-1
    output_weight: torch.Tensor  # w_out, 0-d
    noise: torch.Tensor  # sigma^2, 0-d
    whitening: torch.Tensor  # L_u^-1, lower triangular (m, m)
    prior: torch.Tensor  # the prior terms of the objective, 0-d

    def tensors(self):
        return [self.inducing, self.omega, *self.diags, *self.maps, *self.corrections,
                *self.hidden_weights, self.output_weight, self.noise, self.whitening]

    def with_tensors(self, tensors):
        n_diag, n_map, n_weights = len(self.diags), len(self.maps), len(self.hidden_weights)
        cut = iter(tensors)
        take = (lambda n: [next(cut) for _ in range(n)])
        return InducingBlocks(
            inducing=next(cut), omega=next(cut), diags=take(n_diag), maps=take(n_map),
            corrections=take(n_map), hidden_weights=take(n_weights), output_weight=next(cut),
            noise=next(cut), whitening=next(cut), prior=self.prior)


@dataclass
class SparseFit:
    """What a sparse solver returns (:func:`skgpx.dkp._sparse._lbfgs.lbfgs_fit`,
    :func:`skgpx.dkp._sparse._solver.newton_fit`)."""

    state: SparseDKPState
    history: list  # objective after each iteration (sweep or L-BFGS iteration); [0] = start
    passes: list  # passes over the rows done when each history entry was reached
    converged: bool
    solver: str  # the solver that ended the fit ('newton' or 'lbfgs')
    warnings: list = field(default_factory=list)  # messages for the estimator to warn with


@dataclass
class SparseTerms:
    """The objective and its parts (0-d tensors) with the row sums they came from."""

    value: torch.Tensor
    prior: torch.Tensor
    fit: torch.Tensor
    volume: torch.Tensor
    statistics: SparseStatistics


def input_gram(inducing, omega):
    """``G_1 = Z Omega Z^T / d`` on the inducing inputs."""
    gram = inducing @ omega @ inducing.mT / inducing.shape[1]
    return 0.5 * (gram + gram.mT)


def checked_cholesky(matrix, name):
    factor, info = torch.linalg.cholesky_ex(matrix)
    if bool(info != 0) or not bool(torch.isfinite(factor.diagonal()).all()):
        raise Breakdown(f"The {name} on the inducing inputs is not positive definite.")
    return factor


def hidden_node(config, weights, gram, jitter):
    """``S_j = w K(G_j) + v G_j + eps I`` on the inducing block (a hidden node)."""
    kernel = gram_kernel_derivatives(config.kernel, gram, derivatives=False)
    matrix = weights[0] * kernel
    if config.skip:
        matrix = matrix + weights[1] * gram
    eye = torch.eye(gram.shape[0], dtype=gram.dtype, device=gram.device)
    return matrix + jitter * eye


def output_kernel(config, state, gram):
    """``K_uu = w_out K(G_L) + delta I``, with ``delta`` proportional to its mean diagonal."""
    kernel = state.weights[-1][0] * gram_kernel_derivatives(config.kernel, gram,
                                                            derivatives=False)
    delta = state.inducing_jitter * kernel.diagonal().mean().abs()
    return kernel + delta * torch.eye(gram.shape[0], dtype=gram.dtype, device=gram.device)


def node_grams(config, state):
    """``[G_1 .. G_L]`` on the inducing inputs."""
    return [input_gram(state.inducing, state.omega), *state.hidden_grams]


def prior_mean_grams(config, state):
    """The hidden Grams at their prior means ``G_l = S_{l-1}`` (the start of a fit, and the
    deterministic layers of ``objective='gp'``); returns a new list."""
    grams = [input_gram(state.inducing, state.omega)]
    for layer in range(2, state.n_nodes + 1):
        grams.append(hidden_node(config, state.weights[layer - 2], grams[-1], state.jitter))
    return grams[1:]


def prior_terms(config, state, grams=None, scales=None):
    """The prior part of the objective (module docstring), 0-d; differentiable."""
    a = 1.0 if config.objective == "dkp" else 0.0
    total = state.omega.new_zeros(())
    if config.objective == "gp":
        return total
    if config.input_scale:
        omega = state.omega
        logdet = torch.linalg.slogdet(omega)[1] if a else 0.0
        total = total + 0.5 * config.nu_input * (a * logdet - omega.diagonal().sum()
                                                 + omega.shape[0])
    grams = node_grams(config, state) if grams is None else grams
    m = state.n_inducing
    for layer in range(2, state.n_nodes + 1):
        scale = scales[layer - 2] if scales is not None else hidden_node(
            config, state.weights[layer - 2], grams[layer - 2], state.jitter)
        gram_factor = checked_cholesky(grams[layer - 1], f"Gram matrix G_{layer}")
        term = gaussian_term(checked_cholesky(scale, f"sum kernel S_{layer - 1}"), root=gram_factor)
        total = total + 0.5 * config.nu_hidden[layer - 2] * (
            a * logdet_from_cholesky(gram_factor) + term + m)
    return total


def inducing_blocks(config, state):
    """The :class:`InducingBlocks` of ``state``; raises ``Breakdown`` if a matrix on the
    inducing inputs is not positive definite."""
    grams = node_grams(config, state)
    maps, corrections, scales = [], [], []
    for layer in range(2, state.n_nodes + 1):
        scale = hidden_node(config, state.weights[layer - 2], grams[layer - 2], state.jitter)
        scales.append(scale)
        factor = checked_cholesky(scale, f"sum kernel S_{layer - 1}")
        # B = S^-1 (G - S) with G - S formed first (as _predict: G close to S would cancel)
        shift = torch.cholesky_solve(grams[layer - 1] - scale, factor)
        eye = torch.eye(shift.shape[0], dtype=shift.dtype, device=shift.device)
        maps.append(shift + eye)
        correction = torch.cholesky_solve(shift.mT, factor)
        corrections.append(0.5 * (correction + correction.mT))
    factor = checked_cholesky(output_kernel(config, state, grams[-1]), "output kernel K_uu")
    eye = torch.eye(factor.shape[0], dtype=factor.dtype, device=factor.device)
    whitening = torch.linalg.solve_triangular(factor, eye, upper=False)
    return InducingBlocks(
        inducing=state.inducing, omega=state.omega, diags=[g.diagonal() for g in grams],
        maps=maps, corrections=corrections, hidden_weights=list(state.weights[:-1]),
        output_weight=state.weights[-1][0], noise=state.weights[-1][1], whitening=whitening,
        prior=prior_terms(config, state, grams, scales))


def coincidence(inputs, inducing):
    """``e`` (n, m): 1 where a row equals an inducing input bitwise, else 0.

    Pairs are screened on the first input first: the full ``(n, m, d)`` comparison took a
    fifth of a pass at ``m = 256``, ``d = 8``, and few pairs pass the screen.
    """
    candidates = inputs[:, None, 0] == inducing[None, :, 0]
    rows, cols = torch.nonzero(candidates, as_tuple=True)
    out = torch.zeros(candidates.shape, dtype=inputs.dtype, device=inputs.device)
    if rows.numel():
        equal = (inputs[rows] == inducing[cols]).all(dim=-1)
        out[rows[equal], cols[equal]] = 1.0
    return out


def _row_kernel(name, cross, row_diag, col_diag, coincident):
    # the arc-cosine kernels at a coincident pair take the diagonal value (their derivative
    # is not finite at cosine 1, and the full model uses the diagonal rule there)
    block = gram_kernel(name, cross, row_diag, col_diag)
    if coincident is None or name == "sqexp":
        return block
    exact = gram_kernel_diag(name, row_diag)[:, None].expand_as(block)
    return torch.where(coincident > 0, exact, block)


def propagate_rows(config, blocks, inputs, jitter, coincident=None):
    """The latent output kernel between rows and inducing inputs, ``(k_t, k_tt)``.

    Parameters
    ----------
    config : DKPConfig
    blocks : InducingBlocks
    inputs : Tensor of shape (n, d)
        Standardised rows.
    jitter : float
        The hidden nodes' ``eps``.
    coincident : Tensor of shape (n, m) or None
        :func:`coincidence` of the rows (None: no row is an inducing input).

    Returns
    -------
    cross : Tensor of shape (n, m)
        ``k(x_t, Z)`` of the output layer's latent kernel.
    diag : Tensor of shape (n,)
        ``k(x_t, x_t)``.
    """
    # matmul: numpy's BLAS without a graph (pass A), torch's product under autograd
    scaled = inputs @ blocks.omega / inputs.shape[1]
    cross = matmul(scaled, blocks.inducing.mT)
    diag = (scaled * inputs).sum(dim=1)
    for j, weights in enumerate(blocks.hidden_weights, start=1):
        kernel = _row_kernel(config.kernel, cross, diag, blocks.diags[j - 1], coincident)
        sigma = weights[0] * kernel
        s_diag = weights[0] * gram_kernel_diag(config.kernel, diag) + jitter
        if config.skip:
            sigma = sigma + weights[1] * cross
            s_diag = s_diag + weights[1] * diag
        if coincident is not None:
            sigma = sigma + jitter * coincident
        cross = matmul(sigma, blocks.maps[j - 1])
        diag = s_diag + (matmul(sigma, blocks.corrections[j - 1]) * sigma).sum(dim=1)
    kernel = _row_kernel(config.kernel, cross, diag, blocks.diags[-1], coincident)
    return (blocks.output_weight * kernel,
            blocks.output_weight * gram_kernel_diag(config.kernel, diag))


def row_statistics(config, blocks, inputs, targets, jitter, coincident=None):
    """The collapsed bound's row sums (:class:`SparseStatistics`) over these rows."""
    cross, diag = propagate_rows(config, blocks, inputs, jitter, coincident)
    root_noise = torch.sqrt(blocks.noise)
    # columns of a_t = L_u^-1 k_t / sigma, (m, n): W by a symmetric rank-n update
    whitened = matmul(blocks.whitening, cross.mT) / root_noise
    n = inputs.shape[0]
    return SparseStatistics(
        W=gram(whitened),
        w=matmul(whitened, targets) / root_noise,
        yy=(targets * targets).sum() / blocks.noise,
        trace=diag.sum() / blocks.noise,
        log_noise=n * torch.log(blocks.noise),
        n=n,
    )


def split_data_terms(statistics, n_targets):
    """``(F_fit, F_volume)`` of the collapsed bound from its row sums."""
    elbo, _, c = collapsed_elbo(statistics, n_targets)
    fit = 0.5 * (c * c).sum() - 0.5 * statistics.yy
    return fit, elbo - fit


def reference_objective(config, state, inputs, targets, chunk=None):
    """The sparse objective in one differentiable expression (a test oracle).

    Rows are summed in chunks of ``chunk`` rows (all at once by default), keeping the whole
    autograd graph: memory O(P m).  The fit uses the passes of
    :mod:`skgpx.dkp._sparse._pass` instead.

    Returns
    -------
    SparseTerms
    """
    blocks = inducing_blocks(config, state)
    chunk = inputs.shape[0] if chunk is None else int(chunk)
    total = None
    for start in range(0, inputs.shape[0], chunk):
        rows = inputs[start:start + chunk]
        coincident = coincidence(rows, state.inducing) if state.coincide else None
        part = row_statistics(config, blocks, rows, targets[start:start + chunk],
                              state.jitter, coincident)
        total = part if total is None else total + part
    fit, volume = split_data_terms(total, targets.shape[1])
    return SparseTerms(value=blocks.prior + fit + volume, prior=blocks.prior, fit=fit,
                       volume=volume, statistics=total)
