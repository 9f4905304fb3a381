"""The skorch side of deep Q-EP training: the internal ``net_``.

skorch runs the epoch loop, the optimiser, the validation split, early stopping and
the epoch table; this module supplies the loss (expected log-likelihood from the
criterion plus the KL terms read from the module), a tensor batch iterator and an
epoch-level progress bar.
"""

import torch
from skorch.callbacks import EarlyStopping
from skorch.dataset import ValidSplit

from .._base import cpu_generator
from .._skorch import EpochBar, PortableNet, TensorBatches, silent

__all__ = ["QEPNet", "build_net"]


class QEPNet(PortableNet):
    """``loss = -E[log-likelihood per row] + KL / N`` (minus the ELBO per row), ``N`` the number of
    training rows after the validation split."""

    def get_split_datasets(self, X, y=None, **fit_params):
        train, valid = super().get_split_datasets(X, y, **fit_params)
        self.n_train_rows_ = len(train)
        return train, valid

    def get_loss(self, y_pred, y_true, X=None, training=False):
        loss = -self.criterion_(y_pred, y_true)
        loss = loss + self.module_.kl_divergence() / self.n_train_rows_
        if not bool(torch.isfinite(loss)):
            raise RuntimeError(
                f"The deep Q-EP loss became non-finite in epoch {len(self.history)}; "
                "use a smaller learning rate (lr) or dtype='float64'."
            )
        return loss


def build_net(module, criterion, *, n_rows, params, seeds, device, stratify):
    """The skorch net of one fit.

    Parameters
    ----------
    module, criterion : nn.Module
        Initialised on ``device``.
    n_rows : int
        Training rows (for the default batch size).
    params : dict
        The estimator's parameters.
    seeds : dict
        Integer seeds ``"shuffle"`` and ``"split"``.
    stratify : bool
        Whether the validation split is stratified (classifier).
    """
    batch_size = params["batch_size"] or min(n_rows, 1024)
    callbacks = [("epoch_bar", EpochBar(params["verbose"], params["max_iter"], "deep Q-EP epochs"))]
    sink = print if params["verbose"] >= 2 else silent
    train_split = None
    if params["early_stopping"]:
        train_split = ValidSplit(
            params["validation_fraction"], stratified=stratify, random_state=seeds["split"]
        )
        callbacks.append(
            ("early_stopping", EarlyStopping(
                monitor="valid_loss", patience=params["n_iter_no_change"],
                threshold=params["tol"] or 0.0, threshold_mode="abs", load_best=True,
                sink=sink,
            ))
        )
    elif params["tol"] is not None:
        callbacks.append(
            ("early_stopping", EarlyStopping(
                monitor="train_loss", patience=params["n_iter_no_change"],
                threshold=params["tol"], threshold_mode="abs", sink=sink,
            ))
        )
    optimizer = {"adam": torch.optim.Adam, "sgd": torch.optim.SGD}[params["optimizer"]]
    return QEPNet(
        module,
        criterion,
        optimizer=optimizer,
        # the multi-tensor update: the same arithmetic (bitwise) as torch's default on the
        # CPU, which loops over the parameters in Python (4-5 ms of a 22 ms step here)
        optimizer__foreach=True,
        lr=params["lr"],
        max_epochs=params["max_iter"],
        batch_size=batch_size,
        iterator_train=TensorBatches,
        iterator_train__shuffle=True,
        iterator_train__generator=cpu_generator(seeds["shuffle"]),
        iterator_valid=TensorBatches,
        train_split=train_split,
        callbacks=callbacks,
        device=device,
        verbose=1 if params["verbose"] >= 2 else 0,
    )
