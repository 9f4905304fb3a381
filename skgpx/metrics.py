"""Calibration and failure-prediction metrics for any classifier's ``predict_proba``.

The definitions follow the code behind the tables of the KEP-SVGP paper (Chen, Tao, Tonin
and Suykens, ICML 2024; the authors' ``utils/metrics.py``).  With probabilities
``p_ik``, the confidence is ``c_i = max_k p_ik``, the prediction ``argmax_k p_ik`` and
the correctness ``z_i = 1[prediction_i = y_i]``.

Every function returns a Python float on the natural scale.  The paper's tables print
ACC, AUROC, FPR95, ECE and Brier in %, AURC x 1e3 and NLL x 10:
:func:`uncertainty_report` with ``paper_scale=True`` applies those factors.
"""

from typing import NamedTuple

import numpy as np
from scipy.special import xlogy
from sklearn.metrics import (
    average_precision_score,
    matthews_corrcoef,
    roc_auc_score,
    roc_curve,
)
from sklearn.utils.validation import check_array, check_consistent_length, column_or_1d

__all__ = [
    "aupr_error",
    "aurc",
    "brier_score",
    "e_aurc",
    "expected_calibration_error",
    "fpr_at_95_tpr",
    "matthews_correlation",
    "misclassification_auroc",
    "negative_log_likelihood",
    "ood_aupr",
    "ood_auroc",
    "reliability_curve",
    "risk_coverage_curve",
    "uncertainty_report",
]

_PAPER_SCALE = {"accuracy": 100.0, "aurc": 1e3, "e_aurc": 1e3, "misclassification_auroc": 100.0,
                "fpr_at_95_tpr": 100.0, "expected_calibration_error": 100.0,
                "negative_log_likelihood": 10.0, "brier_score": 100.0}


def _check(y_true, y_prob, labels=None):
    """Validate inputs; return (class indices (n,), probabilities (n, K))."""
    y_prob = check_array(y_prob, dtype=np.float64, ensure_2d=True, input_name="y_prob")
    y_true = column_or_1d(y_true)
    check_consistent_length(y_true, y_prob)
    n_classes = y_prob.shape[1]
    if n_classes < 2:
        raise ValueError(f"y_prob needs one column per class (at least 2); got {n_classes}.")
    if y_prob.min() < -1e-8 or y_prob.max() > 1 + 1e-8:
        raise ValueError("y_prob must hold probabilities in [0, 1].")
    if not np.allclose(y_prob.sum(axis=1), 1.0, rtol=0, atol=1e-5):
        raise ValueError("Each row of y_prob must sum to 1 (the output of predict_proba).")
    if labels is None:
        is_index = np.issubdtype(y_true.dtype, np.integer) and (
            y_true.min() >= 0 and y_true.max() < n_classes
        )
        labels = np.arange(n_classes) if is_index else np.unique(y_true)
    labels = np.asarray(labels)
    if len(labels) != n_classes:
        raise ValueError(
            f"y_prob has {n_classes} columns but there are {len(labels)} labels; pass labels= "
            "(e.g. the classifier's classes_) to say which label each column belongs to."
        )
    order = np.argsort(labels)
    position = np.searchsorted(labels[order], y_true)
    position = np.clip(position, 0, n_classes - 1)
    if not np.all(labels[order][position] == y_true):
        raise ValueError("y_true holds labels that are not among the labels of y_prob's columns.")
    return order[position], y_prob


class _Checked(NamedTuple):
    """Validated predictions: class index of each row, probabilities, confidence ``c`` and
    correctness ``z`` (float 0/1); every metric is a function of these."""

    index: np.ndarray
    prob: np.ndarray
    confidence: np.ndarray
    correct: np.ndarray


def _checked(y_true, y_prob, labels):
    index, prob = _check(y_true, y_prob, labels)
    correct = (prob.argmax(axis=1) == index).astype(np.float64)
    return _Checked(index, prob, prob.max(axis=1), correct)


def _both_outcomes(correct, what):
    if correct.min() == correct.max():
        raise ValueError(
            f"{what} is undefined when all or none of the predictions are correct."
        )


def _check_bins(n_bins):
    if not isinstance(n_bins, (int, np.integer)) or n_bins < 1:
        raise ValueError(f"n_bins={n_bins!r} must be a positive integer.")


def _reliability(p, n_bins):
    bins = np.clip(np.ceil(p.confidence * n_bins).astype(int) - 1, 0, n_bins - 1)
    counts = np.bincount(bins, minlength=n_bins).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        accuracy = np.bincount(bins, weights=p.correct, minlength=n_bins) / counts
        mean_confidence = np.bincount(bins, weights=p.confidence, minlength=n_bins) / counts
    return accuracy, mean_confidence, counts


def _ece(p, n_bins):
    accuracy, confidence, counts = _reliability(p, n_bins)
    filled = counts > 0
    return float(np.sum(counts[filled] * np.abs(accuracy[filled] - confidence[filled]))
                 / counts.sum())


def _nll(p):
    picked = np.clip(p.prob[np.arange(len(p.index)), p.index], 1e-12, 1.0)
    return float(-np.mean(np.log(picked)))


def _brier(p):
    onehot = np.zeros_like(p.prob)
    onehot[np.arange(len(p.index)), p.index] = 1.0
    return float(np.mean(np.sum((p.prob - onehot) ** 2, axis=1)))


def reliability_curve(y_true, y_prob, *, n_bins=15, labels=None):
    """Per-bin accuracy, mean confidence and count of the top-label predictions: the
    reliability diagram behind :func:`expected_calibration_error`.

    Bins are left-open and right-closed, ``(0, 1/B], ..., ((B-1)/B, 1]``.

    Returns
    -------
    accuracy, confidence : ndarray of shape (n_bins,)
        NaN in empty bins.
    counts : ndarray of shape (n_bins,)
    """
    _check_bins(n_bins)
    return _reliability(_checked(y_true, y_prob, labels), n_bins)


def expected_calibration_error(y_true, y_prob, *, n_bins=15, labels=None):
    """Top-label expected calibration error with ``n_bins`` equal-width bins.

    Bins are left-open and right-closed, ``(0, 1/B], ..., ((B-1)/B, 1]``, and
    ``ECE = sum_b (|B_b| / n) |mean_b(z) - mean_b(c)|`` (see :func:`reliability_curve`).
    """
    _check_bins(n_bins)
    return _ece(_checked(y_true, y_prob, labels), n_bins)


def negative_log_likelihood(y_true, y_prob, *, labels=None):
    """``-(1/n) sum_i log p_{i, y_i}`` with probabilities clipped to ``[1e-12, 1]``
    (scikit-learn's ``log_loss``)."""
    return _nll(_checked(y_true, y_prob, labels))


def brier_score(y_true, y_prob, *, labels=None):
    """``(1/n) sum_i sum_k (p_ik - 1[y_i = k])^2``, in ``[0, 2]`` (for two classes twice
    scikit-learn's default ``brier_score_loss``)."""
    return _brier(_checked(y_true, y_prob, labels))


def _risk_curve(confidence, correct):
    """Selective risk after accepting the ``k`` most confident rows, ``k = 1..n``.

    Within a group of tied confidences the group's errors are spread evenly, so the
    curve does not depend on the input order (with distinct confidences it is the
    usual sorted cumulative error rate)."""
    order = np.argsort(-confidence, kind="stable")
    confidence, errors = confidence[order], 1.0 - correct[order]
    _, start, size = np.unique(-confidence, return_index=True, return_counts=True)
    group = np.repeat(np.arange(len(start)), size)
    group_errors = np.add.reduceat(errors, start)
    before = np.concatenate([[0.0], np.cumsum(group_errors)[:-1]])
    position = np.arange(len(errors)) - start[group] + 1
    cumulative = before[group] + group_errors[group] * position / size[group]
    return cumulative / np.arange(1, len(errors) + 1)


def _aurc_e_aurc(p):
    """AURC and E-AURC from one risk curve."""
    area = float(_risk_curve(p.confidence, p.correct).mean())
    r = 1.0 - p.correct.mean()
    return area, area - float(r + xlogy(1.0 - r, 1.0 - r))


def _misclassification_auroc(p):
    _both_outcomes(p.correct, "misclassification_auroc")
    return float(roc_auc_score(p.correct, p.confidence))


def _fpr_at_95_tpr(p):
    _both_outcomes(p.correct, "fpr_at_95_tpr")
    fpr, tpr, _ = roc_curve(p.correct, p.confidence)
    return float(fpr[np.argmin(np.abs(tpr - 0.95))])


def risk_coverage_curve(y_true, y_prob, *, labels=None):
    """Selective risk against coverage, rows accepted by decreasing confidence; ties are
    accepted together, their errors spread evenly (the curve's mean is :func:`aurc`).

    Returns
    -------
    coverage, risk : ndarray of shape (n_samples,)
        ``coverage[k-1] = k / n`` and ``risk[k-1]`` the error rate among the ``k`` most
        confident rows.
    """
    p = _checked(y_true, y_prob, labels)
    n = len(p.confidence)
    return np.arange(1, n + 1) / n, _risk_curve(p.confidence, p.correct)


def aurc(y_true, y_prob, *, labels=None):
    """Area under the risk-coverage curve: ``(1/n) sum_i risk_i`` with rows accepted in
    order of decreasing confidence (lower is better)."""
    return _aurc_e_aurc(_checked(y_true, y_prob, labels))[0]


def e_aurc(y_true, y_prob, *, labels=None):
    """Excess AURC: ``AURC - (r + (1 - r) ln(1 - r))``, ``r`` the error rate; the AURC of a
    perfect confidence ranking is subtracted (0 when ``r = 0``)."""
    return _aurc_e_aurc(_checked(y_true, y_prob, labels))[1]


def misclassification_auroc(y_true, y_prob, *, labels=None):
    """AUROC of the confidence for telling correct (positive) from wrong predictions.

    Raises
    ------
    ValueError
        When all or none of the predictions are correct.
    """
    return _misclassification_auroc(_checked(y_true, y_prob, labels))


def fpr_at_95_tpr(y_true, y_prob, *, labels=None):
    """Fraction of wrong predictions still accepted when about 95 % of the correct ones are:
    the false-positive rate at the ROC threshold whose true-positive rate is closest to 0.95.

    Raises
    ------
    ValueError
        When all or none of the predictions are correct.
    """
    return _fpr_at_95_tpr(_checked(y_true, y_prob, labels))


def aupr_error(y_true, y_prob, *, labels=None):
    """Average precision of detecting wrong predictions (positives) by ``-c``."""
    p = _checked(y_true, y_prob, labels)
    _both_outcomes(p.correct, "aupr_error")
    return float(average_precision_score(1.0 - p.correct, -p.confidence))


def matthews_correlation(y_true, y_prob, *, labels=None):
    """Matthews correlation of the arg-max predictions (scikit-learn's ``matthews_corrcoef``)."""
    index, prob = _check(y_true, y_prob, labels)
    return float(matthews_corrcoef(index, prob.argmax(axis=1)))


def _ood_scores(confidence_in, confidence_out):
    c_in = column_or_1d(check_array(confidence_in, ensure_2d=False, dtype=np.float64))
    c_out = column_or_1d(check_array(confidence_out, ensure_2d=False, dtype=np.float64))
    scores = np.concatenate([c_in, c_out])
    is_in = np.concatenate([np.ones(len(c_in)), np.zeros(len(c_out))])
    return is_in, scores


def ood_auroc(confidence_in, confidence_out):
    """AUROC of telling in-distribution rows (positives) from out-of-distribution rows by
    their confidence (e.g. ``predict_proba(X).max(axis=1)``)."""
    return float(roc_auc_score(*_ood_scores(confidence_in, confidence_out)))


def ood_aupr(confidence_in, confidence_out):
    """Average precision of the same task as :func:`ood_auroc` (in-distribution positive)."""
    return float(average_precision_score(*_ood_scores(confidence_in, confidence_out)))


def uncertainty_report(y_true, y_prob, *, labels=None, n_bins=15, paper_scale=False):
    """Every metric of this module for one set of predictions, as a dict.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
    y_prob : array-like of shape (n_samples, n_classes)
        Rows sum to 1 (``predict_proba``).
    labels : array-like of shape (n_classes,), optional
        The label of each column (a classifier's ``classes_``).
    n_bins : int, default=15
        Bins of the ECE.
    paper_scale : bool, default=False
        Scale as the paper's tables: ACC, AUROC, FPR95, ECE and Brier in %, AURC and
        E-AURC x 1e3, NLL x 10.

    Returns
    -------
    report : dict of str to float
        ``accuracy``, ``aurc``, ``e_aurc``, ``misclassification_auroc``,
        ``fpr_at_95_tpr``, ``expected_calibration_error``, ``negative_log_likelihood``,
        ``brier_score`` (the two AUROC-type entries are NaN when every or no prediction
        is correct).

    Examples
    --------
    >>> from skgpx.metrics import uncertainty_report
    >>> report = uncertainty_report([0, 1, 1], [[0.9, 0.1], [0.4, 0.6], [0.7, 0.3]])
    >>> round(report["negative_log_likelihood"], 4), round(report["accuracy"], 4)
    (0.6067, 0.6667)
    """
    _check_bins(n_bins)
    p = _checked(y_true, y_prob, labels)  # validated once for every metric
    area, excess = _aurc_e_aurc(p)
    both = 0 < p.correct.mean() < 1
    report = {
        "accuracy": float(p.correct.mean()),
        "aurc": area,
        "e_aurc": excess,
        "expected_calibration_error": _ece(p, n_bins),
        "negative_log_likelihood": _nll(p),
        "brier_score": _brier(p),
        "misclassification_auroc": _misclassification_auroc(p) if both else np.nan,
        "fpr_at_95_tpr": _fpr_at_95_tpr(p) if both else np.nan,
    }
    if paper_scale:
        report = {name: value * _PAPER_SCALE[name] for name, value in report.items()}
    return report
