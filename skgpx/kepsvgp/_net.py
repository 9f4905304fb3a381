"""The skorch side of KEP-SVGP training: the internal ``net_``.

skorch runs the epoch loop, Adam with decoupled weight decay and a one-cycle learning-rate
schedule; this module supplies the loss of Chen et al. (ICML 2024, Eq. 14): cross-entropy
plus the attention layers' KL terms per training row and the kernel-SVD objective.
"""

import torch
from skorch.callbacks import LRScheduler

from .._base import cpu_generator
from .._skorch import EpochBar, PortableNet, TensorBatches

__all__ = ["KEPNet", "build_net"]


class KEPNet(PortableNet):
    """``loss = CE + kl_weight * KL / n_train + eta * L_KSVD``."""

    def get_loss(self, y_pred, y_true, X=None, training=False):
        logits, kl, ksvd = y_pred
        loss = torch.nn.functional.cross_entropy(logits, y_true)
        loss = loss + self.kl_weight_ * kl / self.n_train_ + self.eta_ * ksvd
        if not bool(torch.isfinite(loss)):
            raise RuntimeError(
                f"The KEP-SVGP loss became non-finite in epoch {len(self.history)}; use a "
                "smaller lr or eta."
            )
        return loss


def build_net(module, *, n_rows, params, seed, device):
    """The skorch net of one fit.

    Parameters
    ----------
    module : KEPTransformer
        Initialised on ``device``.
    n_rows : int
        Training rows (the KL weight per row and the batch count).
    params : dict
        The estimator's parameters.
    seed : int
        Seed of the batch shuffling.
    """
    batch_size = min(params["batch_size"], n_rows)
    steps = params["max_iter"] * -(-n_rows // batch_size)
    schedule = []
    if steps > 1:  # one step has no cycle: it runs at lr
        # warm up over 5% of the steps but at least 1.5 of them: OneCycleLR divides by
        # pct_start * steps - 1, which must not be 0
        schedule = [("lr_schedule", LRScheduler(
            policy=torch.optim.lr_scheduler.OneCycleLR, max_lr=params["lr"], total_steps=steps,
            pct_start=max(0.05, 1.5 / steps), step_every="batch"))]
    net = KEPNet(
        module, torch.nn.CrossEntropyLoss, optimizer=torch.optim.Adam, lr=params["lr"],
        # foreach: the multi-tensor update, bitwise the default's arithmetic, without its
        # Python loop over the parameters on the CPU
        optimizer__weight_decay=params["weight_decay"], optimizer__foreach=True,
        max_epochs=params["max_iter"],
        batch_size=batch_size, iterator_train=TensorBatches, iterator_train__shuffle=True,
        iterator_train__generator=cpu_generator(seed), iterator_valid=TensorBatches,
        train_split=None, device=device,
        callbacks=schedule + [
            ("epoch_bar", EpochBar(params["verbose"], params["max_iter"], "KEP-SVGP epochs")),
        ],
        verbose=1 if params["verbose"] >= 2 else 0,
    )
    net.n_train_, net.kl_weight_, net.eta_ = n_rows, params["kl_weight"], params["eta"]
    return net
