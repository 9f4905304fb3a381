"""
Thompson sampling with pathwise posterior functions
===================================================

``PathwiseGPSampler.sample_functions`` returns posterior draws as functions: they can be
evaluated anywhere, give the same values on every call, accept torch tensors and are
differentiable.  Thompson sampling needs exactly that: draw a function from the posterior,
minimise it, evaluate the true function at the minimiser.  We use the rescaled Branin
function on [0, 1]^2, which has three global minimisers:

* on 2000 noisy observations, a sparse sampler (64 inducing points, Titsias' bound) draws
  16 posterior functions and L-BFGS minimises each of them; an exact-mode sampler with the
  same kernel draws 16 functions on a 60 x 60 grid for comparison;
* a batch Bayesian-optimisation loop (Thompson sampling, 4 draws per round, 8 rounds, an
  exact sampler refitted each round) runs against random search with the same budget.

Run as a script with ``python examples/plot_thompson_sampling.py [--out FOLDER]`` (about half
a minute of CPU time on one thread).  With ``SKGPX_EXAMPLE_SIZE=small`` in the environment (or
``--quick``) it runs a small setting: 300 observations, 24 inducing points, a 30 x 30 grid,
5 rounds and 2 repetitions of the loop.
"""
import argparse
import os
import time
import warnings

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import torch
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel

from skgpx import PathwiseGPSampler

parser = argparse.ArgumentParser(description="Thompson sampling with pathwise posterior draws.")
parser.add_argument("--out", help="folder to save the figures in (default: only show them)")
parser.add_argument("--quick", action="store_true",
                    help="the small setting, as SKGPX_EXAMPLE_SIZE=small")
args = parser.parse_args()
SMALL = os.environ.get("SKGPX_EXAMPLE_SIZE") == "small" or args.quick
if args.out:
    matplotlib.use("Agg")  # the figures go to files: no windows
    os.makedirs(args.out, exist_ok=True)

SETTINGS = {
    "full": dict(n_train=2000, n_inducing=64, grid=60, n_draws=16, rounds=8, batch=4,
                 repeats=5, n_init=8, candidates=2048, starts=8),
    "small": dict(n_train=300, n_inducing=24, grid=30, n_draws=16, rounds=5, batch=4,
                  repeats=2, n_init=8, candidates=256, starts=4),
}
s = SETTINGS["small" if SMALL else "full"]

# %%
# The objective
# -------------
# The rescaled Branin function of Picheny, Wagner & Ginsbourger (2013): ``x1 = 15 u1 - 5``,
# ``x2 = 15 u2``, mean about 0 and unit scale.  Observations carry Gaussian noise of sd 0.1.

MINIMISERS = np.array([[(-np.pi + 5) / 15, 12.275 / 15],
                       [(np.pi + 5) / 15, 2.275 / 15],
                       [(3 * np.pi + 5) / 15, 2.475 / 15]])
NOISE_STD = 0.1
NEAR = 0.05  # a minimiser is "found" within this distance (unit square)


def branin(U):
    """Rescaled Branin at the rows of U (n, 2) in [0, 1]^2 (noise-free)."""
    x1, x2 = 15.0 * U[:, 0] - 5.0, 15.0 * U[:, 1]
    inner = x2 - 5.1 * x1**2 / (4 * np.pi**2) + 5.0 * x1 / np.pi - 6.0
    return (inner**2 + (10.0 - 10.0 / (8 * np.pi)) * np.cos(x1) - 44.81) / 51.95


F_MIN = float(branin(MINIMISERS).min())


def observe(U, rng):
    return branin(U) + NOISE_STD * rng.standard_normal(U.shape[0])


def kernel():
    """ARD RBF with a learnt amplitude and noise level (targets are standardised)."""
    return (ConstantKernel(1.0, (1e-2, 1e2)) * RBF([0.2, 0.2], (1e-2, 1e1))
            + WhiteKernel(1e-2, (1e-6, 1.0)))


def unit_grid(size):
    g = np.linspace(0.0, 1.0, size)
    return np.stack(np.meshgrid(g, g), axis=-1).reshape(-1, 2)


def nearest_minimiser(U):
    """(index of the nearest true minimiser, distance to it) for every row of U."""
    dist = np.linalg.norm(U[:, None, :] - MINIMISERS[None], axis=-1)
    return dist.argmin(axis=1), dist.min(axis=1)


# %%
# Minimising posterior functions with L-BFGS
# ------------------------------------------
# ``functions.evaluate_batched(U)`` evaluates path ``s`` at its own points ``U[s]``, so the
# searches of all draws are one batched torch problem.  Each path is first evaluated at random
# candidates; its best few start one L-BFGS run each, in the unconstrained coordinates
# ``u = sigmoid(z)``.  The runs are independent, so one L-BFGS on the sum of all their values
# optimises them together: autograd gives each run its own gradient.


def minimise_paths(functions, n_candidates, n_starts, seed):
    """Minimise every path of ``functions`` over [0, 1]^2; returns (argmins, minima)."""
    S = functions.n_samples
    device = functions.device
    gen = torch.Generator().manual_seed(seed)
    cand = torch.rand(S, n_candidates, 2, generator=gen, dtype=torch.float64).to(device)
    with torch.no_grad():
        values = functions.evaluate_batched(cand)  # (S, n_candidates)
    best = values.argsort(dim=1)[:, :n_starts]
    start = torch.gather(cand, 1, best[..., None].expand(-1, -1, 2))
    z = torch.logit(start.clamp(1e-6, 1 - 1e-6)).requires_grad_(True)
    opt = torch.optim.LBFGS([z], lr=1.0, max_iter=100, tolerance_grad=1e-10,
                            tolerance_change=1e-14, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = functions.evaluate_batched(torch.sigmoid(z)).sum()
        loss.backward()
        return loss

    opt.step(closure)
    with torch.no_grad():
        U = torch.sigmoid(z)
        values = functions.evaluate_batched(U)  # (S, n_starts)
        pick = values.argmin(dim=1)
        rows = torch.arange(S, device=device)
        return U[rows, pick].cpu().numpy(), values[rows, pick].cpu().numpy()


# %%
# Sixteen draws, two ways
# -----------------------
# The sparse sampler fits the kernel hyperparameters and 64 inducing points (k-means++ on X)
# by Titsias' collapsed bound; its draws are the decoupled sparse sampler (a random-feature
# prior plus an update on ``k(., Z)``), cheap to evaluate anywhere.  The exact-mode sampler
# reuses the fitted kernel (``optimizer=None``) and draws latent functions on the grid, where
# we take each draw's argmin.  Under the posterior a draw's minimiser is distributed like the
# posterior of the minimiser, so both sets of minimisers should fall on the three true
# minimisers in similar proportions, the sparse ones more precisely as they are not tied to
# a grid.

rng = np.random.RandomState(0)
X = rng.uniform(size=(s["n_train"], 2))
y = observe(X, rng)

start = time.perf_counter()
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always", ConvergenceWarning)
    sparse = PathwiseGPSampler(kernel(), n_inducing=s["n_inducing"], normalize_y=True,
                               random_state=0).fit(X, y)
fit_seconds = time.perf_counter() - start
print(f"rescaled Branin, n = {s['n_train']} noisy observations (noise std {NOISE_STD}); "
      f"sparse fit {fit_seconds:.1f} s, kernel_ = {sparse.kernel_}, "
      f"ELBO {sparse.log_marginal_likelihood_value_:.1f}")
for w in caught:
    if issubclass(w.category, ConvergenceWarning):
        print(f"  (sparse fit: {w.message})")

start = time.perf_counter()
functions = sparse.sample_functions(s["n_draws"], random_state=1)
U_sparse, v_sparse = minimise_paths(functions, s["candidates"], s["starts"], seed=2)
sparse_seconds = time.perf_counter() - start

grid = unit_grid(s["grid"])
# the same sparse draws on the grid: L-BFGS should do at least as well as the grid
v_sparse_grid = functions(grid).min(axis=0)

start = time.perf_counter()
exact = PathwiseGPSampler(sparse.kernel_, optimizer=None, normalize_y=True,
                          predict_noise="latent").fit(X, y)
draws = exact.sample_y(grid, n_samples=s["n_draws"], random_state=3)  # (grid points, 16)
U_exact = grid[draws.argmin(axis=0)]
exact_seconds = time.perf_counter() - start

truth = branin(grid)
mean_sparse, mean_exact = sparse.predict(grid), exact.predict(grid)
rmse_sparse = np.sqrt(np.mean((mean_sparse - truth) ** 2))
rmse_exact = np.sqrt(np.mean((mean_exact - truth) ** 2))
print(f"posterior mean on the grid: RMSE to the truth {rmse_sparse:.4f} (sparse), "
      f"{rmse_exact:.4f} (exact); max |sparse - exact| "
      f"{np.abs(mean_sparse - mean_exact).max():.4f}")

header = (f"{'minimisers of 16 posterior draws':<36}{'draws':>6}{'near':>6}"
          f"{'per minimiser':>15}{'med dist':>10}{'med regret':>12}{'seconds':>9}")
print(header)
print("-" * len(header))
for name, U, seconds in [
    (f"sparse (m={sparse.inducing_points_.shape[0]}) + L-BFGS", U_sparse, sparse_seconds),
    (f"exact, grid argmin ({s['grid']}^2)", U_exact, exact_seconds),
]:
    which, dist = nearest_minimiser(U)
    near = dist <= NEAR
    counts = "/".join(map(str, np.bincount(which[near], minlength=3)))
    print(f"{name:<36}{len(U):>6}{int(near.sum()):>6}{counts:>15}{np.median(dist):>10.4f}"
          f"{np.median(branin(U) - F_MIN):>12.2e}{seconds:>9.2f}")
gap = v_sparse - v_sparse_grid
print(f"('near': within {NEAR} of a true minimiser; L-BFGS minimum minus the grid minimum "
      f"of the same sparse draw: max {gap.max():.2e}, <= 0 means L-BFGS did better)")

# %%
# The truth and both posterior means, with the minimisers of the draws.

size = s["grid"]
G0, G1 = (grid[:, i].reshape(size, size) for i in range(2))
fig, axes = plt.subplots(1, 3, figsize=(15, 4.6), sharey=True)
panels = [("rescaled Branin (truth)", truth),
          ("sparse posterior mean", mean_sparse),
          ("exact posterior mean (same kernel)", mean_exact)]
for ax, (title, values) in zip(axes, panels):
    cs = ax.contourf(G0, G1, values.reshape(size, size), levels=30, cmap="viridis")
    fig.colorbar(cs, ax=ax)
    ax.plot(*MINIMISERS.T, "*", color="red", ms=16, mec="white", label="true minimisers")
    ax.set(title=title, xlabel="u1", xlim=(0, 1), ylim=(0, 1))
axes[1].plot(*sparse.inducing_points_.T, "+", color="grey", ms=6, label="inducing points")
for ax in axes[1:]:
    ax.plot(*U_sparse.T, "o", mfc="none", mec="deepskyblue", ms=9, mew=1.5,
            label=f"minimisers of {s['n_draws']} sparse draws (L-BFGS)")
    ax.plot(*U_exact.T, "x", color="orange", ms=8, mew=2,
            label=f"grid argmins of {s['n_draws']} exact draws")
axes[0].set_ylabel("u2")
handles, labels = axes[1].get_legend_handles_labels()
fig.legend(handles, labels, loc="lower center", ncol=4, bbox_to_anchor=(0.5, -0.1))
if args.out:
    fig.savefig(os.path.join(args.out, "thompson_minimisers.png"), dpi=120, bbox_inches="tight")
plt.show()

# %%
# Batch Thompson sampling
# -----------------------
# Start from 8 random evaluations.  Each round refits an exact sampler to all evaluations so
# far, draws 4 posterior functions, minimises them and evaluates the true (noisy) function
# at the 4 minimisers.  Random search gets the same number of evaluations.  We track the best
# noise-free value found, as a regret ``best f - f_min``.


def thompson_sampling(s, seed):
    """Best true value after each round: (Thompson sampling, random search), both (rounds+1,)."""
    rng = np.random.RandomState(seed)
    X = rng.uniform(size=(s["n_init"], 2))
    y = observe(X, rng)
    X_random, rng_random = X.copy(), np.random.RandomState(10_000 + seed)
    best_ts, best_random = [branin(X).min()], [branin(X).min()]
    for r in range(s["rounds"]):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            gp = PathwiseGPSampler(kernel(), normalize_y=True, random_state=seed).fit(X, y)
        functions = gp.sample_functions(s["batch"], random_state=1000 * seed + r)
        U, _ = minimise_paths(functions, s["candidates"], s["starts"], seed=1000 * seed + r)
        X = np.vstack([X, U])
        y = np.concatenate([y, observe(U, rng)])
        X_random = np.vstack([X_random, rng_random.uniform(size=(s["batch"], 2))])
        best_ts.append(branin(X).min())
        best_random.append(branin(X_random).min())
    return np.array(best_ts), np.array(best_random)


start = time.perf_counter()
runs = [thompson_sampling(s, seed) for seed in range(s["repeats"])]
ts, rand = (np.array(r) for r in zip(*runs))
print(f"batch Thompson sampling, {s['rounds']} rounds of {s['batch']}, "
      f"{s['repeats']} repetitions ({time.perf_counter() - start:.1f} s); "
      f"best f found - f_min (geometric mean)")
print(f"{'round':>5}{'evaluations':>13}{'Thompson':>12}{'random':>12}")
for r in range(s["rounds"] + 1):
    print(f"{r:>5}{s['n_init'] + s['batch'] * r:>13}"
          f"{np.exp(np.log(ts[:, r] - F_MIN).mean()):>12.3e}"
          f"{np.exp(np.log(rand[:, r] - F_MIN).mean()):>12.3e}")

# %%
# Each repetition as a thin line, the geometric mean over repetitions as markers.

evals = s["n_init"] + s["batch"] * np.arange(s["rounds"] + 1)
fig, ax = plt.subplots(figsize=(6.5, 4))
for curves, label, color in [(ts, f"Thompson sampling ({s['batch']} draws/round)", "C0"),
                             (rand, "random search", "C1")]:
    regret = curves - F_MIN
    for row in regret:
        ax.plot(evals, row, color=color, alpha=0.25, lw=1)
    ax.plot(evals, np.exp(np.log(regret).mean(axis=0)), "o-", color=color, label=label)
ax.set(yscale="log", xlabel="evaluations of the true function", ylabel="best f found - f_min",
       title=f"batch Thompson sampling on Branin ({len(ts)} repetitions, geometric mean)")
ax.legend()
if args.out:
    fig.savefig(os.path.join(args.out, "thompson_regret.png"), dpi=120, bbox_inches="tight")
    print(f"plots written to {os.path.abspath(args.out)}")
plt.show()
