"""Thompson sampling with pathwise posterior functions on the Branin function.

* 2000 noisy observations of the rescaled Branin function on [0, 1]^2 (three global
  minimisers).  A sparse ``PathwiseGPSampler`` (64 inducing points, Titsias' bound) is
  fitted to them and ``sample_functions(16)`` draws 16 posterior functions.  Each one is
  minimised by L-BFGS from its best random candidates: the functions accept torch tensors
  and are differentiable, and ``evaluate_batched`` evaluates path ``s`` at its own points,
  so all 16 x 8 runs are one batched torch problem.  For comparison an exact-mode sampler
  with the same kernel draws 16 functions on a 60 x 60 grid, and we take the grid argmin of
  each.  Under the posterior, a draw's minimiser is distributed like the posterior of the
  minimiser, so both sets of minimisers should fall on the three true minimisers in
  similar proportions (the sparse ones more precisely, as they are not tied to a grid).
* A batch Bayesian-optimisation loop (Thompson sampling, 4 draws per round, 8 rounds,
  an exact sampler refitted each round) against random search with the same budget.

Run with ``python examples/plot_thompson_sampling.py --out demo_output``; ``--quick`` runs
a small setting (500 observations, 32 inducing points, a 40 x 40 grid, 2 repetitions of
the loop) in about 20 s.
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
from sklearn.exceptions import ConvergenceWarning  # noqa: E402
from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel  # noqa: E402

from skgpx import PathwiseGPSampler  # noqa: E402

# The rescaled Branin function of Picheny, Wagner & Ginsbourger (2013) on [0, 1]^2:
# x1 = 15 u1 - 5, x2 = 15 u2; mean ~0 and unit scale, three global minimisers.
MINIMISERS = np.array([[(-np.pi + 5) / 15, 12.275 / 15],
                       [(np.pi + 5) / 15, 2.275 / 15],
                       [(3 * np.pi + 5) / 15, 2.475 / 15]])
NOISE_STD = 0.1
NEAR = 0.05  # a minimiser "found" within this distance (unit square)

SETTINGS = {
    "full": dict(n_train=2000, n_inducing=64, grid=60, n_draws=16, rounds=8, batch=4,
                 repeats=5, n_init=8, candidates=2048, starts=8),
    "quick": dict(n_train=500, n_inducing=32, grid=40, n_draws=16, rounds=8, batch=4,
                  repeats=2, n_init=8, candidates=512, starts=4),
}


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


def minimise_paths(functions, n_candidates, n_starts, seed):
    """Minimise every path of ``functions`` over [0, 1]^2; returns (argmins, minima).

    Each path is evaluated at ``n_candidates`` random points (one batched call), its best
    ``n_starts`` start one L-BFGS run each, in the unconstrained coordinates
    ``u = sigmoid(z)``.  The runs are independent, so one L-BFGS on the sum of all their
    values optimises them together (autograd gives each its own gradient).
    """
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


def nearest_minimiser(U):
    """(index of the nearest true minimiser, distance to it) for every row of U."""
    dist = np.linalg.norm(U[:, None, :] - MINIMISERS[None], axis=-1)
    return dist.argmin(axis=1), dist.min(axis=1)


# ---------------------------------------------------------------- 16 draws, two ways


def compare_minimisers(s):
    """Fit the sparse sampler on n noisy observations; minimise 16 draws, sparse and exact."""
    rng = np.random.RandomState(0)
    X = rng.uniform(size=(s["n_train"], 2))
    y = observe(X, rng)
    out = {"X": X, "y": y}

    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        sparse = PathwiseGPSampler(kernel(), n_inducing=s["n_inducing"], normalize_y=True,
                                   random_state=0).fit(X, y)
    out["fit_s"] = time.perf_counter() - start
    out["fit_warnings"] = [str(w.message) for w in caught
                           if issubclass(w.category, ConvergenceWarning)]
    start = time.perf_counter()
    functions = sparse.sample_functions(s["n_draws"], random_state=1)
    out["U_sparse"], out["v_sparse"] = minimise_paths(functions, s["candidates"],
                                                      s["starts"], seed=2)
    out["min_s"] = time.perf_counter() - start

    grid = unit_grid(s["grid"])
    # the sparse draws on the grid: L-BFGS must do at least as well as the grid
    out["v_sparse_grid"] = functions(grid).min(axis=0)

    # exact posterior with the same (fitted) kernel: pathwise draws on the grid, latent
    start = time.perf_counter()
    exact = PathwiseGPSampler(sparse.kernel_, optimizer=None, normalize_y=True,
                              predict_noise="latent").fit(X, y)
    draws = exact.sample_y(grid, n_samples=s["n_draws"], random_state=3)  # (G, 16)
    out["U_exact"] = grid[draws.argmin(axis=0)]
    out["exact_s"] = time.perf_counter() - start

    out["grid"] = grid
    out["mean_sparse"] = sparse.predict(grid)
    out["mean_exact"] = exact.predict(grid)
    out["sparse"], out["exact"] = sparse, exact
    return out


def summary_rows(res):
    rows = []
    for name, U, seconds in [
        (f"sparse (m={res['sparse'].inducing_points_.shape[0]}) + L-BFGS",
         res["U_sparse"], res["min_s"]),
        (f"exact, grid argmin ({int(np.sqrt(len(res['grid'])))}^2)", res["U_exact"],
         res["exact_s"]),
    ]:
        which, dist = nearest_minimiser(U)
        near = dist <= NEAR
        counts = np.bincount(which[near], minlength=3)
        regret = branin(U) - F_MIN
        rows.append((name, len(U), int(near.sum()), "/".join(map(str, counts)),
                     float(np.median(dist)), float(np.median(regret)), seconds))
    return rows


def plot_minimisers(res, path):
    grid = res["grid"]
    size = int(np.sqrt(len(grid)))
    G0, G1 = (grid[:, i].reshape(size, size) for i in range(2))
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.6), sharey=True)
    panels = [("rescaled Branin (truth)", branin(grid)),
              ("sparse posterior mean", res["mean_sparse"]),
              ("exact posterior mean (same kernel)", res["mean_exact"])]
    for ax, (title, values) in zip(axes, panels):
        cs = ax.contourf(G0, G1, values.reshape(size, size), levels=30, cmap="viridis")
        fig.colorbar(cs, ax=ax)
        ax.plot(*MINIMISERS.T, "*", color="red", ms=16, mec="white", label="true minimisers")
        ax.set(title=title, xlabel="u1", xlim=(0, 1), ylim=(0, 1))
    Z = res["sparse"].inducing_points_
    axes[1].plot(*Z.T, "+", color="grey", ms=6, label="inducing points")
    for ax in axes[1:]:
        ax.plot(*res["U_sparse"].T, "o", mfc="none", mec="deepskyblue", ms=9, mew=1.5,
                label="minimisers of 16 sparse draws (L-BFGS)")
        ax.plot(*res["U_exact"].T, "x", color="orange", ms=8, mew=2,
                label="grid argmins of 16 exact draws")
    axes[0].set_ylabel("u2")
    handles, labels = axes[1].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=4, bbox_to_anchor=(0.5, -0.1))
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)


# ---------------------------------------------------------------- batch Thompson sampling


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


def plot_regret(ts, rand, s, path):
    evals = s["n_init"] + s["batch"] * np.arange(s["rounds"] + 1)
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for curves, label, color in [(ts, "Thompson sampling (4 draws/round)", "C0"),
                                 (rand, "random search", "C1")]:
        regret = curves - F_MIN
        for row in regret:
            ax.plot(evals, row, color=color, alpha=0.25, lw=1)
        ax.plot(evals, np.exp(np.log(regret).mean(axis=0)), "o-", color=color, label=label)
    ax.set(yscale="log", xlabel="evaluations of the true function",
           ylabel="best f found - f_min",
           title=f"batch Thompson sampling on Branin ({len(ts)} repetitions, geometric mean)")
    ax.legend()
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="demo_output", help="folder for the plots")
    parser.add_argument("--quick", action="store_true",
                        help="small setting (n = 500, m = 32, 40 x 40 grid, 2 repetitions)")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    s = SETTINGS["quick" if args.quick else "full"]

    res = compare_minimisers(s)
    sparse = res["sparse"]
    print(f"rescaled Branin, n = {s['n_train']} noisy observations (noise std {NOISE_STD}); "
          f"sparse fit {res['fit_s']:.1f} s, kernel_ = {sparse.kernel_}, "
          f"ELBO {sparse.log_marginal_likelihood_value_:.1f}")
    for message in res["fit_warnings"]:
        print(f"  (sparse fit: {message})")
    truth = branin(res["grid"])
    rmse = {k: np.sqrt(np.mean((res[f"mean_{k}"] - truth) ** 2)) for k in ("sparse", "exact")}
    print(f"posterior mean on the grid: RMSE to the truth {rmse['sparse']:.4f} (sparse), "
          f"{rmse['exact']:.4f} (exact); max |sparse - exact| "
          f"{np.abs(res['mean_sparse'] - res['mean_exact']).max():.4f}")
    header = (f"{'minimisers of 16 posterior draws':<36}{'draws':>6}{'near':>6}"
              f"{'per minimiser':>15}{'med dist':>10}{'med regret':>12}{'seconds':>9}")
    print(header)
    print("-" * len(header))
    for name, n, near, counts, dist, regret, seconds in summary_rows(res):
        print(f"{name:<36}{n:>6}{near:>6}{counts:>15}{dist:>10.4f}{regret:>12.2e}"
              f"{seconds:>9.2f}")
    gap = res["v_sparse"] - res["v_sparse_grid"]
    print(f"('near': within {NEAR} of a true minimiser; L-BFGS minimum minus the grid minimum "
          f"of the same sparse draw: max {gap.max():.2e}, <= 0 means L-BFGS did better)")
    path = os.path.join(args.out, "thompson_minimisers.png")
    plot_minimisers(res, path)
    print(f"plot written to {os.path.abspath(path)}")

    start = time.perf_counter()
    runs = [thompson_sampling(s, seed) for seed in range(s["repeats"])]
    ts, rand = (np.array(r) for r in zip(*runs))
    print(f"\nbatch Thompson sampling, {s['rounds']} rounds of {s['batch']}, "
          f"{s['repeats']} repetitions ({time.perf_counter() - start:.1f} s); "
          f"best f found - f_min (geometric mean)")
    print(f"{'round':>5}{'evaluations':>13}{'Thompson':>12}{'random':>12}")
    for r in range(s["rounds"] + 1):
        print(f"{r:>5}{s['n_init'] + s['batch'] * r:>13}"
              f"{np.exp(np.log(ts[:, r] - F_MIN).mean()):>12.3e}"
              f"{np.exp(np.log(rand[:, r] - F_MIN).mean()):>12.3e}")
    path = os.path.join(args.out, "thompson_regret.png")
    plot_regret(ts, rand, s, path)
    print(f"plot written to {os.path.abspath(path)}")


if __name__ == "__main__":
    main()
