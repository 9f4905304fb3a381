"""The multivariate q-exponential distribution (q-ED) of Chang et al., Eq. 1.

For ``u`` in ``R^N`` with location ``mu``, positive-definite scale ``C`` and power
``q > 0``, write ``r = (u - mu)^T C^{-1} (u - mu)``.  Then

.. math::

    \\log p(u) = \\log\\frac{q}{2} - \\frac{N}{2}\\log 2\\pi - \\frac12\\log|C|
                 + \\frac{N}{2}\\Big(\\frac{q}{2} - 1\\Big)\\log r - \\frac12 r^{q/2}.

It has the stochastic representation ``u = mu + R L s`` with ``L L^T = C``, ``s``
uniform on the unit sphere of ``R^N`` and an independent radius ``R`` with
``R^q ~ chi^2(N)``.  At ``q = 2`` it is the Gaussian ``N(mu, C)``; otherwise its
covariance is ``kappa_N C`` with ``kappa_N = E[R^2] / N``.  The *scaled* q-ED*
(the finite-dimensional law of a q-exponential process) rescales ``C`` by
``1 / kappa_N`` so that its covariance is exactly ``C``.
"""

import math

import torch

from .._base import standard_normal

__all__ = [
    "MultivariateQExponential",
    "expected_log_chi2",
    "radius_moment",
    "standard_univariate_draws",
    "univariate_variance_factor",
    "variance_factor",
]


def _lgamma(x):
    return torch.lgamma(torch.as_tensor(x, dtype=torch.float64))


def radius_moment(k, dim, q):
    """``E[R^k] = 2^(k/q) Gamma(N/2 + k/q) / Gamma(N/2)`` for ``R^q ~ chi^2(N)``.

    Computed through ``lgamma``, so it stays finite for large ``dim`` (``Gamma``
    itself overflows near ``N = 340``).  Returns a Python float.
    """
    log_value = (k / q) * math.log(2.0) + _lgamma(dim / 2.0 + k / q) - _lgamma(dim / 2.0)
    return float(torch.exp(log_value))


def expected_log_chi2(dim):
    """``E[log X] = psi(N/2) + log 2`` for ``X ~ chi^2(N)`` (so ``E[log r] = (2/q)`` times it
    for the q-ED radius, ``r^(q/2) ~ chi^2(N)``)."""
    digamma = torch.special.digamma(torch.tensor(dim / 2.0, dtype=torch.float64))
    return float(digamma) + math.log(2.0)


def variance_factor(dim, q):
    """``kappa_N = E[R^2] / N``: the covariance of ``q-ED_N(0, C)`` is ``kappa_N C``.

    It is 1 at ``q = 2`` and ``N + 2`` at ``q = 1``.
    """
    return radius_moment(2.0, dim, q) / dim


def univariate_variance_factor(q):
    """``c_q = kappa_1 = 2^(2/q) Gamma(1/2 + 2/q) / Gamma(1/2)``: the variance of a
    standard univariate q-exponential draw (``c_1 = 3``, ``c_2 = 1``)."""
    return variance_factor(1, q)


def standard_univariate_draws(shape, q, *, generator=None, dtype=torch.float64, device="cpu"):
    """Standard univariate q-exponential draws ``sign(z) |z|^(2/q)``, ``z ~ N(0, 1)``.

    Their law is ``q-ED_1(0, 1)``: variance ``c_q``.  Written with ``sign`` rather than
    ``z |z|^(2/q - 1)``, which is ``0 * inf`` at ``z = 0`` for ``q > 2``.  Scaling by a
    standard deviation gives a reparameterised draw (differentiable in location and scale).
    """
    z = standard_normal(shape, generator, dtype, device)
    if q == 2:
        return z
    return torch.sign(z) * z.abs() ** (2.0 / q)


class MultivariateQExponential:
    """Multivariate q-exponential distribution ``q-ED_N(loc, C)`` (batched).

    Parameters
    ----------
    loc : Tensor of shape (..., N)
        Location ``mu`` (the mean).
    covariance_matrix : Tensor of shape (..., N, N), optional
        Scale matrix ``C`` (positive definite).  Give it or ``scale_tril``.
    scale_tril : Tensor of shape (..., N, N), optional
        Lower Cholesky factor ``L`` of ``C``.
    power : float, default=2.0
        The power ``q > 0``; ``q = 2`` is the Gaussian.
    scaled : bool, default=False
        If True, the scaled law ``q-ED*_N(loc, C) = q-ED_N(loc, C / kappa_N)``, whose
        covariance is exactly ``C``.

    Examples
    --------
    >>> import torch
    >>> from skgpx.qep import MultivariateQExponential
    >>> dist = MultivariateQExponential(torch.zeros(3, dtype=torch.float64),
    ...                                 torch.eye(3, dtype=torch.float64), power=1.0)
    >>> dist.covariance_matrix.diagonal().tolist()  # kappa_3 = 5 for q = 1
    [5.0, 5.0, 5.0]
    """

    def __init__(self, loc, covariance_matrix=None, *, scale_tril=None, power=2.0, scaled=False):
        if (covariance_matrix is None) == (scale_tril is None):
            raise ValueError("Give exactly one of covariance_matrix and scale_tril.")
        if not power > 0:
            raise ValueError(f"power={power!r} must be > 0.")
        if scale_tril is None:
            scale_tril = torch.linalg.cholesky(covariance_matrix)
        self.loc = loc
        self.power = float(power)
        self.dim = loc.shape[-1]
        self.scaled = bool(scaled)
        # q-ED*(mu, C) is q-ED(mu, C / kappa): keep the factor of the *scale* matrix.
        self._shrink = variance_factor(self.dim, self.power) ** -0.5 if scaled else 1.0
        self.scale_tril = scale_tril * self._shrink

    @property
    def mean(self):
        return self.loc

    @property
    def covariance_matrix(self):
        """``kappa_N C`` for the plain law, ``C`` for the scaled one."""
        scale = self.scale_tril @ self.scale_tril.transpose(-1, -2)
        return variance_factor(self.dim, self.power) * scale

    def quadratic_form(self, value):
        """``r = (u - mu)^T C^{-1} (u - mu)`` under the scale matrix in use."""
        diff = (value - self.loc).unsqueeze(-1)
        tril = self.scale_tril.expand(diff.shape[:-2] + self.scale_tril.shape[-2:])
        white = torch.linalg.solve_triangular(tril, diff, upper=False)
        return white.squeeze(-1).pow(2).sum(-1)

    def _log_det_scale(self):
        return 2.0 * self.scale_tril.diagonal(dim1=-2, dim2=-1).log().sum(-1)

    def log_prob(self, value):
        """Log-density of Eq. 1 (infinite at ``value = loc`` when ``q < 2``)."""
        n, q = self.dim, self.power
        r = self.quadratic_form(value)
        out = (
            math.log(q / 2.0)
            - 0.5 * n * math.log(2.0 * math.pi)
            - 0.5 * self._log_det_scale()
            - 0.5 * r.pow(q / 2.0)
        )
        if q != 2:
            out = out + 0.5 * n * (q / 2.0 - 1.0) * r.log()
        return out

    def entropy(self):
        """``1/2 log|C| + N/2 log 2pi - log(q/2) - N/2 (1 - 2/q)(psi(N/2) + log 2) + N/2``."""
        n, q = self.dim, self.power
        constant = (
            0.5 * n * math.log(2.0 * math.pi)
            - math.log(q / 2.0)
            - 0.5 * n * (1.0 - 2.0 / q) * expected_log_chi2(n)
            + 0.5 * n
        )
        return 0.5 * self._log_det_scale() + constant

    def rsample(self, sample_shape=(), generator=None):
        """Reparameterised draws ``loc + R L s`` of shape ``sample_shape + batch + (N,)``.

        ``s = z / |z|`` and ``R = |w|^(2/q)`` with independent ``z, w ~ N(0, I_N)``
        (so that ``R^q = |w|^2 ~ chi^2(N)``).
        """
        shape = torch.Size(sample_shape) + self.loc.shape
        # a CPU generator gives the same numbers for a CUDA distribution
        z, w = (standard_normal(shape, generator, self.loc.dtype, self.loc.device)
                for _ in range(2))
        radius = w.pow(2).sum(-1, keepdim=True).pow(1.0 / self.power)
        base = radius * z / z.norm(dim=-1, keepdim=True)
        return self.loc + (self.scale_tril @ base.unsqueeze(-1)).squeeze(-1)

    def sample(self, sample_shape=(), generator=None):
        with torch.no_grad():
            return self.rsample(sample_shape, generator)
