"""The estimator contract beyond scikit-learn's checks (randomness, errors, progress output,
tests), where it is specific to PathwiseGPSampler: the other modes (exact prior, weight space,
the prior before fit), random_state=None, progress output, float32 optimisation, errors.  What
every estimator shares (seeds, global RNGs, pickling, inputs, silence, float32) is tested in
tests/test_common.py and tests/test_float32.py."""

import copy
import pickle
import warnings

import numpy as np
import pytest
import torch
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.gaussian_process.kernels import (
    RBF,
    ConstantKernel,
    Matern,
    PairwiseKernel,
    WhiteKernel,
)

from skgpx import PathwiseGPSampler

import _float32
from test_common import LBFGSB_FTOL
from test_float32 import AMPLIFY, MARGIN, N_EMULATED, OBJECTIVE_SLACK

from ._oracles import full_kernel, query_points, sine_data


def _free_kernel():
    return ConstantKernel(1.0) * RBF(1.0) + WhiteKernel(0.5)


def _optimised(random_state=0, **params):
    return PathwiseGPSampler(_free_kernel(), n_restarts_optimizer=2,
                             random_state=random_state, device="cpu", **params)


def _fixed(**params):
    return PathwiseGPSampler(full_kernel("rbf"), optimizer=None, random_state=0, device="cpu",
                             **params)


def _everything(est, X, y, Xq):
    """Fit and call every public method; return what they produced."""
    est.fit(X, y)
    f = est.sample_functions(3, random_state=1)
    return [est.predict(Xq), *est.predict(Xq, return_std=True),
            est.predict(Xq, return_cov=True)[1], est.sample_y(Xq, 3, random_state=2),
            est.sample_y(Xq, 3, random_state=None), f(Xq),
            f.evaluate_batched(np.stack([Xq[:4]] * 3)),
            np.atleast_1d(est.log_marginal_likelihood(est.kernel_.theta))]


# ------------------------------------------------------------------ seeds and RNG


def test_global_rng_state_is_untouched_by_the_exact_prior():
    # the random-feature prior (and the seeds): tests/test_common.py
    X, y = sine_data()
    Xq = query_points()
    torch.manual_seed(123)
    np.random.seed(123)
    torch_state, numpy_state = torch.get_rng_state(), np.random.get_state()
    est = _optimised(0, prior="exact", shared_basis=False, n_features=32)
    est.predict(Xq, return_std=True)  # prior, before fit
    est.sample_y(Xq, 2, random_state=0)
    _everything(est, X, y, Xq)
    assert torch.equal(torch.get_rng_state(), torch_state)
    after = np.random.get_state()
    assert after[0] == numpy_state[0] and after[2:] == numpy_state[2:]
    np.testing.assert_array_equal(after[1], numpy_state[1])


def test_random_state_none_leaves_torch_rng_untouched():
    # random_state=None means numpy's global RandomState (scikit-learn's convention), so
    # only torch's global generator is required to stay untouched here.
    X, y = sine_data()
    torch.manual_seed(7)
    state = torch.get_rng_state()
    est = PathwiseGPSampler(_free_kernel(), n_restarts_optimizer=1, device="cpu").fit(X, y)
    est.sample_y(query_points(), 3, random_state=None)
    assert torch.equal(torch.get_rng_state(), state)


def test_prediction_methods_do_not_write_to_the_estimator():
    # prediction is read-only: no lazy caches, no generator that advances (also before fit).
    X, y = sine_data()
    Xq = query_points()
    for fitted in (False, True):
        est = _optimised(0)
        if fitted:
            est.fit(X, y)
            assert est.n_iter_ >= 1 and len(est.objective_history_) == est.n_iter_
        before = pickle.dumps(est)
        est.predict(Xq, return_std=True)
        est.predict(Xq, return_cov=True)
        est.sample_y(Xq, 3, random_state=0)
        est.sample_y(Xq, 3, random_state=None)
        if fitted:
            est.sample_functions(3, random_state=None)(Xq)
            est.log_marginal_likelihood(est.kernel_.theta, eval_gradient=True)
        assert pickle.dumps(est) == before


# ------------------------------------------------------------------ pickling


# independent bases with normalised targets and per-row noise: tests/test_common.py
@pytest.mark.parametrize("params", [
    dict(),
    dict(method="weight_space", n_features=16),
    dict(prior="exact"),
], ids=["default", "weight-space", "exact-prior"])
def test_pickle_round_trip_of_fitted_estimator(params):
    X, y = sine_data()
    Xq = query_points()
    est = _optimised(0, **params)
    before = _everything(est, X, y, Xq)
    loaded = pickle.loads(pickle.dumps(est))
    assert loaded.device_ == est.device_ and loaded.dtype_ == est.dtype_
    f = loaded.sample_functions(3, random_state=1)
    after = [loaded.predict(Xq), *loaded.predict(Xq, return_std=True),
             loaded.predict(Xq, return_cov=True)[1], loaded.sample_y(Xq, 3, random_state=2),
             loaded.sample_y(Xq, 3, random_state=None), f(Xq),
             f.evaluate_batched(np.stack([Xq[:4]] * 3)),
             np.atleast_1d(loaded.log_marginal_likelihood(loaded.kernel_.theta))]
    for expected, got in zip(before, after):
        np.testing.assert_array_equal(got, expected)
    # a deep copy and an unfitted clone behave too
    np.testing.assert_array_equal(copy.deepcopy(est).predict(Xq), before[0])
    assert not hasattr(clone(est), "X_train_")


# ------------------------------------------------------------------ inputs
# Unmodified, copied and read-only inputs: tests/test_common.py.


def test_strided_views_are_accepted():
    # Reversed and strided views are ordinary numpy inputs (scikit-learn accepts them);
    # results must equal those of the contiguous copies.
    X, y = sine_data()
    Xq = query_points()
    X_view, y_view, Xq_view = X[::-1], y[::-1], Xq[::-2]
    contiguous = [np.ascontiguousarray(a) for a in (X_view, y_view, Xq_view)]
    expected = _everything(_fixed(), *contiguous)
    got = _everything(_fixed(), X_view, y_view, Xq_view)
    for e, g in zip(expected, got):
        np.testing.assert_allclose(g, e, rtol=0, atol=1e-12)


# ------------------------------------------------------------------ verbosity
# verbose=0 is silent: tests/test_common.py.


def test_verbose_1_shows_a_progress_bar_on_stderr(capfd):
    X, y = sine_data()
    _optimised(0, verbose=1).fit(X, y)
    out, err = capfd.readouterr()
    assert "PathwiseGPSampler fit" in err
    assert "neg_log_marginal_likelihood" in err
    assert "run 0" not in out + err


def test_verbose_2_adds_a_line_per_run(capfd):
    X, y = sine_data()
    _optimised(0, verbose=2).fit(X, y)
    out, err = capfd.readouterr()
    assert "PathwiseGPSampler fit" in err
    for run in range(3):
        assert f"run {run}: neg log marginal likelihood" in out + err


# ------------------------------------------------------------------ dtypes


def test_float32_mode_draws_float32_prior_weights():
    # float32 against float64 (moments, draws, functions, likelihood): tests/test_float32.py
    X, y = sine_data()
    est = _fixed(dtype="float32").fit(X, y)
    assert est.sample_functions(20, random_state=0).prior_weights_.dtype == torch.float32


def test_float32_optimisation_reaches_the_float64_optimum():
    """float32 maximises the likelihood as far as its objective can tell values apart.

    The float32 log marginal likelihood ``f`` carries a rounding error ``E``, derived as in
    tests/test_float32.py: ``MARGIN`` times the largest deviation of
    ``N_EMULATED`` float64 evaluations under emulated float32 rounding (``AMPLIFY`` times
    float32's).  float32's optimiser compares two such values, so it stops where the
    likelihood is within ``2 E`` of its maximum, plus what L-BFGS-B's stopping rule leaves
    (``OBJECTIVE_SLACK`` times its ftol): the float64 likelihood at float32's theta lies that
    close to the float64 maximum, and theta itself within ``sqrt(2 resolution / lambda_min)``
    of float64's, ``lambda_min`` the smallest curvature of ``-f`` there (the flattest
    direction; finite differences of the analytic float64 gradient).  Where on that plateau
    float32 stops depends on the CPU's kernels; a float32 gradient or objective that is
    wrong stops far outside it.
    """
    X, y = sine_data()
    model = _optimised(0).fit(X, y)
    theta, theta32 = model.kernel_.theta, _optimised(0, dtype="float32").fit(X, y).kernel_.theta
    f = model.log_marginal_likelihood(theta)
    rounding = MARGIN * max(
        abs(_float32.emulated(lambda: model.log_marginal_likelihood(theta), seed, AMPLIFY) - f)
        for seed in range(N_EMULATED))
    resolution = OBJECTIVE_SLACK * LBFGSB_FTOL * max(abs(f), 1.0) + 2.0 * rounding
    assert f - model.log_marginal_likelihood(theta32) <= resolution
    step = 1e-5 * np.eye(len(theta))
    curvature = np.array([model.log_marginal_likelihood(theta - h, eval_gradient=True)[1]
                          - model.log_marginal_likelihood(theta + h, eval_gradient=True)[1]
                          for h in step]) / 2e-5
    lambda_min = np.linalg.eigvalsh(0.5 * (curvature + curvature.T))[0]
    assert lambda_min > 0  # a maximum
    assert np.linalg.norm(theta32 - theta) <= np.sqrt(2 * resolution / lambda_min)


def test_default_dtype_float32_input_and_multi_output_shapes():
    X, y = sine_data()
    Xq = query_points()
    assert PathwiseGPSampler().get_params()["dtype"] == "float64"
    X32 = X.astype(np.float32)
    est = _fixed().fit(X32, y)
    assert est.X_train_.dtype == np.float64 and est.dtype_ == "float64"
    reference = _fixed().fit(X32.astype(np.float64), y)
    mean = est.predict(Xq.astype(np.float32))
    assert mean.dtype == np.float64
    np.testing.assert_array_equal(mean, reference.predict(Xq.astype(np.float32)
                                                          .astype(np.float64)))
    Y = np.column_stack([y, 2 * y, -y])
    for targets, shape in [(Y, (40, 3)), (y[:, None], (40,))]:
        est = _fixed().fit(X, targets)
        for out in (est.predict(Xq), *est.predict(Xq, return_std=True)):
            assert out.shape == shape and out.dtype == np.float64


def test_prior_auto_switches_on_the_total_size():
    X, y = sine_data()
    Xq = query_points()
    auto_small = _fixed(prior="auto", exact_prior_max=70).fit(X, y)  # 30 + 40 <= 70
    exact = _fixed(prior="exact").fit(X, y)
    np.testing.assert_array_equal(auto_small.sample_y(Xq, 4, random_state=0),
                                  exact.sample_y(Xq, 4, random_state=0))
    auto_large = _fixed(prior="auto", exact_prior_max=69).fit(X, y)
    rff = _fixed(prior="rff").fit(X, y)
    np.testing.assert_array_equal(auto_large.sample_y(Xq, 4, random_state=0),
                                  rff.sample_y(Xq, 4, random_state=0))
    assert not np.allclose(auto_small.sample_y(Xq, 4, random_state=0),
                           auto_large.sample_y(Xq, 4, random_state=0))


# ------------------------------------------------------------------ errors


def test_odd_n_features_with_sincos():
    X, y = sine_data()
    with pytest.raises(ValueError, match=r"n_features=7 must be even for feature_map='sincos'"):
        _fixed(n_features=7).fit(X, y)
    _fixed(n_features=7, feature_map="cosine").fit(X, y).sample_y(query_points(), 2)


def test_cuda_request():
    X, y = sine_data()
    est = PathwiseGPSampler(full_kernel("rbf"), optimizer=None, device="cuda")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match=r"device='cuda' requested but CUDA is not "
                                             r"available; use device='auto' or 'cpu'"):
            est.fit(X, y)
    else:
        assert est.fit(X, y).device_ == "cuda"
        assert np.isfinite(est.predict(query_points())).all()
    with pytest.raises(ValueError, match=r"device='tpu' is not understood"):
        PathwiseGPSampler(device="tpu").fit(X, y)


def test_alpha_array_of_wrong_length():
    X, y = sine_data()
    with pytest.raises(ValueError, match=r"alpha must be a scalar or an array with same "
                                         r"number of entries as y\. \(29 != 30\)"):
        _fixed(alpha=np.full(29, 0.1)).fit(X, y)


def test_n_targets_mismatch():
    X, y = sine_data()
    with pytest.raises(ValueError, match=r"different from the parameter `n_targets`\. "
                                         r"Got 3 != 2"):
        _fixed(n_targets=2).fit(X, np.column_stack([y, y, y]))


def test_return_std_and_return_cov_together():
    X, y = sine_data()
    Xq = query_points()
    message = r"At most one of return_std or return_cov can be requested"
    with pytest.raises(RuntimeError, match=message):
        _fixed().predict(Xq, return_std=True, return_cov=True)  # before fit
    with pytest.raises(RuntimeError, match=message):
        _fixed().fit(X, y).predict(Xq, return_std=True, return_cov=True)


def test_anisotropic_length_scale_with_wrong_number_of_features():
    X, y = sine_data()
    est = PathwiseGPSampler(RBF([1.0, 2.0]), optimizer=None, device="cpu")
    message = r"has 2 length scales but X has 1 features"
    with pytest.raises(ValueError, match=message):
        est.fit(X, y)
    with pytest.raises(ValueError, match=message):
        est.predict(query_points())  # the prior, before fit


def test_nan_input():
    X, y = sine_data()
    X_nan = X.copy()
    X_nan[3, 0] = np.nan
    with pytest.raises(ValueError, match=r"Input X contains NaN"):
        _fixed().fit(X_nan, y)
    y_nan = y.copy()
    y_nan[2] = np.nan
    with pytest.raises(ValueError, match=r"Input y contains NaN"):
        _fixed().fit(X, y_nan)
    est = _fixed().fit(X, y)
    with pytest.raises(ValueError, match=r"Input X contains NaN"):
        est.predict(X_nan)
    with pytest.raises(ValueError, match=r"Input X contains NaN"):
        est.sample_y(X_nan)


def test_wrong_number_of_features_at_prediction():
    X, y = sine_data()
    est = _fixed().fit(X, y)
    with pytest.raises(ValueError, match=r"X has 2 features"):
        est.predict(np.ones((3, 2)))
    f = est.sample_functions(2, random_state=0)
    with pytest.raises(ValueError, match=r"X has 2 features, but these functions expect 1"):
        f(np.ones((3, 2)))
    with pytest.raises(ValueError, match=r"Xb must have shape \(n_samples=2, q, n_features\)"):
        f.evaluate_batched(np.ones((3, 4, 1)))


def test_sample_functions_and_likelihood_need_a_fit():
    # predict and sample_y give the prior before fit (requires_fit=False); the methods that
    # need training data must say so with NotFittedError, not fail on a missing attribute.
    est = _fixed()
    with pytest.raises(NotFittedError):
        est.sample_functions(2)
    with pytest.raises(NotFittedError):
        est.log_marginal_likelihood(est.kernel.theta)


@pytest.mark.parametrize("n_samples", [-1, 2.5, True, "3"])
def test_bad_draw_counts_raise_before_torch(n_samples):
    X, y = sine_data()
    est = _fixed().fit(X, y)
    with pytest.raises(ValueError, match="n_samples"):
        est.sample_y(X, n_samples)
    with pytest.raises(ValueError, match="n_samples"):
        est.sample_functions(n_samples)
    assert est.sample_y(X, 0).shape == (X.shape[0], 0)  # as scikit-learn's sample_y


def test_gradient_needs_theta():
    X, y = sine_data()
    with pytest.raises(ValueError, match=r"Gradient can only be evaluated for theta!=None"):
        _fixed().fit(X, y).log_marginal_likelihood(eval_gradient=True)


def test_singular_kernel_matrix_gets_jitter_with_a_warning():
    # alpha = 0 and every input three times: K is exactly singular and needs jitter.
    X = np.repeat(np.linspace(0.0, 4.0, 10), 3)[:, None]
    y = np.sin(2.0 * X[:, 0])
    est = PathwiseGPSampler(ConstantKernel(1.0, "fixed") * Matern(0.5, "fixed", nu=2.5),
                            alpha=0.0, optimizer=None, jitter=1e-8, device="cpu")
    with pytest.warns(UserWarning, match=r"not numerically positive definite; added a "
                                         r"jitter of"):
        est.fit(X, y)
    assert 1e-8 <= est.jitter_ <= 1e-3  # mean diagonal is 1
    Xq = query_points()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # clipped tiny negative variances
        mean, std = est.predict(Xq, return_std=True)
        draws = est.sample_y(Xq, 5, random_state=0)
    assert np.isfinite(mean).all() and np.isfinite(std).all() and np.isfinite(draws).all()
    assert np.isfinite(est.sample_functions(5, random_state=0)(Xq)).all()
    # the jitter is not noise: near a data point the mean still interpolates
    np.testing.assert_allclose(est.predict(X[::3]), y[::3], atol=1e-3)


def test_hopeless_kernel_matrix_raises_linalg_error():
    # tanh(x x' - 1) is not a positive-definite kernel; here its diagonal has negative
    # entries (|x| < 1), which no jitter up to 1e-3 of the mean diagonal can repair.
    X = np.array([[0.0], [0.1], [0.2], [2.0], [3.0]])
    y = np.arange(5.0)
    kernel = PairwiseKernel(gamma=1.0, gamma_bounds="fixed", metric="sigmoid",
                            pairwise_kernels_kwargs={"coef0": -1.0})
    est = PathwiseGPSampler(kernel, alpha=0.0, optimizer=None, device="cpu")
    message = r"not positive definite, even with a jitter"
    with pytest.raises(np.linalg.LinAlgError, match=message):
        est.fit(X, y)
