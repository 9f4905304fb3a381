"""Peak-memory estimates of the deep kernel process, checked before any torch work."""

from .._base import array_bytes, check_memory, rows_per_chunk

__all__ = ["check_fit_memory", "check_joint_memory", "sparse_fit_bytes"]

_EXACT_NOTE = (
    "the point solver is exact in the number of training rows P (no inducing-point "
    "approximation), so its memory grows as P^2 and its time as P^3"
)


def _fit_bytes(n_rows, n_layers, dtype):
    """Peak bytes of a fit on ``n_rows`` rows: ``14 + 12 L`` torch ``P x P`` buffers (the
    hidden Grams, their sum kernels, cached kernel matrices, Cholesky factors and inverses
    shared between sweeps, and the CARE solver's work arrays) and ``L + 1`` float64 numpy
    copies in ``gram_matrices_``.  The counts are peak resident sizes measured on fits of
    1500 and 2200 rows with 0 to 3 layers and every objective (13.4, 28.4, 39.4 and 52.4
    buffers for L = 0, 1, 2, 3)."""
    square = array_bytes(n_rows, n_rows, dtype=dtype)
    return (14 + 12 * n_layers) * square + (n_layers + 1) * array_bytes(n_rows, n_rows)


def _test_bytes(n_test, n_train, n_layers, dtype, numpy_copies=1):
    """Peak bytes of a joint prediction at ``n_test`` rows: ``5 + L`` torch ``n x n`` blocks
    (the test Gram of every layer, kept until the end, and the kernel, sum-kernel and
    symmetrised blocks of the layer being propagated; the eigendecomposition of
    ``sample_y``), ``numpy_copies`` float64 ``n x n`` results, and ``4 + 2 L`` ``n x P``
    cross blocks.  Measured (float64): 5.3, 7.7 and 9.7 ``n x n`` buffers for L = 0, 2, 4
    at 3000 test rows, for ``sample_y`` and ``predict(return_cov=True)`` alike."""
    square = array_bytes(n_test, n_test, dtype=dtype)
    return ((5 + n_layers) * square + numpy_copies * array_bytes(n_test, n_test)
            + (4 + 2 * n_layers) * array_bytes(n_test, n_train, dtype=dtype))


def sparse_fit_bytes(n_rows, n_features, n_targets, n_layers, n_inducing, chunk, dtype):
    """Peak bytes of a sparse fit.

    With ``L = n_layers + 1`` nodes, ``m`` inducing inputs and chunks of ``b`` rows, the
    torch buffers are ``(4L + 8) m^2`` (the inducing blocks ``S_j``, their factors, ``A_l``,
    ``E_l``, ``K_uu``, ``L_u^-1``, the row sums and the solvers' copies of the state),
    ``(6L + 4) b m`` (one chunk's autograd graph) and ``P (d + T)`` (the standardised
    rows); the float64 numpy copy of the standardised rows comes on top.
    """
    m, nodes = int(n_inducing), n_layers + 1
    rows = n_rows * (n_features + n_targets)
    torch_elements = (4 * nodes + 8) * m * m + (6 * nodes + 4) * chunk * m + rows
    return array_bytes(torch_elements, dtype=dtype) + array_bytes(rows)


def check_fit_memory(estimator, n_rows, n_features, n_targets, spec, device, dtype):
    """Refuse a fit whose peak memory exceeds what ``device`` has (``SKGPX_MEMORY_LIMIT``
    caps it), naming the way out; ``spec`` is :func:`skgpx.dkp._sparse._mode.inducing_spec`'s
    result (None in the exact mode, else ``m`` or the ``(m, d)`` inducing points)."""
    name, n_layers = type(estimator).__name__, estimator.n_layers
    n_inducing = spec if spec is None or isinstance(spec, int) else len(spec)
    if n_inducing is None:
        check_memory(
            _fit_bytes(n_rows, n_layers, dtype),
            what=(f"{name}.fit on {n_rows} rows ({n_rows} x {n_rows} Gram matrices, sum "
                  f"kernels and factors, {n_layers} hidden layers)"),
            way_out=(f"use the inducing-point mode (n_inducing=256, say), fit on fewer rows "
                     f"(a random subsample), or on a GPU (device='cuda'); {_EXACT_NOTE}"),
            device=device,
        )
        return
    chunk = rows_per_chunk(min(estimator.batch_size, n_rows), 4 * n_inducing, device)
    check_memory(
        sparse_fit_bytes(n_rows, n_features, n_targets, n_layers, n_inducing, chunk, dtype),
        what=(f"{name}.fit on {n_rows} rows with {n_inducing} inducing points ({n_inducing} "
              f"x {n_inducing} blocks, chunks of {chunk} rows, {n_layers} hidden layers)"),
        way_out=("use fewer inducing points (a smaller n_inducing or inducing_points), a "
                 "smaller batch_size, or a GPU (device='cuda')"),
        device=device,
    )


def check_joint_memory(estimator, joint, n_test, dtype):
    """Refuse a joint (``n x n``) prediction that cannot fit on ``device_``."""
    # float64 numpy n x n results: one per target of the covariance, one per layer of
    # predict_grams; for sample_y the work array of its eigendecomposition
    copies = {"sample_y": 1, "predict_grams(full=True)": estimator.n_layers + 1}.get(
        joint, estimator.y_mean_.shape[0])
    n_train = estimator._cache.inputs.shape[0]  # the inducing inputs in sparse mode
    check_memory(
        _test_bytes(n_test, n_train, estimator.n_layers, dtype, copies),
        what=(f"{type(estimator).__name__}.{joint} on {n_test} rows (joint {n_test} x "
              f"{n_test} covariances)"),
        way_out=("ask for fewer query rows per call (split X into chunks: joint draws or "
                 "covariances are then joint within each chunk only), use "
                 "predict(X, return_std=True) for marginals, or a GPU (device='cuda' at fit)"),
        device=estimator.device_,
    )
