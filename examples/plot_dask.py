"""
Fitting, tuning and scoring on a Dask cluster
=============================================

Three things outgrow one process: training rows, grid searches, and the rows to score.  This
example does all three on a ``distributed.LocalCluster`` (two workers, one thread each):

* a sparse :class:`skgpx.PathwiseGPSampler` fitted on a chunked ``dask.array``: each worker
  reduces its blocks to the ``m x m`` sums of Titsias' bound, and only those sums (and, for
  the gradient, their adjoints) travel; the result equals the in-memory fit;
* a grid search whose fits run on the workers, under ``joblib.parallel_backend("dask")``;
* predictions and posterior function draws over a chunked array of query rows, with
  :func:`skgpx.distributed.predict_blocks` and :func:`skgpx.distributed.evaluate_functions`
  (a draw is the same function in every block, so its values do not depend on the chunking).

The cluster here keeps its workers in this process (``processes=False``) so that the example
runs unchanged as a script and inside the documentation build; a cluster of worker processes
or machines is used the same way (see the "Scaling out" page, which also explains
:func:`skgpx.distributed.worker_config` for process workers).

Run as a script with ``python examples/plot_dask.py [--out FOLDER]`` (well under a minute on
one core).  With ``SKGPX_EXAMPLE_SIZE=small`` in the environment (or ``--quick``) it fits on
20 000 rows instead of 200 000.
"""
import argparse
import os
import time
import warnings

import dask.array as da
import joblib
import matplotlib
import matplotlib.pyplot as plt
import numpy as np
from distributed import Client, LocalCluster
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel
from sklearn.model_selection import GridSearchCV

from skgpx import PathwiseGPSampler
from skgpx.distributed import evaluate_functions, predict_blocks

parser = argparse.ArgumentParser(description="Fitting, tuning and scoring on Dask.")
parser.add_argument("--out", help="folder to save the figures in (default: only show them)")
parser.add_argument("--quick", action="store_true",
                    help="the small setting, as SKGPX_EXAMPLE_SIZE=small")
args = parser.parse_args()
SMALL = os.environ.get("SKGPX_EXAMPLE_SIZE") == "small" or args.quick
if args.out:
    matplotlib.use("Agg")  # the figures go to files: no windows
    os.makedirs(args.out, exist_ok=True)
N_TRAIN = 20_000 if SMALL else 200_000
warnings.simplefilter("ignore", ConvergenceWarning)  # max_iter is this example's budget


def truth(X):
    return np.sin(3 * X[:, 0]) * np.cos(2 * X[:, 1]) + 0.5 * X[:, 0]


# %%
# A cluster and training rows that live on it
# -------------------------------------------
# The rows are generated block by block on the workers; nothing of size ``n`` is built here.

# in-process workers talk over Dask's in-memory transport; the HTTP endpoints of the
# scheduler and workers (dashboards, health checks) listen on this machine only
cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                       dashboard_address="127.0.0.1:0", worker_dashboard_address="127.0.0.1:0")
client = Client(cluster)

rs = da.random.RandomState(0)
X = rs.uniform(-2, 2, size=(N_TRAIN, 2), chunks=(N_TRAIN // 4, 2))
y = (da.sin(3 * X[:, 0]) * da.cos(2 * X[:, 1]) + 0.5 * X[:, 0]
     + 0.2 * rs.normal(size=N_TRAIN, chunks=N_TRAIN // 4))
X, y = X.persist(), y.persist()

# %%
# A sparse fit on the Dask arrays, and the same fit in memory
# -----------------------------------------------------------
# ``fit`` sees Dask collections and takes the distributed route: two passes over the blocks
# per L-BFGS evaluation (the bound's sums, then the gradient's shares).

kernel = ConstantKernel() * RBF([1.0, 1.0]) + WhiteKernel(0.1)
params = dict(n_inducing=64, max_iter=15, normalize_y=True, random_state=0)
start = time.perf_counter()
gp = PathwiseGPSampler(kernel, **params).fit(X, y)
dask_seconds = time.perf_counter() - start

X_local, y_local = X.compute(), y.compute()
start = time.perf_counter()
local = PathwiseGPSampler(kernel, **params).fit(X_local, y_local)
local_seconds = time.perf_counter() - start
print(f"{N_TRAIN} rows, 64 inducing points: Dask fit {dask_seconds:.1f} s, in-memory fit "
      f"{local_seconds:.1f} s (workers in this process share its cores)")
print(f"bound per row: Dask {gp.log_marginal_likelihood_value_ / N_TRAIN:.8f}, "
      f"in memory {local.log_marginal_likelihood_value_ / N_TRAIN:.8f}")
print(f"fitted kernel: {gp.kernel_}")

# %%
# A grid search whose fits run on the workers
# -------------------------------------------
# Any scikit-learn search works unchanged: the Dask joblib backend sends each fit (here on an
# in-memory subset) to a worker.

subset = slice(0, 2_000)
search = GridSearchCV(PathwiseGPSampler(kernel, n_inducing=32, max_iter=10, random_state=0),
                      {"n_inducing": [16, 32, 64]}, cv=3)
with joblib.parallel_backend("dask"):
    search.fit(X_local[subset], y_local[subset])
print("cross-validated R^2 by number of inducing points:",
      dict(zip(search.cv_results_["param_n_inducing"],
               np.round(search.cv_results_["mean_test_score"], 4))))

# %%
# Scoring where the query rows live
# ---------------------------------
# The fitted model (or the drawn functions) is shipped to each worker once; each block of query
# rows is scored where it is.  The function draws give the same values whatever the chunking.

grid = np.linspace(-2, 2, 200)
X_query = np.column_stack([grid, np.full_like(grid, 0.3)])
query = da.from_array(X_query, chunks=50)
mean = predict_blocks(gp, query).compute()
functions = gp.sample_functions(n_samples=5, random_state=1)
draws = evaluate_functions(functions, query).compute()
rechunked = evaluate_functions(functions, query.rechunk(37)).compute()
print("function draws equal across chunkings:", np.array_equal(draws, rechunked))

client.close()
cluster.close()

# %%
# The fitted mean and five posterior functions along ``x2 = 0.3``
# ----------------------------------------------------------------

fig, ax = plt.subplots(figsize=(7, 4))
ax.plot(grid, truth(X_query), "k--", lw=1.5, label="true function")
ax.plot(grid, draws, color="tab:blue", alpha=0.5, lw=1)
ax.plot(grid, mean, color="tab:red", lw=2, label="posterior mean (predict_blocks)")
ax.plot([], [], color="tab:blue", alpha=0.5, label="posterior functions (evaluate_functions)")
ax.set_xlabel("x1 (x2 = 0.3)")
ax.set_ylabel("f")
ax.set_title(f"Sparse GP fitted on {N_TRAIN} rows held by Dask workers")
ax.legend(loc="upper left", fontsize=8)
fig.tight_layout()
if args.out:
    fig.savefig(os.path.join(args.out, "dask_fit.png"), dpi=120)
else:
    plt.show()
