"""Follow the deep-kernel-process point solver sweep by sweep.

``DeepKernelProcessRegressor(warm_start=True, max_iter=1)`` continues from its previous
state at every ``fit``, so calling ``fit`` ten times runs the ten sweeps of the paper's
protocol one at a time.  After each sweep we record the objective and the test RMSE on
a 90/10 split of scikit-learn's diabetes data, for the Wishart objective (``'dkp'``)
and for the kernel-hyperparameter baseline (``'gp'``), and plot both curves.

Run with ``python examples/plot_dkp_sweeps.py --out demo_output``.
"""
import argparse
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from sklearn.datasets import load_diabetes  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402

from skgpx import DeepKernelProcessRegressor  # noqa: E402


def sweep_curves(objective, X_train, X_test, y_train, y_test, n_sweeps):
    """Objective (after 0..n sweeps) and test RMSE (after 1..n sweeps)."""
    model = DeepKernelProcessRegressor(objective=objective, max_iter=1, warm_start=True)
    objectives, rmse = [], []
    for _ in range(n_sweeps):
        model.fit(X_train, y_train)
        if not objectives:
            objectives.append(model.objective_history_[0])
        objectives.append(model.objective_)
        rmse.append(np.sqrt(np.mean((model.predict(X_test) - y_test) ** 2)))
    return np.array(objectives), np.array(rmse)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="demo_output", help="folder for the plot")
    parser.add_argument("--sweeps", type=int, default=10)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)

    X, y = load_diabetes(return_X_y=True)
    split = train_test_split(X, y, test_size=0.1, random_state=0)
    fig, (ax_obj, ax_rmse) = plt.subplots(1, 2, figsize=(10, 4))
    for objective in ["dkp", "gp"]:
        objectives, rmse = sweep_curves(objective, *split, args.sweeps)
        ax_obj.plot(np.arange(len(objectives)), objectives, "o-", label=objective)
        ax_rmse.plot(np.arange(1, len(rmse) + 1), rmse, "o-", label=objective)
        print(f"{objective}: objective {objectives[0]:.2f} -> {objectives[-1]:.2f}, "
              f"test RMSE after each sweep: {np.array2string(rmse, precision=2)}")
    ax_obj.set(xlabel="sweep", ylabel="objective (standardised targets)",
               title="objective per sweep")
    ax_rmse.set(xlabel="sweep", ylabel="test RMSE", title="diabetes, 90/10 split")
    for ax in (ax_obj, ax_rmse):
        ax.legend()
    path = os.path.join(args.out, "dkp_sweeps.png")
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    print(f"plot written to {os.path.abspath(path)}")


if __name__ == "__main__":
    main()
