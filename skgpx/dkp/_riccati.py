"""Riccati and Lyapunov solvers of the deep kernel process point solver.

The layer update of Aitchison et al.'s point solver (deep kernel processes, ICML 2021;
deep kernel machines, JMLR 2023) solves ``0 = 2 alpha G - G U G + Q``: the continuous
algebraic Riccati equation (CARE) with ``A = alpha I``, ``B = I`` and ``R = U^-1``.  torch
has no Schur decomposition, so everything reduces to symmetric eigenproblems through
Cholesky congruences, on CPU and CUDA alike.
"""

import math

import torch

from ..linalg import NotPositiveDefiniteError, try_cholesky

__all__ = [
    "CARENoSolutionError",
    "CARESolveError",
    "solve_care",
    "solve_care_closed_form",
    "solve_care_kleinman",
    "solve_lyapunov_symmetrizable",
]


class CARESolveError(NotPositiveDefiniteError):
    """A Riccati equation has no (numerically) positive definite stabilising solution."""


class CARENoSolutionError(CARESolveError):
    """``U`` is positive definite and the equation provably has no PD solution.

    With ``U`` PD every symmetric solution is ``C^-T Z C^-1`` with ``Z`` a function of
    ``Zhat`` (they commute), so the closed form sees them all; other solvers need not
    be tried.
    """


def _sym(matrix):  # exactly symmetric: rounding makes products like G U G drift
    return torch.add(matrix, matrix.transpose(-2, -1)).mul_(0.5)


def _all_finite(*tensors):
    # one reduction per tensor (NaN and inf propagate into the sum); the elementwise test
    # only runs to rule out an overflowing sum of finite entries
    return all(
        bool(torch.isfinite(t.sum())) or bool(torch.isfinite(t).all()) for t in tensors
    )


def _chol_or_raise(matrix, what):
    factor = try_cholesky(matrix)
    if factor is None:
        raise CARESolveError(f"The {what} is not positive definite.")
    return factor


def solve_care_closed_form(alpha, U, Q):
    """Stabilising solution of ``0 = 2 alpha G - G U G + Q`` for positive definite ``U``.

    With ``U = C C^T``, ``G = C^-T Z C^-1`` turns the equation into
    ``Z^2 = 2 alpha Z + Zhat``, ``Zhat = C^T Q C = W diag(mu) W^T``, whose root with
    ``alpha I - U G`` stable is ``Z = W diag(alpha + sqrt(alpha^2 + mu)) W^T``.

    Parameters
    ----------
    alpha : float
        Scalar drift (positive, zero or negative).
    U, Q : Tensor of shape (P, P)
        Symmetric; ``U`` positive definite, ``Q`` normally positive semi-definite.

    Returns
    -------
    G : Tensor of shape (P, P)
        Symmetric positive definite solution.

    Raises
    ------
    CARESolveError
        If ``U`` is not positive definite, a value is non-finite, ``alpha^2 + mu < 0``
        or some ``alpha + sqrt(alpha^2 + mu) <= 0`` (``G`` not positive definite).
    """
    if not _all_finite(U, Q):
        raise CARESolveError("The Riccati coefficients contain NaN or infinite values.")
    # cholesky and eigh read one triangle only: no explicit symmetrisation needed
    C = _chol_or_raise(U, "Riccati quadratic coefficient U")
    mu, W = torch.linalg.eigh(C.transpose(-2, -1) @ Q @ C)
    disc = alpha * alpha + mu
    if float(disc.min()) < 0:
        raise CARENoSolutionError("The Riccati equation has no real solution (alpha^2 + mu < 0).")
    root = torch.sqrt(disc)
    # for alpha < 0, alpha + sqrt(alpha^2 + mu) cancels when mu << alpha^2; the equal
    # mu / (sqrt(alpha^2 + mu) - alpha) keeps full relative precision
    z = mu / (root - alpha) if alpha < 0 else alpha + root
    if not _all_finite(z):
        raise CARESolveError("The Riccati solution is not finite.")
    if float(z.min()) <= 0:
        raise CARENoSolutionError("The Riccati equation has no positive definite solution.")
    V = torch.linalg.solve_triangular(C.transpose(-2, -1), W, upper=True)  # C^-T W
    G = _sym((V * z) @ V.transpose(-2, -1))
    if not _all_finite(G):
        raise CARESolveError("The Riccati solution is not finite.")
    return G


def _congruence_eig(P, U, what):
    # P = L L^T and L^T U L = V diag(s) V^T give P U = W diag(s) W^-1 with W = L V
    L = _chol_or_raise(_sym(P), what)
    s, V = torch.linalg.eigh(_sym(L.transpose(-2, -1) @ U @ L))
    return L, s, V


def _lyapunov_from_eig(L, s, V, R, shift):
    # diagonal in the eigenbasis W = L V of P U; W^-1 = V^T L^-1 needs no inverse
    M = torch.linalg.solve_triangular(L, R, upper=False)
    M = torch.linalg.solve_triangular(L, M.transpose(-2, -1), upper=False)  # L^-1 R L^-T
    Y = (V.transpose(-2, -1) @ M @ V) / (s[:, None] + s[None, :] - 2.0 * shift)
    W = L @ V
    return _sym(W @ Y @ W.transpose(-2, -1))


def solve_lyapunov_symmetrizable(P, U, R, shift):
    """Solve ``A X + X A^T = -R`` for ``A = shift I - P U``, ``P`` SPD, ``U`` symmetric.

    ``P U = W diag(s) W^-1`` with ``W = L V`` (``P = L L^T``, ``L^T U L = V diag(s) V^T``),
    so ``X = W Y W^T`` with ``Y_ij = (W^-1 R W^-T)_ij / (s_i + s_j - 2 shift)``.

    Parameters
    ----------
    P, U, R : Tensor of shape (n, n)
        ``P`` symmetric positive definite, ``U`` and ``R`` symmetric.
    shift : float
        Diagonal shift of ``A``.

    Returns
    -------
    X : Tensor of shape (n, n)
        Symmetric solution.

    Raises
    ------
    CARESolveError
        If ``P`` is not positive definite or ``A`` is not stable (``min(s) <= shift``;
        stability is what makes ``X`` PSD for a PSD ``R``).
    """
    L, s, V = _congruence_eig(P, U, "Lyapunov coefficient P")
    if float(s.min()) - shift <= 0:
        raise CARESolveError("The Lyapunov operator shift I - P U is not stable.")
    return _lyapunov_from_eig(L, s, V, R, shift)


def _care_residual(alpha, U, Q, G):
    GUG = _sym(G @ U @ G)
    return _sym(Q + 2.0 * alpha * G) - GUG, GUG


def solve_care_kleinman(alpha, U, Q, initial=None, *, reg=0.0, max_iter=200, tol=1e-10):
    """Shifted Kleinman-Newton iteration for ``0 = 2 alpha G - G U G + Q``.

    ``F(G) = Q + 2 alpha G - G U G`` has derivative ``F'(G)[D] = A D + D A^T``,
    ``A = alpha I - G U``.  Each step solves ``(A - lam I) D + D (A - lam I)^T = -F(G)``
    and takes ``G + t D`` with the first ``t = 1, 1/2, ...`` that is positive definite.
    ``lam = max(reg * rho * rate, alpha - min(s) + 1e-3 * rate)``, with ``s`` the
    eigenvalues of ``G U``, ``rate = |alpha| + max|s|`` and ``rho <= 1`` the relative
    residual.  With ``reg = 0`` it is 0 (exact Newton, quadratic convergence) once
    ``A`` is stable, and otherwise shifts ``A`` just into stability.

    Parameters
    ----------
    alpha, U, Q : float, Tensor of shape (P, P), Tensor of shape (P, P)
        Scalar drift and symmetric coefficients (``U`` need not be definite).
    initial : Tensor of shape (P, P), optional
        Positive definite start; default ``1e-3 sqrt(max|Q| / max|U|) I``.  Starting
        below the solution matters for an indefinite ``U``, where the iteration can
        run off to infinity from above.
    reg : float
        Extra damping far from the solution (0: none, the fastest in tests).
    max_iter : int
        Maximum number of steps.
    tol : float
        Stop when ``max|F(G)| <= tol * max(max|Q|, max|G U G|)``; floored at 100 times
        the machine epsilon of the dtype, so that float32 can converge.

    Returns
    -------
    G : Tensor of shape (P, P)
        The solution, or if not converged the iterate with the smallest ``max|F|``.
    n_iter : int
        Number of steps taken.
    converged : bool
        Whether the tolerance was met.

    Raises
    ------
    CARESolveError
        If an input is non-finite or ``initial`` is not positive definite.
    """
    if not _all_finite(U, Q) or (initial is not None and not _all_finite(initial)):
        raise CARESolveError("The Riccati coefficients or start contain NaN or infinite values.")
    U, Q = _sym(U), _sym(Q)
    q_max, u_max = float(Q.abs().max()), float(U.abs().max())
    if initial is None:
        g0 = (q_max / u_max) ** 0.5 if q_max > 0 and u_max > 0 else 1.0
        initial = 1e-3 * g0 * torch.eye(U.shape[-1], dtype=U.dtype, device=U.device)
    G = _sym(initial)
    L, s, V = _congruence_eig(G, U, "Kleinman starting point")
    R, GUG = _care_residual(alpha, U, Q, G)
    tol = max(tol, 100 * torch.finfo(U.dtype).eps)
    best = (float("inf"), G)
    for it in range(max_iter + 1):
        rho = float(R.abs().max()) / (max(q_max, float(GUG.abs().max())) or 1.0)
        if rho <= tol:
            return G, it, True
        if not math.isfinite(rho):
            break  # overflow: stop with the best finite iterate
        best = min(best, (float(R.abs().max()), G), key=lambda pair: pair[0])
        if it == max_iter:
            break
        rate = abs(alpha) + float(s.abs().max())
        lam = max(reg * min(1.0, rho) * rate, alpha - float(s.min()) + 1e-3 * rate)
        D = _lyapunov_from_eig(L, s, V, R, alpha - lam)
        t, L_new = 1.0, None
        for _ in range(30):
            L_new = try_cholesky(_sym(G + t * D))
            if L_new is not None:
                break
            t *= 0.5
        if L_new is None:
            break  # no positive definite step along D
        G, L = _sym(G + t * D), L_new
        R, GUG = _care_residual(alpha, U, Q, G)
        s, V = torch.linalg.eigh(_sym(L.transpose(-2, -1) @ U @ L))
    return best[1], it, False


def solve_care(alpha, U, Q, *, method="auto", initial=None, reg=0.0, max_iter=200, tol=1e-10):
    """Positive definite solution of ``0 = 2 alpha G - G U G + Q``.

    Parameters
    ----------
    alpha, U, Q : float, Tensor of shape (P, P), Tensor of shape (P, P)
        Scalar drift and symmetric coefficients.
    method : {"auto", "closed_form", "kleinman"}
        "closed_form" needs a positive definite ``U``, "kleinman" only positive
        definite iterates, "auto" tries the closed form, then Kleinman.  An
        unconverged Kleinman run from ``initial`` is retried from the default start;
        one that breaks down (overflow, no PD step) before ``max_iter`` raises.
    initial, reg, max_iter, tol
        See :func:`solve_care_kleinman`.

    Returns
    -------
    G : Tensor of shape (P, P)
        The solution.
    info : dict
        ``{"method": "closed_form" | "kleinman", "n_iter": int, "converged": bool}``;
        an unconverged Kleinman result is returned for the caller to warn about.

    Raises
    ------
    CARESolveError
        If the chosen method fails ("auto": if both fail), e.g. when ``U`` is
        indefinite and no positive definite solution exists.
    """
    if method not in ("auto", "closed_form", "kleinman"):
        raise ValueError(f"Unknown CARE method {method!r}.")
    if method != "kleinman":
        try:
            G = solve_care_closed_form(alpha, U, Q)
            return G, {"method": "closed_form", "n_iter": 0, "converged": True}
        except CARESolveError as error:
            if method == "closed_form" or isinstance(error, CARENoSolutionError):
                raise
    opts = dict(reg=reg, max_iter=max_iter, tol=tol)
    try:
        G, n_iter, converged = solve_care_kleinman(alpha, U, Q, initial, **opts)
        n_last = n_iter
        if not converged and initial is not None:  # a start above the solution can diverge
            G, n_last, converged = solve_care_kleinman(alpha, U, Q, None, **opts)
            n_iter += n_last
        if not converged and n_last < max_iter:
            raise CARESolveError("the Kleinman iteration broke down before max_iter")
    except CARESolveError as err:
        raise CARESolveError(
            f"The Riccati equation could not be solved ({err}): increase jitter, "
            "noise_variance, dof or mirror_reg."
        ) from err
    return G, {"method": "kleinman", "n_iter": n_iter, "converged": converged}
