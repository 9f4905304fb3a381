"""Initial inducing inputs: given ones checked, or k-means++ seeding on a subset of the rows."""

import numpy as np
from sklearn.utils import check_array


def initial_inducing_points(X, n_inducing, rng, max_rows=4096):
    """``n_inducing`` rows of X picked by k-means++ seeding (a random subset when m >= n/2).

    k-means++ runs on a random subset of at most ``max(max_rows, 10 m)`` rows: its cost
    is ``O(n m d log m)``, and on millions of rows the subset gives the same spread.
    """
    from sklearn.cluster import kmeans_plusplus

    n = X.shape[0]
    m = min(int(n_inducing), n)
    if 2 * m >= n:
        return np.array(X[np.sort(rng.choice(n, size=m, replace=False))])
    rows = min(n, max(max_rows, 10 * m))
    # np.asarray gathers only the subset of a Dask array
    subset = np.asarray(X if rows == n else X[np.sort(rng.choice(n, size=rows, replace=False))])
    centers, _ = kmeans_plusplus(subset, n_clusters=m, random_state=rng)
    return np.array(centers)


def starting_inducing_inputs(inducing_points, n_inducing, X, rng):
    """The inducing inputs a sparse fit starts from: ``inducing_points`` checked against the
    training rows ``X``, or ``n_inducing`` of them (:func:`initial_inducing_points`)."""
    if inducing_points is None:
        return initial_inducing_points(X, n_inducing, rng)
    Z = check_array(inducing_points, dtype=np.float64, input_name="inducing_points")
    if Z.shape[1] != X.shape[1]:
        raise ValueError(f"inducing_points has {Z.shape[1]} features, but X has "
                         f"{X.shape[1]}; give an array of shape (m, {X.shape[1]}).")
    return np.array(Z)


__all__ = ["initial_inducing_points", "starting_inducing_inputs"]
