"""Torch kernels against scikit-learn: values, diagonals, theta gradients, X gradients."""

import numpy as np
import pytest
import torch
from sklearn.gaussian_process import kernels as sk

from skgpx.kernels import (
    TorchKernel,
    default_kernel,
    split_white_noise,
    unit_stationary_kernel,
)

RNG = np.random.RandomState(0)
X = RNG.randn(7, 3) * 2 + 100  # offset inputs, as the estimator checks use
Y = RNG.randn(5, 3) + 100
W = RNG.randn(7, 7)

# kernels with analytic gradients in scikit-learn: compared to 1e-10
KERNELS = [
    sk.RBF(0.7),
    sk.RBF([0.5, 1.0, 2.0]),
    sk.Matern(0.8, nu=0.5),
    sk.Matern([0.5, 1.0, 2.0], nu=1.5),
    sk.Matern(0.9, nu=2.5),
    sk.Matern(1.1, nu=np.inf),
    sk.RationalQuadratic(0.8, alpha=2.0),
    sk.ExpSineSquared(1.2, 3.0),
    sk.ConstantKernel(2.0) * sk.RBF(1.0) + sk.WhiteKernel(0.3),
    sk.DotProduct(0.5) * sk.ConstantKernel(0.1),
    sk.Exponentiation(sk.RBF(1.0), 2.0),
    sk.PairwiseKernel(gamma=0.3, metric="laplacian") + sk.RBF(2.0),  # numpy fallback node
    sk.ConstantKernel(1.0, "fixed") * sk.RBF([1.0, 2.0, 3.0], "fixed"),
]
# general nu: scikit-learn's gradient is a finite difference, so only values are compared
GENERAL_MATERN = [sk.Matern(1.3, nu=0.7), sk.Matern(1.3, nu=3.2)]


def _torch(a):
    return torch.tensor(a, dtype=torch.float64)


@pytest.mark.parametrize("kernel", KERNELS + GENERAL_MATERN, ids=str)
def test_values_match_sklearn(kernel):
    tk = TorchKernel(kernel)
    np.testing.assert_allclose(tk(_torch(X)).numpy(), kernel(X), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(tk(_torch(X), _torch(Y)).numpy(), kernel(X, Y),
                               rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(tk.diag(_torch(X)).numpy(), kernel.diag(X), rtol=1e-10,
                               atol=1e-12)


@pytest.mark.parametrize("kernel", KERNELS, ids=str)
def test_theta_gradient_matches_sklearn(kernel):
    tk = TorchKernel(kernel)
    K, K_gradient = kernel(X, eval_gradient=True)
    if K_gradient.shape[-1] == 0:
        assert tk.n_dims == 0
        return
    theta = tk.theta_tensor().requires_grad_(True)
    (tk(_torch(X), theta=theta) * _torch(W)).sum().backward()
    expected = np.einsum("ij,ijp->p", W, K_gradient)
    np.testing.assert_allclose(theta.grad.numpy(), expected, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("kernel", GENERAL_MATERN, ids=str)
def test_general_matern_gradients_by_gradcheck(kernel):
    tk = TorchKernel(kernel)
    Xt = _torch(RNG.randn(6, 3))
    theta = tk.theta_tensor().requires_grad_(True)
    assert torch.autograd.gradcheck(lambda t: tk(Xt, theta=t), (theta,))
    Xq = (Xt[:3] + 0.3).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda x: tk(x, Xt), (Xq,))


@pytest.mark.parametrize("nu", [0.5, 1.5, 2.5])
def test_gradient_is_finite_at_coincident_points(nu):
    tk = TorchKernel(sk.Matern(0.7, nu=nu))
    Xq = _torch(X[:2]).requires_grad_(True)
    tk(Xq, _torch(X)).sum().backward()
    assert torch.isfinite(Xq.grad).all()


UNIT_KERNELS = {"rbf": sk.RBF, "matern12": lambda ls: sk.Matern(ls, nu=0.5),
                "matern32": lambda ls: sk.Matern(ls, nu=1.5),
                "matern52": lambda ls: sk.Matern(ls, nu=2.5)}


@pytest.mark.parametrize("name", sorted(UNIT_KERNELS))
def test_unit_kernels_match_sklearn_per_unit(name):
    # three units with their own ARD length scales and output scales; X broadcast over
    # the units (the first layer) against per-unit inducing points, and a repeated row
    rng = np.random.RandomState(1)
    ls = rng.uniform(0.5, 2.0, size=(3, 1, 2))
    scale = np.array([0.5, 1.0, 2.0])
    Xn = rng.randn(40, 2)
    Zn = rng.randn(3, 30, 2)
    Zn[1, 4] = Xn[7]
    K = unit_stationary_kernel(_torch(Xn), _torch(Zn), _torch(ls), _torch(scale), name)
    assert K.shape == (3, 40, 30)
    for d in range(3):
        expected = scale[d] * UNIT_KERNELS[name](ls[d, 0])(Xn, Zn[d])
        np.testing.assert_allclose(K[d].numpy(), expected, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("name", sorted(UNIT_KERNELS))
def test_unit_kernels_are_exact_at_coincident_rows(name):
    # inducing points on data rows (as a fit initialises them), enough rows for torch's
    # cdist to take its |x|^2 + |y|^2 - 2 x.y route: there r came out near 1e-7 instead of
    # 0, and the Laplace kernel exp(-r) is off by as much
    rng = np.random.RandomState(0)
    Xn = 3.0 * rng.randn(300, 2)
    Zn = Xn[None, :30].copy()
    ls, scale = np.full((1, 1, 2), 0.7), np.array([1.3])
    K = unit_stationary_kernel(_torch(Xn), _torch(Zn), _torch(ls), _torch(scale), name)
    np.testing.assert_allclose(K[0, :30].diagonal().numpy(), 1.3, rtol=1e-13)


@pytest.mark.parametrize("name", sorted(UNIT_KERNELS))
def test_unit_kernel_gradients_by_gradcheck(name):
    # inputs, inducing points and length scales, with coincident rows (x = z and the
    # self-kernel's diagonal): every gradient against finite differences
    rng = np.random.RandomState(2)
    Xt = _torch(rng.randn(6, 2)).requires_grad_(True)
    Zt = _torch(rng.randn(2, 5, 2))
    Zt[0, 2] = Xt[3].detach() + (1e-3 if name == "matern12" else 0.0)
    Zt.requires_grad_(True)
    ls = _torch(rng.uniform(0.5, 2.0, size=(2, 1, 2))).requires_grad_(True)
    scale = _torch([0.7, 1.3]).requires_grad_(True)
    assert torch.autograd.gradcheck(
        lambda x, z, lengths, s: unit_stationary_kernel(x, z, lengths, s, name),
        (Xt, Zt, ls, scale))
    if name != "matern12":  # the Laplace kernel has no derivative at r = 0
        assert torch.autograd.gradcheck(
            lambda z, lengths: unit_stationary_kernel(z, z, lengths, scale, name), (Zt, ls))
        Zq = Zt.detach().clone().requires_grad_(True)
        unit_stationary_kernel(Zq, Zq, ls, scale, name).sum().backward()
        assert torch.isfinite(Zq.grad).all()


def test_default_kernel_is_sklearns():
    kernel = default_kernel()
    assert kernel.n_dims == 0
    np.testing.assert_allclose(kernel(X[:3]), sk.RBF(1.0)(X[:3]))


def test_split_white_noise_keeps_products():
    kernel = sk.ConstantKernel(2.0) * sk.RBF(1.0) + sk.WhiteKernel(0.3) + sk.WhiteKernel(0.2)
    signal, noise = split_white_noise(kernel)
    assert noise == pytest.approx(0.5)
    np.testing.assert_allclose(signal(X), (sk.ConstantKernel(2.0) * sk.RBF(1.0))(X))
    tk = TorchKernel(kernel)
    np.testing.assert_allclose(tk(_torch(X), part="signal").numpy(), signal(X), atol=1e-14)
    assert float(tk.noise_level()) == pytest.approx(0.5)
    # a WhiteKernel inside a product is part of the signal, not noise
    signal, noise = split_white_noise(sk.ConstantKernel(2.0) * sk.WhiteKernel(0.3))
    assert noise == 0.0 and signal is not None
    assert split_white_noise(sk.WhiteKernel(1.0)) == (None, 1.0)


def test_anisotropic_length_scale_must_match_features():
    with pytest.raises(ValueError, match="3 length scales but X has 2 features"):
        TorchKernel(sk.RBF([1.0, 1.0, 1.0])).check_n_features(2)
    TorchKernel(sk.RBF([1.0, 1.0, 1.0])).check_n_features(3)


@pytest.mark.parametrize("kernel", [sk.RBF([0.7]), sk.Matern([0.7], nu=1.5),
                                    sk.ConstantKernel(2.0) * sk.Matern(np.array([0.7]), nu=0.7)])
def test_one_entry_length_scale_list_is_isotropic(kernel):
    # scikit-learn: anisotropic is ``np.iterable(l) and len(l) > 1``
    X = np.random.RandomState(0).randn(6, 3)
    tk = TorchKernel(kernel)
    tk.check_n_features(3)
    np.testing.assert_allclose(tk(_torch(X)).numpy(), kernel(X), rtol=1e-12, atol=1e-14)
    with pytest.raises(ValueError, match="2 length scales but X has 3 features"):
        TorchKernel(sk.RBF([1.0, 1.0])).check_n_features(3)
