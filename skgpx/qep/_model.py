"""Torch modules of the deep Q-EP: batched sparse variational Q-EP layers and their stack.

A layer holds ``D`` units (one per output dimension), each a sparse variational Q-EP
with ``M`` inducing inputs ``Z_d``, an ARD stationary kernel ``k_d`` and whitened
variational parameters ``(m_d, S_d)``: the inducing values are ``u_d = L_d v_d`` with
``L_d L_d^T = K_ZZ`` and ``q(v_d) = q-ED(m_d, S_d S_d^T)``.  For inputs ``h`` and
``A = L_d^{-1} K_{Z h}`` the marginal of ``f_d(h)`` has location and scale

.. math::

    \\mu_d(h) = \\mathrm{mean}_d(h) + A^T m_d, \\qquad
    v_d(h) = k_d(h, h) - \\|A\\|^2 + \\|S_d^T A\\|^2

(Chang et al., App. A.1, the SVGP form).  Units and Monte-Carlo samples are batched:
no Python loop runs over either.
"""

import math
import warnings

import torch
from torch import nn
from torch.nn import functional as F

from ..kernels import unit_stationary_kernel
from ..linalg import (NotPositiveDefiniteError, inverse_softplus, lower_inverse, positive_tril,
                      try_cholesky)
from ._bounds import kl_authors, kl_scaled
from ._distribution import standard_univariate_draws, univariate_variance_factor

__all__ = ["DeepQEPModule", "QEPLayer", "initial_mean_weight", "pca_directions"]

_JITTER_RETRIES = 3
_ADVICE = (
    "use dtype='float64', fewer inducing points (n_inducing) or a larger jitter"
)


class QEPLayer(nn.Module):
    """``D`` sparse variational Q-EP units sharing an input space of dimension ``Q``.

    Parameters
    ----------
    inducing_points : Tensor of shape (D, M, Q)
        Initial inducing inputs of every unit.
    kernel : str
        One of ``"matern12"``, ``"matern32"``, ``"matern52"``, ``"rbf"``.
    length_scale : Tensor of shape (D, 1, Q) or (D, 1, 1)
        Initial ARD (or isotropic) length scales.
    output_scale : float
        Initial output scale of every unit.
    mean_weight : Tensor of shape (Q, D) or None
        Initial weights of a linear mean ``h W + b`` (hidden layers); None gives a
        constant mean (the last layer).
    """

    def __init__(self, inducing_points, kernel, length_scale, output_scale, mean_weight=None):
        super().__init__()
        n_units, n_inducing, _ = inducing_points.shape
        dtype = inducing_points.dtype
        self.kernel = kernel
        self.inducing_points = nn.Parameter(inducing_points.clone())
        self.raw_length_scale = nn.Parameter(inverse_softplus(length_scale).to(dtype))
        self.raw_output_scale = nn.Parameter(
            inverse_softplus(torch.full((n_units,), float(output_scale))).to(dtype)
        )
        # whitened variational parameters: m ~ 1e-3 N(0, 1) is set by the caller's
        # generator through `variational_mean`; S = I through softplus(raw diagonal) = 1.
        self.variational_mean = nn.Parameter(torch.zeros(n_units, n_inducing, dtype=dtype))
        eye = torch.eye(n_inducing, dtype=dtype)
        self.raw_variational_tril = nn.Parameter(
            eye.expand(n_units, -1, -1) * float(inverse_softplus(1.0))
        )
        if mean_weight is None:
            self.mean_weight = None
            self.mean_bias = nn.Parameter(torch.zeros(n_units, dtype=dtype))
        else:
            self.mean_weight = nn.Parameter(mean_weight.clone())
            self.mean_bias = nn.Parameter(torch.zeros(n_units, dtype=dtype))

    @property
    def n_units(self):
        return self.inducing_points.shape[0]

    @property
    def length_scale(self):
        return F.softplus(self.raw_length_scale)

    @property
    def output_scale(self):
        return F.softplus(self.raw_output_scale)

    def variational_tril(self):
        """``S``: strictly lower part of the raw parameter plus a softplus diagonal."""
        return positive_tril(self.raw_variational_tril)

    def kl_divergence(self, q, bound):
        """Per-unit KL terms of the whitened inducing values, shape ``(D,)``."""
        rule = kl_authors if bound == "authors" else kl_scaled
        return rule(self.variational_mean, self.variational_tril(), q)

    def prior_mean(self, H):
        """Mean function at ``H`` of shape (S, B, Q): (S, B, D)."""
        if self.mean_weight is None:
            return self.mean_bias.expand(H.shape[:-1] + (self.n_units,))
        return H @ self.mean_weight + self.mean_bias

    def inducing_cholesky(self, jitter):
        """Lower factors of ``K_ZZ + jitter * output_scale * I``, or None if one fails."""
        scale = self.output_scale
        Z = self.inducing_points
        K = unit_stationary_kernel(Z, Z, self.length_scale, scale, self.kernel)
        eye = torch.eye(K.shape[-1], dtype=K.dtype, device=K.device)
        return try_cholesky(K + (jitter * scale)[:, None, None] * eye)

    def _projections(self, H, whitening):
        # A = L^{-1} K_ZH of shape (D, M, n) for the rows of H.  The explicit triangular
        # inverse (computed once per pass by DeepQEPModule.inducing_whitening) makes this a
        # batched product, about twice as fast as a triangular solve forward and backward.
        K_zh = unit_stationary_kernel(
            self.inducing_points, H, self.length_scale, self.output_scale, self.kernel
        )
        return whitening @ K_zh

    def marginals(self, H, whitening, min_variance):
        """Location and scale of each unit's marginal at each row.

        With ``A = L^{-1} K_ZH`` and ``Lambda = S S^T - I``: ``v = k(h, h) + sum(A * Lambda A)``
        and the location ``A^T m``, as two products (one product with ``[Lambda; m^T]``
        would cost a zero-filled copy of its whole output for each slice in the backward
        pass: 10-20 % of a default fit).

        Parameters
        ----------
        H : Tensor of shape (S, B, Q)
        whitening : Tensor of shape (D, M, M)
            ``L^{-1}``, the inverse Cholesky factors of ``K_ZZ`` (see
            :meth:`DeepQEPModule.inducing_whitening`).
        min_variance : float
            Floor of the returned scale ``v``.

        Returns
        -------
        mean, var : Tensor of shape (S, B, D)
        """
        A = self._projections(H.reshape(-1, H.shape[-1]), whitening)  # (D, M, S*B)
        S = self.variational_tril()
        eye = torch.eye(S.shape[-1], dtype=S.dtype, device=S.device)
        product = (S @ S.transpose(-1, -2) - eye) @ A
        mean = (self.variational_mean.unsqueeze(-2) @ A).squeeze(-2)
        var = self.output_scale[:, None] + (A * product).sum(-2)
        shape = H.shape[:-1] + (self.n_units,)
        mean = mean.transpose(0, 1).reshape(shape) + self.prior_mean(H)
        var = var.transpose(0, 1).reshape(shape).clamp_min(min_variance)
        return mean, var

    def joint(self, H, whitening):
        """Joint location ``(S, D, B)`` and scale matrix ``(S, D, B, B)`` over the rows of
        each sample of ``H`` (for ``sample_y``)."""
        Hd = H.unsqueeze(1)  # (S, 1, B, Q): broadcast over units
        K_hh = unit_stationary_kernel(Hd, Hd, self.length_scale, self.output_scale, self.kernel)
        A = self._projections(Hd, whitening)  # (S, D, M, B)
        SA = self.variational_tril().transpose(-1, -2) @ A
        cov = K_hh - A.transpose(-1, -2) @ A + SA.transpose(-1, -2) @ SA
        mean = (self.variational_mean.unsqueeze(-2) @ A).squeeze(-2)
        return mean + self.prior_mean(H).transpose(-1, -2), cov


class DeepQEPModule(nn.Module):
    """A stack of :class:`QEPLayer` trained by doubly-stochastic variational inference.

    Hidden layers pass Monte-Carlo draws ``h = mu + sqrt(v) * eps`` on, with standard
    univariate q-exponential ``eps`` (divided by ``sqrt(c_q)`` when ``bound="scaled"``,
    so that the draws have variance ``v``); the last layer returns ``(mu, v)``.

    Parameters
    ----------
    layers : list of QEPLayer
    q : float
    bound : {"authors", "scaled"}
    n_mc_samples : int
        Draws ``S`` pushed through the hidden layers in training.
    jitter : float
        Relative jitter of the inducing kernel matrices (escalated on failure).
    min_variance : float
        Floor of every marginal scale.
    """

    def __init__(self, layers, q, bound, n_mc_samples, jitter, min_variance):
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.q = float(q)
        self.bound = bound
        self.n_mc_samples = int(n_mc_samples)
        self.jitter = float(jitter)
        self.min_variance = float(min_variance)

    @property
    def draw_scale(self):
        """Factor on ``sqrt(v) * eps``: 1 (authors' draws, variance ``c_q v``) or
        ``1 / sqrt(c_q)`` (scaled: variance ``v``)."""
        if self.bound == "scaled":
            return univariate_variance_factor(self.q) ** -0.5
        return 1.0

    @property
    def latent_variance_factor(self):
        """Variance of a latent marginal per unit of scale ``v`` (``c_q`` or 1)."""
        return univariate_variance_factor(self.q) if self.bound == "authors" else 1.0

    def inducing_whitening(self, escalate=True):
        """``L^{-1}`` for every layer, ``L L^T = K_ZZ + jitter``: the map to whitened
        inducing values, computed once per pass and shared by all rows and paths.

        When a factorisation fails and ``escalate`` is True (training), the jitter is
        raised tenfold, at most three times, with a warning; the raised jitter is kept.

        Raises
        ------
        NotPositiveDefiniteError
            When the largest jitter still fails (or at once when ``escalate`` is False).
        """
        for attempt in range(_JITTER_RETRIES + 1):
            factors = [layer.inducing_cholesky(self.jitter) for layer in self.layers]
            if all(factor is not None for factor in factors):
                return [lower_inverse(factor) for factor in factors]
            if not escalate or attempt == _JITTER_RETRIES:
                break
            self.jitter *= 10.0
            warnings.warn(
                "An inducing kernel matrix was not numerically positive definite; "
                f"raised the jitter to {self.jitter:.3g} (relative to the output scale).",
                UserWarning,
                stacklevel=2,
            )
        raise NotPositiveDefiniteError(
            "An inducing kernel matrix is not positive definite even with a jitter of "
            f"{self.jitter:.3g} times the output scale: {_ADVICE}."
        )

    def kl_divergence(self):
        """Sum of the KL terms of every unit of every layer."""
        return sum(layer.kl_divergence(self.q, self.bound).sum() for layer in self.layers)

    def propagate(self, X, hidden_draws, whitening=None):
        """Push ``X`` of shape (B, Q) through the layers.

        ``hidden_draws(layer_index, shape)`` returns the standard draws of one hidden
        layer for marginals of ``shape`` = (S, B, D); training draws them per row,
        prediction shares them across rows.  The first layer is evaluated once for all
        samples (its input is the same in every sample).

        Returns
        -------
        mean, var : Tensor of shape (S, B, D_L), or (1, B, D_L) without hidden layers
        """
        if whitening is None:
            whitening = self.inducing_whitening(escalate=self.training)
        H = X.unsqueeze(0)
        for index, (layer, inverse) in enumerate(zip(self.layers[:-1], whitening)):
            mean, var = layer.marginals(H, inverse, self.min_variance)
            eps = hidden_draws(index, mean.shape)
            H = mean + var.sqrt() * (self.draw_scale * eps)
        return self.layers[-1].marginals(H, whitening[-1], self.min_variance)

    def forward(self, X):
        """Training pass: fresh per-row draws from torch's (fenced) global generator."""
        samples = self.n_mc_samples

        def per_row(index, shape):
            shape = (samples,) + tuple(shape[1:])
            return standard_univariate_draws(shape, self.q, dtype=X.dtype, device=X.device)

        return self.propagate(X, per_row)


def pca_directions(H, n_components):
    """Top right-singular directions of the centred rows of ``H``: shape (Q, n_components)."""
    centred = H - H.mean(0)
    _, _, vh = torch.linalg.svd(centred, full_matrices=False)
    return vh[:n_components].T.contiguous()


def initial_mean_weight(H, n_units, generator):
    """Initial weights of a hidden layer's linear mean: the top principal directions of its
    inputs when ``n_units <= Q`` (Salimbeni & Deisenroth, 2017), random otherwise."""
    q = H.shape[1]
    if n_units <= min(q, H.shape[0]):
        return pca_directions(H, n_units)
    weight = torch.randn(q, n_units, generator=generator, dtype=torch.float64)
    return (weight / math.sqrt(q)).to(H.dtype)
