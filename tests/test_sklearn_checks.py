"""The scikit-learn estimator contract: every check, no expected failures, no skips."""

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

CHECKED = [
    PathwiseGPSampler(),
    # hyperparameter fitting with restarts, normalised targets, a learnt noise level
    PathwiseGPSampler(
        ConstantKernel(1.0) * Matern(1.0, nu=2.5) + WhiteKernel(0.1),
        normalize_y=True,
        n_restarts_optimizer=1,
        random_state=0,
    ),
    PathwiseGPSampler(method="weight_space", n_features=64, shared_basis=False),
    # sparse mode (issue 14): k-means++ inducing points, a learnt noise level and learnt Z,
    # and the CG solver at fixed hyperparameters with a pivoted-Cholesky preconditioner
    PathwiseGPSampler(ConstantKernel(1.0) * Matern(1.0, nu=2.5) + WhiteKernel(0.1),
                      n_inducing=16, optimize_inducing=True, normalize_y=True, random_state=0),
    PathwiseGPSampler(ConstantKernel(1.0) * Matern(1.0, nu=2.5) + WhiteKernel(0.1),
                      n_inducing=16, optimizer="adam", minibatch_size=32, max_iter=50,
                      learning_rate=0.05, random_state=0),
    PathwiseGPSampler(WhiteKernel(0.1) + Matern(1.0, nu=1.5), optimizer=None, solver="cg",
                      cg_preconditioner_rank=20, cg_tol=1e-8),
    # issue 33: the Student-t likelihood on inducing points (L-BFGS-B, full passes), the
    # heteroscedastic one full rank on mini-batches (natural gradients and Adam)
    PathwiseGPSampler(ConstantKernel(1.0) * RBF(1.0), likelihood="student_t", n_inducing=16,
                      max_iter=30, random_state=0),
    PathwiseGPSampler(ConstantKernel(1.0) * RBF(1.0), likelihood="heteroscedastic",
                      optimizer="adam", minibatch_size=32, max_iter=15, learning_rate=0.05,
                      tol=None, normalize_y=True, random_state=0),
    # issue 32: scikit-learn's GPC in exact mode (fixed default kernel), and hyperparameter
    # fitting with restarts, one-vs-one and the probit link
    PathwiseGPClassifier(),
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
    DeepKernelProcessRegressor(),
    # the arc-cosine kernels, the kernel-hyper baseline, no skip connections, no Omega
    DeepKernelProcessRegressor(kernel="arccos1", objective="gp", skip=False, input_scale=False),
    DeepKernelProcessRegressor(kernel="arccos0", objective="dgp", n_layers=1, dof=[5.0, 50.0]),
    # the inducing-point mode (issue 34): m = 5 inducing inputs by k-means++, with the
    # default solver (CARE sweeps, then L-BFGS) and with L-BFGS alone
    DeepKernelProcessRegressor(n_inducing=5),
    DeepKernelProcessRegressor(n_inducing=5, solver="lbfgs", n_layers=1),
    # the documented small-data setting (tests/_configs.py); q = 2, the scaled bound, the
    # shallow model and the Dirichlet likelihood on top
    DeepQEPRegressor(**QEP_FAST),
    DeepQEPRegressor(q=2.0, hidden_dims=(), bound="scaled", kernel="rbf", **QEP_FAST),
    DeepQEPClassifier(**QEP_FAST),
    DeepQEPClassifier(q=1.5, likelihood="dirichlet", hidden_dims=(4, 2), **QEP_FAST),
    # spec kep_svgp Sec. 6.9: the defaults (add merge) and the concatenation merge
    KEPSVGPClassifier(),
    KEPSVGPClassifier(merge="concat", tokenizer="features"),
    # spec smooth_drd Sec. 6: dense factors and the FFT-based Fourier basis, on the documented
    # small-data setting (eight outer iterations)
    SmoothDRDRegressor(**DRD_CHECKS),
    SmoothDRDRegressor(basis="fourier", **DRD_CHECKS),
]

# default-constructed estimators over the per-configuration budget: the deep Q-EP (about 50
# default fits each) and the sDRD (on the checks' structureless data it runs all 100 outer
# iterations: 1-3 s a fit, about 120 s a run). The full suite on them runs under `slow`
# (still run by `make test`, not by `make test-fast`); their API checks run always.
DEFAULTS = [DeepQEPRegressor(), DeepQEPClassifier(), SmoothDRDRegressor()]


@parametrize_with_checks(CHECKED, expected_failed_checks=lambda est: {}, xfail_strict=True)
def test_sklearn_compatible_estimator(estimator, check):
    check(estimator)


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


DEFAULT_API_CHECKS = parametrize_with_checks(
    DEFAULTS, legacy=False, expected_failed_checks=lambda est: {}, xfail_strict=True)


@DEFAULT_API_CHECKS
def test_default_estimator_api(estimator, check):
    check(estimator)


# the rest of the full suite on the defaults (the API checks above are part of it, and ran
# twice before: about a minute of test time)
@pytest.mark.slow
@_without(parametrize_with_checks(DEFAULTS, expected_failed_checks=lambda est: {},
                                  xfail_strict=True), DEFAULT_API_CHECKS)
def test_default_estimator_full(estimator, check):
    check(estimator)
