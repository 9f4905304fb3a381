"""
KEP-SVGP attention against softmax attention: calibration on digits
===================================================================

``KEPSVGPClassifier`` is a small Transformer whose last attention blocks can be
kernel-eigen-pair sparse variational GP attention (Chen et al., ICML 2024): each block's output
is a draw from a pair of SVGPs built on the kernel SVD of the attention kernel, and the class
probabilities average several posterior draws.  We fit two copies of the same Transformer on
2 x 2 patches of scikit-learn's 8 x 8 digits, one whose last block is KEP-SVGP attention
(concat merge) and the softmax baseline (``kep_layers=0``, the paper's "MSP"), and compare how
well their confidence tracks their accuracy on the held-out 30 %.

Run as a script with ``python examples/plot_kepsvgp.py [--out FOLDER]`` (100 epochs; ``--epochs``
changes them).  With ``SKGPX_EXAMPLE_SIZE=small`` in the environment both models train for 15
epochs only: they are then far from converged (lower accuracy, different calibration).
``demo.py`` imports the split and the plot defined here (and trains one block for fewer
epochs); the cells that run the example are under ``if __name__ == "__main__":`` so that
importing this file runs nothing.
"""
import argparse
import os
import time

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import to_rgba
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

from skgpx.kepsvgp import KEPSVGPClassifier
from skgpx.metrics import (
    aurc, expected_calibration_error, reliability_curve, risk_coverage_curve, uncertainty_report,
)

SMALL = os.environ.get("SKGPX_EXAMPLE_SIZE") == "small"
EPOCHS = 15 if SMALL else 100
OUT = None  # the --out folder of a command-line run

N_BINS = 15
MODELS = {"KEP-SVGP (concat)": 1, "softmax (MSP)": 0}  # name -> kep_layers


def figure_path(name):
    """Where a figure goes on a command-line run with ``--out``; None otherwise."""
    return os.path.join(OUT, name) if OUT else None


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="KEP-SVGP against softmax attention.")
    parser.add_argument("--out", help="folder to save the figure in (default: only show it)")
    parser.add_argument("--epochs", type=int, default=EPOCHS)
    args = parser.parse_args()
    OUT, EPOCHS = args.out, args.epochs
    if OUT:
        matplotlib.use("Agg")  # the figure goes to a file: no window
        os.makedirs(OUT, exist_ok=True)

# %%
# The two models
# --------------
# Both Transformers have two blocks of width 32 with 4 heads and train in float32 (Adam with
# a one-cycle schedule); ``predict_proba`` of the KEP-SVGP model averages its posterior
# draws.  ``uncertainty_report`` scores any classifier's probabilities: accuracy, calibration
# (ECE, NLL, Brier) and failure prediction (AURC, and the AUROC of the confidence as a
# detector of misclassified rows).


def digits_split():
    """Digits scaled to [0, 1], split 70/30 with stratification.

    Returns
    -------
    X_train, X_test, y_train, y_test : ndarray
    """
    X, y = load_digits(return_X_y=True)
    return train_test_split(X / 16.0, y, test_size=0.3, stratify=y, random_state=0)


def digits_fits(epochs, dtype="float32"):
    """Fit the KEP-SVGP Transformer and its softmax twin on the digits split.

    Parameters
    ----------
    epochs : int
        ``max_iter`` of both models.
    dtype : {"float32", "float64"}, default="float32"

    Returns
    -------
    X_test, y_test : ndarray
        The held-out rows.
    fits : list of (str, KEPSVGPClassifier, float)
        Name, fitted model and fit seconds, in the order of ``MODELS``.
    """
    X_train, X_test, y_train, y_test = digits_split()
    fits = []
    for name, kep_layers in MODELS.items():
        model = KEPSVGPClassifier(tokenizer="patches", patch_size=2, d_model=32, n_heads=4,
                                  depth=2, kep_layers=kep_layers, rank=5, merge="concat",
                                  eta=0.1, max_iter=epochs, dtype=dtype, random_state=0)
        start = time.perf_counter()
        model.fit(X_train, y_train)
        fits.append((name, model, time.perf_counter() - start))
    return X_test, y_test, fits


if __name__ == "__main__":
    X_test, y_test, fits = digits_fits(EPOCHS)
    probas = {}
    for name, model, seconds in fits:
        probas[name] = model.predict_proba(X_test)
        report = uncertainty_report(y_test, probas[name], labels=model.classes_)
        print(f"{name}: accuracy {report['accuracy']:.4f}, "
              f"ECE {report['expected_calibration_error']:.4f}, "
              f"NLL {report['negative_log_likelihood']:.4f}, "
              f"Brier {report['brier_score']:.4f}, AURC {report['aurc']:.4f}, "
              f"AUROC {report['misclassification_auroc']:.4f} ({seconds:.1f} s)")

# %%
# Reliability diagrams and risk-coverage curves
# ---------------------------------------------
# For each model, a reliability diagram: test accuracy against confidence (the largest class
# probability) in 15 equal-width bins, with the gap between accuracy and mean confidence
# shaded darker where the bin holds more rows; the bin-count-weighted sum of these gaps is
# the ECE, given in the legend.  The last panel shows the risk-coverage curves: the error rate
# among the ``k`` most confident test rows against the coverage ``k / n``; their mean is the
# AURC (lower is better).


def _reliability_panel(ax, y_true, y_prob, name, color, n_bins=N_BINS):
    accuracy, confidence, counts = reliability_curve(y_true, y_prob, n_bins=n_bins)
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    width = 1.0 / n_bins
    filled = counts > 0
    ece = expected_calibration_error(y_true, y_prob, n_bins=n_bins)
    ax.bar(edges[:-1][filled], accuracy[filled], width=width, align="edge", color=color,
           alpha=0.35, edgecolor=color, linewidth=0.8, label=f"accuracy (ECE {ece:.4f})")
    # the gap to the bin's mean confidence, shaded by the bin's share of the rows
    weight = counts[filled] / counts.sum()
    shade = [to_rgba("C3", 0.15 + 0.75 * w / weight.max()) for w in weight]
    gap = confidence[filled] - accuracy[filled]
    ax.bar(edges[:-1][filled], gap, bottom=accuracy[filled], width=width, align="edge",
           color=shade, edgecolor="C3", linewidth=0.5, hatch="//",
           label="gap to mean confidence\n(darker: more rows)")
    ax.plot([0, 1], [0, 1], "k--", lw=0.8, label="perfect calibration")
    ax.set(xlim=(0, 1), ylim=(0, 1), xlabel="confidence (largest class probability)",
           ylabel="accuracy", title=name)
    ax.title.set_fontsize(9)
    ax.legend(loc="upper left", fontsize=7)


def plot_calibration(y_true, probas, path=None, n_bins=N_BINS):
    """Reliability diagrams and risk-coverage curves of several classifiers.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
        Class indices, the columns of the probabilities (labels ``0..K-1`` as for digits).
    probas : dict of str to ndarray of shape (n_samples, n_classes)
        Model name to ``predict_proba`` output on the same rows.
    path : str, default=None
        Where the PNG goes; the figure is then closed.  None leaves it open.
    n_bins : int, default=15
        Equal-width confidence bins of the reliability diagrams and the ECE.

    Returns
    -------
    fig : matplotlib Figure
    """
    y_true = np.asarray(y_true)
    n = len(probas)
    fig, axes = plt.subplots(1, n + 1, figsize=(4.4 * (n + 1), 4.2))
    for i, (name, y_prob) in enumerate(probas.items()):
        _reliability_panel(axes[i], y_true, y_prob, name, f"C{i}", n_bins)
    ax = axes[-1]
    for i, (name, y_prob) in enumerate(probas.items()):
        coverage, risk = risk_coverage_curve(y_true, y_prob)
        ax.plot(coverage, risk, f"C{i}", label=f"{name} (AURC {aurc(y_true, y_prob):.4f})")
    ax.set(xlim=(0, 1), ylim=(0, None), xlabel="coverage", ylabel="selective risk (error rate)",
           title="risk-coverage")
    ax.title.set_fontsize(9)
    ax.legend(loc="upper left", fontsize=7)
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=120, bbox_inches="tight")
        plt.close(fig)
    return fig


if __name__ == "__main__":
    plot_calibration(y_test, probas, figure_path("kepsvgp_calibration.png"))
    if OUT:
        print(f"plot written to {os.path.abspath(OUT)}")
    plt.show()
