"""Record the outputs of a fixed set of fits, and compare two recordings bit for bit.

A change meant to preserve behaviour (moving modules, renaming private names) must leave
every number a user can see unchanged.  This script fits a fixed set of estimators, one or
more per mode of every public estimator, on small data, on the CPU in float64, with fixed
seeds, and records what the public API returns: ``predict`` (with ``return_std``,
``return_cov``, ``return_noise`` where they exist), ``predict_proba``,
``predict_log_proba``, the family's own prediction methods, ``sample_y`` (a given seed and
the fitted one), ``sample_functions`` evaluated at the query rows, ``log_marginal_likelihood``
at the fitted and at a moved ``theta`` (with its gradient), ``score``, the warnings of
``fit``, and every public fitted attribute (names ending in ``_``, properties included):
arrays as they are, kernels as their ``repr``, ``theta`` and ``bounds``, torch modules as
their state dicts, lists (objective histories) as arrays, other objects by their public
attributes.  An error raised by any of these calls is recorded as its type and message.

Only the public API is used (estimators imported from ``skgpx``), so one copy of this
script records an old tree and a new one alike.  The fits run single-threaded under the
thread and BLAS settings of ``make test`` (the script restarts itself under them), and the
global random generators are seeded before each case, so two runs on one tree and one
machine record the same bits.  Bits are not portable across CPUs (BLAS and ATen kernels
differ): compare recordings made on one machine.

Usage::

    python tests/record_outputs.py --out FILE.npz [--cases SUBSTRING ...]
    python tests/record_outputs.py --compare A.npz B.npz
    python tests/record_outputs.py --list

``--out`` writes one ``.npz`` whose keys are ``<case>/<what>`` (numeric arrays, or string
arrays for reprs and errors; no pickled objects).  ``--compare`` prints, for each key,
``equal`` (same dtype, same shape, same bytes) or the largest absolute and relative
difference, then the keys found in one file only and a summary line; it exits with status
0 only when every key is in both files and equal.  The package recorded is the ``skgpx``
that Python imports, so put the tree to record first on the path: ``PYTHONPATH=/path/to/tree
python tests/record_outputs.py --out before.npz`` (the run prints where ``skgpx`` came from).

The whole set takes about 15 s on an idle core (43 cases, about 3300 keys).
"""

import argparse
import inspect
import os
import sys
import time

# The settings of `make test` (Makefile, TEST_ENV), and a fixed hash seed.  BLAS reads its
# settings when it loads, and glibc its allocator settings when the process starts, so the
# script restarts itself under them rather than set them here.
ENVIRONMENT = {
    "SCIPY_ARRAY_API": "1",
    "MKL_CBWR": "AUTO,STRICT",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MALLOC_TRIM_THRESHOLD_": "134217728",
    "MALLOC_MMAP_THRESHOLD_": "33554432",
    "PYTHONHASHSEED": "0",
}

if __name__ == "__main__" and any(os.environ.get(k) != v for k, v in ENVIRONMENT.items()):
    os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **ENVIRONMENT})

import random  # noqa: E402
import warnings  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
from sklearn.datasets import load_digits, load_iris  # noqa: E402
from sklearn.gaussian_process.kernels import (  # noqa: E402
    RBF,
    ConstantKernel,
    ExpSineSquared,
    GenericKernelMixin,
    Hyperparameter,
    Kernel,
    Matern,
    WhiteKernel,
)

from skorch import NeuralNet  # noqa: E402

import skgpx  # noqa: E402
from skgpx import (  # noqa: E402
    DeepKernelProcessRegressor,
    DeepQEPClassifier,
    DeepQEPRegressor,
    KEPSVGPClassifier,
    PathwiseGPClassifier,
    PathwiseGPSampler,
    SmoothDRDRegressor,
)

torch.set_num_threads(1)
try:
    torch.set_num_interop_threads(1)
except RuntimeError:  # already set in this process
    pass

# ----------------------------------------------------------------------------- data


def _regression():
    """40 rows in 2-D, one target: a smooth function plus noise 0.1; 9 query rows."""
    rng = np.random.RandomState(0)
    X = rng.uniform(-3.0, 3.0, size=(40, 2))
    y = np.sin(X[:, 0]) + 0.3 * X[:, 1] ** 2 + 0.1 * rng.randn(40)
    Xq = rng.uniform(-4.0, 4.0, size=(9, 2))
    return X, y, Xq


def _two_targets():
    X, y, Xq = _regression()
    return X, np.column_stack([y, np.cos(X[:, 1]) + 0.05 * X[:, 0]]), Xq


def _one_dimensional():
    """30 rows of a periodic function of one input."""
    rng = np.random.RandomState(1)
    X = np.sort(rng.uniform(0.0, 6.0, size=(30, 1)), axis=0)
    y = np.sin(2.0 * X[:, 0]) + 0.1 * rng.randn(30)
    return X, y, np.linspace(-1.0, 7.0, 9)[:, None]


def _outliers():
    """The regression data with three targets moved by a gross error (Student-t)."""
    X, y, Xq = _regression()
    y = y.copy()
    y[[3, 17, 29]] += np.array([6.0, -5.0, 7.0])
    return X, y, Xq


def _heteroscedastic():
    """Noise whose level grows tenfold along the first input."""
    rng = np.random.RandomState(2)
    X = rng.uniform(-3.0, 3.0, size=(48, 1))
    y = np.sin(X[:, 0]) + (0.05 + 0.25 * (X[:, 0] + 3.0) / 6.0) * rng.randn(48)
    return X, y, np.linspace(-3.5, 3.5, 9)[:, None]


def _blobs(n_classes=3):
    """Three blobs of 14 rows with string labels (the first two: a binary problem)."""
    rng = np.random.RandomState(3)
    centres = np.array([[-2.0, -2.0], [2.0, -2.0], [0.0, 2.5]])
    codes = np.repeat(np.arange(3), 14)
    X = centres[codes] + 0.8 * rng.randn(42, 2)
    y = np.array(["bird", "cat", "dog"])[codes]
    keep = codes < n_classes
    return X[keep], y[keep], rng.uniform(-4.0, 4.0, size=(9, 2))


def _binary_blobs():
    return _blobs(2)


def _iris():
    X, y = load_iris(return_X_y=True)
    rows = np.r_[0:20, 50:70, 100:120]
    return X[rows], y[rows], X[[25, 75, 125, 140]]


def _digits():
    X, y = load_digits(return_X_y=True)
    return X[:120], y[:120], X[300:309]


def _bumps():
    """30 rows of 40 correlated features whose coefficients are two smooth bumps."""
    rng = np.random.RandomState(4)
    grid = np.arange(40)
    coef = np.exp(-0.5 * ((grid - 11) / 3.0) ** 2) - 0.7 * np.exp(-0.5 * ((grid - 29) / 2.0) ** 2)
    X = rng.randn(39, 40)
    X = X + np.roll(X, 1, axis=1)  # neighbouring features correlated
    y = X[:30] @ coef + 0.1 * rng.randn(30)
    return X[:30], y, X[30:]


class MismatchKernel(GenericKernelMixin, Kernel):
    """``k(a, b) = s ** (positions where a and b differ)`` on strings of one length.

    A product over positions of ``1`` (same letter) or ``s`` (another), each a positive
    semi-definite kernel for ``0 < s <= 1``; a kernel on structured inputs
    (``requires_vector_input`` is False), which has no random-feature map.
    """

    def __init__(self, similarity=0.5, similarity_bounds=(1e-5, 1.0)):
        self.similarity = similarity
        self.similarity_bounds = similarity_bounds

    @property
    def hyperparameter_similarity(self):
        return Hyperparameter("similarity", "numeric", self.similarity_bounds)

    def _mismatches(self, X, Y):
        return np.array([[sum(a != b for a, b in zip(x, z)) for z in Y] for x in X], float)

    def __call__(self, X, Y=None, eval_gradient=False):
        counts = self._mismatches(X, X if Y is None else Y)
        K = self.similarity ** counts
        if eval_gradient:  # d K / d log(s) = counts * K
            return K, (counts * K)[..., None]
        return K

    def diag(self, X):
        return np.ones(len(X))

    def is_stationary(self):
        return False


def _sequences():
    """24 strings of five letters and a target drawn from the mismatch kernel."""
    rng = np.random.RandomState(5)
    X = ["".join(rng.choice(list("ACGT"), size=5)) for _ in range(24)]
    K = 0.1 * MismatchKernel(0.3)(X)
    y = np.linalg.cholesky(K + 1e-9 * np.eye(24)) @ rng.randn(24) + 0.3 * rng.randn(24)
    Xq = ["".join(rng.choice(list("ACGT"), size=5)) for _ in range(5)]
    return X, y, Xq


# ----------------------------------------------------------------------------- cases

CPU = dict(device="cpu", dtype="float64")
QEP_SMALL = dict(n_inducing=16, max_iter=40, n_mc_samples=3, n_mc_samples_predict=8,
                 tol=None, random_state=0, **CPU)
KEP_SMALL = dict(tokenizer="patches", patch_size=4, d_model=16, depth=1, max_iter=5,
                 random_state=0, **CPU)


def _signal_and_noise():
    return ConstantKernel(1.0) * Matern(1.0, nu=2.5) + WhiteKernel(0.1)


def _rbf():
    return ConstantKernel(1.0) * RBF(1.0)


# name: (estimator factory, data, fit?).  An unfitted case records the prior.
CASES = {
    # the pathwise regressor before fit: the prior, one target and two
    "pathwise_prior": (lambda: PathwiseGPSampler(_rbf() + WhiteKernel(0.1), n_features=64,
                                                 random_state=0, **CPU), _regression, False),
    "pathwise_prior_default_kernel": (
        lambda: PathwiseGPSampler(n_targets=2, n_features=64, random_state=0, **CPU),
        _regression, False),
    # exact GP, Cholesky: L-BFGS-B with a restart, per-row alpha, normalised targets,
    # independent feature draws per path
    "pathwise_exact": (lambda: PathwiseGPSampler(
        ConstantKernel(1.0) * RBF(1.0) + WhiteKernel(0.5), alpha=np.linspace(0.01, 0.1, 40),
        n_restarts_optimizer=1, normalize_y=True, shared_basis=False, n_features=64,
        random_state=0, **CPU), _regression, True),
    # two targets, the exact joint prior of sample_y, qmc cosine features, observed noise
    "pathwise_exact_two_targets": (lambda: PathwiseGPSampler(
        _signal_and_noise(), prior="exact", feature_map="cosine", frequency_sampling="qmc",
        predict_noise="observed", n_features=64, random_state=0, **CPU), _two_targets, True),
    # the weight-space baseline at fixed hyperparameters, latent predictions
    "pathwise_weight_space": (lambda: PathwiseGPSampler(
        _signal_and_noise(), method="weight_space", optimizer=None, predict_noise="latent",
        n_features=64, random_state=0, **CPU), _regression, True),
    # a kernel without random features: sample_y draws exactly at the queries
    "pathwise_periodic": (lambda: PathwiseGPSampler(
        ConstantKernel(1.0) * ExpSineSquared(1.0, 3.0) + WhiteKernel(0.1), random_state=0,
        **CPU), _one_dimensional, True),
    # structured inputs (strings): exact GP on objects, the exact joint prior and the
    # default route (exact draws at the queries)
    "pathwise_structured": (lambda: PathwiseGPSampler(
        ConstantKernel(1.0) * MismatchKernel() + WhiteKernel(0.1), prior="exact",
        random_state=0, **CPU), _sequences, True),
    "pathwise_structured_rff": (lambda: PathwiseGPSampler(
        ConstantKernel(1.0) * MismatchKernel() + WhiteKernel(0.1), optimizer=None,
        random_state=0, **CPU), _sequences, True),
    # exact GP, conjugate gradients at fixed hyperparameters (pivoted-Cholesky preconditioner)
    "pathwise_cg": (lambda: PathwiseGPSampler(
        WhiteKernel(0.1) + Matern(1.0, nu=1.5), optimizer=None, solver="cg",
        cg_preconditioner_rank=20, cg_tol=1e-8, n_features=64, random_state=0, **CPU),
        _regression, True),
    # Jacobi-preconditioned CG on two targets
    "pathwise_cg_jacobi": (lambda: PathwiseGPSampler(
        _signal_and_noise(), optimizer=None, solver="cg", cg_preconditioner_rank=0,
        cg_tol=1e-6, n_features=64, random_state=0, **CPU), _two_targets, True),
    # SGPR (collapsed bound): L-BFGS-B with learnt inducing inputs and noise
    "pathwise_sgpr_lbfgs": (lambda: PathwiseGPSampler(
        _signal_and_noise(), n_inducing=12, optimize_inducing=True, normalize_y=True,
        n_features=64, random_state=0, **CPU), _regression, True),
    # SGPR by Adam: on mini-batches of the uncollapsed bound, and on the collapsed one
    "pathwise_sgpr_adam_minibatch": (lambda: PathwiseGPSampler(
        _signal_and_noise(), n_inducing=12, optimizer="adam", minibatch_size=16, max_iter=30,
        learning_rate=0.05, n_features=64, random_state=0, **CPU), _regression, True),
    "pathwise_sgpr_adam": (lambda: PathwiseGPSampler(
        _signal_and_noise(), n_inducing=12, optimizer="adam", max_iter=30,
        learning_rate=0.05, n_features=64, random_state=0, **CPU), _two_targets, True),
    # SGPR whose L-BFGS-B first fits a subset of the rows
    "pathwise_sgpr_presolve": (lambda: PathwiseGPSampler(
        _signal_and_noise(), n_inducing=10, presolve_rows=20, n_features=64, random_state=0,
        **CPU), _regression, True),
    # SGPR at given inducing inputs and fixed hyperparameters
    "pathwise_sgpr_fixed": (lambda: PathwiseGPSampler(
        _signal_and_noise(), inducing_points=np.linspace(-3.0, 3.0, 14).reshape(7, 2),
        optimizer=None, n_features=64, random_state=0, **CPU), _regression, True),
    # Student-t likelihood (SVGP): L-BFGS-B on inducing points, and Adam full rank
    "pathwise_student_t": (lambda: PathwiseGPSampler(
        _rbf(), likelihood="student_t", n_inducing=10, max_iter=15, n_features=64,
        random_state=0, **CPU), _outliers, True),
    "pathwise_student_t_adam": (lambda: PathwiseGPSampler(
        _rbf(), likelihood="student_t", optimizer="adam", minibatch_size=16, max_iter=10,
        learning_rate=0.05, tol=None, n_features=64, random_state=0, **CPU), _outliers, True),
    # heteroscedastic likelihood: full rank on mini-batches (Adam), and on inducing points
    # with separate inducing inputs for the noise (L-BFGS-B)
    "pathwise_heteroscedastic_adam": (lambda: PathwiseGPSampler(
        _rbf(), likelihood="heteroscedastic", optimizer="adam", minibatch_size=16,
        max_iter=15, learning_rate=0.05, tol=None, normalize_y=True, n_features=64,
        random_state=0, **CPU), _heteroscedastic, True),
    "pathwise_heteroscedastic_sparse": (lambda: PathwiseGPSampler(
        _rbf(), likelihood="heteroscedastic", n_inducing=10, share_inducing=False,
        max_iter=15, n_features=64, random_state=0, **CPU), _heteroscedastic, True),
    # the classifier, Laplace: binary with a restart, one-vs-rest, one-vs-one with probit
    "classifier_laplace_binary": (lambda: PathwiseGPClassifier(
        _rbf(), n_restarts_optimizer=1, n_features=64, random_state=0, **CPU),
        _binary_blobs, True),
    "classifier_laplace_ovr": (lambda: PathwiseGPClassifier(
        _rbf(), n_restarts_optimizer=1, n_features=64, random_state=0, **CPU), _blobs, True),
    "classifier_laplace_ovo": (lambda: PathwiseGPClassifier(
        ConstantKernel(1.0) * Matern(1.0, nu=1.5), multi_class="one_vs_one", link="probit",
        warm_start=True, n_features=64, random_state=0, **CPU), _blobs, True),
    # a kernel on strings, binary labels by the sign of the target
    "classifier_laplace_structured": (lambda: PathwiseGPClassifier(
        ConstantKernel(1.0) * MismatchKernel(), random_state=0, **CPU),
        lambda: _signs(_sequences()), True),
    # the classifier, SVGP: binary and one-vs-rest by L-BFGS-B, softmax by Adam
    "classifier_svgp_binary": (lambda: PathwiseGPClassifier(
        _rbf(), n_inducing=6, max_iter=15, n_features=64, random_state=0, **CPU),
        _binary_blobs, True),
    "classifier_svgp_ovr": (lambda: PathwiseGPClassifier(
        _rbf(), n_inducing=6, max_iter=10, n_features=64, random_state=0, **CPU),
        _blobs, True),
    "classifier_svgp_fixed_inputs": (lambda: PathwiseGPClassifier(
        _rbf(), inducing_points=np.linspace(-3.0, 3.0, 10).reshape(5, 2),
        optimize_inducing=False, optimizer=None, link="probit", max_iter=10, n_features=64,
        random_state=0, **CPU), _binary_blobs, True),
    "classifier_svgp_softmax": (lambda: PathwiseGPClassifier(
        _rbf(), n_inducing=6, multi_class="softmax", optimizer="adam", max_iter=15,
        minibatch_size=16, learning_rate=0.05, tol=None, n_mc_samples=16, n_features=64,
        random_state=0, **CPU), _blobs, True),
    # the deep kernel process: exact (three sweeps; the arc-cosine "gp" baseline) and
    # inducing-point mode (CARE sweeps then L-BFGS; L-BFGS alone with learnt inputs)
    "dkp_exact": (lambda: DeepKernelProcessRegressor(max_iter=3, **CPU), _regression, True),
    "dkp_exact_arccos": (lambda: DeepKernelProcessRegressor(
        kernel="arccos1", objective="gp", skip=False, input_scale=False, max_iter=3, **CPU),
        _two_targets, True),
    "dkp_sparse": (lambda: DeepKernelProcessRegressor(
        n_inducing=8, max_iter=12, random_state=0, **CPU), _regression, True),
    "dkp_sparse_lbfgs": (lambda: DeepKernelProcessRegressor(
        n_inducing=8, solver="lbfgs", n_layers=1, optimize_inducing=True, max_iter=12,
        random_state=0, **CPU), _regression, True),
    "dkp_sparse_newton": (lambda: DeepKernelProcessRegressor(
        n_inducing=8, solver="newton", max_iter=4, random_state=0, **CPU), _two_targets, True),
    # deep Q-EP: regressor (deep; shallow q=2 with the scaled bound), classifier (softmax;
    # Dirichlet)
    "qep_regressor": (lambda: DeepQEPRegressor(**QEP_SMALL), _regression, True),
    "qep_regressor_shallow": (lambda: DeepQEPRegressor(
        q=2.0, hidden_dims=(), bound="scaled", kernel="rbf", **QEP_SMALL), _two_targets, True),
    "qep_regressor_restarts": (lambda: DeepQEPRegressor(**{
        **QEP_SMALL, "n_restarts": 1, "early_stopping": True, "validation_fraction": 0.2,
        "n_iter_no_change": 5, "tol": 1e-4}), _regression, True),
    "qep_classifier": (lambda: DeepQEPClassifier(**QEP_SMALL), _blobs, True),
    "qep_classifier_dirichlet": (lambda: DeepQEPClassifier(
        q=1.5, likelihood="dirichlet", hidden_dims=(4, 2), **QEP_SMALL), _iris, True),
    # KEP-SVGP: image patches (concatenation merge), tabular features (addition)
    "kepsvgp_patches": (lambda: KEPSVGPClassifier(**KEP_SMALL), _digits, True),
    "kepsvgp_features": (lambda: KEPSVGPClassifier(
        tokenizer="features", d_model=16, depth=1, max_iter=5, random_state=0, **CPU),
        _iris, True),
    # smooth DRD: dense and Fourier bases; the softplus link with the exact Hessian and
    # the joint evidence; smoothness alone
    "drd_dense": (lambda: SmoothDRDRegressor(max_iter=8, tol=None, **CPU), _bumps, True),
    "drd_fourier": (lambda: SmoothDRDRegressor(basis="fourier", max_iter=8, tol=None, **CPU),
                    _bumps, True),
    "drd_softplus_exact": (lambda: SmoothDRDRegressor(
        link="softplus", laplace_hessian="exact", evidence="joint", max_iter=4, tol=None,
        **CPU), _bumps, True),
    "drd_smoothness_only": (lambda: SmoothDRDRegressor(
        sparsity=False, fit_intercept=False, max_iter=4, tol=None, **CPU), _bumps, True),
}


def _signs(data):
    X, y, Xq = data
    return X, np.where(y > np.median(y), "up", "down"), Xq


# ----------------------------------------------------------------------------- recording


def _error(exc):
    return f"error: {type(exc).__name__}: {exc}"


class Recorder:
    """Flattens outputs into ``{key: ndarray}`` (numeric or string arrays only)."""

    def __init__(self):
        self.values = {}

    def put(self, key, value, depth=0):
        if key in self.values:
            raise KeyError(f"{key} recorded twice")
        if depth > 8:
            self.values[key] = np.array(f"<{type(value).__name__} nested too deep>")
        elif value is None:
            self.values[key] = np.array("<None>")
        elif isinstance(value, str):
            self.values[key] = np.array(value)
        elif isinstance(value, torch.Tensor):
            self.values[key] = value.detach().cpu().numpy().copy()
        elif isinstance(value, np.ndarray):
            self._array(key, value)
        elif isinstance(value, (bool, int, float, complex, np.generic)):
            self.values[key] = np.asarray(value)
        elif isinstance(value, Kernel):
            self.values[f"{key}/repr"] = np.array(repr(value))
            self.values[f"{key}/theta"] = np.asarray(value.theta)
            self.values[f"{key}/bounds"] = np.asarray(value.bounds)
        elif isinstance(value, torch.nn.Module):
            self.values[f"{key}/repr"] = np.array(repr(value))
            for name, tensor in value.state_dict().items():
                self.put(f"{key}/state/{name}", tensor, depth + 1)
        elif isinstance(value, torch.optim.Optimizer):
            self.put(f"{key}/state_dict", value.state_dict(), depth + 1)
        elif isinstance(value, torch.device):
            self.values[key] = np.array(str(value))
        elif isinstance(value, torch.Generator):
            self.values[key] = value.get_state().numpy().copy()
        elif isinstance(value, dict):
            self.values[f"{key}/keys"] = np.array([str(k) for k in value])
            for name, item in value.items():
                if name == "dur":  # skorch's epoch timings
                    continue
                self.put(f"{key}/{name}", item, depth + 1)
        elif isinstance(value, (list, tuple)) and value and all(
                isinstance(v, dict) for v in value):
            self._table(key, value, depth)
        elif isinstance(value, (list, tuple)):
            self._sequence(key, value, depth)
        elif isinstance(value, NeuralNet):
            # its module and history are the estimator's own attributes, and its callbacks
            # hold timings: the optimiser's state and the shuffling generator are its own
            self.values[f"{key}/type"] = np.array(type(value).__name__)
            self.put(f"{key}/optimizer_", value.optimizer_, depth + 1)
            generator = getattr(value, "iterator_train__generator", None)
            if generator is not None:
                self.put(f"{key}/iterator_train__generator", generator, depth + 1)
        else:
            self._object(key, value, depth)

    def _table(self, key, rows, depth):
        """A list of dicts (skorch's history: one per epoch, with one per batch inside):
        one array per column, without the timings."""
        columns = list(dict.fromkeys(name for row in rows for name in row))
        self.values[f"{key}/rows"] = np.asarray(len(rows))
        self.values[f"{key}/columns"] = np.array([str(c) for c in columns])
        for name in columns:
            if name == "dur":
                continue
            cells = [row.get(name) for row in rows]
            if all(isinstance(c, (bool, int, float, np.number, np.bool_)) for c in cells):
                self.values[f"{key}/{name}"] = np.asarray(cells)
            elif all(isinstance(c, list) and all(isinstance(r, dict) for r in c)
                     for c in cells) and any(cells):
                self.values[f"{key}/{name}/lengths"] = np.asarray([len(c) for c in cells])
                self._table(f"{key}/{name}", [r for c in cells for r in c], depth + 1)
            else:
                for i, cell in enumerate(cells):
                    self.put(f"{key}/{name}/{i}", cell, depth + 1)

    def _array(self, key, value):
        if value.dtype == object:  # labels or rows of objects: their reprs
            self.values[f"{key}/object"] = np.array(
                [repr(v) for v in value.ravel()]).reshape(value.shape)
        else:
            self.values[key] = value.copy()

    def _sequence(self, key, value, depth):
        kind = type(value).__name__
        if all(isinstance(v, (bool, int, float, np.number, np.bool_)) for v in value):
            self.values[f"{key}/{kind}"] = np.asarray(value)
        elif all(isinstance(v, str) for v in value) and value:
            self.values[f"{key}/{kind}"] = np.array(value)
        else:
            self.values[f"{key}/{kind}_length"] = np.asarray(len(value))
            for i, item in enumerate(value):
                self.put(f"{key}/{i}", item, depth + 1)

    def _object(self, key, value, depth):
        """Any other object: its type name and its public data attributes."""
        self.values[f"{key}/type"] = np.array(type(value).__name__)
        for name in sorted(dir(value)):
            if name.startswith("_"):
                continue
            try:
                item = getattr(value, name)
            except Exception as exc:  # a property that does not apply
                self.values[f"{key}/{name}"] = np.array(_error(exc))
                continue
            if inspect.isroutine(item) or inspect.isclass(item):
                continue
            self.put(f"{key}/{name}", item, depth + 1)

    def call(self, key, function, *args, **kwargs):
        """Record ``function(*args, **kwargs)`` (tuples by position), or its error."""
        try:
            result = function(*args, **kwargs)
        except Exception as exc:
            self.values[key] = np.array(_error(exc))
            return None
        if isinstance(result, tuple):
            for i, item in enumerate(result):
                self.put(f"{key}/{i}", item)
        else:
            self.put(key, result)
        return result


def _public_attributes(est):
    """Public fitted attributes: names ending in '_', properties included."""
    return [name for name in sorted(dir(est))
            if name.endswith("_") and not name.startswith("_")
            and not inspect.isroutine(getattr(type(est), name, None))]


def _record_attributes(rec, case, est):
    names, types = [], []
    for name in _public_attributes(est):
        try:
            value = getattr(est, name)
        except Exception as exc:
            rec.values[f"{case}/attr/{name}"] = np.array(_error(exc))
            names.append(name)
            types.append(f"{name}: <error>")
            continue
        names.append(name)
        types.append(f"{name}: {type(value).__name__}")
        rec.put(f"{case}/attr/{name}", value)
    rec.values[f"{case}/attributes"] = np.array(names if names else ["<none>"])
    rec.values[f"{case}/attribute_types"] = np.array(types if types else ["<none>"])


def _has(est, name):
    return hasattr(type(est), name)


def _parameters(est, name):
    return inspect.signature(getattr(type(est), name)).parameters


def _record_predictions(rec, case, est, X, y, Xq):
    p = f"{case}/out"
    if _has(est, "predict"):
        rec.call(f"{p}/predict", est.predict, Xq)
        options = _parameters(est, "predict")
        if "return_std" in options:
            rec.call(f"{p}/predict_std", est.predict, Xq, return_std=True)
        if "return_cov" in options:
            rec.call(f"{p}/predict_cov", est.predict, Xq, return_cov=True)
        if "return_noise" in options:
            rec.call(f"{p}/predict_std_noise", est.predict, Xq, return_std=True,
                     return_noise=True)
            rec.call(f"{p}/predict_noise", est.predict, Xq, return_noise=True)
    for method in ("predict_proba", "predict_log_proba", "decision_function",
                   "latent_mean_and_variance", "sample_y_route"):
        if _has(est, method):
            rec.call(f"{p}/{method}", lambda m=method: getattr(est, m)(Xq))
    if _has(est, "predict_proba_samples"):
        rec.call(f"{p}/predict_proba_samples", lambda: est.predict_proba_samples(Xq))
        rec.call(f"{p}/predict_proba_samples_seeded",
                 lambda: est.predict_proba_samples(Xq, n_samples=3, random_state=1))
    if _has(est, "predict_grams"):
        rec.call(f"{p}/predict_grams", lambda: est.predict_grams(Xq))
        rec.call(f"{p}/predict_grams_full", lambda: est.predict_grams(Xq, full=True))
    if _has(est, "sample_y"):
        rec.call(f"{p}/sample_y_default", lambda: est.sample_y(Xq))
        rec.call(f"{p}/sample_y", lambda: est.sample_y(Xq, 3, random_state=2))
        rec.call(f"{p}/sample_y_fitted_seed", lambda: est.sample_y(Xq, 3, random_state=None))
        if "u_uncertainty" in _parameters(est, "sample_y"):
            rec.call(f"{p}/sample_y_u_uncertainty",
                     lambda: est.sample_y(Xq, 2, random_state=2, u_uncertainty=True))
    if _has(est, "sample_functions"):
        functions = rec.call(f"{p}/sample_functions", lambda: est.sample_functions(
            3, random_state=1))
        if functions is not None:
            rec.call(f"{p}/sample_functions_at_queries", functions, Xq)
            if hasattr(functions, "evaluate_batched"):
                rec.call(f"{p}/sample_functions_batched", functions.evaluate_batched,
                         np.stack([np.asarray(Xq)[:4]] * 3))
            rec.call(f"{p}/sample_functions_fitted_seed",
                     lambda: est.sample_functions(2, random_state=None)(Xq))
    if _has(est, "log_marginal_likelihood"):
        rec.call(f"{p}/lml", est.log_marginal_likelihood)
        theta = getattr(getattr(est, "kernel_", None), "theta", None)
        if theta is not None:
            rec.call(f"{p}/lml_fitted_theta", est.log_marginal_likelihood, theta)
            rec.call(f"{p}/lml_fitted_theta_gradient", est.log_marginal_likelihood, theta,
                     eval_gradient=True)
            rec.call(f"{p}/lml_moved_theta_gradient", est.log_marginal_likelihood,
                     theta + 0.1, eval_gradient=True)
    if _has(est, "score") and y is not None:
        rec.call(f"{p}/score", est.score, X, y)
    base = getattr(est, "base_estimator_", None)
    views = getattr(base, "estimators_", [base] if base is not None else [])
    for i, view in enumerate(views):  # the per-problem methods of the Laplace views
        for method in ("predict_proba", "latent_mean_and_variance"):
            rec.call(f"{p}/base_estimator/{i}/{method}", getattr(view, method), Xq)
        rec.call(f"{p}/base_estimator/{i}/lml_moved_theta", view.log_marginal_likelihood,
                 view.kernel_.theta + 0.1, eval_gradient=True)


def _warning_lines(caught):
    return np.array([f"{w.category.__name__}: {w.message}" for w in caught] or ["<none>"])


def _seed_globals():
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)


def record_case(rec, case):
    make, data, fit = CASES[case]
    _seed_globals()
    X, y, Xq = data()
    est = make()
    rec.values[f"{case}/repr"] = np.array(repr(est))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if fit:
            try:
                est.fit(X, y)
            except Exception as exc:
                rec.values[f"{case}/fit"] = np.array(_error(exc))
                return
    rec.values[f"{case}/warnings/fit"] = _warning_lines(caught)
    _record_attributes(rec, case, est)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _record_predictions(rec, case, est, X, y if fit else None, Xq)
    rec.values[f"{case}/warnings/predict"] = _warning_lines(caught)


def _environment(rec):
    import scipy
    import sklearn

    rec.values["_environment/versions"] = np.array(
        [f"numpy {np.__version__}", f"scipy {scipy.__version__}",
         f"scikit-learn {sklearn.__version__}", f"torch {torch.__version__}"])
    rec.values["_environment/cpu_capability"] = np.array(
        torch.backends.cpu.get_cpu_capability())
    rec.values["_environment/settings"] = np.array(
        [f"{k}={os.environ.get(k)}" for k in [*ENVIRONMENT, "ATEN_CPU_CAPABILITY"]])


def record(path, selected):
    rec = Recorder()
    _environment(rec)
    print(f"skgpx from {os.path.dirname(skgpx.__file__)}", file=sys.stderr)
    start = time.perf_counter()
    for case in selected:
        t0 = time.perf_counter()
        record_case(rec, case)
        print(f"{case:38s} {time.perf_counter() - t0:6.2f} s", file=sys.stderr)
    np.savez(path, **rec.values)
    print(f"{len(rec.values)} keys from {len(selected)} cases in "
          f"{time.perf_counter() - start:.1f} s -> {path}", file=sys.stderr)


# ----------------------------------------------------------------------------- comparing


def _difference(a, b):
    """'equal', or what differs between two recorded arrays."""
    if a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes():
        return "equal"
    if a.dtype.kind in "US" or b.dtype.kind in "US":
        if a.dtype.kind == b.dtype.kind and a.shape == b.shape and np.array_equal(a, b):
            return f"differ: dtype {a.dtype} vs {b.dtype}"
        return f"differ: {_clip(a)} vs {_clip(b)}"
    if a.shape != b.shape:
        return f"differ: shape {a.shape} vs {b.shape}"
    note = "" if a.dtype == b.dtype else f" (dtype {a.dtype} vs {b.dtype})"
    x, z = a.astype(np.complex128 if "c" in a.dtype.kind + b.dtype.kind else np.float64), \
        b.astype(np.complex128 if "c" in a.dtype.kind + b.dtype.kind else np.float64)
    if x.size == 0:
        return "differ" + note
    same_nan = np.isnan(x) == np.isnan(z)
    if not same_nan.all():
        note += f", NaN at {int((~same_nan).sum())} places in one only"
    finite = ~(np.isnan(x) | np.isnan(z))
    abs_diff = np.abs(x - z)[finite]
    if abs_diff.size == 0 or abs_diff.max() == 0:
        return "differ: in bits only (signed zeros or NaN payloads)" + note
    rel = abs_diff / np.maximum(np.abs(z[finite]), np.finfo(np.float64).tiny)
    return f"differ: max abs {abs_diff.max():.3e}, max rel {rel.max():.3e}" + note


def _clip(a, width=80):
    text = repr(a.tolist())
    return text if len(text) <= width else text[: width - 3] + "..."


def compare(path_a, path_b):
    with np.load(path_a) as fa, np.load(path_b) as fb:
        a, b = {k: fa[k] for k in fa.files}, {k: fb[k] for k in fb.files}
    both = [k for k in a if k in b]
    n_equal = 0
    for key in both:
        verdict = _difference(a[key], b[key])
        n_equal += verdict == "equal"
        print(f"{key}: {verdict}")
    only_a, only_b = [k for k in a if k not in b], [k for k in b if k not in a]
    for key in only_a:
        print(f"{key}: only in {path_a}")
    for key in only_b:
        print(f"{key}: only in {path_b}")
    n_keys = len(both) + len(only_a) + len(only_b)
    differ = len(both) - n_equal
    print(f"{n_keys} keys, {n_equal} bitwise equal, {differ} differ"
          + (f", {len(only_a)} only in {path_a}, {len(only_b)} only in {path_b}"
             if only_a or only_b else ""))
    return 0 if n_equal == n_keys else 1


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--out", metavar="FILE.npz", help="record every case into FILE.npz")
    group.add_argument("--compare", nargs=2, metavar=("A.npz", "B.npz"),
                       help="compare two recordings key by key")
    group.add_argument("--list", action="store_true", help="list the cases")
    parser.add_argument("--cases", nargs="+", metavar="SUBSTRING",
                        help="with --out: only the cases whose names contain one of these")
    args = parser.parse_args(argv)
    if args.list:
        print("\n".join(CASES))
        return 0
    if args.compare:
        return compare(*args.compare)
    selected = [c for c in CASES if not args.cases or any(s in c for s in args.cases)]
    record(args.out, selected)
    return 0


if __name__ == "__main__":
    sys.exit(main())
