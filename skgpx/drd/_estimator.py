"""scikit-learn estimator for smooth dependent relevance determination (sDRD)."""

import math
import numbers
import warnings

import numpy as np
import torch
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.exceptions import ConvergenceWarning
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
    prediction_generator,
    progress_bar,
    resolve_dtype,
    rows_per_chunk,
    standard_normal,
    to_numpy,
)
from ..linalg import inverse_softplus
from ._model import link
from ._predict import FittedPosterior, LatentLaplace, conditional_given_u
from ._solver import Config, Solver, State, circle_axes, latent_laplace_parts

__all__ = ["SmoothDRDRegressor"]

_DENSE_MAX_FEATURES = 2048  # basis="auto": dense SE factors up to this many features
_COVARIANCE_MAX_FEATURES = 1024  # compute_covariance="auto": store sigma_ up to this size
# noise_floor=None, per dtype: below 1e-4 the float32 posterior matrices lose every digit
_DEFAULT_NOISE_FLOOR = {torch.float64: 1e-6, torch.float32: 1e-4}
_RHO_BOUNDS = (1e-6, 1e6)


def _fit_bytes(config, n_rows, u_rank, w_rank, keep_covariance, dtype):
    """Peak bytes of a fit, as numbers of ``dtype`` arrays.

    ``p`` features on a grid of axes ``N_a`` (padded to ``M_a`` for the Fourier basis), ``r``
    the u-basis rank and ``m`` the rank of the smoothness factor (both from the initial
    length scales; ``r = m = p`` for the dense basis):

    * with ``sparsity``, the Laplace curvature ``W`` (p' x p') and its Fisher and log-determinant
      work arrays: ``9 p^2`` dense (``Phi = U[A]`` is p x p), ``4 p^2 + 3 r^2`` Fourier (the
      projected ``B^T W B`` and its truncated eigendecomposition);
    * dense SE factors, built under autograd in the theta-step: ``13 sum_a N_a^2``;
    * ``sigma_`` when stored: ``5 p^2`` (after the fit's peak, so the larger of the two counts);
    * the evidence covariance ``min(n, m)^2`` twice, and ``10 n p`` (dense) or ``5 n prod(M_a)``
      (Fourier: FFTs on the padded grid) for the designs under autograd.

    The counts are peak resident sizes measured on fits of 1-D grids of 1000 features and
    2-D grids of 10 x 10 to 64 x 64, 100 to 20000 rows, both bases (within 30%).
    """
    p = math.prod(config.shape)
    square = 0
    if config.sparsity:
        square = 9 * p * p if config.basis == "dense" else 4 * p * p + 3 * u_rank * u_rank
    if config.basis == "dense" and (config.sparsity or config.smoothness):
        square += 13 * sum(n * n for n in config.shape)
    if keep_covariance:
        square = max(square, 5 * p * p)
    side = min(n_rows, w_rank)
    if config.basis == "dense":
        rows = 10 * n_rows * p
    else:
        rows = 5 * n_rows * math.prod(n + pad for n, pad in zip(config.shape, config.pad))
    return array_bytes(square + 2 * side * side + rows, dtype=dtype)


class SmoothDRDRegressor(RegressorMixin, TorchEstimatorMixin, BaseEstimator):
    """Bayesian linear regression with a smooth dependent relevance determination prior.

    The coefficients ``w`` live on a 1-D or 2-D grid (a signal, an image).  Their prior is
    Gaussian, ``w ~ N(0, D K_f D)``, where ``D = diag(sqrt(g(u)))`` switches regions of the
    grid on and off and ``K_f`` is a squared-exponential correlation that makes ``w`` smooth.
    The log prior variances ``u`` are themselves a Gaussian process on the grid, so relevant
    features come in contiguous groups (dependent relevance determination, Wu et al. [1]_).
    The fit alternates as in Wu et al. [1]_ (NIPS 2014, supplementary App. B):

    1. a u-step: the posterior mode of ``u`` (L-BFGS on whitened coordinates, gradient by
       autograd of the exact conditional evidence);
    2. a Laplace approximation of ``p(u | y)`` with the Fisher (or exact) curvature;
    3. a theta-step: ``b, rho, l`` (mean, variance and length of ``u``), ``l_f`` and the noise
       variance maximise the Laplace evidence inside a trust box;
    4. the Gaussian posterior of ``w`` given ``u``.

    With the Fourier basis in float64, once the hyperparameters have settled in their basin,
    steps 1 and 3 run as one L-BFGS over the whitened ``u`` and the hyperparameters, with the
    curvature of step 2 taken at the previous mode (see Notes).

    With ``basis="fourier"`` both priors use a real Fourier basis on the (padded) grid, products
    go through FFTs and frequencies with negligible spectral weight are dropped, which scales
    to images ([1]_, supplementary App. A).  ``predict(X, return_std=True)`` includes the
    noise, like :class:`~sklearn.linear_model.ARDRegression`; ``sample_y`` draws the
    noise-free function.

    Parameters
    ----------
    coef_shape : tuple of int, default=None
        Grid shape of the features (C order: ``X3.reshape(n, -1)`` for images ``X3``); its
        product must equal ``n_features``.  None is a 1-D grid in feature order.
    sparsity : bool, default=True
        Learn the latent ``u`` (DRD).  False fixes ``u = b`` everywhere (ASD-like smoothness
        prior, or Bayesian ridge without ``smoothness``).
    smoothness : bool, default=True
        Use the smoothness correlation ``K_f``; False sets ``K_f = I`` (DRD).
    link : {"exp", "softplus"}, default="exp"
        Prior variance ``g(u)``.  With ``"softplus"`` the reported ``u_`` stays in internal
        units (see Notes).
    laplace_hessian : {"fisher", "exact"}, default="fisher"
        Curvature of the data term in ``u`` for the Laplace step.  The exact Hessian (by
        autograd, costly beyond a few hundred positions) falls back to Fisher with a warning
        when it makes the Laplace matrix indefinite.
    evidence : {"laplace", "joint"}, default="laplace"
        The theta objective: the Laplace evidence, or the joint density of Wu et al. [1]_
        (NIPS 2014, supplementary App. B), without the log-determinant of the u-posterior.
    max_iter : int, default=100
        Outer iterations (u-step, Laplace, theta-step).  ``max_iter=8, tol=None`` is a
        small-data setting (a few hundred rows: about a second a fit) that already scores
        well on the bundled simulations (see Examples).
    tol : float or None, default=1e-4
        Stop when the coefficient mean changes by at most ``tol`` relative to its norm.  None
        runs ``max_iter`` iterations.
    u_max_iter : int, default=200
        L-BFGS iterations of each u-step and of each joint step.
    theta_max_iter : int, default=50
        L-BFGS iterations of each theta-step.
    theta_step : float, default=0.5
        Trust box of the theta-step: each logarithm (and ``b`` when ``sparsity=False``) moves
        at most this much per outer iteration.  A parameter that ended at the edge of its box
        gets twice the radius in the next iteration (up to ``8 * theta_step``); one that
        ended inside it goes back to ``theta_step``.
    length_scale_init : float, default=None
        Initial length of ``u`` in grid units; None takes a tenth of the largest grid extent.
        Clipped to ``[1, max(extent, 1)]``.
    smoothness_length_scale_init : float, default=5.0
        Initial ``l_f``, clipped to ``[0.5, max(extent, 0.5)]``.
    basis : {"auto", "dense", "fourier"}, default="auto"
        ``"dense"``: exact SE matrices and Cholesky factors (jitter 1e-6) per grid axis;
        ``"fourier"``: FFT-based products on the padded grid with trimmed frequencies;
        ``"auto"``: dense for up to 2048 features.
    fourier_pad : "auto" or int, default="auto"
        Zero padding of each axis for the Fourier basis; "auto" is three times the largest
        length bound, capped at the axis length.
    cond_threshold : float, default=1e8
        Frequencies whose spectral weight is below ``1 / cond_threshold`` of the largest (per
        axis: ``cond_threshold ** (1 / d)``) are dropped.
    trim_threshold : float, default=1e-6
        Positions with ``g(u) < trim_threshold * max g(u)`` are left out of the Laplace step
        and get an exact 0 in ``coef_``.
    noise_floor : float or None, default=None
        Smallest noise variance, relative to ``max(var(y), 1)`` in internal units; None means
        1e-6 (float64) or 1e-4 (float32: below it the posterior matrices are too ill
        conditioned for single precision, and the fit drifts away from the float64 one).
    compute_covariance : "auto" or bool, default="auto"
        Store ``sigma_`` (p x p); "auto" does so for up to 1024 features.
    fit_intercept : bool, default=True
        Centre ``X`` and ``y`` and fit an intercept.
    device : str, default="auto"
        "auto" (CUDA when available), "cpu", "cuda" or "cuda:N".
    dtype : {"float64", "float32"}, default="float64"
        Precision of the torch computations.
    verbose : int, default=0
        0 is silent, 1 shows a progress bar over outer iterations, 2 adds a line per iteration.

    Attributes
    ----------
    coef_ : ndarray of shape (n_features,)
        Posterior mean of the coefficients (exact zeros off ``support_``).
    intercept_ : float
        Intercept (0.0 when ``fit_intercept=False``).
    sigma_ : ndarray of shape (n_features, n_features) or None
        Posterior covariance of the coefficients, when stored.
    coef_std_ : ndarray of shape (n_features,)
        Posterior standard deviation of each coefficient.
    alpha_ : float
        Noise precision ``1 / noise_variance_`` (scikit-learn's convention).
    noise_variance_ : float
        Noise variance.
    X_mean_ : ndarray of shape (n_features,)
        Column means of ``X`` (zeros with ``fit_intercept=False``).
    X_scale_ : float
        One root-mean-square scale of the centred ``X``: a single scale keeps the grid
        prior on the coefficients isotropic.
    y_mean_, y_scale_ : float
        Mean (0 with ``fit_intercept=False``) and root-mean-square scale of ``y``.
    u_ : ndarray of shape (n_features,)
        Mode of the latent ``u`` (log prior variance for ``link="exp"``).
    u_std_ : ndarray of shape (n_features,)
        Laplace posterior standard deviation of ``u`` (zeros without ``sparsity``).
    prior_variance_ : ndarray of shape (n_features,)
        The prior variance ``g(u)`` of each coefficient, in the units of ``coef_ ** 2``
        (``exp(u_)`` for ``link="exp"``; for ``"softplus"`` ``u_`` is in internal units).
    support_ : ndarray of shape (n_features,), dtype bool
        Positions with ``g(u_) >= trim_threshold * max g(u_)``.
    u_mean_ : float
        ``b``, the prior mean of ``u``.
    u_variance_ : float
        ``rho``, the prior variance of ``u``.
    length_scale_ : float
        ``l``, the length of ``u`` in grid units.
    smoothness_length_scale_ : float
        ``l_f``, the smoothness length in grid units.
    log_marginal_likelihood_ : float
        The final (Laplace) log evidence, in the units of ``y``.
    scores_ : list of float
        The evidence after each outer iteration (internal units).  With the Fourier basis
        the first one is the joint density, without the Laplace log-determinant.  It need
        not rise monotonically: each iteration freezes the curvature at a new mode.
    objective_history_ : list of float
        Same as ``scores_``.
    n_iter_ : int
        Outer iterations run.
    coef_shape_ : tuple of int
        The grid shape used.
    basis_ : str
        "dense" or "fourier".
    n_features_in_ : int
        Number of features seen during fit.
    feature_names_in_ : ndarray of shape (`n_features_in_`,)
        Names of features seen during fit, when ``X`` has string column names.
    device_ : str
        Device of the fitted tensors.

    See Also
    --------
    sklearn.linear_model.ARDRegression : independent relevance per feature.
    sklearn.linear_model.BayesianRidge : one prior variance (``sparsity=False,
        smoothness=False``).

    Notes
    -----
    ``X`` is centred and divided by one global scalar, ``y`` is centred and standardised;
    columns are never standardised separately, as that would change the prior on ``w``.
    Results are reported in the original units, ``u_`` shifted by ``2 log(s_y / s_x)`` for
    ``link="exp"``; for ``"softplus"`` it stays in internal units.  ``u_`` and ``b`` are in
    internal units inside ``scores_``.

    Deviations from Wu et al. [1]_ (NIPS 2014, supplementary Eqs. 4 and 8): ``rho``
    multiplies the u-kernel (Eq. 4 adds it), the primal evidence has the missing
    ``-(n - m)/2 log s2`` (Eq. 8), and the theta objective keeps the log-determinant of the
    Laplace posterior of ``u`` (as the authors' code does); the design notes in the
    documentation give the reasons.  The
    Fourier basis keeps the frequencies that the coming theta-step can need (down to
    ``l_f exp(-theta_step)``), chosen again at each outer iteration.  Cost per u-step
    evaluation ``O(n^2 min(n, m) + n p log p)``; the Laplace step ``O(n p'^2)`` with ``p'``
    the untrimmed positions.  Memory is ``O(p^2)`` with ``sparsity`` (the Laplace curvature of
    ``u``, either basis) and with the dense basis on a 1-D grid; ``fit`` checks its estimate
    against the memory available (``SKGPX_MEMORY_LIMIT`` caps it) before any torch work and
    raises :class:`~skgpx.InsufficientMemoryError` when it cannot fit.

    Joint steps (Fourier basis, float64; a deviation from the paper's alternation, which they
    accelerate): once a theta-step other than the first ends with every hyperparameter
    inside its trust box, the u-step and the theta-step become one L-BFGS over ``(v,
    theta)`` (``u = b + sqrt(rho) F_l v``), the Laplace curvature frozen at the previous
    mode.  Its fixed points are those of the alternation, but it moves ``u`` together with
    ``b`` and ``rho`` along the ridge where the alternation crawls (the evidence keeps
    changing slowly as irrelevant regions are switched off): about 10 outer iterations
    instead of 30 to 60.  With the Fourier basis the first theta-step maximises the joint
    density (no Laplace term), and the log-determinant uses a truncated eigendecomposition
    of the frozen curvature with an error below ``1e-4``.

    References
    ----------
    .. [1] A. Wu, M. Park, O. Koyejo and J. W. Pillow, "Sparse Bayesian structure learning
       with dependent relevance determination priors", Advances in Neural Information
       Processing Systems 27 (NIPS 2014), pp. 1628-1636; supplementary material App. A-B.
       Journal version: A. Wu, O. Koyejo and J. W. Pillow, "Dependent relevance
       determination for smooth and structured sparse regression", JMLR 20 (2019) 1-43.

    Examples
    --------
    >>> from skgpx import SmoothDRDRegressor
    >>> from skgpx.datasets import make_smooth_sparse_regression
    >>> d = make_smooth_sparse_regression("bumps", shape=20, n_samples=30, random_state=0)
    >>> model = SmoothDRDRegressor(coef_shape=d.coef_shape, max_iter=8, tol=None)
    >>> model.fit(d.X, d.y).score(d.X_test, d.y_test) > 0.8
    True
    >>> mean, std = model.predict(d.X_test[:2], return_std=True)
    >>> mean.shape, std.shape
    ((2,), (2,))
    """

    _parameter_constraints = {
        "coef_shape": [None, tuple, list],
        "sparsity": ["boolean"],
        "smoothness": ["boolean"],
        "link": [StrOptions({"exp", "softplus"})],
        "laplace_hessian": [StrOptions({"fisher", "exact"})],
        "evidence": [StrOptions({"laplace", "joint"})],
        "max_iter": [Interval(numbers.Integral, 1, None, closed="left")],
        "tol": [Interval(numbers.Real, 0, None, closed="left"), None],
        "u_max_iter": [Interval(numbers.Integral, 1, None, closed="left")],
        "theta_max_iter": [Interval(numbers.Integral, 1, None, closed="left")],
        "theta_step": [Interval(numbers.Real, 0, None, closed="neither")],
        "length_scale_init": [Interval(numbers.Real, 0, None, closed="neither"), None],
        "smoothness_length_scale_init": [Interval(numbers.Real, 0, None, closed="neither")],
        "basis": [StrOptions({"auto", "dense", "fourier"})],
        "fourier_pad": [StrOptions({"auto"}), Interval(numbers.Integral, 0, None, closed="left")],
        "cond_threshold": [Interval(numbers.Real, 1, None, closed="neither")],
        "trim_threshold": [Interval(numbers.Real, 0, 1, closed="left")],
        "noise_floor": [Interval(numbers.Real, 0, None, closed="neither"), None],
        "compute_covariance": [StrOptions({"auto"}), "boolean"],
        "fit_intercept": ["boolean"],
        "device": [str],
        "dtype": [StrOptions({"float64", "float32"})],
        "verbose": ["verbose"],
    }

    def __init__(self, *, coef_shape=None, sparsity=True, smoothness=True, link="exp",
                 laplace_hessian="fisher", evidence="laplace", max_iter=100, tol=1e-4,
                 u_max_iter=200, theta_max_iter=50, theta_step=0.5, length_scale_init=None,
                 smoothness_length_scale_init=5.0, basis="auto", fourier_pad="auto",
                 cond_threshold=1e8, trim_threshold=1e-6, noise_floor=None,
                 compute_covariance="auto", fit_intercept=True, device="auto",
                 dtype="float64", verbose=0):
        self.coef_shape = coef_shape
        self.sparsity = sparsity
        self.smoothness = smoothness
        self.link = link
        self.laplace_hessian = laplace_hessian
        self.evidence = evidence
        self.max_iter = max_iter
        self.tol = tol
        self.u_max_iter = u_max_iter
        self.theta_max_iter = theta_max_iter
        self.theta_step = theta_step
        self.length_scale_init = length_scale_init
        self.smoothness_length_scale_init = smoothness_length_scale_init
        self.basis = basis
        self.fourier_pad = fourier_pad
        self.cond_threshold = cond_threshold
        self.trim_threshold = trim_threshold
        self.noise_floor = noise_floor
        self.compute_covariance = compute_covariance
        self.fit_intercept = fit_intercept
        self.device = device
        self.dtype = dtype
        self.verbose = verbose

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.single_output = True
        tags.target_tags.multi_output = False
        return tags

    # ------------------------------------------------------------------ fit
    def _grid_shape(self, n_features):
        if self.coef_shape is None:
            return (n_features,)
        shape = tuple(self.coef_shape)
        if not shape or not all(isinstance(s, numbers.Integral) and not isinstance(s, bool)
                                and s >= 1 for s in shape):
            raise ValueError(f"coef_shape={self.coef_shape!r} must be a tuple of positive "
                             "integers.")
        if math.prod(shape) != n_features:
            raise ValueError(f"coef_shape={shape!r} has {math.prod(shape)} positions but X has "
                             f"{n_features} features; their numbers must be equal.")
        return tuple(int(s) for s in shape)

    def _config(self, shape):
        extent = max(n - 1 for n in shape)
        upper = max(extent, 1)
        basis = self.basis
        if basis == "auto":
            basis = "dense" if math.prod(shape) <= _DENSE_MAX_FEATURES else "fourier"
        pad = tuple(min(n, math.ceil(3 * upper)) if self.fourier_pad == "auto"
                    else int(self.fourier_pad) for n in shape)
        bounds = {
            "rho": tuple(math.log(v) for v in _RHO_BOUNDS),
            "l": (0.0, math.log(upper)),
            "lf": (math.log(0.5), math.log(max(extent, 0.5))),
            "noise": (math.log(self._relative_noise_floor()), math.inf),
        }
        return Config(
            shape=shape, sparsity=self.sparsity, smoothness=self.smoothness, link=self.link,
            laplace_hessian=self.laplace_hessian, evidence=self.evidence, basis=basis, pad=pad,
            cond_threshold=float(self.cond_threshold), trim_threshold=float(self.trim_threshold),
            theta_step=float(self.theta_step), u_max_iter=self.u_max_iter,
            theta_max_iter=self.theta_max_iter, bounds=bounds,
        ), extent

    def _initial_lengths(self, extent):
        """Initial ``l`` (of ``u``) and ``l_f``, in grid units, clipped to their bounds."""
        l0 = extent / 10.0 if self.length_scale_init is None else float(self.length_scale_init)
        return (min(max(l0, 1.0), max(extent, 1.0)),
                min(max(float(self.smoothness_length_scale_init), 0.5), max(extent, 0.5)))

    def _check_memory(self, config, extent, n_rows, device, dtype):
        """Raise InsufficientMemoryError before any torch work when the fit cannot fit."""
        length, smoothness_length = self._initial_lengths(extent)

        def rank(length, low):  # the bases the first iteration builds (Solver.u_axes)
            low = math.exp(max(math.log(length) - config.theta_step, low))
            return math.prod(axis.rank for axis in circle_axes(config, low, config.basis))

        p = math.prod(config.shape)
        u_rank = rank(length, config.bounds["l"][0]) if config.sparsity else 0
        w_rank = rank(smoothness_length, config.bounds["lf"][0]) if config.smoothness else p
        keep = self.compute_covariance is True or (
            self.compute_covariance == "auto" and p <= _COVARIANCE_MAX_FEATURES)
        way_out = []
        if config.basis == "dense":
            way_out.append("use basis='fourier' (no dense p x p prior factors)")
        way_out.append("use fewer features (a coarser grid: average neighbouring pixels)")
        if config.sparsity:
            way_out.append("sparsity=False (no p x p Laplace curvature of u)")
        if keep:
            way_out.append("compute_covariance=False")
        way_out.append("fit on a GPU (device='cuda')")
        check_memory(
            _fit_bytes(config, n_rows, u_rank, w_rank, keep, dtype),
            what=(f"SmoothDRDRegressor.fit with basis={config.basis!r} on {n_rows} rows of "
                  f"{p} features (a grid of shape {config.shape})"),
            way_out="; or ".join(way_out), device=device,
        )

    def _relative_noise_floor(self):
        if self.noise_floor is not None:
            return float(self.noise_floor)
        return _DEFAULT_NOISE_FLOOR[resolve_dtype(self.dtype)]

    def _initial_state(self, config, extent, X, y):
        n, p = X.shape
        # ridge (lambda = 1) in the cheaper of its two forms
        if n <= p:
            w = X.T @ torch.linalg.solve(X @ X.T + torch.eye(n, dtype=X.dtype, device=X.device),
                                         y)
        else:
            w = torch.linalg.solve(X.T @ X + torch.eye(p, dtype=X.dtype, device=X.device),
                                   X.T @ y)
        variance = max(float((w**2).mean()), 1e-12)
        b = math.log(variance) if self.link == "exp" else float(inverse_softplus(variance))
        noise_floor = self._relative_noise_floor() * max(float(y.var(unbiased=False)), 1.0)
        length, smoothness_length = self._initial_lengths(extent)
        log = {
            "rho": 0.0,
            "l": math.log(length),
            "lf": math.log(smoothness_length),
            "noise": math.log(max(0.5 * float(y.var(unbiased=False)), noise_floor)),
        }
        config.bounds["noise"] = (math.log(noise_floor), math.inf)
        return State(b=b, log=log, u=torch.full((p,), b, dtype=X.dtype, device=X.device))

    def fit(self, X, y):
        """Fit the coefficients, their relevance ``u`` and the hyperparameters.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Training inputs, columns in grid order (at least 2 samples).
        y : array-like of shape (n_samples,)
            Targets.

        Returns
        -------
        self : SmoothDRDRegressor
            The fitted estimator.

        Raises
        ------
        ValueError
            If a value of X or y exceeds the largest supported magnitude (1e150 with
            ``dtype='float64'``, 1e15 with ``'float32'``), where squares would overflow.
        ValueError
            For non-finite or mis-shaped input, fewer than 2 samples, or a ``coef_shape``
            that does not match ``n_features``.
        InsufficientMemoryError
            At once, before any torch work, when the fit's ``p x p`` (and ``n x p``) arrays
            cannot fit in the memory available on the device.
        """
        self._validate_params()
        X, y = validate_data(self, X, y, y_numeric=True, ensure_min_samples=2,
                             dtype=[np.float64, np.float32])
        shape = self._grid_shape(X.shape[1])
        device, dtype = self._fit_device_dtype()
        check_magnitude(X, "X", dtype)
        check_magnitude(y, "y", dtype)
        config, extent = self._config(shape)
        self._check_memory(config, extent, X.shape[0], device, dtype)

        X = np.asarray(X, dtype=np.float64)
        y = np.asarray(y, dtype=np.float64)
        x_mean = X.mean(0) if self.fit_intercept else np.zeros(X.shape[1])
        y_mean = float(y.mean()) if self.fit_intercept else 0.0
        Xc, yc = X - x_mean, y - y_mean
        x_scale = float(np.sqrt(np.mean(Xc**2))) or 1.0
        y_scale = float(np.sqrt(np.mean(yc**2))) or 1.0
        if y_scale < 1e-12 * max(abs(y_mean), 1.0):
            y_scale = 1.0
        Xt = self._as_tensor(Xc / x_scale, device, dtype)
        yt = self._as_tensor(yc / y_scale, device, dtype)

        state = self._initial_state(config, extent, Xt, yt)
        solver = Solver(config, Xt, yt, state)
        scores, previous, converged = [], None, False
        with progress_bar(self.verbose, "SmoothDRDRegressor", self.max_iter) as bar:
            for iteration in range(1, self.max_iter + 1):
                E = solver.iterate()
                if not np.isfinite(E):
                    raise RuntimeError(
                        f"The evidence became non-finite at iteration {iteration}; increase "
                        "noise_floor or use dtype='float64'.")
                coef, cond, G, scale = solver.posterior()
                scores.append(E)
                bar.update()
                bar.set_postfix(evidence=f"{E:.6g}")
                if self.verbose >= 2:
                    bar.write(f"iteration {iteration}: evidence {E:.10g}")
                if previous is not None and self.tol is not None:
                    change = float(torch.linalg.vector_norm(coef - previous))
                    if change <= self.tol * float(torch.linalg.vector_norm(previous)):
                        converged = True
                        break
                previous = coef
        if self.tol is not None and not converged:
            warnings.warn(
                f"SmoothDRDRegressor did not converge to tol={self.tol!r} within "
                f"max_iter={self.max_iter} iterations; increase max_iter.",
                ConvergenceWarning, stacklevel=2)
        self._store(solver, config, FittedPosterior(scale, cond, G), coef, scores, iteration,
                    shape, (x_mean, x_scale, y_mean, y_scale), device)
        return self

    def _store(self, solver, config, posterior, coef, scores, n_iter, shape, units, device):
        x_mean, x_scale, y_mean, y_scale = units
        s = solver.state
        ratio = y_scale / x_scale
        self.device_, self.dtype_ = device, self.dtype
        self.basis_ = config.basis
        self.coef_shape_ = shape
        self.X_mean_, self.X_scale_, self.y_mean_, self.y_scale_ = units
        self._posterior = posterior
        self.coef_ = to_numpy(coef) * ratio
        self.intercept_ = float(y_mean - x_mean @ self.coef_) if self.fit_intercept else 0.0
        self.coef_std_ = np.sqrt(to_numpy(self._posterior.coef_variance())) * ratio
        small = coef.shape[0] <= _COVARIANCE_MAX_FEATURES
        keep = self.compute_covariance is True or (self.compute_covariance == "auto" and small)
        self.sigma_ = to_numpy(self._posterior.coef_covariance()) * ratio**2 if keep else None
        self.noise_variance_ = solver.value("noise") * y_scale**2
        self.alpha_ = 1.0 / self.noise_variance_
        shift = 2 * math.log(ratio) if config.link == "exp" else 0.0
        self.u_ = to_numpy(s.u) + shift
        self.u_mean_ = s.b + shift
        self.prior_variance_ = to_numpy(link(s.u, config.link)) * ratio**2
        self.support_ = to_numpy(solver.support()).astype(bool)
        self.u_variance_ = solver.value("rho")
        self.length_scale_ = solver.value("l")
        self.smoothness_length_scale_ = solver.value("lf")
        self._latent = None
        if config.sparsity:
            v, L_H, U = latent_laplace_parts(solver)
            self._latent = LatentLaplace(v, L_H, s.b, self.u_variance_, U, solver.support())
            self.u_std_ = to_numpy(self._latent.std())
        else:
            self.u_std_ = np.zeros(coef.shape[0])
        n = posterior.cond.y.shape[0]
        self.log_marginal_likelihood_ = float(scores[-1]) - n * math.log(y_scale)
        self.scores_ = [float(v) for v in scores]
        self.objective_history_ = list(self.scores_)
        self.n_iter_ = n_iter
        self._X_train = solver.X  # internal units, for u_uncertainty draws

    # -------------------------------------------------------------- predict
    def _internal(self, X):
        X = validate_data(self, X, reset=False, dtype=[np.float64, np.float32])
        check_magnitude(X, "X", self.dtype_)
        X_std = (np.asarray(X, dtype=np.float64) - self.X_mean_) / self.X_scale_
        return X, self._as_tensor(X_std, *self._current_device_dtype())

    def predict(self, X, return_std=False):
        """Predictive mean, and standard deviation including the noise.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Query inputs.
        return_std : bool, default=False
            Also return ``sqrt(z Sigma_a z^T + noise_variance_)``, ``z = x D G``.

        Returns
        -------
        y_mean : ndarray of shape (n_samples,)
        y_std : ndarray of shape (n_samples,)
            Only with ``return_std=True``.

        Raises
        ------
        ValueError
            If a value of X exceeds the largest supported magnitude (1e150 with
            ``dtype='float64'``, 1e15 with ``'float32'``), where squares would overflow.
        """
        check_is_fitted(self)
        X, Xt = self._internal(X)
        mean = np.asarray(X, dtype=np.float64) @ self.coef_ + self.intercept_
        if not return_std:
            return mean
        post = self._posterior
        step = rows_per_chunk(4096, max(post.cond.Z.shape), Xt.device)
        var = torch.cat([post.cond.variance(post.design(Xt[i:i + step]))
                         for i in range(0, Xt.shape[0], step)]) if Xt.shape[0] else Xt[:, 0]
        y_scale = self.y_scale_
        std = np.sqrt(np.clip(to_numpy(var), 0.0, None) * y_scale**2 + self.noise_variance_)
        return mean, std

    def sample_y(self, X, n_samples=1, random_state=0, u_uncertainty=False):
        """Draws of the noise-free function ``f(x) = x^T w + intercept`` at ``X``.

        The plug-in draws use ``w ~ N(coef_, sigma_)`` given the fitted ``u_``, by pathwise
        conditioning (Matheron's rule) in the dual form and by a Cholesky draw in the primal
        form.  With ``u_uncertainty=True`` each draw first takes ``u`` from its Laplace
        posterior, then ``w | u, y`` exactly (one factorisation per draw).

        Parameters
        ----------
        X : array-like of shape (n_samples_X, n_features)
            Query inputs.
        n_samples : int, default=1
            Number of draws.
        random_state : int, RandomState instance or None, default=0
            Seed of the draws.  The fit is deterministic, so there is no fitted prediction
            seed: None means 0 (never fresh entropy).
        u_uncertainty : bool, default=False
            Also integrate over the uncertainty of ``u``.

        Returns
        -------
        y_samples : ndarray of shape (n_samples_X, n_samples)

        Raises
        ------
        ValueError
            If a value of X exceeds the largest supported magnitude (1e150 with
            ``dtype='float64'``, 1e15 with ``'float32'``), where squares would overflow.
        InsufficientMemoryError
            Before drawing, when the ``n_samples`` draws and their buffers cannot fit in
            the memory available (ask for fewer draws, or call it on chunks of X).
        """
        check_is_fitted(self)
        n_samples = check_n_samples(n_samples, minimum=0)
        X, Xt = self._internal(X)
        post = self._posterior
        generator = prediction_generator(self, random_state)
        n, m = post.cond.Z.shape
        dtype, device = Xt.dtype, Xt.device
        # per draw: the float64 normals and their casts over the n + m (n + m + |u| with
        # u_uncertainty) rows of the draw, 3 coefficient vectors of n_features_in_ and 3
        # copies of the output (the product, the numpy result, its scaling)
        latent = len(self._latent.v) if u_uncertainty and self._latent is not None else 0
        check_draw_memory(
            n_samples, 2 * (n + m + latent) + 3 * self.n_features_in_ + 3 * X.shape[0],
            what=f"SmoothDRDRegressor.sample_y on {X.shape[0]} rows",
            way_out="ask for fewer draws (n_samples) per call, or call it on chunks of X",
            device=device,
        )
        if not u_uncertainty or self._latent is None:
            a0 = standard_normal((m, n_samples), generator, dtype, device)
            eps = standard_normal((n, n_samples), generator, dtype, device)
            W = post.coef_draws(a0, eps)
        else:
            W = self._draws_with_u(n_samples, generator, dtype, device)
        return self.y_mean_ + self.y_scale_ * to_numpy(Xt @ W.T)

    def _draws_with_u(self, n_samples, generator, dtype, device):
        latent, post = self._latent, self._posterior
        xi = standard_normal((len(latent.v), n_samples), generator, dtype, device)
        U = latent.draws(xi)
        rows = []
        for s in range(n_samples):
            given = conditional_given_u(self._X_train, post.cond.y, U[s], latent.support,
                                        self.link, post.cond.noise_var, post.G)
            n, m = given.cond.Z.shape
            a0 = standard_normal((m, 1), generator, dtype, device)
            eps = standard_normal((n, 1), generator, dtype, device)
            rows.append(given.coef_draws(a0, eps))
        return torch.cat(rows) if rows else U[:0]
