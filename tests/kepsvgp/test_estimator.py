"""KEPSVGPClassifier behaviour (spec kep_svgp.md Sec. 6, oracles 5 and 7)."""

import pickle

import numpy as np
import pytest
import torch
from sklearn.datasets import load_digits

from skgpx.kepsvgp import KEPSVGPClassifier

X_ALL, Y_ALL = load_digits(return_X_y=True)
X, Y = X_ALL[:300], Y_ALL[:300]
X_TEST = X_ALL[300:340]
SMALL = dict(tokenizer="patches", patch_size=4, d_model=16, depth=1, max_iter=5, random_state=0)


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


def test_same_seed_same_fit_pickle_and_global_rng(fitted):
    state = torch.get_rng_state()
    again = KEPSVGPClassifier(**SMALL).fit(X, Y)
    np.testing.assert_array_equal(again.predict_proba(X_TEST), fitted.predict_proba(X_TEST))
    assert torch.equal(state, torch.get_rng_state())
    loaded = pickle.loads(pickle.dumps(fitted))
    np.testing.assert_array_equal(loaded.predict_proba(X_TEST), fitted.predict_proba(X_TEST))
    other = KEPSVGPClassifier(**{**SMALL, "random_state": 1}).fit(X, Y)
    assert not np.allclose(other.predict_proba(X_TEST), fitted.predict_proba(X_TEST))


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
