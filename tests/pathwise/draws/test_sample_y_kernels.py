"""``sample_y`` with the default settings draws for every kernel scikit-learn's does.

Kernels without a random-feature map (``ExpSineSquared``, ``Exponentiation``,
``PairwiseKernel``, ``DotProduct`` in a product or a power, kernels on structured inputs)
fall back to exact joint draws at the query rows: the posterior mean plus the Cholesky
factor of the posterior covariance there, as scikit-learn's ``sample_y`` draws.  The
draws' moments are compared with scikit-learn's ``predict(return_cov=True)`` with the
same (fitted) kernel, on the data of scikit-learn's prior/posterior gallery example.
"""

import warnings

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process.kernels import (
    RBF,
    ConstantKernel,
    DotProduct,
    ExpSineSquared,
    Matern,
    PairwiseKernel,
    RationalQuadratic,
    WhiteKernel,
)

from skgpx import PathwiseGPClassifier, PathwiseGPSampler
from skgpx._memory import InsufficientMemoryError

# every scikit-learn kernel class a regressor takes, sums, products, powers, the
# PairwiseKernel metrics that are positive semi-definite, and the co2 example's kernel
KERNELS = {
    "rbf": lambda: 1.0 * RBF(1.0, (1e-1, 10.0)),
    "matern32": lambda: 1.0 * Matern(1.0, (1e-1, 10.0), nu=1.5),
    "matern-general": lambda: 1.0 * Matern(1.0, (1e-1, 10.0), nu=0.7),
    "rational-quadratic": lambda: 1.0 * RationalQuadratic(1.0, alpha=0.1,
                                                          alpha_bounds=(1e-5, 1e10)),
    "exp-sine-squared": lambda: 1.0 * ExpSineSquared(1.0, 3.0, (0.1, 10.0), (1.0, 10.0)),
    "dot-product": lambda: DotProduct(1.0, (0.1, 10.0)),
    "dot-product-squared": lambda: ConstantKernel(0.1, (0.01, 10.0))
    * DotProduct(1.0, (0.1, 10.0)) ** 2,
    "rbf-power": lambda: RBF(1.0, (1e-1, 10.0)) ** 2,
    "white": lambda: 1.0 * RBF(1.0, (1e-1, 10.0)) + WhiteKernel(0.1),
    "constant-white": lambda: ConstantKernel(2.0) + WhiteKernel(0.1),
    "locally-periodic": lambda: 1.0 * RBF(3.0, (1e-1, 10.0))
    * ExpSineSquared(1.0, 3.0, (0.1, 10.0), (1.0, 10.0)),
    "pairwise-rbf": lambda: PairwiseKernel(1.0, metric="rbf"),
    "pairwise-laplacian": lambda: PairwiseKernel(1.0, metric="laplacian"),
    "pairwise-polynomial": lambda: PairwiseKernel(1.0, metric="polynomial"),
    "pairwise-linear": lambda: PairwiseKernel(1.0, metric="linear"),
    "pairwise-chi2": lambda: PairwiseKernel(1.0, metric="chi2"),
    "co2": lambda: (50.0**2 * RBF(50.0)
                    + 2.0**2 * RBF(100.0) * ExpSineSquared(1.0, 1.0,
                                                           periodicity_bounds="fixed")
                    + 0.5**2 * RationalQuadratic(1.0, 1.0)
                    + 0.1**2 * RBF(0.1) + WhiteKernel(0.1**2)),
}
WITHOUT_FEATURES = {"exp-sine-squared", "dot-product-squared", "rbf-power", "constant-white",
                    "locally-periodic", "pairwise-rbf", "pairwise-laplacian",
                    "pairwise-polynomial", "pairwise-linear", "pairwise-chi2", "co2"}

S = 4000  # draws per case
ALPHA = 1e-4
MEAN_K, COV_K = 5.0, 5.5


def _gallery_data():
    rng = np.random.RandomState(4)
    X = rng.uniform(0, 5, 10)[:, None]
    return X, np.sin((X[:, 0] - 2.5) ** 2), np.linspace(0.1, 4.9, 25)[:, None]


def _signal_variance(kernel, Xq):
    """Mean prior variance of the latent function at Xq: the scale of the jitter."""
    if isinstance(getattr(kernel, "k2", None), WhiteKernel):
        kernel = kernel.k1
    return np.mean(kernel.diag(Xq))


def _assert_gaussian_moments(draws, mean, cov, jitter):
    """Draws of ``N(mean, cov + jitter I)``, one row per query point, ``S`` columns.

    The sample mean has standard error ``sqrt(C_ii / S)``, the sample covariance
    ``sqrt((C_ii C_jj + C_ij^2) / S)`` (Gaussian draws, ``C = cov + jitter I``).  With
    ``k = 5`` for the means (25 per case, 34 cases: at most ~5e-4 false alarms) and 5.5
    for the covariances (325 distinct entries per case: ~4e-4), a pass is no tuned
    seed; a wrong mean, a missing correlation or a wrong scale moves them by far more.
    """
    C = cov + jitter * np.eye(cov.shape[0])
    sd = np.sqrt(np.diag(C))
    assert np.all(np.abs(draws.mean(1) - mean) <= MEAN_K * sd / np.sqrt(S))
    bound = COV_K * np.sqrt((np.outer(sd**2, sd**2) + C**2) / S)
    assert np.all(np.abs(np.cov(draws) - C) <= bound)


@pytest.mark.parametrize("name", KERNELS, ids=KERNELS.keys())
def test_default_sample_y_draws_sklearns_prior_and_posterior(name):
    X, y, Xq = _gallery_data()
    kernel = KERNELS[name]()
    # alpha: the noise-free targets with low-rank kernels (DotProduct ** 2, polynomial) and
    # scikit-learn's alpha=1e-10 make K_A's condition number ~1e10, where two correct
    # posterior means differ at 1e-3; the draws' defaults are what is tested
    ours = PathwiseGPSampler(kernel, alpha=ALPHA, random_state=0, device="cpu")
    route = "exact_at_queries" if name in WITHOUT_FEATURES else "pathwise"
    # prior: random features of a shared basis are a biased covariance, so the moments are
    # checked on the exact route only (the feature route has its own moment tests)
    assert ours.sample_y_route(Xq) == route
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # no jitter beyond the exact prior's
        prior_draws = ours.sample_y(Xq, S, random_state=1)
    assert prior_draws.shape == (25, S) and np.isfinite(prior_draws).all()
    mean, cov = GaussianProcessRegressor(kernel).predict(Xq, return_cov=True)
    if route == "exact_at_queries":  # with the exact prior's jitter
        _assert_gaussian_moments(prior_draws, mean, cov, 1e-8 * _signal_variance(kernel, Xq))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # bound warnings of the fit
        ours.fit(X, y)
    assert ours.sample_y_route(Xq) == route
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        draws = ours.sample_y(Xq, S, random_state=2)
    assert draws.shape == (25, S) and np.isfinite(draws).all()
    np.testing.assert_array_equal(ours.sample_y(Xq, 3), ours.sample_y(Xq, 3))  # seeded
    # scikit-learn with our fitted kernel (the optimiser's path is not what is tested)
    replay = GaussianProcessRegressor(ours.kernel_, alpha=ALPHA, optimizer=None).fit(X, y)
    mean, cov = replay.predict(Xq, return_cov=True)
    if route == "exact_at_queries":
        _assert_gaussian_moments(draws, mean, cov, 1e-8 * _signal_variance(ours.kernel_, Xq))


def test_fallback_draws_several_targets_one_stream_each():
    # target t's draws do not depend on how many targets there are (as scikit-learn's
    # sample_y, which draws target by target)
    X, y, Xq = _gallery_data()
    Y = np.column_stack([y, 2.0 * y + 1.0])
    kernel = KERNELS["exp-sine-squared"]()
    one = PathwiseGPSampler(kernel, optimizer=None, device="cpu").fit(X, y)
    two = PathwiseGPSampler(kernel, optimizer=None, device="cpu").fit(X, Y)
    assert two.sample_y_route(Xq) == "exact_at_queries"
    draws = two.sample_y(Xq, 5, random_state=3)
    assert draws.shape == (25, 2, 5)
    np.testing.assert_allclose(draws[:, 0], one.sample_y(Xq, 5, random_state=3),
                               rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("options", [dict(n_inducing=6),
                                     dict(solver="cg", optimizer=None),
                                     dict(likelihood="student_t", n_inducing=6, max_iter=3,
                                          tol=None)],
                         ids=["sparse", "cg", "student-t"])
def test_fallback_draws_the_other_modes_predictive_moments(options):
    # whatever the mode, the exact route draws N(mean, cov) of its own predict
    X, y, Xq = _gallery_data()
    kernel = KERNELS["exp-sine-squared"]() + WhiteKernel(0.05)
    est = PathwiseGPSampler(kernel, predict_noise="latent", random_state=0, device="cpu",
                            **options)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est.fit(X, y)
    assert est.sample_y_route(Xq) == "exact_at_queries"
    mean, cov = est.predict(Xq, return_cov=True)
    draws = est.sample_y(Xq, S, random_state=4)
    _assert_gaussian_moments(draws, mean, cov, 1e-8 * _signal_variance(est.kernel_, Xq))


def test_exact_routes_are_chosen_by_prior_and_sample_functions_names_the_way_out():
    X, y, Xq = _gallery_data()
    est = PathwiseGPSampler(KERNELS["exp-sine-squared"](), optimizer=None,
                            device="cpu").fit(X, y)
    assert est.set_params(prior="exact").sample_y_route(Xq) == "exact_joint"
    assert est.set_params(prior="auto").sample_y_route(Xq) == "exact_joint"
    assert est.set_params(prior="auto", exact_prior_max=20).sample_y_route(Xq) == (
        "exact_at_queries")
    with pytest.raises(NotImplementedError, match=r"ExpSineSquared.*sample_y\(X\)"):
        est.sample_functions(2)
    with pytest.raises(NotImplementedError, match="method='pathwise'"):
        est.set_params(method="weight_space").sample_y(Xq)
    rbf = PathwiseGPSampler(KERNELS["rbf"](), optimizer=None, device="cpu").fit(X, y)
    assert rbf.sample_y_route(Xq) == "pathwise"
    assert rbf.set_params(method="weight_space").sample_y_route(Xq) == "weight_space"


def test_memory_guard_refuses_a_dense_query_before_any_work(monkeypatch):
    X, y, _ = _gallery_data()
    Xq = np.linspace(0.0, 5.0, 3000)[:, None]
    est = PathwiseGPSampler(KERNELS["exp-sine-squared"](), optimizer=None,
                            device="cpu").fit(X, y)

    def unreachable(*args, **kwargs):
        raise AssertionError("the refusal must come before the covariance is formed")

    monkeypatch.setattr(type(est._mode), "predict", unreachable)
    # 3000 query rows: the dense covariances take 4 x 72 MB; 16 MB are "available"
    monkeypatch.setenv("SKGPX_MEMORY_LIMIT", "16000000")
    with pytest.raises(InsufficientMemoryError,
                       match=r"(?s)3000 rows by exact joint draws.*ExpSineSquared.*"
                             r"fewer query rows per call.*random-feature map"):
        est.sample_y(Xq)
    # a kernel with random features draws there linearly in the query rows
    rbf = PathwiseGPSampler(KERNELS["rbf"](), optimizer=None, device="cpu").fit(X, y)
    assert rbf.sample_y(Xq).shape == (3000, 1)


def test_sparse_classifier_names_the_way_out_for_kernels_without_random_features():
    X = np.linspace(0, 10, 30)[:, None]
    y = (np.sin(X[:, 0]) > 0).astype(int)
    kernel = ConstantKernel(1.0) * ExpSineSquared(1.0, 6.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est = PathwiseGPClassifier(kernel, n_inducing=8, max_iter=3, random_state=0,
                                   device="cpu").fit(X, y)
    with pytest.raises(NotImplementedError, match=r"sparse mode.*ExpSineSquared.*exact mode"):
        est.sample_y(X[:3], 2)
    exact = PathwiseGPClassifier(kernel, optimizer=None, device="cpu").fit(X, y)
    assert exact.sample_y(X[:3], 2).shape == (3, 2, 2)
