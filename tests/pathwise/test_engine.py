"""The mode objects of the pathwise engine (skgpx/pathwise/_engine.py).

A fitted ``PathwiseGPSampler`` keeps every tensor of its fit in one mode object; these
tests hold each mode to the interface the classifier's modes will share, and check that a
GPU fit of each mode loads on the CPU (``tests/test_gpu_pickles.py`` covers the exact
Cholesky and the in-memory sparse fits; here also CG, structured inputs and Dask rows).
"""

import dataclasses
import pickle
import warnings

import numpy as np
import pytest
from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel

from skgpx import PathwiseGPSampler
from skgpx.pathwise._modes import Mode, PriorMode
from skgpx.pathwise._exact._mode import ExactMode
from skgpx.pathwise._sgpr._mode import SGPRMode

from _fake_cuda import cuda_tagged_pickle
from ._oracles import query_points, sine_data
from .test_sklearn_parity import SequenceKernel, _sequences

KERNEL = ConstantKernel(1.0) * RBF(0.5) + WhiteKernel(0.1)


def _dask(X, y):
    import dask.array as da

    return da.from_array(X, chunks=(12, X.shape[1])), da.from_array(y, chunks=12)


def _case(name):
    """``(estimator, X, y, Xq, mode class)`` of each way to fit."""
    X, y = sine_data()
    Xq = query_points(9)
    params = dict(device="cpu", random_state=0)
    if name == "structured":
        X, y, Xq = _sequences()
        kernel = ConstantKernel(1.0) * SequenceKernel() + WhiteKernel(0.1)
        return PathwiseGPSampler(kernel, prior="exact", **params), X, y, Xq, ExactMode
    if name == "cholesky":
        return PathwiseGPSampler(KERNEL, **params), X, y, Xq, ExactMode
    if name == "cg":
        est = PathwiseGPSampler(KERNEL, optimizer=None, solver="cg", **params)
        return est, X, y, Xq, ExactMode
    est = PathwiseGPSampler(KERNEL, n_inducing=8, normalize_y=True, **params)
    if name == "dask":
        X, y = _dask(X, y)
    return est, X, y, Xq, SGPRMode


MODES = ["cholesky", "cg", "structured", "sparse", "dask"]


def _outputs(est, Xq):
    outputs = [*est.predict(Xq, return_std=True), est.predict(Xq, return_cov=True)[1],
               est.sample_y(Xq, 3, random_state=1)]
    if est.solver != "cg":  # CG computes no log-determinant
        outputs.append(est.log_marginal_likelihood(est.kernel_.theta + 0.1,
                                                   eval_gradient=True)[1])
    return outputs


@pytest.mark.parametrize("name", MODES)
def test_a_gpu_fit_of_every_mode_loads_on_the_cpu(name):
    est, X, y, Xq, mode_class = _case(name)
    est.fit(X, y)
    assert type(est._engine) is mode_class
    expected = _outputs(est, Xq)
    blob = cuda_tagged_pickle(est)
    with warnings.catch_warnings(record=True) as records:
        warnings.simplefilter("always")
        loaded = pickle.loads(blob)
    assert [str(r.message) for r in records if "CUDA is not available" in str(r.message)]
    assert loaded.device_ == "cpu"
    for got, want in zip(_outputs(loaded, Xq), expected):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("mode_class", [ExactMode, SGPRMode, PriorMode])
def test_modes_are_dataclasses_with_the_engine_interface(mode_class):
    # a dataclass, so that pickling moves its tensors field by field (_base.move_to_device)
    assert dataclasses.is_dataclass(mode_class) and issubclass(mode_class, Mode)
    methods = ["predict", "posterior", "prior_variance", "prior_covariance", "as_theta"]
    if mode_class is not PriorMode:
        methods += ["plan", "fit", "log_marginal_likelihood", "attributes"]
    assert all(callable(getattr(mode_class, m, None)) for m in methods)


@pytest.mark.parametrize("name", ["cholesky", "sparse"])
def test_a_mode_fits_and_predicts_without_the_estimator_face(name):
    # what a classifier does with a mode: plan, fit once, ask for latent moments and a
    # posterior; the results are those that the regressor's face reports
    est, X, y, Xq, mode_class = _case(name)
    reference = est.set_params(predict_noise="latent", normalize_y=False).fit(X, y)
    kernel = KERNEL.clone_with_theta(KERNEL.theta)
    mode = mode_class.plan(est, kernel, X.shape[0], X.shape[1], "cpu")
    history = []
    fitted = mode.fit(est, kernel, X, y[:, None], np.full(X.shape[0], est.alpha),
                      np.random.RandomState(0), history, "cpu", reference._engine.theta.dtype)
    assert fitted is kernel
    np.testing.assert_array_equal(fitted.theta, reference.kernel_.theta)
    assert history == reference.objective_history_
    assert mode.lml == reference.log_marginal_likelihood_value_
    Xq_t = reference._as_tensor(Xq, "cpu", mode.theta.dtype)
    mean, var, cov = mode.predict(Xq_t, noise=0.0, batch_size=est.batch_size,
                                  want_var=True)
    assert cov is None
    ref_mean, ref_std = reference.predict(Xq, return_std=True)
    np.testing.assert_array_equal(mean[:, 0].numpy(), ref_mean)
    # the face scales by y_std = 1 and takes the root in torch: equal to round-off
    np.testing.assert_allclose(np.sqrt(var.numpy()), ref_std, rtol=1e-14, atol=0)
    post = mode.posterior(signal_kernel=reference.signal_kernel_, y_mean=reference._y_mean,
                          y_std=reference._y_scale, n_targets=1, squeeze=True,
                          n_features_in=X.shape[1])
    assert post.fitted and post.centers.shape[0] == (8 if name == "sparse" else X.shape[0])
