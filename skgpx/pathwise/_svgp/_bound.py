r"""Whitened sparse variational GP (SVGP) for classification and non-Gaussian regression:
the bound, its gradients and the natural-gradient step on ``q`` (``_svgp._q``).  The
training drivers and the mode object that the estimators call (``SVGPEngine``: fit once,
then ``latent_mean_and_variance``, ``predict_proba``, ``posterior``) are in
``_svgp._engine``, whose docstring states that interface.

Model (Hensman, Matthews and Ghahramani, AISTATS 2015): ``L`` latent functions
``f_c ~ GP(0, k)`` share the kernel and the inducing inputs ``Z`` (m x d).  With
``L_z = chol(K_zz + jitter)`` and whitened inducing values ``u_c = L_z v_c``,
``q(v_c) = N(m_c, S_c)`` and the prior ``p(v_c) = N(0, I)``.  For a row ``x_i`` with
``a_i = L_z^{-1} k(Z, x_i)`` the marginals of ``q(f_ic)`` are

.. math::

    \mu_{ic} = a_i^T m_c, \qquad
    v_{ic} = k(x_i, x_i) + a_i^T (S_c - I) a_i,

and the evidence lower bound, estimated on a batch ``B`` of the ``n`` rows, is

.. math::

    \mathcal L = \frac{n}{|B|} \sum_{i \in B} E_i(\mu_i, v_i)
                 - \sum_c \mathrm{KL}(N(m_c, S_c) \,\|\, N(0, I)),

``E_i`` the expected log-likelihood of ``_likelihoods`` with ``g_ic = dE_i/dmu_ic``,
``h_ic = dE_i/dv_ic``.  Rows enter only through the sums (per latent)

.. math::

    H_c = \sum_i h_{ic} a_i a_i^T, \qquad r_c = \sum_i g_{ic} a_i,

which a pass over row chunks accumulates in ``O(L m^2 + chunk * L m)`` memory, never
``O(n m)`` (:func:`block_sums`; ``Rows.map_sum`` runs it on Dask blocks too).

**Natural-gradient step** (Salimbeni, Eleftheriadis and Hensman, AISTATS 2018, in the
conjugate-computation form of Khan and Lin, AISTATS 2017).  In the natural parameters
``(Lambda_c m_c, Lambda_c)``, ``Lambda_c = S_c^{-1}``, a step of size ``gamma`` is

.. math::

    \Lambda_c \leftarrow (1 - \gamma) \Lambda_c + \gamma (I - 2 s H_c), \qquad
    \Lambda_c m_c \leftarrow (1 - \gamma) \Lambda_c m_c + \gamma\, s (r_c - 2 H_c m_c),

``s = n / |B|``: the data term is the gradient of ``sum_i E_i`` in the mean parameters
``(m, S + m m^T)``.  ``h <= 0`` for the log-concave likelihoods, so ``Lambda`` stays
positive definite.  For a Gaussian likelihood and ``gamma = 1`` one full-batch step lands
on the optimal ``q`` (Titsias' ``q(u)``).  A likelihood that is not log-concave
(``log_concave = False``, Student-t: ``h > 0`` for residuals beyond ``sigma sqrt(nu)``
when ``v`` is small) adds its positive curvature to ``H`` (a second rank-b update), and
``I - 2 s H`` may then be indefinite: the drivers (``_svgp._engine``) retry such a step with
``gamma`` halved; the fixed point is unchanged (at the optimum ``Lambda = S^{-1}``).

**Latent groups** (:class:`Groups`).  The latents may split into groups, each with its
own kernel ``k_g`` (theta: its slice of the packed theta, the groups' end to end) and
``L_{z,g} = chol(K_{zz,g})``, so ``A_g`` per group; the inducing inputs are one ``Z``
shared by the groups (its gradient the sum of theirs) or one per group (``Z`` of shape
``(G, m, d)``).  ``q`` stays one ``WhitenedQ`` over all latents (every group has ``m``
inducing values); the likelihood sees all ``L`` marginals of a row at once (the
heteroscedastic Gaussian: ``[f_1..f_T, g_1..g_T]``).  One group (a ``TorchKernel``) is
the classifier's path.

**Likelihood hyperparameters** (``likelihood.theta``, the protocol of ``_likelihoods``):
``d sum_i E_i / d theta_lik`` is summed over the chunks by autograd through ``E`` alone
(``g`` and ``h`` keep their closed forms) and travels in :class:`VariationalSums` after
the kernels' theta: ``grad = [theta_1 .. theta_G, theta_lik, vec Z]``.

**Gradients in theta and Z** hold ``q(v)`` fixed (whitened: the KL does not depend on
them).  With ``G_A = dL/dA = sum_c [m_c g_c^T + 2 (S_c - I) A diag(h_c)]`` the chunk's
kernel block gets ``dL/dK = L_z^{-T} G_A``, pulled back to theta and Z in closed form for a
stationary kernel (``_inducing._cross.StationaryCross``) or by autograd.  The dependence on
``L_z`` needs only the sums: ``G_A A^T = sum_c [m_c r_c^T + 2 (S_c - I) H_c]`` and
the adjoint of ``K_zz`` is ``-sym(L_z^{-T} Phi(G_A A^T) L_z^{-1})`` (:func:`zz_adjoint`),
pulled back in closed form (stationary kernels) or by autograd through ``chol(K_zz)``.
A binary chunk of ``b`` rows costs about ``2.75 m^2 b`` flops with the gradient
(whitening and ``L_z^{-T} G_A`` as triangular products, ``(S - I) A``, ``H`` by a rank-b
update), a step ``O(m^3)`` more (``chol(K_zz)``, ``L_z^{-1}``, ``bar K``, the natural step).
"""

import math
from dataclasses import dataclass

import numpy as np
import torch

from ..._base import rows_per_chunk
from ..._buffers import Buffers
from ..._inducing._collapsed import inducing_cholesky
from ..._inducing._cross import stationary_cross
from ...linalg import gram, lower_matmul, matmul
from ._kzz_pullback import stationary_zz_gradient, triangular_inverse, upper_matmul, zz_adjoint
from ._q import WhitenedQ


@dataclass
class VariationalSums:
    """Row sums of the bound over some rows (module docstring); ``+`` adds them."""

    E: torch.Tensor  # ()      sum_i E_i
    H: torch.Tensor  # (L, m, m) sum_i h_ic a_i a_i^T
    r: torch.Tensor  # (m, L)  sum_i g_ic a_i
    grad: torch.Tensor  # (n_theta + k + |Z|,) d sum_i E_i / d(theta, theta_lik, Z), L_z fixed
    n: int
    GAAt: torch.Tensor = None  # (G, m, m) sum_i G_A,i a_i^T per group when H was not formed

    def __add__(self, other):
        grad = None if self.grad is None else self.grad + other.grad
        GAAt = None if self.GAAt is None else self.GAAt + other.GAAt
        return VariationalSums(self.E + other.E, self.H + other.H, self.r + other.r, grad,
                               self.n + other.n, GAAt)

    def to_device(self, device):
        grad = None if self.grad is None else self.grad.to(device)
        GAAt = None if self.GAAt is None else self.GAAt.to(device)
        return VariationalSums(self.E.to(device), self.H.to(device), self.r.to(device), grad,
                               self.n, GAAt)


def cross_block(kernel, theta, Z, X, cross, buffers):
    """``k(Z, X)`` (m, b), and for the stationary route the standardised rows and the
    Matern slope (``_inducing._cross.StationaryCross.weighted_block``)."""
    if cross is None:
        return kernel(Z, X, theta=theta, part="signal"), None, None
    Xs = cross.standardised(X)
    K, slope = cross.weighted_block(Xs, out=buffers.get("block", (Z.shape[0], X.shape[0]), X))
    return K, Xs, slope


def _chunk_moments(K, L_inverse, q_mean, q_excess, kxx, buffers):
    """``A = L_z^{-1} K``, ``U_c = (S_c - I) A``, ``mu`` and ``v`` (b, L) of one chunk."""
    m, b = K.shape
    A = lower_matmul(L_inverse, K, buffers.get("whitened", (m, b), K))
    n_latent = q_mean.shape[1]
    U = buffers.get("excess", (n_latent, m, b), K)
    for c in range(n_latent):
        matmul(q_excess[c], A, out=U[c])
    mu = matmul(A.T, q_mean)
    var = kxx[:, None] + (U * A).sum(1).T
    return A, U, mu, var


def _chunk_sums(A, U, g, h, buffers, signed=False):
    """``H_c = A diag(h_c) A^T`` (by a rank-b update of ``A sqrt(-h_c)``; ``signed``: a
    non-log-concave likelihood, minus that of ``A sqrt(h_c)`` where ``h > 0``) and
    ``r = A g``."""
    n_latent = g.shape[1]
    scaled = buffers.get("scaled", A.shape, A)
    H = []
    for c in range(n_latent):
        torch.mul(A, (-h[:, c]).clamp_min(0.0).sqrt(), out=scaled)
        H.append(-gram(scaled))
        if signed:
            torch.mul(A, h[:, c].clamp_min(0.0).sqrt(), out=scaled)
            H[-1] = H[-1] + gram(scaled)
    return torch.stack(H), matmul(A, g)


class Groups:
    """Latent groups (module docstring): group ``g`` has the kernel ``kernels[g]`` with
    ``kernels[g].n_dims`` entries of the packed theta (after the previous groups'), the
    latents ``latents[g]`` and the inducing inputs ``Z`` (one ``(m, d)`` shared by all
    groups) or ``Z[g]`` (``(G, m, d)``, ``share_inducing=False``)."""

    def __init__(self, kernels, sizes, share_inducing=True):
        self.kernels = list(kernels)
        edges = np.cumsum([0] + [int(s) for s in sizes])
        self.latents = [slice(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:])]
        widths = np.cumsum([0] + [k.n_dims for k in self.kernels])
        self.thetas = [slice(int(a), int(b)) for a, b in zip(widths[:-1], widths[1:])]
        self.shared = bool(share_inducing) or len(self.kernels) == 1

    def __len__(self):
        return len(self.kernels)

    def inducing(self, Z, g):
        """The inducing inputs (m, d) of group ``g`` from the packed ``Z``."""
        return Z if self.shared else Z[g]


def as_groups(kernel, n_latent):
    """``kernel`` itself if it is :class:`Groups`, else one group of all ``n_latent``."""
    return kernel if isinstance(kernel, Groups) else Groups([kernel], [n_latent])


def _expectations(likelihood, Y, mu, var, lik_theta, d_lik):
    """``likelihood.expectations``; with ``lik_theta`` (a leaf) ``d_lik += dE/dtheta``
    through E's graph (g and h are closed forms, detached)."""
    if lik_theta is None:
        return likelihood.expectations(Y, mu, var)
    with torch.enable_grad():
        E, g, h = likelihood.expectations(Y, mu, var, theta=lik_theta)
        (grad,) = torch.autograd.grad(E.sum(), [lik_theta], allow_unused=True)
    if grad is not None:
        d_lik += grad
    return E.detach(), g.detach(), h.detach()


def block_sums(X, Y, alpha, kernel, theta, Z, L_inverse, q_mean, q_excess, likelihood,
               batch_size, want_grad, want_H=True):
    """:class:`VariationalSums` over the rows ``X`` (b, d) with labels ``Y`` (b, ...).

    The signature of ``Rows.map_sum``'s function (``alpha`` is ignored).  ``kernel`` is a
    ``TorchKernel`` (one group) or :class:`Groups` (then ``L_inverse`` a tuple, one per
    group).  With ``want_grad`` it also returns ``d sum_i E_i / d(theta, theta_lik, vec Z)``
    holding each ``L_z`` fixed.  With ``want_grad`` and not ``want_H`` (a gradient without
    a natural step after it), ``H`` stays zero and ``G_A A^T`` (G, m, m) is summed instead:
    one ``m x b x m`` product in place of ``L`` rank-b updates and, in :func:`evaluate`,
    ``L`` products ``(S_c - I) H_c``.
    """
    n, n_latent = X.shape[0], q_mean.shape[1]
    groups = as_groups(kernel, n_latent)
    L_inverses = L_inverse if isinstance(L_inverse, (tuple, list)) else (L_inverse,)
    m = L_inverses[0].shape[0]
    lik_theta, d_lik = None, None
    if want_grad and len(likelihood.names):
        lik_theta = likelihood.theta.detach().to(dtype=X.dtype, device=X.device).clone()
        lik_theta.requires_grad_(True)
        d_lik = torch.zeros_like(lik_theta)
    parts = []
    for g, kern in enumerate(groups.kernels):
        theta_g, Z_g = theta[groups.thetas[g]], groups.inducing(Z, g)
        part = {"kernel": kern, "theta": theta_g, "Z": Z_g, "cols": groups.latents[g],
                "theta_": theta_g.detach().clone().requires_grad_(want_grad),
                "Z_": Z_g.detach().clone().requires_grad_(want_grad),
                "cross": stationary_cross(kern, theta_g, Z_g), "buffers": Buffers(),
                "L_inverse": L_inverses[g]}
        if want_grad and part["cross"] is not None:
            part.update(d_scale=torch.zeros((), dtype=X.dtype, device=X.device),
                        d_white=torch.zeros((), dtype=X.dtype, device=X.device),
                        d_length=torch.zeros_like(part["cross"].length_scale),
                        d_Z=torch.zeros_like(Z_g))
        parts.append(part)
    E = torch.zeros((), dtype=X.dtype, device=X.device)
    H = torch.zeros(n_latent, m, m, dtype=X.dtype, device=X.device)
    r = torch.zeros(m, n_latent, dtype=X.dtype, device=X.device)
    want_H = want_H or not want_grad
    GAAt = None if want_H else torch.zeros(len(groups), m, m, dtype=X.dtype, device=X.device)
    step = rows_per_chunk(batch_size, (3 + 2 * n_latent) * m, X.device)
    if n <= min(2 * step, batch_size):
        # one chunk for up to twice the budget: a mini-batch of 1024 rows (m = 256) would
        # otherwise run as 819 + 205 rows, about 8 % slower per step for no memory gained
        step = n
    for start in range(0, n, step):
        Xc, Yc = X[start: start + step], Y[start: start + step]
        for p in parts:
            p["generic"] = generic = want_grad and p["cross"] is None
            with torch.set_grad_enabled(generic):
                p["K_graph"], p["Xs"], p["slope"] = cross_block(
                    p["kernel"], p["theta_"] if generic else p["theta"],
                    p["Z_"] if generic else p["Z"], Xc, p["cross"], p["buffers"])
                p["kxx_graph"] = p["kernel"].diag(Xc, p["theta_"] if generic else p["theta"],
                                                  part="full")
        with torch.no_grad():
            for p in parts:
                p["K"] = p["K_graph"].detach().contiguous()
                p["A"], p["U"], p["mu"], p["var"] = _chunk_moments(
                    p["K"], p["L_inverse"], q_mean[:, p["cols"]], q_excess[p["cols"]],
                    p["kxx_graph"].detach(), p["buffers"])
            mu = parts[0]["mu"] if len(parts) == 1 else torch.cat([p["mu"] for p in parts], 1)
            var = parts[0]["var"] if len(parts) == 1 else torch.cat([p["var"] for p in parts],
                                                                    1)
            E_c, g, h = _expectations(likelihood, Yc, mu, var, lik_theta, d_lik)
            if want_H:
                H_c, r_c = zip(*[_chunk_sums(p["A"], p["U"], g[:, p["cols"]], h[:, p["cols"]],
                                             p["buffers"], not likelihood.log_concave)
                                 for p in parts])
                H = H + (H_c[0] if len(parts) == 1 else torch.cat(H_c))
            else:
                r_c = [matmul(p["A"], g[:, p["cols"]]) for p in parts]
            E, r = E + E_c.sum(), r + (r_c[0] if len(parts) == 1 else torch.cat(r_c, 1))
            if not want_grad:
                continue
            for j, p in enumerate(parts):
                cols = p["cols"]
                G_A = matmul(q_mean[:, cols], g[:, cols].T)  # (m, b)
                for c in range(cols.stop - cols.start):
                    G_A.add_(p["U"][c] * h[:, cols.start + c], alpha=2.0)
                if not want_H:
                    GAAt[j] += matmul(G_A, p["A"].T)
                p["G_K"] = upper_matmul(p["L_inverse"].T.contiguous(), G_A,
                                        p["buffers"].get("adjoint", G_A.shape, G_A))
        for p in parts:
            _pull_back_chunk(p, h[:, p["cols"]])
    grad = None
    if want_grad:
        grad = _gradient(parts, groups, Z, d_lik)
    return VariationalSums(E, H, r, grad, n, GAAt)


def _pull_back_chunk(p, h):
    """A chunk's ``<G_K, dK_zx> + <h, dk_xx>`` into group ``p``'s theta and Z: by autograd
    (``p["generic"]``) or in closed form for a stationary kernel (module docstring)."""
    if p["generic"]:
        ((p["K_graph"] * p["G_K"]).sum() + (h.sum(1) * p["kxx_graph"]).sum()).backward()
        return
    cross, K, Xs, G_K = p["cross"], p["K"], p["Xs"], p["G_K"]
    with torch.no_grad():
        if p["slope"] is None:  # RBF: dK/dr^2 = s kappa'(r^2) = -K / 2
            GM = G_K.mul_(K)
            KG = GM.sum()
            dl, dz = cross.pullback(GM, torch.full_like(h[:, 0], -0.5), Xs, GM.sum(0))
        else:  # Matern: dK/dr^2 = slope
            KG = (G_K * K).sum()
            GM = G_K.mul_(p["slope"])
            dl, dz = cross.pullback(GM, torch.ones_like(h[:, 0]), Xs, GM.sum(0))
        if cross.scale > 0:
            p["d_scale"] += KG / cross.scale  # K = s kappa: dK/ds = K / s
        p["d_length"] += dl
        p["d_Z"] += dz
        p["d_scale"] += h.sum()  # k(x, x) = s + white noise
        p["d_white"] += h.sum()


def _gradient(parts, groups, Z, d_lik):
    """The packed gradient ``[theta_1 .. theta_G, theta_lik, vec Z]`` of the row sums."""
    d_theta, d_Z = [], [None] * (1 if groups.shared else len(parts))
    for j, p in enumerate(parts):
        theta_, Z_ = p["theta_"], p["Z_"]
        if p["cross"] is not None:
            _, scale_of, length_of = p["kernel"].stationary_signal()
            surrogate = (p["d_scale"] * scale_of(theta_)
                         + (p["d_length"] * length_of(theta_)).sum()
                         + p["d_white"] * p["kernel"].noise_level(theta_))
            if surrogate.requires_grad:
                surrogate.backward()
            Z_.grad = p["d_Z"] if Z_.grad is None else Z_.grad + p["d_Z"]
        d_theta.append(torch.zeros_like(theta_) if theta_.grad is None else theta_.grad)
        dz = torch.zeros_like(Z_) if Z_.grad is None else Z_.grad
        k = 0 if groups.shared else j
        d_Z[k] = dz if d_Z[k] is None else d_Z[k] + dz
    lik = [] if d_lik is None else [d_lik]
    dZ = d_Z[0] if groups.shared else torch.stack(d_Z)
    return torch.cat(d_theta + lik + [dZ.reshape(-1)])


@dataclass
class Evaluation:
    """The bound at ``(theta, Z, q)`` and what the natural step and the optimisers need."""

    elbo: float
    sums: VariationalSums
    scale: float  # n / |B|
    grad_theta: torch.Tensor = None
    grad_Z: torch.Tensor = None
    grad_lik: torch.Tensor = None  # d bound / d likelihood.theta


def evaluate(kernel, theta, Z, q, rows, likelihood, *, jitter, batch_size, n_total=None,
             want_grad=False, want_H=True):
    """The bound (estimated on ``rows``, scaled to ``n_total`` rows) and optionally its
    gradient in ``(theta, theta_lik, Z)`` at fixed ``q``.

    ``kernel`` is a ``TorchKernel`` (one group of all latents) or :class:`Groups`, with
    ``theta`` the groups' thetas end to end and ``Z`` packed as :class:`Groups` says;
    ``likelihood`` is evaluated at its own ``theta`` (``with_theta`` for another).
    ``rows`` is a ``_inducing._rows.Rows`` (labels as ``Y``), a ``DaskRows`` or, for a mini-batch,
    a ``Rows`` of the batch with ``n_total`` the training set's size.
    """
    groups = as_groups(kernel, q.mean.shape[1])
    factors = []
    for g, kern in enumerate(groups.kernels):
        # the K_zz path by autograd only where no closed form exists (stationary_zz_gradient)
        graph = want_grad and kern.stationary_signal() is None
        theta_ = theta[groups.thetas[g]].detach().clone().requires_grad_(graph)
        Z_ = groups.inducing(Z, g).detach().clone().requires_grad_(graph)
        with torch.set_grad_enabled(graph):
            L, _ = inducing_cholesky(kern, theta_, Z_, jitter)
        factors.append((theta_, Z_, L, triangular_inverse(L.detach())))
    L_inverse = factors[0][3] if len(groups) == 1 else tuple(f[3] for f in factors)
    sums = rows.map_sum(block_sums, kernel, theta.detach(), Z.detach(), L_inverse, q.mean,
                        q.excess, likelihood, batch_size, want_grad, want_H)
    scale = 1.0 if n_total is None else n_total / sums.n
    elbo = float(scale * sums.E - q.kl())
    if not math.isfinite(elbo):
        raise RuntimeError("The variational bound is not finite at these hyperparameters.")
    out = Evaluation(elbo, sums, scale)
    if not want_grad:
        return out
    d_thetas, d_Zs = [], []
    for g, (kern, (theta_, Z_, L, L_inv)) in enumerate(zip(groups.kernels, factors)):
        cols = groups.latents[g]
        with torch.no_grad():
            # G_A A^T = sum_c [m_c r_c^T + 2 (S_c - I) H_c] (module docstring)
            if sums.GAAt is not None:
                GAAt = sums.GAAt[g]
            else:
                GAAt = q.mean[:, cols] @ sums.r[:, cols].T + 2.0 * (
                    q.excess[cols] @ sums.H[cols]).sum(0)
        spec = kern.stationary_signal()
        if spec is None:  # dL/dL_z = -L_z^{-T} G_A A^T, through chol(K_zz) by autograd
            dL = -(L_inv.T @ GAAt).tril()
            d_theta, d_Z = torch.autograd.grad((L * dL).sum(), [theta_, Z_], allow_unused=True)
        else:
            d_theta, d_Z = stationary_zz_gradient(kern, spec, theta_.detach(), Z_.detach(),
                                                  zz_adjoint(L_inv, GAAt), jitter)
        d_thetas.append(torch.zeros_like(theta_) if d_theta is None else d_theta)
        d_Zs.append(torch.zeros_like(Z_) if d_Z is None else d_Z)
    n_theta, n_lik = theta.numel(), len(likelihood.names)
    if groups.shared:
        d_Z = d_Zs[0]
        for extra in d_Zs[1:]:
            d_Z = d_Z + extra
    else:
        d_Z = torch.stack(d_Zs)
    d_theta = d_thetas[0] if len(groups) == 1 else torch.cat(d_thetas)
    out.grad_theta = scale * (d_theta + sums.grad[:n_theta])
    out.grad_lik = scale * sums.grad[n_theta: n_theta + n_lik]
    out.grad_Z = scale * (d_Z + sums.grad[n_theta + n_lik:].reshape(Z.shape))
    return out


def marginals(kernel, theta, Z, L_inverse, q, Xq, batch_size):
    """``mu`` and ``v`` (n*, L) of ``q(f)`` at ``Xq``, in row chunks (``kernel``,
    ``theta``, ``Z`` and ``L_inverse`` as in :func:`block_sums`)."""
    n_latent = q.mean.shape[1]
    groups = as_groups(kernel, n_latent)
    L_inverses = L_inverse if isinstance(L_inverse, (tuple, list)) else (L_inverse,)
    m = L_inverses[0].shape[0]
    mean = Xq.new_empty(Xq.shape[0], n_latent)
    var = Xq.new_empty(Xq.shape[0], n_latent)
    step = rows_per_chunk(batch_size, (2 + n_latent) * m, Xq.device)
    for g, kern in enumerate(groups.kernels):
        theta_g, Z_g, cols = theta[groups.thetas[g]], groups.inducing(Z, g), groups.latents[g]
        cross = stationary_cross(kern, theta_g, Z_g)
        buffers = Buffers()
        with torch.no_grad():
            for start in range(0, Xq.shape[0], step):
                rows = slice(start, start + step)
                K, _, _ = cross_block(kern, theta_g, Z_g, Xq[rows], cross, buffers)
                kxx = kern.diag(Xq[rows], theta_g, part="full")
                _, _, mean[rows, cols], var[rows, cols] = _chunk_moments(
                    K.contiguous(), L_inverses[g], q.mean[:, cols], q.excess[cols], kxx,
                    buffers)
    return mean, var.clamp_min_(0.0)


__all__ = ["Evaluation", "Groups", "VariationalSums", "WhitenedQ", "as_groups", "block_sums",
           "evaluate", "marginals", "triangular_inverse"]
