"""The float32 contract of every public estimator (the CASES of ``tests/test_common.py``):
float32 against float64 at the float64 fit's parameters, and a float32 fit judged by what a
user sees.  ``python tests/run_float32_matrix.py`` runs it under each CPU kernel selection.
"""

import functools

import numpy as np
import pytest
import torch
from sklearn.base import is_classifier
from sklearn.exceptions import ConvergenceWarning

import _float32
from test_common import CASES, NAMES, _comparable, _fitted, _outputs, _same

# float32 against float64 in two parts, neither of which asks float32 to retrace the float64
# optimiser's path.  An iterative fit takes decisions (a line search's acceptance, a stopping
# test, a sweep's step) that a last-bit difference can flip, and where float32 goes after a
# flip depends on the CPU's kernels, not on float32's rounding: no tolerance on a float32 fit
# against the float64 fit can be both tight and valid on every CPU.
#
# (a) The numerics at fixed parameters.  The float64 fit, cast to float32 (``recast`` in
# tests/_float32.py: every tensor in the dtype a float32 fit keeps it in), predicts, draws and
# evaluates its objective in float32.  Nothing iterates towards a decision there, so its
# error is a smooth function of the roundings, and Monte Carlo arithmetic samples it: the
# float64 outputs are recomputed from the cast's state rounded at random (``rounded_like``),
# every computed result perturbed by AMPLIFY times float32's unit round-off, and float32 must
# stay within MARGIN times the largest deviation of N_EMULATED such runs.
# AMPLIFY: the emulation perturbs whole results, not each multiply-add inside a product or a
# factorisation, so it under-states the rounding of a length-n reduction by up to sqrt(n)
# (about 6 to 17 for these 30 to 300 rows); 8 covers it.  MARGIN: float32's error is then
# one more draw from (roughly) the runs' distribution, which exceeds the largest of three with
# probability 1/4 at equal amplitude; 4 makes that rare.  Floor: the outputs' own rounding.
#
# (b) A float32 fit, judged by what a user sees.  Where the family has an objective evaluator
# and the fit stops by a rule, the objective evaluated in float64 at the float32 fit's state
# (``recast`` back into a float64 fit's layout) falls short of the float64 fit's by at most
#     OBJECTIVE_SLACK * (what the stopping rule accepts as no progress) + 2 * E,
# E the float32 objective's rounding bound of (a).  A rule that stops once an iteration (or
# a window of them) gains at most s leaves a gain of s r / (1 - r) to come if the gains
# shrink by r per step: OBJECTIVE_SLACK = 10 allows r up to 0.9.  The float32 optimiser
# compares float32 values, each off by up to E: it may stop 2 E short.  A float32 fit that
# ends higher is as good.  Predictions: the mean within MEAN_FRACTION of float64's predictive
# sd, the sd within SD_FRACTION of itself, probabilities within PROBA_ATOL: the standard
# errors of a mean, an sd and a probability (at 1/2) estimated from N_USER_DRAWS draws, so
# below what a user's Monte Carlo summary of the posterior resolves.
AMPLIFY = 8.0
MARGIN = 4.0
N_EMULATED = 3
OBJECTIVE_SLACK = 10.0
N_USER_DRAWS = 400
MEAN_FRACTION = 1.0 / np.sqrt(N_USER_DRAWS)
SD_FRACTION = 1.0 / np.sqrt(2.0 * (N_USER_DRAWS - 1))
PROBA_ATOL = 0.5 / np.sqrt(N_USER_DRAWS)
_OBJECTIVES = ("log_marginal_likelihood", "objective")
_FITTED32, _FIXED_TOLERANCES = {}, {}


def _fitted32(name):
    """The case's float32 fit (its float32 configuration), made once per session."""
    if name not in _FITTED32:
        case = CASES[name]
        X, y, _ = case.data()
        _FITTED32[name] = case.make(**case.float32(), dtype="float32").fit(X, y)
    return _FITTED32[name]


def _fixed_outputs(case, est, Xq):
    """``_outputs`` and, where the family has an evaluator, the objective at the state."""
    out = _outputs(case, est, Xq)
    if case.objective is not None and not any(key in out for key in _OBJECTIVES):
        out["objective"] = np.atleast_1d(case.objective(est))
    return out


def _unit(key, scale):
    if key in _OBJECTIVES:
        return 1.0
    return scale**2 if key.endswith("_cov") else scale


def _scale(name):
    X, y, _ = CASES[name].data()
    return 1.0 if is_classifier(CASES[name].make()) else float(np.std(y))


def _fixed_errors(expected, got, scale):
    """Largest deviation of each float output from float64's, in units of the output scale
    (std(y) for a regressor, std(y)^2 for a covariance, 1 for probabilities and objectives)."""
    errors = {}
    for key, value in expected.items():
        # class labels may flip at near-ties; log-probabilities are compared as probabilities
        if value.dtype.kind != "f" or key == "predict_log_proba":
            continue
        assert got[key].dtype == np.float64, key  # outputs are float64 in either mode
        errors[key] = np.abs(got[key] - value).max() / _unit(key, scale)
    return errors


def _fixed_state_tolerances(name):
    """(a)'s bounds: MARGIN times the largest deviation of N_EMULATED emulated-float32 runs
    of the float64 outputs at the float64 fit's state, made once per session."""
    if name not in _FIXED_TOLERANCES:
        case, Xq, scale = CASES[name], CASES[name].data()[2], _scale(name)
        reference = _fitted(name, float32_reference=True)
        expected = _fixed_outputs(case, reference, Xq)
        spread = []
        for seed in range(N_EMULATED):
            state = _float32.recast(reference, _fitted32(name),
                                    _float32.rounded_like(seed, AMPLIFY), rename=False)
            out = _float32.emulated(lambda: _fixed_outputs(case, state, Xq), seed, AMPLIFY)
            spread.append(_fixed_errors(expected, out, scale))
        _FIXED_TOLERANCES[name] = {
            key: max(MARGIN * max(s[key] for s in spread),
                     MARGIN * _float32.UNIT_ROUNDOFF * np.abs(expected[key]).max()
                     / _unit(key, scale)) for key in spread[0]}
    return _FIXED_TOLERANCES[name]


def _judged(errors, tolerances):
    """The failures ("output: error > tolerance") and the output nearest its tolerance."""
    ratios = {key: error / tolerances[key] if error else 0.0 for key, error in errors.items()}
    failures = [f"{key}: {errors[key]:.2g} > {tolerances[key]:.2g}"
                for key, ratio in ratios.items() if not ratio <= 1.0]
    return failures, max(ratios.items(), key=lambda item: item[1])


def _fixed_state_failures(name, est):
    """What the float32 estimator ``est``, holding the float64 fit's state, gets wrong."""
    case, Xq = CASES[name], CASES[name].data()[2]
    expected = _fixed_outputs(case, _fitted(name, float32_reference=True), Xq)
    errors = _fixed_errors(expected, _fixed_outputs(case, est, Xq), _scale(name))
    return _judged(errors, _fixed_state_tolerances(name))


def _fit_failures(name, est):
    """What the float32 fit ``est`` does worse, for a user, than the case's float64 fit."""
    case, Xq = CASES[name], CASES[name].data()[2]
    reference = _fitted(name, float32_reference=True)
    errors, tolerances = {}, {}
    if case.stopping_slack is not None:
        value = float(case.objective(reference))
        errors["objective shortfall"] = max(
            value - float(case.objective(_float32.recast(est, reference))), 0.0)
        rounding = max(v for k, v in _fixed_state_tolerances(name).items() if k in _OBJECTIVES)
        tolerances["objective shortfall"] = (
            OBJECTIVE_SLACK * case.stopping_slack(reference, value) + 2.0 * rounding)
    if is_classifier(est):
        errors["predict_proba"] = np.abs(est.predict_proba(Xq)
                                         - reference.predict_proba(Xq)).max()
        tolerances["predict_proba"] = PROBA_ATOL
    else:
        mean, sd = reference.predict(Xq, return_std=True)
        mean32, sd32 = est.predict(Xq, return_std=True)
        errors["predict / sd"] = np.max(np.abs(mean32 - mean) / sd)
        errors["predict_std / sd"] = np.max(np.abs(sd32 - sd) / sd)
        tolerances.update({"predict / sd": MEAN_FRACTION, "predict_std / sd": SD_FRACTION})
    return _judged(errors, tolerances)


@pytest.mark.parametrize("name", NAMES)
def test_float32_numerics_at_fixed_parameters(name, record_property):
    case = CASES[name]
    reference, fit32 = _fitted(name, float32_reference=True), _fitted32(name)
    snapshot = _comparable(vars(reference), deep=True)
    cast = _float32.recast(reference, fit32)
    # the cast is a float32 fit's state: each tensor in the dtype and shape a fit keeps it
    assert _float32.layout(cast) == _float32.layout(fit32)
    assert cast.dtype_ == "float32" and cast.dtype == "float32"
    assert _same(_comparable(vars(reference), deep=True), snapshot)  # the source untouched
    failures, (key, ratio) = _fixed_state_failures(name, cast)
    # tests/run_float32_matrix.py reads it from the JUnit report: the margin on this CPU
    record_property("float32_worst", f"{key} {ratio:.2f}")
    assert not failures, "; ".join(failures)
    if is_classifier(cast):
        np.testing.assert_allclose(cast.predict_proba(case.data()[2]).sum(axis=1), 1.0,
                                   rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", NAMES)
def test_float32_fit_serves_the_float64_outcome(name, record_property):
    est = _fitted32(name)
    assert est.dtype_ == "float32" and _fitted(name, True).dtype_ == "float64"
    if hasattr(est, "module_"):
        assert all(p.dtype == torch.float32 for p in est.module_.parameters())
    failures, (key, ratio) = _fit_failures(name, est)
    record_property("float32_worst", f"{key} {ratio:.2f}")
    assert not failures, "; ".join(failures)


def _scaled_predict(est, factor):
    """``est`` whose ``predict`` (and only it) is off by ``factor``."""
    predict = est.predict

    @functools.wraps(predict)
    def wrong(*args, **kwargs):
        out = predict(*args, **kwargs)
        return (out[0] * factor, *out[1:]) if isinstance(out, tuple) else out * factor

    est.predict = wrong
    return est


def _half_precision_queries(est):
    """``est`` whose ``predict`` rounds its query rows to half precision on the way in."""
    predict = est.predict

    @functools.wraps(predict)
    def rounded(X, *args, **kwargs):
        return predict(np.asarray(X).astype(np.float16).astype(np.float32), *args, **kwargs)

    est.predict = rounded
    return est


def test_float32_comparison_catches_lost_digits():
    """Both parts still see what a float32 bug does.  (a): query rows or the whole state
    (training inputs included) rounded to half precision (``float16`` where ``float32`` was
    meant: 5e-4 relative), or a prediction 1e-3 too large.  (b): a float32 fit stopped after
    two L-BFGS-B iterations, short of the optimum."""
    name = "PathwiseGPSampler"
    case = CASES[name]
    reference, fit32 = _fitted(name, float32_reference=True), _fitted32(name)
    assert not _fixed_state_failures(name, _float32.recast(reference, fit32))[0]
    queries = _half_precision_queries(_float32.recast(reference, fit32))
    failures = _fixed_state_failures(name, queries)[0]
    # what goes through predict, and only that (the draws take their rows elsewhere)
    assert [f.split(":")[0] for f in failures] == ["predict", "predict_std", "predict_cov"], (
        failures)
    halved = _float32.recast(reference, fit32, lambda t, dtype: t.to(torch.float16).to(dtype))
    failures = _fixed_state_failures(name, halved)[0]
    assert any(f.startswith("predict:") for f in failures), failures
    scaled = _scaled_predict(_float32.recast(reference, fit32), 1.0 + 1e-3)
    failures = _fixed_state_failures(name, scaled)[0]
    assert [f.split(":")[0] for f in failures] == ["predict"], failures
    X, y, _ = case.data()
    with pytest.warns(ConvergenceWarning):
        short = case.make(**case.float32(), max_iter=2, dtype="float32").fit(X, y)
    failures = _fit_failures(name, short)[0]
    assert any(f.startswith("objective shortfall:") for f in failures), failures
