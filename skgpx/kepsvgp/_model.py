"""The Transformer encoder around the KEP-SVGP attention layers (Chen et al., ICML 2024).

Tokenizer -> ``depth`` pre-LN blocks (``x + Attn(LN(x))``, ``x + MLP(LN(x))``) -> mean or CLS
pooling -> LayerNorm -> Linear to the class logits.  The last ``kep_layers`` blocks use
:class:`KEPAttention`, the others multi-head softmax attention; ``kep_layers=0`` is the
plain Transformer (the paper's MSP baseline).
"""

import math

import torch
from torch import nn

from ._attention import KEPAttention

__all__ = ["KEPTransformer", "tokenizer_geometry"]


def tokenizer_geometry(tokenizer, n_features, image_shape=None, patch_size=2, token_dim=1):
    """Number of tokens and values per token of a tokenizer on ``n_features`` inputs.

    Returns
    -------
    n_tokens : int
    details : tuple
        ``(H, W, channels, patch_size)`` for patches, ``(token_dim,)`` for sequences,
        ``()`` for features.

    Raises
    ------
    ValueError
        When the geometry does not fit ``n_features`` (the message gives the numbers).
    """
    if tokenizer == "features":
        return n_features, ()
    if tokenizer == "sequence":
        if n_features % token_dim:
            raise ValueError(
                f"tokenizer='sequence' needs n_features ({n_features}) to be a multiple of "
                f"token_dim ({token_dim})."
            )
        return n_features // token_dim, (token_dim,)
    if image_shape is None:
        side = math.isqrt(n_features)
        if side * side != n_features:
            raise ValueError(
                f"tokenizer='patches' with image_shape=None needs a square single-channel "
                f"image, but n_features={n_features} is not a perfect square; pass image_shape."
            )
        image_shape = (side, side)
    shape = tuple(int(v) for v in image_shape)
    height, width = shape[:2]
    channels = shape[2] if len(shape) == 3 else 1
    if height * width * channels != n_features:
        raise ValueError(
            f"image_shape={image_shape} holds {height * width * channels} values but X has "
            f"{n_features} features."
        )
    if height % patch_size or width % patch_size:
        raise ValueError(
            f"patch_size={patch_size} must divide the image height {height} and width {width}."
        )
    return (height // patch_size) * (width // patch_size), (height, width, channels, patch_size)


class _Tokenizer(nn.Module):
    def __init__(self, kind, n_features, n_tokens, d_model, details, generator):
        super().__init__()
        self.kind, self.details = kind, details
        if kind == "features":
            self.weight = nn.Parameter(torch.randn(n_features, d_model, generator=generator)
                                       / math.sqrt(d_model))
            self.bias = nn.Parameter(torch.zeros(n_features, d_model))
            return
        width = details[0] if kind == "sequence" else details[2] * details[3] ** 2
        self.embed = nn.Linear(width, d_model)
        self.position = nn.Parameter(0.02 * torch.randn(n_tokens, d_model, generator=generator))

    def forward(self, x):
        if self.kind == "features":
            return x.unsqueeze(-1) * self.weight + self.bias
        B = x.shape[0]
        if self.kind == "sequence":
            tokens = x.view(B, -1, self.details[0])
        else:
            height, width, channels, p = self.details
            image = x.view(B, height // p, p, width // p, p, channels)
            tokens = image.permute(0, 1, 3, 2, 4, 5).reshape(B, -1, p * p * channels)
        return self.embed(tokens) + self.position


class _SoftmaxAttention(nn.Module):
    """Multi-head softmax attention (Q, K, V, W_O; scale ``1/sqrt(d_h)``)."""

    def __init__(self, d_model, n_heads, dropout):
        super().__init__()
        self.n_heads = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, Z, eps=None):
        B, N, C = Z.shape
        q, k, v = self.qkv(Z).view(B, N, 3, self.n_heads, C // self.n_heads).permute(2, 0, 3, 1, 4)
        weights = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(C // self.n_heads), dim=-1)
        out = (self.dropout(weights) @ v).transpose(1, 2).reshape(B, N, C)
        return self.out(out), None, None


class _Block(nn.Module):
    def __init__(self, attention, d_model, mlp_ratio, dropout):
        super().__init__()
        hidden = int(round(mlp_ratio * d_model))
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.attention = attention
        self.mlp = nn.Sequential(nn.Linear(d_model, hidden), nn.GELU(), nn.Dropout(dropout),
                                 nn.Linear(hidden, d_model), nn.Dropout(dropout))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, eps=None):
        out, kl, ksvd = self.attention(self.norm1(x), eps)
        x = x + self.dropout(out)
        return x + self.mlp(self.norm2(x)), kl, ksvd


class KEPTransformer(nn.Module):
    """The classifier network; ``forward(x, eps=None)`` returns ``(logits, kl, ksvd)``.

    ``eps`` is None (training: per-example draws from torch's global generator) or a list
    with one tensor of draws per KEP layer, shape (h, s, s), shared by every example.
    """

    def __init__(self, *, n_features, n_classes, tokenizer, details, n_tokens, d_model, n_heads,
                 depth, mlp_ratio, dropout, pooling, kep_layers, rank, merge, concat_rank,
                 projection, rank_multiplier, whiten, generator):
        super().__init__()
        self.tokenizer = _Tokenizer(tokenizer, n_features, n_tokens, d_model, details, generator)
        self.pooling = pooling
        if pooling == "cls":
            self.cls = nn.Parameter(0.02 * torch.randn(1, 1, d_model, generator=generator))
        total_tokens = n_tokens + (pooling == "cls")
        blocks = []
        for index in range(depth):
            if index >= depth - kep_layers:
                attention = KEPAttention(
                    d_model, n_heads, rank, total_tokens, projection=projection, merge=merge,
                    concat_rank=concat_rank, whiten=whiten, rank_multiplier=rank_multiplier,
                    generator=generator,
                )
            else:
                attention = _SoftmaxAttention(d_model, n_heads, dropout)
            blocks.append(_Block(attention, d_model, mlp_ratio, dropout))
        self.blocks = nn.ModuleList(blocks)
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, n_classes)

    @property
    def kep_attention(self):
        return [b.attention for b in self.blocks if isinstance(b.attention, KEPAttention)]

    def encode(self, x):
        """Tokens after the deterministic (softmax-attention) blocks: (B, N, C).  They do
        not depend on the posterior draws, so prediction computes them once per batch."""
        h = self.tokenizer(x)
        if self.pooling == "cls":
            h = torch.cat([self.cls.expand(h.shape[0], -1, -1), h], dim=1)
        for block in self.blocks[:len(self.blocks) - len(self.kep_attention)]:
            h = block(h)[0]
        return h

    def decode(self, h, eps=None):
        """The KEP blocks, pooling and head on encoded tokens: ``(logits, kl, ksvd)``."""
        kl = ksvd = h.new_zeros(())
        kep_blocks = self.blocks[len(self.blocks) - len(self.kep_attention):]
        for index, block in enumerate(kep_blocks):
            h, layer_kl, layer_ksvd = block(h, None if eps is None else eps[index])
            kl, ksvd = kl + layer_kl, ksvd + layer_ksvd
        pooled = h[:, 0] if self.pooling == "cls" else h.mean(1)
        return self.head(self.norm(pooled)), kl, ksvd

    def forward(self, x, eps=None):
        return self.decode(self.encode(x), eps)
