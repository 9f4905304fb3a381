"""Coordinate ascent for sDRD (Wu et al., NIPS 2014, suppl. App. B): u-step, Laplace, theta.

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

from ..linalg import NotPositiveDefiniteError
from ._bases import DenseAxis, FourierAxis, GridFactor, kept_frequency_count, kron_vectors
from ._model import (
    Conditional,
    FrozenLaplaceLogdet,
    fisher_curvature,
    laplace_logdet,
    link,
    link_log_slope,
    log_evidence,
)

_PARAMS = ("rho", "l", "lf", "noise")
# L-BFGS stopping rules, on objectives divided by n (per-sample scale)
_GRAD_TOL, _CHANGE_TOL = 1e-5, 1e-9
# the joint (v, theta) step stops earlier on the change of its objective: along the ridge of
# b and rho it gains less than this per sample and per L-BFGS iteration, which moves the
# coefficients by far less than the outer tolerance (relative change of the coefficient mean)
_JOINT_CHANGE_TOL = 1e-7
# a long L-BFGS memory for the joint step: its coupled (v, rho, b) directions need it (48 s ->
# 40 s on the 64 x 64 benchmark against 20 pairs); r + 5 numbers per pair
_JOINT_HISTORY = 100
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
    settled: bool = False  # a theta-step ended inside its trust box: joint steps from now
    steps: int = 0  # centred (u-step, theta-step) iterations run


def circle_axes(config, length_low, kind):
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
        return circle_axes(c, low, c.basis)

    def u_axes(self):
        c = self.config
        low = math.exp(max(self.state.log["l"] - c.theta_step, c.bounds["l"][0]))
        return circle_axes(c, low, c.basis)

    def design(self, u, G):
        """``Z = X D G`` with ``D = diag(sqrt(g(u)))``: (n, m)."""
        scaled = self.X * link(u, self.config.link).sqrt()
        return scaled if G is None else G.forward(scaled)

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
        b, sqrt_rho = self.state.b, math.sqrt(rho)
        v = v0.detach().clone().requires_grad_(True)
        self._lbfgs([v], lambda: (-log_evidence(self.design(b + sqrt_rho * U.adjoint(v), G),
                                                self.y, noise) + 0.5 * v @ v) / self.n,
                    self.config.u_max_iter, 20)
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
        every = len(index) == self.p  # no gathers of p x p arrays then
        X_A = self.X if every else self.X[:, index]
        if G is not None and G.rank < self.n:  # low-rank C_sf: the factorised products
            gram = self.gram() if every else self.gram()[index[:, None], index[None, :]]
            return fisher_curvature(cond, X_A, None, slope, gram_A=gram,
                                    DG_A=d_A[:, None] * G.rows(index))
        if G is not None and every:  # X C = ((X D) G G^T) D by axis products
            XC = d_A * G.adjoint(G.forward(self.X * d_A))
            return fisher_curvature(cond, X_A, None, slope, XC_A=XC)
        K_A = (G.gram(index) if G is not None
               else torch.eye(len(index), dtype=u.dtype, device=u.device))
        C_AA = d_A[:, None] * K_A * d_A[None, :]
        return fisher_curvature(cond, X_A, C_AA, slope)

    def gram(self):
        """``X^T X`` (p x p), computed once: the primal Fisher curvature needs only a rank-m
        correction of it."""
        if getattr(self, "_gram", None) is None:
            self._gram = self.X.T @ self.X
        return self._gram

    def _exact_curvature(self, u, G, noise, index):
        def data_term(u_A):
            full = u.index_put((index,), u_A)
            return -log_evidence(self.design(full, G), self.y, noise)

        return torch.autograd.functional.hessian(data_term, u[index].detach())

    # ------------------------------------------------------------ theta-step
    def laplace_evidence(self, log, b, u, G_axes, U_axes, logdet, coef=None, unscaled=None):
        """``E(theta) = log p(y|u, l_f, s2) - |v_theta|^2 / 2 - log|I + Phi^T W Phi| / 2``
        at fixed ``u`` (without sparsity ``u = b`` everywhere).

        ``logdet(rho, U)`` is the log-determinant with the curvature ``W`` frozen (None
        drops it).  The Fourier basis holds the coefficients ``coef`` of ``u - b`` fixed:
        ``v = coef / (sqrt(rho) scales_l)``.  ``unscaled`` is ``X D B^T`` for a Fourier
        smoothness basis at fixed ``u``: ``Z`` is then its columns times the scales of
        ``l_f``.  Returns ``(E, b)``: with the dense basis ``b`` is profiled out in closed
        form, ``b = 1^T K^-1 u / 1^T K^-1 1`` (where Wu et al., NIPS 2014, suppl. Eq. 12 is 0).
        """
        c = self.config
        noise = torch.exp(log["noise"])
        value = torch.zeros((), dtype=self.X.dtype, device=self.X.device)
        if c.sparsity:
            rho, length = torch.exp(log["rho"]), torch.exp(log["l"])
            U = _bind(U_axes, length, self._one)
            if c.basis == "dense":
                e = U.solve(torch.ones_like(u))
                f = U.solve(u)
                b = (e @ f) / (e @ e)
                v = (f - b * e) / rho.sqrt()
            else:
                v = coef / (rho.sqrt() * U.spectral_scales())
            value = value - 0.5 * v @ v
            if logdet is not None:
                value = value - 0.5 * logdet(rho, U)
        else:
            u = (b * self._one).expand(self.p)  # no sparsity: u = b everywhere
        G = _bind(G_axes, torch.exp(log["lf"]), self._one) if c.smoothness else None
        Z = self.design(u, G) if unscaled is None else unscaled * G.spectral_scales()
        return value + log_evidence(Z, self.y, noise), b

    def _free(self):
        c = self.config
        return [k for k in _PARAMS if k in self.state.log and c.free(k)
                and (c.sparsity or k not in ("rho", "l")) and (c.smoothness or k != "lf")]

    def _radius(self, name):
        """Current trust-box radius of a parameter (its logarithm, or ``b``)."""
        return self.state.box.get(name, self.config.theta_step)

    def _trust_box(self, names, with_b):
        """Radii and the map ``z -> (log theta, b)``, ``log theta = old + radius tanh(z)``
        clamped to the bounds (``b`` last when ``with_b``)."""
        c, s = self.config, self.state
        radius = [self._radius(k) for k in names + ["b"] * with_b]
        old = {k: self._t(v) for k, v in s.log.items()}

        def unpack(z):
            log = dict(old)
            for i, k in enumerate(names):
                low, high = c.bounds[k]
                log[k] = torch.clamp(old[k] + radius[i] * torch.tanh(z[i]), low, high)
            b = s.b + radius[-1] * torch.tanh(z[-1]) if with_b else s.b
            return log, b

        return radius, unpack

    def _resize_box(self, names, radius, z):
        # an adaptive trust box: a parameter that ended at the edge of its box may move twice
        # as far in the next iteration (up to 8 times theta_step), one inside it is reset
        c, inside = self.config, True
        for k, r, t in zip(names, radius, torch.tanh(z.detach()).tolist()):
            edge = abs(t) > 0.95
            self.state.box[k] = min(2 * r, 8 * c.theta_step) if edge else c.theta_step
            inside = inside and not edge
        return inside

    def _lbfgs(self, params, objective, max_iter, history, back_off=True,
               change_tol=_CHANGE_TOL):
        """Minimise ``objective()`` over ``params`` by L-BFGS with a strong Wolfe line search.

        With ``back_off`` a trial point where the evidence cannot be factorised gets a large
        finite value (an infinity would break the line search's interpolation), so the search
        backs off; without it the error propagates."""
        opt = torch.optim.LBFGS(params, lr=1.0, max_iter=max_iter, history_size=history,
                                tolerance_grad=_GRAD_TOL, tolerance_change=change_tol,
                                line_search_fn="strong_wolfe")

        def closure():
            opt.zero_grad()
            try:
                J = objective()
            except NotPositiveDefiniteError:
                if not back_off:
                    raise
                J = None
            if J is None or not bool(torch.isfinite(J)):
                for q in params:
                    q.grad = torch.zeros_like(q)
                return torch.tensor(_FAILED, dtype=params[0].dtype)
            J.backward()
            return J

        opt.step(closure)

    def theta_step(self, u, G_axes, U_axes, logdet, coef=None):
        """Maximise the Laplace evidence at fixed ``u`` in the trust box.  Returns the new
        logarithms, ``b``, ``E`` and whether every parameter ended inside its box."""
        c = self.config
        names = self._free()
        with_b = not c.sparsity
        radius, unpack = self._trust_box(names, with_b)
        z = torch.zeros(len(radius), dtype=self.X.dtype, device=self.X.device,
                        requires_grad=True)

        unscaled = None
        if c.sparsity and c.smoothness and c.basis == "fourier":
            # u is fixed and l_f only rescales the Fourier columns: X D B^T once
            unscaled = self.design(u, GridFactor([a.unscaled(u.dtype, u.device)
                                                  for a in G_axes], c.shape))

        def objective():
            log, b = unpack(z)
            return -self.laplace_evidence(log, b, u, G_axes, U_axes, logdet, coef,
                                          unscaled)[0] / self.n

        if len(radius):
            try:  # a failed factorisation keeps the old theta for this iteration
                self._lbfgs([z], objective, c.theta_max_iter, 10, back_off=False)
                failed = not bool(torch.isfinite(z).all())
            except (NotPositiveDefiniteError, RuntimeError):
                failed = True
            if failed:
                z = torch.zeros_like(z)
        inside = self._resize_box(names + ["b"] * with_b, radius, z)
        with torch.no_grad():
            log, b = unpack(z.detach())
            E, b = self.laplace_evidence(log, b, u, G_axes, U_axes, logdet, coef)
        return {k: float(v) for k, v in log.items()}, float(b), float(E), inside

    # ------------------------------------------------------------ joint step
    def joint_step(self, G_axes, U_axes, W, index):
        """Fourier u-basis: the u-step and the theta-step as one L-BFGS over ``(v, theta)``.

        Minimises ``J(v, theta) = -log p(y | b + sqrt(rho) F_l v, l_f, s2) + |v|^2 / 2 +
        log|I + Phi_theta^T W Phi_theta| / 2`` with ``W`` frozen at the previous mode and
        theta (``b`` included) in the trust box.  Its stationary points are those of the
        alternation (at a mode the u-gradient vanishes, so moving theta at fixed ``v`` or at
        fixed ``u`` has the same first-order effect), but moving ``u`` with ``b`` and ``rho``
        follows the long ridge along which the alternation crawls (``b`` down, ``rho`` up as
        irrelevant regions are switched off, the evidence rising slowly): about 10 outer
        iterations instead of 30 to 60.  Started from the initial guesses it can fall into
        another basin (``l_f`` runs off while the noise is still large), hence the centred
        iterations first (:meth:`iterate`).
        """
        c, s = self.config, self.state
        names = self._free()
        radius, unpack = self._trust_box(names, with_b=True)
        rho0 = self.value("rho")
        U0 = _bind(U_axes, self.value("l"), self._one)
        v0 = self.whitened(U0, rho0, U_axes)
        logdet = None
        if W is not None:
            logdet = self._frozen_logdet(W, index, U_axes)
        v = v0.clone().requires_grad_(True)
        z = torch.zeros(len(radius), dtype=v.dtype, device=v.device, requires_grad=True)

        def objective(v, z):
            log, b = unpack(z)
            rho = torch.exp(log["rho"])
            U = _bind(U_axes, torch.exp(log["l"]), self._one)
            u = b + rho.sqrt() * U.adjoint(v)
            G = _bind(G_axes, torch.exp(log["lf"]), self._one) if c.smoothness else None
            value = log_evidence(self.design(u, G), self.y, torch.exp(log["noise"]))
            value = value - 0.5 * v @ v
            if logdet is not None:
                value = value - 0.5 * logdet(rho, U)
            return -value / self.n

        try:
            self._lbfgs([v, z], lambda: objective(v, z), c.u_max_iter, _JOINT_HISTORY,
                        change_tol=_JOINT_CHANGE_TOL)
            failed = not bool(torch.isfinite(z).all() and torch.isfinite(v).all())
        except (NotPositiveDefiniteError, RuntimeError):
            failed = True
        v, z = (v0, torch.zeros_like(z)) if failed else (v.detach(), z.detach())
        self._resize_box(names + ["b"], radius, z)
        with torch.no_grad():
            E = -float(objective(v, z)) * self.n
            log, b = unpack(z)
            U = _bind(U_axes, torch.exp(log["l"]), self._one)
            s.log = {k: float(val) for k, val in log.items()}
            coef = torch.exp(0.5 * log["rho"]) * U.spectral_scales() * v
        # b absorbs the constant (DC) coefficient of u - b: the closed-form b of Wu et al.
        # (NIPS 2014, suppl. Eq. 12) on the circle
        b = float(b) + float(coef[0]) / math.prod(math.sqrt(a.n_circle) for a in U_axes)
        coef[0] = 0.0
        B = GridFactor([a.unscaled(coef.dtype, coef.device) for a in U_axes], c.shape)
        s.u, s.u_coef, s.u_axes, s.b = b + B.adjoint(coef), coef, U_axes, b
        return E

    def embedded(self, W, index):
        """``W`` on the positions ``index`` as a (p, p) matrix, zero elsewhere."""
        if len(index) == self.p:
            return W
        full = W.new_zeros(self.p, self.p)
        full[index[:, None], index[None, :]] = W
        return full

    def _frozen_logdet(self, W, index, U_axes):
        """``logdet(rho, U) = log|I + Phi^T W Phi|`` with ``W`` frozen, for the theta-step
        and the joint step.  Dense u-basis: :func:`laplace_logdet` on the support.
        Fourier: ``W`` projected once on the unscaled basis, ``B^T W B`` (r x r), since
        ``Phi = sqrt(rho) B diag(scales_l)`` depends on theta only through its scales,
        bounded over the current trust box by their maxima (:class:`FrozenLaplaceLogdet`)."""
        c, s = self.config, self.state
        if c.basis == "dense":  # log|I + Phi^T W Phi| directly, on the support
            return lambda rho, U: laplace_logdet(rho.sqrt() * U.rows(index), W)
        B = GridFactor([a.unscaled(W.dtype, W.device) for a in U_axes], c.shape)
        W_r = B.congruence(self.embedded(W, index))
        W_r = 0.5 * (W_r + W_r.T)
        free = self._free()

        def log_range(name):
            low, high = c.bounds[name]
            step = self._radius(name) if name in free else 0.0
            return (math.exp(max(s.log[name] - step, low)),
                    math.exp(min(s.log[name] + step, high)))

        l_low, l_high = log_range("l")
        d_max = math.sqrt(log_range("rho")[1]) * kron_vectors(
            [a.largest_scales(l_low, l_high, W.dtype, W.device) for a in U_axes])
        frozen = FrozenLaplaceLogdet(W_r, d_max)
        return lambda rho, U: frozen(rho.sqrt() * U.spectral_scales())

    # ------------------------------------------------------------ outer step
    def iterate(self):
        """One outer iteration; returns the Laplace evidence ``E``.

        The paper's alternation: u-step, Laplace curvature at the mode, theta-step at fixed
        ``u``.  Once a theta-step (not the first) ends with every parameter inside its trust
        box, the hyperparameters have found their basin and the iterations become
        :meth:`joint_step` s, which follow the slow ridge of ``b`` and ``rho`` that the
        alternation crawls along.
        """
        c, s = self.config, self.state
        noise = self._t(self.value("noise"))
        G_axes = self.w_axes() if c.smoothness else None
        G = self.w_factor(self.value("lf"), G_axes) if c.smoothness else None
        if not c.sparsity:
            s.log, s.b, E, _ = self.theta_step(None, G_axes, None, None)
            s.u = torch.full((self.p,), s.b, dtype=self.X.dtype, device=self.X.device)
            return E
        rho = self.value("rho")
        U_axes = self.u_axes()
        U = _bind(U_axes, self.value("l"), self._one)
        if s.settled:
            index = torch.nonzero(self.support(s.u))[:, 0]
            W = (self.laplace_curvature(s.u, G, noise, index, U, rho)
                 if c.evidence == "laplace" else None)
            return self.joint_step(G_axes, U_axes, W, index)
        v, u = self.u_step(U, G, rho, noise, self.whitened(U, rho, U_axes))
        coef = None
        if c.basis == "fourier":
            # the coefficients of u - b stay fixed through the theta-step; b absorbs their
            # constant (DC) part, the closed-form b of Wu et al. (suppl. Eq. 12) on the circle
            coef = math.sqrt(rho) * U.spectral_scales() * v
            s.b += float(coef[0]) / math.prod(math.sqrt(a.n_circle) for a in U_axes)
            coef[0] = 0.0
            s.u_coef, s.u_axes = coef, U_axes
        s.u = u
        index = torch.nonzero(self.support(u))[:, 0]
        logdet = None
        # Fourier basis: the first theta-step, from the initial guesses, maximises the joint
        # density (the objective of Wu et al., NIPS 2014): a curvature at a mode found under
        # the initial noise guess is not worth its cost (a tenth of the 64 x 64 fit); the
        # Laplace term joins from the second
        if c.evidence == "laplace" and (s.steps > 0 or c.basis == "dense"):
            W = self.laplace_curvature(u, G, noise, index, U, rho)
            logdet = self._frozen_logdet(W, index, U_axes)
        s.log, s.b, E, inside = self.theta_step(u, G_axes, U_axes, logdet, coef)
        # joint steps: Fourier basis in float64 only.  In float32 the joint objective's
        # rounding (1e-7 of it) is at its stopping tolerance and its ridge moves wander (on
        # a 40-feature fit 3.4 posterior sd from float64, against 0.29 under the
        # alternation); the dense basis keeps the paper's alternation, whose joint step would
        # need an O(p^3) log-determinant per evaluation (measured 1.5-2x faster on
        # p <= 256, not adopted)
        s.settled = (inside and s.steps > 0 and c.basis == "fourier"
                     and self.X.dtype == torch.float64)
        s.steps += 1
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
    H = rho * U.congruence(solver.embedded(W, index))  # Phi^T W Phi, axis by axis
    H = 0.5 * (H + H.T) + torch.eye(H.shape[0], dtype=H.dtype, device=H.device)
    L_H, info = torch.linalg.cholesky_ex(H)
    if bool(info.any()):
        raise NotPositiveDefiniteError(
            "The Laplace Hessian of u is not positive definite at the final mode; use "
            "laplace_hessian='fisher'.")
    return v, L_H, U
