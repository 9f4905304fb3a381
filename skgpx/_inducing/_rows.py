"""Training rows held in this process, and their chunking."""

from dataclasses import dataclass

import torch

from .._base import rows_per_chunk


@dataclass
class Rows:
    """Training rows held in this process: ``X`` (n, d), ``Y`` (n, T), ``alpha`` (n,).

    The bound only needs sums over rows, so it reaches the data through
    :meth:`map_sum`; ``skgpx._dask.DaskRows`` has the same interface for rows held by
    Dask workers.
    """

    X: torch.Tensor
    Y: torch.Tensor
    alpha: torch.Tensor

    @property
    def n_targets(self):
        return self.Y.shape[1]

    def map_sum(self, function, *args):
        """``function(X_b, Y_b, alpha_b, *args)`` summed over the blocks (here: one)."""
        return function(self.X, self.Y, self.alpha, *args)


def row_chunks(n, m, batch_size, device):
    step = rows_per_chunk(batch_size, 4 * m, device)
    return [slice(i, min(i + step, n)) for i in range(0, n, step)]


__all__ = ["Rows", "row_chunks"]
