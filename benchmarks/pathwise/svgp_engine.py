"""The sparse variational classification engine (``pathwise._svgp``) against GPyTorch's SVGP.

n = 100 000 rows of ``make_classification(n, 20, random_state=0)``, 75/25 stratified split,
standardised inputs, ``C * RBF(sqrt(d))``, m = 256 inducing points (k-means++ seeding),
batch 1024, Adam 0.01 on the hyperparameters and Z, float64, one thread.  Prints, from one
run: seconds per epoch of our natural-gradient + Adam route and of GPyTorch's SVGP
(whitened VariationalStrategy, BernoulliLikelihood, VariationalELBO, Adam 0.01 on
everything) measured interleaved, test accuracy and log-loss after each epoch, and the
epoch at which the ``tol`` stopping rule fires for natural gradients and for Adam alone
on ``q`` (the ablation of ``benchmarks/pathwise/_adam_q.py``).

``--digits`` instead fits digits (10 classes, 1347 training rows) with the softmax and
one-vs-rest on the L-BFGS-B route (inner loop with the whitened cross-covariances held,
``_svgp._inner``) and prints fit time, evaluations, inner passes, accuracy, log-loss, ECE.

Usage: ``python benchmarks/pathwise/svgp_engine.py [--n 100000] [--epochs 3] [--no-gpytorch]
[--digits [--m 256]]``
"""

import os  # noqa: I001  (the shared kit's folder on the path, the kit, then numpy)
import sys

if (kit := os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) not in sys.path:
    sys.path.insert(0, kit)
import _common  # noqa: F401, I001  (first: pins the threads before numpy is imported)
from _adam_q import AdamQSVGP

import argparse
import time

import numpy as np
import torch
from sklearn.datasets import make_classification
from sklearn.gaussian_process.kernels import RBF, ConstantKernel
from sklearn.metrics import accuracy_score, log_loss
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

from skgpx.pathwise._likelihoods._classification import Bernoulli
from skgpx._inducing._rows import Rows
from skgpx._inducing._points import initial_inducing_points
from skgpx.pathwise._svgp._engine import SVGPEngine


def data(n, d, seed=0):
    X, y = make_classification(n, d, random_state=seed)
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.25, stratify=y, random_state=seed)
    scaler = StandardScaler().fit(Xtr)
    return scaler.transform(Xtr), scaler.transform(Xte), ytr, yte


def ours(Xtr, ytr, Xte, yte, Z0, epochs, q_update="natgrad", tol=None):
    """Our engine with natural steps on q (``q_update="natgrad"``) or, for the ablation,
    Adam on its moment parameters (``"adam"``: ``_adam_q.AdamQSVGP``)."""
    d = Xtr.shape[1]
    kernel = ConstantKernel(1.0) * RBF(np.sqrt(d))
    rows = Rows(torch.tensor(Xtr), torch.tensor(ytr[:, None], dtype=torch.float64),
                torch.zeros(len(Xtr), dtype=torch.float64))
    out = []
    engine = AdamQSVGP if q_update == "adam" else SVGPEngine
    mode = engine(kernel, Bernoulli("logit"), optimizer="adam", max_iter=epochs, tol=tol,
                  learning_rate=0.01, natgrad_step=0.1, minibatch_size=1024)
    mode.fit(rows, torch.tensor(Z0), np.random.RandomState(0))
    times = np.diff([0.0] + mode.epoch_end_seconds)
    proba = mode.predict_proba(torch.tensor(Xte)).numpy()
    out.append((accuracy_score(yte, proba.argmax(1)), log_loss(yte, proba)))
    return mode, times, out


def gpytorch_epochs(Xtr, ytr, Xte, yte, Z0, epochs):
    """GPyTorch's SVGP trained as ``classifier.py`` trains it: (seconds per epoch,
    [(accuracy, log-loss)] per epoch)."""
    from _baselines import train_gpytorch_svgp

    seconds, per_epoch = train_gpytorch_svgp(Xtr, ytr, Xte, yte, Z0, epochs, 1024, 0.01)
    return np.array(seconds), [(s["accuracy"], s["log_loss"]) for s in per_epoch]


def digits(multi_class, optimizer="fmin_l_bfgs_b", m=256, max_iter=100):
    """Digits (10 classes), 75/25 stratified split, standardised: softmax or one-vs-rest."""
    from sklearn.datasets import load_digits

    from skgpx.metrics import expected_calibration_error
    from skgpx.pathwise._likelihoods._classification import Softmax

    X, y = load_digits(return_X_y=True)
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.25, stratify=y, random_state=0)
    scaler = StandardScaler().fit(Xtr)
    Xtr, Xte = scaler.transform(Xtr), scaler.transform(Xte)
    Y = np.eye(10)[ytr]
    lik = Softmax(64, seed=0) if multi_class == "softmax" else Bernoulli("logit")
    kernel = ConstantKernel(1.0) * RBF(np.sqrt(X.shape[1]))
    mode = SVGPEngine(kernel, lik, multi_class=multi_class, optimizer=optimizer,
                      max_iter=max_iter, minibatch_size=256, learning_rate=0.05)
    rows = Rows(torch.tensor(Xtr), torch.tensor(Y), torch.zeros(len(Xtr), dtype=torch.float64))
    Z0 = torch.tensor(initial_inducing_points(Xtr, m, np.random.RandomState(0)))
    t0 = time.perf_counter()
    mode.fit(rows, Z0, np.random.RandomState(0))
    seconds = time.perf_counter() - t0
    proba = mode.predict_proba(torch.tensor(Xte)).numpy()
    print(f"digits {multi_class} {optimizer} m={m}: fit {seconds:.1f} s ({mode.n_iter} "
          f"evaluations, {mode.inner_passes} inner passes), accuracy "
          f"{accuracy_score(yte, proba.argmax(1)):.4f}, log-loss {log_loss(yte, proba):.4f}, "
          f"ECE {expected_calibration_error(yte, proba):.4f}, kernel {mode.kernel_}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--plateau-epochs", type=int, default=0)
    parser.add_argument("--no-gpytorch", action="store_true")
    parser.add_argument("--digits", action="store_true", help="only the digits check")
    parser.add_argument("--tol", type=float, default=None, help="stopping rule of the main run")
    parser.add_argument("--m", type=int, default=256, help="inducing points (digits check)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    from threadpoolctl import threadpool_limits

    threadpool_limits(1)
    if args.digits:
        for multi_class in ("softmax", "one_vs_rest"):
            digits(multi_class, m=args.m)
        return
    Xtr, Xte, ytr, yte = data(args.n, 20)
    Z0 = initial_inducing_points(Xtr, 256, np.random.RandomState(0))
    print(f"n_train={len(Xtr)} m=256 batch=1024 float64, one thread")
    t0 = time.perf_counter()
    mode, t_ours, s_ours = ours(Xtr, ytr, Xte, yte, Z0, args.epochs, tol=args.tol)
    print(f"fit + predict {time.perf_counter() - t0:.1f} s, {mode.n_iter} epochs")
    print(f"ours natgrad+Adam: s/epoch {np.round(t_ours, 3)}  after {mode.n_iter} epochs: "
          f"accuracy {s_ours[-1][0]:.4f} log-loss {s_ours[-1][1]:.4f}  "
          f"epoch-mean ELBO {np.round(mode.history, 1)}")
    if not args.no_gpytorch:
        t_gp, s_gp = gpytorch_epochs(Xtr, ytr, Xte, yte, Z0, args.epochs)
        print(f"GPyTorch SVGP: s/epoch {np.round(t_gp, 3)}  after {args.epochs} epochs: "
              f"accuracy {s_gp[-1][0]:.4f} log-loss {s_gp[-1][1]:.4f}  "
              f"per epoch {[(round(a, 4), round(b, 4)) for a, b in s_gp]}")
        _, t_ours2, _ = ours(Xtr, ytr, Xte, yte, Z0, 1)
        print(f"time ratio ours/GPyTorch (median epochs, interleaved A/B/A): "
              f"{np.median(np.r_[t_ours, t_ours2]) / np.median(t_gp):.3f}")
    if args.plateau_epochs:
        import warnings

        warnings.simplefilter("ignore")  # the ConvergenceWarning of a run that hits the cap
        for q_update in ("natgrad", "adam"):
            mode, _, s = ours(Xtr, ytr, Xte, yte, Z0, args.plateau_epochs, q_update=q_update,
                              tol=1e-4 if args.tol is None else args.tol)
            print(f"q_update={q_update}: stopping rule fired after {mode.n_iter} epochs "
                  f"(max {args.plateau_epochs}); ELBO per epoch {np.round(mode.history, 1)}; "
                  f"test accuracy {s[-1][0]:.4f} log-loss {s[-1][1]:.4f}")


if __name__ == "__main__":
    main()
