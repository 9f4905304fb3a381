"""The estimator contract shared by every public estimator:
pickling, seeds, untouched global random number generators, silence at ``verbose=0``, float32
close to float64 (tests/test_float32.py), and inputs that are neither modified nor aliased.

One table, ``CASES``: per estimator a small, fast configuration (the ones the family tests
use, see ``tests/_configs.py``) and a small data set.  The family test modules keep only what
is specific to a family (other modes, progress output at ``verbose >= 1``, float32
optimisation, ...).
"""

import copy
import dataclasses
import functools
import inspect
import pickle
import random
from typing import Callable

import joblib
import numpy as np
import pytest
import torch
from sklearn.base import BaseEstimator, clone, is_classifier
from sklearn.datasets import load_digits
from sklearn.gaussian_process.kernels import RBF, ConstantKernel, Kernel, WhiteKernel

import skgpx
from skgpx import (
    DeepKernelProcessRegressor,
    DeepQEPClassifier,
    DeepQEPRegressor,
    KEPSVGPClassifier,
    PathwiseGPClassifier,
    PathwiseGPSampler,
    SmoothDRDRegressor,
)
from skgpx.datasets import make_dkp_toy, make_sine_1d, make_smooth_sparse_regression
from skgpx.dkp._model import dkp_objective
from skgpx.pathwise._svgp._lbfgs import PLATEAU_WINDOW

from _configs import DKP_FAST, DRD_FAST, KEP_SMALL, QEP_FAST

# ----------------------------------------------------------------------------- data sets
# Each returns fresh arrays (X, y, X_query): tests write to them.


def _sine_data():
    """30 noisy rows of sin(2x) on [0, 4]; 40 query points on [-1, 5] (extrapolation too)."""
    X, y = make_sine_1d(n_samples=30, noise_variance=0.1, random_state=0)
    return X, y, np.linspace(-1.0, 5.0, 40)[:, None]


def _dkp_data():
    X, y = make_dkp_toy(n_samples=40, random_state=0)
    return X, y, make_dkp_toy(n_samples=9, random_state=1)[0]


def _qep_data():
    """The Q-EP family's data (tests/qep/test_estimator.py): 40 rows in 2-D with a smooth
    target and noise 0.1, 30 query rows, and three well-separated blobs of 14 rows each."""
    rng = np.random.default_rng(0)
    X = rng.uniform(-3.0, 3.0, size=(40, 2))
    y = np.sin(X[:, 0]) + 0.3 * X[:, 1] ** 2 + 0.1 * rng.standard_normal(40)
    X_query = rng.uniform(-4.0, 4.0, size=(30, 2))
    centres = np.array([[-2.0, -2.0], [2.0, -2.0], [0.0, 2.5]])
    codes = np.repeat([0, 1, 2], 14)
    X_blobs = centres[codes] + 0.6 * rng.standard_normal((42, 2))
    return X, y, X_query, X_blobs, np.array(["bird", "cat", "dog"])[codes]


def _qep_regression_data():
    X, y, X_query, _, _ = _qep_data()
    return X, y, X_query


def _blob_data():
    """String labels."""
    _, _, X_query, X, y = _qep_data()
    return X, y, X_query


_DIGITS = load_digits(return_X_y=True)


def _digit_data():
    X, y = _DIGITS
    return X[:300].copy(), y[:300].copy(), X[300:340].copy()


def _bump_data():
    """30 rows of 40 correlated features whose coefficients are smooth sparse bumps."""
    d = make_smooth_sparse_regression("bumps", shape=40, n_samples=30, n_test=50,
                                      random_state=0)
    return d.X, d.y, d.X_test[:7].copy()


# ----------------------------------------------------------------------------- factories
# scipy's default ftol for L-BFGS-B (factr = 1e7 times float64's machine epsilon)
LBFGSB_FTOL = 1e7 * np.finfo(np.float64).eps
# Per-row noise variances: PathwiseGPSampler's sample-weight-like constructor argument.
_ALPHA = np.random.RandomState(0).uniform(0.01, 0.1, 30)


def _pathwise(**params):
    # hyperparameters fitted with two random restarts; independent feature draws per path
    return PathwiseGPSampler(**{
        "kernel": ConstantKernel(1.0) * RBF(1.0) + WhiteKernel(0.5), "alpha": _ALPHA.copy(),
        "n_restarts_optimizer": 2, "normalize_y": True, "shared_basis": False,
        "n_features": 64, "random_state": 0, "device": "cpu", **params})


def _pathwise_extra(est, Xq):
    f = est.sample_functions(3, random_state=1)
    return {"sample_functions": f(Xq),
            "evaluate_batched": f.evaluate_batched(np.stack([Xq[:4]] * 3)),
            "log_marginal_likelihood": np.atleast_1d(est.log_marginal_likelihood(
                est.kernel_.theta))}


def _pathwise_likelihood(likelihood, **params):
    # the sparse variational fit of a non-Gaussian likelihood (full-data passes)
    return PathwiseGPSampler(**{
        "kernel": ConstantKernel(1.0) * RBF(1.0), "likelihood": likelihood, "n_inducing": 10,
        "max_iter": 15, "n_features": 64, "random_state": 0, "device": "cpu", **params})


def _gpc(**params):
    # three string-labelled blobs: one-vs-rest, each class's kernel fitted with a restart
    return PathwiseGPClassifier(**{
        "kernel": ConstantKernel(1.0) * RBF(1.0), "n_restarts_optimizer": 1,
        "n_features": 64, "random_state": 0, "device": "cpu", **params})


def _gpc_sparse(**params):
    # the sparse variational mode on the same blobs: Z learnt, full-data passes
    return _gpc(**{"n_inducing": 6, "max_iter": 15, "n_restarts_optimizer": 0, **params})


def _gpc_extra(est, Xq):
    return {"sample_functions": est.sample_functions(3, random_state=1)(Xq),
            "latent_mean_and_variance": np.stack(est._latent(est._query(Xq))),
            "log_marginal_likelihood": np.atleast_1d(est.log_marginal_likelihood(
                est.kernel_.theta))}


def _lml(est):
    return est.log_marginal_likelihood(est.kernel_.theta)


def _dkp_objective(est):
    # on a copy of the state: the evaluation caches factorisations in it
    value = dkp_objective(est._config(est._resolve_dof()), est._state.copy(grams_cache={}))
    return np.float64(value.item())  # a tensor in the state's dtype


def _lbfgsb_slack(est, value):
    # scipy's L-BFGS-B (exact modes, scikit-learn's settings) stops once an iteration
    # changes the objective by at most ftol * max(|f|, 1); its gradient test stops closer
    return LBFGSB_FTOL * max(abs(value), 1.0)


def _plateau_slack(est, value):
    # the sparse modes stop once the bound rose by at most PLATEAU_WINDOW * tol * |bound|
    # over PLATEAU_WINDOW iterations
    return PLATEAU_WINDOW * est.tol * abs(value)


def _drd_extra(est, Xq):
    return {"sample_y_u_uncertainty": est.sample_y(Xq, 2, random_state=2, u_uncertainty=True)}


def _qep_regressor(**params):
    return DeepQEPRegressor(**{**QEP_FAST, "tol": None, "random_state": 0, "device": "cpu",
                               **params})


def _qep_classifier(**params):
    return DeepQEPClassifier(**{**QEP_FAST, "tol": None, "random_state": 0, "device": "cpu",
                                **params})


@dataclasses.dataclass(frozen=True)
class Case:
    make: Callable  # make(**params): the unfitted estimator of this case, params overriding
    data: Callable  # data(): fresh (X, y, X_query)
    seeded: bool  # takes random_state: the fit draws seeds (else fit is deterministic)
    seed_moves_predictions: bool  # another random_state changes the fitted predictions
    float32: Callable  # float32(): the params of the float32-vs-float64 comparison
    extra: Callable = None  # extra(est, X_query): family-specific outputs, by name
    # objective(est): the fit's objective at est's state, in est's dtype (None: no evaluator)
    objective: Callable = None
    # stopping_slack(est, value): the gain in the objective (value at est) that the fit's
    # stopping rule accepts as no progress (None: the fit runs a fixed number of steps)
    stopping_slack: Callable = None
    predicts_before_fit: bool = False  # the prior: predict and sample_y work unfitted
    array_params: tuple = ()  # array-valued constructor arguments (inputs too)


# float32 against float64 (section 5 below): the numerics at the float64 fit's parameters, and
# what a float32 fit gives a user.  Draws use one stream of float64 normals, cast, so float32
# draws at fixed parameters are the float64 draws up to round-off (a draw is not just another
# draw from the same distribution).  ``float32`` gives the configuration both dtypes fit for
# it: where the case runs a capped number of L-BFGS-B iterations, the cap is lifted so that
# both fits stop by the estimator's rule (tol), whose slack the objective is judged by.
CASES = {
    "PathwiseGPSampler": Case(
        make=_pathwise, data=_sine_data, seeded=True,
        # the restarts start elsewhere (objective_history_) but reach the same optimum:
        # predictions move by ~6e-7 only, so the draws carry the seed test
        seed_moves_predictions=False,
        float32=dict, extra=_pathwise_extra, objective=_lml, stopping_slack=_lbfgsb_slack,
        predicts_before_fit=True, array_params=("alpha",)),
    "PathwiseGPSampler-student_t": Case(
        make=functools.partial(_pathwise_likelihood, "student_t"), data=_sine_data,
        # the seed picks the k-means++ inducing inputs, which moves the fitted model
        seeded=True, seed_moves_predictions=True,
        float32=lambda: dict(max_iter=100), extra=_pathwise_extra, objective=_lml,
        stopping_slack=_plateau_slack),
    "PathwiseGPSampler-heteroscedastic": Case(
        make=functools.partial(_pathwise_likelihood, "heteroscedastic"), data=_sine_data,
        seeded=True, seed_moves_predictions=True,
        float32=lambda: dict(max_iter=100), extra=_pathwise_extra, objective=_lml,
        stopping_slack=_plateau_slack),
    "PathwiseGPClassifier": Case(
        make=_gpc, data=_blob_data, seeded=True,
        # the restarts start elsewhere (objective_history_) but reach the same optima
        seed_moves_predictions=False,
        float32=dict, extra=_gpc_extra, objective=_lml, stopping_slack=_lbfgsb_slack),
    "PathwiseGPClassifier-sparse": Case(
        make=_gpc_sparse, data=_blob_data, seeded=True,
        # the seed picks the k-means++ inducing inputs, which moves the fitted model
        seed_moves_predictions=True,
        float32=lambda: dict(max_iter=100), extra=_gpc_extra, objective=_lml,
        stopping_slack=_plateau_slack),
    "DeepKernelProcessRegressor": Case(
        make=lambda **params: DeepKernelProcessRegressor(**{**DKP_FAST, **params}),
        data=_dkp_data, seeded=False, seed_moves_predictions=False,
        # float32 needs jitter >= 1e-3 (docstring).  Three sweeps, no stopping rule: the
        # objective enters at fixed parameters only
        float32=lambda: dict(jitter=1e-3), objective=_dkp_objective),
    "DeepQEPRegressor": Case(
        make=_qep_regressor, data=_qep_regression_data, seeded=True,
        seed_moves_predictions=True,
        # one layer, no Monte-Carlo noise in training; the jitter fixed to float32's default
        # in both (the defaults differ per dtype).  A fixed number of Adam epochs on a
        # Monte-Carlo bound: no stopping rule and no deterministic objective evaluator, so
        # the fit is judged by its predictions.  (The deep model: tests/qep/test_estimator.py.)
        float32=lambda: dict(hidden_dims=(), jitter=1e-4, q=1.0)),
    "DeepQEPClassifier": Case(
        make=_qep_classifier, data=_blob_data, seeded=True, seed_moves_predictions=True,
        # the deep model (fixed Adam epochs on a Monte-Carlo bound, as the regressor): its
        # float64 training is stable on these blobs (a 1e-7 change of X moves the
        # probabilities by 3e-7; on other draws of the blobs its 40 epochs amplify it 1e4-fold)
        float32=lambda: dict(jitter=1e-4)),
    "KEPSVGPClassifier": Case(
        make=lambda **params: KEPSVGPClassifier(**{**KEP_SMALL, **params}), data=_digit_data,
        seeded=True, seed_moves_predictions=True,
        # fifteen Adam steps (no stopping rule; the loss is a Monte-Carlo estimate); the
        # training draws are made in float64 and cast (as the prediction draws are)
        float32=dict),
    "SmoothDRDRegressor": Case(
        make=lambda **params: SmoothDRDRegressor(**{**DRD_FAST, **params}), data=_bump_data,
        seeded=False, seed_moves_predictions=False,
        # eight outer iterations (no stopping rule; its tol would act on the coefficients).
        # The float64 fit is stable (a 1e-7 change of X and y moves
        # its predictions by 2e-6 of std(y)).  The noise floor fixed to float32's default in
        # both (the defaults differ per dtype): with float64's 1e-6 the noise of this fit
        # sinks to 3e-6 by iteration 7, where float32 loses every digit of the posterior
        float32=lambda: dict(noise_floor=1e-4), extra=_drd_extra),
}
NAMES = list(CASES)

# ----------------------------------------------------------------------------- helpers
_FITTED = {}


def _fitted(name, float32_reference=False):
    """The case's float64 fit (or the float64 twin of its float32 comparison), made once per
    session.  Tests only read it: the pickle test checks that predicting does not write."""
    case = CASES[name]
    params = case.float32() if float32_reference else {}
    key = (name, bool(params))
    if key not in _FITTED:
        X, y, _ = case.data()
        _FITTED[key] = case.make(**params).fit(X, y)
    return _FITTED[key]


def _outputs(case, est, Xq):
    """Everything the public prediction methods return at Xq, by name."""
    supported = inspect.signature(est.predict).parameters
    out = {"predict": est.predict(Xq)}
    if "return_std" in supported:
        out["predict_std"] = est.predict(Xq, return_std=True)[1]
    if "return_cov" in supported:
        out["predict_cov"] = est.predict(Xq, return_cov=True)[1]
    for method in ("predict_proba", "predict_log_proba", "predict_proba_samples"):
        if hasattr(est, method):
            out[method] = getattr(est, method)(Xq)
    out["sample_y"] = est.sample_y(Xq, 3, random_state=2)
    out["sample_y_fitted_seed"] = est.sample_y(Xq, 3, random_state=None)
    if case.extra is not None:
        out.update(case.extra(est, Xq))
    return out


def _assert_outputs_equal(got, expected):
    assert list(got) == list(expected)
    for key in expected:
        np.testing.assert_array_equal(got[key], expected[key], err_msg=key)


def _comparable(value, deep=False, depth=0):
    """A (fitted) attribute as plain data, or None where it has no comparable content (skorch's
    history and net hold timings and the estimator's module, compared on its own).  ``deep``
    also opens skgpx's own objects (caches, solver states) and generators."""
    if isinstance(value, torch.nn.Module):
        return {k: v.detach().cpu().numpy() for k, v in value.state_dict().items()}
    if isinstance(value, Kernel):
        return {"repr": repr(value), "theta": value.theta}
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy()
    if isinstance(value, (np.ndarray, np.generic, int, float, str, bool, type(None))):
        return value
    if type(value).__module__.split(".")[0] == "skorch":
        return None
    if isinstance(value, (list, tuple)):
        return [_comparable(v, deep, depth + 1) for v in value]
    if isinstance(value, dict):
        return {k: _comparable(v, deep, depth + 1) for k, v in value.items()}
    if deep and isinstance(value, torch.Generator):
        return value.get_state().numpy()
    if (deep and depth < 4 and hasattr(value, "__dict__")
            and type(value).__module__.split(".")[0] == "skgpx"):
        return _comparable(vars(value), deep, depth + 1)
    return None


def _fitted_state(est):
    """Every public fitted attribute (a name ending in "_"), properties included."""
    state = {}
    for name in dir(est):
        if name.startswith("_") or not name.endswith("_"):
            continue
        value = _comparable(getattr(est, name))
        if value is not None:
            state[name] = value
    return state


def _same(a, b):
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(map(_same, a, b))
    return np.array_equal(np.asarray(a), np.asarray(b), equal_nan=np.asarray(a).dtype.kind == "f")


def _assert_same_fit(first, second):
    a, b = _fitted_state(first), _fitted_state(second)
    assert a.keys() == b.keys()
    differ = [name for name in a if not _same(a[name], b[name])]
    assert not differ, f"fitted attributes differ: {differ}"


def _global_rng_states():
    return random.getstate(), np.random.get_state(), torch.get_rng_state()


def _assert_same_global_rng(before, after):
    assert after[0] == before[0], "python's random state changed"
    np_before, np_after = before[1], after[1]
    assert np_after[0] == np_before[0] and np_after[2:] == np_before[2:], "numpy's changed"
    np.testing.assert_array_equal(np_after[1], np_before[1], err_msg="numpy's state changed")
    assert torch.equal(after[2], before[2]), "torch's default generator state changed"


def _assert_differ(a, b):
    """Not close (numpy's default tolerances), and apart by more than 1e-6 somewhere."""
    assert not np.allclose(a, b) and np.abs(a - b).max() > 1e-6


def _main_output(est, Xq):
    return est.predict_proba(Xq) if is_classifier(est) else est.predict(Xq)


def test_every_public_estimator_has_a_case():
    public = {name for name in skgpx.__all__ if isinstance(getattr(skgpx, name), type)
              and issubclass(getattr(skgpx, name), BaseEstimator)}
    # a case is named after its class, "Class-variant" for a second mode of one class
    assert {name.split("-")[0] for name in CASES} == public
    for name, case in CASES.items():
        assert type(case.make()).__name__ == name.split("-")[0]


# ----------------------------------------------------------------------------- 1. pickling
@pytest.mark.parametrize("name", NAMES)
def test_pickle_round_trip(name):
    case = CASES[name]
    est = _fitted(name)
    Xq = case.data()[2]
    snapshot = _comparable(vars(est), deep=True)
    expected = _outputs(case, est, Xq)
    # predicting writes nothing to the estimator (no lazy caches, no advancing generator)
    assert _same(_comparable(vars(est), deep=True), snapshot)
    loaded = pickle.loads(pickle.dumps(est))
    assert loaded.device_ == est.device_ and loaded.dtype_ == est.dtype_
    _assert_same_fit(loaded, est)
    _assert_outputs_equal(_outputs(case, loaded, Xq), expected)
    _assert_outputs_equal(_outputs(case, copy.deepcopy(est), Xq), expected)
    unfitted = clone(est)
    assert not [key for key in vars(unfitted) if key.endswith("_") and not key.startswith("_")]


# ----------------------------------------------------------------------------- 2. seeds
@pytest.mark.parametrize("name", NAMES)
def test_seeds(name):
    case = CASES[name]
    X, y, Xq = case.data()
    first = _fitted(name)
    second = case.make().fit(X, y)
    # same configuration (and random_state): bitwise the same fit, predictions and draws
    _assert_same_fit(second, first)
    expected = _outputs(case, first, Xq)
    _assert_outputs_equal(_outputs(case, second, Xq), expected)
    _assert_outputs_equal(_outputs(case, first, Xq), expected)  # repeated calls agree
    # (refitting a fitted estimator starts afresh: test_inputs_are_not_modified)
    # sample_y's own random_state: the same value gives the same draws, another other draws
    draws = first.sample_y(Xq, 3, random_state=3)
    np.testing.assert_array_equal(first.sample_y(Xq, 3, random_state=3), draws)
    _assert_differ(first.sample_y(Xq, 3, random_state=4), draws)
    if not case.seeded:
        # a deterministic fit has no prediction seed: None means 0, never fresh entropy
        np.testing.assert_array_equal(first.sample_y(Xq, 3, random_state=None),
                                      first.sample_y(Xq, 3, random_state=0))
        return
    other = case.make(random_state=1).fit(X, y)
    assert not _same(other.objective_history_, first.objective_history_)
    # None in sample_y is the seed the fit drew: another random_state moves every draw
    assert np.all(other.sample_y(Xq, 3, random_state=None)
                  != first.sample_y(Xq, 3, random_state=None))
    if case.seed_moves_predictions:
        # initialisation and training noise (and the Monte-Carlo predictions) differ
        _assert_differ(_main_output(other, Xq), _main_output(first, Xq))
        _assert_differ(other.sample_y(Xq, 3, random_state=2),
                       first.sample_y(Xq, 3, random_state=2))


# ----------------------------------------------------------------------------- 3. global RNGs
@pytest.mark.parametrize("name", NAMES)
def test_global_rngs_are_untouched(name):
    case = CASES[name]
    X, y, Xq = case.data()
    before = _global_rng_states()
    est = case.make()
    if case.predicts_before_fit:
        est.predict(Xq, return_std=True)
        est.sample_y(Xq, 2, random_state=0)
    est.fit(X, y)
    _outputs(case, est, Xq)
    _assert_same_global_rng(before, _global_rng_states())


# ----------------------------------------------------------------------------- 4. verbose=0
@pytest.mark.parametrize("name", NAMES)
def test_verbose_zero_is_silent(name, capfd):
    case = CASES[name]
    X, y, Xq = case.data()
    capfd.readouterr()
    est = case.make(verbose=0).fit(X, y)
    _outputs(case, est, Xq)
    out, err = capfd.readouterr()
    assert out == "" and err == ""


# ----------------------------------------------------------------------------- 5. float32
# float32 against float64, at the float64 fit's parameters and for a float32 fit: the
# contract's own module, tests/test_float32.py (its machinery runs on these CASES).


# ----------------------------------------------------------------------------- 6. inputs
@pytest.mark.parametrize("name", NAMES)
def test_inputs_are_not_modified(name):
    case = CASES[name]
    X, y, Xq = case.data()
    arrays = {"X": X, "y": y, "X_query": Xq,
              **{p: case.make().get_params()[p].copy() for p in case.array_params}}
    kept = {key: (a.copy(), a.dtype, a.flags.writeable) for key, a in arrays.items()}
    est = case.make(**{p: arrays[p] for p in case.array_params})
    params, params_hash = est.get_params(deep=False), joblib.hash(est.get_params())
    est.fit(X, y)
    outputs = _outputs(case, est, Xq)
    for key, array in arrays.items():
        copy_, dtype, writeable = kept[key]
        assert array.dtype == dtype and array.flags.writeable == writeable, key
        assert array.tobytes() == copy_.tobytes(), f"{key} was modified"
    # constructor arguments are neither replaced nor modified (a kernel's hyperparameters...)
    assert all(est.get_params(deep=False)[key] is value for key, value in params.items())
    assert joblib.hash(est.get_params()) == params_hash
    # the fit keeps copies, not views: writing to the inputs afterwards changes nothing
    X += 1.0
    y[:] = y[::-1].copy()
    for p in case.array_params:
        arrays[p] *= 2.0
    _assert_outputs_equal(_outputs(case, est, case.data()[2]), outputs)
    # read-only inputs (where an in-place write would raise) give the same fit, and refitting
    # the fitted estimator starts afresh: the same fit as a new estimator's
    X, y, Xq = case.data()
    readonly = {p: case.make().get_params()[p].copy() for p in case.array_params}
    for array in (X, y, Xq, *readonly.values()):
        array.setflags(write=False)
    est.set_params(**readonly).fit(X, y)
    _assert_same_fit(est, _fitted(name))
    _assert_outputs_equal(_outputs(case, est, Xq), outputs)
