"""Documented small-data configurations, kept in one place.

``QEP_FAST`` is the deep Q-EP setting named in the estimators' docstrings for a few
hundred rows: fewer inducing points, epochs and Monte-Carlo paths.  The full
scikit-learn check suite runs on it within the per-configuration budget; the
default-constructed estimators are checked too (API checks always, the full suite
under the ``slow`` marker).  ``tests/qep/test_estimator.py`` also fits it on bundled
data sets, so it is a real model, not a stub.
"""

QEP_FAST = dict(n_inducing=16, max_iter=40, n_mc_samples=3, n_mc_samples_predict=8)
