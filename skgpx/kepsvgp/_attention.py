"""One KEP-SVGP self-attention layer (Chen et al., ICML 2024, Sec. 4 and App. D.1).

The query/key kernel is the asymmetric cosine kernel ``kappa(x, x') = <phi_q(x), phi_k(x')>``
handled through its kernel SVD: primal projections ``E = phi_q W_e`` and ``R = phi_k W_r``
(``N x s`` per head) play the left and right singular functions scaled by the singular
values ``Lambda``.  The layer output is a draw from the pair of sparse variational GPs whose
inducing variables ``u_[d] ~ q = N(m_[d], S_[d])`` (prior ``N(0, Lambda^2)``) are shared by
both branches:

.. math::

    F^e = E \\Lambda^{-1} U, \\qquad F^r = R \\Lambda^{-1} U,

merged by addition or by concatenation along the tokens and projected back to ``d_h``.
Nothing ``N x N`` is formed: the layer costs O(N s) per head with the addition merge.
"""

import torch
from torch import nn

from .._base import standard_normal
from ..linalg import inverse_softplus, positive_tril, positive_tril_raw

__all__ = ["KEPAttention", "cosine_features", "ksvd_objective", "svgp_kl"]

_FEATURE_EPS = 1e-12


def cosine_features(x, eps=_FEATURE_EPS):
    """``x / max(||x||, eps)`` along the last axis: the feature maps ``phi_q``, ``phi_k`` of
    the cosine attention kernel (the layer applies them through the scores, see
    :meth:`KEPAttention.forward`)."""
    return x / x.norm(dim=-1, keepdim=True).clamp_min(eps)


def ksvd_objective(E, R, W_e, W_r, lam):
    """The KSVD primal objective of each example and head (Eq. 11):

    .. math::

        J = \\tfrac12 \\sum_n e_n^T \\Lambda^{-1} e_n + \\tfrac12 \\sum_n r_n^T \\Lambda^{-1} r_n
            - \\mathrm{tr}(W_e^T W_r),

    zero at an exact SVD of ``phi_q phi_k^T`` (necessary, not sufficient).

    Parameters
    ----------
    E, R : Tensor of shape (..., N, s)
    W_e, W_r : Tensor of shape (..., d_h, s)
    lam : Tensor of shape (..., s) (broadcastable)

    Returns
    -------
    J : Tensor of shape (...)
    """
    # tokens summed first: the products stay in the layout of E and R, only (..., s) is
    # divided by lambda
    quadratic = 0.5 * ((E * E + R * R).sum(-2) / lam).sum(-1)
    return quadratic - (W_e * W_r).sum((-2, -1))


def svgp_kl(mean, tril, lam=None):
    """KL of ``q(u_[d]) = N(m_[d], L_[d] L_[d]^T)`` from ``N(0, Lambda^2)``, summed (Eq. 21).

    .. math::

        KL = \\tfrac12 \\sum_{h,d} \\big[\\mathrm{tr}(\\Lambda^{-2} S_{[d]})
             + m_{[d]}^T \\Lambda^{-2} m_{[d]} + \\log|\\Lambda^2| - \\log|S_{[d]}| - s\\big]

    Parameters
    ----------
    mean : Tensor of shape (h, s_d, s)
    tril : Tensor of shape (h, s_d, s, s)
        Lower-triangular factors with positive diagonal.
    lam : Tensor of shape (h, s), optional
        Singular values; None is the whitened prior ``N(0, I)``.
    """
    s = mean.shape[-1]
    log_diag = tril.diagonal(dim1=-2, dim2=-1).log().sum(-1)  # (h, s_d)
    if lam is None:
        trace = tril.pow(2).sum((-2, -1)) + mean.pow(2).sum(-1)
        return 0.5 * (trace - 2.0 * log_diag - s).sum()
    inv2 = lam.pow(-2).unsqueeze(-2)  # (h, 1, s)
    trace = (tril.pow(2).sum(-1) * inv2).sum(-1) + (mean.pow(2) * inv2).sum(-1)
    log_prior = 2.0 * lam.log().sum(-1, keepdim=True)  # (h, 1)
    return 0.5 * (trace + log_prior - 2.0 * log_diag - s).sum()


class KEPAttention(nn.Module):
    """A KEP-SVGP attention layer on layer-normalised tokens ``Z`` of shape (B, N, C).

    Parameters
    ----------
    d_model, n_heads, rank : int
        ``C``, ``h`` and ``s``; ``C`` must be divisible by ``h``.
    n_tokens : int
        ``N`` (the concatenation merge needs it fixed; the data projections sub-sample it).
    projection : {"data", "static"}
        ``W_e = Z_sub^T Theta_e`` from ``N'`` sub-sampled tokens, or plain parameters.
    merge : {"add", "concat"}
    concat_rank : int or None
        Rank of the token-mixing ``W1`` of the concatenation merge (None: full).
    whiten : bool
        Store ``u = Lambda u~`` with prior ``N(0, I)`` (identical outputs and KL).
    rank_multiplier : int
        ``N' = min(N, rank * rank_multiplier)`` tokens for the data projections.
    generator : torch.Generator, optional
        For the initialisation (CPU).
    """

    def __init__(self, d_model, n_heads, rank, n_tokens, *, projection="data", merge="add",
                 concat_rank=None, whiten=True, rank_multiplier=10, generator=None):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} must be divisible by n_heads={n_heads}.")
        h, s, d_h = n_heads, rank, d_model // n_heads
        self.n_heads, self.rank, self.n_tokens = h, s, n_tokens
        self.projection, self.merge, self.whiten = projection, merge, whiten
        self.query_key = nn.Linear(d_model, 2 * d_model, bias=False)
        if projection == "data":
            n_sub = min(n_tokens, s * rank_multiplier)
            index = torch.floor(torch.linspace(0, n_tokens - 1, n_sub)).long()
            self.register_buffer("token_index", None if n_sub == n_tokens else index,
                                 persistent=False)
            self.theta_e = nn.Parameter(self._orthogonal((h, n_sub, s), generator))
            self.theta_r = nn.Parameter(self._orthogonal((h, n_sub, s), generator))
        else:
            self.weight_e = nn.Parameter(self._orthogonal((h, d_h, s), generator))
            self.weight_r = nn.Parameter(self._orthogonal((h, d_h, s), generator))
        # lambda = exp(rho) in [e^-2, 1] at initialisation, as the reference
        self.log_singular_values = nn.Parameter(-2.0 * torch.rand(h, s, generator=generator))
        mean = torch.randn(h, s, s, generator=generator)
        raw = 1e-3 * torch.randn(h, s, s, s, generator=generator)
        raw = raw.tril(-1) + float(inverse_softplus(0.1)) * torch.eye(s)
        if not whiten:  # the same initial posterior stored unwhitened: m = Lambda m~, L = Lambda L~
            lam = self.log_singular_values.detach().exp()
            mean = mean * lam.unsqueeze(-2)
            raw = positive_tril_raw(lam[:, None, :, None] * positive_tril(raw))
        self.variational_mean = nn.Parameter(mean)
        self.raw_variational_tril = nn.Parameter(raw)
        self.output = nn.Linear(s, d_h)  # shared by the heads, as the reference
        if merge == "concat":
            if concat_rank is None:
                self.token_mix = nn.Linear(2 * n_tokens, n_tokens)
            else:
                self.token_mix_a = nn.Parameter(torch.randn(n_tokens, concat_rank,
                                                            generator=generator) / n_tokens)
                self.token_mix_b = nn.Parameter(torch.randn(2 * n_tokens, concat_rank,
                                                            generator=generator) / n_tokens)
                self.token_mix_bias = nn.Parameter(torch.zeros(n_tokens))
        self.concat_rank = concat_rank

    @staticmethod
    def _orthogonal(shape, generator):
        # per head: orthonormal columns from the QR of a Gaussian matrix
        q, r = torch.linalg.qr(torch.randn(shape, generator=generator))
        return (q * torch.sign(r.diagonal(dim1=-2, dim2=-1)).unsqueeze(-2)).contiguous()

    @property
    def singular_values(self):
        return self.log_singular_values.exp()

    def variational_tril(self):
        return positive_tril(self.raw_variational_tril)

    def kl_divergence(self):
        """The KL term of this layer (Eq. 21; whitened or not, the same value)."""
        lam = None if self.whiten else self.singular_values
        return svgp_kl(self.variational_mean, self.variational_tril(), lam)

    def primal_weights(self, Z):
        """``W_e, W_r`` of shape (B or 1, h, d_h, s): ``Z_sub^T Theta`` per head from the
        sub-sampled tokens (data projections) or the static parameters."""
        if self.projection == "static":
            return self.weight_e.unsqueeze(0), self.weight_r.unsqueeze(0)
        B, _, C = Z.shape
        Z_sub = Z if self.token_index is None else Z.index_select(1, self.token_index)
        theta = torch.cat([self.theta_e, self.theta_r], dim=-1)  # one contraction for both
        W = torch.einsum("bnhd,hns->bhds", Z_sub.view(B, -1, self.n_heads, C // self.n_heads),
                         theta)
        return W[..., :self.rank], W[..., self.rank:]

    def inducing_draws(self, eps):
        """``u_[d] = m_[d] + L_[d] eps_[d]`` (whitened: ``u~``) for ``eps`` (..., h, s_d, s)."""
        return self.variational_mean + torch.einsum(
            "hdij,...hdj->...hdi", self.variational_tril(), eps)

    def forward(self, Z, eps=None):
        """Layer output (B, N, C), the KL term and the KSVD loss.

        ``eps`` (broadcastable to (B, h, s, s)) are the standard normal draws of the
        inducing variables; None draws one per example from torch's global generator
        (training).  Prediction passes draws of shape (h, s, s) shared by every example.

        Every head is computed at once, in the token-major layout of ``Z``, as products
        with block-diagonal (over heads) matrices: small per-head products would cost far
        more than their arithmetic on a CPU.  The cosine normalisation is applied to the
        scores ``q W_e`` rather than to ``q``, which is the same thing.
        """
        B, N, C = Z.shape
        h, s = self.n_heads, self.rank
        # two products with the halves of the weight rather than one split afterwards: q and
        # k stay contiguous, and the backward adds no concatenation
        weight = self.query_key.weight
        q, k = Z @ weight[:C].T, Z @ weight[C:].T
        W_e, W_r = self.primal_weights(Z)
        E = _cosine_scores(q, W_e, h)  # (B, N, h s): E = phi_q W_e, head-major columns
        R = _cosine_scores(k, W_r, h)
        lam = self.singular_values
        if eps is None:
            # float64 normals, cast: float32 training sees the float64 draws, rounded
            eps = standard_normal((B, h, s, s), None, Z.dtype, Z.device)
        U = self.inducing_draws(eps)  # (B or 1, h, s_d, s)
        if not self.whiten:
            U = U / lam.unsqueeze(-2)  # Lambda^{-1} u
        # per head, u shared by both branches, then the shared Linear(s, d_h):
        # F W_out^T = E (U^T W_out^T); the (s x d_h) products as one block-diagonal matrix
        mixing = _block_diagonal(torch.einsum("...hji,cj->...hic", U, self.output.weight))
        bias = self.output.bias.repeat(h)
        if self.merge == "add":
            out = (E + R) @ mixing + bias
        else:
            # W1 [F^e; F^r] + b1 with F = [E; R] mixing + bias: the token mixing W1 (N x 2N)
            # is applied to the (B, 2N, h s) scores before the per-head mixing rather than
            # after, which halves both products; its action on the bias is W1 1 bias^T.
            both = torch.cat([E, R], dim=1)  # (B, 2N, h s): tokens concatenated
            if self.concat_rank is None:
                W1, b1 = self.token_mix.weight, self.token_mix.bias
                mixed = W1 @ both
            else:
                W1, b1 = self.token_mix_a @ self.token_mix_b.T, self.token_mix_bias
                mixed = self.token_mix_a @ (self.token_mix_b.T @ both)
            out = mixed @ mixing + (W1.sum(1)[:, None] * bias + b1[:, None])
        # J of Eq. 11 per example and head, normalised by the tokens: mean (J / N)^2
        J = ksvd_objective(*(x.view(B, N, h, s).transpose(1, 2) for x in (E, R)), W_e, W_r, lam)
        return out, self.kl_divergence(), (J / N).pow(2).mean()


def _block_diagonal(blocks):
    """(..., h, a, b) -> (..., h a, h b), the blocks on the diagonal (written into a
    diagonal view: far cheaper than masking on a CPU)."""
    *batch, h, a, b = blocks.shape
    out = blocks.new_zeros(*batch, h, a, h, b)
    out.diagonal(dim1=-4, dim2=-2).copy_(blocks.movedim(-3, -1))
    return out.reshape(*batch, h * a, h * b)


def _head_indicator(h, width, like):
    """(h, h width): row i is one on the columns of head i."""
    return torch.eye(h, dtype=like.dtype, device=like.device).repeat_interleave(width, dim=1)


def _cosine_scores(x, W, h, eps=_FEATURE_EPS):
    """``cosine_features(x_head) @ W_head`` for every head: x (B, N, C), W (B or 1, h, d_h, s)
    -> (B, N, h s).  The row norms of each head come from products with head indicators,
    and scale the scores instead of the features (both are linear in the row)."""
    C, s = x.shape[-1], W.shape[-1]
    squared_norm = (x * x) @ _head_indicator(h, C // h, x).T  # (B, N, h)
    inverse_norm = torch.rsqrt(squared_norm.clamp_min(eps * eps))
    return (x @ _block_diagonal(W)) * (inverse_norm @ _head_indicator(h, s, x))


def posterior_moments(E, lam, mean, tril):
    """Mean ``E Lambda^-1 m_[d]`` (..., s_d, N) and covariance ``E Lambda^-1 S_[d] Lambda^-1 E^T``
    (..., s_d, N, N) of the e-branch output columns (unwhitened parameters; for tests)."""
    A = E / lam.unsqueeze(-2)  # (..., N, s)
    column_mean = (A.unsqueeze(-3) @ mean.unsqueeze(-1)).squeeze(-1)
    root = A.unsqueeze(-3) @ tril  # (..., s_d, N, s)
    return column_mean, root @ root.transpose(-1, -2)
