"""What the deep Q-EP regressor and classifier share: parameters, validation, the fit
driver (model construction, the skorch net, fitted attributes) and prediction draws."""

import numbers
import warnings

import numpy as np
import torch
from sklearn.base import BaseEstimator
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process.kernels import Kernel
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted, validate_data

from .._base import (
    Interval,
    StrOptions,
    TorchEstimatorMixin,
    array_bytes,
    check_draw_memory,
    check_magnitude,
    check_memory,
    check_n_samples,
    column_standardisation,
    cpu_generator,
    fit_seeds,
    prediction_generator,
    fenced_global_rng,
)
from ..kernels import STATIONARY_PROFILES, stationary_from_sklearn
from ._distribution import univariate_variance_factor
from ._model import DeepQEPModule, QEPLayer, initial_mean_weight
from ._net import build_net
from ._predict import joint_latent_draws, latent_moments

__all__ = ["COMMON_PARAMETERS", "DeepQEPBase"]

_SUPPORTED_Q = (0.5, 2.0)
_MAX_JOINT_ROWS = 5000
# floors of the marginal scales v: keep log(r_bar) finite for q < 2
_MIN_VARIANCE = {torch.float64: 1e-10, torch.float32: 1e-6}
_DEFAULT_JITTER = {torch.float64: 1e-6, torch.float32: 1e-4}
_SEED_NAMES = ("init", "train", "shuffle", "split", "prediction")

COMMON_PARAMETERS = """
    q : float, default=1.0
        Power of the q-exponential distributions; ``q = 2`` is a deep GP.  The
        supported range is [0.5, 2] (a warning is given outside it: for ``q > 2`` the
        Jensen step gives an upper bound, below 0.5 the hidden draws are very heavy
        tailed).
    hidden_dims : tuple of int, default=(3,)
        Widths of the hidden layers; ``()`` gives the one-layer (shallow) sparse
        variational Q-EP.
    n_inducing : int, default=64
        Inducing points per unit; ``min(n_inducing, n_samples)`` are used.  For
        ``q < 2`` and ``bound="authors"`` the effective prior amplitude depends on this
        number (``M^(2/q - 1)``), so results move when it changes.
    kernel : {"matern12", "matern32", "matern52", "rbf"} or Kernel, default="matern32"
        Stationary kernel of every unit, times a learned output scale.  A
        scikit-learn ``Matern``/``RBF`` (optionally times ``ConstantKernel``) gives the
        kernel and its hyperparameters as the initial values.
    ard : bool, default=True
        One length scale per input dimension (else one per unit).
    bound : {"authors", "scaled"}, default="authors"
        ``"authors"``: the authors' KL formula and hidden draws of variance ``c_q v``;
        ``"scaled"``: the self-consistent bound on the scaled q-ED* (unit-variance
        draws, a genuine KL upper bound; looser, and prone to under-fitting).
    n_mc_samples : int, default=10
        Monte-Carlo paths through the hidden layers per training step.
    n_mc_samples_predict : int, default=32
        Paths used by ``predict``/``predict_proba`` (shared by all rows).
    max_iter : int, default=300
        Maximum number of epochs.
    batch_size : int or None, default=None
        Rows per mini-batch; None means all rows up to 1024, else 1024.
    lr : float, default=0.05
        Learning rate of the optimiser.
    optimizer : {"adam", "sgd"}, default="adam"
    early_stopping : bool, default=False
        Hold out ``validation_fraction`` of the rows and stop when the validation loss
        has not improved by ``tol`` for ``n_iter_no_change`` epochs, then restore the
        best state.  Otherwise the training loss is monitored the same way (unless
        ``tol=None``, which runs exactly ``max_iter`` epochs).
    validation_fraction : float, default=0.1
    n_iter_no_change : int, default=20
    tol : float or None, default=1e-4
        Absolute improvement of the per-row loss that counts as progress.
    n_restarts : int, default=0
        Extra training runs from fresh seeds (initialisation, training noise, shuffling,
        split); the run with the highest final ELBO (``elbo_``, a seeded Monte-Carlo
        estimate) is kept, as ``n_restarts_optimizer`` keeps the best optimum in
        scikit-learn's ``GaussianProcessRegressor``.  ``elbo_restarts_`` lists the ELBO of
        every run; the first run is the fit without restarts.
    jitter : float or None, default=None
        Diagonal jitter of the inducing kernel matrices, relative to the output scale;
        None means 1e-6 (float64) or 1e-4 (float32).  It is raised tenfold (at most
        three times, with a warning) when a factorisation fails.
    device : {"auto", "cpu", "cuda", "cuda:N"}, default="auto"
    dtype : {"float64", "float32"}, default="float64"
    random_state : int, RandomState instance or None, default=None
        Seeds initialisation, training noise, shuffling, the validation split and the
        prediction draws.
    verbose : int, default=0
        1: a progress bar over epochs; 2: also skorch's epoch table.
"""


class DeepQEPBase(TorchEstimatorMixin, BaseEstimator):
    """Shared machinery of :class:`DeepQEPRegressor` and :class:`DeepQEPClassifier`."""

    _parameter_constraints = {
        "q": [Interval(numbers.Real, 0, None, closed="neither")],
        "hidden_dims": [tuple, list],
        "n_inducing": [Interval(numbers.Integral, 1, None, closed="left")],
        "kernel": [StrOptions(set(STATIONARY_PROFILES)), Kernel],
        "ard": ["boolean"],
        "bound": [StrOptions({"authors", "scaled"})],
        "n_mc_samples": [Interval(numbers.Integral, 1, None, closed="left")],
        "n_mc_samples_predict": [Interval(numbers.Integral, 1, None, closed="left")],
        "max_iter": [Interval(numbers.Integral, 1, None, closed="left")],
        "batch_size": [Interval(numbers.Integral, 1, None, closed="left"), None],
        "lr": [Interval(numbers.Real, 0, None, closed="neither")],
        "optimizer": [StrOptions({"adam", "sgd"})],
        "early_stopping": ["boolean"],
        "validation_fraction": [Interval(numbers.Real, 0, 1, closed="neither")],
        "n_iter_no_change": [Interval(numbers.Integral, 1, None, closed="left")],
        "tol": [Interval(numbers.Real, 0, None, closed="left"), None],
        "n_restarts": [Interval(numbers.Integral, 0, None, closed="left")],
        "jitter": [Interval(numbers.Real, 0, None, closed="neither"), None],
        "device": [str],
        "dtype": [StrOptions({"float64", "float32"})],
        "random_state": ["random_state"],
        "verbose": ["verbose"],
    }

    # ------------------------------------------------------------------ fit

    def _check_hidden_dims(self):
        dims = tuple(self.hidden_dims)
        if not all(isinstance(d, numbers.Integral) and not isinstance(d, bool) and d >= 1
                   for d in dims):
            raise ValueError(
                f"hidden_dims={self.hidden_dims!r} must be a tuple of positive integers "
                "(() for the one-layer model)."
            )
        return tuple(int(d) for d in dims)

    def _kernel_init(self):
        if isinstance(self.kernel, str):
            return self.kernel, 1.0, 1.0
        return stationary_from_sklearn(self.kernel)

    def _length_scale(self, value, n_units, n_in, layer_index):
        value = np.asarray(value, dtype=np.float64)
        if value.ndim == 1:
            if layer_index == 0 and value.shape[0] != n_in:
                raise ValueError(
                    f"The kernel has {value.shape[0]} length scales but X has {n_in} features."
                )
            # deeper layers see hidden units: start from the typical input length scale
            value = value if layer_index == 0 else np.exp(np.log(value).mean())
        width = n_in if self.ard else 1
        return torch.as_tensor(np.broadcast_to(value, (width,)).copy()).expand(n_units, 1, width)

    def _build_module(self, X, n_outputs, dtype, generator):
        """The untrained module: inducing inputs of the first layer on a random subset
        of the (standardised) rows, deeper ones N(0, 1); hidden linear means on the
        principal directions of their inputs."""
        widths = (X.shape[1],) + self._check_hidden_dims() + (n_outputs,)
        n_inducing = min(self.n_inducing, X.shape[0])
        name, output_scale, length_scale = self._kernel_init()
        subset = torch.randperm(X.shape[0], generator=generator)[:n_inducing]
        H, layers = X, []
        for index, (n_in, n_units) in enumerate(zip(widths[:-1], widths[1:])):
            if index == 0:
                Z = X[subset].expand(n_units, -1, -1)
            else:
                Z = torch.randn(n_units, n_inducing, n_in, generator=generator, dtype=torch.float64)
            hidden = index < len(widths) - 2
            weight = initial_mean_weight(H, n_units, generator) if hidden else None
            layer = QEPLayer(
                Z.to(dtype), name, self._length_scale(length_scale, n_units, n_in, index),
                output_scale, None if weight is None else weight.to(dtype),
            )
            with torch.no_grad():
                layer.variational_mean.copy_(
                    1e-3 * torch.randn(layer.variational_mean.shape, generator=generator)
                )
            layers.append(layer)
            if hidden:
                H = H @ weight
        jitter = self.jitter if self.jitter is not None else _DEFAULT_JITTER[dtype]
        return DeepQEPModule(
            layers, self.q, self.bound, self.n_mc_samples, jitter, _MIN_VARIANCE[dtype]
        )

    def _validate_fit_data(self, X, y, **kwargs):
        X, y = validate_data(self, X, y, dtype=np.float64, ensure_min_samples=2, **kwargs)
        check_magnitude(X, "X", self._fit_device_dtype()[1])
        return X, y

    def _fit_network(self, X, targets, n_outputs, criterion, stratify):
        """Standardise ``X``, build the module, train it through skorch and store the
        fitted attributes shared by both estimators.

        ``targets`` is a numpy array (standardised targets or class codes);
        ``criterion(module, dtype)`` builds the likelihood.
        """
        if not (_SUPPORTED_Q[0] <= self.q <= _SUPPORTED_Q[1]):
            warnings.warn(
                f"q={self.q} is outside the supported range [0.5, 2]: for q > 2 the "
                "training objective is not a lower bound, below 0.5 the hidden draws are "
                "extremely heavy tailed.",
                UserWarning,
            )
        device, dtype = self._fit_device_dtype()
        rng = check_random_state(self.random_state)
        X_mean, X_scale = column_standardisation(X)
        Xt = self._as_tensor((X - X_mean) / X_scale, "cpu", dtype)
        target_dtype = torch.long if targets.dtype.kind == "i" else dtype
        yt = torch.tensor(targets, dtype=target_dtype, device=device)
        X_device = Xt.to(device)  # the module is built from the CPU copy, trained on this one
        best, elbo_restarts = None, []
        for _ in range(1 + self.n_restarts):
            # the first run draws the seeds a fit without restarts draws
            seeds = fit_seeds(rng, _SEED_NAMES)
            run = self._train_once(Xt, X_device, yt, n_outputs, criterion, stratify, seeds,
                                   device, dtype)
            elbo_restarts.append(run[3])
            if best is None or run[3] > best[3]:
                best = run + (seeds,)  # only the best run's network stays in memory
        net, module, likelihood, elbo, seeds = best
        # fitted attributes only once training has succeeded
        self.elbo_restarts_ = elbo_restarts
        self.X_mean_, self.X_scale_ = X_mean, X_scale
        self.net_ = net
        self.module_ = module
        self.likelihood_ = likelihood
        self.history_ = net.history
        self.objective_history_ = [float(row["train_loss"]) for row in net.history]
        self.n_iter_ = len(net.history)
        self.elbo_ = elbo
        self.jitter_ = module.jitter
        self.device_ = device
        self.dtype_ = self.dtype
        self._prediction_seed = seeds["prediction"]
        stopper = dict(net.callbacks_).get("early_stopping")
        if self.tol is not None and (stopper is None or stopper.misses_ < stopper.patience):
            warnings.warn(
                f"{type(self).__name__} stopped at max_iter={self.max_iter} epochs before the "
                f"loss stopped improving by tol={self.tol}; increase max_iter.",
                ConvergenceWarning,
            )
        return self

    def _train_once(self, X_cpu, Xt, yt, n_outputs, criterion, stratify, seeds, device, dtype):
        """One training run from ``seeds``: (net, module, likelihood, final ELBO)."""
        module = self._build_module(X_cpu, n_outputs, dtype, cpu_generator(seeds["init"]))
        module = module.to(device)
        likelihood = criterion(module, dtype).to(device)
        net = build_net(
            module, likelihood, n_rows=Xt.shape[0], params=self.get_params(deep=False),
            seeds=seeds, device=device, stratify=stratify,
        )
        with fenced_global_rng(seeds["train"], device):
            net.fit(Xt, yt)
            module.train()
            with torch.no_grad():
                # a Monte-Carlo estimate (n_mc_samples paths, seeded): the restarts compare it
                ell = likelihood(module(Xt), yt)
                elbo = Xt.shape[0] * float(ell) - float(module.kl_divergence())
        module.eval()
        return net, module, likelihood, elbo

    # ------------------------------------------------------------------ prediction

    def _standardised_tensor(self, X):
        device, dtype = self._current_device_dtype()
        return self._as_tensor((X - self.X_mean_) / self.X_scale_, device, dtype)

    def _latent(self, X):
        """Shared-draw last-layer ``(mu, v)`` (S, n, D_L) and the generator, advanced past
        the layer draws (for further shared draws)."""
        generator = prediction_generator(self, None)
        mean, var = latent_moments(
            self.module_, self._standardised_tensor(X), self.n_mc_samples_predict, generator
        )
        return mean, var, generator

    def _latent_variance(self, var):
        """Variance of a last-layer latent marginal of scale ``v`` under the bound in use."""
        return self.module_.latent_variance_factor * var

    def _joint_draws(self, X, n_samples, random_state):
        """Joint latent draws (n_samples, D_L, n) at the rows of ``X``."""
        n_samples = check_n_samples(n_samples, minimum=0)
        if X.shape[0] > _MAX_JOINT_ROWS:
            raise ValueError(
                f"sample_y draws jointly over the rows (O(n^3) per layer and unit); "
                f"got {X.shape[0]} rows, the limit is {_MAX_JOINT_ROWS}. Call it on "
                "subsets of the rows, or use predict(return_std=True) for marginals."
            )
        self._check_draw_memory(X.shape[0], n_samples)
        self._check_joint_memory(X.shape[0], n_samples)
        return joint_latent_draws(
            self.module_, self._standardised_tensor(X), n_samples,
            prediction_generator(self, random_state),
        )

    def _check_draw_memory(self, n_rows, n_samples):
        """Raise InsufficientMemoryError before any torch work when the draws cannot fit:
        per draw, about 3 values per row and unit of every layer (normals, their cast, the
        layer's output) and 4 copies of the output (the draws, their permutation, the numpy
        result and its scaling)."""
        layers = self.module_.layers
        per_draw = n_rows * (4 * layers[-1].n_units + 3 * sum(layer.n_units for layer in layers))
        check_draw_memory(
            n_samples, per_draw, what=f"{type(self).__name__}.sample_y on {n_rows} rows",
            way_out="ask for fewer draws (n_samples) per call, or call it on chunks of X",
            device=self.device_,
        )

    def _check_joint_memory(self, n_rows, n_samples):
        """Raise InsufficientMemoryError before any torch work when the joint draws at
        ``n_rows`` rows cannot fit.

        Layer ``l`` forms ``(S_l, D_l, n, n)`` scale matrices, ``S_l`` the paths entering it
        (1 for the first layer, ``n_samples`` after it) and ``D_l`` its units: about 5
        ``n x n`` arrays per unit and path (the kernel, the two projections, their sum and
        the Cholesky factor), while 3 of the previous layer's are still held.  Measured
        peaks: 4.4 to 4.7 arrays per unit and path, 2.8 held, for 1500 to 2000 rows and
        up to three layers.
        """
        units = []
        for index, layer in enumerate(self.module_.layers):
            units.append((1 if index == 0 else n_samples) * layer.n_units)
        peak = max(5 * u + 3 * (units[i - 1] if i else 0) for i, u in enumerate(units))
        dtype = self.module_.layers[0].inducing_points.dtype
        check_memory(
            peak * array_bytes(n_rows, n_rows, dtype=dtype),
            what=(f"{type(self).__name__}.sample_y with n_samples={n_samples} on {n_rows} rows "
                  f"(joint {n_rows} x {n_rows} scale matrices per unit and path)"),
            way_out=("ask for fewer query rows per call (split X into chunks; the draws are "
                     "then joint within each chunk only), or fewer n_samples per call"),
            device=self.device_,
        )

    def _check_predict_input(self, X):
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=np.float64)
        return check_magnitude(X, "X", self._current_device_dtype()[1])

    @property
    def _noise_variance_factor(self):
        return univariate_variance_factor(self.q)
