"""The scikit-learn estimator contract: every check, no expected failures, no skips."""

from sklearn.gaussian_process.kernels import ConstantKernel, Matern, WhiteKernel
from sklearn.utils.estimator_checks import parametrize_with_checks

from skgpx import DeepKernelProcessRegressor, PathwiseGPSampler

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
    DeepKernelProcessRegressor(),
    # the arc-cosine kernels, the kernel-hyper baseline, no skip connections, no Omega
    DeepKernelProcessRegressor(kernel="arccos1", objective="gp", skip=False, input_scale=False),
    DeepKernelProcessRegressor(kernel="arccos0", objective="dgp", n_layers=1, dof=[5.0, 50.0]),
]


@parametrize_with_checks(CHECKED, expected_failed_checks=lambda est: {}, xfail_strict=True)
def test_sklearn_compatible_estimator(estimator, check):
    check(estimator)
