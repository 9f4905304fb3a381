"""The chunked collapsed bound: closed-form and autograd gradients, and its round-off."""

import numpy as np
import pytest
import torch
from sklearn.gaussian_process.kernels import RBF, ConstantKernel, Matern, WhiteKernel

from skgpx.kernels import TorchKernel
from skgpx._inducing._collapsed import chunk_statistics, collapsed_elbo, inducing_cholesky
from skgpx._inducing._cross import stationary_cross
from skgpx._inducing._rows import Rows
from skgpx.pathwise._sgpr._bound import elbo_value_and_grad

RNG = np.random.default_rng(7)
X = torch.tensor(RNG.uniform(0, 4, (300, 2)) + 100.0)  # off-centre inputs, as users give them
Y = torch.tensor(RNG.standard_normal((300, 2)))
ALPHA = torch.tensor(RNG.uniform(1e-3, 1e-2, 300))
Z = X[::20].clone() + 0.01

KERNELS = {
    "rbf-ard": lambda: ConstantKernel(1.3) * RBF([0.7, 1.5]) + WhiteKernel(0.1),
    "matern32-ard": lambda: ConstantKernel(1.3) * Matern([0.7, 1.5], nu=1.5) + WhiteKernel(0.1),
    "matern52-iso": lambda: Matern(0.7, nu=2.5) + WhiteKernel(0.1),
    "rbf-times-constant": lambda: RBF(0.5) * ConstantKernel(2.0),
    "fixed": lambda: ConstantKernel(0.5, "fixed") * RBF([0.5, 2.0], "fixed") + WhiteKernel(0.2),
}


@pytest.mark.parametrize("name", list(KERNELS))
def test_closed_form_pass_equals_autograd_pass(name, monkeypatch):
    kernel = TorchKernel(KERNELS[name]())
    assert kernel.stationary_signal() is not None
    theta = kernel.theta_tensor()
    args = (kernel, theta, Z, Rows(X, Y, ALPHA))
    options = dict(jitter=1e-8, batch_size=37, grad_theta=theta.numel() > 0, grad_Z=True)
    fast = elbo_value_and_grad(*args, **options)
    monkeypatch.setattr(TorchKernel, "stationary_signal", lambda self: None)
    slow = elbo_value_and_grad(*args, **options)
    # both are the gradient of the same float64 function; they differ by round-off only
    assert fast[0] == pytest.approx(slow[0], rel=1e-12)
    if theta.numel():
        np.testing.assert_allclose(fast[1], slow[1], rtol=1e-8, atol=1e-8)
    np.testing.assert_allclose(fast[2], slow[2], rtol=1e-8, atol=1e-8 * float(slow[2].abs().max()))


def test_autograd_pass_equals_autograd_through_the_whole_bound(monkeypatch):
    """Two passes with adjoints == one autograd graph over all rows (an independent route)."""
    monkeypatch.setattr(TorchKernel, "stationary_signal", lambda self: None)
    kernel = TorchKernel(KERNELS["rbf-ard"]())
    theta = kernel.theta_tensor()
    value, g_theta, g_Z = elbo_value_and_grad(kernel, theta, Z, Rows(X, Y, ALPHA),
                                              jitter=1e-8, batch_size=37, grad_Z=True)
    th, Zr = theta.clone().requires_grad_(), Z.clone().requires_grad_()
    L, _ = inducing_cholesky(kernel, th, Zr, 1e-8)
    stats = chunk_statistics(kernel, th, Zr, L, X, Y, ALPHA)
    elbo, _, _ = collapsed_elbo(stats, Y.shape[1])
    elbo.backward()
    assert value == pytest.approx(float(elbo), rel=1e-12)
    np.testing.assert_allclose(g_theta, th.grad, rtol=1e-9)
    np.testing.assert_allclose(g_Z, Zr.grad, rtol=1e-8, atol=1e-8 * float(Zr.grad.abs().max()))


def test_bound_is_smooth_when_inducing_points_crowd():
    """Whitening row by row keeps the bound smooth where cond(Kzz) ~ 1e17.

    Summing k_i k_i^T first and whitening afterwards made the bound jump by about 0.5
    nats under 1e-15 relative changes of theta on this problem (L-BFGS then stopped
    abnormally); the bound's round-off is now ~1e-9 nats.
    """
    rng = np.random.default_rng(0)
    x = torch.tensor(rng.uniform(size=(2000, 2)))
    y = torch.tensor(np.sin(6 * x[:, :1].numpy()) + 0.1 * rng.standard_normal((2000, 1)))
    kernel = TorchKernel(ConstantKernel(80.0) * RBF([0.3, 1.9]) + WhiteKernel(0.01))
    z = x[:64].clone()
    z[32:] = z[:32] + 1e-4  # near-duplicate inducing inputs
    alpha = torch.full((2000,), 1e-10, dtype=torch.float64)
    theta = kernel.theta_tensor()
    values = [elbo_value_and_grad(kernel, theta * (1 + d), z, Rows(x, y, alpha),
                                  jitter=1e-8,
                                  batch_size=8192, grad_theta=False)[0]
              for d in (0.0, 1e-15, -1e-15, 1e-14, -1e-14)]
    assert np.ptp(values) < 1e-6, values


@pytest.mark.parametrize("name", list(KERNELS))
def test_stationary_cross_block_equals_the_kernel(name):
    # the plain block (draw evaluation) and the weighted block written into a buffer
    # (both passes of the bound) against sklearn
    sk_kernel = KERNELS[name]()
    kernel = TorchKernel(sk_kernel)
    cross = stationary_cross(kernel, kernel.theta_tensor(), Z)
    signal = sk_kernel.k1 if isinstance(sk_kernel.k2, WhiteKernel) else sk_kernel
    expected = signal(Z.numpy(), X[:50].numpy())
    np.testing.assert_allclose(cross.block(X[:50]).numpy(), expected, rtol=1e-10, atol=1e-13)
    log_weight = torch.tensor(RNG.uniform(-2, 2, 50))
    buffer = torch.empty(Z.shape[0] + 2, 50, dtype=torch.float64)
    block, _ = cross.weighted_block(cross.standardised(X[:50]), log_weight, out=buffer[:-2])
    assert block.data_ptr() == buffer.data_ptr()
    np.testing.assert_allclose(buffer[:-2].numpy(), expected * np.exp(log_weight.numpy()),
                               rtol=1e-10, atol=1e-13)


def test_gradient_equals_central_differences_when_Kzz_is_ill_conditioned():
    """Every component of the closed-form gradient against central differences, with
    cond(Kzz) ~ 1e8 (a length scale of 30 on [0, 1]).

    Two former errors fail this: the jitter of Kzz (``jitter * mean diag``) held constant
    on the autograd graph (d / d log s off by 0.046), and a pass 2 that formed
    ``L^-T G_W L^-1`` explicitly (errors up to 3e-3 from cancelling terms of size
    cond(Kzz)).  The differences' own error here is about 1e-5.
    """
    rng = np.random.default_rng(3)
    x = torch.tensor(rng.uniform(size=(3000, 3)))
    y = torch.tensor(np.sin(4 * x[:, :1].numpy()) + 0.05 * rng.standard_normal((3000, 1)))
    kernel = TorchKernel(ConstantKernel(3.0) * RBF([0.4, 0.6, 30.0]) + WhiteKernel(0.0025))
    z = x[rng.choice(3000, 128, replace=False)].clone()
    rows = Rows(x, y, torch.full((3000,), 1e-10, dtype=torch.float64))
    theta = kernel.theta_tensor()

    def bound(t, grad=False):
        return elbo_value_and_grad(kernel, t, z, rows, jitter=1e-8, batch_size=1000,
                                   grad_theta=grad)

    gradient = bound(theta, grad=True)[1]
    for i in range(theta.numel()):
        step = torch.zeros_like(theta)
        step[i] = 1e-4
        central = (bound(theta + step)[0] - bound(theta - step)[0]) / 2e-4
        assert abs(float(gradient[i]) - central) < 1e-4, (i, float(gradient[i]), central)
