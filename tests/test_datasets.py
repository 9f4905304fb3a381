import numpy as np
import pytest

from skgpx.datasets import (
    load_authors_rhombus,
    make_annular_rhombus,
    make_dkp_toy,
    make_gap_1d,
    make_matern_2d,
    make_sine_1d,
    make_step_turn_series,
    rhombus_labels,
)


def _sine(X):
    return np.sin(2 * X[:, 0])


def _gap(X):
    return np.sin(3 * X[:, 0])


def _surface(X):
    return np.sin(2 * X[:, 0]) * np.cos(1.5 * X[:, 1]) + 0.5 * np.sin(3 * X[:, 1])


def _toy(X):
    return np.sin(2 * X[:, 0]) + 0.5 * X[:, 1] ** 2 - 0.3 * X[:, 2]


# (generator, noise-free function at default settings, input dimension, default noise variance)
CASES = [
    (make_sine_1d, _sine, 1, 0.1),
    (make_gap_1d, _gap, 1, 1e-2),
    (make_matern_2d, _surface, 2, 1e-2),
    (make_dkp_toy, _toy, 3, 1e-2),
]
IDS = ["sine", "gap", "matern2d", "dkp_toy"]


@pytest.mark.parametrize("make, f, d, noise", CASES, ids=IDS)
def test_shapes_and_dtypes(make, f, d, noise):
    X, y = make(n_samples=17, random_state=0)
    assert X.shape == (17, d) and y.shape == (17,)
    assert X.dtype == np.float64 and y.dtype == np.float64
    assert np.all(np.isfinite(X)) and np.all(np.isfinite(y))


def test_input_ranges():
    X, _ = make_sine_1d(n_samples=2000, random_state=1)
    assert X.min() >= 0 and X.max() <= 4

    X, _ = make_gap_1d(n_samples=2001, random_state=1)
    x = X[:, 0]
    assert x.min() >= 0 and x.max() <= 10
    assert not np.any((x > 4) & (x < 6))
    assert np.sum(x <= 4) == 1000  # n_samples // 2 on the left interval
    assert x.min() < 0.1 and x.max() > 9.9 and x[x <= 4].max() > 3.9 and x[x >= 6].min() < 6.1
    # Shuffled, not sorted by interval.
    assert np.any(x[:1000] >= 6)

    X, _ = make_matern_2d(n_samples=2000, random_state=1)
    assert X.min() >= -2 and X.max() <= 2
    assert np.all(X.min(axis=0) < -1.9) and np.all(X.max(axis=0) > 1.9)


@pytest.mark.parametrize("make, f, d, noise", CASES, ids=IDS)
def test_reproducible(make, f, d, noise):
    X1, y1 = make(n_samples=50, random_state=3)
    X2, y2 = make(n_samples=50, random_state=np.random.RandomState(3))
    np.testing.assert_array_equal(X1, X2)
    np.testing.assert_array_equal(y1, y2)
    X3, y3 = make(n_samples=50, random_state=4)
    assert not np.array_equal(X1, X3) and not np.array_equal(y1, y3)


@pytest.mark.parametrize("make, f, d, noise", CASES, ids=IDS)
@pytest.mark.parametrize("noise_variance", [None, 0.25])
def test_noise_variance(make, f, d, noise, noise_variance):
    # The residuals y - f(X) are N(0, s2); their mean square has variance 2 s2^2 / n,
    # so it lies within 5 standard errors of s2 except with probability ~6e-7.
    s2 = noise if noise_variance is None else noise_variance
    kwargs = {} if noise_variance is None else {"noise_variance": noise_variance}
    n = 20_000
    X, y = make(n_samples=n, random_state=5, **kwargs)
    r = y - f(X)
    se = s2 * np.sqrt(2.0 / n)
    assert abs(np.mean(r**2) - s2) <= 5 * se
    assert abs(np.mean(r)) <= 5 * np.sqrt(s2 / n)


@pytest.mark.parametrize("make", [make_sine_1d, make_gap_1d, make_matern_2d])
def test_noise_free(make):
    X, y = make(n_samples=10, noise_variance=0.0, random_state=0)
    f = {make_sine_1d: _sine, make_gap_1d: _gap, make_matern_2d: _surface}[make]
    np.testing.assert_allclose(y, f(X), rtol=0, atol=1e-15)


def test_matern_length_scale_rescales_inputs():
    X, y = make_matern_2d(n_samples=30, length_scale=0.25, noise_variance=0.0, random_state=0)
    np.testing.assert_allclose(y, _surface(2 * X), rtol=0, atol=1e-15)


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        ({"n_samples": 0}, ValueError, r"n_samples=0 must be >= 1"),
        ({"n_samples": 2.5}, TypeError, r"n_samples must be an int; got 2.5"),
        ({"noise_variance": -1.0}, ValueError, r"noise_variance=-1.0 must be"),
    ],
)
@pytest.mark.parametrize("make", [make_sine_1d, make_gap_1d, make_matern_2d])
def test_bad_arguments(make, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        make(**kwargs)


def test_bad_length_scale():
    with pytest.raises(ValueError, match=r"length_scale=0 must be a real number > 0"):
        make_matern_2d(length_scale=0)


# ---------------------------------------------------------------------------------------------
# Deep Q-EP paper data sets (Chang et al., arXiv:2410.22119, Secs. 5.1 and 5.2)


def test_step_turn_shapes_and_dtypes():
    X, y, y_true = make_step_turn_series(random_state=0)
    assert X.shape == (100, 1) and y.shape == (100, 2) and y_true.shape == (100, 2)
    assert X.dtype == y.dtype == y_true.dtype == np.float64
    assert np.all(np.isfinite(y))
    # x = linspace(0, 1, n): the paper's t = 2 x evenly spaced on [0, 2].
    np.testing.assert_allclose(X[:, 0], np.linspace(0, 1, 100), rtol=0, atol=1e-15)
    X1, y1, yt1 = make_step_turn_series(n_samples=1, random_state=0)
    assert X1.shape == (1, 1) and y1.shape == yt1.shape == (1, 2) and X1[0, 0] == 0.0


def test_step_turn_reproducible():
    X1, y1, t1 = make_step_turn_series(n_samples=50, random_state=3)
    X2, y2, t2 = make_step_turn_series(n_samples=50, random_state=np.random.RandomState(3))
    np.testing.assert_array_equal(X1, X2)
    np.testing.assert_array_equal(y1, y2)
    np.testing.assert_array_equal(t1, t2)
    X3, y3, t3 = make_step_turn_series(n_samples=50, random_state=4)
    # The inputs and the truth are a fixed grid; only the noise depends on the seed.
    np.testing.assert_array_equal(X1, X3)
    np.testing.assert_array_equal(t1, t3)
    assert not np.any(y1 == y3)


def test_step_turn_values_by_hand():
    # Paper Sec. 5.1: u_J = 1 on [0,1], 0.5 on (1,1.5], 2 on (1.5,2];
    # u_T = 1.5t on [0,1], 3.5-2t on (1,1.5], 3t-4 on (1.5,2]; t = 2x, x_i = i/99.
    X, y, y_true = make_step_turn_series(n_samples=100, noise_std=0.0, random_state=0)
    np.testing.assert_array_equal(y, y_true)
    expected = {
        0: (0 / 99, 1.0, 0.0),  # t = 0
        49: (49 / 99, 1.0, 1.5 * 98 / 99),  # t = 98/99 < 1: first pieces
        50: (50 / 99, 0.5, 3.5 - 2 * 100 / 99),  # t = 100/99 > 1: jump to 0.5, u_T turns down
        74: (74 / 99, 0.5, 3.5 - 2 * 148 / 99),  # t = 148/99 < 1.5
        75: (75 / 99, 2.0, 3 * 150 / 99 - 4),  # t = 150/99 > 1.5: jump to 2, u_T turns up
        99: (1.0, 2.0, 2.0),  # t = 2
    }
    for i, (x, uj, ut) in expected.items():
        assert X[i, 0] == pytest.approx(x, abs=1e-15)
        assert y_true[i, 0] == uj
        assert y_true[i, 1] == pytest.approx(ut, abs=1e-12)
    # Sanity of the hand values themselves: 1.48485, 1.47980, 0.51010, 0.54545.
    hand = [round(expected[i][2], 5) for i in (49, 50, 74, 75)]
    assert hand == [1.48485, 1.4798, 0.5101, 0.54545]


def test_step_turn_breakpoints_on_grid():
    # With 5 points t = 0, 0.5, 1, 1.5, 2 hits both breakpoints; the paper's closed right ends
    # give u_J(1) = 1 (from [0,1]) and u_J(1.5) = 0.5 (from (1,1.5]); u_T is continuous there.
    X, y, y_true = make_step_turn_series(n_samples=5, noise_std=0.0)
    np.testing.assert_array_equal(X[:, 0], [0.0, 0.25, 0.5, 0.75, 1.0])
    np.testing.assert_array_equal(y_true[:, 0], [1.0, 1.0, 1.0, 0.5, 2.0])
    np.testing.assert_allclose(y_true[:, 1], [0.0, 0.75, 1.5, 0.5, 2.0], rtol=0, atol=1e-15)


@pytest.mark.parametrize("noise_std", [None, 0.3])
def test_step_turn_noise_std(noise_std):
    # The residuals y - y_true are iid N(0, s^2). A sample standard deviation of m normal values
    # has standard error ~ s / sqrt(2 m); each column (m = n) must be within 4 standard errors
    # of s (two-sided normal tail 6e-5 per column), their mean within 4 s / sqrt(n), and the two
    # columns uncorrelated (sample correlation has standard error 1 / sqrt(n)).
    s = 0.1 if noise_std is None else noise_std
    kwargs = {} if noise_std is None else {"noise_std": noise_std}
    n = 20_000
    _, y, y_true = make_step_turn_series(n_samples=n, random_state=5, **kwargs)
    r = y - y_true
    for j in range(2):
        assert abs(np.std(r[:, j], ddof=1) - s) <= 4 * s / np.sqrt(2 * n)
        assert abs(np.mean(r[:, j])) <= 4 * s / np.sqrt(n)
    assert abs(np.corrcoef(r.T)[0, 1]) <= 4 / np.sqrt(n)


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        ({"n_samples": 0}, ValueError, r"n_samples=0 must be >= 1"),
        ({"n_samples": 2.5}, TypeError, r"n_samples must be an int; got 2.5"),
        ({"noise_std": -0.1}, ValueError, r"noise_std=-0.1 must be a real number >= 0"),
    ],
)
def test_step_turn_bad_arguments(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        make_step_turn_series(**kwargs)


def test_rhombus_shapes_and_dtypes():
    for shape in ("script", "paper"):
        X, y = make_annular_rhombus(random_state=0, shape=shape)
        assert X.shape == (500, 2) and y.shape == (500,)
        assert X.dtype == np.float64 and y.dtype == np.int64
        assert set(np.unique(y)) <= {0, 1, 2}
        np.testing.assert_array_equal(y, rhombus_labels(X, shape=shape))


@pytest.mark.parametrize("shape", ["script", "paper"])
@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4])
def test_rhombus_all_classes(shape, seed):
    _, y = make_annular_rhombus(n_samples=500, shape=shape, random_state=seed)
    counts = np.bincount(y, minlength=3)
    assert counts.shape == (3,) and np.all(counts > 0)


def test_rhombus_reproducible():
    X1, y1 = make_annular_rhombus(n_samples=50, random_state=3)
    X2, y2 = make_annular_rhombus(n_samples=50, random_state=np.random.RandomState(3))
    np.testing.assert_array_equal(X1, X2)
    np.testing.assert_array_equal(y1, y2)
    X3, y3 = make_annular_rhombus(n_samples=50, random_state=4)
    assert not np.any(X1 == X3) and not np.array_equal(y1, y3)


def test_rhombus_inputs_standard_normal():
    # x ~ N(0, I_2): sample means within 4 standard errors (1/sqrt(n)), variances within 4
    # (sqrt(2/n)),
    # correlation within 4/sqrt(n).
    n = 20_000
    X, _ = make_annular_rhombus(n_samples=n, random_state=6)
    assert np.all(np.abs(X.mean(axis=0)) <= 4 / np.sqrt(n))
    assert np.all(np.abs(X.var(axis=0, ddof=1) - 1) <= 4 * np.sqrt(2 / n))
    assert abs(np.corrcoef(X.T)[0, 1]) <= 4 / np.sqrt(n)


# Hand computations with u = 0.857396, a = 0.4 u pi = 1.077436:
# script y = round(cos(a|x1| + |x2|) + 1); paper y = round(cos(a(|x1| + |x2|))) + 1.
RHOMBUS_POINTS = [
    # (x1, x2), script label (cos(.)+1), paper label (cos(.))
    ((0.0, 0.0), 2, 2),  # 2.0000 ; 1.0000
    ((1.0, 0.0), 1, 1),  # cos(a)+1 = 1.4736 ; cos(a) = 0.4736
    ((-1.0, 0.0), 1, 1),  # symmetric in the sign of x1
    ((0.0, 1.0), 2, 1),  # cos(1)+1 = 1.5403 ; cos(a) = 0.4736 -- the shapes differ
    ((0.0, -2.0), 1, 0),  # cos(2)+1 = 0.5839 ; cos(2a) = -0.5514 -- differ
    ((2.0, 0.0), 0, 0),  # cos(2a)+1 = 0.4486 ; -0.5514
    ((0.0, 3.0), 0, 0),  # cos(3)+1 = 0.0100 ; cos(3a) = -0.9959
    ((1.0, 1.0), 1, 0),  # cos(a+1)+1 = 0.5148 ; cos(2a) = -0.5514 -- differ
    ((-2.0, 2.5), 1, 1),  # cos(2a+2.5)+1 = 0.9425 ; cos(4.5a) = 0.1357
]


@pytest.mark.parametrize("shape, col", [("script", 1), ("paper", 2)])
def test_rhombus_labels_by_hand(shape, col):
    X = np.array([p[0] for p in RHOMBUS_POINTS])
    expected = np.array([p[col] for p in RHOMBUS_POINTS])
    got = rhombus_labels(X, shape=shape)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, expected)
    # Default shape is the script's.
    if shape == "script":
        np.testing.assert_array_equal(rhombus_labels(X), expected)


def test_rhombus_labels_other_u():
    # u = 1: a = 0.4 pi; u = 0.5: a = 0.2 pi.
    X = np.array([[1.0, 0.0], [0.0, 1.0], [2.0, 0.0], [1.0, 0.5]])
    # u = 1: script cos+1 = 1.3090, 1.5403, 0.1910, 0.8152;
    # paper cos = 0.3090, 0.3090, -0.8090, -0.3090
    np.testing.assert_array_equal(rhombus_labels(X, "script", u=1.0), [1, 2, 0, 1])
    np.testing.assert_array_equal(rhombus_labels(X, "paper", u=1.0), [1, 1, 0, 1])
    # u = 0.5: script 1.8090, 1.5403, 1.3090, 1.4282; paper 0.8090, 0.8090, 0.3090, 0.5878
    np.testing.assert_array_equal(rhombus_labels(X, "script", u=0.5), [2, 2, 1, 1])
    np.testing.assert_array_equal(rhombus_labels(X, "paper", u=0.5), [2, 2, 1, 2])
    _, y = make_annular_rhombus(n_samples=200, u=0.5, random_state=0)
    X0, y0 = make_annular_rhombus(n_samples=200, random_state=0)
    np.testing.assert_array_equal(y, rhombus_labels(X0, u=0.5))
    assert not np.array_equal(y, y0)


def test_rhombus_test_grid():
    # The benchmark's test set: the 50 x 50 grid of [-3, 3]^2; the majority class (0) holds
    # about 55% of it under the script's labels.
    g = np.linspace(-3, 3, 50)
    grid = np.column_stack([a.ravel() for a in np.meshgrid(g, g)])
    y = rhombus_labels(grid)
    assert y.shape == (2500,)
    assert np.argmax(np.bincount(y)) == 0
    assert 0.5 <= np.mean(y == 0) <= 0.6


@pytest.mark.parametrize("bad", ["Script", "l1", "", None, 1])
def test_rhombus_bad_shape(bad):
    with pytest.raises(ValueError, match=r"shape must be one of \('script', 'paper'\)"):
        make_annular_rhombus(shape=bad)
    with pytest.raises(ValueError, match=r"shape must be one of"):
        rhombus_labels(np.zeros((2, 2)), shape=bad)


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        ({"n_samples": 0}, ValueError, r"n_samples=0 must be >= 1"),
        ({"n_samples": -3}, ValueError, r"n_samples=-3 must be >= 1"),
        ({"n_samples": 2.5}, TypeError, r"n_samples must be an int; got 2.5"),
        ({"u": float("nan")}, ValueError, r"u=nan must be a finite real number"),
        ({"u": "0.5"}, ValueError, r"u='0.5' must be a finite real number"),
    ],
)
def test_rhombus_bad_arguments(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        make_annular_rhombus(**kwargs)


@pytest.mark.parametrize("X", [np.zeros(4), np.zeros((3, 3)), np.array([[0.0, np.nan]])])
def test_rhombus_labels_bad_X(X):
    with pytest.raises(ValueError, match=r"X must be of shape|NaN"):
        rhombus_labels(X)


# The authors' script (lanzithinking/DeepQEP, classification/run_Deep_QEP.py) under
# torch.random.manual_seed(2019): its first three rows, its last row and its u, recorded from a
# run of the script's own lines with torch's global generator.
AUTHORS_FIRST_ROWS = [
    [-0.6945516467094421, -0.39685964584350586],
    [-1.3275498151779175, 1.6633297204971313],
    [-1.1975913047790527, -1.1075340509414673],
]
AUTHORS_LAST_ROW = [-0.171395406126976, 1.017090916633606]
AUTHORS_U = 0.8573957085609436


def _authors_script_labels(x1, x2, u):
    # The script's rule verbatim, in float32 torch (not rhombus_labels' float64 numpy).
    import torch

    x1, x2 = torch.as_tensor(x1, dtype=torch.float32), torch.as_tensor(x2, dtype=torch.float32)
    u = torch.tensor([u], dtype=torch.float32)
    return torch.round(torch.cos(0.4 * u * np.pi * torch.abs(x1) + torch.abs(x2)) + 1).long()


def test_authors_rhombus_values():
    X, y, u = load_authors_rhombus(return_u=True)
    assert X.shape == (500, 2) and y.shape == (500,)
    assert X.dtype == np.float64 and y.dtype == np.int64
    assert isinstance(u, float) and u == pytest.approx(AUTHORS_U, abs=1e-6)
    np.testing.assert_allclose(X[:3], AUTHORS_FIRST_ROWS, rtol=0, atol=1e-6)
    np.testing.assert_allclose(X[-1], AUTHORS_LAST_ROW, rtol=0, atol=1e-6)
    # The inputs are float32 draws: converting back loses nothing.
    np.testing.assert_array_equal(X.astype(np.float32).astype(np.float64), X)
    np.testing.assert_array_equal(np.bincount(y, minlength=3), [131, 226, 143])
    np.testing.assert_array_equal(y, rhombus_labels(X, u=u))
    # rhombus_labels' rounded default u and the script's float32 arithmetic agree as well.
    np.testing.assert_array_equal(y, rhombus_labels(X))
    np.testing.assert_array_equal(y, _authors_script_labels(X[:, 0], X[:, 1], u).numpy())
    X2, y2 = load_authors_rhombus()
    np.testing.assert_array_equal(X2, X)
    np.testing.assert_array_equal(y2, y)


def test_authors_rhombus_matches_global_seed():
    # The private generator gives what the script's global torch.random.manual_seed(2019)
    # gives, in the script's draw order x, y, u.
    import torch

    state = torch.random.get_rng_state()
    try:
        torch.random.manual_seed(2019)
        # The script ran under torch's stock default dtype, float32.
        f32 = torch.float32
        x1, x2 = torch.randn(500, 1, dtype=f32), torch.randn(500, 1, dtype=f32)
        u = torch.rand(1, dtype=f32)
    finally:
        torch.random.set_rng_state(state)
    X, y, u_ours = load_authors_rhombus(return_u=True)
    np.testing.assert_array_equal(X, torch.cat((x1, x2), 1).double().numpy())
    assert u_ours == u.item()
    np.testing.assert_array_equal(y, _authors_script_labels(x1[:, 0], x2[:, 0], u.item()).numpy())


def test_authors_rhombus_leaves_global_rng_alone():
    import torch

    torch_state = torch.random.get_rng_state()
    numpy_state = np.random.get_state()
    load_authors_rhombus()
    assert torch.equal(torch.random.get_rng_state(), torch_state)
    after = np.random.get_state()
    assert after[0] == numpy_state[0] and np.array_equal(after[1], numpy_state[1])
    assert after[2:] == numpy_state[2:]


def test_authors_rhombus_ignores_default_dtype():
    # Under a float64 default dtype (as the benchmarks set it) torch's samplers draw other
    # values from the same seed; the data set must not change.
    import torch

    X, y = load_authors_rhombus()
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        X64, y64 = load_authors_rhombus()
    finally:
        torch.set_default_dtype(previous)
    np.testing.assert_array_equal(X64, X)
    np.testing.assert_array_equal(y64, y)
    np.testing.assert_allclose(X64[:3], AUTHORS_FIRST_ROWS, rtol=0, atol=1e-6)


def test_authors_rhombus_grid_labels():
    # The test grid's labels as the script computes them (float32 torch, with the script's u)
    # equal rhombus_labels' (float64, default u), so benchmarks can label the grid with the
    # latter.
    _, _, u = load_authors_rhombus(return_u=True)
    g = np.linspace(-3, 3, 50)
    x1, x2 = np.meshgrid(g, g)
    grid = np.column_stack([x1.ravel(), x2.ravel()])
    expected = _authors_script_labels(grid[:, 0], grid[:, 1], u).numpy()
    np.testing.assert_array_equal(rhombus_labels(grid), expected)
    np.testing.assert_array_equal(rhombus_labels(grid, u=u), expected)


# ----------------------------------------------------------------------------- corrupt_digits

from sklearn.datasets import load_digits  # noqa: E402

from skgpx.datasets import DIGIT_CORRUPTIONS, corrupt_digits  # noqa: E402

_DIGITS = load_digits().data[:400]


@pytest.mark.parametrize("kind", sorted(DIGIT_CORRUPTIONS))
def test_corrupt_digits_shape_range_determinism_and_input_untouched(kind):
    X = _DIGITS.copy()
    out = corrupt_digits(X, kind, 3, random_state=0)
    assert out.shape == X.shape and out.dtype == np.float64
    assert out.min() >= 0.0 and out.max() <= 16.0
    np.testing.assert_array_equal(X, _DIGITS)
    np.testing.assert_array_equal(out, corrupt_digits(X, kind, 3, random_state=0))
    assert not np.array_equal(out, X)


@pytest.mark.parametrize("kind", sorted(DIGIT_CORRUPTIONS))
def test_corruption_grows_with_severity(kind):
    # mean absolute change from the clean images is non-decreasing in severity (shift: 1, 1,
    # 2, 2, 3 pixels, so levels 1 and 2 tie in distribution)
    change = [np.abs(corrupt_digits(_DIGITS, kind, s, random_state=s) - _DIGITS).mean()
              for s in range(1, 6)]
    assert change[-1] > change[0]
    assert all(b >= a * 0.9 for a, b in zip(change, change[1:]))


def test_gaussian_noise_level_and_salt_and_pepper_fraction():
    blank = np.full((4000, 64), 8.0)  # 0.5 in [0, 1]: at sd 0.12 clipping needs 4.2 sd (3e-5)
    noisy = corrupt_digits(blank, "gaussian_noise", 3, random_state=0) / 16 - 0.5
    n = noisy.size
    # sample sd within 4 standard errors (sd / sqrt(2n)) of 0.12
    assert abs(noisy.std() - 0.12) < 4 * 0.12 / np.sqrt(2 * n)
    hit = corrupt_digits(blank, "salt_and_pepper", 2, random_state=1) != 8.0
    assert abs(hit.mean() - 0.05) < 4 * np.sqrt(0.05 * 0.95 / n)


def test_contrast_shift_and_blur_by_hand():
    image = np.zeros((8, 8))
    image[3, 4] = 16.0
    X = image.reshape(1, 64)
    low = corrupt_digits(X, "contrast", 5).reshape(8, 8) / 16
    mean = 1 / 64
    assert low[3, 4] == pytest.approx(mean + 0.2 * (1 - mean))
    assert low[0, 0] == pytest.approx(mean - 0.2 * mean)
    shifted = corrupt_digits(X, "shift", 5, random_state=0).reshape(8, 8)
    (row,), (col,) = np.nonzero(shifted)
    assert max(abs(row - 3), abs(col - 4)) == 3 and shifted[row, col] == 16.0
    blurred = corrupt_digits(X, "blur", 5).reshape(8, 8)
    assert blurred.sum() == pytest.approx(16.0, rel=0.02)  # the kernel keeps mass inside
    assert blurred[3, 4] < 16.0 and blurred[3, 5] > 0.0 and blurred[3, 5] == blurred[3, 3]


def test_corrupt_digits_rejects_bad_arguments():
    with pytest.raises(ValueError, match="kind"):
        corrupt_digits(_DIGITS, "rain", 1)
    with pytest.raises(ValueError, match="severity"):
        corrupt_digits(_DIGITS, "blur", 6)
    with pytest.raises(ValueError, match="64"):
        corrupt_digits(_DIGITS[:, :10], "blur", 1)


# ---------------------------------------------------------------------------------------------
# Robust and heteroscedastic regression: make_heteroscedastic, make_friedman_outliers

from sklearn.datasets import make_friedman1  # noqa: E402

from skgpx.datasets import make_friedman_outliers, make_heteroscedastic  # noqa: E402


def _hetero_mean(X):
    # sin(3 x_0) + sin(3 x_1 + 1) / 2 + sin(3 x_2 + 2) / 3 + ..., written out by hand
    if X.shape[1] == 1:
        return np.sin(3 * X[:, 0])
    return (np.sin(3 * X[:, 0]) + np.sin(3 * X[:, 1] + 1) / 2 + np.sin(3 * X[:, 2] + 2) / 3
            + np.sin(3 * X[:, 3] + 3) / 4 + np.sin(3 * X[:, 4] + 4) / 5)


@pytest.mark.parametrize("d", [1, 5])
def test_heteroscedastic_shapes_mean_and_noise_by_hand(d):
    X, y, s, f = make_heteroscedastic(500, n_features=d, random_state=0, return_noise=True)
    assert X.shape == (500, d) and y.shape == s.shape == f.shape == (500,)
    assert all(a.dtype == np.float64 for a in (X, y, s, f))
    assert X.min() >= -1 and X.max() <= 1
    np.testing.assert_allclose(f, _hetero_mean(X), rtol=0, atol=1e-14)
    # s(x) = 0.5 * 10 ** ((x_0 - 1) / 2): 0.05 at x_0 = -1, 0.5 at x_0 = 1
    np.testing.assert_allclose(s, 0.5 * 10.0 ** ((X[:, 0] - 1) / 2), rtol=1e-14, atol=0)
    # the same seed without return_noise gives the same X and y
    X2, y2 = make_heteroscedastic(500, n_features=d, random_state=0)
    np.testing.assert_array_equal(X, X2)
    np.testing.assert_array_equal(y, y2)


@pytest.mark.parametrize("ratio", [10.0, 3.0])
def test_heteroscedastic_noise_level_and_range(ratio):
    # (y - f) / s must be iid N(0, 1): its mean square lies within 5 s.e. (sqrt(2 / n)) of 1
    # and its mean within 5 / sqrt(n) of 0; a wrong scale (e.g. s used as a variance) moves
    # the mean square by a factor of ~3 or more.  The std varies ratio-fold over the data:
    # the largest and smallest of 20 000 draws lie within 0.2 % of the ends of the range.
    n = 20_000
    X, y, s, f = make_heteroscedastic(n, n_features=2, noise_ratio=ratio, random_state=1,
                                      return_noise=True)
    z = (y - f) / s
    assert abs(np.mean(z**2) - 1) <= 5 * np.sqrt(2 / n)
    assert abs(np.mean(z)) <= 5 / np.sqrt(n)
    assert s.max() / s.min() == pytest.approx(ratio, rel=0.01)
    assert s.max() == pytest.approx(0.5, rel=0.005)
    # the quietest and loudest deciles of the noise: residual stds near their own s
    lo, hi = s <= np.quantile(s, 0.1), s >= np.quantile(s, 0.9)
    assert np.std(y[hi] - f[hi]) / np.std(y[lo] - f[lo]) > 0.6 * ratio


def test_heteroscedastic_reproducible_and_ratio_one_is_homoscedastic():
    a = make_heteroscedastic(50, n_features=3, random_state=3)
    b = make_heteroscedastic(50, n_features=3, random_state=np.random.RandomState(3))
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    assert not np.array_equal(a[1], make_heteroscedastic(50, n_features=3, random_state=4)[1])
    _, _, s, _ = make_heteroscedastic(50, noise_ratio=1.0, random_state=0, return_noise=True)
    np.testing.assert_array_equal(s, np.full(50, 0.5))


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        ({"n_samples": 0}, ValueError, r"n_samples=0 must be >= 1"),
        ({"n_samples": 2.5}, TypeError, r"n_samples must be an int"),
        ({"n_features": 0}, ValueError, r"n_features=0 must be an int >= 1"),
        ({"n_features": 1.5}, ValueError, r"n_features=1.5 must be an int >= 1"),
        ({"noise_ratio": 0.5}, ValueError, r"noise_ratio=0.5 must be a finite real"),
        ({"noise_ratio": np.inf}, ValueError, r"noise_ratio=inf must be a finite real"),
        ({"noise_ratio": "10"}, ValueError, r"noise_ratio='10' must be a finite real"),
    ],
)
def test_heteroscedastic_bad_arguments(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        make_heteroscedastic(**{"n_samples": 10, **kwargs})


def test_friedman_outliers_are_friedman1_plus_shifts():
    X, y, f, out = make_friedman_outliers(2000, random_state=7)
    Xc, yc = make_friedman1(2000, n_features=10, noise=1.0, random_state=7)
    assert X.shape == (2000, 10) and y.shape == f.shape == out.shape == (2000,)
    assert out.dtype == bool and out.sum() == 100
    np.testing.assert_array_equal(X, Xc)
    np.testing.assert_array_equal(y[~out], yc[~out])
    np.testing.assert_allclose(np.abs(y[out] - yc[out]), 30.0, rtol=0, atol=1e-12)
    # both signs occur (100 fair coins: all one sign has probability 2^-99)
    shift = y[out] - yc[out]
    assert (shift > 0).any() and (shift < 0).any()
    # f is Friedman #1 by hand, and the clean residuals are the N(0, 1) noise
    f_hand = (10 * np.sin(np.pi * X[:, 0] * X[:, 1]) + 20 * (X[:, 2] - 0.5) ** 2
              + 10 * X[:, 3] + 5 * X[:, 4])
    np.testing.assert_allclose(f, f_hand, rtol=0, atol=1e-12)
    r = yc - f
    assert abs(np.mean(r**2) - 1) <= 5 * np.sqrt(2 / 2000)


def test_friedman_outliers_options():
    X, y, f, out = make_friedman_outliers(1000, noise=0.0, outlier_fraction=0.1,
                                          outlier_shift=5.0, random_state=0)
    assert out.sum() == 100
    np.testing.assert_allclose(y[~out], f[~out], rtol=0, atol=1e-12)
    np.testing.assert_allclose(np.abs(y[out] - f[out]), 5.0, rtol=0, atol=1e-12)
    X0, y0, _, out0 = make_friedman_outliers(300, outlier_fraction=0.0, random_state=2)
    assert not out0.any()
    np.testing.assert_array_equal(y0, make_friedman1(300, noise=1.0, random_state=2)[1])
    # round(fraction * n) rows: 0.05 * 30 = 1.5 -> 2
    assert make_friedman_outliers(30, random_state=0)[3].sum() == 2


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        ({"n_samples": 0}, ValueError, r"n_samples=0 must be >= 1"),
        ({"noise": -1.0}, ValueError, r"noise=-1.0 must be a finite real number in \[0.0"),
        ({"outlier_fraction": 1.5}, ValueError, r"outlier_fraction=1.5 must be .*1.0\]"),
        ({"outlier_fraction": -0.1}, ValueError, r"outlier_fraction=-0.1 must be"),
        ({"outlier_shift": np.nan}, ValueError, r"outlier_shift=nan must be a finite real"),
    ],
)
def test_friedman_outliers_bad_arguments(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        make_friedman_outliers(**kwargs)
