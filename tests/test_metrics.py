"""skgpx.metrics against scikit-learn, hand examples and reference loops."""

import numpy as np
import pytest
from sklearn.metrics import brier_score_loss, log_loss, roc_auc_score, roc_curve

from skgpx import metrics


def _random_predictions(n, k, seed):
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(n, k)) * 2.0
    prob = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    # labels that agree with the arg-max most of the time, so both outcomes occur
    y = np.where(rng.uniform(size=n) < 0.7, prob.argmax(axis=1), rng.integers(0, k, size=n))
    return y, prob


@pytest.mark.parametrize("k", [2, 4])
def test_nll_and_brier_match_sklearn(k):
    y, prob = _random_predictions(200, k, seed=k)
    assert metrics.negative_log_likelihood(y, prob) == pytest.approx(
        log_loss(y, prob, labels=np.arange(k)), rel=1e-12)
    if k == 2:
        expected = brier_score_loss(y, prob[:, 1], scale_by_half=False)
    else:
        expected = brier_score_loss(y, prob, labels=np.arange(k), scale_by_half=False)
    assert metrics.brier_score(y, prob) == pytest.approx(expected, rel=1e-12)


def test_misclassification_auroc_and_fpr95_match_roc_of_correctness():
    y, prob = _random_predictions(300, 3, seed=0)
    correct = (prob.argmax(axis=1) == y).astype(float)
    confidence = prob.max(axis=1)
    assert metrics.misclassification_auroc(y, prob) == pytest.approx(
        roc_auc_score(correct, confidence), rel=1e-12)
    fpr, tpr, _ = roc_curve(correct, confidence)
    assert metrics.fpr_at_95_tpr(y, prob) == fpr[np.argmin(np.abs(tpr - 0.95))]


def test_fpr95_hand_case():
    # 20 correct rows with confidences 0.99..0.80 (step 0.01) and 2 wrong ones at 0.985 and
    # 0.5: accepting the 19 most confident correct rows (TPR 0.95) also accepts the wrong
    # row at 0.985, one of the two wrong rows -> FPR 0.5
    conf_correct = 0.99 - 0.01 * np.arange(20)
    conf = np.concatenate([conf_correct, [0.985, 0.5]])
    prob = np.stack([conf, 1 - conf], axis=1)
    y = np.array([0] * 20 + [1, 1])
    assert metrics.fpr_at_95_tpr(y, prob) == pytest.approx(0.5)


def test_ece_hand_example():
    # confidences [0.95, 0.95, 0.55, 0.55], correct [1, 0, 1, 1]:
    # bin (14/15, 1]: |0.5 - 0.95| = 0.45; bin (8/15, 9/15]: |1 - 0.55| = 0.45; both weight 1/2
    prob = np.array([[0.95, 0.05], [0.95, 0.05], [0.55, 0.45], [0.55, 0.45]])
    y = np.array([0, 1, 0, 0])
    assert metrics.expected_calibration_error(y, prob) == pytest.approx(0.45, abs=1e-12)


def test_ece_bins_are_right_closed():
    # a confidence of exactly 0.6 = 9/15 falls in (8/15, 9/15] with 0.55, not with 0.61
    prob = np.array([[0.6, 0.4], [0.55, 0.45], [0.61, 0.39]])
    y = np.array([0, 1, 0])
    # bins: {0.6, 0.55}: |1/2 - 0.575| = 0.075 (weight 2/3); {0.61}: |1 - 0.61| (weight 1/3)
    expected = 2 / 3 * 0.075 + 1 / 3 * 0.39
    assert metrics.expected_calibration_error(y, prob) == pytest.approx(expected, abs=1e-12)


def test_reliability_curve_hand_example():
    prob = np.array([[0.95, 0.05], [0.95, 0.05], [0.55, 0.45], [0.55, 0.45], [0.6, 0.4]])
    y = np.array([0, 1, 0, 0, 1])
    accuracy, confidence, counts = metrics.reliability_curve(y, prob, n_bins=15)
    assert counts.sum() == 5 and counts[14] == 2 and counts[8] == 3
    assert accuracy[14] == 0.5 and accuracy[8] == pytest.approx(2 / 3)
    assert confidence[8] == pytest.approx((0.55 + 0.55 + 0.6) / 3)
    assert np.isnan(accuracy[0]) and np.isnan(confidence[0])


def _reference_aurc(confidence, correct):
    order = np.argsort(-confidence)
    errors = np.cumsum(1 - correct[order])
    return np.mean(errors / np.arange(1, len(order) + 1))


def test_aurc_matches_reference_loop_with_distinct_confidences():
    y, prob = _random_predictions(250, 5, seed=1)
    confidence = prob.max(axis=1)
    assert len(np.unique(confidence)) == len(confidence)
    correct = (prob.argmax(axis=1) == y).astype(float)
    assert metrics.aurc(y, prob) == pytest.approx(_reference_aurc(confidence, correct), rel=1e-12)


def test_aurc_is_permutation_invariant_with_ties():
    rng = np.random.default_rng(3)
    conf = rng.choice([0.6, 0.7, 0.9], size=60)
    prob = np.stack([conf, 1 - conf], axis=1)
    y = (rng.uniform(size=60) < 0.3).astype(int)
    values = {metrics.aurc(y[p], prob[p]) for p in (rng.permutation(60) for _ in range(5))}
    assert max(values) - min(values) < 1e-12
    # and the order-dependent reference loop does move with the order
    correct = (prob.argmax(axis=1) == y).astype(float)
    refs = [_reference_aurc(conf[p], correct[p]) for p in (rng.permutation(60) for _ in range(5))]
    assert max(refs) - min(refs) > 1e-6


def test_risk_coverage_curve():
    y, prob = _random_predictions(120, 4, seed=5)
    coverage, risk = metrics.risk_coverage_curve(y, prob)
    np.testing.assert_allclose(coverage, np.arange(1, 121) / 120)
    order = np.argsort(-prob.max(axis=1))
    wrong = (prob.argmax(axis=1) != y)[order]
    np.testing.assert_allclose(risk, np.cumsum(wrong) / np.arange(1, 121), rtol=1e-12)
    assert risk.mean() == pytest.approx(metrics.aurc(y, prob), rel=1e-12)
    # ties: at the end of a tied group the risk is the exact error rate, whatever the order
    conf = np.repeat([0.9, 0.7, 0.6], [3, 4, 5])
    prob = np.stack([conf, 1 - conf], axis=1)
    y = np.array([1, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 1])
    _, risk = metrics.risk_coverage_curve(y, prob)
    np.testing.assert_allclose(risk[[2, 6, 11]], [1 / 3, 3 / 7, 4 / 12])
    np.testing.assert_allclose(risk[:3], [1 / 3, 1 / 3, 1 / 3])  # errors spread evenly


def test_aurc_of_a_perfect_ranking_and_e_aurc():
    n, n_wrong = 40, 10
    conf = np.linspace(0.99, 0.6, n)  # the wrong rows are the least confident
    prob = np.stack([conf, 1 - conf], axis=1)
    y = np.array([0] * (n - n_wrong) + [1] * n_wrong)
    i = np.arange(1, n + 1)
    expected = np.sum(np.where(i > n - n_wrong, (i - (n - n_wrong)) / i, 0.0)) / n
    assert metrics.aurc(y, prob) == pytest.approx(expected, rel=1e-12)
    # E-AURC subtracts r + (1 - r) ln(1 - r), the continuous optimum: small but not 0 here
    r = n_wrong / n
    assert metrics.e_aurc(y, prob) == pytest.approx(expected - (r + (1 - r) * np.log(1 - r)))


def test_ood_metrics():
    rng = np.random.default_rng(0)
    c_in, c_out = rng.uniform(0.5, 1.0, 50), rng.uniform(0.3, 0.8, 40)
    labels = np.r_[np.ones(50), np.zeros(40)]
    assert metrics.ood_auroc(c_in, c_out) == pytest.approx(
        roc_auc_score(labels, np.r_[c_in, c_out]))
    assert metrics.ood_auroc(c_in + 10, c_out) == 1.0
    assert metrics.ood_aupr(c_in + 10, c_out) == 1.0


def test_labels_map_columns_and_report_scaling():
    y, prob = _random_predictions(100, 3, seed=4)
    names = np.array(["cat", "dog", "eel"])
    strings = names[y]
    plain = metrics.uncertainty_report(y, prob)
    labelled = metrics.uncertainty_report(strings, prob, labels=names)
    assert plain == pytest.approx(labelled)
    scaled = metrics.uncertainty_report(y, prob, paper_scale=True)
    assert scaled["negative_log_likelihood"] == pytest.approx(10 * plain["negative_log_likelihood"])
    assert scaled["aurc"] == pytest.approx(1e3 * plain["aurc"])
    assert scaled["expected_calibration_error"] == pytest.approx(
        100 * plain["expected_calibration_error"])


def test_bad_input():
    prob = np.array([[0.7, 0.3], [0.2, 0.8]])
    with pytest.raises(ValueError, match="sum to 1"):
        metrics.brier_score([0, 1], [[0.7, 0.4], [0.2, 0.8]])
    with pytest.raises(ValueError, match="columns"):
        metrics.negative_log_likelihood(["a", "b", "c"], np.full((3, 2), 0.5))
    with pytest.raises(ValueError, match="not among"):
        metrics.negative_log_likelihood(["a", "z"], prob, labels=["a", "b"])
    with pytest.raises(ValueError, match="inconsistent numbers of samples"):
        metrics.aurc([0, 1, 1], prob)
    with pytest.raises(ValueError, match="all or none"):
        metrics.misclassification_auroc([0, 1], prob)
    with pytest.raises(ValueError, match="NaN"):
        metrics.aurc([0, 1], [[np.nan, 0.5], [0.5, 0.5]])
    with pytest.raises(ValueError, match="n_bins"):
        metrics.expected_calibration_error([0, 1], prob, n_bins=0)
