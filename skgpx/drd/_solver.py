"""Coordinate ascent for sDRD (spec ``smooth_drd.md`` Sec. 3): u-step, Laplace, theta-step.

Everything is in internal units (centred, globally rescaled data).  The hyperparameters are
``b`` (prior mean of ``u``), ``rho`` (variance of ``u``), ``l`` (length of ``u``), ``l_f``
(smoothness length) and the noise variance ``s2``; ``rho``, ``l``, ``l_f``, ``s2`` are kept as
logarithms.  ``u = b + sqrt(rho) F v`` with ``F F^T`` the SE correlation of length ``l``
(dense Cholesky or Fourier factor) and whitened coordinates ``v ~ N(0, I)``.
"""

import math
import warnings
from dataclasses import dataclass, field

import torch

from ..linalg import NotPositiveDefiniteError, spd_logdet
from ._bases import DenseAxis, FourierAxis, GridFactor, kept_frequency_count
from ._core import (
    Conditional,
    _with_diagonal,
    fisher_curvature,
    laplace_logdet,
    link,
    link_log_slope,
    log_evidence,
)

_PARAMS = ("rho", "l", "lf", "noise")
# L-BFGS stopping rules, on objectives divided by n (per-sample scale)
_GRAD_TOL, _CHANGE_TOL = 1e-5, 1e-9
_FAILED = 1e30  # objective value of a trial point where the evidence cannot be evaluated


@dataclass
class Config:
    shape: tuple
    sparsity: bool = True
    smoothness: bool = True
    link: str = "exp"
    laplace_hessian: str = "fisher"
    evidence: str = "laplace"
    basis: str = "dense"
    pad: tuple = ()
    cond_threshold: float = 1e8
    trim_threshold: float = 1e-6
    theta_step: float = 0.5
    u_max_iter: int = 200
    theta_max_iter: int = 50
    bounds: dict = field(default_factory=dict)  # name -> (low, high) of the logarithm

    @property
    def axis_threshold(self):
        return self.cond_threshold ** (1.0 / len(self.shape))

    def free(self, name):
        low, high = self.bounds[name]
        return high > low


@dataclass
class State:
    b: float
    log: dict  # name -> float, the logarithms of rho, l, lf, noise
    u: torch.Tensor = None  # (p,), feature space
    u_coef: torch.Tensor = None  # Fourier path: coefficients of u - b on the kept u basis
    u_axes: list = None  # the axes that u_coef belongs to
    box: dict = field(default_factory=dict)  # current trust-box radius of each parameter


def _circle_axes(config, length_low, kind):
    """Axis factors for a length scale that can go down to ``length_low``."""
    if kind == "dense":
        return [DenseAxis(n) for n in config.shape]
    out = []
    for n, pad in zip(config.shape, config.pad):
        k_max = kept_frequency_count(n + pad, length_low, config.axis_threshold)
        out.append(FourierAxis(n, n + pad, max(k_max, 0)))
    return out


def _bind(axes, length, like):
    return GridFactor([a.bind(length, like.dtype, like.device) for a in axes],
                      [a.n_points for a in axes])


def _remap(coef, old_axes, new_axes):
    """Fourier coefficients of ``u - b`` from one kept set to another (zero where new)."""
    shape_old = [a.rank for a in old_axes]
    out = coef.reshape(shape_old)
    for dim, (old, new) in enumerate(zip(old_axes, new_axes)):
        index_old = _layout(old)
        index_new = _layout(new)
        full = max(old.k_max, new.k_max)
        size = 2 * full + 1
        moved = out.movedim(dim, -1)
        canon = moved.new_zeros(*moved.shape[:-1], size)
        canon[..., index_old] = moved
        out = canon[..., index_new].movedim(-1, dim)
    return out.reshape(-1)


def _layout(axis):
    # slot of each coefficient in a layout shared by every kept set: cos_k -> 2k, sin_k -> 2k - 1
    k = torch.arange(axis.k_max + 1)
    s = torch.arange(1, axis.n_sin + 1)
    return torch.cat([2 * k, 2 * s - 1])


class Solver:
    """Holds the data, the geometry and the state; :meth:`iterate` runs one outer step."""

    def __init__(self, config, X, y, state):
        self.config, self.X, self.y, self.state = config, X, y, state
        self.n, self.p = X.shape
        self._one = torch.ones((), dtype=X.dtype, device=X.device)

    # ---------------------------------------------------------------- pieces
    def value(self, name, log=None):
        return math.exp((log or self.state.log)[name])

    def _t(self, x):
        return self._one * x

    def w_factor(self, lf, axes):
        """``G`` with ``G G^T = K_f`` (None without smoothness: ``K_f = I``)."""
        return _bind(axes, lf, self._one) if self.config.smoothness else None

    def w_axes(self):
        c = self.config
        low = math.exp(max(self.state.log["lf"] - c.theta_step, c.bounds["lf"][0]))
        return _circle_axes(c, low, c.basis)

    def u_axes(self):
        c = self.config
        low = math.exp(max(self.state.log["l"] - c.theta_step, c.bounds["l"][0]))
        return _circle_axes(c, low, c.basis)

    def design(self, u, G):
        """``Z = X D G`` with ``D = diag(sqrt(g(u)))``: (n, m)."""
        scaled = self.X * link(u, self.config.link).sqrt()
        return scaled if G is None else G.forward(scaled)

    def prior_variance(self):
        return link(self.state.u, self.config.link)

    def support(self, u=None):
        g = link(self.state.u if u is None else u, self.config.link)
        return g >= self.config.trim_threshold * g.max()

    # ---------------------------------------------------------------- u-step
    def whitened(self, U, rho, u_axes):
        """``v`` of the current ``u`` under the u-basis ``U`` (warm start of the u-step)."""
        s = self.state
        if self.config.basis == "dense":
            return U.solve(s.u - s.b) / math.sqrt(rho)
        coef = _remap(s.u_coef, s.u_axes, u_axes) if s.u_coef is not None else None
        if coef is None:
            return torch.zeros(U.rank, dtype=self.X.dtype, device=self.X.device)
        return coef / (math.sqrt(rho) * U.spectral_scales())

    def u_step(self, U, G, rho, noise, v0):
        """Minimise ``J(v) = -log p(y | b + sqrt(rho) F v) + |v|^2 / 2`` by L-BFGS."""
        b = self.state.b
        v = v0.detach().clone().requires_grad_(True)
        opt = torch.optim.LBFGS([v], lr=1.0, max_iter=self.config.u_max_iter,
                                history_size=20, tolerance_grad=_GRAD_TOL,
                                tolerance_change=_CHANGE_TOL,
                                line_search_fn="strong_wolfe")
        sqrt_rho = math.sqrt(rho)

        def closure():
            opt.zero_grad()
            u = b + sqrt_rho * U.adjoint(v)
            try:
                J = (-log_evidence(self.design(u, G), self.y, noise) + 0.5 * v @ v) / self.n
            except NotPositiveDefiniteError:
                J = None
            if J is None or not bool(torch.isfinite(J)):
                # a wild trial step of the line search: a large finite value (infinities
                # break its interpolation) sends it back
                v.grad = torch.zeros_like(v)
                return torch.tensor(_FAILED, dtype=v.dtype)
            J.backward()
            return J

        opt.step(closure)
        v = v.detach()
        return v, b + sqrt_rho * U.adjoint(v)

    # ------------------------------------------------------------ curvature
    def curvature(self, u, G, noise, index):
        """Data curvature ``W`` of ``-log p(y|u)`` on the positions ``index``."""
        c = self.config
        if c.laplace_hessian == "exact":
            W = self._exact_curvature(u, G, noise, index)
            return W, "exact"
        return self._fisher(u, G, noise, index), "fisher"

    def _fisher(self, u, G, noise, index):
        cond = Conditional.condition(self.design(u, G), self.y, noise)
        d_A = link(u[index], self.config.link).sqrt()
        slope = link_log_slope(u[index], self.config.link)
        if G is not None and G.rank < self.n:  # low-rank C_sf: the factorised products
            return fisher_curvature(cond, self.X[:, index], None, slope,
                                    DG_A=d_A[:, None] * G.rows(index))
        K_A = G.gram(index) if G is not None else torch.eye(len(index), dtype=u.dtype,
                                                             device=u.device)
        C_AA = d_A[:, None] * K_A * d_A[None, :]
        return fisher_curvature(cond, self.X[:, index], C_AA, slope)

    def _exact_curvature(self, u, G, noise, index):
        def data_term(u_A):
            full = u.index_put((index,), u_A)
            return -log_evidence(self.design(full, G), self.y, noise)

        return torch.autograd.functional.hessian(data_term, u[index].detach())

    # ------------------------------------------------------------ theta-step
    def laplace_evidence(self, log, b, u, G_axes, U_axes, W, index, coef=None):
        """``E(theta) = log p(y|u, l_f, s2) - |v_theta|^2 / 2 - log|I + Phi^T W Phi| / 2``
        at fixed ``u`` (and, for the Fourier basis, fixed coefficients ``coef`` of ``u - b``).

        ``W`` is the frozen curvature on the positions ``index``; for the Fourier basis it is
        already projected on the unscaled basis, ``B_A^T W B_A`` (r x r): ``Phi = sqrt(rho)
        B diag(sqrt(k_l))`` changes with theta only through its scales, so each evaluation
        costs ``O(r^3)`` instead of ``O(p'^3)``.  Returns ``(E, b)``: with the dense basis ``b``
        is profiled out in closed form, ``b = 1^T K^-1 u / 1^T K^-1 1`` (seed Eq. 12).
        """
        c = self.config
        noise = torch.exp(log["noise"])
        value = torch.zeros((), dtype=self.X.dtype, device=self.X.device)
        if c.sparsity:
            rho, l = torch.exp(log["rho"]), torch.exp(log["l"])
            U = _bind(U_axes, l, self._one)
            if c.basis == "dense":
                e = U.solve(torch.ones_like(u))
                f = U.solve(u)
                b = (e @ f) / (e @ e)
                v = (f - b * e) / rho.sqrt()
            else:
                scales = U.spectral_scales()
                v = coef / (rho.sqrt() * scales)
            value = value - 0.5 * v @ v
            if c.evidence == "laplace" and W is not None:
                if c.basis == "dense":
                    logdet = laplace_logdet(rho.sqrt() * U.rows(index), W)
                else:
                    H = rho * scales[:, None] * W * scales[None, :]
                    logdet = spd_logdet(_with_diagonal(H, 1.0), "Laplace Hessian I + Phi^T W Phi")
                value = value - 0.5 * logdet
        else:
            u = (b * self._one).expand(self.p)  # no sparsity: u = b everywhere
        G = _bind(G_axes, torch.exp(log["lf"]), self._one) if c.smoothness else None
        return value + log_evidence(self.design(u, G), self.y, noise), b

    def theta_step(self, u, G_axes, U_axes, W, index, coef):
        """Maximise the Laplace evidence in a trust box ``log theta = old + step tanh(z)``."""
        c, s = self.config, self.state
        names = [k for k in _PARAMS if k in s.log and c.free(k)
                 and (c.sparsity or k not in ("rho", "l"))
                 and (c.smoothness or k != "lf")]
        with_b = not c.sparsity
        if W is not None and c.basis == "fourier":
            B_A = GridFactor([a.unscaled(W.dtype, W.device) for a in U_axes], c.shape).rows(index)
            W = B_A.T @ W @ B_A
            W = 0.5 * (W + W.T)  # exactly symmetric, so each H = I + rho S W S is
        radius = [s.box.get(k, c.theta_step) for k in names] + [s.box.get("b", c.theta_step)] * with_b
        old = {k: self._t(v) for k, v in s.log.items()}
        z = torch.zeros(len(names) + with_b, dtype=self.X.dtype, device=self.X.device,
                        requires_grad=True)

        def unpack(z):
            log = dict(old)
            for i, k in enumerate(names):
                low, high = c.bounds[k]
                log[k] = torch.clamp(old[k] + radius[i] * torch.tanh(z[i]), low, high)
            b = s.b + radius[-1] * torch.tanh(z[-1]) if with_b else s.b
            return log, b

        def objective(z):
            log, b = unpack(z)
            return -self.laplace_evidence(log, b, u, G_axes, U_axes, W, index, coef)[0] / self.n

        if len(names) + with_b:
            opt = torch.optim.LBFGS([z], lr=1.0, max_iter=c.theta_max_iter, history_size=10,
                                    tolerance_grad=_GRAD_TOL, tolerance_change=_CHANGE_TOL,
                                    line_search_fn="strong_wolfe")

            def closure():
                opt.zero_grad()
                value = objective(z)
                value.backward()
                return value

            try:
                opt.step(closure)
            except (NotPositiveDefiniteError, RuntimeError):
                z = torch.zeros_like(z)  # a failed factorisation: keep the old theta
            if not bool(torch.isfinite(z).all()):
                z = torch.zeros_like(z)
        # an adaptive trust box: a parameter that ended at the edge of its box may move twice
        # as far in the next iteration (up to 8 times theta_step), one inside it is reset
        for k, r, t in zip(names + ["b"] * with_b, radius, torch.tanh(z.detach()).tolist()):
            s.box[k] = min(2 * r, 8 * c.theta_step) if abs(t) > 0.95 else c.theta_step
        with torch.no_grad():
            log, b = unpack(z.detach())
            E, b = self.laplace_evidence(log, b, u, G_axes, U_axes, W, index, coef)
        return {k: float(v) for k, v in log.items()}, float(b), float(E)


    # ------------------------------------------------------------ outer step
    def iterate(self):
        """One outer iteration: u-step, Laplace curvature, theta-step. Returns ``E``."""
        c, s = self.config, self.state
        noise = self._t(self.value("noise"))
        G_axes = self.w_axes() if c.smoothness else None
        G = self.w_factor(self.value("lf"), G_axes) if c.smoothness else None
        W = index = coef = U_axes = None
        if c.sparsity:
            rho = self.value("rho")
            U_axes = self.u_axes()
            U = _bind(U_axes, self.value("l"), self._one)
            v, u = self.u_step(U, G, rho, noise, self.whitened(U, rho, U_axes))
            if c.basis == "fourier":
                # coefficients of u - b stay fixed through the theta-step; b absorbs their
                # constant (DC) part, the closed-form b of seed Eq. 12 on the circle
                coef = math.sqrt(rho) * U.spectral_scales() * v
                s.b += float(coef[0]) / math.prod(math.sqrt(a.n_circle) for a in U_axes)
                coef[0] = 0.0
                s.u_coef, s.u_axes = coef, U_axes
            s.u = u
            index = torch.nonzero(self.support(u))[:, 0]
            W = self.laplace_curvature(u, G, noise, index, U, rho)
        else:
            u = None
        s.log, s.b, E = self.theta_step(u, G_axes, U_axes, W, index, coef)
        if not c.sparsity:
            s.u = torch.full((self.p,), s.b, dtype=self.X.dtype, device=self.X.device)
        return E

    def laplace_curvature(self, u, G, noise, index, U, rho):
        """``W`` at the mode; an exact Hessian that makes ``I + Phi^T W Phi`` indefinite is
        replaced by the Fisher information, with a warning."""
        W, kind = self.curvature(u, G, noise, index)
        if kind == "exact":
            try:
                laplace_logdet(math.sqrt(rho) * U.rows(index), W)
            except NotPositiveDefiniteError:
                warnings.warn(
                    "The exact Hessian made the Laplace matrix I + Phi^T W Phi indefinite; "
                    "used the Fisher information for this iteration.", UserWarning,
                    stacklevel=4)
                W = self._fisher(u, G, noise, index)
        return W

    def posterior(self):
        """Posterior of the coefficients at the current ``u`` and theta, with trimming.

        Returns ``(coef, cond, G, scale)``: ``coef = D G mu_a`` (exact zeros off the support),
        the :class:`Conditional` of ``a``, the smoothness factor and ``sqrt(g(u))`` trimmed.
        """
        c, s = self.config, self.state
        g = link(s.u, c.link) * self.support()
        scale = g.sqrt()
        G = self.w_factor(self.value("lf"), self.w_axes()) if c.smoothness else None
        Z = self.X * scale
        Z = Z if G is None else G.forward(Z)
        cond = Conditional.condition(Z, self.y, self._t(self.value("noise")))
        mean = cond.mean if G is None else G.adjoint(cond.mean)
        return scale * mean, cond, G, scale


def latent_laplace_parts(solver):
    """``(v*, L_H, U)`` of the Laplace posterior of ``u`` at the current state and theta:
    ``H_v = I_r + Phi_A^T W Phi_A`` in the whitened coordinates of the u-basis ``U``."""
    c, s = solver.config, solver.state
    rho, noise = solver.value("rho"), solver._t(solver.value("noise"))
    U_axes = solver.u_axes()
    U = _bind(U_axes, solver.value("l"), solver._one)
    v = solver.whitened(U, rho, U_axes)
    G = solver.w_factor(solver.value("lf"), solver.w_axes()) if c.smoothness else None
    index = torch.nonzero(solver.support())[:, 0]
    W = solver.laplace_curvature(s.u, G, noise, index, U, rho)
    Phi_A = math.sqrt(rho) * U.rows(index)
    H = Phi_A.T @ W @ Phi_A
    H = 0.5 * (H + H.T) + torch.eye(H.shape[0], dtype=H.dtype, device=H.device)
    L_H, info = torch.linalg.cholesky_ex(H)
    if bool(info.any()):
        raise NotPositiveDefiniteError(
            "The Laplace Hessian of u is not positive definite at the final mode; use "
            "laplace_hessian='fisher'.")
    return v, L_H, U
