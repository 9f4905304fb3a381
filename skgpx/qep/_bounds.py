"""The terms of the deep Q-EP training objective (Chang et al., Sec. 4 and App. A).

* :func:`expected_log_likelihood` is the per-observation Jensen term: the authors'
  code evaluates the univariate q-ED log-density at the expected quadratic form.
* :func:`kl_authors` and :func:`kl_scaled` are the two per-unit KL terms of the
  whitened inducing values (``bound="authors"`` and ``bound="scaled"``).
* :func:`dirichlet_targets` turns labels into the regression targets and fixed
  heteroscedastic noise of the Dirichlet-based classification likelihood.
"""

import math

import torch

from ._distribution import expected_log_chi2, variance_factor

__all__ = ["dirichlet_targets", "expected_log_likelihood", "kl_authors", "kl_scaled"]


def expected_log_likelihood(y, mean, var, noise, q):
    """Jensen-bounded expected log-likelihood of ``y`` under ``q-ED_1(f, sigma^2)``.

    .. math::

        \\ell_q = \\log\\frac q2 - \\frac12\\log(2\\pi\\sigma^2)
                  + \\frac12\\Big(\\frac q2 - 1\\Big)\\log\\bar r - \\frac12\\bar r^{q/2},
        \\qquad \\bar r = \\frac{(y - \\mu)^2 + v}{\\sigma^2},

    the log-density at the mean quadratic form ``r_bar = E[(y - f)^2] / sigma^2`` for
    ``f`` with mean ``mu`` and second central moment ``v``.  ``phi(r)`` is convex for
    ``q <= 2``, so this lower-bounds ``E[log p(y | f)]``; at ``q = 2`` it is the exact
    Gaussian expectation.

    Parameters
    ----------
    y, mean, var : Tensor
        Broadcastable targets, latent means and latent variances.
    noise : Tensor
        Noise scale ``sigma^2`` (broadcastable).
    q : float
        The power.

    Notes
    -----
    For ``q < 2`` the ``log r_bar`` term rewards ``r_bar -> 0`` without limit; callers
    keep ``var >= v_min > 0`` so that ``r_bar >= v_min / sigma^2``.
    """
    ratio = ((y - mean).pow(2) + var) / noise
    out = -0.5 * torch.log(2.0 * math.pi * noise)
    if q == 2:
        return out - 0.5 * ratio
    log_ratio = ratio.log()
    return out + math.log(q / 2.0) + 0.5 * (q / 2.0 - 1.0) * log_ratio - 0.5 * torch.exp(
        0.5 * q * log_ratio
    )


def _trace_and_logdet(mean, scale_tril):
    # T = |m|^2 + |S|_F^2 and log|S S^T| = 2 sum log diag S, per unit (batch of units).
    trace = mean.pow(2).sum(-1) + scale_tril.pow(2).sum((-2, -1))
    logdet = 2.0 * scale_tril.diagonal(dim1=-2, dim2=-1).log().sum(-1)
    return trace, logdet


def kl_authors(mean, scale_tril, q):
    """The authors' KL term of whitened inducing values ``q(v) = q-ED(m, S S^T)``
    against ``q-ED(0, I)``, per unit.

    .. math::

        KL = \\tfrac12\\big(T^{q/2} - M^{q/2} - \\log|SS^T|\\big)
             - \\tfrac M2\\big(\\tfrac q2 - 1\\big)(\\log T - \\log M),
        \\qquad T = \\|m\\|^2 + \\|S\\|_F^2 .

    Zero at ``m = 0, S = I`` and the Gaussian KL at ``q = 2``; an approximation, not a
    bound, for ``q < 2``.  Shapes: ``mean (..., M)``, ``scale_tril (..., M, M)``.
    """
    m = mean.shape[-1]
    trace, logdet = _trace_and_logdet(mean, scale_tril)
    out = 0.5 * (trace.pow(q / 2.0) - m ** (q / 2.0) - logdet)
    if q != 2:
        out = out - 0.5 * m * (q / 2.0 - 1.0) * (trace.log() - math.log(m))
    return out


def kl_scaled(mean, scale_tril, q):
    """Self-consistent KL bound between scaled laws ``q-ED*(m, S S^T)`` and ``q-ED*(0, I)``.

    .. math::

        KL \\le \\tfrac12(\\kappa T)^{q/2} - \\tfrac M2 - \\tfrac12\\log|SS^T|
             + \\tfrac M2\\big(\\tfrac q2 - 1\\big)
               \\big[\\tfrac2q(\\psi(M/2) + \\log 2) - \\log(\\kappa T)\\big],

    with ``kappa = kappa_M``: exact entropy of the posterior and Jensen's inequality on
    the cross-entropy, an upper bound on the KL for ``q <= 2`` and the Gaussian KL at
    ``q = 2``.
    """
    m = mean.shape[-1]
    trace, logdet = _trace_and_logdet(mean, scale_tril)
    kappa = variance_factor(m, q)
    out = 0.5 * (kappa * trace).pow(q / 2.0) - 0.5 * m - 0.5 * logdet
    if q != 2:
        expected_log = (2.0 / q) * expected_log_chi2(m)
        out = out + 0.5 * m * (q / 2.0 - 1.0) * (expected_log - torch.log(kappa * trace))
    return out


def dirichlet_targets(labels, n_classes, alpha_epsilon, dtype=torch.float64):
    """Targets and fixed noise of the Dirichlet-based likelihood (Milios et al., 2018).

    Each label becomes concentrations ``alpha_c = alpha_epsilon + [y = c]``, matched
    by log-normals: noise ``s_c^2 = log(1 / alpha_c + 1)`` and target
    ``log alpha_c - s_c^2 / 2``.

    Returns
    -------
    targets, noise : Tensor of shape (n, n_classes)
    """
    alpha = torch.nn.functional.one_hot(labels.long(), n_classes).to(dtype) + alpha_epsilon
    noise = torch.log1p(1.0 / alpha)
    return torch.log(alpha) - 0.5 * noise, noise
