"""At q = 2 a one-layer deep Q-EP is an SVGP, and with the inducing inputs
at the training inputs and the variational parameters at Titsias' optimum it is the
exact GP of scikit-learn."""

import numpy as np
import pytest
import torch
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process.kernels import ConstantKernel, Matern, WhiteKernel

from skgpx.kernels import unit_stationary_kernel
from skgpx.qep import DeepQEPRegressor
from skgpx.linalg import inverse_softplus, positive_tril_raw

N_ROWS, NOISE, OUTPUT_SCALE = 30, 0.05, 1.7
LENGTH_SCALE = np.array([0.8, 1.3])  # in standardised units


def _data(seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3, 3, size=(N_ROWS, 2)) * [1.0, 4.0] + [0.0, 50.0]
    y = np.sin(X[:, 0]) + 0.1 * X[:, 1] + 0.1 * rng.standard_normal(N_ROWS)
    return X, y


def _shallow_model(X, y):
    """A q = 2, one-layer model with fixed kernel and noise and Z = (standardised) X."""
    model = DeepQEPRegressor(
        q=2.0, hidden_dims=(), n_inducing=N_ROWS, normalize_y=False, max_iter=1, tol=None,
        jitter=1e-12, random_state=0,
    ).fit(X, y)
    layer = model.module_.layers[0]
    Xs = torch.tensor((X - model.X_mean_) / model.X_scale_)
    with torch.no_grad():
        layer.inducing_points.copy_(Xs.expand_as(layer.inducing_points))
        layer.raw_length_scale.copy_(inverse_softplus(torch.tensor(LENGTH_SCALE)).view(1, 1, 2))
        layer.raw_output_scale.fill_(float(inverse_softplus(OUTPUT_SCALE)))
        layer.mean_bias.zero_()
        model.likelihood_.raw_noise.fill_(float(inverse_softplus(NOISE - 1e-4)))
    return model, layer, Xs


def _set_titsias_optimum(model, layer, y):
    """Whitened optimum: q(u) = N(K Sigma^-1 K y / s2, K Sigma^-1 K), Sigma = K + K K / s2."""
    with torch.no_grad():
        Z = layer.inducing_points[0]
        K = unit_stationary_kernel(Z, Z, layer.length_scale, layer.output_scale, "matern32")[0]
        K = K + model.module_.jitter * layer.output_scale[0] * torch.eye(N_ROWS, dtype=K.dtype)
        L = torch.linalg.cholesky(K)
        Sigma = K + K @ K / NOISE
        mean_u = K @ torch.linalg.solve(Sigma, K @ torch.tensor(y)) / NOISE
        cov_u = K @ torch.linalg.solve(Sigma, K)
        Linv = torch.linalg.inv(L)
        m = Linv @ mean_u
        S = torch.linalg.cholesky(Linv @ cov_u @ Linv.T)
        layer.variational_mean.copy_(m.unsqueeze(0))
        layer.raw_variational_tril.copy_(positive_tril_raw(S).unsqueeze(0))


def _sklearn_gp(model, X, y):
    kernel = ConstantKernel(OUTPUT_SCALE) * Matern(LENGTH_SCALE * model.X_scale_, nu=1.5)
    return GaussianProcessRegressor(kernel + WhiteKernel(NOISE), optimizer=None).fit(X, y)


def _elbo(model, X, y):
    module, likelihood = model.module_, model.likelihood_
    Xs = torch.tensor((X - model.X_mean_) / model.X_scale_)
    with torch.no_grad():
        ell = likelihood(module(Xs), torch.tensor(y).view(-1, 1))
        return N_ROWS * float(ell) - float(module.kl_divergence())


def test_titsias_optimum_is_the_exact_gp():
    X, y = _data()
    model, layer, _ = _shallow_model(X, y)
    _set_titsias_optimum(model, layer, y)
    gp = _sklearn_gp(model, X, y)
    X_test = _data(seed=1)[0]
    mean, std = model.predict(X_test, return_std=True)
    gp_mean, gp_std = gp.predict(X_test, return_std=True)
    np.testing.assert_allclose(mean, gp_mean, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(std, gp_std, rtol=1e-6)
    # Titsias' collapsed bound with Z = X is the exact log marginal likelihood
    exact = gp.log_marginal_likelihood_value_
    assert _elbo(model, X, y) == pytest.approx(exact, rel=1e-6)


def test_adam_on_variational_parameters_reaches_the_optimum():
    X, y = _data()
    model, layer, Xs = _shallow_model(X, y)
    exact = _sklearn_gp(model, X, y).log_marginal_likelihood_value_
    module, likelihood = model.module_, model.likelihood_
    module.train()
    variational = [layer.variational_mean, layer.raw_variational_tril]
    optimizer = torch.optim.Adam(variational, lr=0.05)
    yt = torch.tensor(y).view(-1, 1)
    for _ in range(1500):
        optimizer.zero_grad()
        loss = -likelihood(module(Xs), yt) + module.kl_divergence() / N_ROWS
        loss.backward()
        optimizer.step()
    # the ELBO never exceeds the evidence; Adam gets within 1e-3 nats per data point
    elbo = _elbo(model, X, y)
    assert elbo <= exact + 1e-8
    assert (exact - elbo) / N_ROWS < 1e-3


def test_bounds_coincide_at_q_equal_2():
    X, y = _data()
    kwargs = dict(q=2.0, n_inducing=8, max_iter=15, n_mc_samples=3, tol=None, random_state=3)
    authors = DeepQEPRegressor(bound="authors", **kwargs).fit(X, y)
    scaled = DeepQEPRegressor(bound="scaled", **kwargs).fit(X, y)
    np.testing.assert_allclose(authors.objective_history_, scaled.objective_history_, rtol=1e-10)
    np.testing.assert_allclose(authors.predict(X), scaled.predict(X), rtol=1e-9)
