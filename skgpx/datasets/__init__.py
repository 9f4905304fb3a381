"""Simulated data sets used in the tests, examples and benchmarks.

The regression generators ``make_sine_1d``, ``make_gap_1d``, ``make_matern_2d`` and
``make_dkp_toy`` return ``(X, y)`` as float64 numpy arrays, with ``X`` of shape
``(n_samples, n_features)`` and ``y`` of shape ``(n_samples,)``: a smooth function of ``X`` plus
independent Gaussian noise of variance ``noise_variance``.

The two data sets of the deep Q-EP paper (Chang, Obite, Zhou and Lan,
"Deep Q-Exponential Processes", Sec. 5) are the exceptions:
``make_step_turn_series`` returns a two-output series ``(X, y, y_true)`` and
``make_annular_rhombus`` returns three-class labels ``(X, y)`` with ``y`` of dtype int64.
``load_authors_rhombus`` returns the one fixed rhombus training set of the authors' script
(torch seed 2019), on which the paper's accuracies were measured.

``corrupt_digits`` corrupts scikit-learn's 8 x 8 digits (a proxy for CIFAR-10-C in the
KEP-SVGP benchmarks).

``make_smooth_sparse_regression`` draws the linear-regression problems of the smooth
dependent relevance determination benchmarks (coefficients on a 1-D or 2-D grid that are
sparse, smooth or both) and returns a :class:`~sklearn.utils.Bunch` with a test set.

``make_heteroscedastic`` (a smooth mean with a noise level that varies ``noise_ratio``-fold over
the inputs) and ``make_friedman_outliers`` (``make_friedman1`` with a fraction of the targets
shifted by a gross error; it also returns the noise-free function and the outlier mask) are the
problems of the robust and heteroscedastic regression benchmarks.
"""

from ._digits import DIGIT_CORRUPTIONS, corrupt_digits
from ._heteroscedastic import make_friedman_outliers, make_heteroscedastic
from ._qep import (
    load_authors_rhombus,
    make_annular_rhombus,
    make_step_turn_series,
    rhombus_labels,
)
from ._regression import make_dkp_toy, make_gap_1d, make_matern_2d, make_sine_1d
from ._smooth_sparse import make_smooth_sparse_regression

__all__ = [
    "make_sine_1d",
    "make_gap_1d",
    "make_matern_2d",
    "make_dkp_toy",
    "make_step_turn_series",
    "make_annular_rhombus",
    "load_authors_rhombus",
    "rhombus_labels",
    "corrupt_digits",
    "DIGIT_CORRUPTIONS",
    "make_smooth_sparse_regression",
    "make_heteroscedastic",
    "make_friedman_outliers",
]
