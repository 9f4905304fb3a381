"""The Laplace classifier's maths and contract: mode, gradient, links, lock-step L-BFGS-B,
latent draws, errors.

Oracles are independent of skgpx: scikit-learn's binary Laplace estimator (its Newton
search and Algorithm 5.1 on numpy), autograd derivatives, central finite differences,
Gauss-Hermite quadrature and scipy's L-BFGS-B run sequentially.
"""

import numpy as np
import pytest
import scipy.integrate
import scipy.optimize
import torch
from scipy.special import erf
from sklearn.gaussian_process import GaussianProcessClassifier as SklearnGPC
from sklearn.gaussian_process._gpc import _BinaryGaussianProcessClassifierLaplace
from sklearn.gaussian_process.kernels import (
    RBF, CompoundKernel, Matern, RationalQuadratic, WhiteKernel,
)
from sklearn.gaussian_process.kernels import ConstantKernel as C
from sklearn.gaussian_process.tests._mini_sequence_kernel import MiniSeqKernel

from skgpx import InsufficientMemoryError, PathwiseGPClassifier
from skgpx.kernels import TorchKernel
from skgpx.pathwise._laplace import _fit as _laplace_fit, _newton as _laplace
from skgpx.pathwise._laplace._newton import COEFS, LAMBDAS, link_derivatives, positive_probability
from skgpx.pathwise._laplace._fit import HyperparameterMap, LaplaceProblems, lockstep_lbfgs

from .._oracles import COV_Z_MAX, MEAN_Z_MAX, moment_z_scores  # noqa: F401

X = np.linspace(0, 10, 30)[:, None]
Y_BIN = (np.sin(X[:, 0]) > 0).astype(int)
Y_MC = np.digitize(np.sin(X[:, 0]), [-0.35, 0.35])
XQ = np.linspace(-1, 11, 40)[:, None]
KERNEL = C(2.0, (1e-2, 1e2)) * RBF([1.0], (1e-2, 1e2))


def _problems(kernel, labels, link="logit", max_iter=100, warm_start=False):
    Y = torch.tensor(np.stack(labels).astype(float), dtype=torch.float64)
    return LaplaceProblems(TorchKernel(kernel), torch.tensor(X), Y, link, max_iter, warm_start)


def test_batched_mode_is_sklearns_mode_problem_by_problem():
    # three problems with their own labels and hyperparameters in one batch (one stops
    # earlier than the others): each equals scikit-learn's sequential Newton search
    labels = [Y_BIN, (Y_MC == 0).astype(int), (Y_MC == 2).astype(int)]
    thetas = [KERNEL.theta, KERNEL.theta + [1.5, -0.7], KERNEL.theta + [-2.0, 1.0]]
    problems = _problems(KERNEL, labels)
    _, mode = problems.mode([0, 1, 2], torch.tensor(np.stack(thetas)))
    assert len(set(mode.n_iter.tolist())) > 1  # the batch shrinks as problems finish
    for c, (y, theta) in enumerate(zip(labels, thetas)):
        ref = _BinaryGaussianProcessClassifierLaplace(KERNEL.clone_with_theta(theta))
        ref.y_train_ = y
        K = ref.kernel(X)
        lml, (pi, W_sr, L, _, a) = ref._posterior_mode(K, return_temporaries=True)
        assert abs(float(mode.lml[c]) - lml) < 1e-10
        for ours, theirs in [(mode.g[c], y - pi), (mode.W_sr[c], W_sr), (mode.L[c], L),
                             (mode.a[c], a), (mode.f[c], ref.f_cached)]:
            np.testing.assert_allclose(ours.numpy(), theirs, rtol=0, atol=1e-10)


@pytest.mark.parametrize("kernel", [KERNEL, C(0.5) * Matern([2.0], nu=1.5) + WhiteKernel(0.1),
                                    RBF([0.3])])
def test_logit_gradient_is_sklearns_and_central_differences(kernel):
    ref = SklearnGPC(kernel, optimizer=None).fit(X, Y_BIN)
    problems = _problems(kernel, [Y_BIN])
    theta = kernel.theta + 0.3
    value, grad = problems.objective([0], theta[None], True)
    lml, lml_grad = ref.log_marginal_likelihood(theta, eval_gradient=True)
    assert abs(value[0] - lml) < 1e-10
    np.testing.assert_allclose(grad[0], lml_grad, rtol=1e-9, atol=1e-10)
    central = _central_differences(problems, theta)
    np.testing.assert_allclose(grad[0], central, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("link", ["logit", "probit"])
def test_numpy_newton_search_is_the_torch_search(link):
    # the CPU path (numpy and LAPACK) against the torch path of any device, with problems
    # that stop at different steps: every returned field, L as a lower factor of B
    labels = [Y_BIN, (Y_MC == 0).astype(int), (Y_MC == 2).astype(int)]
    thetas = torch.tensor(np.stack([KERNEL.theta, KERNEL.theta + [1.5, -0.7],
                                    KERNEL.theta + [-2.0, 1.0]]))
    problems = _problems(KERNEL, labels, link=link)
    K = problems.kernel_matrices(thetas)
    Y, f0 = problems.Y, torch.zeros_like(problems.Y)
    ours = _laplace.posterior_mode(K, Y, f0, link, 100)
    torch_mode = _laplace._posterior_mode_torch(K, Y, f0, link, 100)
    assert len(set(ours.n_iter.tolist())) > 1
    assert ours.n_iter.tolist() == torch_mode.n_iter.tolist()
    for name in ("lml", "f", "g", "W", "dW", "W_sr", "L", "a"):
        np.testing.assert_allclose(getattr(ours, name).numpy(),
                                   getattr(torch_mode, name).numpy(), rtol=0, atol=1e-10)
    L, W_sr = ours.L.numpy(), ours.W_sr.numpy()
    B = np.eye(len(X)) + W_sr[:, :, None] * K.numpy() * W_sr[:, None, :]
    np.testing.assert_array_equal(L, np.tril(L))
    np.testing.assert_allclose(L @ L.transpose(0, 2, 1), B, rtol=0, atol=1e-12)
    # capped at one step: the values after it, as scikit-learn returns them
    one = _laplace.posterior_mode(K, Y, f0, link, 1)
    np.testing.assert_allclose(one.lml.numpy(),
                               _laplace._posterior_mode_torch(K, Y, f0, link, 1).lml.numpy(),
                               rtol=0, atol=1e-10)


@pytest.mark.parametrize("kernel, mapped", [
    (C(1.5) * RBF([1.0, 2.0, 0.5]), True),
    (C(2.0, "fixed") * RBF(0.8) + WhiteKernel(0.1), True),  # a fixed signal scale
    (C(1.0) * Matern([0.5, 1.0, 2.0], nu=1.5) + WhiteKernel(0.1) + WhiteKernel(0.2),
     False),  # the noise a sum of two levels: the kernel's own maps, autograd
])
def test_hyperparameter_map_gives_the_kernels_values_and_sklearns_gradient(kernel, mapped):
    torch_kernel = TorchKernel(kernel)
    hyper = HyperparameterMap(torch_kernel, torch_kernel.stationary_signal())
    assert (hyper.index is not None) == mapped
    thetas = torch.tensor(kernel.theta + np.random.RandomState(1).normal(size=(4, len(
        kernel.theta))))
    np.testing.assert_allclose(hyper(thetas).numpy(),
                               torch.stack([hyper._direct(t) for t in thetas]).numpy(),
                               rtol=1e-14, atol=0)
    ref = SklearnGPC(kernel, optimizer=None).fit(X3, Y3)
    Y = torch.tensor(Y3[None].astype(float))
    problems = LaplaceProblems(torch_kernel, torch.tensor(X3), Y, "logit", 100, False)
    for theta in thetas.numpy()[:2]:
        value, grad = problems.objective([0], theta[None], True)
        lml, lml_grad = ref.log_marginal_likelihood(theta, eval_gradient=True)
        assert abs(value[0] - lml) < 1e-10
        np.testing.assert_allclose(grad[0], lml_grad, rtol=1e-8, atol=1e-10)


def test_fitted_mode_reuses_the_last_evaluation_only_at_its_theta(monkeypatch):
    labels = [Y_BIN, (Y_MC == 0).astype(int), (Y_MC == 2).astype(int)]
    thetas = np.stack([KERNEL.theta, KERNEL.theta + [1.5, -0.7], KERNEL.theta + [-2.0, 1.0]])
    problems = _problems(KERNEL, labels)
    problems.objective([0, 2], thetas[[0, 2]], True)  # two rounds, as lock step makes them
    problems.objective([1], thetas[[1]], True)
    searches = []
    original = _laplace_fit.posterior_mode

    def counted(*args):
        searches.append(1)
        return original(*args)

    monkeypatch.setattr(_laplace_fit, "posterior_mode", counted)
    fresh = _problems(KERNEL, labels).mode([0, 1, 2], torch.tensor(thetas))[1]
    searches.clear()
    reused = problems.fitted_mode(torch.tensor(thetas))
    assert searches == []
    for name in ("lml", "f", "g", "W", "dW", "W_sr", "L", "a", "n_iter"):
        np.testing.assert_array_equal(getattr(reused, name).numpy(),
                                      getattr(fresh, name).numpy())
    assert reused.L.transpose(-1, -2).is_contiguous()  # the layout posterior_mode returns
    moved = thetas.copy()
    moved[1] += 0.25
    again = problems.fitted_mode(torch.tensor(moved))
    assert searches == [1]
    expected = _problems(KERNEL, labels).mode([0, 1, 2], torch.tensor(moved))[1]
    np.testing.assert_array_equal(again.f.numpy(), expected.f.numpy())


X3 = np.random.RandomState(0).normal(size=(25, 3))
Y3 = (X3[:, 0] + np.sin(2 * X3[:, 1]) > 0).astype(int)


@pytest.mark.parametrize("kernel", [
    C(1.5) * RBF([1.0, 2.0, 0.5]),  # ARD: the closed-form stationary gradient
    C(0.8) * Matern(1.3, nu=2.5) + WhiteKernel(0.05),  # isotropic, with a white term
    RBF(0.7) + WhiteKernel(0.1),  # a sum: the autograd path
    C(1.0) * RationalQuadratic(1.0, 2.0),  # not stationary-closed-form: autograd
])
def test_gradient_is_sklearns_in_three_dimensions(kernel):
    ref = SklearnGPC(kernel, optimizer=None).fit(X3, Y3)
    Y = torch.tensor(Y3[None].astype(float))
    problems = LaplaceProblems(TorchKernel(kernel), torch.tensor(X3), Y, "logit", 100, False)
    theta = kernel.theta - 0.2
    value, grad = problems.objective([0], theta[None], True)
    lml, lml_grad = ref.log_marginal_likelihood(theta, eval_gradient=True)
    assert abs(value[0] - lml) < 1e-10
    np.testing.assert_allclose(grad[0], lml_grad, rtol=1e-8, atol=1e-10)


def _central_differences(problems, theta, eps=1e-4):
    out = []
    for e in np.eye(len(theta)):
        up = problems.objective([0], (theta + eps * e)[None], False)[0][0]
        down = problems.objective([0], (theta - eps * e)[None], False)[0][0]
        out.append((up - down) / (2 * eps))
    return np.array(out)


@pytest.mark.parametrize("theta_shift", [0.0, 1.0, -1.0])
def test_probit_gradient_is_central_differences(theta_shift):
    problems = _problems(KERNEL, [Y_BIN], link="probit")
    theta = KERNEL.theta + theta_shift
    _, grad = problems.objective([0], theta[None], True)
    np.testing.assert_allclose(grad[0], _central_differences(problems, theta),
                               rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("link", ["logit", "probit"])
def test_link_derivatives_are_autograds(link):
    f = torch.linspace(-40, 40, 161, dtype=torch.float64, requires_grad=True)
    for label in (0.0, 1.0):
        y = torch.full_like(f, label)
        log_lik, g, W, dW = link_derivatives(f, y, link)
        (d1,) = torch.autograd.grad(log_lik.sum(), f, create_graph=True)
        (d2,) = torch.autograd.grad(d1.sum(), f, create_graph=True)
        (d3,) = torch.autograd.grad(d2.sum(), f)
        for ours, reference in [(g, d1), (W, -d2), (dW, -d3)]:
            assert torch.isfinite(ours).all()
            # atol: in the probit's far tail (|f| > 20) W' ~ 1/f^3 is a difference of terms
            # ~ f^3, and both sides lose about 1e-9 there
            np.testing.assert_allclose(ours.detach(), reference.detach(), rtol=1e-6,
                                       atol=1e-8)


def test_positive_probability_logit_is_sklearns_formula_and_probit_is_exact():
    mean = np.linspace(-6, 6, 25)
    var = np.linspace(0.01, 9.0, 25)
    # scikit-learn's predict_proba, literally
    alpha = 1 / (2 * var)
    lam, coefs = np.array(LAMBDAS)[:, None], np.array(COEFS)[:, None]
    integrals = (np.sqrt(np.pi / alpha) * erf(lam * mean * np.sqrt(alpha / (alpha + lam**2)))
                 / (2 * np.sqrt(var * 2 * np.pi)))
    sklearns = (coefs * integrals).sum(axis=0) + 0.5 * coefs.sum()
    ours = positive_probability(torch.tensor(mean), torch.tensor(var), "logit").numpy()
    np.testing.assert_allclose(ours, sklearns, rtol=0, atol=1e-12)
    # probit: E[Phi(f)] by adaptive quadrature
    quadrature = [scipy.integrate.quad(
        lambda f, m=m, v=v: 0.5 * (1 + erf(f / np.sqrt(2))) * np.exp(-(f - m) ** 2 / (2 * v))
        / np.sqrt(2 * np.pi * v), -np.inf, np.inf, epsabs=1e-13, epsrel=1e-13)[0]
        for m, v in zip(mean, var)]
    probit = positive_probability(torch.tensor(mean), torch.tensor(var), "probit").numpy()
    np.testing.assert_allclose(probit, quadrature, rtol=0, atol=1e-10)
    # a zero variance (round-off clips it there) gives finite values, never NaN
    zero = positive_probability(torch.tensor(mean), torch.zeros(25), "logit")
    assert torch.isfinite(zero).all()


def _quadratics(centres):
    def single(i, x):
        d = x - centres[i]
        return float(d @ d + 0.1 * np.sum(d**4)), 2 * d + 0.4 * d**3
    return single


def test_lockstep_lbfgs_is_scipys_run_by_run():
    centres = np.array([[1.0, -2.0], [0.5, 0.5], [-3.0, 2.0]])
    starts = [np.zeros(2), np.ones(2), np.array([2.0, -1.0])]
    bounds = np.array([[-2.5, 3.0], [-3.0, 3.0]])
    single = _quadratics(centres)
    batches = []

    def evaluate(members, thetas):
        batches.append(list(members))
        values, grads = zip(*[single(i, x) for i, x in zip(members, thetas)])
        return np.array(values), np.array(grads)

    results = lockstep_lbfgs(evaluate, starts, bounds)
    assert max(len(b) for b in batches) == 3  # evaluated together
    for i, result in enumerate(results):
        expected = scipy.optimize.minimize(lambda x: single(i, x), starts[i],
                                           method="L-BFGS-B", jac=True, bounds=bounds)
        np.testing.assert_array_equal(result.x, expected.x)
        assert result.nfev == expected.nfev and result.fun == expected.fun


def test_lockstep_lbfgs_hands_back_an_evaluation_error():
    def evaluate(members, thetas):
        if len(evaluate.calls) == 2:
            raise FloatingPointError("boom")
        evaluate.calls.append(members)
        return np.zeros(len(members)), np.ones((len(members), 2))

    evaluate.calls = []
    with pytest.raises(FloatingPointError, match="boom"):
        lockstep_lbfgs(evaluate, [np.zeros(2), np.ones(2)], np.array([[-1, 1], [-1, 1.0]]))


# ------------------------------------------------------------------ latent draws
S, N_FEATURES = 20_000, 2048


def _laplace_moments(binary, Xq):
    """Latent mean and covariance at Xq from a fitted scikit-learn binary estimator."""
    Ks = binary.kernel_(binary.X_train_, Xq)
    mean = Ks.T @ (binary.y_train_ - binary.pi_)
    v = np.linalg.solve(binary.L_, binary.W_sr_[:, None] * Ks)
    cov = binary.kernel_(Xq) - v.T @ v
    return mean, cov


def _check_draws(draws, mean, cov, sigma_f2):
    mean_z, _, abs_err, cov_se = moment_z_scores(draws, mean, cov)
    assert mean_z <= MEAN_Z_MAX, f"mean z-score {mean_z:.2f}"
    # a shared random-feature basis: covariance bias O(sigma_f^2 / sqrt(F)) (draws/test_moments.py)
    excess = abs_err - (4.0 * sigma_f2 / np.sqrt(N_FEATURES) + 5.0 * cov_se)
    assert excess.max() <= 0, f"covariance error exceeds its bound by {excess.max():.3g}"


def test_binary_latent_draws_have_the_laplace_moments():
    kernel = C(2.0, "fixed") * RBF(1.5, "fixed")
    theirs = SklearnGPC(kernel).fit(X, Y_BIN)
    ours = PathwiseGPClassifier(kernel, n_features=N_FEATURES, device="cpu").fit(X, Y_BIN)
    draws = ours.sample_functions(S, random_state=0)(XQ)
    assert draws.shape == (40, S)
    _check_draws(draws, *_laplace_moments(theirs.base_estimator_, XQ), sigma_f2=2.0)
    # the draws' own moments are also those latent_mean_and_variance reports
    mean, var = ours.latent_mean_and_variance(XQ)
    np.testing.assert_allclose(var, np.diag(_laplace_moments(theirs.base_estimator_, XQ)[1]),
                               rtol=0, atol=1e-10)


# slow: the binary draws' moments above carry the fast tier; one-vs-rest draws are the
# binary problems' draws side by side (their latent moments: laplace/test_sklearn_gpc.py)
@pytest.mark.slow
def test_one_vs_rest_draws_have_each_class_laplace_moments():
    kernel = C(1.0, (1e-2, 1e2)) * RBF(1.0, (1e-2, 1e2))
    theirs = SklearnGPC(kernel).fit(X, Y_MC)
    ours = PathwiseGPClassifier(kernel, n_features=N_FEATURES, device="cpu").fit(X, Y_MC)
    draws = ours.sample_functions(S, random_state=1)(XQ)
    assert draws.shape == (40, 3, S)
    for c, binary in enumerate(theirs.base_estimator_.estimators_):
        sigma_f2 = float(np.exp(ours.kernel_.kernels[c].theta[0]))
        _check_draws(draws[:, c], *_laplace_moments(binary, XQ), sigma_f2=sigma_f2)
    # class-probability draws: the links of those paths, normalised as one-vs-rest does
    probas = ours.sample_y(XQ, n_samples=5, random_state=1)
    latent = ours.sample_functions(5, random_state=1)(XQ)
    expected = 1 / (1 + np.exp(-latent))
    np.testing.assert_allclose(probas, expected / expected.sum(1, keepdims=True), rtol=1e-12)


def test_binary_sample_y_layout_and_probit_link():
    est = PathwiseGPClassifier(RBF(1.0, "fixed"), link="probit", device="cpu").fit(X, Y_BIN)
    probas = est.sample_y(XQ, n_samples=4, random_state=3)
    assert probas.shape == (40, 2, 4)
    np.testing.assert_allclose(probas.sum(1), 1.0, rtol=0, atol=1e-12)
    latent = est.sample_functions(4, random_state=3)(XQ)
    np.testing.assert_allclose(probas[:, 1], 0.5 * (1 + erf(latent / np.sqrt(2))), rtol=1e-12)
    # probit: the averaged probability is exactly Phi(mu / sqrt(1 + var))
    mean, var = est.latent_mean_and_variance(XQ)
    np.testing.assert_allclose(est.predict_proba(XQ)[:, 1],
                               0.5 * (1 + erf(mean / np.sqrt(1 + var) / np.sqrt(2))),
                               rtol=0, atol=1e-12)


# ------------------------------------------------------------------ contract and errors


@pytest.mark.parametrize("params, error, match", [
    (dict(multi_class="softmax"), ValueError, "needs the sparse mode"),
    (dict(optimizer="adam"), ValueError, "belongs to the sparse mode"),
    (dict(n_inducing=16, multi_class="one_vs_one"), ValueError, "exact-mode option"),
    (dict(n_inducing=16, inducing_points=np.zeros((4, 1))), ValueError, "at most one"),
    (dict(n_inducing=16, warm_start=True), ValueError, "exact-mode option"),
    (dict(kernel=CompoundKernel([RBF()])), ValueError, "kernel cannot be a CompoundKernel"),
    (dict(n_features=3), ValueError, "must be even"),
])
def test_bad_options_fail_before_any_work(params, error, match):
    with pytest.raises(error, match=match):
        PathwiseGPClassifier(**params).fit(X, Y_BIN)


def test_one_class_and_one_vs_one_probabilities():
    with pytest.raises(ValueError, match="needs at least 2 classes; y has 1 class: 'a'"):
        PathwiseGPClassifier().fit(X, np.full(30, "a"))
    ovo = PathwiseGPClassifier(KERNEL, multi_class="one_vs_one", device="cpu").fit(X, Y_MC)
    assert not hasattr(ovo, "predict_proba")
    with pytest.raises(ValueError, match="one_vs_one multi-class mode does not support"):
        ovo.predict_proba(X)
    assert set(ovo.predict(X)) <= {0, 1, 2}
    assert len(ovo.base_estimator_.estimators_) == 3
    with pytest.raises(ValueError, match="Shape of theta must be either 2 or 6"):
        ovo.log_marginal_likelihood(np.zeros(3))
    with pytest.raises(NotImplementedError, match="not implemented for multi-class"):
        ovo.log_marginal_likelihood(np.zeros(2), eval_gradient=True)


def test_memory_guard_names_the_sparse_mode(monkeypatch):
    monkeypatch.setenv("SKGPX_MEMORY_LIMIT", "20kB")
    with pytest.raises(InsufficientMemoryError, match=r"sparse mode \(n_inducing=256\)"):
        PathwiseGPClassifier(device="cpu").fit(X, Y_BIN)


def test_structured_inputs_and_boolean_labels():
    Xs = ["A", "AB", "B", "BBA"]
    ys = np.array([True, False, True, False])
    est = PathwiseGPClassifier(MiniSeqKernel(baseline_similarity_bounds="fixed"),
                               device="cpu").fit(Xs, ys)
    assert est.predict(Xs).dtype == bool
    with pytest.raises(NotImplementedError, match="random features"):
        est.sample_functions(2)


def test_verbose_shows_a_progress_bar(capfd):
    est = PathwiseGPClassifier(KERNEL, verbose=1, device="cpu").fit(X, Y_MC)
    _, err = capfd.readouterr()
    assert "PathwiseGPClassifier fit" in err and est.n_iter_ == len(est.objective_history_) > 1


def test_warm_start_from_the_fitted_mode():
    # (warm-started fits equal scikit-learn's: laplace/test_sklearn_gpc.py) log_marginal_likelihood
    # starts its Newton search from the fitted mode, and reaches the fitted value
    warm = PathwiseGPClassifier(KERNEL, warm_start=True, device="cpu").fit(X, Y_BIN)
    cold = PathwiseGPClassifier(KERNEL, optimizer=None, device="cpu").fit(X, Y_BIN)
    theta = warm.kernel_.theta
    assert warm.log_marginal_likelihood(theta) == pytest.approx(
        warm.log_marginal_likelihood_value_, abs=1e-7)
    assert warm.log_marginal_likelihood(theta) == pytest.approx(
        cold.log_marginal_likelihood(theta), abs=1e-7)


def test_clone_kernel_false_moves_kernel_but_not_the_fitted_posterior():
    est = PathwiseGPClassifier(KERNEL, device="cpu").fit(X, Y_MC)
    proba, draws = est.predict_proba(XQ), est.sample_y(XQ, 3, random_state=0)
    theta = est.kernel_.theta + 0.5
    est.log_marginal_likelihood(theta, clone_kernel=False)
    np.testing.assert_allclose(est.kernel_.theta, theta, rtol=1e-12)  # sklearn side effect
    np.testing.assert_array_equal(est.predict_proba(XQ), proba)
    np.testing.assert_array_equal(est.sample_y(XQ, 3, random_state=0), draws)
