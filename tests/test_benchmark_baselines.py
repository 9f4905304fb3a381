"""The baselines of our own making that the benchmarks run: Adam for the sparse DKP
(``benchmarks/dkp/_adam.py``) and our SVGP engine with Adam on ``q`` instead of natural
steps (``benchmarks/pathwise/_adam_q.py``).  The benchmarks are scripts, not a package:
each module is loaded from its file."""

import importlib.util
import pathlib
import warnings

import numpy as np
import pytest
import torch
from sklearn.datasets import make_friedman1
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process.kernels import RBF, ConstantKernel

from skgpx.dkp._model import DKPConfig
from skgpx.dkp._sparse._lbfgs import StatePacking
from skgpx.dkp._sparse._model import SparseDKPState
from skgpx.dkp._sparse._model import prior_mean_grams
from skgpx.dkp._sparse._model import reference_objective
from skgpx.pathwise._likelihoods._classification import Bernoulli
from skgpx._inducing._rows import Rows
from skgpx.pathwise._svgp._bound import WhitenedQ
from skgpx.pathwise._svgp._engine import PLATEAU_WINDOW
from skgpx.pathwise._svgp._engine import SVGPEngine

BENCHMARKS = pathlib.Path(__file__).resolve().parents[1] / "benchmarks"


def _load(relative, name):
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / relative)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_adam = _load("dkp/_adam.py", "benchmark_dkp_adam")
adam_fit, collapsed_q, uncollapsed_bound = (_adam.adam_fit, _adam.collapsed_q,
                                            _adam.uncollapsed_bound)
AdamQSVGP = _load("pathwise/_adam_q.py", "benchmark_adam_q").AdamQSVGP


def _config(objective="dkp", input_scale=True, skip=True):
    return DKPConfig(kernel="sqexp", skip=skip, input_scale=input_scale, objective=objective,
                     nu_input=5.0, nu_hidden=(5.0, 5.0), mirror_reg=5.0, kleinman_reg=1.0,
                     care_solver="auto", max_care_iter=200, care_tol=1e-10, learn_noise=True,
                     learn_weights=True)


def _problem(config, n=50, d=3, m=12, n_targets=2, perturb=0.05, seed=0):
    """Random rows, Z = a subset of them (coincident rows included), PD Grams near the
    prior mean, a random PD Omega and random weights."""
    gen = torch.Generator().manual_seed(seed)
    X = torch.randn(n, d, generator=gen, dtype=torch.float64)
    Y = torch.sin(X[:, :1]) + 0.3 * torch.randn(n, n_targets, generator=gen,
                                                dtype=torch.float64)
    B = 0.3 * torch.randn(d, d, generator=gen, dtype=torch.float64)
    omega = torch.eye(d, dtype=torch.float64) + B @ B.mT if config.input_scale else \
        torch.eye(d, dtype=torch.float64)
    width = 2 if config.skip else 1
    weights = [0.3 + torch.rand(width, generator=gen, dtype=torch.float64) for _ in range(2)]
    weights.append(torch.tensor([1.2, 0.2], dtype=torch.float64))
    state = SparseDKPState(inducing=X[:m].clone(), omega=omega, hidden_grams=[None, None],
                           weights=weights, jitter=1e-4)
    grams = prior_mean_grams(config, state)
    if config.objective != "gp":
        for i, gram in enumerate(grams):
            R = perturb * torch.randn(m, m, generator=gen, dtype=torch.float64)
            grams[i] = gram + R @ R.mT
    return X, Y, state.copy(hidden_grams=grams)


@pytest.mark.parametrize("objective", ["dkp", "dgp", "gp"])
def test_uncollapsed_equals_collapsed_at_optimal_q(objective):
    # Titsias: at q(v) = N(L_B^-T c, L_B^-T L_B^-1) the uncollapsed bound IS the collapsed
    # one; a wrong KL, trace or variance term breaks the equality by O(1).
    config = _config(objective)
    X, Y, state = _problem(config)
    collapsed = reference_objective(config, state, X, Y).value
    mean, root = collapsed_q(reference_objective(config, state, X, Y).statistics)
    value = uncollapsed_bound(config, state, X, Y, mean, root)
    assert abs(float(value - collapsed)) <= 1e-10 * abs(float(collapsed))
    # any other q is strictly worse (the optimum is unique)
    for shift in (1e-3 * torch.ones_like(mean), None):
        other_root = root if shift is not None else 1.01 * root
        other_mean = mean + shift if shift is not None else mean
        worse = uncollapsed_bound(config, state, X, Y, other_mean, other_root)
        assert float(worse) < float(collapsed)


def test_minibatch_estimates_are_unbiased():
    # the P/b-scaled row sums of a partition into mini-batches average to the full bound
    config = _config()
    X, Y, state = _problem(config)
    mean, root = collapsed_q(reference_objective(config, state, X, Y).statistics)
    full = uncollapsed_bound(config, state, X, Y, mean, root)
    parts = [uncollapsed_bound(config, state, X[i:i + 10], Y[i:i + 10], mean, root,
                               scale=X.shape[0] / 10) for i in range(0, X.shape[0], 10)]
    assert torch.allclose(torch.stack(parts).mean(), full, rtol=1e-12, atol=0)


@pytest.mark.parametrize("objective,input_scale,skip",
                         [("dkp", True, True), ("dgp", False, False), ("gp", True, True)])
def test_packing_round_trip(objective, input_scale, skip):
    config = _config(objective, input_scale, skip)
    _, _, state = _problem(config)
    # adam_fit's parametrisation: StatePacking's vector, on this module's perturbed Grams
    packing = StatePacking(config, state)
    back = packing.state(packing.vector(state))
    for a, b in zip(state.tensors(), back.tensors()):
        assert torch.allclose(a, b.detach(), rtol=1e-10, atol=1e-12)


def test_few_epochs_raise_the_collapsed_objective():
    X, y = make_friedman1(n_samples=240, n_features=5, noise=0.5, random_state=0)
    X = (X - X.mean(0)) / X.std(0)
    y = (y - y.mean()) / y.std()
    X, Y = torch.tensor(X), torch.tensor(y[:, None])
    config = _config()
    d = X.shape[1]
    weights = [torch.full((2,), 0.5, dtype=torch.float64) for _ in range(2)]
    weights.append(torch.tensor([1.0, 0.1], dtype=torch.float64))
    index = np.random.default_rng(0).choice(X.shape[0], 16, replace=False)
    state = SparseDKPState(inducing=X[index].clone(), omega=torch.eye(d, dtype=torch.float64),
                           hidden_grams=[None, None], weights=weights, jitter=1e-6)
    state = state.copy(hidden_grams=prior_mean_grams(config, state))
    rows = Rows(X, Y, torch.zeros(X.shape[0], dtype=torch.float64))
    seen = []
    fit = adam_fit(config, state, rows, epochs=4, batch_size=60, lr=2e-2, seed=0,
                   evaluate_every=2, progress=lambda e, v: seen.append((e, v)))
    assert fit.passes == [0, 2, 4] and fit.evaluation_passes == 3
    assert [v for _, v in seen] == fit.history[1:]
    assert np.isclose(fit.history[0], float(reference_objective(config, state, X, Y).value))
    # 16 Adam steps raise the bound by many nats (per row: > 0.05)
    assert fit.history[-1] > fit.history[0] + 0.05 * X.shape[0]
    final = reference_objective(config, fit.state, X, Y).value
    assert np.isclose(float(final), fit.history[-1], rtol=1e-12)


def test_time_cap_stops_after_the_epoch_that_crosses_it():
    config = _config()
    X, Y, state = _problem(config)
    rows = Rows(X, Y, torch.zeros(X.shape[0], dtype=torch.float64))
    fit = adam_fit(config, state, rows, epochs=5, batch_size=20, lr=1e-3, seed=0,
                   evaluate_every=3, max_seconds=0.0)
    assert fit.passes == [0, 1] and len(fit.history) == 2 and fit.seconds[1] > 0


# ---------------------------------------------------------------- SVGP, Adam on q


def _classification(n=120, m=6, seed=0):
    gen = torch.Generator().manual_seed(seed)
    X = torch.randn(n, 1, generator=gen, dtype=torch.float64)
    Y = (torch.sin(2.0 * X) + 0.3 * torch.randn(n, 1, generator=gen, dtype=torch.float64)
         > 0).to(torch.float64)
    return Rows(X, Y, torch.zeros(n, dtype=torch.float64)), X[:m].clone()


def _fit(engine, rows, Z, **params):
    mode = engine(ConstantKernel(1.0) * RBF(1.0), Bernoulli("logit"), optimizer="adam",
                  minibatch_size=40, batch_size=32, **params)
    mode.fit(rows, Z, np.random.RandomState(0))
    return mode


def test_adam_on_q_keeps_the_engines_stopping_rule_and_stores_a_whitened_q():
    # tol=1.0: any rise is within tol, so the window rule stops as soon as it can
    rows, Z = _classification()
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        mode = _fit(AdamQSVGP, rows, Z, max_iter=20, tol=1.0)
    assert mode.n_iter == PLATEAU_WINDOW + 1 == len(mode.history)
    assert isinstance(mode.q, WhitenedQ) and np.isfinite(mode.elbo)
    assert not hasattr(mode, "_q_opt")  # the Adam state does not outlive the fit


def test_adam_on_q_climbs_the_bound_and_differs_from_natural_steps():
    # Adam steps along the surrogate's gradient: a sign error in it, or a step on the
    # wrong parameters, would lower the bound from the prior q or leave q at the prior
    rows, Z = _classification()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        adam = _fit(AdamQSVGP, rows, Z, max_iter=30, tol=None, learning_rate=0.05,
                    optimize_inducing=False)
        natural = _fit(SVGPEngine, rows, Z, max_iter=30, tol=None, learning_rate=0.05,
                       optimize_inducing=False)
    assert adam.history[-1] > adam.history[0] + 0.05 * rows.X.shape[0]
    assert float(adam.q.mean.abs().max()) > 0.1
    assert not np.allclose(natural.history, adam.history)  # q is not moved by natural steps
