"""Laplace's method for binary Gaussian process classification, batched over problems.

Rasmussen and Williams (GPML, 2006): Algorithm 3.1 (the posterior mode by Newton's
method), 3.2 (predictions) and 5.1 (the gradient of the approximate log marginal
likelihood), written as scikit-learn's ``_BinaryGaussianProcessClassifierLaplace`` runs
them (same iteration, same stopping rule, same returned temporaries), in torch and for a
batch of ``C`` binary problems on the same inputs at once (one-vs-rest: one problem per
class, each with its own hyperparameters): every matrix is ``(C, n, n)`` and one batched
Cholesky factorises all of them.

For ``f`` the latent values at the training inputs, ``K`` the kernel matrix and
``W = -diag(d^2 log p(y | f) / df^2)``, each Newton step is

.. math::

    B = I + W^{1/2} K W^{1/2} = L L^T, \\quad
    b = W f + \\nabla \\log p(y | f), \\quad
    a = b - W^{1/2} B^{-1} W^{1/2} K b, \\quad f \\leftarrow K a,

and the approximate log marginal likelihood (GPML eq. 3.32) is
``-a^T f / 2 + log p(y | f) - sum log diag L``.
"""

import math
from dataclasses import dataclass

import numpy as np
import scipy.special
import torch
from scipy.linalg import get_blas_funcs, get_lapack_funcs

from ...linalg import jittered_cholesky
from .._likelihoods._classification import COEFS, LAMBDAS, LINKS, positive_probability


# Newton stops once the log marginal likelihood grows by less than this (scikit-learn's rule)
NEWTON_TOL = 1e-10


def link_derivatives(f, y, link, third=True):
    """``log p(y | f)`` per row, its first derivative ``g``, ``W = -g'`` and ``W'``
    (None unless ``third``).

    ``y`` holds 0/1 labels.  ``W' = dW/df = -d^3 log p / df^3`` enters Algorithm 5.1.

    Logit: ``g = y - pi``, ``W = pi (1 - pi)``, ``W' = W (1 - 2 pi)`` with ``pi = sigmoid(f)``.
    Probit: with ``s = 2y - 1``, ``z = s f`` and ``r = N(z) / Phi(z)``: ``g = s r``,
    ``W = r (z + r)``, ``W' = -s r ((z + r)(z + 2r) - 1)``.
    """
    s = 2.0 * y - 1.0
    z = s * f
    if link == "logit":
        pi = torch.sigmoid(f)
        W = pi * (1.0 - pi)
        # scikit-learn's log1p(exp(-z)), which overflows only beyond z < -50 (where it is -z)
        log_lik = -torch.nn.functional.softplus(-z, threshold=50.0)
        return log_lik, y - pi, W, (W * (1.0 - 2.0 * pi) if third else None)
    log_phi = torch.special.log_ndtr(z)
    r = torch.exp(-0.5 * z * z - 0.5 * math.log(2.0 * math.pi) - log_phi)
    zr = z + r
    return log_phi, s * r, r * zr, (-s * r * (zr * (z + 2.0 * r) - 1.0) if third else None)


@dataclass
class NewtonPosterior:
    """The Laplace approximation at the mode, per problem (leading axis ``C``).

    As scikit-learn keeps them, the temporaries are those of the last Newton step: ``g``,
    ``W_sr`` and ``L`` at the latent values before the step, ``a`` and ``f = K a`` after.
    """

    lml: torch.Tensor  # (C,)
    f: torch.Tensor  # (C, n) the mode (scikit-learn's f_cached)
    g: torch.Tensor  # (C, n) d log p / df (y - pi for the logit link)
    W: torch.Tensor  # (C, n)
    dW: torch.Tensor  # (C, n)
    W_sr: torch.Tensor  # (C, n)
    L: torch.Tensor  # (C, n, n) Cholesky factor of B
    a: torch.Tensor  # (C, n)
    n_iter: torch.Tensor  # (C,) Newton steps taken


# --------------------------------------------------------------- dense kernels
# On the CPU the factorisations go to scipy's LAPACK on the tensors' own memory (no copy):
# on one core, for n = 1347, its potrf, potri and trsm took 25, 47 and 73 ms against torch's
# (MKL) 45-58, 133 and 151 ms, and a Cholesky solve of one vector 1.3 ms against 5.7 ms
# (skgpx.linalg.gram routes products through numpy's BLAS for the same reason).


# the numpy paths below serve batches of at most this many matrix elements (iris,
# breast cancer); larger ones (digits' ten 1347 x 1347 problems) stay in torch, where the
# per-operation overhead is nothing beside the arithmetic
SMALL_MAX = 1 << 22


def _small_on_cpu(K, *tensors):
    """Whether the numpy path of a (C, n, n) batch ``K`` applies."""
    return K.numel() <= SMALL_MAX and on_lapack(K, *tensors)


def on_lapack(*tensors):
    return all(t.device.type == "cpu" and t.dtype in (torch.float32, torch.float64)
               and not t.requires_grad for t in tensors)


def _cholesky_(B):
    """Lower Cholesky factors of the batch ``B`` (C, n, n), overwriting ``B`` on the CPU
    (the factors are then a transposed view of ``B``: column-major, as LAPACK takes them);
    None where a factor does not exist (not positive definite)."""
    if not on_lapack(B) or not B.is_contiguous():
        L, info = torch.linalg.cholesky_ex(B)
        return None if bool((info != 0).any()) else L
    for matrix in B.numpy():
        # the row-major symmetric matrix read column-major is itself: LAPACK writes the
        # lower factor column-major, i.e. its transpose row-major
        (potrf,) = get_lapack_funcs(("potrf",), (matrix,))
        factor, info = potrf(matrix.T, lower=1, clean=1, overwrite_a=1)
        if info != 0:
            return None
        if not np.shares_memory(factor, matrix):
            matrix[...] = factor.T
    return B.transpose(-1, -2)


def cho_solve_vectors(L, v):
    """``(L L^T)^{-1} v`` for a batch of vectors ``v`` (C, n)."""
    x = torch.linalg.solve_triangular(L, v[:, :, None], upper=False)
    return torch.linalg.solve_triangular(L.transpose(-1, -2), x, upper=True)[:, :, 0]


def solve_lower(L, M):
    """``L^{-1} M`` for lower-triangular ``L`` (C, n, n) and ``M`` (C, n, m)."""
    if not on_lapack(L, M):
        return torch.linalg.solve_triangular(L, M, upper=False)
    out = torch.empty_like(M)
    M = M.contiguous()
    column_major = L.transpose(-1, -2).is_contiguous()
    for factor, rhs, dest in zip(L.numpy(), M.numpy(), out.numpy()):
        (trsm,) = get_blas_funcs(("trsm",), (factor,))
        # solve L X = M as X^T L^T = M^T, on the column-major views of the operands
        if column_major:
            dest[...] = trsm(1.0, factor, rhs.T, side=1, lower=1, trans_a=1).T
        else:  # row-major L is column-major L^T (upper)
            dest[...] = trsm(1.0, factor.T, rhs.T, side=1, lower=0, trans_a=0).T
    return out


def cho_inverse(L):
    """``(L L^T)^{-1}`` (C, n, n), symmetric, from lower factors ``L``."""
    if not on_lapack(L):
        return torch.cholesky_inverse(L)
    out = L.transpose(-1, -2).clone(memory_format=torch.contiguous_format)  # column-major L
    for matrix in out.numpy():
        (potri,) = get_lapack_funcs(("potri",), (matrix,))
        inverse, info = potri(matrix.T, lower=1, overwrite_c=1)
        if not np.shares_memory(inverse, matrix):
            matrix[...] = inverse.T
    # LAPACK filled the lower triangle (column-major): the row-major upper one
    upper = out.triu()
    return upper + upper.triu(1).transpose(-1, -2)


def _factor_B(K, W_sr, buffer):
    """Lower Cholesky factor of ``B = I + W^1/2 K W^1/2`` (eigenvalues >= 1 for a PSD K),
    formed in ``buffer`` (reused across Newton steps: fresh (C, n, n) blocks cost page
    faults)."""
    B = torch.mul(K, W_sr[:, :, None], out=buffer)
    B.mul_(W_sr[:, None, :])
    B.diagonal(dim1=-2, dim2=-1).add_(1.0)
    L = _cholesky_(B.clone() if not on_lapack(B) else B)
    if L is None:  # K itself far from PSD: jitter, or a clear error
        B = K * W_sr[:, :, None]
        B.mul_(W_sr[:, None, :])
        B.diagonal(dim1=-2, dim2=-1).add_(1.0)
        L, _ = jittered_cholesky(B, name="Laplace matrix B = I + W^1/2 K W^1/2",
                                 advice="check the kernel (it must be positive "
                                        "semi-definite) and its hyperparameters")
    return L


def posterior_mode(K, y, f0, link, max_iter):
    """Newton's method for the mode (GPML Algorithm 3.1), all problems at once.

    Each problem stops on scikit-learn's rule (the log marginal likelihood grew by less than
    :data:`NEWTON_TOL`) and returns the value before that last step, or after ``max_iter``
    steps; the finished problems leave the batch.

    Parameters
    ----------
    K : Tensor of shape (C, n, n)
    y : Tensor of shape (C, n)
        0/1 labels.
    f0 : Tensor of shape (C, n)
        Starting latent values (zeros, or the cached mode with ``warm_start``).
    link : {"logit", "probit"}
    max_iter : int

    Returns
    -------
    NewtonPosterior
    """
    if _small_on_cpu(K, y, f0) and K.is_contiguous():
        return _posterior_mode_numpy(K, y, f0, link, max_iter)
    return _posterior_mode_torch(K, y, f0, link, max_iter)


def _posterior_mode_torch(K, y, f0, link, max_iter):
    """:func:`posterior_mode` in torch (any device)."""
    C, n = y.shape
    factors = torch.empty_like(K)  # L^T row-major (L column-major) of each problem
    out = NewtonPosterior(
        lml=torch.empty(C, dtype=K.dtype, device=K.device), f=torch.empty_like(y),
        g=torch.empty_like(y), W=torch.empty_like(y), dW=torch.empty_like(y),
        W_sr=torch.empty_like(y), L=factors.transpose(-1, -2), a=torch.empty_like(y),
        n_iter=torch.zeros(C, dtype=torch.long))
    buffer = torch.empty_like(K)
    members = list(range(C))  # the problems still iterating
    Ka, ya, f = K, y, f0
    previous = torch.full((C,), -math.inf, dtype=K.dtype, device=K.device)
    _, g_next, W_next, _ = link_derivatives(f, ya, link, third=False)
    for step in range(max_iter):
        g, W, f_before = g_next, W_next, f
        W_sr = torch.sqrt(W)
        L = _factor_B(Ka, W_sr, buffer[: len(members)])
        b = W * f + g
        Kb = torch.bmm(Ka, b[:, :, None])
        a = b - W_sr * cho_solve_vectors(L, W_sr * Kb[:, :, 0])
        f = torch.bmm(Ka, a[:, :, None])[:, :, 0]
        # the derivatives at the new f serve this step's lml and the next step
        log_lik, g_next, W_next, _ = link_derivatives(f, ya, link, third=False)
        lml = (-0.5 * (a * f).sum(-1) + log_lik.sum(-1)
               - torch.log(L.diagonal(dim1=-2, dim2=-1)).sum(-1))
        if not bool(torch.isfinite(lml).all()):
            raise FloatingPointError(
                "The Laplace approximation's log marginal likelihood is not finite at Newton "
                f"step {step + 1}; check the kernel hyperparameters (bounds) and the inputs "
                "for NaN or huge values.")
        going = (lml - previous) >= NEWTON_TOL
        previous = torch.where(going, lml, previous)
        last = step == max_iter - 1
        if bool(going.all()) and not last:
            continue
        # write out the problems that stop here: this step's temporaries, and the value
        # before it (after it when the step limit is reached), as scikit-learn returns them
        stop = torch.ones_like(going) if last else ~going
        rows = stop.nonzero()[:, 0]
        index = torch.as_tensor([members[i] for i in rows.tolist()], device=K.device)
        for name, value in (("lml", previous), ("f", f), ("g", g), ("W", W),
                            ("W_sr", W_sr), ("a", a)):
            getattr(out, name)[index] = value[rows]
        out.dW[index] = link_derivatives(f_before[rows], ya[rows], link)[3]
        factors[index] = L.transpose(-1, -2)[rows]
        out.n_iter[index.cpu()] = step + 1
        keep = (~stop).nonzero()[:, 0]
        if keep.numel() == 0:
            break
        members = [members[i] for i in keep.tolist()]
        Ka, ya, f, previous = Ka[keep], ya[keep], f[keep], previous[keep]
        g_next, W_next = g_next[keep], W_next[keep]
    return out


# ------------------------------------------------- the Newton search on the CPU, in numpy
# For the small n where scikit-learn's GPC is usable (iris: n = 112), a Newton step is some
# 40 elementwise operations on (C, n) arrays and one Cholesky per problem: torch's
# per-operation dispatch (5-10 us) cost more than the arithmetic, numpy's (~1 us) does not.
# The steps are those of :func:`posterior_mode` on the tensors' own memory.


def _link_derivatives_numpy(f, y, s, link):
    """``log p(y | f)``, ``g`` and ``W`` of :func:`link_derivatives`, in numpy
    (``s = 2 y - 1``)."""
    if link == "logit":
        pi = scipy.special.expit(f)
        # softplus(-z) with torch's threshold 50: log1p(exp(-z)), or -z beyond it
        t = s * f
        np.negative(t, out=t)
        log_lik = np.log1p(np.exp(np.minimum(t, 50.0)))
        if t.max(initial=-np.inf) > 50.0:
            log_lik = np.where(t > 50.0, t, log_lik)
        np.negative(log_lik, out=log_lik)
        W = 1.0 - pi
        W *= pi
        return log_lik, y - pi, W
    z = s * f
    log_phi = scipy.special.log_ndtr(z)
    r = np.exp(-0.5 * z * z - 0.5 * math.log(2.0 * math.pi) - log_phi)
    return log_phi, s * r, r * (z + r)


def _posterior_mode_numpy(K_t, y_t, f0_t, link, max_iter):
    """:func:`posterior_mode` for contiguous CPU tensors, in numpy and LAPACK."""
    C, n = y_t.shape
    K, y = K_t.numpy(), y_t.detach().numpy()
    factors_t = torch.empty_like(K_t)  # L^T row-major (L column-major) of each problem
    factors = factors_t.numpy()
    out = {name: np.empty((C, n), dtype=K.dtype) for name in ("f", "g", "W", "W_sr", "a")}
    out_lml, out_iter = np.empty(C, dtype=K.dtype), np.zeros(C, dtype=np.int64)
    out_dW = torch.empty_like(y_t)
    buffer = np.empty_like(K)
    potrf, potrs = get_lapack_funcs(("potrf", "potrs"), (K,))
    members = np.arange(C)  # the problems still iterating
    Ka, ya, f = K, y, f0_t.detach().numpy()
    sa = 2.0 * ya - 1.0
    previous = np.full(C, -np.inf, dtype=K.dtype)
    _, g_next, W_next = _link_derivatives_numpy(f, ya, sa, link)
    for step in range(max_iter):
        g, W, f_before = g_next, W_next, f
        W_sr = np.sqrt(W)
        B = np.multiply(Ka, W_sr[:, :, None], out=buffer[: len(members)])
        B *= W_sr[:, None, :]
        diagonals = B.reshape(len(members), -1)[:, :: n + 1]
        diagonals += 1.0
        b = W * f
        b += g
        v = np.matmul(Ka, b[:, :, None])[:, :, 0]
        v *= W_sr
        for i, matrix in enumerate(B):
            # the row-major symmetric matrix read column-major is itself: LAPACK writes
            # the lower factor column-major (its transpose row-major) over its triangle
            factor, info = potrf(matrix.T, lower=1, overwrite_a=1)
            if info != 0:  # K itself far from PSD: the torch path jitters or explains
                return _posterior_mode_torch(K_t, y_t, f0_t, link, max_iter)
            if not np.shares_memory(factor, matrix):
                matrix[...] = factor.T
            v[i], info = potrs(matrix.T, v[i], lower=1)
        v *= W_sr
        a = np.subtract(b, v, out=v)
        f = np.matmul(Ka, a[:, :, None])[:, :, 0]
        # the derivatives at the new f serve this step's lml and the next step
        log_lik, g_next, W_next = _link_derivatives_numpy(f, ya, sa, link)
        lml = (a * f).sum(-1)
        lml *= -0.5
        lml += log_lik.sum(-1)
        lml -= np.log(diagonals).sum(-1)
        if not np.isfinite(lml).all():
            raise FloatingPointError(
                "The Laplace approximation's log marginal likelihood is not finite at Newton "
                f"step {step + 1}; check the kernel hyperparameters (bounds) and the inputs "
                "for NaN or huge values.")
        going = (lml - previous) >= NEWTON_TOL
        last = step == max_iter - 1
        if going.all() and not last:
            previous = lml
            continue
        previous = np.where(going, lml, previous)
        # write out the problems that stop here: this step's temporaries, and the value
        # before it (after it when the step limit is reached), as scikit-learn returns them
        rows = np.arange(len(members)) if last else np.flatnonzero(~going)
        index = members[rows]
        for name, value in (("f", f), ("g", g), ("W", W), ("W_sr", W_sr), ("a", a)):
            out[name][index] = value[rows]
        out_lml[index] = previous[rows]
        factors[index] = np.triu(B[rows])  # L^T row-major, without B's other triangle
        out_iter[index] = step + 1
        if link == "logit":  # W' = W (1 - 2 pi) at the latent values before the step
            out_dW.numpy()[index] = W[rows] * (1.0 - 2.0 * scipy.special.expit(f_before[rows]))
        else:
            out_dW[torch.from_numpy(index)] = link_derivatives(
                torch.from_numpy(f_before[rows]), torch.from_numpy(ya[rows]), link)[3]
        keep = np.flatnonzero(going) if not last else rows[:0]
        if keep.size == 0:
            break
        members = members[keep]
        Ka, ya, sa, f, previous = Ka[keep], ya[keep], sa[keep], f[keep], previous[keep]
        g_next, W_next = g_next[keep], W_next[keep]
    t = {name: torch.from_numpy(value) for name, value in out.items()}
    return NewtonPosterior(lml=torch.from_numpy(out_lml), f=t["f"], g=t["g"], W=t["W"], dW=out_dW,
                           W_sr=t["W_sr"], L=factors_t.transpose(-1, -2), a=t["a"],
                           n_iter=torch.from_numpy(out_iter))


def lml_gradient_weights(mode, K, y):
    """``G`` with ``d lml / d theta_j = sum(G * dK / d theta_j)`` (GPML Algorithm 5.1).

    Algorithm 5.1's per-parameter lines are linear in ``C_j = dK/dtheta_j``:
    ``s1 = a^T C a / 2 - tr(R C) / 2`` and ``s2^T s3 = u^T C g`` with
    ``u = s2 - R K s2``, so ``G = a a^T / 2 - R / 2 + u g^T`` and one backward pass through
    the kernel gives the whole gradient (no ``(n, n, p)`` tensor of kernel gradients).
    """
    W_sr, L, a, g = mode.W_sr, mode.L, mode.a, mode.g
    if _small_on_cpu(K, L, W_sr, a, g, mode.dW):
        return _lml_gradient_weights_numpy(mode, K)
    R = cho_inverse(L)  # B^-1, then R = W^1/2 B^-1 W^1/2 (line 7)
    R.mul_(W_sr[:, :, None]).mul_(W_sr[:, None, :])
    Cm = solve_lower(L, W_sr[:, :, None] * K)  # line 8
    var = K.diagonal(dim1=-2, dim2=-1) - (Cm * Cm).sum(-2)
    del Cm
    s2 = -0.5 * var * mode.dW  # line 9, in scikit-learn's sign convention
    u = s2 - torch.bmm(R, torch.bmm(K, s2[:, :, None]))[:, :, 0]
    G = R.mul_(-0.5)
    G.baddbmm_(a[:, :, None], a[:, None, :], alpha=0.5)
    G.baddbmm_(u[:, :, None], g[:, None, :])
    return G


def _lml_gradient_weights_numpy(mode, K):
    """:func:`lml_gradient_weights` on the CPU, problem by problem in numpy and LAPACK."""
    W_sr, a, g, dW = (t.numpy() for t in (mode.W_sr, mode.a, mode.g, mode.dW))
    factors, K = mode.L.numpy(), K.numpy()
    out = np.empty_like(K)
    potri, = get_lapack_funcs(("potri",), (K,))
    trsm, = get_blas_funcs(("trsm",), (K,))
    for i, factor in enumerate(factors):
        if not factor.flags.f_contiguous:
            factor = np.asfortranarray(factor)
        inverse, _ = potri(factor, lower=1)  # B^-1, its lower triangle (line 7)
        R = np.tril(inverse)
        R += np.tril(inverse, -1).T
        R *= W_sr[i][:, None]
        R *= W_sr[i][None, :]
        M = W_sr[i][:, None] * K[i]
        Cm = trsm(1.0, factor, M.T, side=1, lower=1, trans_a=1).T  # line 8
        var = K[i].diagonal() - (Cm * Cm).sum(0)
        s2 = -0.5 * var * dW[i]  # line 9, in scikit-learn's sign convention
        u = s2 - R @ (K[i] @ s2)
        G = np.multiply(R, -0.5, out=out[i])
        G += np.outer(0.5 * a[i], a[i])
        G += np.outer(u, g[i])
    return torch.from_numpy(out)


def latent_moments(mode, cross, prior_diag):
    """Latent mean and variance at query rows (GPML Algorithm 3.2, lines 4-6).

    Parameters
    ----------
    mode : NewtonPosterior
    cross : Tensor of shape (C, n, m)
        ``k(X_train, X_query)`` per problem.
    prior_diag : Tensor of shape (C, m)

    Returns
    -------
    mean, var : Tensor of shape (C, m)
        ``var`` is clipped at 0 (round-off can make it slightly negative).
    """
    mean = torch.bmm(mode.g[:, None, :], cross)[:, 0, :]
    v = solve_lower(mode.L, mode.W_sr[:, :, None] * cross)
    var = prior_diag - (v * v).sum(-2)
    return mean, var.clamp_min(0.0)


__all__ = ["COEFS", "LAMBDAS", "LINKS", "NewtonPosterior", "latent_moments", "link_derivatives",
           "lml_gradient_weights", "positive_probability", "posterior_mode"]
