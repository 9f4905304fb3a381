"""Sparse (SGPR) mode of PathwiseGPSampler: Titsias' (2009) collapsed bound, its optimal
q(u) and predictive moments, and draws on the k(., Z) basis.

The references are dense numpy formulas on sklearn kernel objects (``_oracles.sgpr_reference``,
``sgpr_predictive``, ``exact_lml``): Titsias' optimal q(u) and collapsed ELBO written with
explicit inverses and an n x n Gaussian density, which share no algebra with the stable
Cholesky formulas skgpx implements.  Tolerances:

* deterministic identities: 1e-8 relative (a numpy prototype matched to 1e-9 for
  q(u) and 1e-11 for the ELBO; Kzz has condition number <= 6e2 at the fixed Z, so float64
  round-off of either side stays far below 1e-8).  The oracles use the model's fixed jitter
  (Kzz + 1e-8 mean(diag Kzz) I), and every fit checks that ``jitter_`` reports it;
* Monte-Carlo moments: the z-scores of ``draws/test_moments.py`` (mean <= 5 over 40 entries,
  covariance <= 5.5 over 1 600 entries, standard errors sqrt(C_ii/S) and
  sqrt((C_ii C_jj + C_ij^2)/S));
* finite differences: a central difference with step h = 1e-5 in log space has truncation
  error h^2 |f'''| / 6 ~ 1e-9 and round-off eps |f| / h ~ 1e-9 for |f| ~ 50, so the gradient
  must agree to 1e-6.
"""

import numpy as np
import pytest
import scipy.optimize
import torch
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel

from skgpx import PathwiseGPSampler

from .._oracles import (
    COV_Z_MAX,
    KERNEL_IDS,
    MEAN_Z_MAX,
    NOISE,
    exact_lml,
    exact_posterior,
    full_kernel,
    moment_z_scores,
    query_points,
    sgpr_elbo,
    sgpr_predictive,
    sgpr_reference,
    signal_kernel,
    sine_data,
    sparse_inducing_inputs,
)
from ..draws.test_moments import _three_targets

S = 20_000
RTOL = 1e-8  # stable against direct formulas (see above)
ALPHA = 1e-10  # the estimator's default alpha: part of sigma^2 = alpha + white on the training set
SIGMA2 = NOISE + ALPHA
# The sparse model's fixed jitter (L = chol(Kzz + jitter I)): the estimator's
# default jitter=1e-8 times the mean of diag(Kzz), always added to the prior covariance of
# u.  It changes q(u) by up to ~1e-6 relative at these Z (7e-8 measured for RBF), more than
# RTOL, so the oracles use the same Kzz + jitter I; every fit asserts that ``jitter_``
# reports exactly this amount (no escalation at the well-conditioned Z).
JITTER = 1e-8


def _jitter(signal, Z):
    return JITTER * float(np.mean(signal.diag(Z)))


def _ref(signal, X, y, Z, noise):
    """Oracle q(u) and ELBO of the sparse model (with its fixed Kzz jitter)."""
    return sgpr_reference(signal, X, y, Z, noise, _jitter(signal, Z))


def _pred(signal, Z, mu, S_u, Xq):
    return sgpr_predictive(signal, Z, mu, S_u, Xq, _jitter(signal, Z))


def _check_jitter(est, signal):
    expected = _jitter(signal, est.inducing_points_)
    assert est.jitter_ == pytest.approx(expected, rel=1e-12, abs=0), (est.jitter_, expected)


def _sparse(name, **params):
    """The fixture kernel, no fitting, by default with the fixed inducing inputs (m = 10)."""
    params.setdefault("optimizer", None)
    params.setdefault("device", "cpu")
    if "n_inducing" not in params:
        params.setdefault("inducing_points", sparse_inducing_inputs())
    return PathwiseGPSampler(full_kernel(name), **params)


def _free_kernel(length_scale=1.0, noise=1.0):
    """A kernel whose three hyperparameters are all learnt (finite default bounds)."""
    return ConstantKernel(1.0) * RBF(length_scale) + WhiteKernel(noise)


def _split(kernel):
    """(signal kernel, white noise level) of ``C * K + WhiteKernel``."""
    return kernel.k1, kernel.k2.noise_level


def _elbo_at(kernel, X, y, Z, alpha=ALPHA):
    signal, white = _split(kernel)
    return _ref(signal, X, y, Z, alpha + white)[2]


def _assert_close(actual, desired, rtol, what):
    """max |actual - desired| <= rtol * max |desired| (relative to the array's scale)."""
    actual, desired = np.asarray(actual, float), np.asarray(desired, float)
    assert actual.shape == desired.shape, (what, actual.shape, desired.shape)
    scale = max(np.abs(desired).max(), np.finfo(float).tiny)
    err = np.abs(actual - desired).max() / scale
    assert err <= rtol, f"{what}: relative error {err:.3g} > {rtol:g}"


# ------------------------------------------------------------------ the oracle itself


def test_sgpr_oracle_reduces_to_the_exact_gp_when_Z_is_X():
    # With Z = X the bound is tight: Q = Kxx, the trace term vanishes, the ELBO is the exact
    # LML (== sklearn's), q(u) is the exact posterior of f(X) and the SGPR predictive moments
    # are the exact posterior's.  Matern-1/2 keeps Kxx well conditioned (min eigenvalue 0.018).
    X, y = sine_data()
    Xq = query_points()
    k = signal_kernel("matern12")
    mu, S_u, elbo = sgpr_reference(k, X, y, X, NOISE)
    gpr = GaussianProcessRegressor(k, alpha=NOISE, optimizer=None).fit(X, y)
    assert abs(elbo - exact_lml(k, X, y, NOISE)) <= 1e-10 * abs(elbo)
    assert abs(elbo - gpr.log_marginal_likelihood_value_) <= 1e-10 * abs(elbo)
    mean_x, cov_x = exact_posterior(k, X, y, X, NOISE)
    _assert_close(mu[:, 0], mean_x, 1e-9, "q_mu at Z = X")
    _assert_close(S_u, cov_x, 1e-9, "S_u at Z = X")
    mean, cov = sgpr_predictive(k, X, mu, S_u, Xq)
    mean_ex, cov_ex = exact_posterior(k, X, y, Xq, NOISE)
    _assert_close(mean[:, 0], mean_ex, 1e-9, "sparse predictive mean at Z = X")
    _assert_close(cov, cov_ex, 1e-9, "sparse predictive cov at Z = X")
    # ... and with m = 10 < n the bound is strictly below the exact LML
    assert sgpr_elbo(k, X, y, sparse_inducing_inputs(), NOISE) < elbo - 1e-3


# ------------------------------------------------------------- q(u), ELBO and predict


@pytest.mark.parametrize("name", KERNEL_IDS)
def test_optimal_q_u_and_elbo_equal_direct_formulas(name):
    X, y = sine_data()
    Z = sparse_inducing_inputs()
    est = _sparse(name).fit(X, y)
    mu, S_u, elbo = _ref(signal_kernel(name), X, y, Z, SIGMA2)
    np.testing.assert_array_equal(est.inducing_points_, Z)
    assert est.q_mu_.shape == (10, 1) and est.q_sqrt_.shape == (10, 10)
    np.testing.assert_allclose(est.noise_variance_, np.full(30, SIGMA2), rtol=1e-15)
    _check_jitter(est, signal_kernel(name))
    _assert_close(est.q_mu_, mu, RTOL, "q_mu_")
    _assert_close(est.q_sqrt_ @ est.q_sqrt_.T, S_u, RTOL, "q_sqrt_ q_sqrt_^T")
    assert isinstance(est.log_marginal_likelihood_value_, float)
    assert abs(est.log_marginal_likelihood_value_ - elbo) <= RTOL * abs(elbo), (
        est.log_marginal_likelihood_value_, elbo)
    # log_marginal_likelihood(theta) in sparse mode is the ELBO at theta
    value = est.log_marginal_likelihood(est.kernel_.theta)
    assert abs(value - elbo) <= RTOL * abs(elbo), (value, elbo)
    assert est.log_marginal_likelihood() == est.log_marginal_likelihood_value_


@pytest.mark.parametrize("predict_noise", ["latent", "sklearn"])
@pytest.mark.parametrize("name", KERNEL_IDS)
def test_predict_equals_sparse_predictive_moments(name, predict_noise):
    # SGPR moments; "sklearn" adds the WhiteKernel level (0.1) to the variance, as exact mode
    # and GaussianProcessRegressor do, "latent" adds nothing.
    X, y = sine_data()
    Xq = query_points()
    Z = sparse_inducing_inputs()
    mu, S_u, _ = _ref(signal_kernel(name), X, y, Z, SIGMA2)
    mean, cov = _pred(signal_kernel(name), Z, mu, S_u, Xq)
    if predict_noise == "sklearn":
        cov = cov + NOISE * np.eye(len(Xq))
    est = _sparse(name, predict_noise=predict_noise).fit(X, y)
    _assert_close(est.predict(Xq), mean[:, 0], RTOL, "predict mean")
    mean_s, std = est.predict(Xq, return_std=True)
    _assert_close(mean_s, mean[:, 0], RTOL, "predict mean (return_std)")
    _assert_close(std, np.sqrt(np.diag(cov)), RTOL, "predict std")
    mean_c, cov_hat = est.predict(Xq, return_cov=True)
    _assert_close(mean_c, mean[:, 0], RTOL, "predict mean (return_cov)")
    _assert_close(cov_hat, cov, RTOL, "predict cov")


def test_multi_output_normalized_q_u_per_column_and_elbo_summed():
    # T = 3 with normalize_y: q(u) and the ELBO live in normalised units (ddof-0 std), one
    # column of q_mu_ per target, one q_sqrt_ (it does not depend on y), the ELBO summed.
    X, Y = _three_targets()
    Xq = query_points()
    Z = sparse_inducing_inputs()
    k = signal_kernel("matern52")
    y_mean, y_std = Y.mean(axis=0), Y.std(axis=0)
    Yn = (Y - y_mean) / y_std
    mu, S_u, elbo = _ref(k, X, Yn, Z, SIGMA2)
    elbo_per_target = [_ref(k, X, Yn[:, t], Z, SIGMA2)[2] for t in range(3)]
    assert abs(elbo - sum(elbo_per_target)) <= 1e-12 * abs(elbo)  # oracle: sum over targets
    est = _sparse("matern52", normalize_y=True).fit(X, Y)
    assert est.q_mu_.shape == (10, 3) and est.q_sqrt_.shape == (10, 10)
    _check_jitter(est, k)
    np.testing.assert_allclose(est.y_mean_, y_mean, rtol=1e-14)
    np.testing.assert_allclose(est.y_scale_, y_std, rtol=1e-14)
    for t in range(3):
        _assert_close(est.q_mu_[:, t], mu[:, t], RTOL, f"q_mu_[:, {t}]")
    _assert_close(est.q_sqrt_ @ est.q_sqrt_.T, S_u, RTOL, "q_sqrt_ q_sqrt_^T")
    assert abs(est.log_marginal_likelihood_value_ - elbo) <= RTOL * abs(elbo), (
        est.log_marginal_likelihood_value_, elbo)
    # predict (sklearn noise semantics) in target units: ybar_t + s_t m, s_t^2 (var + 0.1)
    mean_n, cov_n = _pred(k, Z, mu, S_u, Xq)
    mean_hat, std_hat = est.predict(Xq, return_std=True)
    assert mean_hat.shape == (40, 3) and std_hat.shape == (40, 3)
    for t in range(3):
        _assert_close(mean_hat[:, t], y_mean[t] + y_std[t] * mean_n[:, t], RTOL, f"mean {t}")
        _assert_close(std_hat[:, t], y_std[t] * np.sqrt(np.diag(cov_n) + NOISE), RTOL,
                      f"std {t}")


def test_heteroscedastic_alpha_uses_diagonal_noise():
    # sigma_i^2 = alpha_i + white, as in exact mode: the bound becomes
    # log N(y | 0, Q + Sigma) - tr(Sigma^-1 (Kxx - Q)) / 2 and q(u) uses Kzx Sigma^-1 Kxz.
    # predict adds the white noise only (sklearn semantics: alpha stays on the training set).
    X, y = sine_data()
    Xq = query_points()
    Z = sparse_inducing_inputs()
    alpha = np.random.RandomState(6).uniform(0.0, 0.1, X.shape[0])
    noise = alpha + NOISE
    k = signal_kernel("rbf")
    mu, S_u, elbo = _ref(k, X, y, Z, noise)
    # the oracle really depends on the heteroscedastic part
    assert abs(elbo - _ref(k, X, y, Z, NOISE + alpha.mean())[2]) > 1e-2
    est = _sparse("rbf", alpha=alpha).fit(X, y)
    np.testing.assert_allclose(est.noise_variance_, noise, rtol=1e-14)
    _check_jitter(est, k)
    _assert_close(est.q_mu_, mu, RTOL, "q_mu_")
    _assert_close(est.q_sqrt_ @ est.q_sqrt_.T, S_u, RTOL, "q_sqrt_ q_sqrt_^T")
    assert abs(est.log_marginal_likelihood_value_ - elbo) <= RTOL * abs(elbo), (
        est.log_marginal_likelihood_value_, elbo)
    mean, cov = _pred(k, Z, mu, S_u, Xq)
    mean_hat, std_hat = est.predict(Xq, return_std=True)
    _assert_close(mean_hat, mean[:, 0], RTOL, "predict mean")
    _assert_close(std_hat, np.sqrt(np.diag(cov) + NOISE), RTOL, "predict std")


# ---------------------------------------------------------------------------- draws


@pytest.mark.parametrize("prior", ["rff", "exact"])
@pytest.mark.parametrize("name", KERNEL_IDS)
def test_sparse_draw_moments_match_sparse_predictive(name, prior):
    # u_s = q_mu + q_sqrt xi_s, v_s = Kzz^-1 (u_s - f_s(Z)), draw = f_s + k(., Z) v_s: with an
    # independent RFF basis per path (or the exact joint prior) its mean and covariance are
    # exactly the SGPR moments, so the exact-posterior z-score tolerances apply.
    X, y = sine_data()
    Xq = query_points()
    Z = sparse_inducing_inputs()
    mu, S_u, _ = _ref(signal_kernel(name), X, y, Z, SIGMA2)
    mean, cov = _pred(signal_kernel(name), Z, mu, S_u, Xq)
    est = _sparse(name, shared_basis=False, n_features=64, prior=prior,
                  predict_noise="latent").fit(X, y)
    draws = est.sample_y(Xq, n_samples=S, random_state=11)
    assert draws.shape == (40, S) and draws.dtype == np.float64
    mean_z, cov_z, _, _ = moment_z_scores(draws, mean[:, 0], cov)
    assert mean_z <= MEAN_Z_MAX, f"mean z-score {mean_z:.2f}"
    assert cov_z <= COV_Z_MAX, f"covariance z-score {cov_z:.2f}"


def test_sparse_draws_detect_a_wrong_posterior():
    # The z-score test must be able to fail here too: the same draws tested against the
    # *exact* GP posterior (which differs from the m = 10 sparse one by far more than the
    # Monte-Carlo error) are rejected.
    X, y = sine_data()
    Xq = query_points()
    mean, cov = exact_posterior(signal_kernel("rbf"), X, y, Xq, NOISE)
    est = _sparse("rbf", shared_basis=False, n_features=64, predict_noise="latent").fit(X, y)
    draws = est.sample_y(Xq, n_samples=S, random_state=11)
    mean_z, cov_z, _, _ = moment_z_scores(draws, mean, cov)
    assert max(mean_z / MEAN_Z_MAX, cov_z / COV_Z_MAX) > 1, (mean_z, cov_z)


@pytest.mark.parametrize("shared_basis", [True, False])
def test_sample_functions_equal_sample_y_bit_for_bit(shared_basis):
    # prior="rff", predict_noise="latent": sample_y(X, S, r) == sample_functions(S, r)(X);
    # the update basis is k(., Z), so the centres are the inducing inputs.
    X, y = sine_data()
    Xq = query_points()
    Z = sparse_inducing_inputs()
    est = _sparse("matern32", shared_basis=shared_basis, n_features=64,
                  predict_noise="latent").fit(X, y)
    functions = est.sample_functions(50, random_state=12)
    values = functions(Xq)
    np.testing.assert_array_equal(values, est.sample_y(Xq, n_samples=50, random_state=12))
    np.testing.assert_array_equal(np.asarray(functions.centers_.cpu()), Z)
    assert tuple(functions.update_weights_.shape) == (10, 50, 1)
    batched = functions.evaluate_batched(np.broadcast_to(Xq[:7], (50, 7, 1)).copy())
    np.testing.assert_allclose(np.asarray(batched), values[:7].T, rtol=0, atol=1e-12)


# ---------------------------------------------------------------- the ELBO as objective


def test_elbo_gradient_equals_finite_differences():
    X, y = sine_data()
    Z = sparse_inducing_inputs()
    kernel = _free_kernel()
    est = PathwiseGPSampler(kernel, inducing_points=Z, optimizer=None, device="cpu").fit(X, y)
    theta = kernel.theta + np.array([0.3, -0.8, -1.5])  # away from the start, inside bounds
    value, grad = est.log_marginal_likelihood(theta, eval_gradient=True)
    reference = _elbo_at(kernel.clone_with_theta(theta), X, y, Z)
    assert abs(value - reference) <= RTOL * abs(reference), (value, reference)
    assert grad.shape == (3,)
    h = 1e-5
    fd = np.empty(3)
    for i in range(3):
        step = np.zeros(3)
        step[i] = h
        fd[i] = (_elbo_at(kernel.clone_with_theta(theta + step), X, y, Z)
                 - _elbo_at(kernel.clone_with_theta(theta - step), X, y, Z)) / (2 * h)
    # (the fixed jitter 1e-8 mean(diag Kzz) = 1e-8 C moves with log C; a gradient that holds
    # it constant differs by j dELBO/dj ~ 9e-7 in that coordinate, inside the tolerance)
    np.testing.assert_allclose(grad, fd, rtol=1e-6, atol=1e-6)
    assert np.abs(fd).min() > 1e-2  # a non-trivial gradient: every coordinate is tested


def test_optimize_inducing_raises_the_elbo():
    # Fixed kernel, poor initial Z (five points crowded in [0, 1] while X covers [0, 4]):
    # learning Z must raise the ELBO, and the reported value must be the ELBO of the
    # fitted inducing_points_ (and stay below the exact LML).
    X, y = sine_data()
    Z0 = np.linspace(0.0, 1.0, 5)[:, None]
    start = _ref(signal_kernel("rbf"), X, y, Z0, SIGMA2)[2]
    est = PathwiseGPSampler(full_kernel("rbf"), inducing_points=Z0, optimize_inducing=True,
                            device="cpu").fit(X, y)
    assert est.inducing_points_.shape == (5, 1)
    assert not np.array_equal(est.inducing_points_, Z0)
    elbo = est.log_marginal_likelihood_value_
    reference = _ref(signal_kernel("rbf"), X, y, est.inducing_points_, SIGMA2)[2]
    assert abs(elbo - reference) <= RTOL * abs(reference), (elbo, reference)
    assert elbo > start + 1.0, (start, elbo)
    assert elbo <= exact_lml(signal_kernel("rbf"), X, y, SIGMA2)


def test_lbfgs_fit_improves_the_start_and_stays_below_the_exact_lml():
    X, y = sine_data()
    Z = sparse_inducing_inputs()
    kernel = _free_kernel()
    start = PathwiseGPSampler(kernel, inducing_points=Z, optimizer=None, device="cpu").fit(X, y)
    est = PathwiseGPSampler(kernel, inducing_points=Z, device="cpu").fit(X, y)
    elbo = est.log_marginal_likelihood_value_
    assert est.n_iter_ >= 1 and len(est.objective_history_) >= 1
    # kernel_ is a real sklearn kernel: plain float hyperparameters, usable in numpy
    tensors = {k: type(v) for k, v in est.kernel_.get_params().items()
               if isinstance(v, torch.Tensor)}
    assert not tensors, f"kernel_ holds torch tensors: {tensors}"
    assert elbo >= start.log_marginal_likelihood_value_
    # the reported value is the ELBO of the fitted kernel_
    reference = _elbo_at(est.kernel_, X, y, Z)
    assert abs(elbo - reference) <= RTOL * abs(reference), (elbo, reference)
    # a lower bound: ELBO(theta) <= exact LML(theta) at the fitted theta
    exact = PathwiseGPSampler(kernel, optimizer=None, device="cpu").fit(X, y)
    exact_value = exact.log_marginal_likelihood(est.kernel_.theta)
    assert elbo <= exact_value, (elbo, exact_value)
    # it is a maximum: an independent L-BFGS-B run on the numpy ELBO (finite-difference
    # gradients) from the same start does not find a better value (by more than 1e-4)
    result = scipy.optimize.minimize(
        lambda t: -_elbo_at(kernel.clone_with_theta(t), X, y, Z), kernel.theta,
        method="L-BFGS-B", bounds=kernel.bounds)
    assert elbo >= -result.fun - 1e-4, (elbo, -result.fun)


def test_sparse_lbfgs_stops_at_a_stationary_point_of_the_bound_per_row():
    """L-BFGS-B on the bound per row with a projected-gradient tolerance of 1e-6 per row
    stops where a tight run continued from its result (scipy's defaults on the whole
    bound, up to 1000 iterations) gains almost nothing: with the gradient tolerance g,
    an irrelevant length scale (bound ~ c - g e^{-2u}) has at most g / 2 per row left."""
    from sklearn.datasets import make_friedman1

    from skgpx.pathwise._optimize import SPARSE_GRADIENT_TOL

    n, d = 3000, 6
    X, y = make_friedman1(n, n_features=d, noise=1.0, random_state=0)
    kernel = ConstantKernel() * RBF(np.ones(d)) + WhiteKernel()
    est = PathwiseGPSampler(kernel, n_inducing=32, normalize_y=True, random_state=0,
                            device="cpu").fit(X, y)
    history = est.objective_history_
    # objective_history_ stays on the scale of the whole bound
    assert min(history) == pytest.approx(-est.log_marginal_likelihood_value_, rel=1e-9)

    def tight(obj_func, initial_theta, bounds):
        result = scipy.optimize.minimize(obj_func, initial_theta, method="L-BFGS-B",
                                         jac=True, bounds=bounds, options={"maxiter": 1000})
        return result.x, result.fun

    continued = PathwiseGPSampler(est.kernel_, inducing_points=est.inducing_points_,
                                  normalize_y=True, optimizer=tight, device="cpu").fit(X, y)
    gain = (continued.log_marginal_likelihood_value_ - est.log_marginal_likelihood_value_) / n
    # at most d g / 2 = 3e-6 per row by the argument above (measured: 5e-11); a tolerance
    # of 1e-3 per row leaves 2e-5
    assert SPARSE_GRADIENT_TOL == 1e-6
    assert gain < 1e-5, gain


def test_presolve_sizes_take_a_tenth_while_there_are_50000_rows():
    from skgpx.pathwise._sgpr._fit import presolve_sizes

    assert presolve_sizes(49_999, "auto") == []
    assert presolve_sizes(50_000, "auto") == [5000]
    assert presolve_sizes(200_000, "auto") == [20_000]
    assert presolve_sizes(1_000_000, "auto") == [10_000, 100_000]
    assert presolve_sizes(3000, 300) == [300]
    assert presolve_sizes(3000, 3000) == []
    assert presolve_sizes(10**6, None) == []


def test_presolve_starts_the_fit_on_all_rows_at_the_subset_optimum(monkeypatch):
    """``presolve_rows``: L-BFGS-B first on a random subset (from the kernel's theta),
    then on all rows from the subset's optimum, ending at the same stationary point of
    the bound as a fit without it (each is within d g / 2 = 3e-6 per row of the tight
    optimum, see the test above); the history holds only the bound on all rows."""
    from sklearn.datasets import make_friedman1

    from skgpx.pathwise import _optimize
    from skgpx.pathwise._sgpr import _fit as sgpr_fit

    calls, lbfgs = [], _optimize.lbfgs

    def spy(obj_func, x0, bounds, max_iter, on_step, n_rows=None):
        x, f = lbfgs(obj_func, x0, bounds, max_iter, on_step, n_rows=n_rows)
        calls.append((n_rows, np.array(x0), x))
        return x, f

    monkeypatch.setattr(_optimize, "lbfgs", spy)  # the fit on all rows
    monkeypatch.setattr(sgpr_fit, "lbfgs", spy)  # the presolves
    n, d = 3000, 6
    X, y = make_friedman1(n, n_features=d, noise=1.0, random_state=0)
    X_before = X.copy()
    kernel = ConstantKernel() * RBF(np.ones(d)) + WhiteKernel()
    fits = {rows: PathwiseGPSampler(kernel, n_inducing=32, normalize_y=True, random_state=0,
                                    presolve_rows=rows, device="cpu").fit(X, y)
            for rows in (None, 300)}
    np.testing.assert_array_equal(X, X_before)
    (cold, x_cold0, _), (sub, x_sub0, x_sub), (full, x_full0, x_full) = calls
    assert (cold, sub, full) == (n, 300, n)
    np.testing.assert_array_equal(x_sub0, x_cold0)  # both from the kernel's theta
    np.testing.assert_array_equal(x_full0, x_sub)
    est = fits[300]
    assert not np.allclose(x_sub, x_cold0)  # the presolve moved the start
    np.testing.assert_allclose(est.kernel_.theta, x_full)
    assert est.objective_history_[0] == pytest.approx(
        -est.log_marginal_likelihood(x_sub), rel=1e-9)
    gap = (est.log_marginal_likelihood_value_ - fits[None].log_marginal_likelihood_value_) / n
    assert abs(gap) < 6e-6, gap


@pytest.mark.parametrize("name", KERNEL_IDS)
def test_elbo_equals_exact_lml_when_Z_is_X(name):
    # m = n, Z = X: Q = Kxx and the bound is tight.  A Cholesky jitter j <= 1e-8 mean(diag)
    # on Kzz (RBF's Kxx is singular) moves the bound by at most ~ n j / sigma^2 = 3e-6,
    # i.e. < 1e-6 relative to |LML| ~ 30.
    X, y = sine_data()
    est = _sparse(name, inducing_points=X).fit(X, y)
    exact = PathwiseGPSampler(full_kernel(name), optimizer=None, device="cpu").fit(X, y)
    lml = exact.log_marginal_likelihood_value_
    assert abs(lml - exact_lml(signal_kernel(name), X, y, SIGMA2)) <= 1e-10 * abs(lml)
    assert abs(est.log_marginal_likelihood_value_ - lml) <= 1e-6 * abs(lml), (
        est.log_marginal_likelihood_value_, lml)


# ------------------------------------------------------------- n_inducing and validation


def test_kmeanspp_initialisation_is_reproducible():
    X, y = sine_data()

    def fit(seed):
        return _sparse("rbf", n_inducing=5, random_state=seed).fit(X, y)

    a, b, c = fit(0), fit(0), fit(1)
    assert a.inducing_points_.shape == (5, 1)
    np.testing.assert_array_equal(a.inducing_points_, b.inducing_points_)
    np.testing.assert_array_equal(a.q_mu_, b.q_mu_)
    assert not np.array_equal(np.sort(a.inducing_points_, 0), np.sort(c.inducing_points_, 0))
    # k-means++ spreads the points over the data: inside its range, pairwise distinct
    Z = a.inducing_points_[:, 0]
    assert Z.min() >= X.min() and Z.max() <= X.max()
    assert len(np.unique(Z)) == 5
    # the fitted state is the SGPR optimum for the chosen Z
    mu, _, elbo = _ref(signal_kernel("rbf"), X, y, a.inducing_points_, SIGMA2)
    _assert_close(a.q_mu_, mu, RTOL, "q_mu_ at the k-means++ Z")
    assert abs(a.log_marginal_likelihood_value_ - elbo) <= RTOL * abs(elbo)


def _rows_of(Z, X):
    """Index in X of each row of Z (asserting that every row of Z is a row of X)."""
    idx = []
    for z in Z:
        hits = np.flatnonzero((X == z).all(axis=1))
        assert hits.size >= 1, f"{z} is not a row of X"
        idx.append(hits[0])
    return np.array(idx)


@pytest.mark.parametrize("n_inducing, m", [(15, 15), (20, 20), (50, 30)],
                         ids=["m=n/2", "m>n/2", "m>n-capped"])
def test_large_n_inducing_picks_distinct_rows_of_X(n_inducing, m):
    X, y = sine_data()
    est = _sparse("matern12", n_inducing=n_inducing, random_state=0).fit(X, y)
    assert est.inducing_points_.shape == (m, 1)
    idx = _rows_of(est.inducing_points_, X)
    assert len(np.unique(idx)) == m  # a subset, no row twice
    again = _sparse("matern12", n_inducing=n_inducing, random_state=0).fit(X, y)
    np.testing.assert_array_equal(est.inducing_points_, again.inducing_points_)


def test_inducing_points_with_wrong_number_of_columns_raise():
    X, y = sine_data()
    est = _sparse("rbf", inducing_points=np.zeros((4, 2)))
    with pytest.raises(ValueError, match="inducing_points"):
        est.fit(X, y)


# ---------------------------------------------------------------------------- Adam


def _lbfgs_optimum(X, y, Z):
    est = PathwiseGPSampler(_free_kernel(), inducing_points=Z, device="cpu").fit(X, y)
    return est.log_marginal_likelihood_value_


def test_adam_full_batch_reaches_the_lbfgs_optimum(capsys):
    # minibatch_size=None: every step is an Adam step on the full collapsed bound, exactly
    # max_iter of them (the progress bar counts steps).  From the start (log theta = 0,
    # ELBO -34.8) the L-BFGS optimum (log theta = (-0.73, -0.36, -1.92), ELBO -20.95) is
    # < 2 away in every coordinate: < 40 steps of size lr = 0.05.  Near the optimum Adam's
    # steps stay <= lr per coordinate, so the ELBO gap is <= 1/2 lambda_max d lr^2 =
    # 0.5 * 12.3 * 3 * 0.05^2 = 0.046 (Hessian eigenvalues 12.3, 7.3, 0.89 by finite
    # differences, d = 3).  L-BFGS's value is a maximum: Adam cannot exceed it.
    X, y = sine_data()
    Z = sparse_inducing_inputs()
    best = _lbfgs_optimum(X, y, Z)
    lr, steps = 0.05, 200
    est = PathwiseGPSampler(_free_kernel(), inducing_points=Z, optimizer="adam",
                            learning_rate=lr, max_iter=steps, device="cpu", verbose=1,
                            random_state=0).fit(X, y)
    assert f"{steps}/{steps}" in capsys.readouterr().err
    assert est.n_iter_ == len(est.objective_history_) >= steps
    elbo = est.log_marginal_likelihood_value_
    reference = _elbo_at(est.kernel_, X, y, Z)
    assert abs(elbo - reference) <= RTOL * abs(reference), (elbo, reference)
    assert best - 0.5 * 12.3 * 3 * lr**2 <= elbo <= best + 1e-6, (elbo, best)


def test_adam_minibatch_improves_the_elbo_and_is_reproducible():
    # minibatch_size=b: the stochastic uncollapsed SVGP bound; judged on the collapsed
    # ELBO (the best bound over all q(u)) of the learnt kernel, computed by the oracle.
    X, y = sine_data()
    Z = sparse_inducing_inputs()
    kernel = _free_kernel(length_scale=3.0, noise=1.0)  # a poor start

    def fit(seed):
        return PathwiseGPSampler(kernel, inducing_points=Z, optimizer="adam", minibatch_size=8,
                                 learning_rate=0.1, max_iter=100, device="cpu",
                                 random_state=seed).fit(X, y)

    a, b, c = fit(0), fit(0), fit(1)
    start = _elbo_at(kernel, X, y, Z)
    learnt = _elbo_at(a.kernel_, X, y, Z)
    assert learnt > start + 5.0, (start, learnt)  # -37.6 -> about -23 (the optimum: -20.9)
    assert a.n_iter_ >= 1 and np.all(np.isfinite(a.objective_history_))
    np.testing.assert_array_equal(a.kernel_.theta, b.kernel_.theta)
    np.testing.assert_array_equal(a.q_mu_, b.q_mu_)
    np.testing.assert_array_equal(a.q_sqrt_, b.q_sqrt_)
    Xq = query_points()
    np.testing.assert_array_equal(a.predict(Xq), b.predict(Xq))
    assert not np.array_equal(a.kernel_.theta, c.kernel_.theta)  # other mini-batch order


# ------------------------------------------------------------------------- chunking


def test_row_chunks_do_not_change_the_fit_or_predictions():
    # The bound is accumulated over row chunks of batch_size; 7 splits n = 30 unevenly.  Only
    # the summation order changes: with cond(Kzz) = 4e2 at length scale 0.5 (5e3 at
    # theta + 0.2) the round-off of the m x m solves stays ~1e-13 relative, far below 1e-10.
    X, y = sine_data()
    Xq = query_points()
    kernel = _free_kernel(length_scale=0.5, noise=0.1)
    Z = sparse_inducing_inputs()
    ref = PathwiseGPSampler(kernel, inducing_points=Z, optimizer=None, device="cpu").fit(X, y)
    small = PathwiseGPSampler(kernel, inducing_points=Z, optimizer=None, batch_size=7,
                              device="cpu").fit(X, y)
    elbo = ref.log_marginal_likelihood_value_
    assert abs(small.log_marginal_likelihood_value_ - elbo) <= 1e-10 * abs(elbo)
    _assert_close(small.q_mu_, ref.q_mu_, 1e-10, "q_mu_")
    _assert_close(small.q_sqrt_ @ small.q_sqrt_.T, ref.q_sqrt_ @ ref.q_sqrt_.T, 1e-10,
                  "q_sqrt_ q_sqrt_^T")
    theta = kernel.theta + 0.2
    v_ref, g_ref = ref.log_marginal_likelihood(theta, eval_gradient=True)
    v_small, g_small = small.log_marginal_likelihood(theta, eval_gradient=True)
    assert abs(v_small - v_ref) <= 1e-10 * abs(v_ref)
    np.testing.assert_allclose(g_small, g_ref, rtol=1e-10, atol=1e-10)
    for r, s in zip(ref.predict(Xq, return_std=True), small.predict(Xq, return_std=True)):
        _assert_close(s, r, 1e-10, "predict")
    _assert_close(small.predict(Xq, return_cov=True)[1], ref.predict(Xq, return_cov=True)[1],
                  1e-10, "predict cov")
