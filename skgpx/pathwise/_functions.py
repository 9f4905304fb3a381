"""Posterior function draws in the decoupled basis (Wilson et al., 2020, eq. 13).

.. math::

    (f \\mid \\text{data})_s(x) = \\sum_{i=1}^{F} w_{s,i} \\phi_i(x)
                             + \\sum_{j=1}^{N} v_{s,j} k(x, c_j)

The first sum is a random-feature prior draw, the second the pathwise update built
on the canonical basis ``k(., c_j)`` at the training inputs.  Evaluation is linear in
the number of query points and is chunked over rows so memory stays bounded.
"""

from contextlib import nullcontext

import numpy as np
import torch
from sklearn.utils import check_array

from .._base import loadable_device, rows_per_chunk, state_to_device, to_numpy
from .._buffers import Buffers
from .._inducing._cross import stationary_cross
from .._pickle_versions import add_version, pop_version

# Rows of an evaluation block come in multiples of this: every SIMD width and the BLAS
# register tiles of 4, 8, 12, 16, 24 or 64 doubles divide it, so no vectorised loop has a
# remainder and no product an edge tile ...
_ROW_ALIGN = 192
# ... and the last rows of a block are padding anyway, for BLAS kernels that finish a
# product with other code regardless (wider than the widest such edge measured, 7 rows).
_TAIL_ROWS = 16


def sklearn_layout(values, squeeze):
    """(n, S, T) draws -> scikit-learn's ``sample_y`` layout (n, T, S), or (n, S)."""
    out = values.transpose(1, 2)
    return out[:, 0, :] if squeeze else out


class PathwiseFunctions:
    """A batch of sample paths ``f_1, ..., f_S`` that can be evaluated anywhere.

    Returned by :meth:`skgpx.PathwiseGPSampler.sample_functions`; do not build it
    directly.  Calls are pure functions of the stored state: the same path gives the
    same value at the same point, to the bit, whichever other points it is evaluated
    with and however they are split (numpy input, or tensors without autograd, on one
    machine with one thread setting; see :meth:`_fill_blocks`).

    Attributes
    ----------
    n_samples : int
        Number of sample paths ``S``.
    n_targets : int
        Number of targets ``T``.
    n_features_in_ : int
        Input dimension.
    frequencies_ : Tensor of shape (B, P, d) or None
        Random-feature frequencies in input units (``B = 1`` for a shared basis).
    prior_weights_ : Tensor of shape (B, F, S * T / B)
        Weights of the feature part of every path.
    update_weights_ : Tensor of shape (N, S, T) or None
        Weights ``v`` of the canonical-basis update (None for prior or weight-space draws).
    centers_ : Tensor of shape (N, d) or None
        Centres ``c`` of the update (the training inputs in exact mode).
    """

    def __init__(self, *, features, prior_weights, kernel, theta, centers, update_weights,
                 y_mean, y_std, n_samples, n_targets, squeeze, n_features_in, batch_size):
        self._features = features
        self._prior_weights = prior_weights
        self._kernel = kernel
        self._theta = theta
        self._centers = centers
        self._update_weights = update_weights
        self._y_mean = y_mean
        self._y_std = y_std
        self.n_samples = n_samples
        self.n_targets = n_targets
        self._squeeze = squeeze
        self.n_features_in_ = n_features_in
        self._batch_size = batch_size

    frequencies_ = property(lambda self: self._features.frequencies)
    prior_weights_ = property(lambda self: self._prior_weights)
    update_weights_ = property(lambda self: self._update_weights)
    centers_ = property(lambda self: self._centers)

    @property
    def device(self):
        return self._prior_weights.device

    def to(self, device):
        """Move every stored tensor to ``device`` (in place); returns ``self``."""
        self.__dict__.update(state_to_device(self.__dict__, device))
        self._features.to(device)
        self._transposed = None
        return self

    def __getstate__(self):
        state = state_to_device(self.__dict__, "cpu")  # feature blocks pickle from the CPU too
        state.pop("_transposed", None)  # a cache, rebuilt on first use
        state["_device"] = str(self.device)
        return add_version(state)

    def __setstate__(self, state):
        state = pop_version(state, type(self).__name__)
        device = loadable_device(state.pop("_device", "cpu"), type(self).__name__)
        self.__dict__.update(state)
        self.to(device)

    def _as_tensor(self, X):
        if isinstance(X, torch.Tensor):
            if X.shape[-1] != self.n_features_in_:
                raise ValueError(f"X has {X.shape[-1]} features, but these functions "
                                 f"expect {self.n_features_in_}.")
            return X.to(self.device, self._prior_weights.dtype), True
        X = check_array(X, dtype=np.float64, allow_nd=True)
        if X.shape[-1] != self.n_features_in_:
            raise ValueError(f"X has {X.shape[-1]} features, but these functions "
                             f"expect {self.n_features_in_}.")
        X = np.ascontiguousarray(X)  # torch refuses negative strides
        return torch.tensor(X, dtype=self._prior_weights.dtype, device=self.device), False

    def _latent(self, X):
        """Normalised latent values at X (n, d): (n, S, T)."""
        n, S, T = X.shape[0], self.n_samples, self.n_targets
        prior = self._features(X) @ self._prior_weights  # (B, n, S*T/B)
        out = prior.transpose(0, 1).reshape(n, S, T)
        if self._centers is not None:
            K = self._kernel(X, self._centers, self._theta, part="signal")
            out = out + (K @ self._update_weights.reshape(K.shape[1], S * T)).reshape(n, S, T)
        return out

    def _latent_into(self, X, out, buffers):
        """``_latent`` in target units, without autograd, at the first ``len(out)`` rows
        of the block ``X``, written into ``out`` (r, S, T).

        Everything is formed transposed, (S*T, n): the feature part by
        :meth:`RandomFeatures.accumulate_transposed`, the update as ``V^T k(C, X)`` with
        the cross-kernel by one matrix product for stationary kernels.
        """
        n, S, T = X.shape[0], self.n_samples, self.n_targets
        B, F, K = self._prior_weights.shape
        if getattr(self, "_transposed", None) is None:  # built once per path batch
            cross = None if self._centers is None else stationary_cross(
                self._kernel, self._theta, self._centers)
            V_t = None if self._centers is None else \
                self._update_weights.reshape(self._centers.shape[0], S * T).T.contiguous()
            self._transposed = (self._prior_weights.transpose(1, 2).contiguous(), V_t, cross)
        W_t, V_t, cross = self._transposed
        acc = buffers.get("values", (B, K, n), X).zero_()
        self._features.accumulate_transposed(X, W_t, acc, buffers)
        flat = acc.view(S * T, n)  # row s*T + t for a shared basis (B=1) and for B=S alike
        if self._centers is not None:
            if cross is None:
                K_cx = self._kernel(self._centers, X, self._theta, part="signal")
            else:  # in a reused buffer: a fresh block per chunk cost 3.5x its product
                K_cx = cross.block(X, out=buffers.get("cross", (self._centers.shape[0], n), X))
            flat.addmm_(V_t, K_cx)
        rows = out.shape[0]
        # target units in place, while the block is in cache (fresh tensors for the
        # affine map cost about 5 % of a draw at a million points)
        values = flat[:, :rows].view(S, T, rows)
        values.mul_(self._y_std[:, None]).add_(self._y_mean[:, None])
        out.copy_(values.permute(2, 0, 1))

    def _block_rows(self):
        """Rows of every evaluation block: the memory budget's rows rounded down to a
        multiple of ``_ROW_ALIGN``, and at least ``_ROW_ALIGN``."""
        B, F, _ = self._prior_weights.shape
        N = 0 if self._centers is None else self._centers.shape[0]
        width = B * F + N + self.n_samples * self.n_targets
        rows = rows_per_chunk(self._batch_size, width, self.device)
        return max(1, rows // _ROW_ALIGN) * _ROW_ALIGN

    def __call__(self, X):
        """Evaluate every path at every row of X.

        Parameters
        ----------
        X : array-like or Tensor of shape (n_queries, n_features)
            A torch tensor gives a torch result on the functions' device that is
            differentiable with respect to X; anything else gives numpy float64.

        Returns
        -------
        values : ndarray or Tensor of shape (n_queries, n_samples) or \
                (n_queries, n_targets, n_samples)
            The layout of ``GaussianProcessRegressor.sample_y``.
        """
        Xt, is_torch = self._as_tensor(X)
        if Xt.dim() != 2:
            raise ValueError(f"X must be 2-D (n_queries, n_features); got shape {tuple(Xt.shape)}.")
        if is_torch:
            return sklearn_layout(self.values(Xt), self._squeeze)
        return self._evaluate_aligned(Xt, 0)

    def _evaluate_aligned(self, Xt, row_offset=0):
        """Numpy values at ``Xt``, written block by block straight into the result (cast to
        float64 and brought to the host on the way), so the draws are held once.

        ``row_offset`` (where ``Xt`` starts in a larger array) is accepted for callers
        that split an array, and not needed: a row's value does not depend on where it
        sits (see :meth:`_fill_blocks`)."""
        n, S, T = Xt.shape[0], self.n_samples, self.n_targets
        out = np.empty((n, S) if self._squeeze else (n, T, S))
        view = torch.from_numpy(out)  # (n, S, T) view of scikit-learn's layout
        self._fill_blocks(Xt, view.unsqueeze(-1) if self._squeeze else view.transpose(1, 2))
        return out

    def _fill_blocks(self, Xt, dest):
        """Write the values at ``Xt`` into ``dest`` (n, S, T), without autograd.

        Every block has the same shape, ``_block_rows()`` rows, and carries query rows
        only in its first ``_block_rows() - _TAIL_ROWS``; the rest is zero padding.  So
        every product and elementwise pass has one shape, and a query row never sits in
        the last columns of a product, where BLAS finishes a block with other code
        (measured: MKL's AVX2 branch rounds the last up to 7 of ``n`` columns
        differently from the others).  Elsewhere each column of a product is the same
        arithmetic on that column alone, and the elementwise passes are lane-wise, so a
        row's value is the same bits whatever the rows around it, however ``X`` is
        split, in whatever order.  The padding costs ``_TAIL_ROWS`` rows per block.
        """
        n = Xt.shape[0]
        step = self._block_rows()
        window = step - _TAIL_ROWS
        buffers = Buffers()
        block = Xt.new_zeros(step, Xt.shape[1])
        with torch.no_grad():
            for a in range(0, n, window):
                b = min(a + window, n)
                block[: b - a] = Xt[a:b]
                if b - a < window:
                    block[b - a :] = 0.0
                self._latent_into(block, dest[a:b], buffers)

    def values(self, X):
        """Path values at a 2-D tensor ``X`` in target units, shape (n, S, T).

        Differentiable with respect to ``X`` when autograd is on and ``X`` requires it
        (values then agree with the other route to rounding, not to the bit); otherwise
        by the fixed blocks of :meth:`_fill_blocks`.
        """
        if torch.is_grad_enabled() and X.requires_grad:
            step = self._block_rows()
            # one preallocated output (see _draws._posterior._prior_at: per-chunk lists fragment
            # the heap)
            latent = X.new_empty(X.shape[0], self.n_samples, self.n_targets)
            for i in range(0, X.shape[0], step):
                latent[i : i + step] = self._latent(X[i : i + step])
            return self._y_mean + self._y_std * latent
        out = X.new_empty(X.shape[0], self.n_samples, self.n_targets)
        self._fill_blocks(X, out)
        return out

    def evaluate_batched(self, Xb):
        """Evaluate path ``s`` at its own points ``Xb[s]`` (e.g. for Thompson sampling).

        Parameters
        ----------
        Xb : array-like or Tensor of shape (n_samples, q, n_features)

        Returns
        -------
        values : ndarray or Tensor of shape (n_samples, q) or (n_samples, q, n_targets)
        """
        Xt, is_torch = self._as_tensor(Xb)
        S, T = self.n_samples, self.n_targets
        if Xt.dim() != 3 or Xt.shape[0] != S:
            raise ValueError(f"Xb must have shape (n_samples={S}, q, n_features); "
                             f"got {tuple(Xt.shape)}.")
        with nullcontext() if is_torch else torch.no_grad():
            phi = self._features(Xt)  # (S, q, F)
            W = self._prior_weights
            if W.shape[0] == 1:
                out = torch.einsum("sqf,fst->sqt", phi, W[0].reshape(W.shape[1], S, T))
            else:
                out = torch.einsum("sqf,sft->sqt", phi, W)
            if self._centers is not None:
                q = Xt.shape[1]
                K = self._kernel(Xt.reshape(S * q, -1), self._centers, self._theta,
                                 part="signal").reshape(S, q, -1)
                out = out + torch.einsum("sqn,nst->sqt", K, self._update_weights)
            out = self._y_mean + self._y_std * out
            if self._squeeze:
                out = out[..., 0]
        return out if is_torch else to_numpy(out)
