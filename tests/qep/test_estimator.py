"""API, contract and accuracy tests of DeepQEPRegressor / DeepQEPClassifier: predictions,
parameters, variances, randomness, errors and progress output.

Every fit uses the documented small-data configuration ``QEP_FAST`` (tests/_configs.py) on a few
dozen rows, on the CPU, with explicit seeds.  Monte-Carlo tolerances are ``K * sd / sqrt(n)`` with
``K = 4`` (two-sided false-alarm rate 6e-5 per entry; the seeds are fixed, so a run is
deterministic) and ``sd`` taken from the analytic moments, not from the draws under test.
"""

import pickle
import warnings

import numpy as np
import pytest
import torch
from _configs import QEP_FAST
from sklearn.datasets import load_breast_cancer, load_diabetes, load_iris
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process.kernels import RBF, ConstantKernel, Matern, RationalQuadratic
from sklearn.metrics import r2_score
from sklearn.model_selection import train_test_split
from test_float32 import MEAN_FRACTION, SD_FRACTION

from skgpx.kernels import unit_stationary_kernel
from skgpx.linalg import NotPositiveDefiniteError
from skgpx.qep import DeepQEPClassifier, DeepQEPRegressor, univariate_variance_factor
from skgpx.qep._estimator import DeepQEPBase

K = 4.0  # Monte-Carlo tolerance multiplier (see module docstring)

_RNG = np.random.default_rng(0)
X = _RNG.uniform(-3.0, 3.0, size=(40, 2))
Y = np.sin(X[:, 0]) + 0.3 * X[:, 1] ** 2 + 0.1 * _RNG.standard_normal(40)
# two outputs of very different scales: a scrambled (interleaved) output layout shows up at once
Y2 = np.column_stack([Y, 50.0 * np.cos(X[:, 1]) - 0.5 * X[:, 0] + 100.0])
X_TEST = _RNG.uniform(-4.0, 4.0, size=(30, 2))

# three well-separated blobs, with string labels
_CENTRES = np.array([[-2.0, -2.0], [2.0, -2.0], [0.0, 2.5]])
_CODES = np.repeat([0, 1, 2], 14)
XC = _CENTRES[_CODES] + 0.6 * _RNG.standard_normal((42, 2))
NAMES = np.array(["bird", "cat", "dog"])
YC = NAMES[_CODES]

BASE = dict(QEP_FAST, device="cpu", tol=None)


def _reg(**params):
    return DeepQEPRegressor(**{**BASE, "random_state": 0, **params})


def _clf(**params):
    return DeepQEPClassifier(**{**BASE, "random_state": 0, **params})


# ----------------------------------------------------------------------------- 2. row-shared draws
# predict(X[idx]) vs predict(X)[idx]: with row-shared draws this is "exact".  It is exact in the
# Monte-Carlo draws (shared by all rows) but not bitwise: torch.cdist switches to a matrix-product
# algorithm above 25 rows and BLAS products of different widths round differently, so entries
# differ by 1-4 ulp (measured <= 9e-16).  Per-row draws would change predictions by O(0.1) here,
# so rtol = atol = 1e-12 still separates the two by eleven orders of magnitude.
_EXACT = dict(rtol=1e-12, atol=1e-12)
_PERM = np.random.default_rng(1).permutation(len(X_TEST))
_SUBSETS = [_PERM, _PERM[:7], _PERM[:1]]


def test_regressor_predictions_are_repeatable_and_row_invariant():
    model = _reg(hidden_dims=(3,)).fit(X, Y2)
    mean, std = model.predict(X_TEST, return_std=True)
    again = model.predict(X_TEST, return_std=True)
    np.testing.assert_array_equal(again[0], mean)
    np.testing.assert_array_equal(again[1], std)
    for idx in _SUBSETS:
        sub_mean, sub_std = model.predict(X_TEST[idx], return_std=True)
        np.testing.assert_allclose(sub_mean, mean[idx], rtol=_EXACT["rtol"],
                                   atol=_EXACT["atol"] * np.abs(Y2).max())
        np.testing.assert_allclose(sub_std, std[idx], **_EXACT)


def test_classifier_proba_is_repeatable_and_row_invariant():
    model = _clf(hidden_dims=(3,)).fit(XC, YC)
    proba = model.predict_proba(X_TEST)
    np.testing.assert_array_equal(model.predict_proba(X_TEST), proba)
    for idx in _SUBSETS:
        np.testing.assert_allclose(model.predict_proba(X_TEST[idx]), proba[idx], **_EXACT)
        np.testing.assert_array_equal(model.predict(X_TEST[idx]), model.predict(X_TEST)[idx])


def test_multi_tensor_adam_is_bitwise_the_per_parameter_loop(monkeypatch):
    """Training uses torch's multi-tensor (foreach) Adam, a speed choice only: the same
    fit with the per-parameter loop (torch's CPU default) gives identical predictions."""
    fast = _clf(hidden_dims=(3,), max_iter=20).fit(XC, YC)
    assert fast.net_.optimizer_.defaults["foreach"] is True

    class LoopAdam(torch.optim.Adam):
        def __init__(self, params, **kwargs):
            super().__init__(params, **{**kwargs, "foreach": False})

    monkeypatch.setattr(torch.optim, "Adam", LoopAdam)
    loop = _clf(hidden_dims=(3,), max_iter=20).fit(XC, YC)
    assert loop.net_.optimizer_.defaults["foreach"] is False
    np.testing.assert_array_equal(loop.predict_proba(X_TEST), fast.predict_proba(X_TEST))


# ----------------------------------------------------------------------------- 3. multi-output
def test_multi_output_shapes_and_layout():
    model = _reg().fit(X, Y2)
    mean, std = model.predict(X_TEST, return_std=True)
    assert mean.shape == std.shape == (len(X_TEST), 2)
    assert model.sample_y(X_TEST, 4).shape == (len(X_TEST), 2, 4)
    assert model.noise_variance_.shape == (2,) and model.n_outputs_ == 2
    # each column is fitted to its own target.  Training R^2 measured 0.56 / 0.79 (seed 0; 40
    # epochs of QEP_FAST under-fit this toy: 0.32-0.56 / 0.75-0.92 over seeds 0-3), while a
    # swapped or interleaved output layout scores -7e3 / -7 (the columns differ in scale by 50x)
    fitted = model.predict(X)
    for column in range(2):
        assert r2_score(Y2[:, column], fitted[:, column]) > 0.25


def test_column_vector_target_equals_1d_target():
    flat, column = _reg().fit(X, Y), _reg().fit(X, Y[:, None])
    for model in (flat, column):
        mean, std = model.predict(X_TEST, return_std=True)
        assert mean.shape == std.shape == (len(X_TEST),)
        assert model.sample_y(X_TEST, 3).shape == (len(X_TEST), 3)
        assert model.noise_variance_.shape == (1,)
    for a, b in zip(flat.predict(X_TEST, return_std=True), column.predict(X_TEST, return_std=True)):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(flat.sample_y(X_TEST, 3), column.sample_y(X_TEST, 3))


# ----------------------------------------------------------------------------- 4. classifier
@pytest.mark.parametrize("likelihood", ["softmax", "dirichlet"])
@pytest.mark.parametrize("n_classes", [2, 3])
def test_classifier_probabilities_and_string_labels(likelihood, n_classes):
    keep = _CODES < n_classes
    X_fit, y_fit = XC[keep], YC[keep]
    model = _clf(likelihood=likelihood).fit(X_fit, y_fit)
    np.testing.assert_array_equal(model.classes_, NAMES[:n_classes])
    proba = model.predict_proba(X_TEST)
    assert proba.shape == (len(X_TEST), n_classes)
    assert np.all(proba >= 0)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    predicted = model.predict(X_TEST)
    np.testing.assert_array_equal(predicted, model.classes_[np.argmax(proba, axis=1)])
    assert predicted.dtype.kind == "U" and set(predicted) <= set(NAMES[:n_classes])
    # the labels map back to the right blobs (a scrambled class order scores about 1/n_classes)
    assert model.score(X_fit, y_fit) > 0.9
    draws = model.sample_y(X_TEST, 5)
    assert draws.shape == (len(X_TEST), n_classes, 5)
    assert np.all(draws >= 0)
    np.testing.assert_allclose(draws.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    np.testing.assert_allclose(model.predict_log_proba(X_TEST), np.log(proba), rtol=1e-12)


# ----------------------------------------------------------------------------- 5. sample_y moments
def _analytic_latent(model, X_rows):
    """Predictive mean (D, n) and covariance (D, n, n) of the last layer's latent functions in
    the units of y, from the fitted parameters by the whitened SVGP formulas, written here
    independently of QEPLayer.marginals/joint."""
    module = model.module_
    layer = module.layers[-1]
    with torch.no_grad():
        H = torch.tensor((X_rows - model.X_mean_) / model.X_scale_, dtype=torch.float64)
        Z, ls, scale = layer.inducing_points, layer.length_scale, layer.output_scale
        K_zz = unit_stationary_kernel(Z, Z, ls, scale, layer.kernel)
        K_zh = unit_stationary_kernel(Z, H, ls, scale, layer.kernel)
        K_hh = unit_stationary_kernel(H, H, ls, scale, layer.kernel)
        eye = torch.eye(K_zz.shape[-1], dtype=K_zz.dtype)
        K_zz = K_zz + module.jitter * scale[:, None, None] * eye  # the model's fixed jitter
        factor = layer.inducing_cholesky(module.jitter)
        torch.testing.assert_close(factor @ factor.transpose(-1, -2), K_zz, rtol=1e-10, atol=1e-12)
        W = torch.linalg.solve_triangular(factor, K_zh, upper=False)  # L^{-1} K_zh
        S = layer.variational_tril()
        mean = layer.mean_bias[:, None] + (W * layer.variational_mean[:, :, None]).sum(-2)
        SW = S.transpose(-1, -2) @ W
        cov = (K_hh - K_zh.transpose(-1, -2) @ torch.linalg.solve(K_zz, K_zh)
               + SW.transpose(-1, -2) @ SW)
    y_scale, y_mean = model.y_scale_, model.y_mean_
    return (mean.numpy() * y_scale[:, None] + y_mean[:, None],
            cov.numpy() * (y_scale**2)[:, None, None])


def test_sample_y_matches_analytic_predictive_moments_q2_shallow():
    model = _reg(q=2.0, hidden_dims=()).fit(X, Y2)
    # two rows close together (strong correlation), two inside the data, one extrapolated
    rows = np.array([[0.5, 0.5], [0.6, 0.45], [-2.0, 1.0], [2.5, -2.5], [5.0, 5.0]])
    mean, cov = _analytic_latent(model, rows)
    # the fit moved the variational parameters away from their initialisation
    assert np.abs(model.module_.layers[-1].variational_mean.detach().numpy()).max() > 0.05

    n = 4000
    draws = model.sample_y(rows, n_samples=n, random_state=7)  # (rows, D, n)
    assert draws.shape == (len(rows), 2, n)
    for d in range(2):
        sample = draws[:, d, :]
        var = np.diag(cov[d])
        assert np.all(np.abs(sample.mean(axis=1) - mean[d]) <= K * np.sqrt(var / n))
        # Gaussian draws (q = 2): sd of an empirical covariance entry is
        # sqrt((S_ii S_jj + S_ij^2) / n)
        empirical = np.cov(sample, bias=True)
        sd = np.sqrt((np.outer(var, var) + cov[d] ** 2) / n)
        assert np.all(np.abs(empirical - cov[d]) <= K * sd), (empirical, cov[d])

    # one layer: the predictive marginals are exact, and c_2 = 1
    pred_mean, pred_std = model.predict(rows, return_std=True)
    latent_var = np.stack([np.diag(c) for c in cov], axis=1)
    np.testing.assert_allclose(pred_mean, mean.T, rtol=1e-8)
    np.testing.assert_allclose(pred_std, np.sqrt(latent_var + model.noise_variance_), rtol=1e-8)


# ----------------------------------------------------------------------------- 6. total variance
@pytest.mark.parametrize("bound", ["authors", "scaled"])
def test_return_std_is_law_of_total_variance(bound):
    q = 1.0
    c_q = univariate_variance_factor(q)
    assert c_q == pytest.approx(3.0, rel=1e-12)  # c_1 = 2^2 Gamma(5/2) / Gamma(1/2) = 3
    model = _reg(q=q, bound=bound, hidden_dims=(3,)).fit(X, Y)
    mu, v, _ = model._latent(X_TEST)  # (S, n, 1)
    mu, v = mu.numpy()[..., 0], v.numpy()[..., 0]
    assert mu.shape == (QEP_FAST["n_mc_samples_predict"], len(X_TEST))
    sigma2 = float(model.likelihood_.noise.detach())
    c = c_q if bound == "authors" else 1.0
    within = (c * v + c_q * sigma2).mean(axis=0)
    between = mu.var(axis=0)
    expected = np.sqrt(within + between) * model.y_scale_[0]
    mean, std = model.predict(X_TEST, return_std=True)
    np.testing.assert_allclose(std, expected, rtol=1e-10)
    np.testing.assert_allclose(mean, mu.mean(axis=0) * model.y_scale_[0] + model.y_mean_[0],
                               rtol=1e-10)
    np.testing.assert_allclose(model.noise_variance_, c_q * sigma2 * model.y_scale_**2, rtol=1e-12)
    # the paths differ, so dropping the between-path term (the authors' "PSD") would be caught
    assert np.max(between / within) > 1e-3


# ----------------------------------------------------------------------------- 7. bad input
def _nan_at(array, index, value):
    out = array.copy()
    out.flat[index] = value
    return out


@pytest.fixture
def no_torch_work(monkeypatch):
    """Fail loudly if fit reaches the torch part (model construction, training)."""

    def forbidden(self, *args, **kwargs):
        raise AssertionError("input validation should have failed before any torch work")

    monkeypatch.setattr(DeepQEPBase, "_fit_network", forbidden)


@pytest.mark.parametrize("Estimator", [DeepQEPRegressor, DeepQEPClassifier])
@pytest.mark.parametrize(
    "make, match",
    [
        (lambda X, y: (_nan_at(X, 3, np.nan), y), "NaN"),
        (lambda X, y: (_nan_at(X, 5, np.inf), y), "infinity"),
        (lambda X, y: (X[:1], y[:1]), "1 sample"),
        (lambda X, y: (np.full(X.shape, "a", dtype=object), y), "convert"),
        (lambda X, y: (X[:, 0], y), "2D array"),
        (lambda X, y: (X, y[:-1]), "inconsistent numbers of samples"),
    ],
)
def test_bad_input_raises_before_torch_work(Estimator, make, match, no_torch_work):
    y = Y if Estimator is DeepQEPRegressor else YC[: len(X)]
    X_bad, y_bad = make(X, y)
    with pytest.raises(ValueError, match=match):
        Estimator(**BASE).fit(X_bad, y_bad)


def test_bad_targets_raise_before_torch_work(no_torch_work):
    with pytest.raises(ValueError, match="y contains NaN"):
        DeepQEPRegressor(**BASE).fit(X, _nan_at(Y, 2, np.nan))
    with pytest.raises(ValueError, match="at least 2 classes; y has 1 class: 'cat'"):
        DeepQEPClassifier(**BASE).fit(X, np.full(len(X), "cat"))
    with pytest.raises(ValueError, match="Unknown label type"):
        DeepQEPClassifier(**BASE).fit(X, Y)  # continuous targets


@pytest.mark.parametrize(
    "params, match",
    [
        (dict(hidden_dims=(0,)), r"hidden_dims=\(0,\) must be a tuple of positive integers"),
        (dict(hidden_dims=("a",)), r"hidden_dims=\('a',\) must be"),
        (dict(hidden_dims=(2.5,)), r"hidden_dims=\(2.5,\) must be"),
        (dict(n_inducing=0), "'n_inducing' parameter"),
        (dict(q=0.0), "'q' parameter"),
        (dict(bound="exact"), "'bound' parameter"),
        (dict(kernel="cosine"), "'kernel' parameter"),
        (dict(dtype="float16"), "'dtype' parameter"),
    ],
)
@pytest.mark.parametrize("Estimator", [DeepQEPRegressor, DeepQEPClassifier])
def test_bad_parameters_raise_before_torch_work(Estimator, params, match, no_torch_work):
    y = Y if Estimator is DeepQEPRegressor else YC[: len(X)]
    with pytest.raises(ValueError, match=match):
        Estimator(**{**BASE, **params}).fit(X, y)


def test_predict_checks_fit_and_features():
    model = _reg(max_iter=2)
    with pytest.raises(Exception, match="not fitted"):
        model.predict(X_TEST)
    model.fit(X, Y)
    for method in (model.predict, lambda Z: model.sample_y(Z, 2)):
        message = "X has 3 features, but DeepQEPRegressor is expecting 2"
        with pytest.raises(ValueError, match=message):
            method(np.hstack([X_TEST, X_TEST[:, :1]]))
        with pytest.raises(ValueError, match="NaN"):
            method(_nan_at(X_TEST, 0, np.nan))
    clf = _clf(max_iter=2).fit(XC, YC)
    with pytest.raises(ValueError, match="features"):
        clf.predict_proba(X_TEST[:, :1])


# sample_y validates n_samples before any torch work; 0 gives an empty
# (n, 0) array, as scikit-learn's GPR does.
def test_sample_y_rejects_negative_n_samples():
    model = _reg(max_iter=2).fit(X, Y)
    assert model.sample_y(X_TEST, 0).shape == (len(X_TEST), 0)
    for bad in (-1, 2.5):
        with pytest.raises(ValueError, match="n_samples"):
            model.sample_y(X_TEST, n_samples=bad)


@pytest.mark.parametrize("q", [3.0, 0.3])
def test_q_outside_supported_range_warns(q):
    with pytest.warns(UserWarning, match=r"outside the supported range \[0.5, 2\]"):
        _reg(q=q, max_iter=2).fit(X, Y)


def test_supported_q_does_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _reg(q=0.5, max_iter=2).fit(X, Y)


def test_unfactorisable_kernel_matrix_warns_then_advises_float64():
    """All rows identical: every inducing point coincides and K_ZZ is the rank-one matrix
    s * 11^T.  A relative jitter of 1e-30 (raised tenfold three times: 1e-27) is far below
    float32 resolution, so every factorisation fails."""
    X_same = np.ones((20, 2))
    model = _reg(dtype="float32", jitter=1e-30, max_iter=3)
    with pytest.warns(UserWarning, match="raised the jitter") as record:
        with pytest.raises(NotPositiveDefiniteError, match="float64") as info:
            model.fit(X_same, Y[:20])
    assert isinstance(info.value, np.linalg.LinAlgError)
    assert "1e-27" in str(info.value)  # three tenfold retries from 1e-30
    raised = [w for w in record if "raised the jitter" in str(w.message)]
    assert len(raised) == 3


# ----------------------------------------------------------------------------- 8. contract
# Seeds, pickling, the untouched global RNGs and inputs, silence at verbose=0 and float32 (the
# one-layer regressor, the deep classifier) are tested for every estimator in
# tests/test_common.py and tests/test_float32.py, on these data.
def test_verbose_levels(capfd):
    _reg(max_iter=3, verbose=1).fit(X, Y)
    out, err = capfd.readouterr()
    assert out == ""
    assert "deep Q-EP epochs" in err and "3/3" in err
    _reg(max_iter=3, verbose=2).fit(X, Y)
    out, err = capfd.readouterr()
    assert "deep Q-EP epochs" in err
    # skorch's epoch table: a header and one line per epoch
    assert "train_loss" in out and "dur" in out
    assert sum(line.strip().startswith(("1 ", "2 ", "3 ")) for line in out.splitlines()) == 3


# KNOWN DEFECT (reported, not fixed here: skgpx/ is edited by others).  The Monte-Carlo draws
# depend on the dtype: skgpx.qep._distribution.standard_univariate_draws calls
# torch.randn(shape, dtype=dtype, generator=...), and torch's CPU sampler produces a different
# stream for float32 than for float64 once a tensor has 16 or more elements.  So a deep model in
# float32 mode sees the float64 Monte-Carlo draws, rounded (they are drawn in float64 and cast),
# so a deep model agrees with its float64 twin at round-off level, not Monte-Carlo level.
def test_float32_deep_model_close_to_float64():
    model64 = _reg(jitter=1e-4).fit(X, Y)
    model32 = _reg(jitter=1e-4, dtype="float32").fit(X, Y)
    mean64, std64 = model64.predict(X_TEST, return_std=True)
    mean32, std32 = model32.predict(X_TEST, return_std=True)
    # what a user sees (tests/test_float32.py): forty Adam epochs in float32 take
    # their own path, so the tolerance is not round-off's but the standard error of a
    # 400-draw summary of the posterior; a float32 fit on another Monte-Carlo stream would
    # differ by the 8 prediction paths' error, ~sd / sqrt(8), seven times that
    assert np.max(np.abs(mean32 - mean64) / std64) <= MEAN_FRACTION
    assert np.max(np.abs(std32 - std64) / std64) <= SD_FRACTION
    # the deep classifier (jitter=1e-4), and the numerics at fixed parameters:
    # tests/test_float32.py


# ----------------------------------------------------------------------------- 9. training
def test_convergence_warning_only_when_tol_is_set_and_unmet():
    # patience 20 > max_iter 5: the tol criterion cannot fire, so fit stops at max_iter
    with pytest.warns(ConvergenceWarning, match="max_iter=5"):
        model = _reg(max_iter=5, tol=1e-4, n_iter_no_change=20).fit(X, Y)
    assert model.n_iter_ == 5
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        model = _reg(max_iter=7, tol=None).fit(X, Y)
        assert model.n_iter_ == 7
        # a tol of 1e3 per row is never beaten: stop after the first epoch + patience epochs
        model = _reg(max_iter=40, tol=1e3, n_iter_no_change=2).fit(X, Y)
        assert model.n_iter_ == 3


def test_history_objective_and_elbo():
    model = _reg(max_iter=6).fit(X, Y)
    assert model.n_iter_ == 6
    assert len(model.objective_history_) == len(model.history_) == model.n_iter_
    assert all(isinstance(value, float) for value in model.objective_history_)
    np.testing.assert_array_equal(model.objective_history_,
                                  [row["train_loss"] for row in model.history_])
    assert np.isfinite(model.elbo_)
    # a one-layer regressor's objective is deterministic: with a vanishing step the final full
    # pass is the last epoch's loss, and elbo_ = -N * loss
    still = _reg(hidden_dims=(), max_iter=2, lr=1e-12).fit(X, Y)
    assert still.elbo_ == pytest.approx(-len(X) * still.objective_history_[-1], rel=1e-9)


def test_mini_batches_and_epoch_count():
    model = _reg(batch_size=10, max_iter=3).fit(X, Y)
    assert model.n_iter_ == 3 and len(model.objective_history_) == 3
    batches = model.history_[-1, "batches"]
    assert [b["train_batch_size"] for b in batches] == [10, 10, 10, 10]
    full = _reg(max_iter=3).fit(X, Y)
    assert [b["train_batch_size"] for b in full.history_[-1, "batches"]] == [len(X)]
    assert np.all(np.isfinite(model.predict(X_TEST)))


def test_early_stopping_regressor():
    model = _reg(early_stopping=True, tol=1e-4, n_iter_no_change=3, max_iter=40).fit(X, Y)
    assert 1 <= model.n_iter_ <= 40
    valid = [row["valid_loss"] for row in model.history_]
    assert len(valid) == model.n_iter_ and np.all(np.isfinite(valid))
    assert model.net_.train_split.stratified is False
    # the KL is divided by the rows actually trained on: 40 - 4 held out
    assert model.net_.n_train_rows_ == 36


def test_early_stopping_classifier_split_is_stratified():
    # imbalanced classes (30 / 10 / 10 rows): a stratified 20 % hold-out keeps the proportions,
    # 6 / 2 / 2 (a plain shuffled split of this seed need not)
    codes = np.repeat([0, 1, 2], [30, 10, 10])
    X_fit = _CENTRES[codes] + 0.6 * np.random.default_rng(3).standard_normal((len(codes), 2))
    model = _clf(early_stopping=True, validation_fraction=0.2, tol=1e-4, n_iter_no_change=3,
                 max_iter=40).fit(X_fit, NAMES[codes])
    assert 1 <= model.n_iter_ <= 40
    assert all(np.isfinite(row["valid_loss"]) for row in model.history_)
    assert model.net_.n_train_rows_ == 40
    split = model.net_.train_split
    assert split.stratified is True
    _, valid = split(np.arange(len(codes)), y=codes)
    np.testing.assert_array_equal(np.bincount(codes[valid.indices], minlength=3), [6, 2, 2])


def test_sklearn_kernel_sets_the_initial_hyperparameters():
    kernel = ConstantKernel(2.0) * Matern(length_scale=[0.5, 2.0], nu=2.5)
    frozen = dict(max_iter=1, lr=1e-12, hidden_dims=(3,))
    model = _reg(kernel=kernel, **frozen).fit(X, Y)
    first, last = model.module_.layers
    for layer in (first, last):
        assert layer.kernel == "matern52"
        np.testing.assert_allclose(layer.output_scale.detach().numpy(), 2.0, rtol=1e-9)
    np.testing.assert_allclose(first.length_scale.detach().numpy()[:, 0, :],
                               np.tile([0.5, 2.0], (3, 1)), rtol=1e-9)
    # deeper layers see hidden units: they start from the geometric mean, sqrt(0.5 * 2) = 1
    np.testing.assert_allclose(last.length_scale.detach().numpy(), 1.0, rtol=1e-9)
    assert kernel.get_params()["k2__length_scale"] == [0.5, 2.0]  # the parameter is not modified
    # the isotropic form: 0.5 for every unit and (ARD) input dimension of every layer
    iso = _reg(kernel=ConstantKernel(2.0) * Matern(length_scale=0.5, nu=2.5), **frozen).fit(X, Y)
    for layer in iso.module_.layers:
        assert layer.kernel == "matern52"
        np.testing.assert_allclose(layer.output_scale.detach().numpy(), 2.0, rtol=1e-9)
        np.testing.assert_allclose(layer.length_scale.detach().numpy(), 0.5, rtol=1e-9)
    assert iso.module_.layers[0].length_scale.shape == (3, 1, 2)
    default = _reg(**frozen).fit(X, Y)
    assert default.module_.layers[0].kernel == "matern32"
    np.testing.assert_allclose(default.module_.layers[0].output_scale.detach().numpy(), 1.0,
                               rtol=1e-9)
    assert np.abs(model.predict(X_TEST) - default.predict(X_TEST)).max() > 1e-6
    rbf = _reg(kernel=RBF(0.7), **frozen).fit(X, Y)
    assert rbf.module_.layers[0].kernel == "rbf"
    np.testing.assert_allclose(rbf.module_.layers[0].length_scale.detach().numpy(), 0.7, rtol=1e-9)


@pytest.mark.parametrize(
    "kernel, match",
    [
        (RationalQuadratic(), "not supported"),
        (ConstantKernel(1.0) * RationalQuadratic(), "not supported"),
        (Matern(nu=0.7), "closed form"),
        (Matern(length_scale=[1.0, 1.0, 1.0]), "3 length scales but X has 2 features"),
    ],
)
def test_unsupported_kernels_raise(kernel, match):
    with pytest.raises(ValueError, match=match):
        _reg(kernel=kernel, max_iter=1).fit(X, Y)


def test_shallow_model():
    model = _reg(hidden_dims=()).fit(X, Y)
    assert len(model.module_.layers) == 1
    mean, std = model.predict(X_TEST, return_std=True)
    assert mean.shape == std.shape == (len(X_TEST),) and np.all(std > 0)
    assert model.score(X, Y) > 0.8
    # one layer: prediction is analytic, a single "path"
    assert model._latent(X_TEST)[0].shape[0] == 1
    clf = _clf(hidden_dims=()).fit(XC, YC)
    assert len(clf.module_.layers) == 1 and clf.score(XC, YC) > 0.9


# ----------------------------------------------------------------------------- 10. real data
def test_fast_config_regression_on_diabetes():
    """Measured with QEP_FAST: R^2 = 0.441 (random_state=0; 0.44-0.48 over seeds 0-4);
    sklearn GPR with ConstantKernel * Matern(1.5, ARD) + WhiteKernel reaches 0.52 on the same
    split.  0.35 leaves a margin of 0.09 under the worst measured seed while a model that
    predicts the training mean (R^2 <= 0) or a badly under-fitted one is far below."""
    X_all, y_all = load_diabetes(return_X_y=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # tol is left at its default here
        model = DeepQEPRegressor(**QEP_FAST, random_state=0).fit(X_all[:300], y_all[:300])
    assert model.score(X_all[300:], y_all[300:]) > 0.35


@pytest.mark.parametrize(
    "loader, threshold",
    # measured with QEP_FAST, stratified 80/20 split (random_state=0), seeds 0-4:
    # iris 0.967-1.0 (1.0 for random_state=0; majority class 0.33);
    # breast cancer 0.956-0.974 (0.974 for random_state=0; majority class 0.63)
    [(load_iris, 0.9), (load_breast_cancer, 0.9)],
)
def test_fast_config_classification(loader, threshold):
    X_all, y_all = loader(return_X_y=True)
    X_tr, X_te, y_tr, y_te = train_test_split(X_all, y_all, test_size=0.2, stratify=y_all,
                                              random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # tol is left at its default here
        model = DeepQEPClassifier(**QEP_FAST, random_state=0).fit(X_tr, y_tr)
    assert model.score(X_te, y_te) >= threshold


# ----------------------------------------------------------------------------- GPU
@pytest.mark.gpu
def test_cpu_and_cuda_agree():
    """A one-layer regressor has no training noise, so CPU and CUDA fits agree to round-off;
    a CUDA fit pickles and reloads with identical predictions."""
    cpu = _reg(hidden_dims=()).fit(X, Y)
    gpu = _reg(hidden_dims=(), device="cuda").fit(X, Y)
    np.testing.assert_allclose(gpu.predict(X_TEST), cpu.predict(X_TEST), rtol=1e-6, atol=1e-8)
    reloaded = pickle.loads(pickle.dumps(gpu))
    np.testing.assert_array_equal(reloaded.predict(X_TEST), gpu.predict(X_TEST))


@pytest.mark.parametrize("cls", [DeepQEPRegressor, DeepQEPClassifier])
def test_restarts_keep_the_run_with_the_best_elbo(cls):
    # n_restarts (like scikit-learn's n_restarts_optimizer); the first run is the
    # fit without restarts, the kept run is the best of all
    X, y = load_iris(return_X_y=True)
    if cls is DeepQEPRegressor:
        X, y = X[:, :3], X[:, 3]
    params = dict(QEP_FAST, max_iter=15, tol=None, random_state=5, device="cpu")
    single = cls(**params).fit(X, y)
    model = cls(**params, n_restarts=3).fit(X, y)
    assert single.elbo_restarts_ == [single.elbo_]
    assert len(model.elbo_restarts_) == 4
    assert model.elbo_restarts_[0] == single.elbo_
    assert model.elbo_ == max(model.elbo_restarts_)
    assert len(set(model.elbo_restarts_)) == 4  # the restarts start from fresh seeds
    best = int(np.argmax(model.elbo_restarts_))
    method = "predict" if cls is DeepQEPRegressor else "predict_proba"
    same = np.array_equal(getattr(model, method)(X), getattr(single, method)(X))
    assert same == (best == 0)
