"""Scoring over Dask collections: predictions and posterior function draws, row block by
row block, on Dask workers.

The fitted estimator (or the drawn functions) becomes one task of the graph, so a
``distributed`` scheduler ships it to each worker once, not once per block; each block
of rows is scored where it lives and only the results move.  Fitting on Dask
collections is a method of the estimator itself (``PathwiseGPSampler`` in sparse mode;
see the "Scaling out" page of the documentation).

Requires the ``dask`` extra: ``pip install skgpx[dask]``.
"""

import numpy as np

from ._dask import as_dask_array, is_dask_collection

__all__ = ["evaluate_functions", "predict_blocks", "worker_config"]

# glibc malloc settings for worker processes: keep freed memory up to 128 MiB (instead of
# distributed's 64 KiB) and serve blocks up to 32 MiB (glibc's largest mmap threshold) from
# the heap.  Setting either variable freezes glibc's adaptive mmap threshold, so the
# trim threshold alone would leave it at 128 KiB, where every chunk-sized temporary of a
# block computation is a fresh mmap whose pages fault in again.
_MALLOC_ENVIRON = {"MALLOC_TRIM_THRESHOLD_": str(2**27),
                   "MALLOC_MMAP_THRESHOLD_": str(2**25)}


def worker_config():
    """Dask configuration under which new workers compute skgpx blocks at full speed.

    ``distributed``'s nannies start each worker process with
    ``MALLOC_TRIM_THRESHOLD_=65536`` (so that freed memory goes back to the operating
    system at once).  That also freezes glibc's mmap threshold at 128 KiB, and the
    chunk-sized temporaries of a block computation (8 MB each) are then fresh pages every
    time: a worker computed the same sparse-bound block 1.3-1.5x slower than the client
    process.  The returned settings add ``MALLOC_TRIM_THRESHOLD_=134217728`` (128 MiB) and
    ``MALLOC_MMAP_THRESHOLD_=33554432`` (32 MiB, glibc's largest) to
    ``distributed.nanny.pre-spawn-environ``, the variables a nanny sets *before* it
    starts a worker (glibc reads them when the process starts: variables given to
    ``LocalCluster(env=...)`` arrive too late).

    Returns
    -------
    config : dict
        For :func:`dask.config.set`, around the creation of the cluster::

            with dask.config.set(skgpx.distributed.worker_config()):
                cluster = LocalCluster(n_workers=2, threads_per_worker=1)

        On a real cluster put the same two variables into the workers' Dask configuration
        (``distributed.nanny.pre-spawn-environ`` in a YAML file, or
        ``DASK_DISTRIBUTED__NANNY__PRE_SPAWN_ENVIRON__MALLOC_TRIM_THRESHOLD_=134217728``
        and the same for ``MALLOC_MMAP_THRESHOLD_=33554432``).  They only matter where
        glibc is the C library (Linux).
    """
    import dask
    import distributed  # noqa: F401  (registers distributed's defaults, which are kept)

    current = dict(dask.config.get("distributed.nanny.pre-spawn-environ"))
    return {"distributed.nanny.pre-spawn-environ": {**current, **_MALLOC_ENVIRON}}


def _rows(X):
    """A 2-D Dask array with one column block (DataFrames: row lengths computed)."""
    import dask.array as da

    X = as_dask_array(X if is_dask_collection(X) else da.from_array(np.asarray(X)), "X")
    if X.ndim != 2:
        raise ValueError(f"X must be 2-D (n_samples, n_features); got {X.ndim} dimension(s).")
    return X.rechunk({1: -1})


def _as_frame(block, columns):
    if columns is None:
        return block
    import pandas as pd

    return pd.DataFrame(block, columns=columns)


def _call(block, target, method, kwargs, columns, block_info=None):
    if method is None:  # PathwiseFunctions: aligned to the block's place in X
        offset = block_info[0]["array-location"][0][0] if block_info else 0
        Xt, _ = target._as_tensor(block)
        return target._evaluate_aligned(Xt, offset)
    values = getattr(target, method)(_as_frame(block, columns), **kwargs)
    if isinstance(values, tuple):
        raise TypeError(f"{method}(...) returned a tuple; predict_blocks maps methods that "
                        "return one array (call it once per output, e.g. without return_std).")
    return np.asarray(values)


def _map(target, X, method, kwargs, columns):
    import dask

    X = _rows(X)
    probe = _call(np.asarray(X[:1].compute()), target, method, kwargs, columns)
    shipped = dask.delayed(target, pure=True)  # one key: sent to each worker once
    rows = X.chunks[0]
    meta = np.empty((0,) * probe.ndim, dtype=probe.dtype)  # no trial call on a Delayed
    if probe.ndim == 1:
        return X.map_blocks(_call, shipped, method, kwargs, columns, drop_axis=1,
                            chunks=(rows,), dtype=probe.dtype, meta=meta)
    tail = tuple((size,) for size in probe.shape[1:])
    new_axis = list(range(2, probe.ndim)) or None
    return X.map_blocks(_call, shipped, method, kwargs, columns, new_axis=new_axis,
                        chunks=(rows,) + tail, dtype=probe.dtype, meta=meta)


def predict_blocks(estimator, X, method="predict", **kwargs):
    """``estimator.<method>(X)`` as a lazy Dask array, computed block by block.

    Parameters
    ----------
    estimator : fitted estimator
        Any skgpx (or scikit-learn) estimator; it is pickled into the graph once.  A model
        fitted on a GPU is unpickled on a CPU-only worker onto its CPU.
    X : dask.array.Array, dask.dataframe.DataFrame or array-like of shape (n, n_features)
        Rows to score; its row blocks are the unit of work.
    method : str, default="predict"
        ``"predict"``, ``"predict_proba"``, ``"predict_log_proba"``, ``"decision_function"``,
        ``"sample_y"`` ... any method returning one array whose first axis is the rows.
    **kwargs
        Passed to the method (e.g. ``n_samples`` and ``random_state`` of ``sample_y``).

    Returns
    -------
    values : dask.array.Array
        Row blocks as ``X``'s; the trailing axes as the method's output.

    Notes
    -----
    ``sample_y`` draws jointly *within* a block only: with a fixed ``random_state`` each
    block gets its own joint draw, so values in different blocks are not one joint
    sample.  For draws that are the same functions wherever they are evaluated, draw
    them once with ``PathwiseGPSampler.sample_functions`` and use
    :func:`evaluate_functions`.
    """
    columns = getattr(estimator, "feature_names_in_", None)
    columns = list(columns) if columns is not None else None
    return _map(estimator, X, method, kwargs, columns)


def evaluate_functions(functions, X):
    """Evaluate posterior function draws over the row blocks of ``X`` (lazy).

    Parameters
    ----------
    functions : skgpx.PathwiseFunctions
        From :meth:`skgpx.PathwiseGPSampler.sample_functions`; pickled into the graph once.
    X : dask.array.Array, dask.dataframe.DataFrame or array-like of shape (n, n_features)

    Returns
    -------
    values : dask.array.Array of shape (n, n_samples) or (n, n_targets, n_samples)
        Each path is a fixed function: a row's value does not depend on the block it is
        in or on the other rows (the same bits as ``functions(X)`` in one process).
    """
    return _map(functions, X, None, {}, None)
