"""The scikit-learn estimator contract: every check, no expected failures, no skips.

Two tiers, one set of checks.  ``make test`` (what CI runs) runs scikit-learn's full check
suite on every configuration below.  ``make test-fast`` runs the full suite on one
configuration per public estimator (``FULL_IN_FAST_TIER``) and, on every other
configuration, scikit-learn's API checks (``legacy=False``: clone, repr, nothing set in
``__init__``, parameters left alone by ``fit``, ``fit`` returns self, read-only memmaps,
``n_features_in_``, ...); the rest of their full run carries the ``slow`` marker.

Why that is enough for the loop: the legacy checks beyond the API set are, for the most
part, input validation (NaN/inf, sparse, complex, object and integer dtypes, one sample,
one feature, 1-D input, a changed number of features, unfitted calls), and that code runs
in each estimator class before any mode is chosen, so one configuration per class
exercises it; the mode-specific parts (seeds, pickling, invariance to row order and
batching, unmodified inputs, training accuracy) are also asserted per mode by
``tests/test_common.py`` and the family tests, which run in both tiers.
"""

import pytest
from sklearn.gaussian_process.kernels import RBF, ConstantKernel, Matern, WhiteKernel
from sklearn.utils.estimator_checks import parametrize_with_checks

from skgpx import (
    DeepKernelProcessRegressor,
    DeepQEPClassifier,
    DeepQEPRegressor,
    PathwiseGPClassifier,
    PathwiseGPSampler,
    SmoothDRDRegressor,
)
from skgpx.kepsvgp import KEPSVGPClassifier

from _configs import DRD_CHECKS, QEP_FAST

# The full check suite in both tiers: one configuration per public estimator, the default
# where its check run fits the per-configuration budget, else the documented small-data
# setting (tests/_configs.py).
FULL_IN_FAST_TIER = [
    PathwiseGPSampler(),
    # scikit-learn's GPC in exact mode (fixed default kernel)
    PathwiseGPClassifier(),
    DeepKernelProcessRegressor(),
    # one deep Q-EP: the classifier shares the regressor's base class (validation, layers,
    # training loop); its own full run is in the full suite
    DeepQEPRegressor(**QEP_FAST),
    # the defaults (add merge)
    KEPSVGPClassifier(),
    # dense factors on the documented small-data setting (eight outer iterations)
    SmoothDRDRegressor(**DRD_CHECKS),
]

# The other modes and options: API checks in both tiers, the full suite under `slow`.
OTHER_CONFIGURATIONS = [
    DeepQEPClassifier(**QEP_FAST),
    # hyperparameter fitting with restarts, normalised targets, a learnt noise level
    PathwiseGPSampler(
        ConstantKernel(1.0) * Matern(1.0, nu=2.5) + WhiteKernel(0.1),
        normalize_y=True,
        n_restarts_optimizer=1,
        random_state=0,
    ),
    PathwiseGPSampler(method="weight_space", n_features=64, shared_basis=False),
    # sparse mode: k-means++ inducing points, a learnt noise level and learnt Z, and the CG
    # solver at fixed hyperparameters with a pivoted-Cholesky preconditioner
    PathwiseGPSampler(ConstantKernel(1.0) * Matern(1.0, nu=2.5) + WhiteKernel(0.1),
                      n_inducing=16, optimize_inducing=True, normalize_y=True, random_state=0),
    PathwiseGPSampler(ConstantKernel(1.0) * Matern(1.0, nu=2.5) + WhiteKernel(0.1),
                      n_inducing=16, optimizer="adam", minibatch_size=32, max_iter=50,
                      learning_rate=0.05, random_state=0),
    PathwiseGPSampler(WhiteKernel(0.1) + Matern(1.0, nu=1.5), optimizer=None, solver="cg",
                      cg_preconditioner_rank=20, cg_tol=1e-8),
    # the Student-t likelihood on inducing points (L-BFGS-B, full passes), the
    # heteroscedastic one full rank on mini-batches (natural gradients and Adam)
    PathwiseGPSampler(ConstantKernel(1.0) * RBF(1.0), likelihood="student_t", n_inducing=16,
                      max_iter=30, random_state=0),
    PathwiseGPSampler(ConstantKernel(1.0) * RBF(1.0), likelihood="heteroscedastic",
                      optimizer="adam", minibatch_size=32, max_iter=15, learning_rate=0.05,
                      tol=None, normalize_y=True, random_state=0),
    # the classifier's hyperparameter fitting with restarts, one-vs-one and the probit link
    PathwiseGPClassifier(ConstantKernel(1.0) * Matern(1.0, nu=2.5), n_restarts_optimizer=1,
                         random_state=0),
    PathwiseGPClassifier(ConstantKernel(1.0) * Matern(1.0, nu=1.5), multi_class="one_vs_one",
                         link="probit"),
    # its sparse variational mode: one-vs-rest on full-data passes (L-BFGS-B), and the
    # softmax on mini-batches (natural gradients and Adam)
    PathwiseGPClassifier(ConstantKernel(1.0) * RBF(1.0), n_inducing=8, max_iter=10,
                         random_state=0),
    PathwiseGPClassifier(ConstantKernel(1.0) * RBF(1.0), n_inducing=8, multi_class="softmax",
                         optimizer="adam", max_iter=15, minibatch_size=64, learning_rate=0.05,
                         tol=None, random_state=0),
    # the arc-cosine kernels, the kernel-hyper baseline, no skip connections, no Omega
    DeepKernelProcessRegressor(kernel="arccos1", objective="gp", skip=False, input_scale=False),
    DeepKernelProcessRegressor(kernel="arccos0", objective="dgp", n_layers=1, dof=[5.0, 50.0]),
    # the inducing-point mode: m = 5 inducing inputs by k-means++, with the default solver
    # (CARE sweeps, then L-BFGS) and with L-BFGS alone
    DeepKernelProcessRegressor(n_inducing=5),
    DeepKernelProcessRegressor(n_inducing=5, solver="lbfgs", n_layers=1),
    # q = 2, the scaled bound, the shallow model and the Dirichlet likelihood on top
    DeepQEPRegressor(q=2.0, hidden_dims=(), bound="scaled", kernel="rbf", **QEP_FAST),
    DeepQEPClassifier(q=1.5, likelihood="dirichlet", hidden_dims=(4, 2), **QEP_FAST),
    # the concatenation merge
    KEPSVGPClassifier(merge="concat", tokenizer="features"),
    # the FFT-based Fourier basis
    SmoothDRDRegressor(basis="fourier", **DRD_CHECKS),
    # default-constructed estimators over the per-configuration budget: the deep Q-EP
    # (about 50 default fits each) and the sDRD (on the checks' structureless data it runs
    # all 100 outer iterations: 1-3 s a fit, about 120 s a run)
    DeepQEPRegressor(),
    DeepQEPClassifier(),
    SmoothDRDRegressor(),
]


def _no_expected_failures(estimator):
    return {}


def _checks(estimators, **options):
    return parametrize_with_checks(estimators, expected_failed_checks=_no_expected_failures,
                                   xfail_strict=True, **options)


def _without(checks, subset):
    """The parametrisation ``checks`` less the (estimator, check) pairs of ``subset``, with
    scikit-learn's own test ids."""
    (argnames, params), kwargs = checks.mark.args, checks.mark.kwargs

    def key(param):
        estimator, check = getattr(param, "values", param)
        return repr(estimator), kwargs["ids"](check)

    shared = {key(param) for param in subset.mark.args[1]}
    return pytest.mark.parametrize(argnames, [p for p in params if key(p) not in shared],
                                   **kwargs)


@_checks(FULL_IN_FAST_TIER)
def test_sklearn_compatible_estimator(estimator, check):
    check(estimator)


API_CHECKS = _checks(OTHER_CONFIGURATIONS, legacy=False)


@API_CHECKS
def test_configuration_api(estimator, check):
    check(estimator)


# the rest of the full suite on the other configurations (the API checks above are part of
# it and are not run twice)
@pytest.mark.slow
@_without(_checks(OTHER_CONFIGURATIONS), API_CHECKS)
def test_configuration_full(estimator, check):
    check(estimator)
