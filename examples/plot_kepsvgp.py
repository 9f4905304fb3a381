"""KEP-SVGP attention against softmax attention: calibration and selective risk on digits.

We fit two copies of the same small Transformer (``KEPSVGPClassifier`` on 2 x 2 patches of
scikit-learn's 8 x 8 digits): one whose last block is KEP-SVGP attention (Chen et al.,
ICML 2024, concat merge) and the softmax baseline (``kep_layers=0``, the paper's "MSP").
The figure shows, for each model,

* a reliability diagram: test accuracy against confidence (the largest class
  probability) in 15 equal-width bins, with the gap between accuracy and mean confidence
  shaded darker where the bin holds more rows (the bin-count-weighted sum of these gaps is
  the ECE, given in the legend), and
* the risk-coverage curve: the error rate among the ``k`` most confident test rows
  against the coverage ``k / n``; its mean is the AURC (in the legend).

Run with ``python examples/plot_kepsvgp.py --out demo_output`` (100 epochs; ``--epochs``
makes it quicker).  ``demo.py`` calls the same functions with 60 epochs.
"""
import argparse
import os
import time

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.colors import to_rgba  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402

from skgpx.kepsvgp import KEPSVGPClassifier  # noqa: E402
from skgpx.metrics import (  # noqa: E402
    aurc, expected_calibration_error, reliability_curve, risk_coverage_curve, uncertainty_report,
)

N_BINS = 15
MODELS = {"KEP-SVGP (concat)": 1, "softmax (MSP)": 0}  # name -> kep_layers


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


def plot_calibration(y_true, probas, path, n_bins=N_BINS):
    """Reliability diagrams and risk-coverage curves of several classifiers.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
        Class indices, the columns of the probabilities (labels ``0..K-1`` as for digits).
    probas : dict of str to ndarray of shape (n_samples, n_classes)
        Model name to ``predict_proba`` output on the same rows.
    path : str
        Where the PNG goes.
    n_bins : int, default=15
        Equal-width confidence bins of the reliability diagrams and the ECE.
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
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="demo_output", help="folder for the plots")
    parser.add_argument("--epochs", type=int, default=100)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    X_test, y_test, fits = digits_fits(args.epochs)
    probas = {}
    for name, model, seconds in fits:
        probas[name] = model.predict_proba(X_test)
        report = uncertainty_report(y_test, probas[name], labels=model.classes_)
        print(f"{name}: accuracy {report['accuracy']:.4f}, "
              f"ECE {report['expected_calibration_error']:.4f}, "
              f"NLL {report['negative_log_likelihood']:.4f}, "
              f"Brier {report['brier_score']:.4f}, AURC {report['aurc']:.4f}, "
              f"AUROC {report['misclassification_auroc']:.4f} ({seconds:.1f} s)")
    path = os.path.join(args.out, "kepsvgp_calibration.png")
    plot_calibration(y_test, probas, path)
    print(f"plot written to {os.path.abspath(path)}")


if __name__ == "__main__":
    main()
