"""
Choosing an estimator: accuracy, calibration and fit time on shared data
=========================================================================

Every regressor of skgpx is fitted on the same simulated regression problem, next to
scikit-learn's :class:`~sklearn.gaussian_process.GaussianProcessRegressor` as the
reference, and both classifiers on one bundled classification set.  For each model we
report what a user choosing between them needs:

* **accuracy**: test RMSE (regression) or test accuracy (classification);
* **calibration**: the negative log predictive density (NLPD) and the empirical coverage
  of the central 90 % predictive intervals (regression); the expected calibration error
  (ECE, 15 bins) and the negative log-likelihood (classification);
* **cost**: the wall-clock time of ``fit``.

The regression data are :func:`~sklearn.datasets.make_friedman1` with noise of
standard deviation 1: five relevant inputs (the sine of a product, a quadratic and two
linear terms) and five irrelevant ones, so the best achievable RMSE is about 1.0 and the
best NLPD about 1.42 nats (the entropy of the noise).  The classification data are
scikit-learn's breast-cancer set (569 rows, 30 features, 2 classes).

Set the environment variable ``SKGPX_EXAMPLE_SIZE=small`` for a quick run (fewer rows
and epochs, about half a minute on one CPU thread).  The numbers are from one split and
one seed: differences of a few percent are noise.
"""

# %%
# Set-up
# ------
# The Gaussian NLPD and interval coverage below use each model's predictive mean and
# standard deviation (``predict(X, return_std=True)``; every regressor here includes
# the observation noise in that standard deviation).  For the deep Q-EP with ``q = 1``
# the predictive distribution is not Gaussian, so its NLPD and coverage are those of
# the Gaussian with the same mean and variance.
import os
import time
import warnings

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from scipy.stats import norm  # noqa: E402
from sklearn.datasets import load_breast_cancer, make_friedman1  # noqa: E402
from sklearn.exceptions import ConvergenceWarning  # noqa: E402
from sklearn.gaussian_process import (  # noqa: E402
    GaussianProcessClassifier,
    GaussianProcessRegressor,
)
from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import StandardScaler  # noqa: E402

from skgpx import (  # noqa: E402
    DeepKernelProcessRegressor,
    DeepQEPClassifier,
    DeepQEPRegressor,
    KEPSVGPClassifier,
    PathwiseGPSampler,
    SmoothDRDRegressor,
)
from skgpx.metrics import (  # noqa: E402
    brier_score,
    expected_calibration_error,
    negative_log_likelihood,
    reliability_curve,
)

# The five irrelevant inputs drive their ARD length scales to the upper bound, which is
# what ARD should do; scikit-learn warns about each of them.  The small run also stops
# the deep Q-EPs after a fixed number of epochs.
warnings.filterwarnings("ignore", category=ConvergenceWarning)

SMALL = os.environ.get("SKGPX_EXAMPLE_SIZE", "").lower() == "small"
N_TRAIN, N_TEST = (150, 300) if SMALL else (600, 1000)
M_INDUCING = 32 if SMALL else 64
LEVELS = np.linspace(0.05, 0.95, 19)  # nominal levels of the coverage curve


def regression_scores(y, mean, std):
    """RMSE, Gaussian NLPD, 90 % coverage and the coverage at each of ``LEVELS``."""
    z = np.abs(y - mean) / std
    return {
        "rmse": float(np.sqrt(np.mean((y - mean) ** 2))),
        "nlpd": float(-np.mean(norm.logpdf(y, loc=mean, scale=std))),
        "cover90": float(np.mean(z <= norm.ppf(0.95))),
        "curve": np.array([np.mean(z <= norm.ppf(0.5 + level / 2)) for level in LEVELS]),
    }


# %%
# Regression models
# -----------------
# The exact and sparse pathwise samplers use the same kernel as scikit-learn's GP
# (a constant times an ARD RBF plus white noise, ``normalize_y=True``, one L-BFGS-B run
# from the same start), so the exact one reproduces the reference.  The other models
# keep their defaults except where the small run needs fewer iterations.
# :class:`~skgpx.SmoothDRDRegressor` is a linear model whose prior expects coefficients
# on a grid; these features are not on one, so it is here as the linear reference
# point.  Every skgpx model runs on the CPU (``device="cpu"``) so that the fit times
# compare like with like; ``device="auto"`` would pick a GPU where there is one.
X, y = make_friedman1(n_samples=N_TRAIN + N_TEST, n_features=10, noise=1.0, random_state=0)
X_train, X_test, y_train, y_test = train_test_split(X, y, train_size=N_TRAIN, random_state=0)


def ard_kernel():
    return ConstantKernel() * RBF(np.ones(X.shape[1])) + WhiteKernel()


qep_options = dict(n_inducing=16, max_iter=40, tol=None, n_mc_samples=3,
                   n_mc_samples_predict=8) if SMALL else {}
regressors = {
    "sklearn GPR (reference)": GaussianProcessRegressor(ard_kernel(), normalize_y=True),
    "Pathwise exact": PathwiseGPSampler(ard_kernel(), normalize_y=True, random_state=0,
                                        device="cpu"),
    f"Pathwise sparse m={M_INDUCING}": PathwiseGPSampler(
        ard_kernel(), n_inducing=M_INDUCING, normalize_y=True, random_state=0, device="cpu"),
    "DKP (2 layers)": DeepKernelProcessRegressor(n_layers=2, device="cpu"),
    "Deep QEP q=1": DeepQEPRegressor(q=1.0, random_state=0, device="cpu", **qep_options),
    "Deep QEP q=2": DeepQEPRegressor(q=2.0, random_state=0, device="cpu", **qep_options),
    "SmoothDRD (linear)": SmoothDRDRegressor(device="cpu"),
}

reg_results = {}
for name, model in regressors.items():
    start = time.perf_counter()
    model.fit(X_train, y_train)
    seconds = time.perf_counter() - start
    mean, std = model.predict(X_test, return_std=True)
    reg_results[name] = dict(regression_scores(y_test, mean, std), seconds=seconds)

print(f"make_friedman1: {N_TRAIN} training rows, {N_TEST} test rows, 10 features, noise sd 1")
print(f"{'model':<24} {'RMSE':>6} {'NLPD':>6} {'cover90':>8} {'fit s':>7}")
for name, r in reg_results.items():
    print(f"{name:<24} {r['rmse']:6.3f} {r['nlpd']:6.3f} {r['cover90']:8.3f} "
          f"{r['seconds']:7.2f}")

# %%
# Classification models
# ---------------------
# :class:`~skgpx.DeepQEPClassifier` (softmax likelihood, ``q = 1``) and
# :class:`~skgpx.KEPSVGPClassifier` (one feature per token, KEP-SVGP attention in the
# last of two blocks), with the same Transformer with softmax attention
# (``kep_layers=0``) and scikit-learn's Laplace-approximated
# :class:`~sklearn.gaussian_process.GaussianProcessClassifier` as references.
# scikit-learn's classifier gets standardised inputs; the skgpx ones standardise
# internally.
Xc, yc = load_breast_cancer(return_X_y=True)
Xc_train, Xc_test, yc_train, yc_test = train_test_split(
    Xc, yc, test_size=0.3, stratify=yc, random_state=0)
if SMALL:
    Xc_train, yc_train = Xc_train[:150], yc_train[:150]

epochs = 8 if SMALL else 60
classifiers = {
    "sklearn GPC (reference)": make_pipeline(
        StandardScaler(), GaussianProcessClassifier(1.0 * RBF(5.0), random_state=0)),
    "Deep QEP q=1": DeepQEPClassifier(q=1.0, random_state=0, device="cpu", **qep_options),
    "KEP-SVGP": KEPSVGPClassifier(max_iter=epochs, random_state=0, device="cpu"),
    "softmax Transformer": KEPSVGPClassifier(kep_layers=0, max_iter=epochs, random_state=0,
                                             device="cpu"),
}

clf_results = {}
for name, model in classifiers.items():
    start = time.perf_counter()
    model.fit(Xc_train, yc_train)
    seconds = time.perf_counter() - start
    proba = model.predict_proba(Xc_test)
    clf_results[name] = {
        "accuracy": float(np.mean(proba.argmax(axis=1) == yc_test)),
        "ece": expected_calibration_error(yc_test, proba),
        "nll": negative_log_likelihood(yc_test, proba),
        "brier": brier_score(yc_test, proba),
        "curve": reliability_curve(yc_test, proba, n_bins=10),
        "seconds": seconds,
    }

print(f"\nbreast cancer: {len(yc_train)} training rows, {len(yc_test)} test rows")
print(f"{'model':<24} {'acc':>6} {'ECE':>6} {'NLL':>6} {'Brier':>6} {'fit s':>7}")
for name, r in clf_results.items():
    print(f"{name:<24} {r['accuracy']:6.3f} {r['ece']:6.3f} {r['nll']:6.3f} "
          f"{r['brier']:6.3f} {r['seconds']:7.2f}")

# %%
# Regression: accuracy, calibration and cost in one figure
# --------------------------------------------------------
# Left to right: test RMSE (the dotted line is the noise level), NLPD (dotted: the
# noise entropy, the best any model can reach on average), the coverage curve (the
# fraction of test targets inside the central predictive interval of each nominal
# level; a calibrated model follows the diagonal, a curve below it means intervals
# that are too narrow) and the fit time.
names = list(reg_results)
colors = plt.cm.tab10(np.arange(len(names)))
fig, axes = plt.subplots(1, 4, figsize=(15, 4.2))
positions = np.arange(len(names))
for ax, key, title, ref in [(axes[0], "rmse", "test RMSE", 1.0),
                            (axes[1], "nlpd", "test NLPD (nats)", norm.entropy()),
                            (axes[3], "seconds", "fit time (s)", None)]:
    ax.barh(positions, [reg_results[n][key] for n in names], color=colors)
    ax.set_yticks(positions, names if ax is axes[0] else [""] * len(names))
    ax.invert_yaxis()
    ax.set_title(title)
    if ref is not None:
        ax.axvline(ref, color="k", linestyle=":", linewidth=1)
axes[2].plot([0, 1], [0, 1], color="k", linestyle=":", linewidth=1)
for name, color in zip(names, colors):
    axes[2].plot(LEVELS, reg_results[name]["curve"], "o-", color=color, markersize=3,
                 label=name)
axes[2].set_xlabel("nominal level of the central interval")
axes[2].set_ylabel("empirical coverage")
axes[2].set_title("coverage curve")
axes[2].legend(fontsize=7, loc="lower right")
fig.suptitle(f"make_friedman1, {N_TRAIN} training rows")
fig.tight_layout()

# %%
# Classification: reliability diagrams
# ------------------------------------
# Test accuracy against mean confidence (the largest class probability) in 10
# equal-width bins; marker area grows with the number of rows in the bin.  Points
# below the diagonal are over-confident bins.  With two classes the confidence is at
# least 0.5, and most test rows fall in the last bin, so the few rows in the other
# bins make them noisy: read the large markers.
fig, ax = plt.subplots(figsize=(5, 4.5))
ax.plot([0.5, 1], [0.5, 1], color="k", linestyle=":", linewidth=1)
for (name, r), color in zip(clf_results.items(), plt.cm.tab10(np.arange(4))):
    accuracy, confidence, counts = r["curve"]
    filled = counts > 0
    ax.scatter(confidence[filled], accuracy[filled], s=6 + 2 * counts[filled], color=color,
               alpha=0.7, label=f"{name} (ECE {r['ece']:.3f})")
ax.set_xlabel("mean confidence in bin")
ax.set_ylabel("accuracy in bin")
ax.set_title("breast cancer, test set")
ax.legend(fontsize=7, loc="lower right")
fig.tight_layout()
plt.show()
