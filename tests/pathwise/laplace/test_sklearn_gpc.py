"""scikit-learn's own ``sklearn/gaussian_process/tests/test_gpc.py`` (1.9.1), with
:class:`skgpx.PathwiseGPClassifier` substituted, and parity with scikit-learn itself.

The ported tests keep scikit-learn's data, kernels, assertions and messages; only the class
changes (``device="cpu"``), and ``global_random_seed`` (scikit-learn's fixture, 42 by default)
runs over two seeds.  The parity tests fit scikit-learn's
``GaussianProcessClassifier`` and ours on the same data and compare the fitted ``theta``, the
log marginal likelihood and the probabilities (1e-6, the issue's tolerance).
"""

import functools
import warnings

import numpy as np
import pytest
import scipy.special
from sklearn.base import clone
from sklearn.datasets import load_breast_cancer, load_iris
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process import GaussianProcessClassifier as SklearnGPC
from sklearn.gaussian_process.kernels import RBF, CompoundKernel, ExpSineSquared, WhiteKernel
from sklearn.gaussian_process.kernels import ConstantKernel as C
from sklearn.gaussian_process.tests._mini_sequence_kernel import MiniSeqKernel
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler
from sklearn.utils._testing import assert_allclose, assert_almost_equal, assert_array_equal

from skgpx import PathwiseGPClassifier

GaussianProcessClassifier = functools.partial(PathwiseGPClassifier, device="cpu")
SEEDS = [0, 42]  # scikit-learn's global_random_seed is 42 unless its environment says more


def f(x):
    return np.sin(x)


X = np.atleast_2d(np.linspace(0, 10, 30)).T
X2 = np.atleast_2d([2.0, 4.0, 5.5, 6.5, 7.5]).T
y = np.array(f(X).ravel() > 0, dtype=int)
fX = f(X).ravel()
y_mc = np.empty(y.shape, dtype=int)  # multi-class
y_mc[fX < -0.35] = 0
y_mc[(fX >= -0.35) & (fX < 0.35)] = 1
y_mc[fX > 0.35] = 2


fixed_kernel = RBF(length_scale=1.0, length_scale_bounds="fixed")
kernels = [
    RBF(length_scale=0.1),
    fixed_kernel,
    RBF(length_scale=1.0, length_scale_bounds=(1e-3, 1e3)),
    C(1.0, (1e-2, 1e2)) * RBF(length_scale=1.0, length_scale_bounds=(1e-3, 1e3)),
]
non_fixed_kernels = [kernel for kernel in kernels if kernel != fixed_kernel]


# ------------------------------------------------------------- scikit-learn's test_gpc.py


@pytest.mark.parametrize("kernel", kernels)
def test_predict_consistent(kernel):
    gpc = GaussianProcessClassifier(kernel=kernel).fit(X, y)
    assert_array_equal(gpc.predict(X), gpc.predict_proba(X)[:, 1] >= 0.5)


def test_predict_consistent_structured():
    X = ["A", "AB", "B"]
    y = np.array([True, False, True])
    kernel = MiniSeqKernel(baseline_similarity_bounds="fixed")
    gpc = GaussianProcessClassifier(kernel=kernel).fit(X, y)
    assert_array_equal(gpc.predict(X), gpc.predict_proba(X)[:, 1] >= 0.5)


@pytest.mark.parametrize("kernel", non_fixed_kernels)
def test_lml_improving(kernel):
    gpc = GaussianProcessClassifier(kernel=kernel).fit(X, y)
    assert gpc.log_marginal_likelihood(gpc.kernel_.theta) > gpc.log_marginal_likelihood(
        kernel.theta
    )


@pytest.mark.parametrize("kernel", kernels)
def test_lml_precomputed(kernel):
    gpc = GaussianProcessClassifier(kernel=kernel).fit(X, y)
    assert_almost_equal(
        gpc.log_marginal_likelihood(gpc.kernel_.theta), gpc.log_marginal_likelihood(), 7
    )


@pytest.mark.parametrize("kernel", kernels)
def test_lml_without_cloning_kernel(kernel):
    gpc = GaussianProcessClassifier(kernel=kernel).fit(X, y)
    input_theta = np.ones(gpc.kernel_.theta.shape, dtype=np.float64)

    gpc.log_marginal_likelihood(input_theta, clone_kernel=False)
    assert_almost_equal(gpc.kernel_.theta, input_theta, 7)


@pytest.mark.parametrize("kernel", non_fixed_kernels)
def test_converged_to_local_maximum(kernel):
    gpc = GaussianProcessClassifier(kernel=kernel).fit(X, y)

    lml, lml_gradient = gpc.log_marginal_likelihood(gpc.kernel_.theta, True)

    assert np.all(
        (np.abs(lml_gradient) < 1e-4)
        | (gpc.kernel_.theta == gpc.kernel_.bounds[:, 0])
        | (gpc.kernel_.theta == gpc.kernel_.bounds[:, 1])
    )


@pytest.mark.parametrize("kernel", non_fixed_kernels)
@pytest.mark.parametrize("length_scale", np.logspace(-3, 3, 13))
def test_lml_gradient(kernel, length_scale):
    kernel = clone(kernel)
    length_scale_param_name = next(
        name for name in kernel.get_params() if name.endswith("length_scale")
    )
    kernel.set_params(**{length_scale_param_name: length_scale})

    gpr = GaussianProcessClassifier(kernel=kernel).fit(X, y)
    _, lml_gradient = gpr.log_marginal_likelihood(kernel.theta, eval_gradient=True)
    # scikit-learn's version (forward differences of 1e-9) is xfailed there
    # (scikit-learn/scikit-learn#31366): the Newton search stops once the lml changes by
    # under 1e-10, which such a step turns into O(0.1) errors.  Central differences of
    # 1e-5 carry O(1e-10 / 1e-5) = 1e-5 of that error and O(1e-10) truncation.
    epsilon = 1e-5
    lml_gradient_approx = [
        (gpr.log_marginal_likelihood(kernel.theta + epsilon * e)
         - gpr.log_marginal_likelihood(kernel.theta - epsilon * e)) / (2 * epsilon)
        for e in np.eye(kernel.theta.shape[0])]
    assert_allclose(lml_gradient, lml_gradient_approx, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("global_random_seed", SEEDS)
def test_random_starts(global_random_seed):
    n_samples, n_features = 25, 2
    rng = np.random.RandomState(global_random_seed)
    X = rng.randn(n_samples, n_features) * 2 - 1
    y = (np.sin(X).sum(axis=1) + np.sin(3 * X).sum(axis=1)) > 0

    kernel = C(1.0, (1e-2, 1e2)) * RBF(
        length_scale=[1e-3] * n_features, length_scale_bounds=[(1e-4, 1e2)] * n_features
    )
    last_lml = -np.inf
    for n_restarts_optimizer in range(5):
        gp = GaussianProcessClassifier(
            kernel=kernel,
            n_restarts_optimizer=n_restarts_optimizer,
            random_state=global_random_seed,
        ).fit(X, y)
        lml = gp.log_marginal_likelihood(gp.kernel_.theta)
        assert lml > last_lml - np.finfo(np.float32).eps
        last_lml = lml


@pytest.mark.parametrize("global_random_seed", SEEDS)
@pytest.mark.parametrize("kernel", non_fixed_kernels)
def test_custom_optimizer(kernel, global_random_seed):
    def optimizer(obj_func, initial_theta, bounds):
        rng = np.random.RandomState(global_random_seed)
        theta_opt, func_min = (
            initial_theta,
            obj_func(initial_theta, eval_gradient=False),
        )
        for _ in range(10):
            theta = np.atleast_1d(
                rng.uniform(np.maximum(-2, bounds[:, 0]), np.minimum(1, bounds[:, 1]))
            )
            f = obj_func(theta, eval_gradient=False)
            if f < func_min:
                theta_opt, func_min = theta, f
        return theta_opt, func_min

    gpc = GaussianProcessClassifier(kernel=kernel, optimizer=optimizer)
    gpc.fit(X, y_mc)
    assert gpc.log_marginal_likelihood(
        gpc.kernel_.theta
    ) >= gpc.log_marginal_likelihood(kernel.theta)


@pytest.mark.parametrize("kernel", kernels)
def test_multi_class(kernel):
    gpc = GaussianProcessClassifier(kernel=kernel)
    gpc.fit(X, y_mc)

    y_prob = gpc.predict_proba(X2)
    assert_almost_equal(y_prob.sum(1), 1)

    y_pred = gpc.predict(X2)
    assert_array_equal(np.argmax(y_prob, 1), y_pred)


@pytest.mark.parametrize("kernel", kernels)
def test_multi_class_n_jobs(kernel):
    gpc = GaussianProcessClassifier(kernel=kernel)
    gpc.fit(X, y_mc)

    gpc_2 = GaussianProcessClassifier(kernel=kernel, n_jobs=2)
    gpc_2.fit(X, y_mc)

    y_prob = gpc.predict_proba(X2)
    y_prob_2 = gpc_2.predict_proba(X2)
    assert_almost_equal(y_prob, y_prob_2)


def test_warning_bounds():
    kernel = RBF(length_scale_bounds=[1e-5, 1e-3])
    gpc = GaussianProcessClassifier(kernel=kernel)
    warning_message = (
        "The optimal value found for dimension 0 of parameter "
        "length_scale is close to the specified upper bound "
        "0.001. Increasing the bound and calling fit again may "
        "find a better value."
    )
    with pytest.warns(ConvergenceWarning, match=warning_message):
        gpc.fit(X, y)

    kernel_sum = WhiteKernel(noise_level_bounds=[1e-5, 1e-3]) + RBF(
        length_scale_bounds=[1e3, 1e5]
    )
    gpc_sum = GaussianProcessClassifier(kernel=kernel_sum)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        gpc_sum.fit(X, y)

        assert len(record) == 2

        assert issubclass(record[0].category, ConvergenceWarning)
        assert (
            record[0].message.args[0] == "The optimal value found for "
            "dimension 0 of parameter "
            "k1__noise_level is close to the "
            "specified upper bound 0.001. "
            "Increasing the bound and calling "
            "fit again may find a better value."
        )

        assert issubclass(record[1].category, ConvergenceWarning)
        assert (
            record[1].message.args[0] == "The optimal value found for "
            "dimension 0 of parameter "
            "k2__length_scale is close to the "
            "specified lower bound 1000.0. "
            "Decreasing the bound and calling "
            "fit again may find a better value."
        )

    X_tile = np.tile(X, 2)
    kernel_dims = RBF(length_scale=[1.0, 2.0], length_scale_bounds=[1e1, 1e2])
    gpc_dims = GaussianProcessClassifier(kernel=kernel_dims)

    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        gpc_dims.fit(X_tile, y)

        assert len(record) == 2

        assert issubclass(record[0].category, ConvergenceWarning)
        assert (
            record[0].message.args[0] == "The optimal value found for "
            "dimension 0 of parameter "
            "length_scale is close to the "
            "specified upper bound 100.0. "
            "Increasing the bound and calling "
            "fit again may find a better value."
        )

        assert issubclass(record[1].category, ConvergenceWarning)
        assert (
            record[1].message.args[0] == "The optimal value found for "
            "dimension 1 of parameter "
            "length_scale is close to the "
            "specified upper bound 100.0. "
            "Increasing the bound and calling "
            "fit again may find a better value."
        )


@pytest.mark.parametrize(
    "params, error_type, err_msg",
    [
        (
            {"kernel": CompoundKernel(0)},
            ValueError,
            "kernel cannot be a CompoundKernel",
        )
    ],
)
def test_gpc_fit_error(params, error_type, err_msg):
    gpc = GaussianProcessClassifier(**params)
    with pytest.raises(error_type, match=err_msg):
        gpc.fit(X, y)


@pytest.mark.parametrize("kernel", kernels)
def test_gpc_latent_mean_and_variance_shape(kernel):
    gpc = GaussianProcessClassifier(kernel=kernel)
    gpc.fit(X, y)

    latent_mean, latent_variance = gpc.latent_mean_and_variance(X)
    assert latent_mean.shape == (X.shape[0],)
    assert latent_variance.shape == (X.shape[0],)


def test_gpc_latent_mean_and_variance_complain_on_more_than_2_classes():
    gpc = GaussianProcessClassifier(kernel=RBF())
    gpc.fit(X, y_mc)

    with pytest.raises(
        ValueError,
        match="Returning the mean and variance of the latent function f "
        "is only supported for binary classification",
    ):
        gpc.latent_mean_and_variance(X)


def test_latent_mean_and_variance_works_on_structured_kernels():
    X = ["A", "AB", "B"]
    y = np.array([True, False, True])
    kernel = MiniSeqKernel(baseline_similarity_bounds="fixed")
    gpc = GaussianProcessClassifier(kernel=kernel).fit(X, y)

    gpc.latent_mean_and_variance(X)


# ------------------------------------------------------------- parity with scikit-learn
TOL = 1e-6


def _assert_parity(ours, theirs, Xq):
    assert_allclose(ours.kernel_.theta, theirs.kernel_.theta, rtol=0, atol=TOL)
    assert abs(ours.log_marginal_likelihood_value_
               - theirs.log_marginal_likelihood_value_) <= TOL
    if ours.n_classes_ == 2 or ours.multi_class == "one_vs_rest":
        assert_allclose(ours.predict_proba(Xq), theirs.predict_proba(Xq), rtol=0, atol=TOL)
    assert_array_equal(ours.predict(Xq), theirs.predict(Xq))


@pytest.mark.parametrize("multi_class", ["one_vs_rest", "one_vs_one"])
@pytest.mark.parametrize("labels", ["binary", "multi"])
@pytest.mark.parametrize("kernel", kernels)
def test_parity_on_the_1d_data(kernel, labels, multi_class):
    targets = y if labels == "binary" else y_mc
    theirs = SklearnGPC(kernel, multi_class=multi_class).fit(X, targets)
    ours = GaussianProcessClassifier(kernel, multi_class=multi_class).fit(X, targets)
    _assert_parity(ours, theirs, X2)
    if labels == "binary":
        for a, b in zip(ours.latent_mean_and_variance(X2), theirs.latent_mean_and_variance(X2)):
            assert_allclose(a, b, rtol=0, atol=TOL)


@pytest.mark.parametrize("random_state", [0, "instance"])
@pytest.mark.parametrize("labels", ["binary", "multi"])
def test_parity_of_restarts_and_warm_start(labels, random_state):
    # scikit-learn draws restarts from random_state itself (binary) or from one clone per
    # class; a RandomState instance must be consumed the same way, and warm_start chains the
    # Newton searches of each problem in the optimizer's order
    targets = y if labels == "binary" else y_mc
    kernel = C(1.0, (1e-2, 1e2)) * RBF(1.0, (1e-2, 1e2))
    state = (lambda: np.random.RandomState(3)) if random_state == "instance" else (lambda: 0)
    for warm_start in (False, True):
        params = dict(n_restarts_optimizer=2, warm_start=warm_start)
        theirs = SklearnGPC(kernel, random_state=state(), **params).fit(X, targets)
        ours = GaussianProcessClassifier(kernel, random_state=state(), **params).fit(X, targets)
        _assert_parity(ours, theirs, X2)


def _split(loader):
    data_X, data_y = loader(return_X_y=True)
    X_train, X_test, y_train, _ = train_test_split(data_X, data_y, test_size=0.25,
                                                   stratify=data_y, random_state=0)
    scaler = StandardScaler().fit(X_train)
    return scaler.transform(X_train), y_train, scaler.transform(X_test)


@pytest.mark.parametrize("loader", [load_breast_cancer, load_iris])
def test_parity_on_breast_cancer_and_iris(loader):
    X_train, y_train, X_test = _split(loader)
    kernel = C(1.0) * RBF(np.sqrt(X_train.shape[1]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # bound warnings, both alike
        theirs = SklearnGPC(kernel, n_restarts_optimizer=1, random_state=0).fit(X_train,
                                                                                y_train)
        ours = GaussianProcessClassifier(kernel, n_restarts_optimizer=1,
                                         random_state=0).fit(X_train, y_train)
    _assert_parity(ours, theirs, X_test)
    assert ours.log_marginal_likelihood(ours.kernel_.theta) == pytest.approx(
        theirs.log_marginal_likelihood(theirs.kernel_.theta), abs=TOL)


def test_base_estimator_views_answer_as_sklearns_binary_estimators():
    # base_estimator_.estimators_[c] is the binary problem of class c, as scikit-learn's
    # OneVsRestClassifier holds them; its methods take raw rows like theirs
    ours = PathwiseGPClassifier(kernel=kernels[2]).fit(X, y_mc)
    theirs = GaussianProcessClassifier(kernel=kernels[2]).fit(X, y_mc)
    for view, binary in zip(ours.base_estimator_.estimators_,
                            theirs.base_estimator_.estimators_):
        assert_allclose(view.predict_proba(X2), binary.predict_proba(X2), atol=1e-6)
        for a, b in zip(view.latent_mean_and_variance(X2),
                        binary.latent_mean_and_variance(X2)):
            assert_allclose(a, b, atol=1e-6)
        assert_allclose(view.kernel_.theta, binary.kernel_.theta, atol=1e-6)


def _binary_estimators(est):
    base = est.base_estimator_
    return base.estimators_ if hasattr(base, "estimators_") else [base]


@pytest.mark.parametrize("multi_class", ["one_vs_rest", "one_vs_one"])
@pytest.mark.parametrize("labels", ["binary", "multi"])
def test_base_estimator_holds_sklearns_laplace_state(labels, multi_class):
    # the fitted state of scikit-learn's binary Laplace estimators, problem by problem:
    # rows, encoded labels, pi, sqrt(W) and chol(I + W_sr K W_sr) of the last Newton step
    targets = y if labels == "binary" else y_mc
    kernel = kernels[3]
    theirs = SklearnGPC(kernel, multi_class=multi_class).fit(X, targets)
    ours = GaussianProcessClassifier(kernel, multi_class=multi_class).fit(X, targets)
    assert type(ours.base_estimator_).__name__ != "OneVsRestClassifier"  # a view of ours
    pairs = list(zip(_binary_estimators(ours), _binary_estimators(theirs), strict=True))
    assert len(pairs) == (1 if labels == "binary" else 3)
    for view, binary in pairs:
        assert_array_equal(view.X_train_, binary.X_train_)
        assert_array_equal(view.y_train_, binary.y_train_)
        assert view.y_train_.dtype == binary.y_train_.dtype
        assert_array_equal(view.classes_, binary.classes_)
        for name in ("pi_", "W_sr_", "L_"):
            mine, sk = getattr(view, name), getattr(binary, name)
            assert mine.shape == sk.shape and mine.dtype == np.float64, name
            assert_allclose(mine, sk, rtol=0, atol=TOL, err_msg=name)
        # scikit-learn's own prediction from these (GPML Algorithm 3.2) gives ours
        K_star = view.kernel_(view.X_train_, X2)
        mean = K_star.T @ (view.y_train_ - view.pi_)
        v = np.linalg.solve(view.L_, view.W_sr_[:, None] * K_star)
        var = view.kernel_.diag(X2) - np.einsum("ij,ij->j", v, v)
        for a, b in zip((mean, var), view.latent_mean_and_variance(X2)):
            assert_allclose(a, b, rtol=0, atol=1e-10)
    # copies: changing one does not change the fit
    view = pairs[0][0]
    view.X_train_[:] = 0.0
    view.L_[:] = 0.0
    assert_allclose(view.X_train_, pairs[0][1].X_train_)
    assert_allclose(view.L_, pairs[0][1].L_, atol=TOL)


def test_base_estimator_state_of_structured_inputs_is_the_objects():
    Xs = ["A", "AB", "B", "BBA"]
    ys = np.array([True, False, True, False])
    kernel = MiniSeqKernel(baseline_similarity_bounds="fixed")
    ours = GaussianProcessClassifier(kernel).fit(Xs, ys)
    theirs = SklearnGPC(kernel).fit(Xs, ys)
    assert list(ours.base_estimator_.X_train_) == list(theirs.base_estimator_.X_train_)
    assert_array_equal(ours.base_estimator_.y_train_, theirs.base_estimator_.y_train_)
    assert_allclose(ours.base_estimator_.L_, theirs.base_estimator_.L_, atol=TOL)


def test_sample_y_draws_exactly_at_the_rows_for_kernels_without_random_features():
    # ExpSineSquared has no random-feature map: the latent draws are exact joint draws at
    # X2 from the Laplace posterior, whose mean and covariance follow from scikit-learn's
    # fitted binary estimator (GPML Algorithm 3.2 with the full covariance)
    kernel = C(1.0, "fixed") * ExpSineSquared(1.0, 6.0, periodicity_bounds="fixed")
    theirs = SklearnGPC(kernel).fit(X, y).base_estimator_
    ours = GaussianProcessClassifier(kernel).fit(X, y)
    assert_allclose(ours.kernel_.theta, theirs.kernel_.theta, atol=TOL)
    K_star = theirs.kernel_(theirs.X_train_, X2)
    mean = K_star.T @ (theirs.y_train_ - theirs.pi_)
    v = np.linalg.solve(theirs.L_, theirs.W_sr_[:, None] * K_star)
    cov = theirs.kernel_(X2) - v.T @ v
    S = 4000
    proba = ours.sample_y(X2, S, random_state=1)
    assert proba.shape == (5, 2, S)
    assert_allclose(proba.sum(1), 1.0, rtol=0, atol=1e-12)
    f = scipy.special.logit(proba[:, 1])
    # Monte-Carlo tolerances: standard errors sqrt(C_ii / S) of the means and
    # sqrt((C_ii C_jj + C_ij^2) / S) of the covariances (Gaussian draws); 5 of them over 5
    # means and 15 covariances leave ~1e-5 false alarms.  The jitter (1e-8 of the prior
    # variance) is below both.
    sd = np.sqrt(np.diag(cov))
    assert np.all(np.abs(f.mean(1) - mean) <= 5 * sd / np.sqrt(S))
    bound = 5 * np.sqrt((np.outer(sd**2, sd**2) + cov**2) / S)
    assert np.all(np.abs(np.cov(f) - cov) <= bound)
    # several problems: one joint draw per problem, probabilities normalised per row
    multi = GaussianProcessClassifier(kernel).fit(X, y_mc).sample_y(X2, 3)
    assert multi.shape == (5, 3, 3)
    assert_allclose(multi.sum(1), 1.0, rtol=0, atol=1e-12)
    with pytest.raises(NotImplementedError, match=r"ExpSineSquared.*sample_y\(X\)"):
        ours.sample_functions(2)
