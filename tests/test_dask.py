"""Dask: distributed sparse fitting, tuning under the dask joblib backend, scoring over
chunked arrays, and a worker killed mid-computation; on a LocalCluster of two worker
processes bound to 127.0.0.1 (started and closed by a fixture)."""

import os
import signal
import time

import dask
import dask.array as da
import dask.dataframe as dd
import distributed
import numpy as np
import pandas as pd
import pytest
import joblib
from sklearn.datasets import make_classification
from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel
from sklearn.model_selection import GridSearchCV, KFold

from skgpx import (
    DeepKernelProcessRegressor,
    DeepQEPClassifier,
    DeepQEPRegressor,
    KEPSVGPClassifier,
    PathwiseGPSampler,
    SmoothDRDRegressor,
)
from skgpx.distributed import (
    _MALLOC_ENVIRON, evaluate_functions, predict_blocks, worker_config,
)

from _configs import QEP_FAST

TIMEOUT = 120  # seconds: no Dask wait in this module may hang the suite longer


@pytest.fixture(scope="module")
def client():
    env = {v: "1" for v in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")}
    with dask.config.set(worker_config()), \
            distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                     host="127.0.0.1", dashboard_address=None,
                                     worker_dashboard_address=None, env=env) as cluster, \
            distributed.Client(cluster, timeout=TIMEOUT) as dask_client:
        yield dask_client


def _worker_environ():
    return {name: os.environ.get(name) for name in
            [*_MALLOC_ENVIRON, "OMP_NUM_THREADS", "MKL_NUM_THREADS"]}


def test_worker_config_reaches_the_workers_before_they_start(client):
    # glibc reads MALLOC_* once, at process start: only the nanny's pre-spawn environment
    # is early enough, and distributed's own entries (one thread per worker) stay
    for environ in client.run(_worker_environ).values():
        assert environ == {**_MALLOC_ENVIRON, "OMP_NUM_THREADS": "1",
                           "MKL_NUM_THREADS": "1"}


def _regression(n=240, d=2, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3, 3, (n, d))
    y = np.sin(1.5 * X[:, 0]) * np.cos(X[:, 1]) + 0.2 * rng.standard_normal(n)
    return X, y


SPARSE_KERNEL = ConstantKernel(1.0) * RBF([1.0, 1.0]) + WhiteKernel(0.1)

# (estimator, grid, task): every public estimator, small settings
ESTIMATORS = {
    "pathwise": (PathwiseGPSampler(SPARSE_KERNEL, n_inducing=20, optimizer=None,
                                   random_state=0),
                 {"alpha": [1e-3, 1e-1]}, "regression"),
    "dkp": (DeepKernelProcessRegressor(n_layers=1), {"dof": [10.0, 100.0]}, "regression"),
    "qep-regressor": (DeepQEPRegressor(random_state=0, **{**QEP_FAST, "max_iter": 5}),
                      {"q": [1.0, 2.0]}, "regression"),
    "qep-classifier": (DeepQEPClassifier(random_state=0, **{**QEP_FAST, "max_iter": 5}),
                       {"q": [1.0, 2.0]}, "classification"),
    "kep-svgp": (KEPSVGPClassifier(d_model=8, n_heads=2, depth=1, max_iter=3, random_state=0),
                 {"rank": [2, 3]}, "classification"),
    "smooth-drd": (SmoothDRDRegressor(max_iter=10), {"smoothness": [False, True]},
                   "regression"),
}


def _data(task):
    if task == "regression":
        return _regression(120)
    return make_classification(n_samples=120, n_features=4, n_informative=3, n_redundant=0,
                               random_state=0)


# ------------------------------------------------------------ distributed sparse fit


def test_distributed_sparse_fit_equals_in_memory_fit(client):
    X, y = _regression(900)
    # max_iter bounds the run time; both fits take the same steps to round-off
    params = dict(kernel=SPARSE_KERNEL, n_inducing=20, random_state=0, max_iter=12)
    memory = PathwiseGPSampler(**params).fit(X, y)
    chunked = PathwiseGPSampler(**params).fit(da.from_array(X, chunks=(350, 2)),
                                              da.from_array(y, chunks=350))
    assert memory.n_iter_ > 10
    assert chunked.log_marginal_likelihood_value_ == pytest.approx(
        memory.log_marginal_likelihood_value_, rel=1e-8)
    np.testing.assert_allclose(chunked.kernel_.theta, memory.kernel_.theta, rtol=0, atol=1e-6)
    np.testing.assert_allclose(chunked.inducing_points_, memory.inducing_points_, rtol=0)
    Xq = _regression(50, seed=1)[0]
    mean_m, std_m = memory.predict(Xq, return_std=True)
    mean_c, std_c = chunked.predict(Xq, return_std=True)
    np.testing.assert_allclose(mean_c, mean_m, rtol=0, atol=1e-6)
    np.testing.assert_allclose(std_c, std_m, rtol=0, atol=1e-6)
    # the bound at any theta is evaluated where the rows are, and agrees with memory
    theta = memory.kernel_.theta + 0.1
    value, grad = chunked.log_marginal_likelihood(theta, eval_gradient=True)
    ref_value, ref_grad = memory.log_marginal_likelihood(theta, eval_gradient=True)
    assert value == pytest.approx(ref_value, rel=1e-11)
    np.testing.assert_allclose(grad, ref_grad, rtol=1e-8)


def test_distributed_fit_on_a_dask_dataframe_keeps_feature_names(client):
    X, y = _regression(400)
    frame = pd.DataFrame(X, columns=["a", "b"])
    params = dict(kernel=SPARSE_KERNEL, n_inducing=10, random_state=0, normalize_y=True,
                  optimizer=None)
    memory = PathwiseGPSampler(**params).fit(frame, y)
    chunked = PathwiseGPSampler(**params).fit(dd.from_pandas(frame, npartitions=3),
                                              dd.from_pandas(pd.Series(y), npartitions=3))
    assert list(chunked.feature_names_in_) == ["a", "b"]
    np.testing.assert_allclose(chunked.y_mean_, memory.y_mean_, rtol=1e-12)
    assert chunked.log_marginal_likelihood_value_ == pytest.approx(
        memory.log_marginal_likelihood_value_, rel=1e-8)
    np.testing.assert_allclose(chunked.predict(frame[:20]), memory.predict(frame[:20]),
                               rtol=0, atol=1e-6)


@pytest.mark.parametrize("bad, match", [
    (dict(n_inducing=None), "needs sparse mode"),
    (dict(alpha=np.full(200, 0.1)), "scalar alpha"),
    (dict(optimizer="adam", minibatch_size=50), "minibatch_size"),
])
def test_dask_fit_refuses_what_it_cannot_do(bad, match):
    X, y = _regression(200)
    est = PathwiseGPSampler(SPARSE_KERNEL, **{"n_inducing": 10, **bad})
    with pytest.raises(ValueError, match=match):
        est.fit(da.from_array(X, chunks=50), da.from_array(y, chunks=50))


def test_dask_fit_reports_non_finite_input_before_fitting():
    X, y = _regression(200)
    X[150, 1] = np.nan
    with pytest.raises(ValueError, match="X contains NaN or infinity"):
        est = PathwiseGPSampler(SPARSE_KERNEL, n_inducing=10)
        est.fit(da.from_array(X, chunks=50), da.from_array(y, chunks=50))


@pytest.mark.parametrize("where", ["X", "y"])
def test_dask_fit_refuses_magnitudes_it_cannot_square(where):
    # the in-memory rule (skgpx._base.check_magnitude) on the same pass as the summaries
    X, y = _regression(200)
    if where == "X":
        X = X * 1e200
    else:
        y = y * 1e200
    with pytest.raises(ValueError, match=f"{where} has values of magnitude .* above the largest"):
        est = PathwiseGPSampler(SPARSE_KERNEL, n_inducing=10)
        est.fit(da.from_array(X, chunks=50), da.from_array(y, chunks=50))


# ------------------------------------------------------------ tuning and scoring


@pytest.mark.parametrize("name", list(ESTIMATORS))
def test_tuning_and_scoring_on_the_cluster_equal_in_process(client, name):
    estimator, grid, task = ESTIMATORS[name]
    X, y = _data(task)
    cv = KFold(2, shuffle=True, random_state=0)
    local = GridSearchCV(estimator, grid, cv=cv, n_jobs=1).fit(X, y)
    with joblib.parallel_backend("dask"):
        remote = GridSearchCV(estimator, grid, cv=cv, n_jobs=-1).fit(X, y)
    assert remote.best_params_ == local.best_params_
    # the same fits in other processes: iterative solvers carry last-bit differences
    # into the scores (the DKP solver's measured 1.1e-9 relative)
    np.testing.assert_allclose(remote.cv_results_["mean_test_score"],
                               local.cv_results_["mean_test_score"], rtol=1e-7)
    model = local.best_estimator_
    X_blocks = da.from_array(X, chunks=(35, X.shape[1]))
    np.testing.assert_allclose(predict_blocks(model, X_blocks).compute(), model.predict(X),
                               rtol=1e-9, atol=1e-12)
    if task == "classification":
        np.testing.assert_allclose(predict_blocks(model, X_blocks, "predict_proba").compute(),
                                   model.predict_proba(X), rtol=1e-9, atol=1e-12)


def test_function_draws_do_not_depend_on_the_chunking(client):
    X, y = _regression(300)
    for params in (dict(n_inducing=20), dict()):
        est = PathwiseGPSampler(SPARSE_KERNEL, optimizer=None, random_state=0, **params)
        f = est.fit(X, y).sample_functions(8, random_state=1)
        Xq = _regression(1500, seed=2)[0]
        reference = f(Xq)
        for rows in (1500, 333, 1024, 700):
            values = evaluate_functions(f, da.from_array(Xq, chunks=(rows, 2))).compute()
            np.testing.assert_array_equal(values, reference)  # bit for bit


@pytest.mark.slow
def test_a_killed_worker_is_retried_and_the_result_is_unchanged(client):
    X, y = _regression(300)
    est = PathwiseGPSampler(SPARSE_KERNEL, n_inducing=20, optimizer=None).fit(X, y)
    Xq = _regression(400, seed=3)[0]

    def slow_predict(block):  # a local function: pickled by value to the workers
        time.sleep(0.25)
        return est.predict(block)

    lazy = da.from_array(Xq, chunks=(20, 2)).map_blocks(slow_predict, drop_axis=1,
                                                        dtype=np.float64)
    future = client.compute(lazy)
    deadline = time.monotonic() + TIMEOUT
    while not any(client.processing().values()):
        assert time.monotonic() < deadline, "no task started"
        time.sleep(0.05)
    busy = [address for address, tasks in client.processing().items() if tasks][0]
    pid = client.run(os.getpid, workers=[busy])[busy]
    os.kill(pid, signal.SIGKILL)  # the nanny restarts it; Dask reruns its tasks
    np.testing.assert_allclose(future.result(timeout=TIMEOUT), est.predict(Xq), rtol=1e-12)


# slow: the Dask route of the classifier's bound is the regressor's block sums (the fast
# tier's sparse fit and Student-t fit against memory) with another likelihood
@pytest.mark.slow
def test_distributed_sparse_classifier_equals_in_memory_fit(client):
    from skgpx import PathwiseGPClassifier

    X, y = make_classification(600, n_features=3, n_informative=3, n_redundant=0,
                               n_classes=3, n_clusters_per_class=1, random_state=0)
    labels = np.array(["a", "b", "c"])[y]
    params = dict(kernel=ConstantKernel(1.0, (1e-2, 1e2)) * RBF(1.0, (1e-2, 1e2)),
                  n_inducing=12, max_iter=6, random_state=0,
                  # rows in more than one chunk: in memory too, q's inner loop makes full
                  # passes (the held-A loop is for rows that fit one chunk), as on Dask
                  batch_size=500)
    memory = PathwiseGPClassifier(**params).fit(X, labels)
    chunked = PathwiseGPClassifier(**params).fit(da.from_array(X, chunks=(250, 3)),
                                                 da.from_array(labels, chunks=250))
    np.testing.assert_array_equal(chunked.classes_, memory.classes_)
    assert chunked.log_marginal_likelihood_value_ == pytest.approx(
        memory.log_marginal_likelihood_value_, rel=1e-8)
    np.testing.assert_allclose(chunked.kernel_.theta, memory.kernel_.theta, atol=1e-6)
    Xq = X[:40] + 0.1
    np.testing.assert_allclose(chunked.predict_proba(Xq), memory.predict_proba(Xq), atol=1e-6)
    theta = memory.kernel_.theta + 0.2  # the bound elsewhere is also summed on the workers
    value, grad = chunked.log_marginal_likelihood(theta, eval_gradient=True)
    ref_value, ref_grad = memory.log_marginal_likelihood(theta, eval_gradient=True)
    assert value == pytest.approx(ref_value, rel=1e-11)
    np.testing.assert_allclose(grad, ref_grad, rtol=1e-8)
    with pytest.raises(ValueError, match="needs the sparse mode"):
        PathwiseGPClassifier().fit(da.from_array(X, chunks=(250, 3)), labels)
    with pytest.raises(ValueError, match="needs the rows in memory"):
        PathwiseGPClassifier(n_inducing=5, optimizer="adam").fit(
            da.from_array(X, chunks=(250, 3)), labels)


@pytest.mark.parametrize("likelihood", ["student_t", "heteroscedastic"])
def test_distributed_robust_regression_equals_in_memory_fit(client, likelihood):
    # the bound of a non-Gaussian likelihood and its gradient in the kernels',
    # the likelihood's hyperparameters and Z (g's own Z here), summed on the workers
    rng = np.random.default_rng(0)
    X = rng.uniform(-3, 3, size=(600, 2))
    y = np.sin(X[:, 0]) + (0.1 + 0.1 * (X[:, 1] + 3)) * rng.standard_normal(600)
    params = dict(kernel=ConstantKernel(1.0, (1e-2, 1e2)) * RBF(1.0, (1e-2, 1e2)),
                  likelihood=likelihood, share_inducing=False, optimize_inducing=True,
                  n_inducing=10, max_iter=6, random_state=0, batch_size=500)
    memory = PathwiseGPSampler(**params).fit(X, y)
    chunked = PathwiseGPSampler(**params).fit(da.from_array(X, chunks=(250, 2)),
                                              da.from_array(y, chunks=250))
    assert chunked.log_marginal_likelihood_value_ == pytest.approx(
        memory.log_marginal_likelihood_value_, rel=1e-8)
    np.testing.assert_allclose(chunked.kernel_.theta, memory.kernel_.theta, atol=1e-6)
    Xq = X[:40] + 0.1
    for got, expected in zip(chunked.predict(Xq, return_std=True, return_noise=True),
                             memory.predict(Xq, return_std=True, return_noise=True)):
        np.testing.assert_allclose(got, expected, atol=1e-6)
    theta = memory.kernel_.theta + 0.2
    value, grad = chunked.log_marginal_likelihood(theta, eval_gradient=True)
    ref_value, ref_grad = memory.log_marginal_likelihood(theta, eval_gradient=True)
    assert value == pytest.approx(ref_value, rel=1e-11)
    np.testing.assert_allclose(grad, ref_grad, rtol=1e-8)


def test_dask_refuses_the_minibatch_route_of_a_likelihood_before_any_work(monkeypatch):
    from skgpx._inducing import _points

    def never(*args, **kwargs):  # inducing inputs are the fit's first piece of work
        raise AssertionError("the fit started")

    monkeypatch.setattr(_points, "initial_inducing_points", never)
    X = da.from_array(np.zeros((40, 2)), chunks=(20, 2))
    with pytest.raises(ValueError, match="optimizer='fmin_l_bfgs_b'"):
        PathwiseGPSampler(likelihood="student_t", n_inducing=5, optimizer="adam").fit(
            X, da.from_array(np.zeros(40), chunks=20))
