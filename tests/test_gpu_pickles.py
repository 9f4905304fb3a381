"""A model fitted on a GPU loads on a machine without one.

Every public estimator (the sampler in exact and sparse mode) and the ``PathwiseFunctions`` it
returns, pickled (``pickle`` and ``joblib``) as a GPU fit writes it, load on the CPU with the
package's one warning and predict what they predicted before.  Without a GPU the pickle is
made by ``_fake_cuda.cuda_tagged_pickle``, which tags every storage a GPU fit would leave on
the device as ``'cuda:0'``: what is not moved to the CPU fails to load with torch's own error,
as from a real GPU (``test_the_fake_fails_where_a_gpu_pickle_fails``).  The ``gpu`` test makes
the real one and loads it in a process that sees no CUDA.
"""

import copy
import dataclasses
import os
import pickle
import subprocess
import sys
import warnings

import joblib
import numpy as np
import pytest
import torch

from skgpx import PathwiseFunctions

from _fake_cuda import cuda_tagged_pickle
from test_common import (CASES, _assert_outputs_equal, _fitted, _outputs, _pathwise,
                         _sine_data)

TESTS = os.path.dirname(os.path.abspath(__file__))

# test_common's table, and the sampler in sparse mode (inducing points)
CASES_HERE = {**CASES, "PathwiseGPSampler-sparse": dataclasses.replace(
    CASES["PathwiseGPSampler"], make=lambda **params: _pathwise(n_inducing=12, **params))}
SUBJECTS = [*CASES_HERE, "PathwiseFunctions"]
_FITS = {}


def _fit(name, **params):
    """The case's fit, once per session (test_common's, on the CPU); ``params`` override."""
    if name in CASES and not params:
        return _fitted(name)
    key = (name, tuple(sorted(params.items())))
    if key not in _FITS:
        X, y, _ = CASES_HERE[name].data()
        _FITS[key] = CASES_HERE[name].make(**params).fit(X, y)
    return _FITS[key]


def _fitted_subject(name, **params):
    """The object to pickle: a fitted estimator, or the sample paths of the exact sampler."""
    if name == "PathwiseFunctions":
        return _fit("PathwiseGPSampler", **params).sample_functions(3, random_state=1)
    return _fit(name, **params)


def _outputs_of(name, subject):
    """Everything ``subject`` predicts at the case's query points, by name."""
    if name == "PathwiseFunctions":
        Xq = _sine_data()[2]
        return {"call": subject(Xq),
                "evaluate_batched": subject.evaluate_batched(np.stack([Xq[:4]] * 3))}
    case = CASES_HERE[name]
    return _outputs(case, subject, case.data()[2])


def _load_warned_once(load):
    """``load()``, asserting that it warns exactly once: the package's CPU fallback."""
    with warnings.catch_warnings(record=True) as records:
        warnings.simplefilter("always")
        loaded = load()
    messages = [f"{r.category.__name__}: {r.message}" for r in records]
    assert len(records) == 1, messages
    assert records[0].category is UserWarning
    assert f"{type(loaded).__name__} was fitted on 'cuda" in str(records[0].message)
    assert "CUDA is not available here" in str(records[0].message)
    return loaded


def _assert_on_the_cpu(loaded):
    if isinstance(loaded, PathwiseFunctions):
        assert loaded.device.type == "cpu"
        return
    assert loaded.device_ == "cpu"
    net = getattr(loaded, "net_", None)
    if net is not None:
        assert net.device == "cpu"
        # the net is whole: its optimiser still updates the parameters of its module
        owned = {id(p) for m in (net.module_, net.criterion_) for p in m.parameters()}
        assert all(id(p) in owned for group in net.optimizer_.param_groups
                   for p in group["params"])


@pytest.mark.parametrize("dump", ["pickle", "joblib"])
@pytest.mark.parametrize("name", SUBJECTS)
def test_gpu_pickle_loads_on_the_cpu(name, dump, tmp_path):
    fitted = _fitted_subject(name)
    expected = _outputs_of(name, fitted)
    if dump == "pickle":
        blob = cuda_tagged_pickle(fitted)
        loaded = _load_warned_once(lambda: pickle.loads(blob))
    else:
        path = tmp_path / "model.joblib"
        cuda_tagged_pickle(fitted, dump=lambda obj: joblib.dump(obj, path))
        loaded = _load_warned_once(lambda: joblib.load(path))
    _assert_on_the_cpu(loaded)
    _assert_outputs_equal(_outputs_of(name, loaded), expected)


class _Holder:
    def __init__(self, getstate):
        self.tensor = torch.arange(3.0)
        self.getstate = getstate

    def __getstate__(self):
        return self.getstate(self.__dict__)


def _as_is(state):
    return state


def _copied(state):
    return copy.deepcopy(state)


def _moved(state):
    return {**state, "tensor": state["tensor"].to("cpu")}


def _copied_then_moved(state):
    return {**state, "tensor": copy.deepcopy(state["tensor"]).cpu()}


def _converted(state):
    return {**state, "tensor": state["tensor"].to(torch.float32)}  # a cast stays on the device


@pytest.mark.parametrize("getstate, loads", [
    (_as_is, False), (_copied, False), (_converted, False), (_moved, True),
    (_copied_then_moved, True),
])
def test_the_fake_fails_where_a_gpu_pickle_fails(getstate, loads):
    # what stays on the device (a tensor, a copy, a cast) does not load on the CPU; a move does
    blob = cuda_tagged_pickle(_Holder(getstate))
    if loads:
        assert torch.equal(pickle.loads(blob).tensor, torch.arange(3.0))
    else:
        with pytest.raises(RuntimeError, match="deserialize object on a CUDA device"):
            pickle.loads(blob)


def _as_numpy(state):
    return {**state, "tensor": state["tensor"].numpy()}


def test_the_fake_device_has_no_numpy():
    with pytest.raises(TypeError, match="cuda:0 device type tensor to numpy"):
        cuda_tagged_pickle(_Holder(_as_numpy))


# ----------------------------------------------------------------------------- a real GPU
_LOAD_WITHOUT_CUDA = """
import pickle, sys
from pathlib import Path
import joblib, torch
sys.path.insert(0, {tests!r})
import test_gpu_pickles as t
assert not torch.cuda.is_available()
results = {{}}
for name in t.SUBJECTS:
    for dump, load in (("pickle", lambda p: pickle.loads(Path(p).read_bytes())),
                       ("joblib", joblib.load)):
        loaded = t._load_warned_once(lambda: load(Path({folder!r}) / (name + "." + dump)))
        t._assert_on_the_cpu(loaded)
        results[name, dump] = t._outputs_of(name, loaded)
Path({folder!r}, "results.pkl").write_bytes(pickle.dumps(results))
"""


def _assert_close(got, expected):
    """Float outputs within 1e-10 (float64 on another device), labels equal."""
    assert list(got) == list(expected)
    for key in expected:
        if np.asarray(expected[key]).dtype.kind == "f":
            np.testing.assert_allclose(got[key], expected[key], rtol=0, atol=1e-10, err_msg=key)
        else:
            np.testing.assert_array_equal(got[key], expected[key], err_msg=key)


def _on_cuda(subject):
    if isinstance(subject, PathwiseFunctions):
        return subject.device.type == "cuda"
    net = getattr(subject, "net_", None)
    return subject.device_.startswith("cuda") and (
        net is None or (net.device.startswith("cuda")
                        and all(p.is_cuda for p in net.module_.parameters())))


@pytest.mark.gpu
def test_cuda_fit_round_trip(tmp_path):
    expected = {}
    for name in SUBJECTS:
        fitted = _fitted_subject(name, device="cuda")
        outputs = _outputs_of(name, fitted)
        attributes = dict(vars(fitted))
        blob = pickle.dumps(fitted)
        (tmp_path / f"{name}.pickle").write_bytes(blob)
        joblib.dump(fitted, tmp_path / f"{name}.joblib")
        # pickling leaves the live model as it was: on the GPU, predicting the same
        assert all(value is attributes[key] for key, value in vars(fitted).items())
        assert _on_cuda(fitted)
        _assert_close(_outputs_of(name, fitted), outputs)
        # where CUDA is available, the model loads back on the GPU
        reloaded = pickle.loads(blob)
        assert _on_cuda(reloaded)
        _assert_close(_outputs_of(name, reloaded), outputs)
        expected[name, "pickle"] = expected[name, "joblib"] = outputs
    # and in a process that sees no GPU, on the CPU, with the one warning
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": os.pathsep.join(
        [os.path.dirname(TESTS), os.environ.get("PYTHONPATH", "")])}
    script = _LOAD_WITHOUT_CUDA.format(tests=TESTS, folder=str(tmp_path))
    subprocess.run([sys.executable, "-c", script], env=env, check=True, timeout=600)
    results = pickle.loads((tmp_path / "results.pkl").read_bytes())
    assert results.keys() == expected.keys()
    for key, outputs in expected.items():
        _assert_close(results[key], outputs)
