"""What prediction needs from a fitted sDRD model, and its posterior draws.

A :class:`FittedPosterior` holds, in internal units, the trimmed scale ``sqrt(g(u*))``, the
:class:`~skgpx.drd._model.Conditional` of the whitened coefficients ``a`` and the fitted
smoothness factor ``G``; :class:`LatentLaplace` holds the Laplace posterior of ``u`` in
whitened coordinates, ``v ~ N(v*, H_v^-1)`` with ``H_v = I + Phi_A^T W Phi_A``, and the
fitted u-basis.  Both keep the factors built in ``fit``, so prediction factorises nothing.
"""

from dataclasses import dataclass

import torch

from ..linalg import solve_lower
from ._bases import GridFactor
from ._model import Conditional, link


@dataclass
class FittedPosterior:
    scale: torch.Tensor  # (p,) sqrt(g(u*)), zero off the support
    cond: Conditional
    G: GridFactor  # None without smoothness (K_f = I)

    def design(self, X):
        """``X D G`` for rows ``X`` in internal units."""
        Z = X * self.scale
        return Z if self.G is None else self.G.forward(Z)

    def coef_variance(self):
        """``diag(D G Sigma_a G^T D)``: (p,)."""
        G, cond = self.G, self.cond
        back = (lambda c: c) if G is None else G.adjoint
        if cond.dual:
            rows = back(solve_lower(cond.L, cond.Z))  # (n, p)
            prior = torch.ones_like(self.scale) if G is None else G.gram_diagonal()
            diag = prior - (rows**2).sum(0)
        else:
            eye = torch.eye(cond.L.shape[0], dtype=cond.L.dtype, device=cond.L.device)
            rows = back(solve_lower(cond.L, eye))  # (m, p): rows of (G L^-T)^T
            diag = cond.noise_var * (rows**2).sum(0)
        return self.scale**2 * torch.clamp(diag, min=0.0)

    def coef_covariance(self):
        """``Sigma_w = D G Sigma_a G^T D``: (p, p)."""
        G = self.G
        S = self.cond.covariance()
        if G is not None:
            S = G.adjoint(G.adjoint(S).T)  # G S G^T, S symmetric
        return self.scale[:, None] * S * self.scale[None, :]

    def coef_draws(self, prior_draws, noise_draws):
        """Draws of the coefficients ``w = D G a``: (S, p)."""
        a = self.cond.draw(prior_draws, noise_draws).T
        return self.scale * (a if self.G is None else self.G.adjoint(a))


@dataclass
class LatentLaplace:
    v: torch.Tensor  # (r,) whitened mode
    L_H: torch.Tensor  # (r, r) Cholesky factor of H_v
    b: float
    rho: float
    U: GridFactor  # u = b + sqrt(rho) U v
    support: torch.Tensor  # (p,) bool

    def std(self):
        """``sqrt(diag(Phi H_v^-1 Phi^T))``: (p,)."""
        Phi = self.rho**0.5 * self.U.adjoint(
            torch.eye(len(self.v), dtype=self.v.dtype, device=self.v.device)).T  # (p, r)
        return torch.linalg.solve_triangular(self.L_H, Phi.T, upper=False).pow(2).sum(0).sqrt()

    def draws(self, normals):
        """Latent draws ``u = b + sqrt(rho) F (v* + L_H^-T xi)`` for ``xi`` (r, S): (S, p)."""
        v = self.v[:, None] + torch.linalg.solve_triangular(self.L_H.T, normals, upper=True)
        return self.b + self.rho**0.5 * self.U.adjoint(v.T)


def conditional_given_u(X, y, u, support, link_name, noise, G):
    """A :class:`FittedPosterior` for one latent ``u`` (for ``u_uncertainty`` draws)."""
    post = FittedPosterior((link(u, link_name) * support).sqrt(), None, G)
    post.cond = Conditional.condition(post.design(X), y, noise)
    return post
