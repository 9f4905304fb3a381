"""Point solver against Adam on the same objective (the paper's Fig. 1 analogue).

The paper's Fig. 1 claims that about ten solver sweeps do the work of thousands of
gradient steps.  This script measures that claim locally: it times
``DeepKernelProcessRegressor(max_iter=10).fit`` and then maximises exactly the same
objective (:func:`skgpx.dkp._model.dkp_objective`, with the ``DKPConfig`` the
estimator builds for itself) with ``torch.optim.Adam`` from the same prior
initialisation, and reports how long Adam takes to reach the solver's 10-sweep
objective ``L*``.

Data (one random 90/10 split, ``--seed``; X standardised with the training part's
mean and ddof=0 std, then X and y standardised as the estimator does inside ``fit``, with
its own ``skgpx._base.column_standardisation``, which is what Adam sees too):

* ``diabetes``: ``sklearn.datasets.load_diabetes``, P = 397 training points, d = 10;
* ``friedman``: ``make_friedman1(n_samples=330, noise=0.5, random_state=seed)``, P = 297;
* ``toy``: ``skgpx.datasets.make_dkp_toy(60, random_state=seed)`` as the training set
  (P = 60) and a separate 200-point draw as test set.

Adam's parameterisation (every constraint is built in, so no projection is needed):

* ``G_l = C_l C_l^T`` and ``Omega = C_0 C_0^T`` with ``C`` lower triangular whose
  diagonal is ``exp`` of a free parameter (log-Cholesky).  There is no jitter on
  ``G_l``; the fixed Eye jitter of the hidden sum kernels ``S_l`` is part of the model
  and is kept, as in the estimator;
* kernel weights ``w = exp(u)``; the output noise ``sigma^2 = floor + exp(u)`` with the
  estimator's floor ``min(1e-6, noise_variance)``, so the noise can approach the floor
  but never cross it, as in the solver's natural-gradient step.

Initialisation is the solver's: ``Omega = I``, hidden weights ``[0.5, 0.5]``, output
weights ``[1, noise_variance=0.1]`` and ``G_l`` = prior means (``forward_prior_means``).
The script checks that Adam's objective at step 0 equals the estimator's
``objective_history_[0]``.

Timing (all in this one process, float64, one thread on CPU):

* solver: one warm-up fit, then the median of ``--repeats`` fits (``fit`` end to end,
  numpy in, including standardisation and the prediction cache);
* Adam: for each learning rate, the clock runs over the optimisation steps only (the
  objective is evaluated every step anyway, since Adam needs it for the gradient).
  Test-RMSE checkpoints every ``--rmse-every`` steps and parameter snapshots run with
  the clock stopped.  A run stops at ``--max-steps`` steps, at ``--adam-budget``
  seconds, at a non-finite objective or a failed Cholesky ("diverged"), or with
  ``--stop-at-target`` as soon as it reaches ``L*``.

Target: on diabetes, the solver is at least 10x faster than the best Adam
run to the same objective.  When no Adam run reaches ``L*`` the ratio is a lower
bound (the shortest non-diverged Adam run / solver time), printed with ">".

Usage::

    .venv/bin/python benchmarks/dkp/vs_adam.py --quick                  # toy, < 1 min
    .venv/bin/python benchmarks/dkp/vs_adam.py --json benchmarks/results/dkp_vs_adam.json
    .venv/bin/python benchmarks/dkp/vs_adam.py --dataset friedman --device cuda
"""

import os  # noqa: I001  (the shared kit's folder on the path, the kit, then numpy)
import sys

if (kit := os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) not in sys.path:
    sys.path.insert(0, kit)
import _common as C  # noqa: I001  (first: pins the threads before numpy is imported)
import _fits as F
from _fits import rmse

import argparse
import math
import time

import numpy as np
import torch

from skgpx._base import column_standardisation

DEFAULT_LRS = (1e-1, 3e-2, 1e-2, 1e-3)
TARGET_SPEEDUP = 10.0
MAX_TRACE_POINTS = 500


# ---------------------------------------------------------------- data


def load_data(name, seed):
    """Training and test split of one data set, X standardised on the training part.

    Parameters
    ----------
    name : {'diabetes', 'friedman', 'toy'}
        Data set.
    seed : int
        Seed of the 90/10 split (diabetes, friedman) or of the draws (toy).

    Returns
    -------
    X_train, y_train, X_test, y_test : ndarray
        y on its original scale.
    """
    from sklearn.datasets import load_diabetes, make_friedman1
    from sklearn.model_selection import train_test_split

    if name == "toy":
        from skgpx.datasets import make_dkp_toy

        # the training set is exactly make_dkp_toy(60), so P = 60;
        # an independent draw serves as test set
        X_train, y_train = make_dkp_toy(60, random_state=seed)
        X_test, y_test = make_dkp_toy(200, random_state=seed + 1000)
    else:
        if name == "diabetes":
            X, y = load_diabetes(return_X_y=True)
        else:
            X, y = make_friedman1(n_samples=330, noise=0.5, random_state=seed)
        X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.1,
                                                            random_state=seed)
    mean, std = column_standardisation(X_train)
    return (X_train - mean) / std, y_train, (X_test - mean) / std, y_test


def standardise(values, normalize):
    """``values`` as a float64 column matrix, standardised per column as the estimator's
    ``fit`` does (``column_standardisation`` when ``normalize``), so Adam sees bit-identical
    inputs and targets; returns it with the mean and scale."""
    values = np.asarray(values, dtype=np.float64)
    values = values.reshape(values.shape[0], -1)
    n_columns = values.shape[1]
    mean, scale = column_standardisation(values) if normalize else (
        np.zeros(n_columns), np.ones(n_columns))
    return (values - mean) / scale, mean, scale


# ---------------------------------------------------------------- the shared model pieces


class Problem:
    """The data, ``DKPConfig`` and prior state shared by the solver and Adam.

    Parameters
    ----------
    estimator : DeepKernelProcessRegressor
        Unfitted estimator whose parameters define the model.
    X_train, y_train, X_test : ndarray
        Data (X already standardised on the training part, y on its original scale).
    device : str
        Torch device.
    """

    def __init__(self, estimator, X_train, y_train, X_test, device):
        self.device = device
        self.estimator = estimator
        # the estimator's own config builder, so that Adam optimises the identical
        # objective (dof layout, input_scale, noise floor ...)
        self.config = estimator._config(estimator._resolve_dof())
        inputs, self.x_mean, self.x_scale = standardise(X_train, estimator.normalize_X)
        targets, self.y_mean, self.y_scale = standardise(y_train, estimator.normalize_y)
        self.inputs = torch.tensor(inputs, dtype=torch.float64, device=device)
        self.targets = torch.tensor(targets, dtype=torch.float64, device=device)
        self.test_inputs = torch.tensor((np.asarray(X_test, dtype=np.float64) - self.x_mean)
                                        / self.x_scale, dtype=torch.float64, device=device)

    def state(self, omega, hidden_grams, weights, jitter):
        """A fresh :class:`DKPState` (empty Gram cache, so gradients flow every step)."""
        from skgpx.dkp._model import DKPState

        return DKPState(inputs=self.inputs, targets=self.targets, omega=omega,
                        hidden_grams=list(hidden_grams), weights=list(weights), jitter=jitter)

    def prior_state(self, jitter):
        """The solver's initial state: Omega = I, prior-mean Grams, default weights."""
        from skgpx.dkp._model import forward_prior_means

        est, dev = self.estimator, self.device
        half = torch.full((2 if est.skip else 1,), 0.5, dtype=torch.float64, device=dev)
        weights = [half.clone() for _ in range(est.n_layers)]
        weights.append(torch.tensor([1.0, float(est.noise_variance)], dtype=torch.float64,
                                    device=dev))
        omega = torch.eye(self.inputs.shape[1], dtype=torch.float64, device=dev)
        state = self.state(omega, [None] * est.n_layers, weights, jitter)
        return forward_prior_means(self.config, state)

    def fitted_state(self, fitted):
        """Rebuild the solver's final state from the estimator's public attributes."""
        dev = self.device

        def tensor(value):
            return torch.as_tensor(np.asarray(value, dtype=np.float64), device=dev)

        n_hidden_weights = 2 if fitted.skip else 1
        weights = [tensor(row[:n_hidden_weights]) for row in fitted.kernel_weights_]
        weights.append(tensor([fitted.output_weight_, fitted.noise_variance_]))
        omega = (tensor(fitted.input_scale_) if fitted.input_scale_ is not None
                 else torch.eye(self.inputs.shape[1], dtype=torch.float64, device=dev))
        grams = [tensor(g) for g in fitted.gram_matrices_[1:]]
        return self.state(omega, grams, weights, float(fitted.jitter_))

    def objective(self, state):
        """``dkp_objective`` of the estimator's config at ``state``."""
        from skgpx.dkp._model import dkp_objective

        return dkp_objective(self.config, state)

    def predict(self, state):
        """Predictive mean at the test inputs on the original y scale."""
        from skgpx.dkp._predict import build_prediction_cache
        from skgpx.dkp._predict import propagate

        with torch.no_grad():
            cache = build_prediction_cache(self.config, state)
            mean, _ = propagate(cache, self.test_inputs)
        return mean.cpu().numpy() * self.y_scale + self.y_mean


# ---------------------------------------------------------------- solver


def time_solver(problem, X_train, y_train, X_test, y_test, repeats, device):
    """Warm-up fit, then ``repeats`` timed fits; returns the record and the last model."""
    from sklearn.base import clone

    times, model = [], None
    for i in range(repeats + 1):
        model = clone(problem.estimator)
        with C.Timer(device) as timer:
            model.fit(X_train, y_train)
        if i > 0:  # i = 0 is the warm-up (allocator, lazy imports, first-call overheads)
            times.append(timer.seconds)
        print(f"    solver {'warm-up' if i == 0 else f'run {i}'}: {timer.seconds:.3f} s "
              f"(objective {model.objective_:.6f})", flush=True)
    prediction = model.predict(X_test)
    record = {
        "seconds": C.median(times),
        "times": times,
        "objective": float(model.objective_),
        "history": [float(v) for v in model.objective_history_],
        "n_iter": int(model.n_iter_),
        "rmse": rmse(y_test, prediction),
        "jitter": float(model.jitter_),
        "noise_variance": float(model.noise_variance_),
        "output_weight": float(model.output_weight_),
        "kernel_weights": np.asarray(model.kernel_weights_).tolist(),
    }
    # consistency of the public attributes with the objective and prediction paths that
    # Adam uses: rebuilding the state from them must give back objective_ and predict()
    state = problem.fitted_state(model)
    with torch.no_grad():
        record["check_objective_diff"] = float(problem.objective(state)) - record["objective"]
    record["check_predict_maxdiff"] = float(np.max(np.abs(problem.predict(state).ravel()
                                                          - np.ravel(prediction))))
    return record, model


# ---------------------------------------------------------------- Adam


def _raw_cholesky(matrix):
    """Free parameter of the log-Cholesky map: strict lower part of chol, log of its diagonal."""
    factor = torch.linalg.cholesky(matrix)
    return torch.tril(factor, -1) + torch.diag_embed(torch.log(factor.diagonal()))


def _factor(raw):
    """``C = tril(raw, -1) + diag(exp(diag(raw)))``, lower triangular with positive diagonal."""
    return torch.tril(raw, -1) + torch.diag_embed(torch.exp(raw.diagonal()))


def _gaussian_terms(scale, root):
    """``-log|S| - Tr(S^-1 R R^T)`` by one Cholesky of ``S`` (as in ``_model``)."""
    factor = torch.linalg.cholesky(scale)
    whitened = torch.linalg.solve_triangular(factor, root, upper=False)
    return -2.0 * torch.log(factor.diagonal()).sum() - (whitened * whitened).sum()


class AdamProblem:
    """Unconstrained parameters of the objective and the map back to a ``DKPState``.

    Parameters
    ----------
    problem : Problem
    jitter : float
        Eye jitter of the hidden sum kernels (the value the solver ended with).
    evaluation : {'dkp_objective', 'factored'}
        ``'dkp_objective'`` (default) calls :func:`skgpx.dkp._model.dkp_objective` on the
        state ``G_l = C_l C_l^T``, which re-factorises every ``G_l``.  ``'factored'``
        evaluates the same formula from the factors ``C_l`` directly (``log|G| = 2 sum
        log diag C``, ``Tr(S^-1 G) = ||L_S^-1 C||_F^2``): one Cholesky less per layer,
        and no failure when ``C C^T`` is too ill-conditioned to re-factorise.  Its value
        at the prior is checked against ``dkp_objective``.
    """

    def __init__(self, problem, jitter, evaluation="dkp_objective"):
        self.problem, self.jitter, self.evaluation = problem, jitter, evaluation
        config = problem.config
        if evaluation == "factored" and config.objective == "gp":
            raise ValueError("the factored evaluation covers objective='dkp' and 'dgp' only")
        prior = problem.prior_state(jitter)
        self.noise_floor = float(config.noise_floor)
        self.learn_weights, self.learn_noise = config.learn_weights, config.learn_noise
        self.input_scale = config.input_scale
        self.fixed_omega = prior.omega
        self.prior_weights = [w.clone() for w in prior.weights]
        self.initial = {
            # Omega = I, so its raw parameter is the zero matrix
            "omega": _raw_cholesky(prior.omega) if self.input_scale else None,
            "grams": [_raw_cholesky(g) for g in prior.hidden_grams],
            "logw": [torch.log(w) for w in prior.weights[:-1]],
            "logw_out": torch.log(prior.weights[-1][:1]),
            "lognoise": torch.log(prior.weights[-1][1:] - self.noise_floor),
        }
        with torch.no_grad():
            params, _ = self.new_parameters()
            self.prior_objective = float(self.objective(params)[0])
            self.prior_check = self.prior_objective - float(problem.objective(prior))

    def new_parameters(self):
        """Fresh leaf tensors at the prior, and the list Adam should optimise."""
        params = {k: (None if v is None else
                      [t.clone().requires_grad_(True) for t in v] if isinstance(v, list)
                      else v.clone().requires_grad_(True))
                  for k, v in self.initial.items()}
        trainable = list(params["grams"])
        if self.input_scale:
            trainable.append(params["omega"])
        if self.learn_weights:
            trainable += params["logw"] + [params["logw_out"]]
        if self.learn_noise:
            trainable.append(params["lognoise"])
        return params, trainable

    def _parts(self, params):
        omega_factor = _factor(params["omega"]) if self.input_scale else None
        omega = omega_factor @ omega_factor.mT if self.input_scale else self.fixed_omega
        factors = [_factor(raw) for raw in params["grams"]]
        grams = [f @ f.mT for f in factors]
        if self.learn_weights:
            weights = [torch.exp(u) for u in params["logw"]]
            out_weight = torch.exp(params["logw_out"])
        else:
            weights = self.prior_weights[:-1]
            out_weight = self.prior_weights[-1][:1]
        noise = (self.noise_floor + torch.exp(params["lognoise"]) if self.learn_noise
                 else self.prior_weights[-1][1:])
        weights = list(weights) + [torch.cat([out_weight, noise])]
        state = self.problem.state(omega, grams, weights, self.jitter)
        return state, omega_factor, factors

    def state(self, params):
        """The ``DKPState`` at the given raw parameters (differentiable)."""
        return self._parts(params)[0]

    def objective(self, params):
        """``(objective, state)`` at the raw parameters, differentiable."""
        state, omega_factor, factors = self._parts(params)
        if self.evaluation == "dkp_objective":
            return self.problem.objective(state), state
        from skgpx.dkp._model import node_matrix

        # the formula of dkp_objective (constants included), written on the factors
        config = self.problem.config
        a = 1.0 if config.objective == "dkp" else 0.0
        n_points = state.inputs.shape[0]
        value = 0.0
        if config.input_scale:
            dim = omega_factor.shape[0]
            logdet = 2.0 * torch.log(omega_factor.diagonal()).sum()
            value = value + 0.5 * config.nu_input * (
                a * logdet - (omega_factor * omega_factor).sum() + dim)
        for layer in range(2, state.n_nodes + 1):
            factor = factors[layer - 2]
            logdet = 2.0 * torch.log(factor.diagonal()).sum()
            scale = node_matrix(config, state, layer - 1)
            value = value + 0.5 * config.nu_hidden[layer - 2] * (
                a * logdet + _gaussian_terms(scale, factor) + n_points)
        n_targets = state.targets.shape[1]
        output = node_matrix(config, state, state.n_nodes)
        value = value + 0.5 * n_targets * (_gaussian_terms(output, state.data_root)
                                           - n_points * math.log(2 * math.pi))
        return value, state


def _snapshot(params):
    """Detached copies of the raw parameters (for RMSE after the timed loop)."""
    return {k: (None if v is None else [t.detach().clone() for t in v] if isinstance(v, list)
                else v.detach().clone()) for k, v in params.items()}


def _safe_rmse(problem, adam_problem, params, y_test):
    """Test RMSE at the raw parameters, NaN when a prediction factorisation fails."""
    try:
        with torch.no_grad():
            return rmse(y_test, problem.predict(adam_problem.state(params)))
    except torch.linalg.LinAlgError:
        return float("nan")


def time_step_cost(adam_problem, device, repeats=5):
    """Median seconds of one objective, one objective + backward, and one full Adam step."""
    params, trainable = adam_problem.new_parameters()
    optimizer = torch.optim.Adam(trainable, lr=0.0)  # lr 0: time the step, stay at the prior
    out = {}
    for name in ("forward", "forward+backward", "adam step"):
        times = []
        for i in range(repeats + 2):
            optimizer.zero_grad(set_to_none=True)
            with C.Timer(device) as timer:
                value, _ = adam_problem.objective(params)
                if name != "forward":
                    (-value).backward()
                if name == "adam step":
                    optimizer.step()
                float(value.detach())
            if i >= 2:  # two warm-up evaluations
                times.append(timer.seconds)
        out[name] = C.median(times)
    return out


def run_adam(adam_problem, lr, target, solver_rmse, solver_seconds, y_test, args, device):
    """One Adam run from the prior at learning rate ``lr``.

    Returns a record with the step and wall-clock time at which the objective first
    reached ``target`` (None if never), the trace, and the test RMSE at checkpoints.
    """
    problem = adam_problem.problem
    params, trainable = adam_problem.new_parameters()
    optimizer = torch.optim.Adam(trainable, lr=lr)
    trace_steps, trace_times, trace_values = [], [], []
    reached = None  # (step, seconds, objective)
    rmse_reached = None  # (step, seconds, rmse)
    at_solver_time = None
    reached_snapshot = last_good = None
    checkpoints, error_text = [], None
    elapsed, stop, step = 0.0, "max-steps", 0
    while True:
        C.sync(device)
        start = time.perf_counter()
        try:
            value_tensor, state = adam_problem.objective(params)
            value = float(value_tensor.detach())  # syncs on CUDA; Adam needs the value anyway
        except torch.linalg.LinAlgError as error:
            stop, error_text = "diverged (Cholesky failed)", str(error)
            value_tensor, value = None, float("nan")
        elapsed += time.perf_counter() - start
        if value_tensor is None or not math.isfinite(value):
            if value_tensor is not None:
                stop = "diverged (non-finite objective)"
            break
        # clock stopped: keep the last finite point so a diverged run still reports its
        # last objective's RMSE (a copy of O(L P^2) numbers, no O(P^3) work)
        last_good = _snapshot(params)
        trace_steps.append(step)
        trace_times.append(elapsed)
        trace_values.append(value)
        if at_solver_time is None and elapsed >= solver_seconds:
            at_solver_time = value
        if reached is None and value >= target:
            reached = (step, elapsed, value)
            reached_snapshot = _snapshot(params)  # clock is stopped here
        # test RMSE checkpoints, clock stopped (a prediction costs several Choleskys)
        if args.rmse_every and (step % args.rmse_every == 0):
            value_rmse = _safe_rmse(problem, adam_problem, params, y_test)
            checkpoints.append((step, elapsed, value_rmse))
            if rmse_reached is None and value_rmse <= solver_rmse:
                rmse_reached = (step, elapsed, value_rmse)
        if reached is not None and args.stop_at_target:
            stop = "reached L*"
            break
        if step >= args.max_steps:
            stop = "max-steps"
            break
        if elapsed >= args.adam_budget:
            stop = "budget"
            break
        C.sync(device)
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        (-value_tensor).backward()
        optimizer.step()
        C.sync(device)
        elapsed += time.perf_counter() - start
        step += 1
        del state, value_tensor

    final_rmse = (_safe_rmse(problem, adam_problem, last_good, y_test)
                  if last_good is not None else float("nan"))
    rmse_at_target = (_safe_rmse(problem, adam_problem, reached_snapshot, y_test)
                      if reached_snapshot is not None else None)
    keep = np.unique(np.linspace(0, len(trace_steps) - 1,
                                 min(len(trace_steps), MAX_TRACE_POINTS)).astype(int)) \
        if trace_steps else []
    return {
        "lr": lr,
        "stop": stop,
        "error": error_text,
        "steps": step,
        "seconds": elapsed,
        "final_objective": trace_values[-1] if trace_values else float("nan"),
        "best_objective": max(trace_values) if trace_values else float("nan"),
        "initial_objective": trace_values[0] if trace_values else float("nan"),
        "reached_step": None if reached is None else reached[0],
        "reached_seconds": None if reached is None else reached[1],
        "rmse_at_target": rmse_at_target,
        "rmse_reached_step": None if rmse_reached is None else rmse_reached[0],
        "rmse_reached_seconds": None if rmse_reached is None else rmse_reached[1],
        "final_rmse": final_rmse,
        "objective_at_solver_time": at_solver_time,
        "rmse_checkpoints": checkpoints,
        "trace": {"step": [trace_steps[i] for i in keep],
                  "seconds": [trace_times[i] for i in keep],
                  "objective": [trace_values[i] for i in keep]},
    }


# ---------------------------------------------------------------- report


def speedup(solver, runs):
    """Best Adam time to ``L*`` over solver time; a lower bound when no run reached it.

    A run that stopped at its step or time cap without reaching ``L*`` would need more
    than its own length, so the shortest such run bounds the best time from below.
    A diverged run never reaches ``L*`` and bounds nothing.
    """
    reached = [r["reached_seconds"] for r in runs if r["reached_seconds"] is not None]
    capped = [r["seconds"] for r in runs
              if r["reached_seconds"] is None and not r["stop"].startswith("diverged")]
    if not reached and not capped:
        return None, False
    best_reached = min(reached) if reached else math.inf
    best_capped = min(capped) if capped else math.inf
    lower_bound = best_capped < best_reached
    return min(best_reached, best_capped) / solver["seconds"], lower_bound


def report(args, data_info, solver, step_cost, runs):
    """Print the table, the consistency checks and the target line.

    Returns
    -------
    dict or None
        ``{"ratio", "lower_bound"}`` of the best Adam time to ``L*`` over the solver
        time, None when every Adam run diverged.
    """
    s_time = solver["seconds"]
    headers = ["method", "lr", "steps to L*", "s to L*", "time / solver", "final objective",
               "steps run", "stop", "RMSE at L*", "steps to RMSE*", "s to RMSE*", "final RMSE",
               "obj @ t_solver"]
    rows = [["solver (10 sweeps)", "-", str(solver["n_iter"]), C.fmt_seconds(s_time), "1.00x",
             f"{solver['objective']:.4f}", str(solver["n_iter"]), "-",
             f"{solver['rmse']:.4f}", "-", "-", f"{solver['rmse']:.4f}",
             f"{solver['objective']:.4f}"]]
    for r in runs:
        reached = r["reached_seconds"] is not None
        if reached:
            ratio_text = C.fmt_ratio(r["reached_seconds"] / s_time)
        elif r["stop"].startswith("diverged"):
            ratio_text = "never (diverged)"
        else:
            ratio_text = C.fmt_ratio(r["seconds"] / s_time, lower_bound=True)
        rows.append([
            "Adam", f"{r['lr']:g}",
            str(r["reached_step"]) if reached else "never",
            C.fmt_seconds(r["reached_seconds"]) if reached else "-",
            ratio_text,
            F.fmt_num(r["final_objective"], 4),
            str(r["steps"]), r["stop"],
            F.fmt_num(r["rmse_at_target"], 4),
            str(r["rmse_reached_step"]) if r["rmse_reached_step"] is not None else
            ("never" if args.rmse_every else "-"),
            C.fmt_seconds(r["rmse_reached_seconds"]),
            F.fmt_num(r["final_rmse"], 4),
            F.fmt_num(r["objective_at_solver_time"], 4),
        ])
    notes = [
        f"L* = solver objective after {solver['n_iter']} sweeps = {solver['objective']:.6f}; "
        f"prior objective = {runs[0]['initial_objective'] if runs else float('nan'):.6f} "
        f"(estimator's objective_history_[0] = {solver['history'][0]:.6f})",
        f"solver time = median of {len(solver['times'])} fit(s) after a warm-up: "
        f"{C.fmt_seconds(s_time)} s ({', '.join(C.fmt_seconds(t) for t in solver['times'])})",
        "Adam seconds exclude the RMSE checkpoints and snapshots (clock stopped), include "
        f"objective + backward + step; objective evaluated by {args.adam_objective}",
        "final objective / final RMSE = at the last step with a finite objective (for a "
        "diverged run: the step before it failed)",
        f"time / solver with '>' = lower bound (run stopped at --max-steps={args.max_steps} or "
        f"--adam-budget={args.adam_budget:g} s without reaching L*)",
        f"RMSE* = solver test RMSE {solver['rmse']:.4f} (original y units); 'steps to RMSE*' "
        f"is checked every {args.rmse_every} steps" if args.rmse_every
        else "RMSE checkpoints disabled (--rmse-every 0)",
        "obj @ t_solver = Adam's objective at the first step whose elapsed time >= the solver "
        "time",
        "one Adam step at the prior: objective {:.2e} s, objective + backward {:.2e} s, full "
        "step {:.2e} s; one solver sweep = {:.2e} s (= {:.1f} Adam steps)".format(
            step_cost["forward"], step_cost["forward+backward"], step_cost["adam step"],
            s_time / max(solver["n_iter"], 1),
            s_time / max(solver["n_iter"], 1) / step_cost["adam step"]),
    ]
    C.print_table(f"Solver vs Adam on the same objective: {data_info}", headers, rows,
                  align="llrrrrrlrrrrr", notes=notes)

    print("Checks:")
    print(f"  objective from the public fitted attributes - objective_ = "
          f"{solver['check_objective_diff']:+.2e}")
    print(f"  max |prediction via build_prediction_cache/propagate - predict()| = "
          f"{solver['check_predict_maxdiff']:.2e}")
    if runs:
        print(f"  Adam objective at step 0 - objective_history_[0] = "
              f"{runs[0]['initial_objective'] - solver['history'][0]:+.2e}")
    print("  solver objective history: " + ", ".join(f"{v:.4f}" for v in solver["history"]))
    reference = solver.get("reference")
    if reference is not None:
        print(f"  solver objective after {reference['sweeps']} sweeps (reference, untimed): "
              f"{reference['objective']:.6f}; test RMSE {reference['rmse']:.4f}")
    for r in runs:
        # L* is the 10-sweep value, not the optimum, so passing it is expected for a long
        # Adam run; passing the long solver run would say the solver stalls below a
        # better point of the same objective
        if reference is not None and r["best_objective"] > reference["objective"] + 1e-6:
            print(f"  NOTE: Adam lr={r['lr']:g} reached {r['best_objective']:.6f}, above the "
                  f"solver's {reference['sweeps']}-sweep objective {reference['objective']:.6f}")
        elif r["best_objective"] > solver["objective"]:
            print(f"  Adam lr={r['lr']:g} passed L*: best {r['best_objective']:.6f}")

    ratio, lower = speedup(solver, runs)
    print("\nTarget, measured in this run:")
    if ratio is None:
        print("  n/a   every Adam run diverged: no time to compare")
        return None
    text = C.fmt_ratio(ratio, lower_bound=lower)
    if args.dataset == "diabetes":
        if lower and ratio < TARGET_SPEEDUP:
            verdict = "n/a "
            extra = " (inconclusive: no Adam run reached L* and the bound is < 10x; raise " \
                    "--adam-budget / --max-steps)"
        else:
            verdict, extra = C.verdict(ratio >= TARGET_SPEEDUP), ""
        print(f"  {verdict:4s}  diabetes: best Adam time to L* / solver time = {text} "
              f"(target >= {TARGET_SPEEDUP:g}x){extra}")
    else:
        print(f"  info  {args.dataset}: best Adam time to L* / solver time = {text} "
              "(the >= 10x target is defined on diabetes)")
    return {"ratio": ratio, "lower_bound": lower}


# ---------------------------------------------------------------- main


def main(argv=None):
    """Parse the options, time the solver, run Adam per learning rate, report."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", choices=("diabetes", "friedman", "toy"), default="diabetes")
    p.add_argument("--seed", type=int, default=0, help="seed of the 90/10 split (0)")
    p.add_argument("--device", default="cpu", help="cpu or cuda[:N] (cpu)")
    p.add_argument("--lrs", default=",".join(f"{v:g}" for v in DEFAULT_LRS),
                   help="comma list of Adam learning rates (0.1,0.03,0.01,0.001)")
    p.add_argument("--max-steps", type=int, default=5000, help="Adam steps per lr (5000)")
    p.add_argument("--adam-budget", type=float, default=300.0,
                   help="seconds of Adam optimisation per lr (300)")
    p.add_argument("--stop-at-target", action="store_true",
                   help="stop each Adam run as soon as it reaches L* (default: run to the cap "
                        "to see the final objective)")
    p.add_argument("--adam-objective", choices=("dkp_objective", "factored"),
                   default="dkp_objective",
                   help="how Adam evaluates the objective: skgpx's dkp_objective on G = C C^T "
                        "(default), or the same formula on the factors C (one Cholesky less "
                        "per layer, robust to ill-conditioned C C^T)")
    p.add_argument("--rmse-every", type=int, default=50,
                   help="test-RMSE checkpoint every N Adam steps, clock stopped (50; 0: off)")
    p.add_argument("--repeats", type=int, default=5, help="timed solver fits after 1 warm-up (5)")
    p.add_argument("--reference-sweeps", type=int, default=50,
                   help="also fit the solver once with this many sweeps (untimed) to show "
                        "how far L* is from convergence (50; 0: off)")
    p.add_argument("--quick", action="store_true",
                   help="smoke run: toy data, --max-steps 300, lr 1e-2, 2 solver repeats")
    p.add_argument("--json", default=None, help="also write all records to this JSON file")
    args = p.parse_args(argv)
    if args.quick:
        args.dataset, args.max_steps, args.lrs = "toy", 300, "0.01"
        args.repeats, args.rmse_every = min(args.repeats, 2), min(args.rmse_every, 25) or 0
    lrs = [float(v) for v in args.lrs.split(",") if v]
    device = args.device
    C.check_device(p, device)
    if device.startswith("cuda"):
        torch.backends.cuda.matmul.allow_tf32 = False
    C.print_header("dkp/vs_adam.py  -  point solver (10 sweeps) vs Adam on the same objective "
                   "(the paper's Fig. 1 analogue)", args, device=device)

    from skgpx import DeepKernelProcessRegressor

    X_train, y_train, X_test, y_test = load_data(args.dataset, args.seed)
    data_info = (f"{args.dataset}, seed {args.seed}, P={X_train.shape[0]} train, "
                 f"{X_test.shape[0]} test, d={X_train.shape[1]}, device={device}, in-process")
    print(f"data: {data_info}", flush=True)
    estimator = DeepKernelProcessRegressor(max_iter=10, device=device)
    problem = Problem(estimator, X_train, y_train, X_test, device)

    print("  solver fits ...", flush=True)
    solver, _ = time_solver(problem, X_train, y_train, X_test, y_test, args.repeats, device)
    if args.reference_sweeps:
        from sklearn.base import clone

        long_fit = clone(estimator).set_params(max_iter=args.reference_sweeps)
        long_fit.fit(X_train, y_train)
        solver["reference"] = {"sweeps": args.reference_sweeps,
                               "objective": float(long_fit.objective_),
                               "rmse": rmse(y_test, long_fit.predict(X_test))}
    if solver["jitter"] != float(estimator.jitter):
        print(f"  note: the solver raised the jitter to {solver['jitter']:g}; Adam uses it too")

    adam_problem = AdamProblem(problem, solver["jitter"], args.adam_objective)
    print(f"  Adam evaluates the objective by {args.adam_objective}; at the prior it differs "
          f"from dkp_objective by {adam_problem.prior_check:+.2e}", flush=True)
    step_cost = time_step_cost(adam_problem, device)
    print(f"  one Adam step (objective + backward + update) at the prior: "
          f"{step_cost['adam step']:.3e} s", flush=True)

    runs = []
    for lr in lrs:
        print(f"  Adam lr={lr:g} ...", flush=True)
        run = run_adam(adam_problem, lr, solver["objective"], solver["rmse"], solver["seconds"],
                       y_test, args, device)
        where = "never" if run["reached_step"] is None else f"step {run['reached_step']}"
        print(f"    {run['steps']} steps, {run['seconds']:.2f} s, stop: {run['stop']}, final "
              f"objective {run['final_objective']:.6f}, reached L* at {where}", flush=True)
        runs.append(run)

    target = report(args, data_info, solver, step_cost, runs)
    if args.json:
        F.write_json(args.json, {**F.run_info(args), "data": data_info, "solver": solver,
                                 "step_cost": step_cost, "adam": runs, "target": target})


if __name__ == "__main__":
    main()
