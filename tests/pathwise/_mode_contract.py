"""The contract every mode of the pathwise family keeps (``skgpx.pathwise._interface``).

Each mode's tests subclass :class:`ModeContract` and set three attributes: ``mode_class``,
``estimator`` (a function returning the unfitted estimator that fits this mode) and
``data`` (a function returning training rows, targets and query rows); ``variants`` adds
other estimators fitted by the same mode to the pickling test (CG, structured inputs, Dask
rows).  The tests hold the mode to the interface: a concrete dataclass of its estimator's
kind of mode, picked by the estimator's parameters, fitted by ``plan`` and ``fit`` on a
:class:`FitContext` and :class:`Training` alone to the state the estimator's face reports,
its objective at the fitted ``theta`` equal to the fitted value, and a GPU fit of it that
loads on the CPU with equal outputs.
"""

import dataclasses
import inspect
import pickle
import warnings

import numpy as np
import torch
from sklearn.base import clone

from skgpx.pathwise._interface import ClassificationMode, RegressionMode, Training

from _fake_cuda import cuda_tagged_pickle


def _outputs(est, Xq):
    """What a user reads off a fitted estimator at the query rows."""
    if hasattr(est, "predict_proba"):
        outputs = [est.predict_proba(Xq), est.sample_y(Xq, 3, random_state=1)]
    else:
        outputs = [*est.predict(Xq, return_std=True), est.predict(Xq, return_cov=True)[1],
                   est.sample_y(Xq, 3, random_state=1)]
    if getattr(est, "solver", None) != "cg":  # CG computes no log-determinant
        gradient = est.kernel_.n_dims > 0 and getattr(est, "n_classes_", 2) == 2
        value = est.log_marginal_likelihood(est.kernel_.theta + 0.1, eval_gradient=gradient)
        outputs += list(value) if gradient else [value]
    return outputs


class ModeContract:
    """A test base: subclasses set ``mode_class``, ``estimator`` and ``data``."""

    mode_class = None
    estimator = None  # () -> unfitted estimator that fits ``mode_class``
    data = None  # () -> (X, y, Xq)
    variants = ()  # further () -> (estimator, X, y, Xq) for the pickling test

    def _fitted(self):
        """One fit per class, shared by the tests that only read it."""
        cls = type(self)
        if cls.__dict__.get("_fit") is None:
            X, y, Xq = cls.data()
            cls._fit = (cls.estimator().fit(X, y), X, y, Xq)
        return cls._fit

    def test_is_a_concrete_dataclass_of_the_interface(self):
        # a dataclass, so that pickling moves its tensors field by field
        assert dataclasses.is_dataclass(self.mode_class)
        assert issubclass(self.mode_class, (RegressionMode, ClassificationMode))
        assert not inspect.isabstract(self.mode_class)

    def test_plan_and_fit_on_a_context_alone_give_the_fitted_state(self):
        est, X, y, Xq = self._fitted()
        assert type(est._mode) is self.mode_class  # the estimator's parameters pick it
        unfitted = clone(est)
        kernel = clone(unfitted.kernel)
        device, dtype = "cpu", est._mode.theta.dtype
        classify = issubclass(self.mode_class, ClassificationMode)
        if classify:
            codes = np.searchsorted(est.classes_, y)
            context = unfitted._context(device, dtype)
            data = Training(X, codes, n_classes=len(est.classes_))
            targets = len(est.classes_)
        else:
            assert not est.normalize_y  # the face's normalisation is not the mode's
            context = unfitted._context(device, dtype,
                                        rng=np.random.RandomState(est.random_state),
                                        history=[])
            data = Training(X, y.reshape(len(y), -1), noise=np.full(len(y), est.alpha))
            targets = data.Y.shape[1]
        d = 1 if context.structured else X.shape[1]
        mode = self.mode_class.plan(context, kernel, len(y), d, targets)
        assert type(mode) is self.mode_class and mode.theta is None
        fitted = mode.fit(context, kernel, data)
        assert mode.lml == est.log_marginal_likelihood_value_
        torch.testing.assert_close(mode.theta, est._mode.theta, rtol=0, atol=0)
        Xq_t = context.as_tensor(Xq, device, dtype)
        if classify:
            assert fitted is mode
            np.testing.assert_array_equal(mode.predict_proba(Xq_t), est.predict_proba(Xq))
        else:
            np.testing.assert_array_equal(fitted.theta, est.kernel_.theta)
            assert context.history == est.objective_history_
            mean, _, _ = mode.predict(Xq_t, noise=None, batch_size=est.batch_size)
            np.testing.assert_array_equal(mean[:, 0].numpy(), est.predict(Xq))
        assert mode.attributes().keys() <= vars(est).keys()

    def test_the_objective_at_the_fitted_theta_is_the_fitted_value(self):
        est, *_ = self._fitted()
        value = est.log_marginal_likelihood(est.kernel_.theta)
        # the same objective evaluated again: equal up to the reduction order of its sums
        np.testing.assert_allclose(value, est.log_marginal_likelihood_value_, rtol=1e-10)

    def test_a_gpu_fit_loads_on_the_cpu(self):
        X, y, Xq = type(self).data()
        cases = [(type(self).estimator(), X, y, Xq)] + [variant() for variant in self.variants]
        for est, X, y, Xq in cases:
            est.fit(X, y)
            assert type(est._mode) is self.mode_class
            expected = _outputs(est, Xq)
            blob = cuda_tagged_pickle(est)
            with warnings.catch_warnings(record=True) as records:
                warnings.simplefilter("always")
                loaded = pickle.loads(blob)
            assert [r for r in records if "CUDA is not available" in str(r.message)]
            assert loaded.device_ == "cpu"
            for got, want in zip(_outputs(loaded, Xq), expected):
                np.testing.assert_array_equal(got, want)
