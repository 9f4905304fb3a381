"""scikit-learn estimator for the deep Wishart (kernel) process point solver."""

import numbers
import warnings

import numpy as np
import torch
from sklearn.base import BaseEstimator, MultiOutputMixin, RegressorMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils.validation import check_is_fitted, validate_data

from .._base import (
    Interval, StrOptions, TorchEstimatorMixin, check_draw_memory, check_magnitude, check_n_samples,
    prediction_generator, column_standardisation, progress_bar, standard_normal, to_numpy,
)
from ..linalg import NotPositiveDefiniteError
from ._grams import GRAM_KERNELS
from ._memory import check_fit_memory, check_joint_memory
from ._model import (
    Breakdown, DKPConfig, DKPState, dkp_objective, forward_prior_means, prune_factors,
)
from ._predict import build_prediction_cache, propagate
from ._solver import sweep
from ._sparse._mode import fit_sparse, inducing_spec
from ._sparse._predict import predict_marginals

__all__ = ["DeepKernelProcessRegressor"]

_MAX_JITTER_RAISES = 3
_ADVICE = (
    "increase jitter, noise_variance, dof or mirror_reg (or standardise the inputs with "
    "normalize_X=True)"
)


class DeepKernelProcessRegressor(MultiOutputMixin, RegressorMixin, TorchEstimatorMixin,
                                 BaseEstimator):
    """Deep kernel (Wishart) process regression fitted by a Newton-like point solver.

    Every hidden layer of a deep Wishart process holds a ``P x P`` Gram matrix over
    the training points; the Gram matrix of layer ``l`` is Wishart-distributed around
    a sum kernel of the layer below.  The estimator maximises the "mean objective" of
    Aitchison's point solver [1]_ by block-coordinate sweeps from the output down to
    the input: each hidden Gram matrix is set to the solution of a stabilised
    continuous algebraic Riccati equation (closed form, with a Kleinman-Newton
    fallback), the weights of every sum kernel take a natural-gradient step, and a
    learned input scale ``Omega`` gives each input direction its own relevance.
    About ten sweeps replace thousands of gradient steps.  Predictions propagate
    expected test Gram matrices through the layers and end in a Gaussian, so
    ``predict`` has ``return_std``/``return_cov`` and ``sample_y`` draws the latent
    function jointly.

    Parameters
    ----------
    n_layers : int, default=2
        Number of learned ``P x P`` hidden Gram layers (``L - 1`` in [1]_); 0 gives a
        shallow GP on the input Gram matrix.
    kernel : {'sqexp', 'arccos0', 'arccos1'}, default='sqexp'
        Kernel applied to Gram matrices: squared exponential with unit length scale
        on the Gram scale, or Cho and Saul's arc-cosine kernels of order 0 and 1.
    skip : bool, default=True
        Add the linear (skip) component ``v G`` to the hidden sum kernels.
    input_scale : bool, default=True
        Learn the input scale ``Omega`` (an ARD-like metric); False fixes ``Omega = I``.
    input_scale_steps : int, default=1
        Joint steps of ``Omega`` with the hidden Gram matrices at the end of a sweep
        (``objective='dkp'`` with ``input_scale``; see ``input_scale_every`` for
        which sweeps): the Grams keep their values
        relative to their prior scales while ``Omega`` takes a Riemannian gradient
        ascent step.  The block update of [1]_ alone leaves ``Omega`` at about ``I``
        (the layer above pins it); 0 gives that block update only (a default fit
        at P = 1000 takes about 1.3 times as long: a joint step differentiates
        through the whole chain of layers).  No step is taken with the arc-cosine
        kernels, whose derivative is not finite on the diagonal.  On
        make_friedman1 (d = 6, 20 splits) the joint steps shrink the weakly
        relevant inputs and raise the test log-likelihood over ``objective='gp'``
        (``benchmarks/dkp/table1.py``).
    input_scale_every : int, default=3
        Take the joint steps on sweeps ``1, 1 + k, 1 + 2k, ...`` only (``k`` =
        ``input_scale_every``; 1: every sweep).  The first joint step moves ``Omega``
        most; the later ones refine it while the block updates do most of the work.
        On make_friedman1 (20 splits) every third sweep gave a test log-likelihood
        0.005 +- 0.002 above that of every sweep, at a fraction of the cost.
    dof : float or array-like of shape (n_layers + input_scale,), default=100.0
        Degrees of freedom ``nu`` of [``Omega`` (when ``input_scale``), ``G_2``, ...,
        ``G_L``]: large values pin a layer to its prior mean (a GP with a composed
        kernel), small values let it learn a representation and overfit sooner (the
        noise variance collapses).  Unused by ``objective='gp'``.  The default comes
        from the dof sweep of ``benchmarks/dkp/table1.py`` (20 random splits, 10
        sweeps): 100 had the best test log-likelihood on make_friedman1 and was within
        0.002 nats of the best (1000) on diabetes, while 20 lost 0.8 nats per point on
        make_friedman1 and 2-10 lost more on both.
    objective : {'dkp', 'dgp', 'gp'}, default='dkp'
        ``'dkp'``: the Wishart mean objective ([1]_, Eqs. 10-11); ``'dgp'``: the same
        without the ``log|G|`` terms (Eq. 38 of [1]_, unbounded above, so ``max_iter`` is
        part of its definition); ``'gp'``: deterministic layers ``G_l = S_{l-1}``, only
        the kernel weights are learned (the "GP kernel hyper" baseline).
    max_iter : int or None, default=None
        Solver sweeps, or in sparse mode iterations (sweeps plus L-BFGS iterations).
        None: 10 sweeps in exact mode (Table 1 of [1]_ uses 10), 200 in sparse mode.
    tol : float or None, default=None
        None runs exactly ``max_iter`` sweeps.  A float stops when the objective
        changes by at most ``tol * (|L| + 1)`` in a sweep and warns
        ``ConvergenceWarning`` if that never happens; ignored (with a warning) for
        ``'dgp'``, whose objective has no maximum.
    mirror_reg : float, default=5.0
        Weight ``lambda_m`` of the mirror-descent proximity term of each layer update
        ([1]_, App. F); it damps the update without moving the fixed point.
    kleinman_reg : float, default=1.0
        Damping of the Kleinman-Newton fallback (``lambda_K`` of [1]_, App. G).  The
        Lyapunov shift is ``max(kleinman_reg * min(1, rho) * c, alpha - min(s) + 1e-3 c)``
        with ``s`` the eigenvalues of ``G U``, ``c = |alpha| + max|s|`` and ``rho`` the
        relative residual: it is relative to the spectral scale and vanishes near the
        solution, so the iteration ends as exact Newton (quadratic convergence), where
        the fixed shift of [1]_ converges linearly.
    care_solver : {'auto', 'closed_form', 'kleinman'}, default='auto'
        Riccati solver: the closed form (``'auto'`` falls back to Kleinman-Newton when
        it fails), or Kleinman-Newton only.
    max_care_iter : int, default=200
        Inner iterations of Kleinman-Newton.
    care_tol : float, default=1e-10
        Relative residual at which Kleinman-Newton stops.
    noise_variance : float, default=0.1
        Initial (or, with ``learn_noise=False``, fixed) observation noise variance on
        the standardised target scale; learned values stay above 1e-6.
    learn_noise : bool, default=True
        Learn the noise variance by natural gradient.
    learn_weights : bool, default=True
        Learn the sum-kernel weights ``w``, ``v`` and the output weight.
    jitter : float, default=1e-6
        Variance ``eps`` of the fixed Eye component of every hidden sum kernel (part
        of the model, also used in prediction).  Raised tenfold, with a warning, at
        most three times if a matrix loses positive definiteness during fit.
    normalize_X : bool, default=True
        Standardise the input columns (constant columns keep scale 1).
    normalize_y : bool, default=True
        Standardise the target columns; predictions are returned on the original scale.
    warm_start : bool, default=False
        Continue from the previous fit's Gram matrices, weights and ``Omega`` when the
        new data have the same shape (sparse mode: the same number of inducing inputs,
        and the previous inducing inputs are kept).
    n_inducing : int or None, default=None
        Sparse mode: ``m`` inducing inputs (at most the rows; k-means++ on the standardised
        rows), ``m x m`` hidden Grams, rows carried by the prediction equations, Titsias'
        bound at the output: ``O(L m^2 + b m)`` memory, ``O(P m^2 L)`` time per pass over
        the rows (user guide, "Sparse mode").  None: the exact ``P x P`` solver.
    inducing_points : array-like of shape (m, n_features) or None, default=None
        Sparse mode on these inducing inputs (the scale of X); overrides ``n_inducing``.
    solver : {'auto', 'newton', 'lbfgs'}, default='auto'
        Sparse mode: 'newton' runs CARE sweeps (Anderson-accelerated), 'auto' hands over
        to L-BFGS once a sweep gains < 1e-3 per row, 'lbfgs' runs L-BFGS on Cholesky
        factors (``max_iter`` counts sweeps or iterations).  Exact mode: 'lbfgs' raises.
    batch_size : int, default=8192
        Sparse mode: the most rows per chunk of a pass over the rows (memory ``O(b m)``).
    inducing_jitter : float, default=1e-8
        Sparse mode: jitter of the output kernel on the inducing inputs, relative to its
        mean diagonal (not shared with the rows).
    optimize_inducing : bool, default=False
        Sparse mode: also learn the inducing inputs, by L-BFGS: with 'lbfgs' throughout,
        with 'auto' in its L-BFGS stage only; 'newton' keeps them fixed (with a warning).
    random_state : int, RandomState instance or None, default=None
        Sparse mode: seed of the k-means++ choice of the inducing inputs.
    device : str, default='auto'
        ``'auto'`` (CUDA when available), ``'cpu'``, ``'cuda'`` or ``'cuda:N'``.
    dtype : {'float64', 'float32'}, default='float64'
        Precision of the torch computations.  The sum kernels are ill conditioned at
        the default jitter, so float32 (an opt-in speed mode) needs ``jitter >= 1e-3``
        to stay within about 1e-3 of float64.
    verbose : int, default=0
        0: silent; 1: one progress bar over sweeps with the objective; 2: also one
        line per sweep.

    Attributes
    ----------
    gram_matrices_ : list of ndarray of shape (n_samples, n_samples) or (m, m)
        ``[G_1, ..., G_L]`` on the standardised scale (``G_1 = X Omega X^T / d``), on
        the inducing inputs in sparse mode.
    input_scale_ : ndarray of shape (n_features, n_features) or None
        The learned ``Omega``; None without ``input_scale``.
    kernel_weights_ : ndarray of shape (n_layers, 2)
        ``(w, v)`` of the hidden sum kernels, bottom to top (``v = 0`` without skip).
    output_weight_ : float
        Weight of the kernel in the output covariance.
    noise_variance_ : float
        Learned noise variance on the standardised target scale.
    dof_ : ndarray of shape (n_layers + input_scale,)
        Degrees of freedom used.
    jitter_ : float
        The Eye jitter used in fit and prediction.
    objective_history_ : list of float
        Objective before the first sweep and after each sweep (``n_iter_ + 1`` values),
        with constants such that hidden terms are ``-nu KL`` and the output term is
        the Gaussian log-likelihood of the standardised targets.
    objective_ : float
        The final objective.
    n_iter_ : int
        Sweeps (or L-BFGS iterations) run.
    converged_ : bool
        True when ``tol`` was set and met.
    solver_ : str
        The solver that ended the fit: 'newton' (the sweeps) or 'lbfgs'.
    inducing_points_ : ndarray of shape (m, n_features)
        Sparse mode only: the inducing inputs, on the scale of X.
    n_passes_ : int
        Sparse mode only: passes over the rows (the last builds the prediction factors).
    X_mean_, X_scale_ : ndarray of shape (n_features,)
        Column means and scales that standardise the inputs (zeros and ones without
        ``normalize_X``).
    y_mean_, y_scale_ : ndarray of shape (n_targets,)
        Column means and scales that standardise the targets (zeros and ones without
        ``normalize_y``).
    X_train_ : ndarray of shape (n_samples, n_features)
        Training inputs (original scale); exact mode only: a sparse fit keeps no row.
    y_train_ : ndarray of shape (n_samples,) or (n_samples, n_targets)
        Training targets (original scale); exact mode only.
    n_features_in_ : int
        Number of features seen in fit.
    feature_names_in_ : ndarray of shape (`n_features_in_`,)
        Names of features seen in fit, when ``X`` has string column names.
    device_ : str
        Device the fitted tensors live on.

    See Also
    --------
    sklearn.gaussian_process.GaussianProcessRegressor : the shallow GP with
        hyperparameters fitted by L-BFGS.
    skgpx.PathwiseGPSampler : fast posterior function draws of an exact GP.

    Notes
    -----
    One sweep costs about 20-30 ``P^3`` flops per hidden layer (Cholesky factors,
    matrix products and one symmetric eigendecomposition for the Riccati equation)
    and ``O(L P^2)`` memory: about ``(15 + 13 L) P^2`` floats at the peak, which ``fit``
    checks against the memory available (``SKGPX_MEMORY_LIMIT`` caps it) before any torch
    work, raising :class:`~skgpx.InsufficientMemoryError` when it cannot fit; prediction
    costs ``O(P_t P^2 L)``.  The layer update
    solves, for ``r = nu_{l+1} / nu_l`` and ``alpha = 1/2`` (``'dkp'``) or 0 (``'dgp'``),

    .. math::

        0 = 2 \\alpha G - G U G + Q,\\quad
        U = S_{l-1}^{-1} + r(D + \\lambda_m \\tilde G^{-1}),\\quad
        Q = r(\\tilde G T \\tilde G + \\lambda_m \\tilde G)

    ([1]_, Eq. 123).  Deviations from [1]_, each checked numerically: the spurious
    ``nu/2`` inside Eqs. 10-11 is dropped; ``Diag(N K^-1)`` replaces ``Diag(K^-1 N)``
    (Eqs. 25, 31); the natural-gradient weight step uses ``F^-1 g`` in log space with
    an acceptance check (App. K prints ``-F g``), and with ``objective='gp'`` the
    output weights take Newton steps instead; the Riccati equation is solved in
    closed form (``A = alpha I`` commutes), Kleinman-Newton being the fallback;
    ``Omega`` gets mirror terms by analogy with the hidden layers (the design notes in
    the documentation give the reasons).  When a layer's
    Riccati equation has no positive-definite solution (the linearised curvature term
    ``Q`` too indefinite: with ``U`` positive definite the closed form proves it), the
    mirror weight of that update is raised fourfold, up to eight times: a shorter step
    with the same fixed point.  ``sample_y``
    factorises the latent covariance by a symmetric eigendecomposition (negative
    round-off eigenvalues set to zero), as ``numpy``'s multivariate normal does,
    rather than by a jittered Cholesky.

    References
    ----------
    .. [1] L. Aitchison, "A fast point solver for deep nonlinear function
       approximators", arXiv:2108.13097 (v1/v2, 2021).  Equation, section, appendix and
       table numbers cited here are those of this version.
    .. [2] A. X. Yang, M. Robeyns, E. Milsom, B. Anson, N. Schoots and L. Aitchison, "A
       theory of representation learning gives a deep generalisation of kernel methods",
       ICML 2023 (the later version of [1]_: deep kernel machines).

    Examples
    --------
    >>> from skgpx.datasets import make_dkp_toy
    >>> from skgpx.dkp import DeepKernelProcessRegressor
    >>> X, y = make_dkp_toy(n_samples=60, random_state=0)
    >>> model = DeepKernelProcessRegressor(device="cpu").fit(X, y)
    >>> model.score(X, y) > 0.9
    True
    >>> mean, std = model.predict(X[:2], return_std=True)
    >>> mean.shape, std.shape
    ((2,), (2,))
    """

    _parameter_constraints = {
        "n_layers": [Interval(numbers.Integral, 0, None, closed="left")],
        "kernel": [StrOptions(set(GRAM_KERNELS))],
        "skip": ["boolean"],
        "input_scale": ["boolean"],
        "input_scale_steps": [Interval(numbers.Integral, 0, None, closed="left")],
        "input_scale_every": [Interval(numbers.Integral, 1, None, closed="left")],
        "dof": [Interval(numbers.Real, 0, None, closed="neither"), "array-like"],
        "objective": [StrOptions({"dkp", "dgp", "gp"})],
        "max_iter": [Interval(numbers.Integral, 1, None, closed="left"), None],
        "tol": [Interval(numbers.Real, 0, None, closed="left"), None],
        "mirror_reg": [Interval(numbers.Real, 0, None, closed="left")],
        "kleinman_reg": [Interval(numbers.Real, 0, None, closed="left")],
        "care_solver": [StrOptions({"auto", "closed_form", "kleinman"})],
        "max_care_iter": [Interval(numbers.Integral, 1, None, closed="left")],
        "care_tol": [Interval(numbers.Real, 0, None, closed="neither")],
        "noise_variance": [Interval(numbers.Real, 0, None, closed="neither")],
        "learn_noise": ["boolean"],
        "learn_weights": ["boolean"],
        "jitter": [Interval(numbers.Real, 0, None, closed="left")],
        "normalize_X": ["boolean"],
        "normalize_y": ["boolean"],
        "warm_start": ["boolean"],
        "n_inducing": [Interval(numbers.Integral, 1, None, closed="left"), None],
        "inducing_points": ["array-like", None],
        "solver": [StrOptions({"auto", "newton", "lbfgs"})],
        "batch_size": [Interval(numbers.Integral, 1, None, closed="left")],
        "inducing_jitter": [Interval(numbers.Real, 0, None, closed="left")],
        "optimize_inducing": ["boolean"],
        "random_state": ["random_state"],
        "device": [str],
        "dtype": [StrOptions({"float64", "float32"})],
        "verbose": ["verbose"],
    }

    def __init__(
        self,
        *,
        n_layers=2,
        kernel="sqexp",
        skip=True,
        input_scale=True,
        input_scale_steps=1,
        input_scale_every=3,
        dof=100.0,
        objective="dkp",
        max_iter=None,
        tol=None,
        mirror_reg=5.0,
        kleinman_reg=1.0,
        care_solver="auto",
        max_care_iter=200,
        care_tol=1e-10,
        noise_variance=0.1,
        learn_noise=True,
        learn_weights=True,
        jitter=1e-6,
        normalize_X=True,
        normalize_y=True,
        warm_start=False,
        n_inducing=None,
        inducing_points=None,
        solver="auto",
        batch_size=8192,
        inducing_jitter=1e-8,
        optimize_inducing=False,
        random_state=None,
        device="auto",
        dtype="float64",
        verbose=0,
    ):
        self.n_layers = n_layers
        self.kernel = kernel
        self.skip = skip
        self.input_scale = input_scale
        self.input_scale_steps = input_scale_steps
        self.input_scale_every = input_scale_every
        self.dof = dof
        self.objective = objective
        self.max_iter = max_iter
        self.tol = tol
        self.mirror_reg = mirror_reg
        self.kleinman_reg = kleinman_reg
        self.care_solver = care_solver
        self.max_care_iter = max_care_iter
        self.care_tol = care_tol
        self.noise_variance = noise_variance
        self.learn_noise = learn_noise
        self.learn_weights = learn_weights
        self.jitter = jitter
        self.normalize_X = normalize_X
        self.normalize_y = normalize_y
        self.warm_start = warm_start
        self.n_inducing = n_inducing
        self.inducing_points = inducing_points
        self.solver = solver
        self.batch_size = batch_size
        self.inducing_jitter = inducing_jitter
        self.optimize_inducing = optimize_inducing
        self.random_state = random_state
        self.device = device
        self.dtype = dtype
        self.verbose = verbose

    # ------------------------------------------------------------------ fit

    def _resolve_dof(self):
        n_dof = self.n_layers + int(self.input_scale)
        dof = np.asarray(self.dof, dtype=float) if not isinstance(self.dof, str) else None
        if dof is None or dof.ndim > 1:
            raise ValueError(f"dof={self.dof!r} must be a positive number or a 1-D array of them.")
        if dof.ndim == 0:
            dof = np.full(n_dof, float(dof))
        elif dof.shape[0] != n_dof:
            raise ValueError(
                f"dof has {dof.shape[0]} values but n_layers + input_scale = {n_dof} are "
                "needed (one for Omega when input_scale=True, then one per hidden layer)."
            )
        if not np.all(np.isfinite(dof)) or not np.all(dof > 0):
            raise ValueError(f"dof={self.dof!r} must be finite and > 0.")
        return dof

    def _config(self, dof):
        offset = int(self.input_scale)
        return DKPConfig(
            kernel=self.kernel,
            skip=self.skip,
            input_scale=self.input_scale and self.objective != "gp",
            objective=self.objective,
            nu_input=float(dof[0]) if self.input_scale else 1.0,
            nu_hidden=tuple(float(v) for v in dof[offset:]),
            mirror_reg=float(self.mirror_reg),
            kleinman_reg=float(self.kleinman_reg),
            care_solver=self.care_solver,
            max_care_iter=int(self.max_care_iter),
            care_tol=float(self.care_tol),
            learn_noise=self.learn_noise,
            learn_weights=self.learn_weights,
            noise_floor=min(1e-6, float(self.noise_variance)),
            input_scale_steps=int(self.input_scale_steps),
            input_scale_every=int(self.input_scale_every),
        )

    def _initial_state(self, inputs, targets, jitter, device, dtype):
        previous = getattr(self, "_state", None)
        if (
            self.warm_start
            and isinstance(previous, DKPState)
            and tuple(previous.inputs.shape) == tuple(inputs.shape)
            and previous.targets.shape[1] == targets.shape[1]
            and len(previous.hidden_grams) == self.n_layers
            and self._fitted_structure == (self.kernel, self.skip, self.input_scale)
        ):
            return previous.copy(inputs=inputs, targets=targets, jitter=jitter, grams_cache={})
        half = torch.full((2 if self.skip else 1,), 0.5, dtype=dtype, device=device)
        weights = [half.clone() for _ in range(self.n_layers)]
        weights.append(torch.tensor([1.0, float(self.noise_variance)], dtype=dtype, device=device))
        omega = torch.eye(inputs.shape[1], dtype=dtype, device=device)
        return DKPState(inputs=inputs, targets=targets, omega=omega,
                        hidden_grams=[None] * self.n_layers, weights=weights, jitter=jitter)

    def fit(self, X, y):
        """Fit the Gram matrices, kernel weights and input scale by solver sweeps.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Training inputs (at least 2 samples).
        y : array-like of shape (n_samples,) or (n_samples, n_targets)
            Targets; columns share the Gram matrices and kernel.

        Returns
        -------
        self : DeepKernelProcessRegressor
            The fitted estimator.

        Raises
        ------
        ValueError
            If a value of X or y exceeds the largest supported magnitude (1e150 with
            ``dtype='float64'``, 1e15 with ``'float32'``), where squares would overflow.
        ValueError
            For non-finite or mis-shaped input, fewer than 2 samples or bad ``dof``.
        NotPositiveDefiniteError
            If a matrix stays non positive definite after three jitter increases.
        InsufficientMemoryError
            At once, before any torch work, when the ``P x P`` matrices of the fit (sparse
            mode: its ``m x m`` blocks and chunks) cannot fit in the device's memory.
        """
        self._validate_params()
        X, y = validate_data(
            self, X, y, multi_output=True, y_numeric=True, ensure_min_samples=2,
            dtype=[np.float64, np.float32],
        )
        dof = self._resolve_dof()
        spec = inducing_spec(self, X)  # None in the exact mode
        device, dtype = self._fit_device_dtype()
        check_magnitude(X, "X", dtype)
        check_magnitude(y, "y", dtype)
        check_fit_memory(self, *X.shape, 1 if y.ndim == 1 else y.shape[1], spec, device, dtype)
        config = self._config(dof)
        if self.tol is not None and self.objective == "dgp":
            warnings.warn(
                "tol is ignored for objective='dgp': its objective is unbounded above, so "
                "the fit always runs max_iter sweeps.", UserWarning, stacklevel=2,
            )

        X = np.asarray(X, dtype=np.float64)
        y_matrix = np.asarray(y, dtype=np.float64).reshape(X.shape[0], -1)
        x_mean, x_scale = column_standardisation(X) if self.normalize_X else (
            np.zeros(X.shape[1]), np.ones(X.shape[1]))
        y_mean, y_scale = column_standardisation(y_matrix) if self.normalize_y else (
            np.zeros(y_matrix.shape[1]), np.ones(y_matrix.shape[1]))
        standardised = (X - x_mean) / x_scale
        inputs = self._as_tensor(standardised, device, dtype)
        targets = self._as_tensor((y_matrix - y_mean) / y_scale, device, dtype)
        for name in ("inducing_points_", "n_passes_") if spec is None else ("X_train_", "y_train_"):
            self.__dict__.pop(name, None)  # a refit in the other mode
        if spec is not None:
            state, grams, history, converged, jitter = fit_sparse(
                self, config, spec, standardised, inputs, targets, (x_mean, x_scale), device,
                dtype)
        else:
            state, history, converged, jitter = self._solve(config, inputs, targets, device, dtype)
            self._cache = build_prediction_cache(config, state)
            state.grams_cache = {}  # factorisations: not worth pickling
            grams = [state.gram(j) for j in range(1, state.n_nodes + 1)]
            self.solver_ = "newton"
            self.X_train_ = X.copy()
            self.y_train_ = np.array(y, dtype=np.float64, copy=True)
        self.device_, self.dtype_ = device, self.dtype
        self.X_mean_, self.X_scale_ = x_mean, x_scale
        self.y_mean_, self.y_scale_ = y_mean, y_scale
        self._state = state
        self._fitted_structure = (self.kernel, self.skip, self.input_scale)
        self.gram_matrices_ = [to_numpy(gram) for gram in grams]
        self.input_scale_ = to_numpy(state.omega) if config.input_scale else None
        hidden = np.zeros((self.n_layers, 2))
        for layer, weights in enumerate(state.weights[:-1]):
            hidden[layer, : weights.shape[0]] = to_numpy(weights)
        self.kernel_weights_ = hidden
        self.output_weight_ = float(state.weights[-1][0])
        self.noise_variance_ = float(state.weights[-1][1])
        self.dof_ = dof
        self.jitter_ = jitter
        self.objective_history_ = history
        self.objective_ = history[-1]
        self.n_iter_ = len(history) - 1
        self.converged_ = converged
        return self

    def _solve(self, config, inputs, targets, device, dtype):
        """Run the sweeps; on a breakdown raise the jitter and retry that sweep."""
        jitter, raises, max_iter = float(self.jitter), 0, self.max_iter or 10
        with progress_bar(self.verbose, "DeepKernelProcessRegressor sweeps", max_iter) as bar:
            while True:
                try:
                    state = self._initial_state(inputs, targets, jitter, device, dtype)
                    if any(gram is None for gram in state.hidden_grams) or config.objective == "gp":
                        forward_prior_means(config, state)
                    history = [self._objective(config, state, 0)]
                    break
                except Breakdown:
                    jitter, raises = self._raise_jitter(jitter, raises)
            converged, unconverged_care = False, False
            sweep_index = 0
            while sweep_index < max_iter:
                saved = state.copy()
                try:
                    report = sweep(config, state)
                    value = self._objective(config, state, sweep_index + 1)
                except Breakdown:
                    jitter, raises = self._raise_jitter(jitter, raises)
                    state = saved
                    state.jitter = jitter
                    continue
                prune_factors(state)
                unconverged_care |= any(not info["converged"] for info in report)
                history.append(value)
                sweep_index += 1
                bar.update()
                bar.set_postfix(objective=f"{value:.6g}")
                if self.verbose >= 2:
                    bar.write(f"sweep {sweep_index}: objective {value:.10g}")
                if self.tol is not None and config.objective != "dgp":
                    if abs(history[-1] - history[-2]) <= self.tol * (abs(history[-1]) + 1.0):
                        converged = True
                        break
        if unconverged_care:
            warnings.warn(
                "Kleinman-Newton did not reach care_tol within max_care_iter inner steps in "
                "some layer update; the last positive-definite iterate was used. Increase "
                "max_care_iter or kleinman_reg.", ConvergenceWarning, stacklevel=3,
            )
        if self.tol is not None and config.objective != "dgp" and not converged:
            warnings.warn(
                f"The objective did not converge to tol={self.tol!r} within max_iter="
                f"{max_iter} sweeps; increase max_iter.", ConvergenceWarning, stacklevel=3,
            )
        return state, history, converged, jitter

    @staticmethod
    def _objective(config, state, sweep_index):
        value = float(dkp_objective(config, state))  # Breakdown when a factor fails
        if not np.isfinite(value):
            raise RuntimeError(
                f"The objective became non-finite after sweep {sweep_index}; {_ADVICE}."
            )
        return value

    def _raise_jitter(self, jitter, raises):
        if raises >= _MAX_JITTER_RAISES:
            raise NotPositiveDefiniteError(
                f"A Gram or kernel matrix of the deep kernel process is not positive definite "
                f"even with jitter={jitter:.3g}: {_ADVICE}."
            )
        new = max(jitter, 1e-8) * 10.0
        warnings.warn(
            f"A matrix lost positive definiteness during fit; raised the Eye jitter from "
            f"{jitter:.3g} to {new:.3g} (stored in jitter_).", UserWarning, stacklevel=4,
        )
        return new, raises + 1

    # ------------------------------------------------------------- predict

    def _test_tensor(self, X, joint=None):
        """Standardised test inputs on ``device_``; ``joint`` names a method that forms
        ``n x n`` blocks over the rows, whose memory is checked first."""
        X = validate_data(self, X, reset=False, dtype=[np.float64, np.float32])
        device, dtype = self._current_device_dtype()
        check_magnitude(X, "X", dtype)
        if joint is not None:
            check_joint_memory(self, joint, X.shape[0], dtype)
        X = (np.asarray(X, dtype=np.float64) - self.X_mean_) / self.X_scale_
        return self._as_tensor(X, device, dtype)

    def _single_target(self):
        return self.y_mean_.shape[0] == 1  # 1-D y and y of shape (n, 1) alike

    def predict(self, X, return_std=False, return_cov=False):
        """Predictive mean, and optionally standard deviation or covariance.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Query points.
        return_std : bool, default=False
            Also return the predictive standard deviation (observation noise included).
        return_cov : bool, default=False
            Also return the joint predictive covariance (noise on the diagonal).

        Returns
        -------
        y_mean : ndarray of shape (n_samples,) or (n_samples, n_targets)
        y_std : ndarray of shape (n_samples,) or (n_samples, n_targets)
            Only with ``return_std``.
        y_cov : ndarray of shape (n_samples, n_samples) or (n_samples, n_samples, n_targets)
            Only with ``return_cov``.

        Raises
        ------
        ValueError
            If a value of X exceeds the largest supported magnitude (1e150 with
            ``dtype='float64'``, 1e15 with ``'float32'``), where squares would overflow.
        InsufficientMemoryError
            With ``return_cov``, before any torch work, when the ``n x n`` blocks cannot
            fit in the memory available on ``device_``.
        """
        if return_std and return_cov:
            raise RuntimeError("At most one of return_std or return_cov can be requested.")
        check_is_fitted(self)
        test = self._test_tensor(X, joint="predict(return_cov=True)" if return_cov else None)
        if return_cov:
            mean, cov = propagate(self._cache, test, full=True)
            cov = to_numpy(cov)
            y_mean = to_numpy(mean) * self.y_scale_ + self.y_mean_
            y_cov = cov[:, :, None] * self.y_scale_**2
            if self._single_target():
                return y_mean[:, 0], y_cov[:, :, 0]
            return y_mean, y_cov
        means, variances = predict_marginals(self._cache, test, self.device_)
        y_mean = to_numpy(means) * self.y_scale_ + self.y_mean_
        if self._single_target():
            y_mean = y_mean[:, 0]
        if not return_std:
            return y_mean
        std = np.sqrt(np.clip(to_numpy(variances), 0.0, None))[:, None] * self.y_scale_
        return y_mean, std[:, 0] if self._single_target() else std

    def sample_y(self, X, n_samples=1, random_state=0):
        """Joint draws of the latent function (no observation noise) at ``X``.

        Parameters
        ----------
        X : array-like of shape (n_samples_X, n_features)
            Query points.
        n_samples : int, default=1
            Number of draws.
        random_state : int, RandomState instance or None, default=0
            Seed of the draws.  The fit is deterministic, so there is no fitted
            prediction seed: None means 0 (never fresh entropy).

        Returns
        -------
        y_samples : ndarray of shape (n_samples_X, n_samples) or (n_samples_X, n_targets, n_samples)

        Raises
        ------
        ValueError
            If a value of X exceeds the largest supported magnitude (1e150 with
            ``dtype='float64'``, 1e15 with ``'float32'``), where squares would overflow.
        InsufficientMemoryError
            Before any torch work, when the joint ``n x n`` blocks cannot fit in the
            memory available on ``device_``; before drawing, when the ``n_samples`` draws
            and their buffers cannot (ask for fewer draws, or call it on chunks of X).
        """
        check_is_fitted(self)
        n_samples = check_n_samples(n_samples)
        test = self._test_tensor(X, joint="sample_y")
        n_rows = test.shape[0]
        # per draw and target: the float64 normals, their cast, the product with the root
        # and four numpy copies (to_numpy, + mean, * scale, + mean)
        check_draw_memory(
            n_samples, 7 * n_rows * self._cache.output_weights.shape[1],
            what=f"DeepKernelProcessRegressor.sample_y on {n_rows} rows",
            way_out="ask for fewer draws (n_samples) per call, or call it on chunks of X",
            device=self.device_,
        )
        mean, cov = propagate(self._cache, test, full=True)
        noise = float(self._state.weights[-1][1])
        cov = cov - noise * torch.eye(cov.shape[0], dtype=cov.dtype, device=cov.device)
        eigenvalues, V = torch.linalg.eigh(cov)
        del cov
        scales = torch.sqrt(torch.clamp(eigenvalues, min=0.0))
        n_targets = mean.shape[1]
        generator = prediction_generator(self, random_state)
        normals = standard_normal((test.shape[0], n_targets * n_samples), generator,
                                  V.dtype, V.device)
        # the symmetric square root V diag(sqrt(lambda)) V^T, which is unique, unlike V alone
        # (signs, order within equal eigenvalues): float32 and float64 give the same draws up
        # to round-off.  Applied in factored form, two products with the normals rather than
        # an n x n x n product to form it
        draws = to_numpy(V @ (scales[:, None] * (V.T @ normals)))
        draws = draws.reshape(test.shape[0], n_targets, n_samples)
        draws = (to_numpy(mean)[:, :, None] + draws) * self.y_scale_[None, :, None]
        draws = draws + self.y_mean_[None, :, None]
        return draws[:, 0, :] if self._single_target() else draws

    def predict_grams(self, X, full=False):
        """Expected Gram matrices between ``X`` and the training points, per layer.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Query points.
        full : bool, default=False
            Return the joint ``G_tt`` instead of its diagonal.

        Returns
        -------
        grams : list of tuple (G_ti, G_tt)
            For layers ``1..L``: ``G_ti`` of shape (n_samples, n_train) (sparse mode:
            (n_samples, m), against the inducing inputs) and ``G_tt`` of shape
            (n_samples,) or (n_samples, n_samples), on the standardised scale.
        """
        check_is_fitted(self)
        test = self._test_tensor(X, joint="predict_grams(full=True)" if full else None)
        _, _, layers = propagate(self._cache, test, full=full, grams=True)
        return [(to_numpy(cross), to_numpy(block)) for cross, block in layers]
