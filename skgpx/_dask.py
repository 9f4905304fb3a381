"""Dask plumbing shared by the families: recognising Dask input, checking it without
materialising it, and summing a function's results over row blocks held by workers.

Dask is an optional dependency (``pip install skgpx[dask]``); nothing here imports it
before a Dask collection reaches us.
"""

import operator

import numpy as np
import torch

from ._base import check_magnitude


def is_dask_collection(obj):
    """True for a Dask array, DataFrame or Series (without importing Dask otherwise)."""
    module = type(obj).__module__ or ""
    if not module.startswith("dask"):
        return False
    import dask

    return dask.is_dask_collection(obj)


def as_dask_array(obj, name):
    """A 1-D or 2-D Dask array from a Dask array/DataFrame/Series (row lengths known)."""
    import dask.array as da

    if isinstance(obj, da.Array):
        return obj
    if hasattr(obj, "to_dask_array"):  # dask DataFrame or Series
        return obj.to_dask_array(lengths=True)
    raise TypeError(f"{name} must be a Dask array or DataFrame (or both X and y numpy-like); "
                    f"got {type(obj).__name__}.")


def dask_training_data(X, y):
    """Validate Dask training data lazily; returns ``(X, Y, feature_names, y_was_1d)``.

    ``X`` becomes a float64 Dask array with one column block, ``Y`` a 2-D float64 Dask
    array with ``X``'s row blocks.  Shapes, dtypes and row counts are checked here
    without computing anything; finiteness is checked by :func:`dask_summaries`.
    """
    import dask.array as da

    if not is_dask_collection(X):
        X = da.from_array(np.asarray(X))
    if not is_dask_collection(y):
        y = da.from_array(np.asarray(y))
    names = getattr(X, "columns", None)
    feature_names = None
    if names is not None and len(names) and all(isinstance(c, str) for c in names):
        feature_names = np.asarray(list(names), dtype=object)
    X, y = as_dask_array(X, "X"), as_dask_array(y, "y")
    if X.ndim != 2:
        raise ValueError(f"Expected a 2-D X of shape (n_samples, n_features); got {X.ndim} "
                         "dimension(s). Reshape your data.")
    for what, arr in (("X", X), ("y", y)):
        if arr.dtype.kind not in "biuf":
            raise ValueError(f"{what} must be numeric; got dtype {arr.dtype}.")
    if y.ndim not in (1, 2):
        raise ValueError(f"y must be 1-D or 2-D; got {y.ndim} dimensions.")
    if any(np.isnan(c) for c in X.chunks[0] + y.chunks[0]):
        raise ValueError("The row blocks of X and y must have known sizes "
                         "(dask.dataframe: use to_dask_array(lengths=True)).")
    if X.shape[0] != y.shape[0]:
        raise ValueError(f"X and y have different numbers of rows: {X.shape[0]} != "
                         f"{y.shape[0]}.")
    if X.shape[0] < 2:
        raise ValueError(f"Found {X.shape[0]} sample(s) while a minimum of 2 is required.")
    y_was_1d = y.ndim == 1
    Y = y[:, None] if y_was_1d else y
    X = X.astype(np.float64).rechunk({1: -1})
    Y = Y.astype(np.float64).rechunk((X.chunks[0], -1))
    return X, Y, feature_names, y_was_1d


def dask_class_labels(X, y, multi_class):
    """Lazily validated Dask inputs of a classifier and its latent label matrix.

    Returns ``(X, Y, classes, feature_names)``: ``X`` as :func:`dask_training_data` makes
    it, ``classes`` the sorted labels (found on the workers; only they reach the client)
    and ``Y`` the float64 0/1 matrix of the latent problems with ``X``'s row blocks: one
    column (``y == classes[1]``) for two classes, else one column per class.
    """
    import dask.array as da

    if not is_dask_collection(y):
        y = da.from_array(np.asarray(y))
    y = as_dask_array(y, "y")
    if y.ndim != 1:
        raise ValueError(f"y must be 1-D class labels; got {y.ndim} dimensions.")
    X, _, feature_names, _ = dask_training_data(X, da.zeros(y.shape[0], chunks=y.chunks))
    classes = np.asarray(da.unique(y).compute())
    if len(classes) < 2:
        raise ValueError("PathwiseGPClassifier requires 2 or more distinct classes; got "
                         f"{len(classes)} class (only class {classes[0]} is present)")
    columns = classes[1:] if len(classes) == 2 else classes

    def encode(block):
        return (np.asarray(block)[:, None] == columns[None, :]).astype(np.float64)

    Y = y.rechunk(X.chunks[0]).map_blocks(encode, dtype=np.float64, new_axis=1,
                                          chunks=(X.chunks[0], (len(columns),)))
    return X, Y, classes, feature_names


def dask_summaries(X, Y, dtype=torch.float64):
    """One pass over the data: column means of X, means and standard deviations of Y.

    Raises ``ValueError`` for NaN or infinity anywhere, and for values above the largest
    magnitude supported in ``dtype`` (as :func:`skgpx._base.check_magnitude` does in
    memory; both checked on the workers in the same pass).
    """
    import dask

    finite_X, finite_Y = da_all_finite(X), da_all_finite(Y)
    ok_X, ok_Y, x_mean, y_mean, y_std, x_max, y_max = dask.compute(
        finite_X, finite_Y, X.mean(axis=0), Y.mean(axis=0), Y.std(axis=0),
        abs(X).max(), abs(Y).max())
    for what, ok in (("X", ok_X), ("y", ok_Y)):
        if not ok:
            raise ValueError(f"Input {what} contains NaN or infinity.")
    check_magnitude(np.array([x_max]), "X", dtype)
    check_magnitude(np.array([y_max]), "y", dtype)
    return np.asarray(x_mean), np.asarray(y_mean), np.asarray(y_std)


def da_all_finite(arr):
    import dask.array as da

    return da.isfinite(arr).all()


def _tree_sum(parts):
    """Pairwise sums of delayed values: depth log2(blocks), no client-side gather."""
    import dask

    while len(parts) > 1:
        pairs = [dask.delayed(operator.add)(a, b) for a, b in zip(parts[::2], parts[1::2])]
        parts = pairs + ([parts[-1]] if len(parts) % 2 else [])
    return parts[0]


class _BlockTask:
    """What every block's task needs besides its rows: shipped to each worker once."""

    def __init__(self, function, args, alpha, dtype, device):
        self.function, self.args, self.alpha = function, args, alpha
        self.dtype, self.device = dtype, device

    def __call__(self, X_block, Y_block):
        device = self.device
        if device.startswith("cuda") and not torch.cuda.is_available():
            device = "cpu"  # a CPU-only worker computes on its CPU
        args = [_moved(a, device) for a in self.args]
        X = torch.as_tensor(np.ascontiguousarray(X_block), dtype=self.dtype, device=device)
        Y = torch.as_tensor(np.ascontiguousarray(Y_block), dtype=self.dtype, device=device)
        alpha = torch.full((X.shape[0],), self.alpha, dtype=self.dtype, device=device)
        return _moved(self.function(X, Y, alpha, *args), "cpu")


def _moved(value, device):
    """Tensors (also inside tuples and objects with ``to``) moved to ``device``."""
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, tuple):
        return tuple(_moved(v, device) for v in value)
    if hasattr(value, "to_device"):
        return value.to_device(device)
    return value


class DaskRows:
    """Training rows held by Dask (workers of a ``distributed`` cluster, or this process
    under Dask's local schedulers), with the interface of ``skgpx._inducing._rows.Rows``.

    The blocks are persisted once; :meth:`map_sum` ships the function and its small
    arguments to each worker once, applies it to every block where the block lives and
    adds the results up in a tree, so only the sums reach the client.

    Parameters
    ----------
    X, Y : dask.array.Array
        From :func:`dask_training_data` (``Y`` already standardised if it should be).
    alpha : float
        Noise variance added to every row (Dask fits take a scalar ``alpha``).
    dtype : torch.dtype
    device : str
        Where blocks are computed (a worker without CUDA falls back to its CPU).
    """

    def __init__(self, X, Y, alpha, dtype, device):
        import dask

        self.X, self.Y = dask.persist(X, Y)
        self.alpha, self.dtype, self.device = float(alpha), dtype, str(device)
        self.n = X.shape[0]
        self._blocks = list(zip(self.X.to_delayed().ravel(), self.Y.to_delayed().ravel()))

    @property
    def n_targets(self):
        return self.Y.shape[1]

    def map_sum(self, function, *args):
        """``function(X_b, Y_b, alpha_b, *args)`` summed over the row blocks."""
        import dask

        task = dask.delayed(_BlockTask(function, _moved(args, "cpu"), self.alpha, self.dtype,
                                       self.device), pure=True)
        parts = [task(xb, yb) for xb, yb in self._blocks]
        (total,) = dask.compute(_tree_sum(parts))
        return _moved(total, self.device if torch.cuda.is_available() else "cpu")
