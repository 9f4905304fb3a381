"""Matrix-free solves with kernel matrices: chunked operator, preconditioners, block CG.

:class:`KernelOperator` applies ``K_A = k(X, X) + diag(noise)`` without forming it, one
block of rows ``k(X_c, X)`` at a time.  :func:`block_cg` solves ``K_A V = R`` for all
columns of ``R`` at once (one operator product per iteration for the whole block), with
a Jacobi or a pivoted-Cholesky (Woodbury) preconditioner.  Used by the pathwise sampler
where its Cholesky factor would not fit (``solver="auto"``; see
``skgpx.pathwise._exact._solver``).
"""

import math
import numbers
from dataclasses import dataclass

import torch

from ._base import rows_per_chunk as _rows_per_chunk
from .kernels import split_white_noise, stationary_from_sklearn

__all__ = [
    "CGResult",
    "ConjugateGradientError",
    "JacobiPreconditioner",
    "KernelOperator",
    "PivotedCholeskyPreconditioner",
    "block_cg",
    "pivoted_cholesky",
]


class ConjugateGradientError(FloatingPointError):
    """Conjugate gradients met non-finite values or a matrix that is not numerically
    positive definite."""


_ADVICE = (
    "increase the noise on the diagonal (alpha or a WhiteKernel), use dtype='float64', "
    "or use the Cholesky solver"
)


def _as_2d(tensor, name, n):
    if tensor.ndim not in (1, 2) or tensor.shape[0] != n:
        raise ValueError(
            f"{name} must have shape ({n},) or ({n}, r); got {tuple(tensor.shape)}."
        )
    return tensor.unsqueeze(1) if tensor.ndim == 1 else tensor


class KernelOperator:
    """``K_A = k(X, X) + diag(noise)`` as a linear operator that is never formed.

    Products are computed over row chunks: for each block of rows ``c``,
    ``(K_A V)_c = k(X_c, X) V + noise_c * V_c``.  Each kernel block is evaluated once
    per product, so memory stays ``O(chunk * n + n * r)``.

    Parameters
    ----------
    kernel : skgpx.kernels.TorchKernel
        Evaluated as ``kernel(Xa, Xb, theta=theta, part=part)`` and
        ``kernel.diag(X, theta, part)``.
    X : Tensor of shape (n, d)
        Inputs; their dtype and device are the operator's.
    theta : Tensor, array-like or None
        Kernel hyperparameters (scikit-learn's log-space ``theta``); None uses the
        kernel's own.  Detached: products are not differentiable.
    noise : Tensor of shape (n,) or float
        Non-negative values added on the diagonal.
    part : {"signal", "full"}, default="signal"
        Passed to the kernel.  With ``"full"``, top-level ``WhiteKernel`` noise, which
        cross evaluations ``k(X_c, X)`` leave out, is put back on the diagonal.
    rows_per_chunk : int, default=None
        Rows per kernel block; None gives
        ``skgpx._base.rows_per_chunk(8192, n, X.device)`` (one block of about 8 MB of
        float64 on the CPU, 256 MB on CUDA).

    Attributes
    ----------
    noise : Tensor of shape (n,)
    shift : Tensor of shape (n,)
        Everything on the diagonal that the row blocks ``k(X_c, X)`` do not hold:
        ``noise`` plus, for ``part="full"``, the white noise.  The pivoted-Cholesky
        preconditioner uses it as its diagonal ``D``.
    """

    def __init__(self, kernel, X, theta, noise, *, part="signal", rows_per_chunk=None):
        if X.ndim != 2 or not X.is_floating_point():
            raise ValueError(f"X must be a 2-D floating tensor; got shape {tuple(X.shape)}.")
        n = X.shape[0]
        if rows_per_chunk is None:
            rows_per_chunk = _rows_per_chunk(8192, n, X.device)
        if int(rows_per_chunk) != rows_per_chunk or rows_per_chunk < 1:
            raise ValueError(f"rows_per_chunk={rows_per_chunk!r} must be an integer >= 1.")
        self.kernel, self.X, self.part = kernel, X, part
        self.rows_per_chunk = int(rows_per_chunk)
        if theta is None:
            theta = kernel.theta_tensor(X.device, X.dtype)
        theta = theta.detach() if torch.is_tensor(theta) else theta
        self.theta = torch.as_tensor(theta, dtype=X.dtype, device=X.device)
        noise = torch.as_tensor(noise, dtype=X.dtype, device=X.device).detach()
        if noise.ndim > 1 or (noise.ndim == 1 and noise.shape[0] != n):
            raise ValueError(
                f"noise must be a scalar or have shape ({n},); got {tuple(noise.shape)}."
            )
        if not bool(torch.isfinite(noise).all()) or bool((noise < 0).any()):
            raise ValueError("noise must be finite and non-negative.")
        self.noise = noise.expand(n).clone()
        with torch.no_grad():
            self._kernel_diag = kernel.diag(X, self.theta, part)
            # The diagonal of the cross evaluations k(X_c, X) misses what k(X) puts on
            # the diagonal only (WhiteKernel for part="full"); adding that difference to
            # the shift keeps products, rows and diagonal() one consistent matrix.
            cross = torch.empty_like(self._kernel_diag)
            for start in range(0, n, self.rows_per_chunk):
                block = X[start : start + self.rows_per_chunk]
                cross[start : start + block.shape[0]] = self._block(block, block.clone()).diagonal()
            self._cross_diag = cross
            self.shift = self.noise + (self._kernel_diag - cross)
            self._fast = self._stationary_form()

    def _stationary_form(self):
        """``(name, left, right)`` for a signal ``[ConstantKernel *] RBF | Matern`` (nu in
        3/2, 5/2, inf), else None.

        Kernel blocks are then one GEMM with two extra columns,
        ``[x/l, -|x/l|^2/2, 1] . [y/l, 1, -|y/l|^2/2] = -|x - y|^2 / (2 l^2)``, and one
        in-place pass for the profile: the norms are computed once, and no temporary
        (c x n) tensors are allocated, which made the generic evaluation several times
        slower than the product with V.  Inputs are centred first (the kernel is
        translation invariant) to keep the cancellation error, about
        ``eps * max |x/l|^2`` per entry, small.  A top-level WhiteKernel adds nothing
        to cross evaluations, so only the signal matters; its scale goes into the
        products.  Matern-1/2, ``exp(-r)``, is left to the generic path: it is linear
        in ``r = sqrt(r^2)``, which turns the ``1e-14`` rounding of ``r^2`` at
        coincident points into a ``1e-7`` error.
        """
        try:
            theta = self.theta.detach().cpu().double().numpy()
            signal, _ = split_white_noise(self.kernel.kernel.clone_with_theta(theta))
            name, scale, length_scale = stationary_from_sklearn(signal)
        except (AttributeError, ValueError, TypeError):
            return None
        if name not in ("rbf", "matern32", "matern52"):
            return None
        length_scale = torch.as_tensor(length_scale, dtype=self.dtype, device=self.device)
        scaled = (self.X - self.X.mean(0)) / length_scale
        half_norm = 0.5 * (scaled * scaled).sum(1, keepdim=True)
        ones = torch.ones_like(half_norm)
        self._scale = float(scale)
        return (
            name,
            torch.cat([scaled, -half_norm, ones], 1).contiguous(),
            torch.cat([scaled, ones, -half_norm], 1).contiguous(),
        )

    @property
    def shape(self):
        n = self.X.shape[0]
        return (n, n)

    @property
    def dtype(self):
        return self.X.dtype

    @property
    def device(self):
        return self.X.device

    def _block(self, Xa, Xb):
        return self.kernel(Xa, Xb, theta=self.theta, part=self.part)

    def _rows_block(self, start, stop, buffers):
        """``k(X[start:stop], X)``; written into ``buffers`` on the stationary fast path."""
        if self._fast is None:
            return self._block(self.X[start:stop], self.X)
        name, left, right = self._fast
        out = torch.mm(left[start:stop], right.T, out=buffers[0][: stop - start])
        out.clamp_(max=0.0)  # -r^2 / 2, up to the rounding of the expansion
        if name == "rbf":
            return out.exp_()
        z = out.mul_(-6.0 if name == "matern32" else -10.0).sqrt_()  # z = sqrt(2 nu) r
        e = torch.neg(z, out=buffers[1][: stop - start]).exp_()
        if name == "matern52":
            z.addcmul_(z, z, value=1.0 / 3.0)
        return z.add_(1.0).mul_(e)

    def matmul(self, V, *, stop=None):
        """``K_A V`` for ``V`` of shape (n,) or (n, r), computed chunk by chunk.

        ``stop``: only the first ``stop`` rows of the product (a cheap timing of it).
        Returns a tensor of the shape of ``V`` (``stop`` rows with ``stop``).
        """
        vector = V.ndim == 1
        V = _as_2d(V, "V", self.shape[0])
        n, size = self.shape[0], min(self.rows_per_chunk, self.shape[0])
        rows = n if stop is None else max(0, min(int(stop), n))
        out = torch.empty((rows, V.shape[1]), dtype=V.dtype, device=V.device)
        with torch.no_grad():
            buffers = None
            if self._fast is not None:  # reused by every chunk: no allocation in the loop
                buffers = torch.empty(2 if self._fast[0] in ("matern32", "matern52") else 1,
                                      size, n, dtype=self.dtype, device=self.device)
                V_kernel = V * self._scale
            for start in range(0, rows, self.rows_per_chunk):
                end = min(start + self.rows_per_chunk, rows)
                block = self._rows_block(start, end, buffers)
                torch.matmul(block, V if buffers is None else V_kernel, out=out[start:end])
            out.addcmul_(self.shift[:rows].unsqueeze(1), V[:rows])
        return out.squeeze(1) if vector else out

    __matmul__ = matmul

    def diagonal(self, *, include_shift=True):
        """Diagonal of ``K_A`` (of the kernel blocks alone with ``include_shift=False``): (n,)."""
        return self._kernel_diag + self.noise if include_shift else self._cross_diag.clone()

    def rows(self, index, *, include_shift=True):
        """Rows ``K_A[index, :]`` of shape (len(index), n).

        ``index`` is an integer tensor, list or slice.  ``include_shift=False`` leaves out
        :attr:`shift` (what the pivoted-Cholesky preconditioner factorises).
        """
        n = self.shape[0]
        index = torch.arange(n, device=self.device)[index].reshape(-1)
        with torch.no_grad():
            out = self._block(self.X[index], self.X)
            if include_shift:
                out[torch.arange(len(index), device=self.device), index] += self.shift[index]
        return out


def pivoted_cholesky(diagonal, rows, rank, *, tol=0.0):
    """Greedy pivoted partial Cholesky factor ``L`` with ``L L^T ~ A``.

    Each step takes the largest remaining diagonal entry ``i`` of the residual
    ``A - L L^T`` as pivot and adds the column

    .. math:: l = (A_{:, i} - L L_{i, :}^T) / \\sqrt{d_i}, \\qquad d \\leftarrow d - l^2

    (Harbrecht, Peters & Schneider 2012; Gardner et al. 2018, Alg. 2).  The trace of
    the residual, ``sum(d)``, never increases.  Cost ``O(n k^2)`` plus ``k`` rows.

    Parameters
    ----------
    diagonal : Tensor of shape (n,)
        Diagonal of the symmetric positive semi-definite matrix ``A``.
    rows : callable
        ``rows(idx)`` with ``idx`` an integer tensor of shape (1,) returns ``A[idx, :]``,
        of shape (1, n).
    rank : int
        Largest number of columns ``k``.
    tol : float, default=0.0
        Stop early once ``trace(A - L L^T) <= tol * trace(A)``.

    Returns
    -------
    L : Tensor of shape (n, k), ``k <= rank``
        Fewer columns than ``rank`` when ``tol`` is met or the residual is zero.
    """
    n = diagonal.shape[0]
    if int(rank) != rank or rank < 0:
        raise ValueError(f"rank={rank!r} must be an integer >= 0.")
    rank = min(int(rank), n)
    remaining = diagonal.detach().clone()
    if not bool(torch.isfinite(remaining).all()):
        raise ValueError("The diagonal holds non-finite values.")
    L = torch.zeros(n, rank, dtype=diagonal.dtype, device=diagonal.device)
    is_pivot = torch.zeros(n, dtype=torch.bool, device=diagonal.device)
    total = float(remaining.clamp(min=0).sum())
    k = 0
    while k < rank:
        pivot = torch.argmax(remaining)
        value = float(remaining[pivot])
        if not value > 0:  # the residual is (numerically) zero: nothing left to factor
            break
        row = rows(pivot.reshape(1)).reshape(-1).to(L.dtype)
        column = (row - L[:, :k] @ L[pivot, :k]) / math.sqrt(value)
        # Earlier pivots' residual rows are exactly zero; rounding would make them not.
        column.masked_fill_(is_pivot, 0.0)
        L[:, k] = column
        is_pivot[pivot] = True
        remaining.sub_(column * column).clamp_(min=0).masked_fill_(is_pivot, 0.0)
        k += 1
        if float(remaining.sum()) <= tol * total:
            break
    return L[:, :k]


class JacobiPreconditioner:
    """``P = diag(K_A)``: ``P^{-1} R = R / diag(K_A)``.

    Parameters
    ----------
    diagonal : Tensor of shape (n,)
        Positive diagonal of ``K_A`` (``KernelOperator.diagonal()``).
    """

    def __init__(self, diagonal):
        if not bool(torch.isfinite(diagonal).all()) or not bool((diagonal > 0).all()):
            raise ValueError("The Jacobi preconditioner needs a finite, positive diagonal.")
        self.inverse_diagonal = 1.0 / diagonal.detach()

    def __call__(self, R):
        """``P^{-1} R`` for ``R`` of shape (n, r)."""
        return R * self.inverse_diagonal.unsqueeze(1)


class PivotedCholeskyPreconditioner:
    """``P = L L^T + D`` with ``L`` a rank-k pivoted Cholesky factor of the kernel
    matrix and ``D = diag(noise)`` (Gardner et al. 2018), inverted by Woodbury's identity

    .. math::

        P^{-1} = D^{-1} - D^{-1} L C^{-1} L^T D^{-1}, \\qquad C = I + L^T D^{-1} L,

    with the k x k capacitance ``C`` (eigenvalues >= 1) Cholesky-factorised once.
    Setup ``O(n k^2)``; each application ``O(n k r)``.  Applications are backward
    stable (``||P out - R|| ~ eps ||P|| ||out||``) even for a noise many orders below
    ``||L||^2``.

    Parameters
    ----------
    L : Tensor of shape (n, k)
        Low-rank factor, e.g. from :func:`pivoted_cholesky`.
    noise : Tensor of shape (n,) or float
        Positive diagonal ``D``.

    See Also
    --------
    PivotedCholeskyPreconditioner.from_operator : build from a :class:`KernelOperator`.
    """

    def __init__(self, L, noise):
        noise = torch.as_tensor(noise, dtype=L.dtype, device=L.device).expand(L.shape[0])
        if not bool(torch.isfinite(noise).all()) or not bool((noise > 0).all()):
            raise ValueError(
                "The pivoted-Cholesky preconditioner needs a positive noise on every "
                "diagonal entry; use the Jacobi preconditioner instead."
            )
        if not bool(torch.isfinite(L).all()):
            raise ValueError("The low-rank factor L holds non-finite values.")
        self.L = L.detach()
        self.inverse_noise = 1.0 / noise.detach()
        capacitance = self.L.T @ (self.L * self.inverse_noise.unsqueeze(1))
        capacitance.diagonal().add_(1.0)
        self.capacitance_factor = torch.linalg.cholesky(capacitance)

    @classmethod
    def from_operator(cls, operator, rank, *, tol=0.0):
        """Rank-``rank`` pivoted Cholesky of the kernel part of ``operator``, with its
        :attr:`KernelOperator.shift` as ``D``."""
        L = pivoted_cholesky(
            operator.diagonal(include_shift=False),
            lambda index: operator.rows(index, include_shift=False),
            rank,
            tol=tol,
        )
        return cls(L, operator.shift)

    def __call__(self, R):
        """``P^{-1} R`` for ``R`` of shape (n, r)."""
        scaled = R * self.inverse_noise.unsqueeze(1)
        if self.L.shape[1] == 0:
            return scaled
        inner = torch.cholesky_solve(self.L.T @ scaled, self.capacitance_factor)
        return scaled.sub_((self.L @ inner).mul_(self.inverse_noise.unsqueeze(1)))


@dataclass
class CGResult:
    """Outcome of :func:`block_cg`.

    Attributes
    ----------
    solution : Tensor of shape (n, r) (or (n,) for a vector right-hand side)
    n_iter : int
        Iterations (operator products after the initial residual); 0 when the start
        already met ``tol``.
    converged : bool
        Every column's true residual met ``||b_j - A x_j|| <= tol ||b_j||``.
    relative_residuals : Tensor of shape (r,)
        ``||b_j - A x_j|| / ||b_j||`` (0 for zero columns): the true residuals when
        every column stopped at ``tol``, else the recursively updated ones.
    """

    solution: torch.Tensor
    n_iter: int
    converged: bool
    relative_residuals: torch.Tensor


def _iterate(apply, precondition, X, residual, converged, relative, denominator, tol, budget,
             report):
    """Up to ``budget`` PCG iterations from the current ``residual``, updating ``X`` and
    ``residual`` in place; ``report(n_iter, relative)`` after each; returns
    ``(n_iter, converged, relative)``."""
    r, n_iter = X.shape[1], 0
    n_done = int(converged.sum())
    if n_done == r or budget == 0:
        return 0, converged, relative
    Z = precondition(residual)
    direction = Z.clone()
    rz = (residual * Z).sum(0)
    while n_iter < budget:
        n_iter += 1
        active = ~converged
        if n_done == 0:
            AP = apply(direction)
        else:  # converged columns leave the (expensive) operator product
            columns = active.nonzero().squeeze(1)
            AP = torch.zeros_like(direction)
            AP[:, columns] = apply(direction[:, columns])
        curvature = (direction * AP).sum(0)
        # Division guards: frozen columns get step 0 whatever their p^T A p is.
        alpha = torch.where(active, rz / torch.where(active, curvature, 1.0), 0.0)
        X.addcmul_(alpha.unsqueeze(0), direction)
        residual.addcmul_(alpha.unsqueeze(0), AP, value=-1.0)
        relative = torch.where(
            active, torch.linalg.vector_norm(residual, dim=0) / denominator, relative
        )
        bad = active & ~(torch.isfinite(relative) & (curvature > 0) & (rz > 0))
        converged = converged | (relative <= tol)
        n_done, n_bad = torch.stack([converged.sum(), bad.sum()]).tolist()  # one sync
        if n_bad:
            columns = bad.nonzero().squeeze(1).tolist()
            raise ConjugateGradientError(
                f"Conjugate gradients broke down at iteration {n_iter}: non-finite "
                f"residuals or p^T A p <= 0 in column(s) {columns[:10]} (the matrix is "
                f"not numerically positive definite); {_ADVICE}."
            )
        report(n_iter, relative)
        if n_done == r:
            break
        Z = precondition(residual)
        rz_new = (residual * Z).sum(0)
        still = ~converged
        beta = torch.where(still, rz_new / torch.where(still, rz, 1.0), 0.0)
        # Out of place: a preconditioner may hand back its input (the residual).
        direction = torch.addcmul(Z, beta.unsqueeze(0), direction)
        rz = torch.where(still, rz_new, rz)
    return n_iter, converged, relative


def block_cg(matmul, rhs, *, preconditioner=None, tol=1e-4, max_iter=1000, x0=None,
             callback=None):
    """Preconditioned conjugate gradients for ``A X = B``, all columns at once.

    One operator product per iteration serves the whole block, while each column keeps
    its own step sizes (batched CG, as GPyTorch's mBCG; Gardner et al. 2018):

    .. math::

        \\alpha_j = \\frac{r_j^T z_j}{p_j^T A p_j},\\quad
        x_j \\mathrel{+}= \\alpha_j p_j,\\quad r_j \\mathrel{-}= \\alpha_j A p_j,\\quad
        z_j = P^{-1} r_j,\\quad
        p_j = z_j + \\frac{r_j^T z_j}{r_{j,\\text{old}}^T z_{j,\\text{old}}} p_j.

    A column is frozen once ``||r_j|| <= tol ||b_j||`` (its step sizes are set to zero
    and it leaves the operator products), so round-off cannot undo it.  When every
    column has stopped, the true residual ``B - A X`` is computed (one more product)
    and decides ``converged``: the updated residuals drift from it by about
    ``eps * cond(A)``, which in float32 can exceed ``tol``.  Columns that missed restart
    once from their true residual, aiming at ``tol / 10``, and are checked again; a
    float32 solve whose attainable accuracy is above ``tol`` then ends unconverged
    before ``max_iter``.  Never warns: the caller decides, from ``converged`` and
    ``relative_residuals``, whether to raise a ``ConvergenceWarning``.

    Parameters
    ----------
    matmul : callable or KernelOperator
        ``matmul(V)`` returns ``A V`` for ``V`` of shape (n, m), ``A`` symmetric
        positive definite; an object with a ``matmul`` method is used through it.
    rhs : Tensor of shape (n, r) or (n,)
        Right-hand sides ``B``; zero columns give zero solutions.
    preconditioner : callable, default=None
        ``preconditioner(R)`` returns ``P^{-1} R`` (symmetric positive definite ``P``);
        None for plain CG.
    tol : float, default=1e-4
        Relative residual at which a column stops.
    max_iter : int, default=1000
        Largest number of iterations (operator products with the search directions;
        the initial residual for ``x0`` and the final check add one product each).
    x0 : Tensor of the shape of ``rhs``, default=None
        Starting point (warm start); zeros when None.
    callback : callable, default=None
        ``callback(n_iter, relative_residuals)`` after every iteration, with the
        iterations so far and the (recursively updated) relative residual of each
        column, a tensor of shape (r,): for progress bars and cost estimates.

    Returns
    -------
    CGResult

    Raises
    ------
    ConjugateGradientError
        A ``FloatingPointError`` when residuals become non-finite or ``p^T A p <= 0``
        (the matrix is not numerically positive definite, e.g. in float32 with a tiny
        noise).
    """
    if not (isinstance(tol, numbers.Real) and tol >= 0):
        raise ValueError(f"tol={tol!r} must be a number >= 0.")
    if int(max_iter) != max_iter or max_iter < 0:
        raise ValueError(f"max_iter={max_iter!r} must be an integer >= 0.")
    apply = matmul.matmul if hasattr(matmul, "matmul") else matmul
    precondition = preconditioner if preconditioner is not None else (lambda R: R)
    n = rhs.shape[0]
    with torch.no_grad():
        B = _as_2d(rhs.detach(), "rhs", n)
        if not bool(torch.isfinite(B).all()):
            raise ValueError("rhs contains NaN or infinite values.")
        b_norm = torch.linalg.vector_norm(B, dim=0)
        zero = b_norm == 0
        denominator = torch.where(zero, torch.ones_like(b_norm), b_norm)
        if x0 is None:
            X = torch.zeros_like(B)
            residual = B.clone()
        else:
            X = _as_2d(x0.detach(), "x0", n).to(B.dtype).clone()
            if X.shape != B.shape or not bool(torch.isfinite(X).all()):
                raise ValueError(f"x0 must be finite with the shape of rhs {tuple(rhs.shape)}.")
            X[:, zero] = 0.0
            residual = B - apply(X)
        relative = torch.linalg.vector_norm(residual, dim=0) / denominator
        if not bool(torch.isfinite(relative).all()):
            raise ConjugateGradientError(f"The initial residual is not finite; {_ADVICE}.")
        converged = zero | (relative <= tol)
        n_iter, inner_tol = 0, tol
        for attempt in range(2):
            offset = n_iter

            def report(k, values):
                if callback is not None:
                    callback(offset + k, values)

            done, converged, relative = _iterate(apply, precondition, X, residual, converged,
                                                 relative, denominator, inner_tol,
                                                 max_iter - n_iter, report)
            n_iter += done
            if not done or not bool(converged.all()):
                break
            # Updated residuals drift from B - A X by ~ eps * cond(A): check the truth.
            residual = B - apply(X)
            relative = torch.linalg.vector_norm(residual, dim=0) / denominator
            converged = relative <= tol  # zero columns: X and the residual are exactly 0
            if bool(converged.all()) or n_iter == max_iter:
                break
            # One restart of the columns that missed, from their true residual, aiming
            # lower so that the drift of the restart stays below tol.
            inner_tol = 0.1 * tol
        solution = X.squeeze(1) if rhs.ndim == 1 else X
    return CGResult(solution, n_iter, bool(converged.all()), relative)
