"""The fitted SVGP's ``q(u)`` as a posterior for pathwise draws."""

import torch

from ...kernels import split_white_noise
from ...linalg import solve_lower
from .._draws._posterior import TargetStreams


class SVGPPosterior:
    """The fitted ``q(u)`` as a ``_draws._posterior.Posterior`` for
    :func:`_draws._posterior.draw_functions`.

    A draw is ``f_s(.) + k(., Z) v_s`` with ``u_s = L_z (m + R xi_s)`` and
    ``v_s = K_zz^{-1} (u_s - f_s(Z))`` (Wilson et al., ICML 2020, eq. 13), one latent per
    target column; ``xi`` comes from the per-target streams.  ``group`` picks the
    latents of one group (its kernel, Z and ``L_z``).
    """

    def __init__(self, mode, shift, n_features_in, squeeze, group=0):
        cols = mode.latents[group]
        if group == 0:  # the mode's own kernel: the classifier may swap it on a copy
            self.kernel, self.theta, kernel_ = mode.torch_kernel, mode.theta, mode.kernel_
        else:
            self.kernel, self.theta = mode.torch_kernels[group], mode.thetas[group]
            kernel_ = mode.kernels_[group]
        signal, _ = split_white_noise(kernel_)
        self.signal_kernel = signal
        self.shift, self.n_features_in, self.squeeze = shift, n_features_in, squeeze
        self.n_targets = cols.stop - cols.start
        dtype, device = self.theta.dtype, self.theta.device
        self.y_mean = torch.zeros(self.n_targets, dtype=dtype, device=device)
        self.y_std = torch.ones(self.n_targets, dtype=dtype, device=device)
        self.centers, self.fitted = mode.Zs[group], True
        self._L, self._mean, self._root = mode.Ls[group], mode.q.mean[:, cols], mode.q.root[cols]

    def streams(self, generator):
        return TargetStreams(generator, self.n_targets, self.theta.dtype, self.theta.device)

    def update(self, prior_at_centers, streams):
        """Update weights ``v`` (m, S, T) from the prior paths at Z (m, S, T)."""
        xi = streams.normal(prior_at_centers.shape[:-1])
        m, S, T = xi.shape
        whitened = torch.einsum("tij,jst->ist", self._root, xi) + self._mean[:, None, :]
        inner = whitened - solve_lower(self._L, prior_at_centers.reshape(m, S * T)).reshape(
            m, S, T)
        out = torch.linalg.solve_triangular(self._L.T, inner.reshape(m, S * T), upper=True)
        return out.reshape(m, S, T)


__all__ = ["SVGPPosterior"]
