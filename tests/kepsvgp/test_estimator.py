"""KEPSVGPClassifier behaviour (degenerate limits and the estimator API)."""

import copy
import pickle

import numpy as np
import pytest
import torch
from sklearn.datasets import load_digits

from skgpx.kepsvgp import KEPSVGPClassifier

from _configs import KEP_SMALL

X_ALL, Y_ALL = load_digits(return_X_y=True)
X, Y = X_ALL[:300], Y_ALL[:300]
X_TEST = X_ALL[300:340]
SMALL = KEP_SMALL
# Seeds, pickling, the untouched global RNGs and inputs, silence at verbose=0 and float32 fits
# are tested for every estimator in tests/test_common.py and tests/test_float32.py.


@pytest.fixture(scope="module")
def fitted():
    return KEPSVGPClassifier(**SMALL).fit(X, Y)


def test_probabilities_are_row_invariant_and_sum_to_one(fitted):
    proba = fitted.predict_proba(X_TEST)
    assert proba.shape == (40, 10)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, atol=1e-12)
    assert proba.min() >= 0.0 and proba.max() <= 1.0
    np.testing.assert_allclose(fitted.predict_proba(X_TEST[:7]), proba[:7], rtol=1e-12)
    order = np.random.default_rng(0).permutation(40)
    np.testing.assert_allclose(fitted.predict_proba(X_TEST[order]), proba[order], rtol=1e-12)
    np.testing.assert_array_equal(fitted.predict(X_TEST), fitted.classes_[proba.argmax(1)])


def test_samples_average_to_predict_proba_and_differ(fitted):
    samples = fitted.predict_proba_samples(X_TEST)
    assert samples.shape == (40, 10, fitted.n_mc_samples)
    np.testing.assert_allclose(samples.mean(-1), fitted.predict_proba(X_TEST), rtol=1e-12)
    assert np.abs(samples[..., 0] - samples[..., 1]).max() > 1e-6  # the draws are posterior draws
    draws = fitted.sample_y(X_TEST, n_samples=3)
    assert draws.shape == (40, 10, 3)
    np.testing.assert_array_equal(draws, fitted.sample_y(X_TEST, n_samples=3))
    assert not np.array_equal(draws, fitted.sample_y(X_TEST, n_samples=3, random_state=1))


def test_softmax_baseline_has_identical_draws():
    clf = KEPSVGPClassifier(**{**SMALL, "kep_layers": 0}).fit(X, Y)
    samples = clf.predict_proba_samples(X_TEST)
    for t in range(1, samples.shape[-1]):
        np.testing.assert_array_equal(samples[..., t], samples[..., 0])


def test_string_labels_and_tokenizers():
    labels = np.array(["zero", "one", "two"])[Y % 3]
    for extra in (dict(tokenizer="features", max_iter=2),
                  dict(tokenizer="sequence", token_dim=8, pooling="cls", max_iter=2),
                  dict(merge="concat", concat_rank=2, projection="static", whiten=False)):
        clf = KEPSVGPClassifier(**{**SMALL, **extra}).fit(X, labels)
        assert set(clf.predict(X_TEST)) <= set(labels)
        assert clf.n_tokens_ == {"features": 64, "sequence": 9}.get(extra.get("tokenizer"), 4)


@pytest.mark.parametrize("params,message", [
    (dict(d_model=30, n_heads=4), "divisible"),
    (dict(kep_layers=3, depth=2), "kep_layers"),
    (dict(tokenizer="patches", patch_size=3), "patch_size"),
    (dict(tokenizer="sequence", token_dim=5), "multiple"),
    (dict(tokenizer="patches", image_shape=(4, 4)), "features"),
])
def test_bad_architectures_raise_before_training(params, message):
    with pytest.raises(ValueError, match=message):
        KEPSVGPClassifier(**params).fit(X[:20], Y[:20])


def test_one_class_and_one_sample():
    with pytest.raises(ValueError, match="class"):
        KEPSVGPClassifier().fit(X[:10], np.zeros(10))
    with pytest.raises(ValueError, match="1 sample"):
        KEPSVGPClassifier().fit(X[:1], Y[:1])


def test_logit_aggregation_is_the_softmax_of_the_mean_logits(fitted):
    """``mc_aggregation="logits"``: softmax of the draws' mean logits. ``log p_t`` equals the
    logits of draw t up to a per-row constant, which the softmax removes."""
    clf = copy.deepcopy(fitted).set_params(mc_aggregation="logits")
    log_samples = np.log(fitted.predict_proba_samples(X_TEST))
    mean_log = log_samples.mean(-1)
    expected = np.exp(mean_log - mean_log.max(1, keepdims=True))
    expected /= expected.sum(1, keepdims=True)
    proba = clf.predict_proba(X_TEST)
    np.testing.assert_allclose(proba, expected, rtol=1e-9, atol=1e-12)
    assert np.abs(proba - fitted.predict_proba(X_TEST)).max() > 1e-6  # not the "probs" rule


def test_float32_evaluation_of_the_float64_network(fitted):
    """The prediction path alone: the float64 fit's network evaluated in float32 with the same
    draws.  (A float32 fit against a float64 fit: tests/test_float32.py.)"""
    single = copy.deepcopy(fitted)
    single.module_.float()
    single.dtype_ = "float32"
    np.testing.assert_allclose(single.predict_proba(X_TEST), fitted.predict_proba(X_TEST),
                               atol=1e-4)


def test_non_finite_loss_stops_training_with_advice(fitted):
    nan = torch.full((2, 10), float("nan"), dtype=torch.float64)
    zero = torch.zeros((), dtype=torch.float64)
    with pytest.raises(RuntimeError, match="non-finite.*smaller lr"):
        fitted.net_.get_loss((nan, zero, zero), torch.tensor([0, 1]))


@pytest.mark.gpu
def test_cuda_fits_agree_with_cpu():
    """Without KEP layers (and dropout) training has no noise, so CPU and CUDA fits agree to
    round-off; a KEP fit on CUDA predicts with CPU-generated draws, so its network gives the
    same probabilities when moved to the CPU, and it pickles with identical predictions."""
    base = {**SMALL, "kep_layers": 0}
    cpu = KEPSVGPClassifier(**base).fit(X, Y)
    gpu = KEPSVGPClassifier(**base, device="cuda").fit(X, Y)
    np.testing.assert_allclose(gpu.predict_proba(X_TEST), cpu.predict_proba(X_TEST),
                               rtol=1e-6, atol=1e-9)
    kep = KEPSVGPClassifier(**SMALL, device="cuda").fit(X, Y)
    assert kep.device_.startswith("cuda")
    proba = kep.predict_proba(X_TEST)
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(kep)).predict_proba(X_TEST), proba)
    moved = copy.deepcopy(kep)
    moved.module_.to("cpu")
    moved.device_ = "cpu"
    np.testing.assert_allclose(moved.predict_proba(X_TEST), proba, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("n_rows,batch_size,max_iter", [(20, 20, 1), (20, 10, 1), (200, 20, 2)])
def test_short_runs_train(n_rows, batch_size, max_iter):
    """One to 20 optimiser steps: the one-cycle schedule needs a warm-up of at least one step
    (5% of 20 steps is exactly one, which once divided by zero), and one step has no cycle."""
    clf = KEPSVGPClassifier(**{**SMALL, "batch_size": batch_size, "max_iter": max_iter})
    clf.fit(X[:n_rows], Y[:n_rows])
    assert clf.n_iter_ == max_iter and np.all(np.isfinite(clf.objective_history_))
