"""
Smooth dependent relevance determination: sparse, smooth coefficients on a grid
===============================================================================

``SmoothDRDRegressor`` is Bayesian linear regression whose coefficients live on a 1-D or 2-D
grid.  A Gaussian process ``u`` over the grid sets the log prior variance of each coefficient,
so relevant features come in contiguous groups (sparsity), and a squared-exponential
correlation makes the coefficients smooth inside them (Wu, Park, Koyejo and Pillow, NIPS 2014).
We fit it next to scikit-learn's ``ARDRegression`` (one independent relevance per feature) and
``RidgeCV`` on two simulated problems of ``make_smooth_sparse_regression``, each with fewer rows
than features:

* ``"bumps"``: 200 coefficients on a line, three truncated Gaussian bumps (93 non-zero),
  100 rows, noise sd 0.5;
* ``"bumps2d"``: a 16 x 16 image with two blobs, 150 rows, noise sd 0.5.

For each model we print the coefficient MSE, the MSE on 1000 held-out rows (the noise floor is
0.25) and the ROC-AUC of a relevance score against the true non-zero set (``prior_variance_``
for sDRD, ``|coef_|`` for the baselines).

Run as a script with ``python examples/plot_drd.py [--out FOLDER]``; each sDRD fit takes some
tens of seconds on one CPU thread.  With ``SKGPX_EXAMPLE_SIZE=small`` in the environment the
problems are smaller (100 coefficients from 60 rows, a 10 x 10 image from 80 rows) and sDRD
stops after 20 outer iterations, which it reports with a ``ConvergenceWarning``.
``demo.py`` imports the functions defined here and runs the 1-D problem (fewer iterations);
the cells that run the example are under ``if __name__ == "__main__":`` so that importing
this file runs nothing.
"""
import argparse
import os
import time

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import LogNorm
from sklearn.linear_model import ARDRegression, RidgeCV
from sklearn.metrics import roc_auc_score

from skgpx import SmoothDRDRegressor
from skgpx.datasets import make_smooth_sparse_regression

SMALL = os.environ.get("SKGPX_EXAMPLE_SIZE") == "small"
# problem sizes (None: the defaults of make_smooth_sparse_regression) and sDRD's max_iter
SIZES = {
    "bumps": dict(shape=(100,), n_samples=60) if SMALL else {},
    "bumps2d": dict(shape=(10, 10), n_samples=80) if SMALL else {},
}
MAX_ITER = 20 if SMALL else 100
OUT = None  # the --out folder of a command-line run

MODELS = ("sDRD", "ARD", "RidgeCV")

# %%
# The three models
# ----------------
# ``drd_fits`` fits sDRD (deterministic: no ``random_state``), ``ARDRegression`` and
# ``RidgeCV`` on one problem; ``scores`` computes the three figures of merit.


def drd_fits(kind="bumps", random_state=0, *, shape=None, n_samples=None, max_iter=100):
    """Fit sDRD, ``ARDRegression()`` and ``RidgeCV`` on one simulated problem.

    Parameters
    ----------
    kind : {"bumps", "bumps2d", "dense"}, default="bumps"
        The problem of ``make_smooth_sparse_regression``.
    random_state : int, default=0
        Seed of ``X``, the noise and the test set.
    shape, n_samples : default=None
        Grid shape and training rows of ``make_smooth_sparse_regression`` (None: its
        defaults).
    max_iter : int, default=100
        Outer iterations of ``SmoothDRDRegressor`` (its default).

    Returns
    -------
    data : Bunch
        The output of ``make_smooth_sparse_regression``.
    fits : list of (str, estimator, float)
        Name, fitted model and fit seconds, in the order of ``MODELS``.
    """
    d = make_smooth_sparse_regression(kind, shape=shape, n_samples=n_samples,
                                      random_state=random_state)
    models = [SmoothDRDRegressor(coef_shape=d.coef_shape, max_iter=max_iter), ARDRegression(),
              RidgeCV(alphas=np.logspace(-3, 4, 15))]
    fits = []
    for name, model in zip(MODELS, models):
        start = time.perf_counter()
        model.fit(d.X, d.y)
        fits.append((name, model, time.perf_counter() - start))
    return d, fits


def scores(d, model):
    """Coefficient MSE, held-out MSE and support ROC-AUC of one fitted model.

    The relevance score of the AUC is ``prior_variance_`` where the model has one (sDRD) and
    ``|coef_|`` otherwise.

    Returns
    -------
    dict with keys "coef_mse", "test_mse", "support_auc"
    """
    relevance = getattr(model, "prior_variance_", None)
    if relevance is None:
        relevance = np.abs(model.coef_)
    return {
        "coef_mse": float(np.mean((model.coef_ - d.coef) ** 2)),
        "test_mse": float(np.mean((model.predict(d.X_test) - d.y_test) ** 2)),
        "support_auc": float(roc_auc_score(d.coef != 0, relevance)),
    }


def print_scores(title, d, fits):
    print(f"{title}: coefficient MSE, held-out MSE (noise floor {d.noise ** 2:.2f}), "
          "support ROC-AUC")
    for name, model, seconds in fits:
        s = scores(d, model)
        print(f"  {name:8s} coef MSE {s['coef_mse']:.3e}  test MSE {s['test_mse']:.3f}  "
              f"AUC {s['support_auc']:.3f}  ({seconds:.1f} s)")


def figure_path(name):
    """Where a figure goes on a command-line run with ``--out``; None otherwise."""
    return os.path.join(OUT, name) if OUT else None


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Smooth DRD against ARD and RidgeCV.")
    parser.add_argument("--out", help="folder to save the figures in (default: only show them)")
    OUT = parser.parse_args().out
    if OUT:
        matplotlib.use("Agg")  # the figures go to files: no windows
        os.makedirs(OUT, exist_ok=True)

# %%
# The 1-D bumps
# -------------

if __name__ == "__main__":
    d, fits = drd_fits("bumps", max_iter=MAX_ITER, **SIZES["bumps"])
    p, n = d.X.shape[1], d.X.shape[0]
    print_scores(f"bumps (1-D, p = {p}, n = {n})", d, fits)
    drd = fits[0][1]
    print(f"  sDRD: noise_variance_ {drd.noise_variance_:.3f} (true {d.noise ** 2:.3f}), "
          f"{drd.n_iter_} outer iterations, {int(drd.support_.sum())} positions in support_")

# %%
# The first panel shows the true and recovered coefficients, with a band of two posterior
# standard deviations (``coef_std_``) around sDRD's; the second shows the learned prior
# variance ``prior_variance_ = exp(u_)`` on a log axis with a band of two Laplace standard
# deviations of ``u`` (``u_std_``), the true non-zero set and the positions kept in
# ``support_`` (those not trimmed to an exact zero).


def _runs(mask):
    """(start, stop) index pairs of the runs of True in a boolean vector."""
    edges = np.flatnonzero(np.diff(np.concatenate([[0], mask.astype(int), [0]])))
    return edges.reshape(-1, 2)


def plot_coefficients(d, fits, path=None):
    """True against recovered 1-D coefficients, and the support learned by sDRD.

    Parameters
    ----------
    d : Bunch
        A 1-D problem of ``make_smooth_sparse_regression``.
    fits : list of (str, estimator, float)
        As returned by ``drd_fits``; the first is the ``SmoothDRDRegressor``.
    path : str, default=None
        Where the PNG goes; the figure is then closed.  None leaves it open.

    Returns
    -------
    fig : matplotlib Figure
    """
    t = np.arange(d.coef.size)
    drd = fits[0][1]
    fig, axes = plt.subplots(2, 1, figsize=(11, 7), sharex=True, layout="constrained",
                             gridspec_kw={"height_ratios": [3, 2]})
    ax = axes[0]
    ax.plot(t, d.coef, "k", lw=2.5, alpha=0.35, label="true")
    for i, (name, model, _) in enumerate(fits):
        mse = np.mean((model.coef_ - d.coef) ** 2)
        if i == 0:
            ax.fill_between(t, model.coef_ - 2 * model.coef_std_, model.coef_ + 2 * model.coef_std_,
                            color="C0", alpha=0.25, lw=0, label="sDRD ± 2 coef_std_")
        ax.plot(t, model.coef_, f"C{i}", lw=1.6 if i == 0 else 0.8,
                label=f"{name} (coefficient MSE {mse:.2e})")
    ax.set(ylabel="coefficient", title="SmoothDRDRegressor against ARDRegression and RidgeCV "
           f"(n = {d.X.shape[0]}, p = {d.X.shape[1]})")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7)

    ax = axes[1]
    for k, (start, stop) in enumerate(_runs(drd.support_)):
        ax.axvspan(start - 0.5, stop - 0.5, color="C2", alpha=0.12, lw=0,
                   label="support_ (not trimmed)" if k == 0 else None)
    low = np.exp(drd.u_ - 2 * drd.u_std_)
    high = np.exp(drd.u_ + 2 * drd.u_std_)
    ax.fill_between(t, low, high, color="C0", alpha=0.25, lw=0, label="exp(u_ ± 2 u_std_)")
    ax.semilogy(t, drd.prior_variance_, "C0", label="prior_variance_")
    top = np.nanmax(high) * 3
    bottom = max(np.nanmin(drd.prior_variance_) / 3, top * 1e-12)
    for k, (start, stop) in enumerate(_runs(d.coef != 0)):
        ax.plot([start - 0.5, stop - 0.5], [top / 2, top / 2], "k", lw=4, solid_capstyle="butt",
                label="true non-zero set" if k == 0 else None)
    ax.set(ylim=(bottom, top), xlabel="grid position", ylabel="prior variance g(u)",
           title=f"learned relevance: length_scale_ {drd.length_scale_:.3g}, "
           f"smoothness_length_scale_ {drd.smoothness_length_scale_:.3g}")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7)
    for a in axes:
        a.title.set_fontsize(9)
    if path is not None:
        fig.savefig(path, dpi=120, bbox_inches="tight")
        plt.close(fig)
    return fig


if __name__ == "__main__":
    plot_coefficients(d, fits, figure_path("drd_bumps.png"))
    plt.show()

# %%
# The 16 x 16 image
# -----------------
# The same three models on the two-blob image.  The figure shows the true and recovered
# coefficient images on one colour scale, and sDRD's ``prior_variance_`` on a log scale with
# the outline of the true non-zero set.


def plot_images(d, fits, path=None):
    """True and recovered coefficient images on one colour scale, and sDRD's prior variance.

    Parameters
    ----------
    d : Bunch
        The ``"bumps2d"`` problem of ``make_smooth_sparse_regression``.
    fits : list of (str, estimator, float)
        As returned by ``drd_fits``; the first is the ``SmoothDRDRegressor``.
    path : str, default=None
        Where the PNG goes; the figure is then closed.  None leaves it open.

    Returns
    -------
    fig : matplotlib Figure
    """
    shape = d.coef_shape
    images = [("true", d.coef)] + [
        (f"{name}\nMSE {np.mean((model.coef_ - d.coef) ** 2):.2e}", model.coef_)
        for name, model, _ in fits]
    vmax = max(np.abs(w).max() for _, w in images)
    fig, axes = plt.subplots(1, len(images) + 1, figsize=(3.0 * (len(images) + 1), 3.2),
                             layout="constrained")
    for ax, (title, w) in zip(axes, images):
        im = ax.imshow(w.reshape(shape), cmap="RdBu_r", vmin=-vmax, vmax=vmax)
        ax.set_title(title, fontsize=9)
    fig.colorbar(im, ax=axes[:len(images)].tolist(), shrink=0.8, label="coefficient")
    drd = fits[0][1]
    variance = drd.prior_variance_
    floor = max(variance.max() * 1e-8, np.finfo(float).tiny)
    ax = axes[-1]
    im = ax.imshow(np.maximum(variance, floor).reshape(shape), cmap="viridis",
                   norm=LogNorm(vmin=floor, vmax=variance.max()))
    ax.contour(d.coef.reshape(shape) != 0, levels=[0.5], colors="w", linewidths=1)
    ax.set_title("sDRD prior_variance_ (log)\nwhite: true non-zero set", fontsize=9)
    fig.colorbar(im, ax=ax, shrink=0.8)
    for ax in axes:
        ax.set(xticks=[], yticks=[])
    if path is not None:
        fig.savefig(path, dpi=120, bbox_inches="tight")
        plt.close(fig)
    return fig


if __name__ == "__main__":
    d, fits = drd_fits("bumps2d", max_iter=MAX_ITER, **SIZES["bumps2d"])
    rows, columns = d.coef_shape
    print_scores(f"bumps2d ({rows} x {columns}, n = {d.X.shape[0]})", d, fits)
    plot_images(d, fits, figure_path("drd_bumps2d.png"))
    if OUT:
        print(f"plots written to {os.path.abspath(OUT)}")
    plt.show()
