"""Posterior function draws: consistency, reproducibility,
devices, pickling, the link to ``sample_y`` and differentiability."""

import pickle

import numpy as np
import pytest
import torch
from sklearn.gaussian_process.kernels import ConstantKernel, Matern

from skgpx import PathwiseFunctions, PathwiseGPSampler

from ._oracles import NOISE, full_kernel, query_points, sine_data

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]

# draw configurations: every way of building a draw
CONFIGS = {
    "shared": dict(),
    "independent": dict(shared_basis=False, n_features=64),
    "cosine": dict(feature_map="cosine", n_features=101),
    "weight-space": dict(method="weight_space", n_features=64),
}


def _three_targets():
    X, y = sine_data()
    rng = np.random.RandomState(3)
    Y = np.column_stack([y, np.cos(X[:, 0]) + 0.3 * rng.standard_normal(30), 2.0 * y + 4.0])
    return X, Y


def _fitted(config="shared", targets=1, name="matern52", device="cpu", **params):
    X, y = sine_data() if targets == 1 else _three_targets()
    est = PathwiseGPSampler(full_kernel(name), optimizer=None, predict_noise="latent",
                            normalize_y=targets > 1, device=device,
                            **{**CONFIGS[config], **params})
    return est.fit(X, y)


@pytest.mark.parametrize("targets", [1, 3])
@pytest.mark.parametrize("config", list(CONFIGS))
def test_draws_are_consistent_functions(config, targets):
    Xq = query_points()
    X1, X2 = Xq[::2], Xq[1::2]
    est = _fitted(config, targets)
    f = est.sample_functions(n_samples=6, random_state=0)
    assert isinstance(f, PathwiseFunctions)
    assert (f.n_samples, f.n_targets, f.n_features_in_) == (6, targets, 1)
    values = f(Xq)
    assert values.shape == ((40, 6) if targets == 1 else (40, 3, 6))
    assert values.dtype == np.float64
    np.testing.assert_array_equal(values, f(Xq))  # a draw is a pure function of its state
    # subsets and order: the same path gives the same value at the same point
    union = f(np.vstack([X1, X2]))
    np.testing.assert_allclose(union[:20], f(X1), rtol=0, atol=1e-12)
    np.testing.assert_allclose(union[20:], f(X2), rtol=0, atol=1e-12)
    reversed_rows = np.ascontiguousarray(Xq[::-1])  # strided views: test_contract.py
    np.testing.assert_allclose(f(reversed_rows)[::-1], values, rtol=0, atol=1e-12)
    np.testing.assert_allclose(f(Xq[7:8]), values[7:8], rtol=0, atol=1e-12)
    # row chunking is invisible
    chunked = est.set_params(batch_size=7).sample_functions(n_samples=6, random_state=0)
    np.testing.assert_allclose(chunked(Xq), values, rtol=0, atol=1e-12)
    # evaluate_batched: path s at its own points Xb[s]
    Xb = np.random.RandomState(4).uniform(-1.0, 5.0, size=(6, 5, 1))
    batched = f.evaluate_batched(Xb)
    assert batched.shape == ((6, 5) if targets == 1 else (6, 5, 3))
    for s in range(6):
        np.testing.assert_allclose(batched[s], f(Xb[s])[..., s], rtol=0, atol=1e-12)


@pytest.mark.parametrize("config", list(CONFIGS))
def test_sample_y_equals_sample_functions(config):
    # with prior="rff" and latent noise, sample_y(X, S, r) == sample_functions(S, r)(X)
    # bit for bit (same generator stream, same order of draws).
    Xq = query_points()
    for targets in (1, 3):
        est = _fitted(config, targets)
        np.testing.assert_array_equal(est.sample_y(Xq, n_samples=5, random_state=11),
                                      est.sample_functions(5, random_state=11)(Xq))


def test_sample_y_without_white_kernel_equals_functions_under_sklearn_noise():
    # No WhiteKernel: predict_noise="sklearn" adds nothing (alpha is training-only).
    X, y = sine_data()
    Xq = query_points()
    est = PathwiseGPSampler(ConstantKernel(1.0, "fixed") * Matern(0.5, "fixed", nu=1.5),
                            alpha=NOISE, optimizer=None, device="cpu").fit(X, y)
    np.testing.assert_array_equal(est.sample_y(Xq, 5, random_state=2),
                                  est.sample_functions(5, random_state=2)(Xq))


@pytest.mark.parametrize("predict_noise, alpha, noise_var", [
    ("sklearn", 0.05, NOISE),          # WhiteKernel noise in, alpha out
    ("observed", 0.05, NOISE + 0.05),  # WhiteKernel noise plus a scalar alpha
    ("observed", "array", NOISE),      # an alpha array adds nothing at new inputs
])
def test_sample_y_adds_the_documented_observation_noise(predict_noise, alpha, noise_var):
    # sample_y = latent function draw + independent noise of variance noise_var * s_y^2
    # (normalize_y on, s_y = std(y)).  With N = 40 * 500 values the sample variance of the
    # difference has standard error noise_var * s_y^2 * sqrt(2 / N); allow k = 5, and the
    # sample mean k = 5 standard errors.
    X, y = sine_data()
    Xq = query_points()
    if alpha == "array":
        alpha = np.random.RandomState(5).uniform(0.01, 0.1, 30)
    est = PathwiseGPSampler(full_kernel("rbf"), alpha=alpha, normalize_y=True, optimizer=None,
                            predict_noise=predict_noise, device="cpu").fit(X, y)
    diff = est.sample_y(Xq, 500, random_state=3) - est.sample_functions(500, 3)(Xq)
    target = noise_var * y.std() ** 2
    n = diff.size
    assert abs(diff.var() - target) <= 5 * target * np.sqrt(2.0 / n), (diff.var(), target)
    assert abs(diff.mean()) <= 5 * np.sqrt(target / n)


@pytest.mark.parametrize("config", list(CONFIGS))
def test_random_state_controls_draws(config):
    Xq = query_points()
    est = _fitted(config)
    a = est.sample_functions(4, random_state=0)(Xq)
    np.testing.assert_array_equal(a, est.sample_functions(4, random_state=0)(Xq))
    assert np.abs(a - est.sample_functions(4, random_state=1)(Xq)).min() > 0
    np.testing.assert_array_equal(est.sample_y(Xq, 4, random_state=0),
                                  est.sample_y(Xq, 4, random_state=0))
    assert np.abs(est.sample_y(Xq, 4, random_state=0)
                  - est.sample_y(Xq, 4, random_state=1)).min() > 0
    # a RandomState instance seeds reproducibly too
    np.testing.assert_array_equal(est.sample_y(Xq, 4, np.random.RandomState(9)),
                                  est.sample_y(Xq, 4, np.random.RandomState(9)))


@pytest.mark.parametrize("config", list(CONFIGS))
def test_pickled_functions_give_identical_values(config):
    Xq = query_points()
    f = _fitted(config, targets=3).sample_functions(5, random_state=4)
    g = pickle.loads(pickle.dumps(f))
    np.testing.assert_array_equal(g(Xq), f(Xq))
    Xb = np.random.RandomState(6).uniform(-1.0, 5.0, size=(5, 3, 1))
    np.testing.assert_array_equal(g.evaluate_batched(Xb), f.evaluate_batched(Xb))


def test_functions_saved_on_cuda_load_on_cpu_with_the_estimators_warning(monkeypatch):
    # the functions object and the estimators share one loading rule (skgpx._base)
    Xq = query_points()
    f = _fitted("shared").sample_functions(3, random_state=4)
    state = f.__getstate__()
    state["_device"] = "cuda:0"  # as pickled from a GPU fit
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    g = PathwiseFunctions.__new__(PathwiseFunctions)
    with pytest.warns(UserWarning, match="fitted on 'cuda:0' but CUDA is not available"):
        g.__setstate__(state)
    assert g.device.type == "cpu"
    np.testing.assert_array_equal(g(Xq), f(Xq))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("config", list(CONFIGS))
def test_draws_agree_across_devices(config, device):
    # Draws come from a CPU generator and then move, so any device reproduces the CPU
    # values (1e-10); .to(device) moves a draw without changing it.
    Xq = query_points()
    reference = _fitted(config, targets=3, device="cpu")
    est = _fitted(config, targets=3, device=device)
    assert est.device_ == device
    f = est.sample_functions(5, random_state=4)
    assert f.device.type == torch.device(device).type
    expected = reference.sample_functions(5, random_state=4)(Xq)
    np.testing.assert_allclose(f(Xq), expected, rtol=0, atol=1e-10)
    np.testing.assert_allclose(est.sample_y(Xq, 5, random_state=4),
                               reference.sample_y(Xq, 5, random_state=4), rtol=0, atol=1e-10)
    np.testing.assert_allclose(est.predict(Xq), reference.predict(Xq), rtol=0, atol=1e-10)
    Xt = torch.tensor(Xq, device=device)
    assert f(Xt).device.type == torch.device(device).type
    np.testing.assert_allclose(f.to("cpu")(Xq), expected, rtol=0, atol=1e-10)
    np.testing.assert_allclose(f.to(device)(Xq), expected, rtol=0, atol=1e-10)


@pytest.mark.gpu
def test_gpu_fit_reloads_on_cpu_without_cuda(monkeypatch):
    Xq = query_points()
    est = _fitted("shared", device="cuda")
    expected = est.predict(Xq, return_std=True)
    draws = est.sample_y(Xq, 3, random_state=0)
    blob = pickle.dumps(est)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.warns(UserWarning, match="CUDA is not available"):
        loaded = pickle.loads(blob)
    assert loaded.device_ == "cpu"
    np.testing.assert_allclose(loaded.predict(Xq, return_std=True), expected, atol=1e-10)
    np.testing.assert_allclose(loaded.sample_y(Xq, 3, random_state=0), draws, atol=1e-10)


def _away_from_training(n, seed):
    """n query points at least 0.02 from every training input."""
    X, _ = sine_data()
    rng = np.random.RandomState(seed)
    points = []
    while len(points) < n:
        x = rng.uniform(-0.5, 4.5)
        if np.abs(X[:, 0] - x).min() > 0.02:
            points.append(x)
    return np.array(points)[:, None]


@pytest.mark.parametrize("config", ["shared", "independent"])
@pytest.mark.parametrize("targets", [1, 3])
@pytest.mark.parametrize("name", ["rbf", "matern52"])
def test_functions_pass_gradcheck(name, targets, config):
    f = _fitted(config, targets, name=name).sample_functions(3, random_state=5)
    Xt = torch.tensor(_away_from_training(5, seed=0), dtype=torch.float64, requires_grad=True)
    out = f(Xt)
    assert isinstance(out, torch.Tensor) and out.requires_grad
    np.testing.assert_allclose(out.detach().numpy(), f(Xt.detach().numpy()), atol=1e-12)
    assert torch.autograd.gradcheck(f, (Xt,), eps=1e-6, atol=1e-5, rtol=1e-4)
    Xb = torch.tensor(_away_from_training(6, seed=1).reshape(3, 2, 1), requires_grad=True)
    assert torch.autograd.gradcheck(f.evaluate_batched, (Xb,), eps=1e-6, atol=1e-5,
                                    rtol=1e-4)


@pytest.mark.parametrize("name", ["matern12", "matern32"])
def test_gradient_is_finite_at_a_training_input(name):
    # sqrt(r^2) has an infinite derivative at r = 0; the update term must not turn that
    # into NaN at a query point that coincides with a centre.
    est = _fitted("shared", name=name)
    f = est.sample_functions(3, random_state=6)
    Xt = torch.tensor(est.X_train_[:4], requires_grad=True)
    f(Xt).sum().backward()
    assert torch.isfinite(Xt.grad).all()
    Xb = torch.tensor(est.X_train_[:6].reshape(3, 2, 1), requires_grad=True)
    f.evaluate_batched(Xb).sum().backward()
    assert torch.isfinite(Xb.grad).all()


@pytest.mark.parametrize("config", ["shared", "independent", "cosine"])
def test_feature_major_evaluation_equals_the_feature_matrix(config):
    # f(X) forms W^T phi(X)^T block by block into reused buffers, its cos/sin rows by the
    # numba kernel of skgpx._trig; evaluate_batched and the autograd route form
    # phi(X) @ W with torch's cos and sin.  Constant and linear blocks included, d = 2.
    from sklearn.gaussian_process.kernels import RBF, DotProduct, WhiteKernel

    rng = np.random.RandomState(0)
    X = rng.uniform(-1, 1, (25, 2))
    y = X[:, 0] * 2 + np.sin(3 * X[:, 1]) + 0.1 * rng.standard_normal(25)
    kernel = (ConstantKernel(1.5) * RBF([0.7, 1.3]) + ConstantKernel(0.4)
              + DotProduct(sigma_0=0.8) + WhiteKernel(0.01))
    n_features = 65 if config == "cosine" else 66
    est = PathwiseGPSampler(kernel, optimizer=None, **{**CONFIGS[config], "n_features": n_features})
    f = est.fit(X, y).sample_functions(4, random_state=1)
    Xq = rng.uniform(-1.5, 1.5, (4, 9, 2))
    batched = f.evaluate_batched(Xq)
    for s in range(4):
        np.testing.assert_allclose(f(Xq[s])[:, s], batched[s], rtol=0, atol=1e-12)
    Xt = torch.tensor(Xq[0], requires_grad=True)
    np.testing.assert_allclose(f(Xt).detach().numpy(), f(Xq[0]), rtol=0, atol=1e-12)


def _far_from_home_draws(config):
    """Draws of a 2-D fit whose query rows span several evaluation blocks (batch_size=196:
    blocks of 192 rows, 176 of them query rows), one row so far out that its phases go
    past the one-pass cos/sin reduction.  "spread": the sparse fit on data spanning 200
    length scales, whose cross-kernel blocks are formed from differences."""
    from sklearn.gaussian_process.kernels import RBF, WhiteKernel

    rng = np.random.RandomState(0)
    X = rng.uniform(-2, 2, (60, 2))
    y = np.sin(2 * X[:, 0]) * X[:, 1] + 0.1 * rng.standard_normal(60)
    spread = 30.0 if config == "spread" else 1.0
    params = dict(sparse=dict(n_inducing=13), spread=dict(n_inducing=13),
                  exact=dict(feature_map="cosine", n_features=63))
    est = PathwiseGPSampler(ConstantKernel(2.0) * RBF([0.6, 0.9]) + WhiteKernel(0.01),
                            optimizer=None, batch_size=196, random_state=0, **params[config])
    f = est.fit(spread * X, y).sample_functions(3, random_state=1)
    Xq = spread * rng.uniform(-3, 3, (600, 2))
    Xq[301] = [3e7, -2e7]
    return f, Xq


def assert_values_independent_of_the_split(config):
    f, Xq = _far_from_home_draws(config)
    whole = f(Xq)
    assert np.isfinite(whole).all()
    # single rows around a block boundary and the far row, then pieces that end on, before
    # and after every block boundary (176 k rows)
    for a in [*range(170, 180), *range(296, 306)]:
        np.testing.assert_array_equal(f(Xq[a : a + 1]), whole[a : a + 1], err_msg=f"row {a}")
    for size in (7, 175, 176, 177, 191, 192, 193, 353):
        pieces = np.concatenate([f(Xq[a : a + size]) for a in range(0, len(Xq), size)])
        np.testing.assert_array_equal(pieces, whole, err_msg=f"pieces of {size} rows")
    order = np.random.RandomState(2).permutation(len(Xq))
    np.testing.assert_array_equal(f(Xq[order]), whole[order])
    np.testing.assert_array_equal(f(np.vstack([Xq[:301], Xq[302:]])),
                                  np.vstack([whole[:301], whole[302:]]))  # without the far row
    np.testing.assert_array_equal(f.values(torch.from_numpy(Xq[5:400])).numpy()[..., 0],
                                  whole[5:400])  # (n, S, T) with T = 1


@pytest.mark.parametrize("numba", ["numba", "torch cos/sin"])
@pytest.mark.parametrize("config", ["sparse", "spread", "exact"])
def test_a_value_does_not_depend_on_the_rows_evaluated_with_it(config, numba, monkeypatch):
    # f(X) promises the same bits at a point whichever rows come with it: no product or
    # elementwise pass may round a row differently for its place in a block, its block's
    # length, or a neighbour (the far row once sent its whole block to torch's cos/sin)
    from skgpx import _trig

    if numba == "numba":
        assert _trig._kernel() is not None, "numba is missing: pip install skgpx[fast]"
    else:
        monkeypatch.setattr(_trig, "_kernel", lambda: None)
    assert_values_independent_of_the_split(config)


@pytest.mark.slow  # a fresh interpreter: 15 s
def test_a_value_does_not_depend_on_the_rows_evaluated_with_it_under_mkl_avx2():
    # MKL's AVX2 code (what an AVX2-only CPU runs) finishes a product's last columns with
    # other code, rounding them differently; MKL_CBWR selects that code on any x86 CPU
    # that has AVX2, and must be set before MKL loads: a fresh interpreter (torch's cos
    # and sin, so that only the products can differ)
    import os
    import subprocess
    import sys

    # (without MKL the variable is ignored and the check runs on the BLAS torch has)
    env = {**os.environ, "MKL_CBWR": "AVX2", "ATEN_CPU_CAPABILITY": "avx2",
           "SKGPX_DISABLE_NUMBA": "1"}
    code = ("from tests.pathwise.test_functions import assert_values_independent_of_the_split"
            " as check; check('sparse'); check('spread'); check('exact')")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    run = subprocess.run([sys.executable, "-c", code], env=env, cwd=root, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]


def test_values_are_as_accurate_as_the_draws_own_sums_allow():
    # A value is sum_i w_i phi_i(x) + sum_j v_j k(x, z_j); the sparse update's weights can
    # be large (|v| ~ 1/eigenvalues of Kzz) and cancel, so a float64 evaluation can only
    # be within a few eps * (sum_i |w_i phi_i| + sum_j |v_j k_j|) of the exact value: each
    # term is rounded (cos/sin within 2.3e-16 absolutely, k within a few ulp) and summed.
    # The reference evaluates the same stored state in 80-bit long double.
    # the reference needs a long double wider than double (x86-64 and aarch64 Linux have one)
    assert np.finfo(np.longdouble).eps < 1e-18
    f, Xq = _far_from_home_draws("sparse")
    Xq = np.delete(Xq, 301, axis=0)  # the far row has no accurate reference phase
    ld = np.longdouble

    def wide(t):
        return t.detach().cpu().numpy().astype(ld)

    (block,) = f._features.blocks
    phase = (Xq.astype(ld) - wide(block.shift)) @ wide(block.frequencies[0]).T
    phi = ld(block.scale) * np.concatenate([np.cos(phase), np.sin(phase)], 1)
    Z, V = wide(f.centers_), wide(f.update_weights_).reshape(len(f.centers_), -1)
    # the fit's signal, optimizer=None: ConstantKernel(2.0) * RBF([0.6, 0.9])
    diff = (Xq.astype(ld)[:, None, :] - Z[None]) / np.array([0.6, 0.9], dtype=ld)
    K = ld(2.0) * np.exp(-0.5 * (diff * diff).sum(-1))
    W = wide(f.prior_weights_[0])
    exact = wide(f._y_mean) + wide(f._y_std) * (phi @ W + K @ V)
    size = wide(f._y_std) * (np.abs(phi) @ np.abs(W) + np.abs(K) @ np.abs(V))
    assert size.max() > 10 * np.abs(exact).max()  # the sums do cancel
    eps = np.finfo(np.float64).eps
    for numba in (True, False):
        from skgpx import _trig

        kernel_of = _trig._kernel
        try:
            if not numba:
                _trig._kernel = lambda: None
            for got in (f(Xq), np.concatenate([f(Xq[a : a + 7]) for a in range(0, len(Xq), 7)])):
                assert (np.abs(got - exact) <= 8 * eps * size).all()
        finally:
            _trig._kernel = kernel_of


@pytest.mark.parametrize("name", ["rbf", "matern32"])
def test_update_kernel_keeps_its_digits_when_data_span_many_length_scales(name):
    # The update part of a sparse draw is sum_j v_j k(x, z_j).  Over data spanning 170
    # length scales, |x'|^2 + |z'|^2 - 2 x'.z' rounded k(x, z) to 1e-12 relative (7000
    # eps); from the differences x - z it is within eps (1 + r^2) of the exact value.
    from sklearn.gaussian_process.kernels import RBF, WhiteKernel

    from skgpx._inducing._cross import stationary_cross

    # the reference needs a long double wider than double (x86-64 and aarch64 Linux have one)
    assert np.finfo(np.longdouble).eps < 1e-18
    rng = np.random.RandomState(0)
    X = rng.uniform(0, 50, (300, 2))
    y = np.sin(X[:, 0] / 0.3) + 0.1 * rng.standard_normal(300)
    base = RBF(0.3, "fixed") if name == "rbf" else Matern(0.3, "fixed", nu=1.5)
    est = PathwiseGPSampler(ConstantKernel(1.0, "fixed") * base + WhiteKernel(0.01, "fixed"),
                            n_inducing=40, optimizer=None, random_state=0).fit(X, y)
    f = est.sample_functions(2, random_state=0)
    Xq = rng.uniform(0, 50, (2000, 2))
    got = stationary_cross(f._kernel, f._theta, f.centers_).block(torch.from_numpy(Xq)).numpy()
    diff = Xq.astype(np.longdouble)[None] - f.centers_.numpy().astype(np.longdouble)[:, None]
    r = np.sqrt((diff * diff).sum(-1)) / np.longdouble(0.3)
    exact = np.exp(-r * r / 2) if name == "rbf" else (1 + np.sqrt(3) * r) * np.exp(-np.sqrt(3) * r)
    eps = np.finfo(np.float64).eps
    normal = exact > 1e-290  # float64 underflows below
    assert normal.mean() > 0.1
    error = np.abs(got - exact)[normal]
    assert (error <= 4 * eps * (1 + r * r)[normal] * exact[normal]).all()
