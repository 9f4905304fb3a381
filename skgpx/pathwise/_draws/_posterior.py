"""Building posterior draws: Matheron's rule, the weight-space baseline, the exact prior,
and exact draws at the query rows for kernels without random features.

Matheron's rule (Wilson et al., 2020, eq. 5 and 8) for the exact GP, per path ``s``:

.. math::

    f_s \\sim GP(0, k), \\quad \\varepsilon_s \\sim N(0, \\Sigma_\\varepsilon), \\quad
    v_s = K_A^{-1} (y - f_s(X) - \\varepsilon_s), \\quad
    (f \\mid y)_s(\\cdot) = f_s(\\cdot) + k(\\cdot, X) v_s.

One Cholesky factor of ``K_A`` (computed in ``fit``) serves every path and target.
Random draws come from one CPU generator: first what all targets share (frequencies and
phases), then one seed from which each target gets its own stream (:class:`TargetStreams`)
for its prior weights ``W`` and noise ``eps``.  So target ``t``'s draws do not depend on how
many targets there are, as with scikit-learn's ``sample_y``, which draws target by target.
"""

from dataclasses import dataclass

import torch

from ..._base import check_draw_memory, check_memory, cpu_generator, rows_per_chunk, standard_normal
from ...kernels import concatenate_rows
from ...linalg import cholesky_solve, jittered_cholesky
from .._functions import PathwiseFunctions
from ._features import draw_random_features


@dataclass
class Posterior:
    """Everything a draw needs, prior (``X is None``) or fitted; tensors on one device."""

    kernel: object  # TorchKernel of the full kernel
    signal_kernel: object  # sklearn kernel without its top-level WhiteKernel terms
    theta: torch.Tensor
    X: torch.Tensor = None  # (n, d) training inputs
    Y: torch.Tensor = None  # (n, T) normalised targets
    L: torch.Tensor = None  # chol(K_A) (exact mode, Cholesky solver)
    cg: object = None  # CGSolver (exact mode, CG solver)
    inducing: object = None  # SparseFactors (sparse mode)
    noise_var: torch.Tensor = None  # (n,) alpha + white noise: the diagonal of Sigma_eps
    shift: torch.Tensor = None  # (d,) centre of the random features (mean of the inputs)
    y_mean: torch.Tensor = None  # (T,)
    y_std: torch.Tensor = None  # (T,)
    n_targets: int = 1
    squeeze: bool = True
    n_features_in: int = 1

    def streams(self, generator):
        """Per-target normal streams seeded from ``generator``, on this posterior's device."""
        return TargetStreams(generator, self.n_targets, self.theta.dtype, self.theta.device)

    @property
    def fitted(self):
        """A posterior (False: the prior of an unfitted estimator)."""
        return self.X is not None or self.inducing is not None

    @property
    def centers(self):
        """Centres of the canonical-basis update: Z in sparse mode, else X."""
        return self.inducing.Z if self.inducing is not None else self.X

    def solve(self, rhs):
        """``K_A^{-1} rhs`` (exact mode) by the fitted Cholesky factor or by CG."""
        flat = rhs.reshape(rhs.shape[0], -1)
        if self.L is not None:
            out = cholesky_solve(self.L, flat)
        else:
            out, _ = self.cg.solve(flat, what="the posterior draws' update")
        return out.reshape(rhs.shape)

    def update(self, prior_at_centers, streams):
        """Update weights ``v`` (N, S, T) of Matheron's rule from the prior paths at the
        centres: ``K_A^{-1} (y - f(X) - eps)`` (exact) or ``Kzz^{-1} (u - f(Z))`` (sparse).

        The noise ``eps`` (exact) or the inducing draw ``xi`` (sparse) is drawn here, from
        the per-target ``streams``."""
        z = streams.normal(prior_at_centers.shape[:-1])
        if self.inducing is not None:
            return self.inducing.update(prior_at_centers, z)
        return self.solve(self.Y[:, None, :] - prior_at_centers
                          - z * self.noise_var.sqrt()[:, None, None])


class TargetStreams:
    """Standard normal draws with the targets on the last axis, one generator per target.

    One seed is drawn from ``generator`` (whatever the number of targets); target ``t``'s
    generator is seeded with ``seed + t``.  Every call draws the same shape from each
    target's generator, so target ``t`` sees the same numbers in a fit with more targets.
    Draws are made in float64 on the CPU (see :func:`skgpx._base.standard_normal`).
    """

    def __init__(self, generator, n_targets, dtype, device):
        seed = int(torch.randint(2**62, (1,), generator=generator))
        self.generators = [cpu_generator(seed + t) for t in range(n_targets)]
        self.dtype, self.device = dtype, device

    def normal(self, shape):
        """Draws of shape ``(*shape, n_targets)``."""
        return torch.stack([standard_normal(shape, g, self.dtype, self.device)
                            for g in self.generators], dim=-1)


def _prior_at(features, W, X, n_samples, n_targets, batch_size):
    """Prior path values ``phi(X) W`` at the training inputs: (n, S, T), row-chunked."""
    B, F, K = W.shape
    step = rows_per_chunk(batch_size, B * F, X.device)
    # Chunks are written into one preallocated output: collecting small per-chunk results
    # between the large temporaries fragments the heap and inflates RSS by gigabytes.
    out = X.new_empty(X.shape[0], B, K)
    for i in range(0, X.shape[0], step):
        out[i : i + step] = (features(X[i : i + step]) @ W).transpose(0, 1)
    return out.reshape(X.shape[0], n_samples, n_targets)


def _weight_space(features, W, eps, post):
    """Posterior weights of Bayesian linear regression on the random features.

    The weight-space baseline of Wilson et al. (ICML 2020); it shows variance starvation
    when ``n >> F``.

    Primal (``F < n``): ``w = mu + L_A^{-T} z`` with ``A = Phi^T S^{-1} Phi + I``.
    Dual (``F >= n``): ``w = z + Phi^T (Phi Phi^T + S)^{-1} (y - Phi z - eps)``.
    ``z`` are the prior weights ``W`` of shape (B, F, K); both give the same Gaussian.
    This baseline holds ``phi(X)`` for every basis at once: (B, n, F).
    """
    B, F, K = W.shape
    n, T = post.Y.shape
    Yk = post.Y.repeat(1, K // T)  # column k of the weights belongs to target k % T
    phi = features(post.X)
    if F < n:
        scaled = phi / post.noise_var[:, None]
        A = phi.transpose(1, 2) @ scaled
        A.diagonal(dim1=1, dim2=2).add_(1.0)
        L_A, _ = jittered_cholesky(A, name="weight-space precision matrix")
        mu = cholesky_solve(L_A, scaled.transpose(1, 2) @ Yk)
        return mu + torch.linalg.solve_triangular(L_A.transpose(1, 2), W, upper=True)
    G = phi @ phi.transpose(1, 2)
    G.diagonal(dim1=1, dim2=2).add_(post.noise_var)
    L_G, _ = jittered_cholesky(G, name="weight-space Gram matrix")
    e = eps.reshape(n, K) if B == 1 else eps.permute(1, 0, 2)  # match W's columns
    return W + phi.transpose(1, 2) @ cholesky_solve(L_G, Yk - phi @ W - e)


def draw_functions(post, n_samples, generator, *, n_features, feature_map, shared_basis,
                   method, batch_size, frequency_sampling="iid"):
    """Draw ``n_samples`` function paths from ``post`` (the prior if not ``post.fitted``)."""
    S, T, d = n_samples, post.n_targets, post.n_features_in
    B = 1 if shared_basis else S
    dtype, device = post.theta.dtype, post.theta.device
    shift = post.shift if post.shift is not None else torch.zeros(d, dtype=dtype, device=device)
    features = draw_random_features(post.signal_kernel, n_features, feature_map, B, d, shift,
                                    generator, dtype, device,
                                    qmc=frequency_sampling == "qmc")
    streams = post.streams(generator)
    # column j T + t of a basis's weights belongs to target t
    F = features.n_features(d)
    W = streams.normal((B, F, S // B)).reshape(B, F, S * T // B)
    centers = update = None
    if post.fitted:
        if method == "pathwise":
            centers = post.centers
            f_c = _prior_at(features, W, centers, S, T, batch_size)
            update = post.update(f_c, streams)
        else:
            n = post.X.shape[0]
            eps = streams.normal((n, S)) * post.noise_var.sqrt()[:, None, None]
            W = _weight_space(features, W, eps, post)
    return PathwiseFunctions(
        features=features, prior_weights=W, kernel=post.kernel, theta=post.theta,
        centers=centers, update_weights=update, y_mean=post.y_mean, y_std=post.y_std,
        n_samples=S, n_targets=T, squeeze=post.squeeze, n_features_in=d,
        batch_size=batch_size,
    )


def check_draws_memory(post, n_samples, n_train, n_query, exact, what, *, n_features,
                       shared_basis, device):
    """Refuse draws whose outputs and buffers cannot fit (before any draw): per draw
    and target, the prior weights (up to 2 ``n_features`` random features), about 4
    vectors over the centres (prior values, noise, update, solve) and 4 over the query
    rows (values, noise, the layout copy, the numpy result); the features themselves
    when each draw has its own basis (``shared_basis=False``).  ``exact``: draws from the
    joint prior (:func:`draw_exact`), without random features."""
    n_random = 0 if exact else 2 * n_features
    per_draw = post.n_targets * (n_random + 4 * n_train + 4 * n_query)
    if not exact and not shared_basis:
        per_draw += n_random * (post.n_features_in + 1)
    way_out = "ask for fewer draws (n_samples) per call"
    if n_query:
        way_out += (", or call it on chunks of X, or use sample_functions with fewer "
                    "draws and evaluate its functions on X chunk by chunk")
    else:
        way_out += " (draw the functions in several calls), or fewer n_features"
    check_draw_memory(n_samples, per_draw, what=what, way_out=way_out, device=device)


def draw_exact(post, Xq, n_samples, generator, jitter):
    """Exact draws at ``Xq`` via the joint prior over ``[X; Xq]``: (n*, S, T).

    ``O((n + n*)^3)``; the joint prior covariance always gets ``jitter * mean(diag)``.
    """
    S, T = n_samples, post.n_targets
    centers = post.centers
    Z = Xq if not post.fitted else concatenate_rows(centers, Xq)
    K = post.kernel(Z, part="signal")
    scale = float(K.diagonal().mean().abs()) or 1.0
    L_joint, _ = jittered_cholesky(K, base_jitter=jitter * scale, jitter=max(jitter, 1e-12),
                                   name="joint prior covariance")
    streams = post.streams(generator)
    f = (L_joint @ streams.normal((Z.shape[0], S)).reshape(-1, S * T)).reshape(-1, S, T)
    if not post.fitted:
        return post.y_mean + post.y_std * f
    n = centers.shape[0]
    V = post.update(f[:n], streams).reshape(n, S * T)
    cross = post.kernel(Xq, centers, part="signal")
    return post.y_mean + post.y_std * (f[n:] + (cross @ V).reshape(-1, S, T))


def draw_at_queries(post, mean, cov, prior_variance, n_samples, generator, jitter):
    """Exact joint draws at the query rows from the posterior moments there: (n*, S, T).

    ``mean + L z`` with ``L L^T = cov + jitter * mean(prior_variance) I``, the route of
    scikit-learn's ``sample_y`` (which draws from ``predict(return_cov=True)``), for
    kernels that have no random-feature map.  The jitter is the one the exact prior
    always gets, relative to the prior variance at the query rows (the posterior
    covariance can be nearly zero there), and grows as :func:`jittered_cholesky` grows
    it where round-off left the covariance indefinite.

    Parameters
    ----------
    post : Posterior
        For its output scaling (``y_mean``, ``y_std``) and per-target streams.
    mean : Tensor of shape (n*, T)
        Posterior mean of the latent function, in the fitted units.
    cov : Tensor of shape (n*, n*) or (n*, n*, T)
        Its posterior covariance: one for all targets, or one per target.
    prior_variance : Tensor of shape (n*,)
        Prior variance of the latent function at the query rows (the jitter's scale).
    """
    S, T = n_samples, post.n_targets
    scale = float(prior_variance.mean().abs()) if prior_variance.numel() else 1.0
    batched = cov.dim() == 3
    matrix = cov.permute(2, 0, 1) if batched else cov
    what = "posterior" if post.fitted else "prior"
    L, _ = jittered_cholesky(matrix, base_jitter=jitter * (scale or 1.0),
                             jitter=max(jitter, 1e-12),
                             name=f"{what} covariance at the query rows",
                             advice="check that the kernel is positive semi-definite "
                                    "(PairwiseKernel's 'sigmoid' and 'additive_chi2' are "
                                    "not), increase jitter, or draw at fewer or less "
                                    "clustered query rows")
    z = post.streams(generator).normal((mean.shape[0], S))  # (n*, S, T)
    if batched:
        f = torch.einsum("tij,jst->ist", L, z)
    else:
        f = (L @ z.reshape(-1, S * T)).reshape(-1, S, T)
    return post.y_mean + post.y_std * (mean[:, None, :] + f)


def check_exact_at_queries_memory(post, n_query, n_train, per_target, device, dtype):
    """Refuse exact draws at ``n_query`` rows (:func:`draw_at_queries`) whose dense
    buffers cannot fit, before any work: the posterior covariance and its factor (one
    per target when ``per_target``), the prior covariance, and the cross-covariance with
    the ``n_train`` training (or inducing) rows and its solve."""
    itemsize = 4 if dtype == torch.float32 else 8
    n_cov = post.n_targets if per_target else 1
    n_bytes = itemsize * ((2 + 2 * n_cov) * n_query * n_query + 2 * n_query * n_train)
    check_memory(
        n_bytes, device=device,
        what=(f"sample_y on {n_query} rows by exact joint draws at the query rows (the "
              f"kernel {post.signal_kernel} has no random-feature map; dense "
              f"{n_query} x {n_query} covariance matrices)"),
        way_out=("draw at fewer query rows per call (draws of separate calls are "
                 "independent, not one joint draw), or use a kernel with a random-feature "
                 "map (sums and products of RBF, Matern, RationalQuadratic, DotProduct and "
                 "ConstantKernel terms), whose draws are linear in the query rows"))
