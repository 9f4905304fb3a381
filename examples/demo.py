"""Fit every skgpx estimator and mode beside the scikit-learn (or GPyTorch) model it replaces,
print one results table and save plots.

Run with ``python examples/demo.py --out demo_output`` (``make demo`` does this); ``--quick`` (or
``SKGPX_EXAMPLE_SIZE=small``) runs tiny versions of every fit, to check that it runs, not to read
the numbers.  Fits that are stopped early here run to their defaults in ``examples/plot_*.py``.
"""
import argparse
import os
import time
import warnings

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from sklearn.base import clone  # noqa: E402
from sklearn.datasets import make_friedman1, make_moons  # noqa: E402
from sklearn.exceptions import ConvergenceWarning  # noqa: E402
from sklearn.gaussian_process import (  # noqa: E402
    GaussianProcessClassifier,
    GaussianProcessRegressor,
)
from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel  # noqa: E402
from sklearn.metrics import r2_score  # noqa: E402

from skgpx import (  # noqa: E402
    DeepKernelProcessRegressor,
    DeepQEPClassifier,
    KEPSVGPClassifier,
    PathwiseGPClassifier,
    PathwiseGPSampler,
)
from skgpx.datasets import make_annular_rhombus, make_gap_1d, make_sine_1d  # noqa: E402
from skgpx.metrics import expected_calibration_error, negative_log_likelihood  # noqa: E402

# the deep Q-EP, KEP-SVGP and sDRD problems and plots live in the examples next to this script
from plot_drd import drd_fits, plot_coefficients, scores  # noqa: E402
from plot_kepsvgp import MODELS as KEP_MODELS  # noqa: E402
from plot_kepsvgp import digits_split, plot_calibration  # noqa: E402
from plot_qep import (  # noqa: E402
    plot_rhombus, plot_step_turn, rhombus_grid, step_turn_fits, step_turn_score,
)

# Several fits below stop after fewer iterations than their defaults (and ARD length scales
# of irrelevant inputs reach scikit-learn's bounds): expected here, so not reported.
warnings.filterwarnings("ignore", category=ConvergenceWarning)
REFERENCE = " (reference)"
Z90, Z95 = 1.6448536, 1.959964


def timed_fit(est, X, y):
    start = time.perf_counter()
    est.fit(X, y)
    return time.perf_counter() - start


def cover(y, mean, std, z=Z95):
    """Fraction of ``y`` inside ``mean +- z std``."""
    return float(np.mean(np.abs(y - mean) <= z * std))


def regression_row(task, name, est, seconds, X_test, y_test):
    mean, std = est.predict(X_test, return_std=True)
    return (task, name, f"R² {r2_score(y_test, mean):.3f}",
            f"cover95 {cover(y_test, mean, std):.3f}", seconds, getattr(est, "device_", "cpu"))


def classification_row(task, name, proba, y_test, seconds, device):
    log_loss = negative_log_likelihood(y_test, proba)
    return (task, name, f"acc {np.mean(proba.argmax(axis=1) == y_test):.3f}, "
            f"log-loss {log_loss:.3f}", f"ECE {expected_calibration_error(y_test, proba):.3f}",
            seconds, device)


def save(fig, out, name):
    fig.savefig(os.path.join(out, name), dpi=110, bbox_inches="tight")
    plt.close(fig)


def plot_sine(X, y, grid, mean, std, draws, title, band, path):
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.fill_between(grid[:, 0], mean - 2 * std, mean + 2 * std, alpha=0.25, label=band)
    ax.plot(grid[:, 0], mean, "k")
    ax.plot(grid[:, 0], draws, lw=0.8)
    ax.plot(X[:, 0], y, "k.", label="data")
    ax.set(title=title, xlabel="x", ylabel="y")
    ax.title.set_fontsize(8)
    ax.legend(loc="lower left", fontsize=8)
    save(fig, *os.path.split(path))


# ---------------------------------------------------------------- GP regression


def gp_regression_demo(out, rows, notes, size):
    """Exact mode against scikit-learn's GPR (same kernel, same optimiser); the sparse mode on
    many rows against scikit-learn's GPR on the subsample it fits in the same time."""
    X, y = make_sine_1d(n_samples=30, random_state=0)
    X_test, y_test = make_sine_1d(n_samples=200, random_state=1)
    kernel = ConstantKernel(1.0) * RBF(0.5) + WhiteKernel(0.1)
    theirs = GaussianProcessRegressor(kernel, random_state=0)
    ours = PathwiseGPSampler(kernel, random_state=0)
    for name, est in [("sklearn GPR" + REFERENCE, theirs), ("PathwiseGPSampler", ours)]:
        rows.append(regression_row("sine 1-D, 30 rows", name, est, timed_fit(est, X, y),
                                   X_test, y_test))
    grid = np.linspace(-1, 5, 300)[:, None]
    mean, std = ours.predict(grid, return_std=True)
    notes.append(f"sine 1-D: largest |predictive mean difference| to scikit-learn's on a grid "
                 f"{np.abs(mean - theirs.predict(grid)).max():.1e}")
    plot_sine(X, y, grid, mean, std, ours.sample_functions(5, random_state=0)(grid),
              f"PathwiseGPSampler: {ours.kernel_}", "posterior mean ± 2 std, 5 function draws",
              os.path.join(out, "sine_PathwiseGPSampler.png"))

    n, n_sub = size["sparse_rows"], size["sklearn_rows"]
    X, y = make_friedman1(n_samples=n + 1000, n_features=5, noise=1.0, random_state=0)
    X_test, y_test = X[n:], y[n:]
    task = f"friedman1 d=5, {n} rows"
    kernel = ConstantKernel() * RBF(np.ones(5)) + WhiteKernel()
    theirs = GaussianProcessRegressor(kernel, normalize_y=True)
    rows.append(regression_row(task, f"sklearn GPR on {n_sub} rows" + REFERENCE, theirs,
                               timed_fit(theirs, X[:n_sub], y[:n_sub]), X_test, y_test))
    ours = PathwiseGPSampler(kernel, n_inducing=64, normalize_y=True, random_state=0)
    rows.append(regression_row(task, "PathwiseGPSampler(n_inducing=64)", ours,
                               timed_fit(ours, X[:n], y[:n]), X_test, y_test))


def gap_demo(out, rows):
    """Pathwise conditioning against the weight-space posterior (random features alone)."""
    X, y = make_gap_1d(n_samples=1000, random_state=0)
    kernel = ConstantKernel(1.0, "fixed") * RBF(0.05, "fixed") + WhiteKernel(1e-2, "fixed")
    gap = np.linspace(4.6, 5.4, 30)[:, None]
    grid = np.linspace(0, 12, 600)[:, None]
    fig, axes = plt.subplots(2, 1, figsize=(8, 6), sharex=True, sharey=True)
    for ax, method in zip(axes, ["pathwise", "weight_space"]):
        est = PathwiseGPSampler(kernel, method=method, n_features=64, optimizer=None,
                                predict_noise="latent", random_state=0)
        seconds = timed_fit(est, X, y)
        # the exact posterior's latent variance in the gap is about 1, the prior's
        gap_var = est.sample_y(gap, n_samples=500, random_state=0).var(axis=1).mean()
        rows.append(("gap 1-D, 1000 rows", f"PathwiseGPSampler(method={method!r})",
                     f"gap variance {gap_var:.3f}", "(exact: 1.00)", seconds, est.device_))
        ax.plot(grid[:, 0], est.sample_functions(5, random_state=0)(grid), lw=0.8)
        ax.plot(X[:, 0], y, "k.", ms=1)
        ax.axvspan(4.6, 5.4, color="0.9")
        ax.set(title=f"method={method!r}, n_features=64: variance in gap {gap_var:.3f}",
               ylabel="f(x)")
    axes[-1].set_xlabel("x")
    save(fig, out, "gap_pathwise_vs_weight_space.png")


def robust_demo(out, rows, size):
    """Student-t noise against Gaussian noise on gross outliers, and a noise GP against one
    noise level on noise that grows tenfold; scikit-learn's GPR is the Gaussian model."""
    rng = np.random.RandomState(0)

    def outliers(n):
        X = rng.uniform(-3.0, 3.0, size=(n, 1))
        f = np.sin(2.0 * X[:, 0]) + 0.3 * X[:, 0]
        y = f + 0.2 * rng.standard_normal(n)
        bad = rng.uniform(size=n) < 0.08  # 8 % of the targets shifted by 3 to 6
        y[bad] += rng.choice([-1.0, 1.0], bad.sum()) * rng.uniform(3.0, 6.0, bad.sum())
        return X, y, f

    n = size["outlier_rows"]
    X, y, _ = outliers(n)
    X_test, y_test, f_test = outliers(2000)
    grid = np.linspace(-3.0, 3.0, 200)[:, None]
    task = f"{n} rows, 8 % outliers"
    gauss = GaussianProcessRegressor(ConstantKernel() * RBF() + WhiteKernel(), normalize_y=True)
    student = PathwiseGPSampler(ConstantKernel() * RBF(), likelihood="student_t",
                                normalize_y=True, random_state=0)
    bands = {}
    for name, est in [("sklearn GPR, Gaussian" + REFERENCE, gauss),
                      ("PathwiseGPSampler(likelihood='student_t')", student)]:
        legend = "Student-t" if est is student else "Gaussian (sklearn GPR)"
        seconds = timed_fit(est, X, y)
        if est is gauss:
            mean, std = est.predict(X_test, return_std=True)
            low, high = mean - Z90 * std, mean + Z90 * std
            m, s = est.predict(grid, return_std=True)
            bands[legend] = m, m - Z90 * s, m + Z90 * s
        else:
            # with nu near 2 the Student-t variance is dominated by its far tail: its 90 %
            # band is read off the quantiles of draws of y
            mean = est.predict(X_test)
            low, high = np.quantile(est.sample_y(X_test, 400, random_state=1), [0.05, 0.95], 1)
            q = np.quantile(est.sample_y(grid, 1000, random_state=0), [0.05, 0.95], 1)
            bands[legend] = est.predict(grid), q[0], q[1]
        inside = np.mean((y_test >= low) & (y_test <= high))
        rows.append((task, name, f"RMSE to f {np.sqrt(np.mean((mean - f_test) ** 2)):.3f}",
                     f"cover90 {inside:.3f}, width {np.mean(high - low):.2f}", seconds,
                     getattr(est, "device_", "cpu")))

    def hetero(n):
        X = rng.uniform(-1.0, 1.0, size=(n, 1))
        s = 0.5 * 10.0 ** ((X[:, 0] - 1.0) / 2.0)  # from 0.05 on the left to 0.5 on the right
        return X, np.sin(3.0 * X[:, 0]) + s * rng.standard_normal(n), np.sin(3.0 * X[:, 0])

    n = size["hetero_rows"]
    Xh, yh, _ = hetero(n)
    Xh_test, yh_test, fh_test = hetero(2000)
    grid_h = np.linspace(-1.0, 1.0, 200)[:, None]
    task = f"{n} rows, noise sd x10"
    homo = GaussianProcessRegressor(ConstantKernel() * RBF() + WhiteKernel(), normalize_y=True)
    noise_gp = PathwiseGPSampler(ConstantKernel() * RBF(), likelihood="heteroscedastic",
                                 n_inducing=32, normalize_y=True, random_state=0)
    bands_h = {}
    for name, est in [("sklearn GPR, one noise level" + REFERENCE, homo),
                      ("PathwiseGPSampler(likelihood='heteroscedastic', n_inducing=32)",
                       noise_gp)]:
        seconds = timed_fit(est, Xh, yh)
        mean, std = est.predict(Xh_test, return_std=True)
        inside = np.abs(yh_test - mean) <= Z90 * std
        third = np.clip(((Xh_test[:, 0] + 1.0) * 1.5).astype(int), 0, 2)
        by_third = "/".join(f"{inside[third == k].mean():.2f}" for k in range(3))
        rows.append((task, name, f"RMSE to f {np.sqrt(np.mean((mean - fh_test) ** 2)):.3f}",
                     f"cover90 by third {by_third}", seconds, getattr(est, "device_", "cpu")))
        m, s = est.predict(grid_h, return_std=True)
        bands_h["heteroscedastic" if est is noise_gp else "one noise level (sklearn GPR)"] = (
            m, m - Z90 * s, m + Z90 * s)

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    axes[0].plot(X[:, 0], y, "k.", ms=3, label="data")
    axes[0].plot(grid[:, 0], np.sin(2.0 * grid[:, 0]) + 0.3 * grid[:, 0], "k--", lw=1,
                 label="true f")
    axes[1].plot(Xh[:, 0], yh, "k.", ms=2, label="data")
    axes[1].plot(grid_h[:, 0], np.sin(3.0 * grid_h[:, 0]), "k--", lw=1, label="true f")
    for ax, g, fits in [(axes[0], grid, bands), (axes[1], grid_h, bands_h)]:
        for color, (name, (m, low, high)) in zip(["C0", "C1"], fits.items()):
            ax.plot(g[:, 0], m, color, label=f"{name}: mean, 90 %")
            ax.fill_between(g[:, 0], low, high, color=color, alpha=0.25)
        ax.legend(loc="lower center", fontsize=7)
        ax.set_xlabel("x")
    span = y.max() - y.min()
    axes[0].set(ylim=(y.min() - 0.35 * span, y.max() + 0.05 * span), ylabel="y",
                title=f"gross outliers (Student-t nu = {student.df_:.2f})")
    axes[1].set(ylim=(-3.2, 2.0), title="noise sd growing tenfold (m = 32)")
    save(fig, out, "robust_regression.png")


# ---------------------------------------------------------------- GP classification


def moons_kernel():
    return ConstantKernel(1.0, (1e-2, 1e3)) * RBF(1.0, (1e-2, 1e2))


def gpytorch_svgp_probabilities(X, y, X_test, inducing, epochs, learning_rate, batch=1024):
    """GPyTorch's SVGP classifier: ``(seconds, P(y = 1) on X_test)``, or None without gpytorch.

    The same kernel (a scaled RBF from length scale and scale 1), Bernoulli-probit likelihood
    and number of inducing inputs as the sparse ``PathwiseGPClassifier`` beside it; Adam on
    every parameter, as GPyTorch's tutorials train it, for the same epochs and batch size.
    """
    try:
        import gpytorch
    except ImportError:
        return None

    class SVGP(gpytorch.models.ApproximateGP):
        def __init__(self, Z):
            q = gpytorch.variational.CholeskyVariationalDistribution(Z.shape[0])
            super().__init__(gpytorch.variational.VariationalStrategy(
                self, Z, q, learn_inducing_locations=True))
            self.mean_module = gpytorch.means.ZeroMean()
            self.covar_module = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel())

        def forward(self, x):
            return gpytorch.distributions.MultivariateNormal(self.mean_module(x),
                                                             self.covar_module(x))

    torch.manual_seed(0)
    model = SVGP(torch.as_tensor(inducing, dtype=torch.float64)).double()
    likelihood = gpytorch.likelihoods.BernoulliLikelihood().double()
    elbo = gpytorch.mlls.VariationalELBO(likelihood, model, num_data=len(X))
    optimizer = torch.optim.Adam(model.parameters(), lr=learning_rate)
    Xt, yt = torch.as_tensor(X), torch.as_tensor(y, dtype=torch.float64)
    start = time.perf_counter()
    model.train()
    for _ in range(epochs):
        order = torch.randperm(len(Xt))
        for i in range(0, len(Xt), batch):
            rows = order[i:i + batch]
            optimizer.zero_grad()
            (-elbo(model(Xt[rows]), yt[rows])).backward()
            optimizer.step()
    seconds = time.perf_counter() - start
    model.eval()
    with torch.no_grad():
        p = likelihood(model(torch.as_tensor(X_test))).mean.numpy()
    return seconds, p


def classification_demo(out, rows, notes, size):
    """The exact mode against scikit-learn's GPC (Laplace, the same numbers) with latent
    draws; the sparse mode on many rows against GPyTorch's SVGP."""
    X, y = make_moons(200 + 1000, noise=0.25, random_state=0)
    X, y, X_test, y_test = X[:200], y[:200], X[200:], y[200:]
    theirs = GaussianProcessClassifier(moons_kernel(), random_state=0)
    ours = PathwiseGPClassifier(moons_kernel(), random_state=0)
    for name, est in [("sklearn GPC" + REFERENCE, theirs), ("PathwiseGPClassifier", ours)]:
        seconds = timed_fit(est, X, y)
        rows.append(classification_row("moons, 200 rows", name, est.predict_proba(X_test),
                                       y_test, seconds, getattr(est, "device_", "cpu")))
    g0, g1 = np.meshgrid(np.linspace(-1.8, 2.8, 100), np.linspace(-1.4, 1.9, 100))
    G = np.column_stack([g0.ravel(), g1.ravel()])
    p_ours = ours.predict_proba(G)[:, 1]
    notes.append(f"moons: largest |P(y=1) difference| to scikit-learn's GPC on a grid "
                 f"{np.abs(p_ours - theirs.predict_proba(G)[:, 1]).max():.1e}")
    paths = ours.sample_functions(n_samples=8, random_state=0)(G)  # latent draws, (n_grid, 8)

    n, epochs = size["classifier_rows"], size["classifier_epochs"]
    Xs, ys = make_moons(n + 5000, noise=0.25, random_state=1)
    Xs, ys, Xs_test, ys_test = Xs[:n], ys[:n], Xs[n:], ys[n:]
    task = f"moons, {n} rows, probit link"
    sparse = PathwiseGPClassifier(moons_kernel(), n_inducing=64, link="probit",
                                  optimizer="adam", learning_rate=0.05, max_iter=epochs,
                                  tol=None, random_state=0)
    # the first sparse fit in a process also compiles kernels (about a second): not an epoch's
    # cost, so an untimed fit on a few rows pays it, as one does for GPyTorch below
    clone(sparse).set_params(n_inducing=8, max_iter=1).fit(Xs[:256], ys[:256])
    seconds = timed_fit(sparse, Xs, ys)
    rows.append(classification_row(task, "PathwiseGPClassifier(n_inducing=64)",
                                   sparse.predict_proba(Xs_test), ys_test, seconds,
                                   sparse.device_))
    # GPyTorch's tutorials start the inducing inputs at training rows; ours are k-means++
    Z0 = Xs[np.random.RandomState(0).choice(n, 64, replace=False)]
    gpytorch_svgp_probabilities(Xs[:256], ys[:256], Xs_test[:8], Z0[:8], 1, 0.05)
    reference = gpytorch_svgp_probabilities(Xs, ys, Xs_test, Z0, epochs, 0.05)
    if reference is None:
        notes.append("GPyTorch is not installed: its SVGP reference row is skipped "
                     "(pip install gpytorch, or make install-bench, to add it)")
    else:
        seconds, p = reference
        rows.append(classification_row(task, "GPyTorch SVGP, Adam" + REFERENCE,
                                       np.column_stack([1 - p, p]), ys_test, seconds, "cpu"))

    fig, axes = plt.subplots(1, 3, figsize=(16, 4.4), sharey=True)
    p_sparse = sparse.predict_proba(G)[:, 1]
    for ax, p, title in [(axes[0], p_ours, "P(y = 1), exact mode (= scikit-learn's GPC)"),
                         (axes[2], p_sparse, f"P(y = 1), sparse mode on {n} rows, m = 64")]:
        ax.contourf(g0, g1, p.reshape(g0.shape), levels=np.linspace(0, 1, 11), cmap="RdBu_r",
                    alpha=0.8)
        ax.contour(g0, g1, p.reshape(g0.shape), levels=[0.5], colors="k")
        ax.set_title(title, fontsize=9)
    for s in range(paths.shape[1]):
        axes[1].contour(g0, g1, paths[:, s].reshape(g0.shape), levels=[0.0],
                        colors=[plt.cm.viridis(s / 8)], linewidths=1.2)
    axes[1].set_title("decision boundaries of 8 latent posterior draws", fontsize=9)
    for ax in axes[:2]:
        ax.scatter(X[:, 0], X[:, 1], c=y, cmap="RdBu_r", edgecolors="k", s=14)
    Z = sparse.inducing_points_
    axes[2].scatter(Z[:, 0], Z[:, 1], marker="x", c="k", s=20, label="inducing inputs")
    axes[2].set(xlim=(g0.min(), g0.max()), ylim=(g1.min(), g1.max()))
    axes[2].legend(loc="lower left", fontsize=8)
    save(fig, out, "gp_classification.png")


# ---------------------------------------------------------------- deep kernel processes


def dkp_demo(out, rows, size):
    """The deep kernel process, exact on a few hundred rows and sparse on ten times more,
    against scikit-learn's ARD GP on the same held-out rows."""
    n_exact, n_sparse = size["dkp_exact_rows"], size["dkp_sparse_rows"]
    X, y = make_friedman1(n_samples=n_sparse + 1000, n_features=6, noise=0.5, random_state=0)
    X_test, y_test = X[n_sparse:], y[n_sparse:]
    kernel = ConstantKernel() * RBF(np.ones(6)) + WhiteKernel()
    fits = [(f"friedman1 d=6, {n_exact} rows", "sklearn GPR, ARD RBF" + REFERENCE,
             GaussianProcessRegressor(kernel, normalize_y=True), n_exact),
            (f"friedman1 d=6, {n_exact} rows", "DeepKernelProcessRegressor",
             DeepKernelProcessRegressor(max_iter=size["dkp_sweeps"]), n_exact),
            (f"friedman1 d=6, {n_sparse} rows", "DeepKernelProcessRegressor(n_inducing=32)",
             DeepKernelProcessRegressor(n_inducing=32, max_iter=size["dkp_iterations"],
                                        random_state=0), n_sparse)]
    for task, name, est, n in fits:
        rows.append(regression_row(task, name, est, timed_fit(est, X[:n], y[:n]), X_test,
                                   y_test))

    X, y = make_sine_1d(n_samples=30, random_state=0)
    grid = np.linspace(-1, 5, 300)[:, None]
    dkp = DeepKernelProcessRegressor(max_iter=size["dkp_sweeps"]).fit(X, y)
    mean, std = dkp.predict(grid, return_std=True)
    plot_sine(X, y, grid, mean, std, dkp.sample_y(grid, n_samples=5, random_state=0),
              f"DeepKernelProcessRegressor: 2 Wishart layers, {dkp.n_iter_} sweeps",
              "predictive mean ± 2 std (noise included), 5 draws",
              os.path.join(out, "sine_DeepKernelProcessRegressor.png"))


# ---------------------------------------------------------------- deep Q-EPs, KEP-SVGP, sDRD


def qep_demo(out, rows, size):
    """Deep Q-EPs (q = 1 and the deep GP, q = 2) on the paper's simulated problems with fewer
    epochs than its 1000, beside a GP with a stationary kernel."""
    X, y, fits = step_turn_fits(size["qep_epochs"])
    task = "step/turn series, 100 rows"
    gp = GaussianProcessRegressor(ConstantKernel() * RBF() + WhiteKernel())
    seconds = timed_fit(gp, X, y)
    rows.append((task, "sklearn GPR" + REFERENCE, f"R² vs truth {step_turn_score(gp):.3f}", "",
                 seconds, "cpu"))
    for q, model, seconds in fits:
        rows.append((task, f"DeepQEPRegressor(q={q:g}), {size['qep_epochs']} epochs",
                     f"R² vs truth {step_turn_score(model):.3f}", "", seconds, model.device_))
    plot_step_turn(X, y, fits, os.path.join(out, "qep_step_turn.png"))

    X, y = make_annular_rhombus(n_samples=500, random_state=0)
    grid, labels = rhombus_grid()
    task = "annular rhombus, 500 rows, 3 classes"
    softmax = PathwiseGPClassifier(ConstantKernel() * RBF(), n_inducing=64,
                                   multi_class="softmax", optimizer="adam", learning_rate=0.05,
                                   max_iter=size["softmax_epochs"], random_state=0)
    deep = DeepQEPClassifier(q=1.0, max_iter=size["rhombus_epochs"], tol=None, random_state=0)
    for name, model in [("PathwiseGPClassifier(n_inducing=64, multi_class='softmax')", softmax),
                        (f"DeepQEPClassifier(q=1), {size['rhombus_epochs']} epochs", deep)]:
        seconds = timed_fit(model, X, y)
        proba = model.predict_proba(grid)
        rows.append((task, name, f"grid accuracy {np.mean(proba.argmax(1) == labels):.3f}",
                     f"ECE {expected_calibration_error(labels, proba):.3f}", seconds,
                     model.device_))
    plot_rhombus(X, y, deep, os.path.join(out, "qep_rhombus.png"))


def kepsvgp_demo(out, rows, size):
    """KEP-SVGP attention against the same one-block Transformer with softmax attention on
    digits (float32; ``examples/plot_kepsvgp.py`` trains two blocks for 100 epochs)."""
    X_train, X_test, y_train, y_test = digits_split()
    probas = {}
    for name, kep_layers in KEP_MODELS.items():
        model = KEPSVGPClassifier(tokenizer="patches", patch_size=2, d_model=32, n_heads=4,
                                  depth=1, kep_layers=kep_layers, rank=5, merge="concat",
                                  eta=0.1, max_iter=size["kep_epochs"], dtype="float32",
                                  random_state=0)
        seconds = timed_fit(model, X_train, y_train)
        probas[name] = model.predict_proba(X_test)
        label = f"KEPSVGPClassifier(kep_layers={kep_layers})"
        if kep_layers == 0:
            label += " = softmax attention" + REFERENCE
        rows.append(classification_row("digits, 1257 rows, 10 classes", label, probas[name],
                                       y_test, seconds, model.device_))
    plot_calibration(y_test, probas, os.path.join(out, "kepsvgp_calibration.png"))


def drd_demo(out, rows, size):
    """Smooth DRD against ``ARDRegression()`` and ``RidgeCV`` on the 1-D bumps problem
    (n = 100 rows, p = 200 coefficients; ``examples/plot_drd.py`` adds the 2-D image)."""
    d, fits = drd_fits("bumps", random_state=0, max_iter=size["drd_iterations"])
    for name, model, seconds in fits:
        s = scores(d, model)
        estimator = (f"SmoothDRDRegressor(max_iter={size['drd_iterations']})" if name == "sDRD"
                     else f"sklearn {type(model).__name__}" + REFERENCE)
        rows.append(("bumps 1-D, p=200 from 100 rows", estimator,
                     f"coef MSE {s['coef_mse']:.2e}, test MSE {s['test_mse']:.3f}",
                     f"support AUC {s['support_auc']:.3f}", seconds,
                     getattr(model, "device_", "cpu")))
    plot_coefficients(d, fits, os.path.join(out, "drd_bumps.png"))


# ---------------------------------------------------------------- the table


FULL = dict(sparse_rows=10_000, sklearn_rows=500, outlier_rows=200, hetero_rows=400,
            classifier_rows=10_000, classifier_epochs=10, dkp_exact_rows=300,
            dkp_sparse_rows=2000, dkp_sweeps=None, dkp_iterations=30, qep_epochs=100,
            rhombus_epochs=60, softmax_epochs=50, kep_epochs=30, drd_iterations=10)
QUICK = dict(sparse_rows=300, sklearn_rows=50, outlier_rows=60, hetero_rows=60,
             classifier_rows=300, classifier_epochs=1, dkp_exact_rows=40,
             dkp_sparse_rows=80, dkp_sweeps=1, dkp_iterations=2, qep_epochs=2,
             rhombus_epochs=2, softmax_epochs=2, kep_epochs=1, drd_iterations=2)
HEADER = ("task", "estimator", "score (held out)", "calibration", "fit s", "device")
LEGEND = """\
R²: on held-out rows (step/turn: of the predictive mean against the noise-free series).
cover95 / cover90: fraction of held-out targets inside the central 95 % / 90 % predictive band
  (nominal 0.95 / 0.90); width: its mean width; by third: in each third of the input range,
  where the noise grows from left to right.  RMSE to f: against the noise-free function.
  The Student-t band is read off quantiles of sample_y draws (its variance, with nu near 2,
  is dominated by the far tail).
gap variance: mean variance of 500 draws in the gap [4.6, 5.4] of the data.
log-loss, ECE: negative log-likelihood and 15-bin expected calibration error (skgpx.metrics).
grid accuracy, ECE: against the true labels of a 50 x 50 grid.  coef MSE: of the 200
  coefficients; test MSE on 1000 held-out rows (noise floor 0.25); support AUC: ROC-AUC of
  prior_variance_ (sDRD) or |coef_| against the true non-zero set.
(reference): the scikit-learn (or GPyTorch) model beside the skgpx one on the same data.
fit s: wall-clock seconds of fit; device: where the skgpx model ran (device="auto")."""


def print_table(rows):
    cells = [HEADER] + [(t, e, s, c, f"{sec:.2f}", str(dev)) for t, e, s, c, sec, dev in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(HEADER))]
    for i, row in enumerate(cells):
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
        if i == 0:
            print("  ".join("-" * w for w in widths))
    print()
    print(LEGEND)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="demo_output", help="folder for the plots")
    parser.add_argument("--quick", action="store_true",
                        help="tiny fits that only check the demo runs (SKGPX_EXAMPLE_SIZE=small)")
    args = parser.parse_args()
    quick = args.quick or os.environ.get("SKGPX_EXAMPLE_SIZE") == "small"
    size = QUICK if quick else FULL
    os.makedirs(args.out, exist_ok=True)

    start, cpu = time.perf_counter(), time.process_time()
    rows, notes = [], []
    sections = [("GP regression, exact and sparse", gp_regression_demo, (rows, notes, size)),
                ("pathwise against weight-space draws", gap_demo, (rows,)),
                ("Student-t and heteroscedastic regression", robust_demo, (rows, size)),
                ("GP classification, exact and sparse", classification_demo,
                 (rows, notes, size)),
                ("deep kernel processes, exact and sparse", dkp_demo, (rows, size)),
                ("deep Q-EPs", qep_demo, (rows, size)),
                ("KEP-SVGP attention", kepsvgp_demo, (rows, size)),
                ("smooth DRD", drd_demo, (rows, size))]
    for i, (title, section, arguments) in enumerate(sections, 1):
        print(f"[{i}/{len(sections)}] {title}", flush=True)
        section(args.out, *arguments)
    print()
    print_table(rows)
    for note in notes:
        print(note)
    print(f"plots written to {os.path.abspath(args.out)}; the fits took "
          f"{time.perf_counter() - start:.0f} s ({time.process_time() - cpu:.0f} s of CPU)")


if __name__ == "__main__":
    main()
