"""Fit every skgpx estimator on small data sets, print a results table and save plots.

Run with ``python examples/demo.py --out demo_output`` (``make demo`` does this).
"""
import argparse
import os
import time
import warnings

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from sklearn.datasets import load_diabetes, make_friedman1  # noqa: E402
from sklearn.exceptions import ConvergenceWarning  # noqa: E402
from sklearn.gaussian_process import GaussianProcessRegressor  # noqa: E402
from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import StandardScaler  # noqa: E402

from skgpx import DeepKernelProcessRegressor, PathwiseGPSampler  # noqa: E402
from skgpx.datasets import make_gap_1d, make_sine_1d  # noqa: E402
from skgpx.metrics import uncertainty_report  # noqa: E402

# the deep Q-EP fits and plots live in the example next to this script
from plot_qep import (  # noqa: E402
    plot_rhombus, plot_step_turn, rhombus_fit, rhombus_grid, step_turn_fits, step_turn_score,
)
# ... and so do the KEP-SVGP fits and the calibration plot
from plot_kepsvgp import digits_fits, plot_calibration  # noqa: E402
# ... and the sDRD fits, scores and coefficient plot
from plot_drd import drd_fits, plot_coefficients, scores  # noqa: E402


def regressors(kernel, **params):
    """One instance of every regressor in the package (append new families here)."""
    return [PathwiseGPSampler(kernel, random_state=0, **params)]


def timed_fit(est, X, y):
    start = time.perf_counter()
    est.fit(X, y)
    return time.perf_counter() - start


def sine_demo(out, rows):
    X, y = make_sine_1d(n_samples=30, random_state=0)
    X_test, y_test = make_sine_1d(n_samples=200, random_state=1)
    grid = np.linspace(-1, 5, 300)[:, None]
    for est in regressors(ConstantKernel(1.0) * RBF(0.5) + WhiteKernel(0.1)):
        seconds = timed_fit(est, X, y)
        name = type(est).__name__
        rows.append(("sine 1-D", name, est.score(X_test, y_test), seconds, est.device_))

        mean, std = est.predict(grid, return_std=True)
        draws = est.sample_functions(5, random_state=0)(grid)  # (300, 5)
        fig, ax = plt.subplots(figsize=(7, 4))
        ax.fill_between(grid[:, 0], mean - 2 * std, mean + 2 * std, alpha=0.25,
                        label="mean ± 2 std")
        ax.plot(grid[:, 0], mean, "k", label="posterior mean")
        ax.plot(grid[:, 0], draws, lw=0.8)
        ax.plot(X[:, 0], y, "k.", label="data")
        ax.set(title=f"{name}: {est.kernel_}", xlabel="x", ylabel="y")
        ax.title.set_fontsize(8)
        ax.legend(loc="lower left", fontsize=8)
        fig.savefig(os.path.join(out, f"sine_{name}.png"), dpi=120, bbox_inches="tight")
        plt.close(fig)


def diabetes_demo(rows):
    X, y = load_diabetes(return_X_y=True)
    X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.2, random_state=0)
    kernel = ConstantKernel() * RBF(length_scale=np.ones(X.shape[1])) + WhiteKernel()
    for est in regressors(kernel, normalize_y=True):
        pipe = make_pipeline(StandardScaler(), est)
        seconds = timed_fit(pipe, X_train, y_train)
        rows.append(("diabetes", type(est).__name__, pipe.score(X_test, y_test), seconds,
                     pipe[-1].device_))


def gap_demo(out, rows):
    X, y = make_gap_1d(n_samples=1000, random_state=0)
    kernel = ConstantKernel(1.0, "fixed") * RBF(0.05, "fixed") + WhiteKernel(1e-2, "fixed")
    gap = np.linspace(4.6, 5.4, 30)[:, None]
    grid = np.linspace(0, 12, 600)[:, None]
    fig, axes = plt.subplots(2, 1, figsize=(8, 6), sharex=True, sharey=True)
    for ax, method in zip(axes, ["pathwise", "weight_space"]):
        est = PathwiseGPSampler(kernel, method=method, n_features=64, optimizer=None,
                                predict_noise="latent", random_state=0)
        seconds = timed_fit(est, X, y)
        # Latent variance in the gap: the exact posterior gives about 1 (the prior variance).
        gap_var = est.sample_y(gap, n_samples=500, random_state=0).var(axis=1).mean()
        rows.append(("gap 1-D (variance in gap)", f"PathwiseGPSampler[{method}]", gap_var,
                     seconds, est.device_))

        ax.plot(grid[:, 0], est.sample_functions(5, random_state=0)(grid), lw=0.8)
        ax.plot(X[:, 0], y, "k.", ms=1)
        ax.axvspan(4.6, 5.4, color="0.9")
        ax.set(title=f"method={method!r}, n_features=64: variance in gap {gap_var:.3f}",
               ylabel="f(x)")
    axes[-1].set_xlabel("x")
    fig.savefig(os.path.join(out, "gap_pathwise_vs_weight_space.png"), dpi=120,
                bbox_inches="tight")
    plt.close(fig)


def dkp_demo(out, rows):
    """Deep kernel process (10 solver sweeps) against scikit-learn's ARD GP."""
    X_d, y_d = load_diabetes(return_X_y=True)
    X_f, y_f = make_friedman1(n_samples=330, n_features=6, noise=0.5, random_state=0)
    for name, X, y in [("diabetes", X_d, y_d), ("friedman1 (n=330, d=6)", X_f, y_f)]:
        X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.1,
                                                            random_state=0)
        dkp = DeepKernelProcessRegressor()
        seconds = timed_fit(dkp, X_train, y_train)
        rows.append((name, "DeepKernelProcessRegressor", dkp.score(X_test, y_test), seconds,
                     dkp.device_))
        kernel = ConstantKernel() * RBF(length_scale=np.ones(X.shape[1])) + WhiteKernel()
        ard = make_pipeline(StandardScaler(), GaussianProcessRegressor(kernel, normalize_y=True))
        with warnings.catch_warnings():
            # length scales of irrelevant inputs run into sklearn's upper bound: expected
            warnings.simplefilter("ignore", ConvergenceWarning)
            seconds = timed_fit(ard, X_train, y_train)
        rows.append((name, "sklearn GPR, ARD RBF (reference)", ard.score(X_test, y_test),
                     seconds, "cpu"))

    X, y = make_sine_1d(n_samples=30, random_state=0)
    grid = np.linspace(-1, 5, 300)[:, None]
    dkp = DeepKernelProcessRegressor().fit(X, y)
    mean, std = dkp.predict(grid, return_std=True)
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.fill_between(grid[:, 0], mean - 2 * std, mean + 2 * std, alpha=0.25,
                    label="mean ± 2 std (noise included)")
    ax.plot(grid[:, 0], mean, "k", label="predictive mean")
    ax.plot(grid[:, 0], dkp.sample_y(grid, n_samples=5, random_state=0), lw=0.8)
    ax.plot(X[:, 0], y, "k.", label="data")
    ax.set(title=f"DeepKernelProcessRegressor: 2 Wishart layers, {dkp.n_iter_} sweeps",
           xlabel="x", ylabel="y")
    ax.legend(loc="lower left", fontsize=8)
    fig.savefig(os.path.join(out, "sine_DeepKernelProcessRegressor.png"), dpi=120,
                bbox_inches="tight")
    plt.close(fig)


def qep_demo(out, rows, epochs=300):
    """Deep Q-EPs (q = 1 and the deep GP q = 2) on the paper's simulated problems, with
    fewer epochs than the paper's 1000 (``examples/plot_qep.py`` runs those)."""
    X, y, fits = step_turn_fits(epochs)
    for q, model, seconds in fits:
        rows.append(("step/turn series (R² vs truth)", f"DeepQEPRegressor(q={q:g})",
                     step_turn_score(model), seconds, model.device_))
    plot_step_turn(X, y, fits, os.path.join(out, "qep_step_turn.png"))
    X, y, model, seconds = rhombus_fit(epochs)
    grid, labels = rhombus_grid()
    rows.append(("annular rhombus (grid accuracy)", "DeepQEPClassifier(q=1)",
                 model.score(grid, labels), seconds, model.device_))
    plot_rhombus(X, y, model, os.path.join(out, "qep_rhombus.png"))


def kepsvgp_demo(out, rows, epochs=60):
    """KEP-SVGP attention against the same Transformer with softmax attention on digits
    (float32, fewer epochs than ``examples/plot_kepsvgp.py``): test accuracy, ECE and NLL,
    reliability diagrams and risk-coverage curves."""
    X_test, y_test, fits = digits_fits(epochs, dtype="float32")
    probas = {}
    for name, model, seconds in fits:
        probas[name] = model.predict_proba(X_test)
        report = uncertainty_report(y_test, probas[name], labels=model.classes_)
        score = (f"{report['accuracy']:.4f} (ECE {report['expected_calibration_error']:.4f}, "
                 f"NLL {report['negative_log_likelihood']:.4f})")
        estimator = f"KEPSVGPClassifier(kep_layers={model.kep_layers}): {name}"
        rows.append(("digits (accuracy, ECE, NLL)", estimator, score, seconds, model.device_))
    plot_calibration(y_test, probas, os.path.join(out, "kepsvgp_calibration.png"))


def drd_demo(out, rows):
    """Smooth DRD against ``ARDRegression()`` and ``RidgeCV`` on the 1-D bumps problem (seed 0,
    n = 100 rows, p = 200 coefficients): coefficient MSE, held-out MSE and the ROC-AUC of the
    relevance score against the true non-zero set, and the true and recovered coefficients
    (``examples/plot_drd.py`` adds the 2-D image problem)."""
    d, fits = drd_fits("bumps", random_state=0)
    for name, model, seconds in fits:
        s = scores(d, model)
        score = (f"{s['coef_mse']:.2e} (test MSE {s['test_mse']:.3f}, "
                 f"AUC {s['support_auc']:.3f})")
        estimator = ("SmoothDRDRegressor" if name == "sDRD"
                     else f"sklearn {type(model).__name__} (reference)")
        rows.append(("bumps 1-D (coef MSE, test MSE, support AUC)", estimator, score, seconds,
                     getattr(model, "device_", "cpu")))
    plot_coefficients(d, fits, os.path.join(out, "drd_bumps.png"))


def print_table(rows):
    header = ("data set", "estimator", "score", "fit seconds", "device")
    cells = [header] + [(d, e, s if isinstance(s, str) else f"{s:.4f}", f"{t:.2f}", str(dev))
                        for d, e, s, t, dev in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    for i, row in enumerate(cells):
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)))
        if i == 0:
            print("  ".join("-" * w for w in widths))
    print("score: R² on held-out data unless the data set says otherwise; for the gap data "
          "set, the mean variance of 500 draws on [4.6, 5.4]; for digits, the test accuracy, "
          "the 15-bin expected calibration error and the negative log-likelihood; for bumps, "
          "the mean squared error of the coefficients, the MSE on 1000 held-out rows (noise "
          "floor 0.25) and the ROC-AUC of prior_variance_ (sDRD) or |coef_| (the others) "
          "against the true non-zero coefficients.")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="demo_output", help="folder for the plots")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)

    rows = []
    sine_demo(args.out, rows)
    diabetes_demo(rows)
    gap_demo(args.out, rows)
    dkp_demo(args.out, rows)
    qep_demo(args.out, rows)
    kepsvgp_demo(args.out, rows)
    drd_demo(args.out, rows)
    print_table(rows)
    print(f"plots written to {os.path.abspath(args.out)}")


if __name__ == "__main__":
    main()
