"""skorch plumbing shared by the families that train through an internal ``net_``.

* :class:`TensorBatches` slices whole tensors into mini-batches (a ``DataLoader``'s per-row
  ``__getitem__`` and collation cost more than a small model's step);
* :class:`EpochBar` is the one progress bar per fit over epochs
  (``verbose >= 1``), in place of skorch's per-batch bar;
* :func:`silent` is a print sink for skorch callbacks when ``verbose < 2``;
* :class:`PortableNet`, the base of the families' nets, pickles so that a GPU-fitted
  estimator loads on a machine without CUDA.
"""

import io

import torch
from skorch import NeuralNet
from skorch.callbacks import Callback

from ._base import loadable_device, progress_bar

__all__ = ["EpochBar", "PortableNet", "TensorBatches", "silent"]


class PortableNet(NeuralNet):
    """A skorch ``NeuralNet`` whose pickle loads on a machine without the GPU it was fitted on.

    skorch's own pickling maps only ``module_``, ``criterion_`` and ``optimizer_`` to the
    loading machine's device: the module and criterion instances a net is built from (its
    ``module`` and ``criterion`` parameters) and the callbacks that hold the optimiser (an
    ``LRScheduler``) are pickled as GPU storages, which no machine without CUDA can rebuild.
    Here the whole state is one ``torch.save`` blob, in which each storage keeps its device:
    on loading, CUDA storages go to the fitted device, or to the CPU where CUDA is missing
    (without a warning: the estimator that holds the net warns, once), and CPU storages (the
    batch-shuffling generator's state, the optimiser's step counts) stay on the CPU.  One blob
    keeps the references shared inside the net (the optimiser updates the module's parameters;
    the schedule holds that optimiser), and pickling writes GPU storages straight to bytes:
    the live net is neither moved nor copied on the device.
    """

    def __getstate__(self):
        buffer = io.BytesIO()
        torch.save(self.__dict__, buffer)
        return {"fitted_device": self.device, "torch_state": buffer.getvalue()}

    def __setstate__(self, state):
        if "__cuda_dependent_attributes__" in state:  # pickled by skorch's own __getstate__
            super().__setstate__(state)
            return
        device = loadable_device(state["fitted_device"])

        def restore(storage, location):
            if location.startswith("cuda"):
                location = device
            return torch.serialization.default_restore_location(storage, location)

        # the blob comes from the pickle being loaded, which can run any code already:
        # weights_only=True would only refuse the net's own classes
        attributes = torch.load(io.BytesIO(state["torch_state"]), map_location=restore,
                                weights_only=False)
        attributes["device"] = device
        self.__dict__.update(attributes)


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
