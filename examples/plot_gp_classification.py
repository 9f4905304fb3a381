"""
GP classification: decision boundaries of posterior draws, exact and sparse
===========================================================================

``PathwiseGPClassifier`` is scikit-learn's ``GaussianProcessClassifier`` (the Laplace
approximation, the same numbers) plus two things scikit-learn's has not: posterior draws of
the *latent* function, evaluable anywhere, and a sparse variational mode for data sets far
beyond an exact GP's reach.

* On 200 rows of two interleaved half-moons we fit both classifiers with the same kernel
  and compare their probabilities, then draw eight latent functions from the Laplace
  posterior: each draw's zero level set is one plausible decision boundary.  Where the data
  pin the boundary down the draws agree; away from the data they fan out.
* On 20 000 rows the sparse mode (64 inducing points, mini-batches, natural gradients)
  fits in seconds; its reliability diagram (``skgpx.metrics``) on held-out rows shows how
  well its probabilities are calibrated.

Run as a script with ``python examples/plot_gp_classification.py [--out FOLDER]`` (about
twenty seconds of CPU time on one thread).  With ``SKGPX_EXAMPLE_SIZE=small`` in the
environment (or ``--quick``) it uses 100 and 2 000 rows.
"""
import argparse
import os
import time
import warnings

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
from sklearn.datasets import make_moons
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process import GaussianProcessClassifier
from sklearn.gaussian_process.kernels import RBF, ConstantKernel
from sklearn.model_selection import train_test_split

from skgpx import PathwiseGPClassifier
from skgpx.metrics import expected_calibration_error, reliability_curve

parser = argparse.ArgumentParser(description="GP classification with posterior draws.")
parser.add_argument("--out", help="folder to save the figures in (default: only show them)")
parser.add_argument("--quick", action="store_true",
                    help="the small setting, as SKGPX_EXAMPLE_SIZE=small")
args = parser.parse_args()
SMALL = os.environ.get("SKGPX_EXAMPLE_SIZE") == "small" or args.quick
if args.out:
    matplotlib.use("Agg")  # the figures go to files: no windows
    os.makedirs(args.out, exist_ok=True)
N_EXACT, N_SPARSE = (100, 2000) if SMALL else (200, 20_000)
warnings.filterwarnings("ignore", category=ConvergenceWarning)


def kernel():
    return ConstantKernel(1.0, (1e-2, 1e3)) * RBF(1.0, (1e-2, 1e2))


def grid(size=120):
    g0, g1 = np.meshgrid(np.linspace(-1.8, 2.8, size), np.linspace(-1.4, 1.9, size))
    return g0, g1, np.column_stack([g0.ravel(), g1.ravel()])


# %%
# Exact mode: scikit-learn's classifier, and its posterior functions
# ------------------------------------------------------------------
# Same constructor, same optimiser, same result: the fitted hyperparameters and the
# probabilities agree with scikit-learn's to round-off.

X, y = make_moons(N_EXACT, noise=0.25, random_state=0)
theirs = GaussianProcessClassifier(kernel(), random_state=0).fit(X, y)
ours = PathwiseGPClassifier(kernel(), random_state=0).fit(X, y)
g0, g1, G = grid()
p_ours = ours.predict_proba(G)[:, 1]
print(f"kernel: ours {ours.kernel_}, scikit-learn {theirs.kernel_}")
print(f"largest probability difference on the grid: "
      f"{np.abs(p_ours - theirs.predict_proba(G)[:, 1]).max():.1e}")

# Eight functions from the Laplace posterior of the latent function; each is evaluated on
# the whole grid at once, and would give the same values at any other points.
functions = ours.sample_functions(n_samples=8, random_state=0)
paths = functions(G)  # (n_grid, 8)

fig, ax = plt.subplots(1, 2, figsize=(11, 4.4), sharey=True)
im = ax[0].contourf(g0, g1, p_ours.reshape(g0.shape), levels=np.linspace(0, 1, 11),
                    cmap="RdBu_r", alpha=0.8)
ax[0].contour(g0, g1, p_ours.reshape(g0.shape), levels=[0.5], colors="k")
ax[0].set_title("P(y = 1): exact mode (= scikit-learn's GPC)")
for s in range(paths.shape[1]):
    ax[1].contour(g0, g1, paths[:, s].reshape(g0.shape), levels=[0.0],
                  colors=[plt.cm.viridis(s / 8)], linewidths=1.2)
ax[1].set_title("zero level sets of 8 posterior latent draws")
for a in ax:
    a.scatter(X[:, 0], X[:, 1], c=y, cmap="RdBu_r", edgecolors="k", s=18)
    a.set_xlabel("$x_1$")
ax[0].set_ylabel("$x_2$")
fig.colorbar(im, ax=ax[0])
fig.tight_layout()
if args.out:
    fig.savefig(os.path.join(args.out, "gp_classification_draws.png"), dpi=110)

# %%
# Sparse mode on many rows
# ------------------------
# ``n_inducing=64`` switches to the sparse variational GP: natural-gradient steps on the
# inducing distribution and Adam on the kernel and the inducing inputs, on mini-batches of
# 1024 rows.  Memory grows with the inducing points, not with the rows.

X, y = make_moons(N_SPARSE + 5000, noise=0.25, random_state=1)
X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=5000, random_state=0)
sparse = PathwiseGPClassifier(kernel(), n_inducing=64, optimizer="adam", learning_rate=0.05,
                              max_iter=30, random_state=0)
start = time.perf_counter()
sparse.fit(X_tr, y_tr)
seconds = time.perf_counter() - start
proba = sparse.predict_proba(X_te)
ece = expected_calibration_error(y_te, proba)
print(f"sparse mode on {len(X_tr)} rows: {seconds:.1f} s, {sparse.n_iter_} epochs, "
      f"test accuracy {sparse.score(X_te, y_te):.3f}, ECE {ece:.3f}")
accuracy, confidence, counts = reliability_curve(y_te, proba, n_bins=10)

fig, ax = plt.subplots(1, 2, figsize=(11, 4.4))
p_sparse = sparse.predict_proba(G)[:, 1]
ax[0].contourf(g0, g1, p_sparse.reshape(g0.shape), levels=np.linspace(0, 1, 11),
               cmap="RdBu_r", alpha=0.8)
ax[0].contour(g0, g1, p_sparse.reshape(g0.shape), levels=[0.5], colors="k")
Z = sparse.inducing_points_
ax[0].scatter(Z[:, 0], Z[:, 1], marker="x", c="k", s=25, label="inducing inputs")
ax[0].set(xlim=(g0.min(), g0.max()), ylim=(g1.min(), g1.max()))
ax[0].legend(loc="lower left")
ax[0].set_title(f"sparse mode, {len(X_tr)} rows, m = 64")
keep = counts > 0
ax[1].plot([0.5, 1], [0.5, 1], "k--", lw=1, label="perfect calibration")
ax[1].plot(confidence[keep], accuracy[keep], "o-", label=f"sparse GPC (ECE {ece:.3f})")
ax[1].set_xlabel("confidence (top-label probability)")
ax[1].set_ylabel("accuracy")
ax[1].set_title("reliability on held-out rows")
ax[1].legend()
fig.tight_layout()
if args.out:
    fig.savefig(os.path.join(args.out, "gp_classification_sparse.png"), dpi=110)
else:
    plt.show()
