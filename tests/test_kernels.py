"""Torch kernels against scikit-learn: values, diagonals, theta gradients, X gradients."""

import numpy as np
import pytest
import torch
from sklearn.gaussian_process import kernels as sk

from skgpx.kernels import (
    TorchKernel,
    default_kernel,
    split_white_noise,
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
