"""skorch plumbing shared by the families that train through an internal ``net_``.

* :class:`TensorBatches` slices whole tensors into mini-batches (a ``DataLoader``'s per-row
  ``__getitem__`` and collation cost more than a small model's step);
* :class:`EpochBar` is the one progress bar per fit over epochs of conventions Sec. 6;
* :func:`silent` is a print sink for skorch callbacks when ``verbose < 2``.
"""

import torch
from skorch.callbacks import Callback

from ._base import progress_bar

__all__ = ["EpochBar", "TensorBatches", "silent"]


class TensorBatches:
    """Mini-batches of a skorch ``Dataset`` holding tensors (or a ``Subset`` of one).

    Slicing whole tensors replaces the per-row ``__getitem__`` and collation of a
    ``DataLoader``, which cost more than a small model's forward pass.  The order is
    shuffled with ``generator`` when ``shuffle`` is set.
    """

    def __init__(self, dataset, batch_size, shuffle=False, generator=None):
        indices = None
        if isinstance(dataset, torch.utils.data.Subset):
            indices = torch.as_tensor(dataset.indices, dtype=torch.long)
            dataset = dataset.dataset
        self.X, self.y = dataset.X, dataset.y
        if indices is not None:
            device = self.X.device
            self.X, self.y = self.X[indices.to(device)], self.y[indices.to(device)]
        self.batch_size = int(batch_size)
        self.shuffle = shuffle
        self.generator = generator

    def __len__(self):
        return -(-self.X.shape[0] // self.batch_size)

    def __iter__(self):
        n = self.X.shape[0]
        if self.shuffle and n > self.batch_size:
            order = torch.randperm(n, generator=self.generator).to(self.X.device)
            X, y = self.X[order], self.y[order]
        else:
            X, y = self.X, self.y
        for start in range(0, n, self.batch_size):
            yield X[start : start + self.batch_size], y[start : start + self.batch_size]


class EpochBar(Callback):
    """One ``tqdm`` bar per fit over epochs, with the training loss as postfix."""

    def __init__(self, verbose, total, desc="epochs"):
        self.verbose = verbose
        self.total = total
        self.desc = desc

    def on_train_begin(self, net, **kwargs):
        self.bar_ = progress_bar(self.verbose, self.desc, total=self.total)

    def on_epoch_end(self, net, **kwargs):
        self.bar_.update(1)
        self.bar_.set_postfix(loss=f"{net.history[-1, 'train_loss']:.4g}")

    def on_train_end(self, net, **kwargs):
        self.bar_.close()


def silent(*args, **kwargs):
    """A print sink that prints nothing (skorch callbacks at ``verbose < 2``)."""
