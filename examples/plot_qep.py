"""
Deep q-exponential processes on the paper's simulated problems
==============================================================

A q-exponential process with ``q = 2`` is a Gaussian process; ``q = 1`` gives heavier tails
and sharper functions, which suits data with jumps and kinks.  ``DeepQEPRegressor`` and
``DeepQEPClassifier`` stack sparse variational q-exponential layers and train them by
doubly-stochastic variational inference (Chang et al.).  We fit them on the two simulated
problems of the paper:

* the step/turn time series (Sec. 5.1): a two-output series with a jump and a kink, fitted
  with ``q = 1`` and with ``q = 2`` (a deep GP);
* the annular rhombus (Sec. 5.2): three classes, fitted with ``DeepQEPClassifier(q=1)``.

Run as a script with ``python examples/plot_qep.py [--out FOLDER]``: the paper's 1000 epochs
take a few minutes on one CPU thread (``--epochs`` changes them).  With
``SKGPX_EXAMPLE_SIZE=small`` in the environment both problems are fitted for 60 epochs only,
which gives rougher fits.  ``demo.py`` imports the functions defined here (and runs them with
fewer epochs); the cells that run the example are under ``if __name__ == "__main__":`` so that
importing this file runs nothing.
"""
import argparse
import os
import time

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
from sklearn.metrics import r2_score

from skgpx.datasets import make_annular_rhombus, make_step_turn_series, rhombus_labels
from skgpx.qep import DeepQEPClassifier, DeepQEPRegressor

SMALL = os.environ.get("SKGPX_EXAMPLE_SIZE") == "small"
EPOCHS = 60 if SMALL else 1000  # the paper's protocol: 1000 full-batch epochs
OUT = None  # the --out folder of a command-line run

GRID = np.linspace(-3.0, 3.0, 50)


def figure_path(name):
    """Where a figure goes on a command-line run with ``--out``; None otherwise."""
    return os.path.join(OUT, name) if OUT else None


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Deep Q-EPs on step/turn and the rhombus.")
    parser.add_argument("--out", help="folder to save the figures in (default: only show them)")
    parser.add_argument("--epochs", type=int, default=EPOCHS)
    args = parser.parse_args()
    OUT, EPOCHS = args.out, args.epochs
    if OUT:
        matplotlib.use("Agg")  # the figures go to files: no windows
        os.makedirs(OUT, exist_ok=True)

# %%
# The step/turn series
# --------------------
# 100 noisy observations (noise sd 0.1) of two outputs on ``t = 2x`` in [0, 2]: a step
# function ``u_J`` that jumps at ``t = 1`` and ``t = 1.5``, and a continuous turning function
# ``u_T`` with kinks there.  Both models use the defaults (one hidden layer of 3 units, 64
# inducing points) and run a fixed number of epochs (``tol=None``); we score the predictive
# mean by its R^2 against the noise-free series at 50 test points.


def step_turn_fits(epochs, dtype="float64"):
    """Fit q = 1 and q = 2 on the series; return the data and ``(q, model, seconds)``."""
    X, y, _ = make_step_turn_series(n_samples=100, noise_std=0.1, random_state=0)
    fits = []
    for q in (1.0, 2.0):
        model = DeepQEPRegressor(q=q, max_iter=epochs, tol=None, normalize_y=False,
                                 dtype=dtype, random_state=0)
        start = time.perf_counter()
        model.fit(X, y)
        fits.append((q, model, time.perf_counter() - start))
    return X, y, fits


def step_turn_score(model):
    """R^2 of the predictive mean against the noise-free series at 50 test points."""
    X_test = np.linspace(0.0, 1.0, 50)[:, None]
    truth = make_step_turn_series(n_samples=50, random_state=0)[2]
    return r2_score(truth, model.predict(X_test))


if __name__ == "__main__":
    X, y, fits = step_turn_fits(EPOCHS)
    for q, model, seconds in fits:
        print(f"step/turn q={q:g}: R2 vs truth {step_turn_score(model):.3f} ({seconds:.1f} s)")

# %%
# Each model's predictive mean with a band of two predictive standard deviations (noise
# included; the total variance over the Monte-Carlo paths) against the truth.


def plot_step_turn(X, y, fits, path=None):
    """Predictive bands of each fitted model on both outputs.

    ``path``: where the PNG goes (the figure is then closed); None leaves it open.
    Returns the figure.
    """
    x_plot = np.linspace(0.0, 1.0, 300)[:, None]
    truth = make_step_turn_series(n_samples=300, random_state=0)[2]
    fig, axes = plt.subplots(2, len(fits), figsize=(5 * len(fits), 6), sharex=True)
    for column, (q, model, _) in enumerate(fits):
        mean, std = model.predict(x_plot, return_std=True)
        for output, name in enumerate(("step u_J", "turn u_T")):
            ax = axes[output, column]
            ax.fill_between(x_plot[:, 0], mean[:, output] - 2 * std[:, output],
                            mean[:, output] + 2 * std[:, output], alpha=0.25,
                            label="mean ± 2 std")
            ax.plot(x_plot[:, 0], mean[:, output], "C0", label="predictive mean")
            ax.plot(x_plot[:, 0], truth[:, output], "k--", lw=0.8, label="truth")
            ax.plot(X[:, 0], y[:, output], "k.", ms=3)
            ax.set_title(f"q = {q:g}: {name}", fontsize=9)
        axes[1, column].set_xlabel("x (t = 2x)")
    axes[0, 0].legend(fontsize=7, loc="upper left")
    if path is not None:
        fig.savefig(path, dpi=120, bbox_inches="tight")
        plt.close(fig)
    return fig


if __name__ == "__main__":
    plot_step_turn(X, y, fits, figure_path("qep_step_turn.png"))
    plt.show()

# %%
# The annular rhombus
# -------------------
# 500 standard-normal points labelled 0, 1 or 2 by ``round(cos(a |x1| + |x2|) + 1)``, which
# draws nested rhombus-shaped bands around the origin (no label noise).  We fit
# ``DeepQEPClassifier(q=1)`` and score it on the labels of the 50 x 50 grid of [-3, 3]^2.


def rhombus_fit(epochs, dtype="float64"):
    """Fit the q = 1 classifier on 500 rhombus points; return data, model, seconds."""
    X, y = make_annular_rhombus(n_samples=500, random_state=0)
    model = DeepQEPClassifier(q=1.0, max_iter=epochs, tol=None, dtype=dtype, random_state=0)
    start = time.perf_counter()
    model.fit(X, y)
    return X, y, model, time.perf_counter() - start


def rhombus_grid():
    """The 50 x 50 test grid of [-3, 3]^2 and its labels."""
    grid = np.stack(np.meshgrid(GRID, GRID), axis=-1).reshape(-1, 2)
    return grid, rhombus_labels(grid)


if __name__ == "__main__":
    X, y, model, seconds = rhombus_fit(EPOCHS)
    grid, labels = rhombus_grid()
    print(f"rhombus q=1: grid accuracy {model.score(grid, labels):.3f} ({seconds:.1f} s)")

# %%
# The true labels, the decision regions with the training points, and the largest class
# probability, which drops along the class boundaries.


def plot_rhombus(X, y, model, path=None):
    """True labels, decision regions and largest class probability on the grid.

    ``path``: where the PNG goes (the figure is then closed); None leaves it open.
    Returns the figure.
    """
    grid, labels = rhombus_grid()
    proba = model.predict_proba(grid)
    predicted = model.classes_[proba.argmax(axis=1)]
    fig, axes = plt.subplots(1, 3, figsize=(14, 4.2))
    shape = (len(GRID), len(GRID))
    extent = (GRID[0], GRID[-1], GRID[0], GRID[-1])
    axes[0].imshow(labels.reshape(shape), origin="lower", extent=extent, cmap="viridis")
    axes[0].set_title("true labels", fontsize=9)
    axes[1].imshow(predicted.reshape(shape), origin="lower", extent=extent, cmap="viridis")
    axes[1].scatter(X[:, 0], X[:, 1], c=y, s=6, edgecolors="w", linewidths=0.3)
    axes[1].set(xlim=extent[:2], ylim=extent[2:])
    axes[1].set_title(f"DeepQEPClassifier(q=1): accuracy {np.mean(predicted == labels):.3f}",
                      fontsize=9)
    image = axes[2].imshow(proba.max(axis=1).reshape(shape), origin="lower", extent=extent,
                           cmap="magma", vmin=1 / 3, vmax=1)
    axes[2].set_title("largest class probability", fontsize=9)
    fig.colorbar(image, ax=axes[2])
    if path is not None:
        fig.savefig(path, dpi=120, bbox_inches="tight")
        plt.close(fig)
    return fig


if __name__ == "__main__":
    plot_rhombus(X, y, model, figure_path("qep_rhombus.png"))
    if OUT:
        print(f"plots written to {os.path.abspath(OUT)}")
    plt.show()
