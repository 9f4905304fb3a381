"""Closed-form cross-covariance blocks k(Z, X) of stationary kernels."""

import math

import torch

from ..kernels import squared_distance_profile_
from ..linalg import matmul


# Inducing inputs within this many length scales of their mean: cross-kernel blocks for
# draws by the expansion (see StationaryCross.block).
_EXPANSION_RADIUS = 8.0


# largest |z'|^2 of the inducing inputs (z' = (z - c) / l) for which StationaryCross forms
# r^2 by its expansion: the rounding, ~eps |z'|^2, stays below ~1e-9 in float64
MAX_EXPANSION_NORM = 1e6


class StationaryCross:
    r"""Cross-kernel blocks ``k(Z, X_c) = s kappa(r^2)`` of a stationary signal by one
    matrix product, with the pullback of a weight ``G`` on ``r^2`` in closed form.

    For ``[ConstantKernel *] RBF | Matern(3/2, 5/2)`` (``TorchKernel.stationary_signal``):
    ``r^2 = |z'|^2 + |x'|^2 - 2 z' . x'`` with ``z' = (z - c) / l`` (centred, so the
    expansion's rounding, ``eps |x'|^2``, stays small).  Both norms ride along in the
    product as two extra columns, and for the RBF so do ``log s`` and an optional
    per-column log weight, so that one product and one ``exp`` give the weighted block
    ``s exp(-r^2/2 + log w_j)``.  With ``G = H * s kappa'(r^2)``

    .. math::

        \frac{\partial}{\partial l_d} = -\frac{2}{l_d}\Big(\sum_i z'^2_{id} G_{i.}
          + \sum_j x'^2_{jd} G_{.j} - 2 \sum_i z'_{id} (G X')_{id}\Big), \qquad
        \frac{\partial}{\partial z_i} = \frac{2}{l}\big(z'_i G_{i.} - (G X')_i\big),

    which costs one ``m x b x d`` product instead of autograd through pairwise
    differences.  ``kappa'`` is taken with respect to ``r^2``, finite at ``r = 0``.
    """

    def __init__(self, spec, theta, Z):
        self.profile, scale, length_scale = spec
        with torch.no_grad():
            self.scale = float(scale(theta))
            self.length_scale = length_scale(theta).detach().to(Z.dtype)
            self.Z = Z.detach()
            self.center = Z.mean(0)
            self.Zs = (Z - self.center) / self.length_scale
            self.z_norm = (self.Zs * self.Zs).sum(1)
            self.compact = bool(self.z_norm.max() <= _EXPANSION_RADIUS**2)  # see block()
            ones = torch.ones_like(self.z_norm)[:, None]
            if self.profile == "rbf":  # log(s kappa) = [z', log s - |z'|^2/2, 1] . [x', 1, c]
                log_scale = math.log(self.scale) if self.scale > 0 else -math.inf
                self.Z_aug = torch.cat([self.Zs, (log_scale - 0.5 * self.z_norm)[:, None],
                                        ones], 1)
            else:  # r^2 = [z', |z'|^2, 1] . [-2 x', 1, |x'|^2]
                self.Z_aug = torch.cat([self.Zs, self.z_norm[:, None], ones], 1)
            self.log_scale = math.log(self.scale) if self.scale > 0 else -math.inf
            # the expansion rounds r^2 to about eps (|z'|^2 + |x'|^2), and the entries that
            # matter (x near some z) have |x'| ~ |z'|: beyond MAX_EXPANSION_NORM (Z over 1e3
            # length scales from its centre) differences are taken exactly instead (at
            # 1e16, inputs times 1e8 against unit length scales, k(z, z) came out inf)
            self.exact = bool(self.z_norm.numel()) and float(
                self.z_norm.max()) > MAX_EXPANSION_NORM

    def standardised(self, X):
        return (X - self.center) / self.length_scale

    def _exponent(self, Xs, log_weight=None, out=None):
        """``Z_aug X_aug^T``: the RBF's ``log(s kappa) + log w`` or the Matern's ``r^2``."""
        if self.exact:
            E = torch.cdist(self.Zs, Xs, compute_mode="donot_use_mm_for_euclid_dist")
            E = E.square_()
            if self.profile == "rbf":
                E.mul_(-0.5).add_(self.log_scale)
                if log_weight is not None:
                    E.add_(log_weight)
            return E if out is None else out.copy_(E)
        x_norm = (Xs * Xs).sum(1, keepdim=True)
        ones = torch.ones_like(x_norm)
        if self.profile == "rbf":
            last = -0.5 * x_norm if log_weight is None else log_weight[:, None] - 0.5 * x_norm
            X_aug = torch.cat([Xs, ones, last], 1)
        else:
            X_aug = torch.cat([-2.0 * Xs, ones, x_norm], 1)
        return torch.mm(self.Z_aug, X_aug.T, out=out)

    def weighted_block(self, Xs, log_weight=None, out=None):
        """``k(Z, X) diag(exp(log_weight))`` (m, b) from standardised rows; for the
        Matern profiles also ``s kappa'(r^2)`` (unweighted), else None."""
        E = self._exponent(Xs, log_weight, out)
        if self.profile == "rbf":
            return E.exp_(), None
        K, slope, factor = squared_distance_profile_(E, self.profile)  # E = r^2
        slope.mul_(factor * self.scale)
        K.mul_(self.scale)  # K is E's storage, so ``out`` when given
        if log_weight is not None:
            K.mul_(torch.exp(log_weight))
        return K, slope

    def block(self, X, out=None):
        """``k(Z, X)``: (m, b), formed in place (in ``out`` when given; no derivative terms).

        The expansion's rounding, ``eps (|z'|^2 + |x'|^2)`` in ``r^2``, is an error relative
        to ``k`` that the direct ``sum_d (x'_d - z'_d)^2`` (``eps r^2``) does not have.  For
        the pairs where ``k`` is not negligible, ``|x'| <= |z'| + 4``, so it is a few times
        the direct error while the inducing inputs lie within ``_EXPANSION_RADIUS`` length
        scales of their centre; past that (data spanning hundreds of length scales lost 4
        digits of ``k`` this way) the blocks are formed directly from differences in input
        units, at about 20x the cost of the product (d = 10).  Function draws evaluate
        here: their update weights can be large and cancel, which multiplies the error of
        ``k``.
        """
        if self.compact:
            return self.weighted_block(self.standardised(X), out=out)[0]
        # differences in input units first: standardising far-out points first rounds
        # both to eps |x'| before they cancel
        E = X.new_empty(self.Z.shape[0], X.shape[0]) if out is None else out
        step = torch.empty_like(E)
        for d, length in enumerate(self.length_scale.expand(X.shape[1]).tolist()):
            torch.sub(self.Z[:, d, None], X[None, :, d], out=step).div_(length)
            if d == 0:
                E.copy_(step).mul_(step)
            else:
                E.addcmul_(step, step)
        if self.profile == "rbf":
            return E.mul_(-0.5).exp_().mul_(self.scale)
        K, _, _ = squared_distance_profile_(E, self.profile)
        return K.mul_(self.scale)

    def pullback(self, GM, weight, Xs, GM_colsum):
        """Gradients of ``<G, r^2>`` for ``G = GM diag(weight)``: ``(d l, d Z)``.

        ``G`` is never formed: its row sums and ``G X'`` come from one product of ``GM``
        with ``[weight * X', weight]``, its column sums are ``weight * GM_colsum``.
        """
        if self.exact:  # sum_ij G_ij (z'_i - x'_j) and its square, feature by feature
            G = GM * weight
            spread, pull = Xs.new_empty(Xs.shape[1]), torch.empty_like(self.Zs)
            for d in range(Xs.shape[1]):
                D = self.Zs[:, d, None] - Xs[:, d]
                GD = G * D
                pull[:, d] = GD.sum(1)
                spread[d] = (GD * D).sum()
        else:
            both = matmul(GM, torch.cat([weight[:, None] * Xs, weight[:, None]], 1))
            GX, row = both[:, :-1], both[:, -1]
            col = weight * GM_colsum
            spread = (((self.Zs * self.Zs) * row[:, None]).sum(0)
                      + ((Xs * Xs) * col[:, None]).sum(0) - 2.0 * (self.Zs * GX).sum(0))
            pull = self.Zs * row[:, None] - GX
        d_length = -2.0 * spread / self.length_scale
        if self.length_scale.numel() == 1:
            d_length = d_length.sum().reshape(1)
        d_Z = 2.0 * pull / self.length_scale
        return d_length, d_Z


def stationary_cross(kernel, theta, Z):
    """The fast stationary cross-kernel of ``kernel`` at ``theta``, or None."""
    spec = kernel.stationary_signal()
    return None if spec is None else StationaryCross(spec, theta, Z)


__all__ = ["MAX_EXPANSION_NORM", "StationaryCross", "stationary_cross"]
