"""Distributed sparse fitting and scoring on Dask, 1 worker against 2.

A ``PathwiseGPSampler`` sparse fit (d = 8, m = 256, ``max_iter`` L-BFGS iterations so every
configuration takes the same steps) on ``--n-fit`` rows generated on the workers, and
predictions on ``--n-predict`` rows, on a ``LocalCluster`` of 1 and of 2 single-threaded
worker processes; and the same fit in this process on the same rows (the overhead of Dask
with one worker).  Prints the times and the ratios:

* speed-up of 2 workers over 1 (target >= 1.6x on 2 cores), fit and predict;
* 1 Dask worker against the in-process fit (target <= 1.25x).

Run: ``python benchmarks/pathwise/dask_scaling.py`` (2 000 000 / 4 000 000 rows; long on 2 cores)
or ``--quick`` (200 000 / 400 000 rows).
"""

import argparse
import os
import time

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[_var] = "1"

import numpy as np  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)


def _data(n, d, chunks, seed):
    import dask.array as da

    rs = da.random.RandomState(seed)
    X = rs.uniform(0.0, 1.0, size=(n, d), chunks=(chunks, d))
    f = da.sin(2 * np.pi * X[:, 0]) * X[:, 1] + da.cos(3 * X[:, 2]) + (X[:, 3:] ** 2).sum(1)
    return X, f + 0.1 * rs.normal(size=n, chunks=chunks)


def _estimator(args):
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel

    from skgpx import PathwiseGPSampler

    kernel = ConstantKernel(1.0) * RBF(np.ones(args.d)) + WhiteKernel(0.1)
    return PathwiseGPSampler(kernel, n_inducing=args.m, max_iter=args.max_iter,
                             normalize_y=True, random_state=0, device="cpu")


def run_cluster(args, n_workers):
    import warnings

    from distributed import Client, LocalCluster

    from skgpx.distributed import predict_blocks

    import dask

    from skgpx.distributed import worker_config

    env = {v: "1" for v in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")}
    config = {} if args.dask_malloc else worker_config()
    with dask.config.set(config), \
            LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True,
                         host="127.0.0.1", dashboard_address=None, env=env) as cluster, \
            Client(cluster):
        X, y = _data(args.n_fit, args.d, args.chunks, 0)
        X, y = X.persist(), y.persist()
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # ConvergenceWarning: max_iter is the budget
            gp = _estimator(args).fit(X, y)
        fit = time.perf_counter() - t0
        Xq, _ = _data(args.n_predict, args.d, args.chunks, 1)
        Xq = Xq.persist()
        t0 = time.perf_counter()
        predict_blocks(gp, Xq).sum().compute()
        predict = time.perf_counter() - t0
    return dict(fit=fit, predict=predict, evals=gp.n_iter_,
                elbo=gp.log_marginal_likelihood_value_,
                first=gp.objective_history_[0])


def run_in_process(args):
    import warnings

    import dask

    X, y = _data(args.n_fit, args.d, args.chunks, 0)
    X, y = dask.compute(X, y, scheduler="threads")
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gp = _estimator(args).fit(X, y)
    return dict(fit=time.perf_counter() - t0, evals=gp.n_iter_,
                elbo=gp.log_marginal_likelihood_value_,
                first=gp.objective_history_[0])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="200 000 / 400 000 rows")
    p.add_argument("--n-fit", type=int, default=2_000_000)
    p.add_argument("--n-predict", type=int, default=4_000_000)
    p.add_argument("--d", type=int, default=8)
    p.add_argument("--m", type=int, default=256)
    p.add_argument("--chunks", type=int, default=100_000, help="rows per Dask block")
    p.add_argument("--max-iter", type=int, default=5, help="L-BFGS iterations per fit")
    p.add_argument("--dask-malloc", action="store_true",
                   help="keep distributed's worker malloc settings instead of "
                        "skgpx.distributed.worker_config() (shows what they cost)")
    args = p.parse_args(argv)
    if args.quick:
        args.n_fit, args.n_predict, args.chunks = 200_000, 400_000, 25_000
    print(f"dask_scaling: n_fit={args.n_fit} n_predict={args.n_predict} d={args.d} m={args.m} "
          f"blocks of {args.chunks} rows, max_iter={args.max_iter}, one thread per process, "
          f"worker malloc: {'distributed defaults' if args.dask_malloc else 'worker_config()'}, "
          f"os.cpu_count()={os.cpu_count()}", flush=True)
    results = {}
    results["in-process"] = run_in_process(args)
    print(f"  in-process fit: {results['in-process']}", flush=True)
    for workers in (1, 2):
        results[workers] = run_cluster(args, workers)
        print(f"  {workers} worker(s): {results[workers]}", flush=True)
    one, two, local = results[1], results[2], results["in-process"]
    rows = [
        ("fit speed-up, 2 workers / 1", one["fit"] / two["fit"], ">= 1.6x", lambda r: r >= 1.6),
        ("predict speed-up, 2 workers / 1", one["predict"] / two["predict"], ">= 1.6x",
         lambda r: r >= 1.6),
        ("fit overhead, 1 worker / in-process", one["fit"] / local["fit"], "<= 1.25x",
         lambda r: r <= 1.25),
    ]
    print("\nmeasure                                  ratio   target    verdict")
    for name, ratio, target, ok in rows:
        print(f"{name:40s} {ratio:6.2f}x  {target:8s}  {'PASS' if ok(ratio) else 'MISS'}")
    first = abs(one["first"] - local["first"]) / abs(local["first"])
    last = abs(one["elbo"] - local["elbo"]) / abs(local["elbo"])
    # The first evaluation is at the kernel's initial hyperparameters: there the two routes
    # compute the same bound (summed in a different order).  Later evaluations follow the
    # optimiser's path, whose trial steps can reach ill-conditioned hyperparameters where the
    # summation order's rounding is amplified (seen: 1e-14 at the start, 1e-7 after 14 steps
    # of an unconverged max_iter=5 run); the tests check converged fits to 1e-8.
    print(f"bound at the initial hyperparameters, 1 worker vs in-process: relative difference "
          f"{first:.1e} ({'PASS' if first <= 1e-10 else 'MISS'}: target <= 1e-10)")
    print(f"bound after the run: {one['elbo']:.10g} vs {local['elbo']:.10g} (relative "
          f"{last:.1e}; path-dependent, see above); evaluations {one['evals']} / "
          f"{local['evals']}")


if __name__ == "__main__":
    main()
