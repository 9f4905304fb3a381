"""PathwiseGPSampler with a Student-t or heteroscedastic likelihood, through the estimator.

The likelihoods' maths is tested in likelihoods/test_regression.py and the engine's in
svgp/test_groups.py; here the estimator's answers are checked against numpy computed from
its own fitted attributes, against each other (latent plus noise), against the
distribution of its draws, and against the Gaussian model on the same data.
"""

import copy
import warnings

import numpy as np
import pytest
import scipy.stats
from scipy.linalg import cholesky, solve_triangular
from sklearn.gaussian_process.kernels import RBF, WhiteKernel
from sklearn.gaussian_process.kernels import ConstantKernel as C
from sklearn.gaussian_process.tests._mini_sequence_kernel import MiniSeqKernel

from skgpx import InsufficientMemoryError, PathwiseGPSampler

RNG = np.random.default_rng(0)
N = 150
X = np.sort(RNG.uniform(-3, 3, size=(N, 1)), axis=0)
F = np.sin(2 * X[:, 0])
OUTLIER = RNG.random(N) < 0.1
Y_OUT = F + 0.1 * RNG.standard_normal(N) + np.where(OUTLIER, RNG.choice([-5.0, 5.0], N), 0)
NOISE_SD = 0.05 + 0.45 * (X[:, 0] + 3) / 6  # 0.05 .. 0.5: tenfold
Y_HET = F + NOISE_SD * RNG.standard_normal(N)
GRID = np.linspace(-2.8, 2.8, 57)[:, None]
KERNEL = C(1.0, (1e-2, 1e2)) * RBF(1.0, (1e-2, 1e2))


def _t(**params):
    return PathwiseGPSampler(KERNEL, likelihood="student_t", random_state=0, device="cpu",
                             **params)


def _het(**params):
    return PathwiseGPSampler(KERNEL, likelihood="heteroscedastic", random_state=0,
                             device="cpu", **params)


@pytest.fixture(scope="module")
def student():
    return _t(n_inducing=20).fit(X, Y_OUT)


@pytest.fixture(scope="module")
def hetero():
    return _het().fit(X, Y_HET)  # full rank: the inducing inputs are the 150 rows


def _latent_moments(est, Xq):
    """Mean (n*,) and variance (n*,) of q(f) from the fitted attributes (whitened q)."""
    Z, kernel = est.inducing_points_, est.kernel_
    L = cholesky(kernel(Z) + est.jitter_ * np.eye(len(Z)), lower=True)
    A = solve_triangular(L, kernel(Z, Xq), lower=True)
    R = est.q_sqrt_[0]
    mean = A.T @ est.q_mu_[:, 0]
    var = kernel.diag(Xq) - (A * A).sum(0) + ((R.T @ A) ** 2).sum(0)
    return mean, var


def test_student_t_ignores_the_outliers_that_pull_the_gaussian_fit(student):
    gaussian = PathwiseGPSampler(KERNEL + WhiteKernel(0.1), n_inducing=20, random_state=0,
                                 device="cpu").fit(X, Y_OUT)
    truth = np.sin(2 * GRID[:, 0])
    rmse_t = np.sqrt(np.mean((student.predict(GRID) - truth) ** 2))
    rmse_g = np.sqrt(np.mean((gaussian.predict(GRID) - truth) ** 2))
    assert rmse_t < 0.5 * rmse_g
    assert 2 < student.df_ < 10  # the tails were found heavy
    # sigma is the inliers' noise (0.1), not the outliers' spread
    assert 0.03 < student.noise_scale_ < 0.3


@pytest.mark.parametrize("model", ["student", "hetero"])
def test_predictions_are_the_fitted_q_plus_the_noise(model, request):
    est = request.getfixturevalue(model)
    mean, var = _latent_moments(est, GRID)
    y_mean, y_std, noise_std = est.predict(GRID, return_std=True, return_noise=True)
    np.testing.assert_allclose(y_mean, mean, rtol=0, atol=1e-8)
    # numpy's reconstruction from the attributes, at the jittered K_zz of 150 rows as
    # inducing inputs, carries about eps cond(K_zz) ~ 1e-11 of round-off
    np.testing.assert_allclose(y_std**2, var + noise_std**2, rtol=1e-9, atol=1e-10)
    latent = copy.deepcopy(est).set_params(predict_noise="latent")
    _, latent_std = latent.predict(GRID, return_std=True)
    np.testing.assert_allclose(latent_std**2, var, rtol=1e-9, atol=1e-10)
    _, cov = est.predict(GRID[:9], return_cov=True)
    np.testing.assert_allclose(np.diag(cov), y_std[:9] ** 2, rtol=1e-9, atol=1e-12)


def test_student_t_noise_draws_follow_the_fitted_t(student):
    # sample_y and sample_functions with one seed share the paths: the difference is the
    # noise, sigma t_nu by its fitted parameters (a Kolmogorov-Smirnov test)
    x = GRID[::8]
    paths = student.sample_functions(2000, random_state=3)(x)
    noisy = student.sample_y(x, 2000, random_state=3)
    e = ((noisy - paths) / student.noise_scale_).ravel()
    assert scipy.stats.kstest(e, scipy.stats.t(student.df_).cdf).pvalue > 1e-3
    # and not a Gaussian of the same variance
    sd = np.sqrt(student.df_ / (student.df_ - 2))
    assert scipy.stats.kstest(e, scipy.stats.norm(0, sd).cdf).pvalue < 1e-6


def test_heteroscedastic_noise_follows_the_inputs(hetero):
    _, noise_std = hetero.predict(X, return_noise=True)
    # a tenfold range, recovered within a factor of 1.6 at every row away from the ends
    ratio = noise_std / NOISE_SD
    inner = np.abs(X[:, 0]) < 2.5
    assert np.all((ratio[inner] > 1 / 1.6) & (ratio[inner] < 1.6))
    assert noise_std[X[:, 0] > 2].mean() > 4 * noise_std[X[:, 0] < -2].mean()


def test_heteroscedastic_draws_have_the_predictive_moments(hetero):
    x = GRID[::7]
    S = 4000
    draws = hetero.sample_y(x, S, random_state=5)
    mean, std = hetero.predict(x, return_std=True)
    z_mean = (draws.mean(1) - mean) / (std / np.sqrt(S))
    # the variance's error from the draws' own fourth moment (a scale mixture, not normal)
    centred = draws - draws.mean(1, keepdims=True)
    m2, m4 = (centred**2).mean(1), (centred**4).mean(1)
    z_var = (m2 - std**2) / np.sqrt((m4 - m2**2) / S)
    assert np.abs(z_mean).max() < 4.5 and np.abs(z_var).max() < 4.5


@pytest.mark.parametrize("model", ["student", "hetero"])
def test_bound_at_theta_is_the_fitted_value_and_its_gradient_is_exact(model, request):
    est = request.getfixturevalue(model)
    value = est.log_marginal_likelihood(est.kernel_.theta)
    assert abs(value - est.log_marginal_likelihood_value_) <= 1e-9 * abs(value)
    theta = est.kernel_.theta + 0.3
    _, grad = est.log_marginal_likelihood(theta, eval_gradient=True)
    # h = 1e-3: at the rows as inducing inputs K_zz needs jitter and the bound's round-off
    # grows as eps cond(K_zz); central differences of step 1e-5 are 1e-5 off from it alone
    h = 1e-3
    fd = [(est.log_marginal_likelihood(theta + h * e)
           - est.log_marginal_likelihood(theta - h * e)) / (2 * h)
          for e in np.eye(len(theta))]
    np.testing.assert_allclose(grad, fd, rtol=1e-5, atol=1e-5)


def test_full_rank_is_the_sparse_fit_with_the_rows_as_fixed_inducing_inputs(hetero):
    fixed = _het(inducing_points=X, optimize_inducing=False).fit(X, Y_HET)
    np.testing.assert_allclose(fixed.predict(GRID), hetero.predict(GRID), rtol=0, atol=1e-10)
    assert fixed.log_marginal_likelihood_value_ == pytest.approx(
        hetero.log_marginal_likelihood_value_, rel=1e-12)


def test_minibatch_route_and_several_targets():
    Y2 = np.column_stack([Y_OUT, 2 * Y_OUT + 1])
    est = _t(n_inducing=12, optimizer="adam", minibatch_size=64, learning_rate=0.05,
             max_iter=60, normalize_y=True).fit(X, Y2)
    mean, std = est.predict(GRID, return_std=True)
    assert mean.shape == std.shape == (len(GRID), 2)
    assert est.sample_y(GRID[:5], 3).shape == (5, 2, 3)
    truth = np.sin(2 * GRID[:, 0])
    assert np.sqrt(np.mean((mean[:, 0] - truth) ** 2)) < 0.25
    np.testing.assert_allclose(mean[:, 1], 2 * mean[:, 0] + 1, rtol=0, atol=0.2)


def test_bad_options_are_refused_before_any_work(monkeypatch):
    with pytest.raises(ValueError, match="structured inputs"):
        PathwiseGPSampler(MiniSeqKernel(baseline_similarity_bounds="fixed"),
                          likelihood="student_t").fit(["AB", "BA", "AA"], [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="minibatch_size=32 needs optimizer='adam'"):
        _t(minibatch_size=32).fit(X, Y_OUT)
    est = _t(n_inducing=8, max_iter=3).fit(X, Y_OUT)
    with pytest.raises(ValueError, match="prior='rff'"):
        est.set_params(prior="exact").sample_y(GRID[:3])
    monkeypatch.setenv("SKGPX_MEMORY_LIMIT", "1000000")  # 1 MB
    with pytest.raises(InsufficientMemoryError, match="n_inducing"):
        _het().fit(np.repeat(X, 4, axis=0), np.repeat(Y_HET, 4))


# 30 rows, 3 features, targets unrelated to the inputs; the degenerate variants let f pass
# through rows exactly, which drove a noise variance without a floor to zero there
_X30 = np.random.RandomState(0).normal(size=(30, 3))
_Y30 = np.random.RandomState(1).normal(size=30)
EXACT_FITS = {
    "repeated rows": (np.repeat(_X30[:10], 3, axis=0), np.repeat(_Y30[:10], 3)),
    # every pair of rows is uncorrelated at the length-scale bounds: each inducing point
    # sees only its own row
    "X * 1e8": (_X30 * 1e8, _Y30),
    "constant y": (_X30, np.full(30, 3.0)),
}


@pytest.mark.parametrize("kind", EXACT_FITS)
def test_heteroscedastic_fits_data_it_can_fit_exactly(kind):
    """The fit and its predictions raise no warning (other than ConvergenceWarning) and no
    floating-point error: no NaN or overflow inside.  The noise floor a bounds every row's
    expected log density by -log(2 pi a) / 2 (and KL >= 0), so the bound too."""
    from sklearn.exceptions import ConvergenceWarning

    from skgpx.pathwise._likelihoods._regression import NOISE_FLOOR

    Xk, yk = EXACT_FITS[kind]
    est = PathwiseGPSampler(C(1.0) * RBF(1.0), likelihood="heteroscedastic", n_inducing=8,
                            max_iter=5, normalize_y=True, random_state=0, device="cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.filterwarnings("ignore", category=ConvergenceWarning)
        with np.errstate(invalid="raise", over="raise", divide="raise"):
            est.fit(Xk, yk)
            mean, std = est.predict(Xk, return_std=True)
    assert np.isfinite(mean).all() and np.isfinite(std).all() and (std > 0).all()
    bound = est.log_marginal_likelihood_value_
    assert np.isfinite(bound)
    assert bound <= -0.5 * len(yk) * np.log(2 * np.pi * NOISE_FLOOR)
    if kind == "constant y":  # the constant, and an uncertainty at the noise floor's scale
        np.testing.assert_allclose(mean, 3.0, rtol=0, atol=1e-6)
        assert std.max() < 1e-3
