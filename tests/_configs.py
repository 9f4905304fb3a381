"""Documented small-data configurations, kept in one place.

``QEP_FAST`` is the deep Q-EP setting named in the estimators' docstrings for a few
hundred rows: fewer inducing points, epochs and Monte-Carlo paths.  The full
scikit-learn check suite runs on it within the per-configuration budget; the
default-constructed estimators are checked too (API checks always, the full suite
under the ``slow`` marker).  ``tests/qep/test_estimator.py`` also fits it on bundled
data sets, so it is a real model, not a stub.
"""

QEP_FAST = dict(n_inducing=16, max_iter=40, n_mc_samples=3, n_mc_samples_predict=8)

# The per-family fast settings that ``tests/test_common.py`` (the shared estimator contract)
# reuses; the family test modules build on the same dictionaries.
DKP_FAST = dict(max_iter=3, device="cpu")
"""DeepKernelProcessRegressor: three sweeps (about 0.1 s on 40 rows)."""

DRD_FAST = dict(max_iter=8, tol=None, device="cpu")
"""SmoothDRDRegressor: eight outer iterations, no early stop (about a second on 30 x 40)."""

DRD_CHECKS = dict(max_iter=8, tol=None)
"""SmoothDRDRegressor in the scikit-learn checks: ``DRD_FAST`` on the default device (the
checks' clone and pickle round trips keep ``device='auto'``); the default-constructed
estimator is checked too (API checks always, the full suite under ``slow``)."""

KEP_SMALL = dict(tokenizer="patches", patch_size=4, d_model=16, depth=1, max_iter=5,
                 random_state=0)
"""KEPSVGPClassifier on 8 x 8 digit images: four 4 x 4 patches, one 16-wide block, five epochs."""
