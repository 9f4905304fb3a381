"""Deep q-exponential processes on the paper's two simulated problems.

* The step/turn time series (Chang et al., Sec. 5.1): a two-output series with a jump
  and a kink.  We fit ``DeepQEPRegressor`` with ``q = 1`` and ``q = 2`` (a deep GP) and
  plot each model's predictive mean with a band of two predictive standard deviations
  (noise included, total variance over the Monte-Carlo paths) against the truth.
* The annular rhombus (Sec. 5.2): three classes; we fit ``DeepQEPClassifier(q=1)``
  and plot its decision regions and its largest class probability on the 50 x 50
  grid of [-3, 3]^2.

Run with ``python examples/plot_qep.py --out demo_output`` (the paper's 1000 epochs;
``--epochs`` makes it quicker).  ``demo.py`` calls the same functions with fewer epochs.
"""
import argparse
import os
import time

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from sklearn.metrics import r2_score  # noqa: E402

from skgpx.datasets import make_annular_rhombus, make_step_turn_series, rhombus_labels  # noqa: E402
from skgpx.qep import DeepQEPClassifier, DeepQEPRegressor  # noqa: E402

GRID = np.linspace(-3.0, 3.0, 50)


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


def plot_step_turn(X, y, fits, path):
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
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)


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


def plot_rhombus(X, y, model, path):
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
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="demo_output", help="folder for the plots")
    parser.add_argument("--epochs", type=int, default=1000)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    X, y, fits = step_turn_fits(args.epochs)
    for q, model, seconds in fits:
        print(f"step/turn q={q:g}: R2 vs truth {step_turn_score(model):.3f} ({seconds:.1f} s)")
    plot_step_turn(X, y, fits, os.path.join(args.out, "qep_step_turn.png"))
    X, y, model, seconds = rhombus_fit(args.epochs)
    grid, labels = rhombus_grid()
    print(f"rhombus q=1: grid accuracy {model.score(grid, labels):.3f} ({seconds:.1f} s)")
    plot_rhombus(X, y, model, os.path.join(args.out, "qep_rhombus.png"))
    print(f"plots written to {os.path.abspath(args.out)}")


if __name__ == "__main__":
    main()
