"""PathwiseGPSampler: exact GP regression with fast pathwise posterior function draws.

This module is the scikit-learn face (validation, parameters, fitted attributes, the
layout of outputs); ``fit`` builds one mode object (:mod:`skgpx.pathwise._interface`;
:mod:`skgpx.pathwise._modes` picks it) and
hands it the training data once, and every method after that asks it.
"""

from dataclasses import replace
from numbers import Integral, Real

import numpy as np
import torch
from sklearn.base import BaseEstimator, MultiOutputMixin, RegressorMixin, clone
from sklearn.gaussian_process.kernels import ConstantKernel, Kernel
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted, validate_data

from .._base import (
    Interval, StrOptions, TorchEstimatorMixin, check_magnitude, check_memory, check_n_samples,
    column_standardisation, draw_seed, prediction_generator, safe_scale, to_numpy,
)
from .._dask import dask_summaries, dask_training_data, is_dask_collection
from ..kernels import ObjectRows, TorchKernel, default_kernel, split_white_noise
from ._draws._posterior import check_draws_memory, check_exact_at_queries_memory, draw_functions
from ._draws._routes import choose_route, draw_by_route
from ._exact._algebra import clip_negative_variance
from ._exact._mode import random_features_error
from ._functions import sklearn_layout
from ._interface import FitContext, Training
from ._modes import PriorMode, plan_regression
from ._sgpr._mode import SGPRMode


class PathwiseGPSampler(MultiOutputMixin, RegressorMixin, TorchEstimatorMixin, BaseEstimator):
    """Gaussian process regression with pathwise (Matheron's rule) posterior sampling.

    Fits an exact GP exactly like :class:`~sklearn.gaussian_process.GaussianProcessRegressor`
    (same kernels, ``alpha``, ``normalize_y``, L-BFGS-B on the log marginal likelihood),
    in torch on CPU or GPU.  Its posterior draws follow Wilson et al. (2020): a random
    Fourier feature prior draw plus a data-driven update in the canonical kernel basis,

    .. math::

        (f \\mid y)(\\cdot) = f(\\cdot) + k(\\cdot, X) (K + \\Sigma_\\varepsilon)^{-1}
                             (y - f(X) - \\varepsilon),

    so that drawing ``S`` functions at ``n*`` points costs ``O(n* (F + n) S)`` instead of the
    ``O(n*^3)`` of location-scale sampling.  :meth:`sample_functions` returns the draws
    as functions that can be evaluated, and differentiated, anywhere.

    Parameters
    ----------
    kernel : kernel instance, default=None
        A ``sklearn.gaussian_process.kernels`` object.  None means, as in scikit-learn,
        ``ConstantKernel() * RBF()`` at ``fit`` (hyperparameters optimised) and
        ``ConstantKernel(1.0, "fixed") * RBF(1.0, "fixed")`` as the prior of an unfitted
        model.  Its top-level ``WhiteKernel`` terms are the observation noise; the rest is
        the signal.  (With a non-Gaussian ``likelihood`` the likelihood carries the
        noise, and a ``WhiteKernel`` is latent noise of ``f`` at each row.)
    likelihood : {"gaussian", "student_t", "heteroscedastic"}, default="gaussian"
        The observation model.  ``"gaussian"``: the exact or sparse GP of the kernel's
        noise, as scikit-learn's.  ``"student_t"``: ``y = f(x) + sigma e`` with ``e``
        Student-t distributed with ``nu > 2`` degrees of freedom, robust to gross
        outliers; ``nu`` and ``sigma`` are learned (one pair for all targets).
        ``"heteroscedastic"``: ``y ~ N(f(x), a + exp(c + g(x)))`` with the log noise
        variance a second GP ``g`` of kernel ``noise_kernel`` around a learned offset
        ``c``, above the floor ``a = 1e-10`` (in the fitted units of ``y``).  Both refuse
        targets whose spread their bounded noise cannot follow, naming the rescaling.
        Both fit the sparse variational bound (Hensman et al., 2015) by natural
        gradient steps on ``q(u)`` with ``optimizer`` on the hyperparameters: on
        ``n_inducing`` inducing points, or with neither ``n_inducing`` nor
        ``inducing_points`` at the training rows themselves (full rank, for small
        ``n``).  ``alpha``, ``solver``, ``presolve_rows`` and the CG options do not
        apply to them.
    noise_kernel : kernel instance, default=None
        ``likelihood="heteroscedastic"``: the kernel of ``g``; None means
        ``ConstantKernel(1.0, (1e-5, 1e2)) * RBF()`` (the prior variance of a log noise
        variance bounded, so that ``E[exp(g)]`` stays finite).
    share_inducing : bool, default=True
        ``likelihood="heteroscedastic"``: ``g`` uses the inducing inputs of ``f`` (True)
        or its own, started at the same rows and learned separately (False).
    natgrad_step : float, default=0.1
        Non-Gaussian likelihoods: the natural-gradient step size on ``q(u)`` of the
        ``"adam"`` route after a short warm-up (the ``"fmin_l_bfgs_b"`` route brings
        ``q(u)`` to its optimum at every evaluation).
    tol : float or None, default=1e-4
        Non-Gaussian likelihoods: the fit stops once the bound rose by at most
        ``tol * |bound|`` per epoch (``"adam"``) or iteration (L-BFGS-B) over the last
        three; None runs ``max_iter``.
    n_quadrature : int, default=20
        ``likelihood="student_t"``: Gauss-Hermite nodes of its expected log-likelihood.
    alpha : float or ndarray of shape (n_samples,), default=1e-10
        Added to the diagonal of the training kernel matrix (noise on training data only).
    n_features : int, default=1024
        Number of random Fourier features ``F`` of a prior draw (even for ``"sincos"``).
    feature_map : {"sincos", "cosine"}, default="sincos"
        ``"sincos"``: ``F/2`` frequencies, cos and sin of each (lower variance).
        ``"cosine"``: ``F`` frequencies with random phases.
    frequency_sampling : {"iid", "qmc"}, default="iid"
        ``"iid"``: frequencies drawn independently from the spectral density (the
        method of the paper).  ``"qmc"``: scrambled Sobol points mapped to the spectral
        density (RBF and Matern terms), a randomised quasi-Monte Carlo feature map [3]_
        that stays unbiased and has a smaller kernel error: 10-100x smaller in one input
        dimension, less as the dimension grows.
    shared_basis : bool, default=True
        True: one set of frequencies for all draws (fast; every draw shares an
        ``O(F^-1/2)`` covariance bias).  False: frequencies per draw, which makes the
        mean and covariance of the draws exact for any ``F``.
    prior : {"rff", "exact", "auto"}, default="rff"
        Prior used by :meth:`sample_y`: random features, an exact joint Cholesky prior
        (``O((n + n*)^3)``), or exact when ``n + n* <= exact_prior_max``.  A kernel
        without a random-feature map (``ExpSineSquared``, ``PairwiseKernel``,
        ``Exponentiation``, structured inputs, ...) makes ``"rff"`` draw exactly at the
        query rows instead, from the posterior mean and covariance there, as
        scikit-learn's ``sample_y`` does (:meth:`sample_y_route` tells the route).
    exact_prior_max : int, default=2000
        Size limit of ``prior="auto"``.
    method : {"pathwise", "weight_space"}, default="pathwise"
        ``"weight_space"`` draws from Bayesian linear regression on the ``F`` features
        (a baseline that suffers variance starvation when ``n >> F``).
    inducing_points : array-like of shape (n_inducing, n_features), default=None
        Inducing inputs ``Z`` of the sparse mode (their starting value when
        ``optimize_inducing``).  Setting this or ``n_inducing`` turns on sparse mode:
        Titsias' collapsed bound (SGPR) replaces the exact likelihood, and the draws
        use the decoupled update on ``k(., Z)`` (Wilson et al., 2020, Sec. 4).
    n_inducing : int, default=None
        Number of inducing inputs ``m``, picked from the training rows by k-means++
        seeding (seeded by ``random_state``; on a random subset of at most
        ``max(4096, 10 m)`` rows), or a random subset of rows when ``m >= n/2``.
        Capped at ``n``.  Costs ``O(n m^2)`` per bound evaluation and
        ``O(m^2 + chunk * m)`` memory: the bound is summed over row chunks.
    optimize_inducing : bool, default=False
        Learn the inducing inputs along with the kernel hyperparameters.
    optimizer : "fmin_l_bfgs_b", "adam", callable or None, default="fmin_l_bfgs_b"
        Maximises the log marginal likelihood (sparse mode: the collapsed bound) over
        the kernel's ``theta`` (log scale, within its bounds) with torch-autograd
        gradients.  ``"adam"`` takes ``max_iter`` torch Adam steps of size
        ``learning_rate`` (on mini-batches of the uncollapsed bound when
        ``minibatch_size`` is set).  A callable has scikit-learn's signature
        ``optimizer(obj_func, initial_theta, bounds) -> (theta_opt, func_min)``
        (``initial_theta`` then also holds the flattened inducing inputs when they
        are learnt).  None keeps the kernel's hyperparameters.  In sparse mode L-BFGS-B
        minimises the negative bound per training row and also stops once no
        log-hyperparameter moves it by more than ``1e-6`` per row and unit step (the
        projected-gradient test): a sum over many rows otherwise keeps the optimizer
        on length scales of irrelevant features creeping towards their bound.  It
        keeps 20 correction pairs (scipy's default: 10).
    n_restarts_optimizer : int, default=0
        Extra optimizer runs from initial ``theta`` drawn uniformly (log scale) within
        the bounds, which must then be finite.
    max_iter : int, default=200
        Maximum L-BFGS-B iterations per optimizer run, or Adam steps.
    learning_rate : float, default=0.01
        Adam's step size (``optimizer="adam"``).
    minibatch_size : int, default=None
        Sparse mode with ``optimizer="adam"`` only: rows per Adam step of the
        uncollapsed SVGP bound (Hensman et al., 2013), for data that one pass per step
        cannot afford.  None uses the collapsed bound on all rows.  The final ``q(u)``
        is always the optimal collapsed one at the learnt hyperparameters.  With a
        non-Gaussian ``likelihood`` and ``optimizer="adam"`` the fit always takes
        mini-batches, of 1024 rows when None.
    presolve_rows : int, "auto" or None, default="auto"
        Sparse mode with L-BFGS-B on in-memory data: first fit the hyperparameters on
        a random subset of this many rows (when fewer than ``n``), and start the fit
        on all rows from there.  ``"auto"`` takes a tenth of the rows when there are at
        least 50 000, and again a tenth of those while they are as many (20 000 rows
        for 200 000; 10 000, then 100 000 rows for a million).  The fit on all rows
        still stops by its own test, so only the time changes: a tenth of the rows
        costs a tenth per evaluation and lands near the optimum (on 200 000 rows of
        friedman1 with ``random_state=0``, 100-111 s against 201 s without it; the
        subset and the inducing points of ``random_state=1`` took 209 s).  None fits on
        all rows from the start.
    normalize_y : bool, default=False
        Standardise each target (mean 0, std 1) before fitting; predictions and draws
        are transformed back.
    predict_noise : {"sklearn", "latent", "observed"}, default="sklearn"
        Noise in ``predict`` std/cov and in :meth:`sample_y`: ``"sklearn"`` adds the
        ``WhiteKernel`` noise but not ``alpha`` (scikit-learn's semantics), ``"latent"``
        adds none, ``"observed"`` adds the ``WhiteKernel`` noise and a scalar ``alpha``.
        A non-Gaussian likelihood's noise is added by all but ``"latent"`` (Student-t:
        ``sigma^2 nu / (nu - 2)``; heteroscedastic: ``E[a + exp(c + g(x))]``; in
        :meth:`sample_y` draws of it).  :meth:`sample_functions` always draws latent
        functions.
    solver : {"auto", "cholesky", "cg"}, default="auto"
        Exact-mode solves with ``K_A = K + diag(noise)``: a Cholesky factor
        (``O(n^3)`` time, ``O(n^2)`` memory), or preconditioned block conjugate
        gradients on kernel products formed in row chunks (``O(n^2)`` time per
        iteration, ``O(chunk * n)`` memory).  ``"auto"`` chooses by
        ``cholesky_max_n``.  CG serves prediction and draws at fixed
        hyperparameters (``optimizer=None``); to fit hyperparameters on more rows,
        use sparse mode (``n_inducing``).  An exact fit estimated to take more than a
        minute warns once with the estimate and the faster ways: a CG fit is timed on
        one block of kernel rows before it starts, then projected from the residuals
        of its first ten iterations (``verbose=1`` shows them); a Cholesky fit on more
        than 4096 rows (1024 when fitting hyperparameters) is timed on 512 rows.
    cholesky_max_n : int or "auto", default="auto"
        Largest ``n`` that ``solver="auto"`` factorises.  ``"auto"``: with fixed
        hyperparameters, any ``n`` whose three ``n x n`` buffers take at most half
        the memory available on the device (GPU memory on CUDA; ``SKGPX_MEMORY_LIMIT``
        caps it), since a factor makes ``predict(return_std=True)`` and draws far
        cheaper than CG solves; with hyperparameters to fit, 8000 (512 MB per
        matrix in float64), as every optimizer step factorises again.
    cg_tol : float, default=1e-4
        Relative residual at which CG stops, per right-hand side.
    cg_max_iter : int, default=1000
        Largest number of CG iterations; a ``ConvergenceWarning`` says when it is hit.
    cg_preconditioner_rank : int, default=100
        ``r > 0`` preconditions CG with a rank-``r`` pivoted Cholesky factor of the
        kernel matrix plus the noise, applied by Woodbury's identity (Gardner et al.,
        2018); setting it up costs ``O(n r^2)``.  0 uses the diagonal of ``K_A``
        (Jacobi), which for a stationary kernel with one noise level is no
        preconditioning at all (about 720 iterations against 13 for rank 200 on 20 000
        rows of a smooth 2-D problem).
    jitter : float, default=1e-8
        First jitter (relative to the mean diagonal) tried when a kernel matrix fails
        to factorise; it grows tenfold up to ``1e-3``.  Always added to the exact prior.
    n_targets : int, default=None
        Number of targets for prior predictions and draws before ``fit``.
    copy_X_train : bool, default=True
        Store a copy of the training data (else a reference).
    batch_size : int, default=8192
        Rows per chunk in prediction and function evaluation (memory is also capped
        at about 256 MB per intermediate).
    device : str, default="auto"
        ``"auto"`` (CUDA if available), ``"cpu"``, ``"cuda"`` or ``"cuda:N"``.
    dtype : {"float64", "float32"}, default="float64"
        Torch precision; float32 is a speed mode for well-conditioned problems.
    random_state : int, RandomState instance or None, default=None
        Seeds the optimizer restarts and the default seed of the draws
        (``random_state=None`` in :meth:`sample_y`).
    verbose : int, default=0
        1 shows a progress bar over optimizer iterations (CG solver: over the CG
        iterations of the fit); 2 adds a line per run (per CG iteration).

    Attributes
    ----------
    X_train_ : ndarray of shape (n_samples, n_features)
    y_train_ : ndarray of shape (n_samples,) or (n_samples, n_targets)
        Training targets (normalised if ``normalize_y``).
    kernel_ : kernel instance
        The fitted kernel (a scikit-learn kernel object).
    signal_kernel_ : kernel instance
        ``kernel_`` without its top-level ``WhiteKernel`` terms.
    noise_variance_ : ndarray of shape (n_samples,)
        Noise variance of each training point: ``alpha`` plus the white noise.
    L_ : ndarray of shape (n_samples, n_samples)
        Lower Cholesky factor of ``k(X_train_, X_train_) + alpha`` (exact mode with
        the Cholesky solver only).
    alpha_ : ndarray of shape (n_samples,) or (n_samples, n_targets)
        ``K_A^{-1} y_train_`` (exact mode).
    log_marginal_likelihood_value_ : float
        Log marginal likelihood of ``kernel_.theta``, summed over targets; in sparse
        mode the collapsed bound (ELBO); NaN with the CG solver, which computes no
        log-determinant.
    inducing_points_ : ndarray of shape (n_inducing, n_features)
        Inducing inputs (sparse mode).
    q_mu_ : ndarray of shape (n_inducing, n_targets)
        Mean of the optimal ``q(u)`` (sparse mode; normalised units with ``normalize_y``).
    q_sqrt_ : ndarray of shape (n_inducing, n_inducing) or (n_targets, n_inducing, \
            n_inducing)
        Lower-triangular square root of the optimal ``q(u)`` covariance, shared by the
        targets (sparse mode); one per target with a non-Gaussian ``likelihood`` (whitened:
        ``u = L_z v``, ``q(v) = N(q_mu_, q_sqrt_ q_sqrt_^T)``).
    cg_n_iter_ : int
        CG iterations of the solve ``K_A^{-1} y`` in ``fit`` (CG solver only).
    df_, noise_scale_ : float
        ``nu`` and ``sigma`` of ``likelihood="student_t"`` (``sigma`` in the units of
        the fitted targets: normalised with ``normalize_y``).
    noise_kernel_ : kernel instance
        The fitted kernel of ``g`` (``likelihood="heteroscedastic"``).
    log_noise_offset_ : float
        The offset ``c`` of the log noise variance (``likelihood="heteroscedastic"``).
    noise_inducing_points_ : ndarray of shape (n_inducing, n_features)
        The inducing inputs of ``g`` when ``share_inducing=False``.
    y_mean_, y_scale_ : ndarray of shape (n_targets,)
        Target normalisation (0 and 1 without ``normalize_y``).
    jitter_ : float
        Jitter added to factorise the training kernel matrix (0.0 when none).
    n_iter_ : int
        Number of log-marginal-likelihood evaluations made by ``fit`` (at least 1); in
        sparse mode, of the bound on all rows (not counting the ``presolve_rows`` fits).
    objective_history_ : list of float
        Negative log marginal likelihood (sparse mode: negative bound) at each of those
        evaluations.
    n_features_in_ : int
    feature_names_in_ : ndarray of shape (`n_features_in_`,)
        Defined only when X has string feature names.
    device_ : str
    dtype_ : str

    See Also
    --------
    sklearn.gaussian_process.GaussianProcessRegressor : The numpy reference whose
        ``predict`` this estimator reproduces.

    Notes
    -----
    Fitting costs ``O(n^3)`` per likelihood evaluation.  A shared-basis draw costs
    ``O(n F d + n^2 S T)`` to build and ``O(n* (F + n)(d + S T))`` to evaluate, in
    row chunks.  ``predict`` is always the exact posterior, whatever ``method``.
    Sparse mode costs ``O(n m^2)`` per bound evaluation (two passes over row chunks
    with its gradient), ``O(m F d + m^2 S T)`` to build draws and
    ``O(n* (F + m)(d + S T))`` to evaluate them.  Exact problems whose ``n x n``
    buffers cannot fit raise :class:`skgpx.InsufficientMemoryError` before any work.

    A kernel whose ``requires_vector_input`` is False (a kernel on strings, sequences or
    graphs, as in scikit-learn) receives the inputs as given, lists of objects included:
    the exact GP (Cholesky), ``predict``, ``log_marginal_likelihood`` and ``sample_y``
    (exact draws at the query rows with the default ``prior="rff"``, or the exact joint
    prior with ``prior="exact"``) work on them; ``sample_functions``,
    ``method="weight_space"``, sparse mode and CG need vectors and raise.

    References
    ----------
    .. [1] J. T. Wilson, V. Borovitskiy, A. Terenin, P. Mostowsky, M. P. Deisenroth,
       "Efficiently sampling functions from Gaussian process posteriors", ICML 2020.
    .. [2] J. T. Wilson et al., "Pathwise conditioning of Gaussian processes", JMLR 22, 2021.
    .. [3] J. Yang, V. Sindhwani, H. Avron, M. Mahoney, "Quasi-Monte Carlo feature maps
       for shift-invariant kernels", ICML 2014.
    .. [4] M. Titsias, "Variational learning of inducing variables in sparse Gaussian
       processes", AISTATS 2009.
    .. [5] J. Hensman, N. Fusi, N. D. Lawrence, "Gaussian processes for big data",
       UAI 2013.

    Examples
    --------
    >>> from sklearn.gaussian_process.kernels import RBF, WhiteKernel
    >>> from skgpx import PathwiseGPSampler
    >>> from skgpx.datasets import make_sine_1d
    >>> X, y = make_sine_1d(n_samples=30, random_state=0)
    >>> gp = PathwiseGPSampler(RBF(0.5) + WhiteKernel(0.1), device="cpu").fit(X, y)
    >>> round(gp.score(X, y), 2) > 0.8
    True
    >>> mean, std = gp.predict(X[:2], return_std=True)
    >>> gp.sample_y(X[:2], n_samples=5).shape
    (2, 5)
    """

    _parameter_constraints = {
        "kernel": [None, Kernel],
        "likelihood": [StrOptions({"gaussian", "student_t", "heteroscedastic"})],
        "noise_kernel": [None, Kernel],
        "share_inducing": ["boolean"],
        "natgrad_step": [Interval(Real, 0, 1, closed="right")],
        "tol": [Interval(Real, 0, None, closed="neither"), None],
        "n_quadrature": [Interval(Integral, 2, None, closed="left")],
        "alpha": [Interval(Real, 0, None, closed="left"), np.ndarray],
        "n_features": [Interval(Integral, 1, None, closed="left")],
        "feature_map": [StrOptions({"sincos", "cosine"})],
        "frequency_sampling": [StrOptions({"iid", "qmc"})],
        "shared_basis": ["boolean"],
        "prior": [StrOptions({"rff", "exact", "auto"})],
        "exact_prior_max": [Interval(Integral, 0, None, closed="left")],
        "method": [StrOptions({"pathwise", "weight_space"})],
        "inducing_points": ["array-like", None],
        "n_inducing": [Interval(Integral, 1, None, closed="left"), None],
        "optimize_inducing": ["boolean"],
        "optimizer": [StrOptions({"fmin_l_bfgs_b", "adam"}), callable, None],
        "n_restarts_optimizer": [Interval(Integral, 0, None, closed="left")],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "learning_rate": [Interval(Real, 0, None, closed="neither")],
        "minibatch_size": [Interval(Integral, 1, None, closed="left"), None],
        "presolve_rows": [Interval(Integral, 2, None, closed="left"), StrOptions({"auto"}),
                          None],
        "normalize_y": ["boolean"],
        "predict_noise": [StrOptions({"sklearn", "latent", "observed"})],
        "solver": [StrOptions({"auto", "cholesky", "cg"})],
        "cholesky_max_n": [Interval(Integral, 1, None, closed="left"), StrOptions({"auto"})],
        "cg_tol": [Interval(Real, 0, None, closed="neither")],
        "cg_max_iter": [Interval(Integral, 1, None, closed="left")],
        "cg_preconditioner_rank": [Interval(Integral, 0, None, closed="left")],
        "jitter": [Interval(Real, 0, None, closed="left")],
        "n_targets": [Interval(Integral, 1, None, closed="left"), None],
        "copy_X_train": ["boolean"],
        "batch_size": [Interval(Integral, 1, None, closed="left")],
        "device": [str],
        "dtype": [StrOptions({"float64", "float32"})],
        "random_state": ["random_state"],
        "verbose": ["verbose"],
    }

    def __init__(self, kernel=None, *, likelihood="gaussian", noise_kernel=None,
                 share_inducing=True, natgrad_step=0.1, tol=1e-4, n_quadrature=20,
                 alpha=1e-10, n_features=1024, feature_map="sincos",
                 frequency_sampling="iid", shared_basis=True, prior="rff", exact_prior_max=2000,
                 method="pathwise", inducing_points=None, n_inducing=None,
                 optimize_inducing=False, optimizer="fmin_l_bfgs_b", n_restarts_optimizer=0,
                 max_iter=200, learning_rate=0.01, minibatch_size=None, presolve_rows="auto",
                 normalize_y=False,
                 predict_noise="sklearn", solver="auto", cholesky_max_n="auto", cg_tol=1e-4,
                 cg_max_iter=1000, cg_preconditioner_rank=100, jitter=1e-8, n_targets=None,
                 copy_X_train=True, batch_size=8192, device="auto", dtype="float64",
                 random_state=None, verbose=0):
        self.kernel = kernel
        self.likelihood = likelihood
        self.noise_kernel = noise_kernel
        self.share_inducing = share_inducing
        self.natgrad_step = natgrad_step
        self.tol = tol
        self.n_quadrature = n_quadrature
        self.alpha = alpha
        self.n_features = n_features
        self.feature_map = feature_map
        self.frequency_sampling = frequency_sampling
        self.shared_basis = shared_basis
        self.prior = prior
        self.exact_prior_max = exact_prior_max
        self.method = method
        self.inducing_points = inducing_points
        self.n_inducing = n_inducing
        self.optimize_inducing = optimize_inducing
        self.optimizer = optimizer
        self.n_restarts_optimizer = n_restarts_optimizer
        self.max_iter = max_iter
        self.learning_rate = learning_rate
        self.minibatch_size = minibatch_size
        self.presolve_rows = presolve_rows
        self.normalize_y = normalize_y
        self.predict_noise = predict_noise
        self.solver = solver
        self.cholesky_max_n = cholesky_max_n
        self.cg_tol = cg_tol
        self.cg_max_iter = cg_max_iter
        self.cg_preconditioner_rank = cg_preconditioner_rank
        self.jitter = jitter
        self.n_targets = n_targets
        self.copy_X_train = copy_X_train
        self.batch_size = batch_size
        self.device = device
        self.dtype = dtype
        self.random_state = random_state
        self.verbose = verbose

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.requires_fit = False  # predict and sample_y give the prior before fit
        return tags

    # ------------------------------------------------------------------ fit

    def fit(self, X, y):
        """Fit the Gaussian process (and its hyperparameters, unless ``optimizer=None``).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features) or list of object
            Training inputs (objects for a kernel with ``requires_vector_input=False``).
        y : array-like of shape (n_samples,) or (n_samples, n_targets)

        Returns
        -------
        self : PathwiseGPSampler

        Raises
        ------
        ValueError
            If a value of X or y exceeds the largest supported magnitude (1e150 with
            ``dtype='float64'``, 1e15 with ``'float32'``), where squares would overflow.
        ValueError
            For invalid data or options (checked before any torch work).
        skgpx.InsufficientMemoryError
            If the exact mode's ``n x n`` buffers cannot fit in memory (before any work).
        numpy.linalg.LinAlgError
            If the kernel matrix is not positive definite even with the largest jitter.
        """
        self._validate_params()
        structured = self._structured_inputs()
        dask = (is_dask_collection(X) or is_dask_collection(y)) and not structured
        if dask:  # the data stay on the workers (see skgpx._dask.DaskRows)
            X, y, y_was_1d = self._validate_dask(X, y)
        elif structured:  # as scikit-learn: objects (strings, sequences) go to the kernel as is
            X, y = validate_data(self, X, y, multi_output=True, y_numeric=True,
                                 ensure_2d=False, dtype=None)
        else:
            X, y = validate_data(self, X, y, multi_output=True, y_numeric=True,
                                 dtype=np.float64)
        device, dtype = self._fit_device_dtype()
        if not dask:  # Dask data: checked on the workers by dask_summaries below
            if not structured:
                check_magnitude(X, "X", dtype)
            check_magnitude(y, "y", dtype)
        n, d = X.shape[0], 1 if structured else X.shape[1]
        kernel = clone(default_kernel(fit=True) if self.kernel is None else self.kernel)
        self._check_options(kernel, d)
        alpha = float(self.alpha) if dask else self._alpha_vector(n)
        n_targets = y.shape[1] if y.ndim > 1 else 1
        self._check_n_targets(n_targets)
        context = self._context(device, dtype)
        mode = plan_regression(context, kernel, n, d, n_targets)
        x_mean = None
        if dask:
            x_mean, y_mean, y_std = dask_summaries(X, y, dtype)
            if self.normalize_y:
                y_std = safe_scale(y_std)  # as column_standardisation does in memory
                y = (y - y_mean) / y_std
        elif self.normalize_y:
            y_mean, y_std = column_standardisation(y.reshape(n, n_targets))
            y = (y - y_mean.reshape(y.shape[1:])) / y_std.reshape(y.shape[1:])
        if not self.normalize_y:
            y_mean, y_std = np.zeros(n_targets), np.ones(n_targets)

        rng = check_random_state(self.random_state)
        history = []
        Y = y if dask else y.reshape(n, n_targets)
        kernel = mode.fit(replace(context, rng=rng, history=history), kernel,
                          Training(X, Y, noise=alpha, shift=x_mean))
        signal, _ = split_white_noise(kernel)  # at the fitted hyperparameters
        self.kernel_ = kernel
        self.signal_kernel_ = ConstantKernel(0.0, "fixed") if signal is None else signal
        if dask:
            self.X_train_ = X  # lazy: the Dask collection, never gathered here
            self.y_train_ = y[:, 0] if y_was_1d else y
        else:
            self.X_train_ = np.copy(X) if self.copy_X_train else X
            self.y_train_ = np.copy(y) if self.copy_X_train else y
        self.y_mean_, self.y_scale_ = y_mean, y_std
        self.log_marginal_likelihood_value_ = np.float64(mode.lml)
        self.jitter_ = float(mode.jitter)
        self.objective_history_ = [float(v) for v in history]
        self.n_iter_ = len(history)
        for name, value in mode.attributes().items():
            setattr(self, name, value)
        self.device_, self.dtype_ = device, self.dtype
        self._mode = mode
        self._y_mean = self._as_tensor(y_mean, device, dtype)
        self._y_scale = self._as_tensor(y_std, device, dtype)
        self._prediction_seed = draw_seed(rng)
        return self

    def _validate_dask(self, X, y):
        """Lazy checks of Dask training data: ``(X, Y of shape (n, T), y_was_1d)``."""
        X, Y, feature_names, y_was_1d = dask_training_data(X, y)
        SGPRMode.check_dask_options(self)
        self._check_n_targets(Y.shape[1])
        self.n_features_in_ = X.shape[1]  # what validate_data(reset=True) records
        if feature_names is not None:
            self.feature_names_in_ = feature_names
        elif hasattr(self, "feature_names_in_"):
            del self.feature_names_in_
        return X, Y, y_was_1d

    def _check_n_targets(self, n_targets):
        if self.n_targets is not None and n_targets != self.n_targets:
            raise ValueError(
                "The number of targets seen in `y` is different from the parameter "
                f"`n_targets`. Got {n_targets} != {self.n_targets}.")

    def _check_options(self, kernel, n_features_in):
        if self.feature_map == "sincos" and self.n_features % 2:
            raise ValueError(
                f"n_features={self.n_features} must be even for feature_map='sincos' "
                "(features come in cos/sin pairs); use an even number or 'cosine'."
            )
        TorchKernel(kernel).check_n_features(n_features_in)

    def _context(self, device, dtype, **fields):
        """What the modes know of this estimator: its parameters and where tensors live."""
        return FitContext.of(self, device=device, dtype=dtype,
                             structured=self._structured_inputs(), **fields)

    def _structured_inputs(self):
        """Whether the kernel takes structured inputs (``requires_vector_input`` False)."""
        return self.kernel is not None and not self.kernel.requires_vector_input

    def _alpha_vector(self, n):
        alpha = np.asarray(self.alpha, dtype=np.float64)
        if alpha.ndim == 0:
            return np.full(n, float(alpha))
        if alpha.shape != (n,):
            raise ValueError(
                "alpha must be a scalar or an array with same number of entries as y. "
                f"({alpha.shape[0] if alpha.ndim else 1} != {n})"
            )
        if not np.all(np.isfinite(alpha)) or np.any(alpha < 0):
            raise ValueError("alpha must contain finite non-negative values.")
        return alpha

    # ------------------------------------------------------------ posterior

    def _fitted_or_prior(self, n_features_in):
        """The fitted mode object (``_mode``), or the prior's before fit, and the face
        that completes its posterior; never writes to self."""
        if hasattr(self, "X_train_"):
            return self._mode, dict(
                signal_kernel=self.signal_kernel_, y_mean=self._y_mean, y_std=self._y_scale,
                n_targets=len(self.y_mean_),
                squeeze=self.y_train_.ndim == 1 or self.y_train_.shape[1] == 1,
                n_features_in=getattr(self, "n_features_in_", 1))
        kernel = default_kernel() if self.kernel is None else self.kernel
        return PriorMode.of(kernel, n_features_in, self.n_targets or 1,
                            *self._current_device_dtype())

    def _extra_noise(self, post):
        """Noise variance (normalised units) added at new inputs by ``predict_noise``."""
        if self.predict_noise == "latent":
            return 0.0
        noise = float(post.kernel.noise_level(post.theta))
        if self.predict_noise == "observed" and np.ndim(self.alpha) == 0:
            noise += float(self.alpha)
        return noise

    def _query(self, X):
        """Validate query rows; ``(mode, face, Xq)`` with the rows copied into a tensor
        (``_fitted_or_prior``)."""
        if self._structured_inputs():
            X = validate_data(self, X, reset=False, ensure_2d=False, dtype=None)
            mode, face = self._fitted_or_prior(1)
            return mode, face, ObjectRows.of(np.copy(X), mode.theta.dtype,
                                             mode.theta.device)
        X = validate_data(self, X, reset=False, dtype=np.float64)
        check_magnitude(X, "X", self._current_device_dtype()[1])
        mode, face = self._fitted_or_prior(X.shape[1])
        return mode, face, self._as_tensor(X, mode.theta.device, mode.theta.dtype)

    def predict(self, X, return_std=False, return_cov=False, return_noise=False):
        """Predict with the GP posterior (the prior before ``fit``).

        Parameters
        ----------
        X : array-like of shape (n_queries, n_features) or list of object
        return_std : bool, default=False
            Also return the predictive standard deviation.
        return_cov : bool, default=False
            Also return the predictive covariance (dense, ``n_queries^2``).
        return_noise : bool, default=False
            Also return the standard deviation of the observation noise at X:
            ``sqrt(E[a + exp(c + g(x))])`` for ``likelihood="heteroscedastic"``,
            ``sigma sqrt(nu / (nu - 2))`` for ``"student_t"``, the square root of the
            ``WhiteKernel`` noise level for ``"gaussian"``.

        Returns
        -------
        y_mean : ndarray of shape (n_queries,) or (n_queries, n_targets)
        y_std : ndarray of shape (n_queries,) or (n_queries, n_targets), optional
        y_cov : ndarray of shape (n_queries, n_queries) or \
                (n_queries, n_queries, n_targets), optional
        noise_std : ndarray of shape (n_queries,) or (n_queries, n_targets), optional
            Last, when ``return_noise``.

        Raises
        ------
        ValueError
            If a value of X exceeds the largest supported magnitude (1e150 with
            ``dtype='float64'``, 1e15 with ``'float32'``), where squares would overflow.
        RuntimeError
            If both ``return_std`` and ``return_cov`` are requested.
        """
        if return_std and return_cov:
            raise RuntimeError("At most one of return_std or return_cov can be requested.")
        mode, face, Xq = self._query(X)
        if return_cov:
            self._check_query_memory(Xq.shape[0], "predict(return_cov=True)",
                                     "predict in chunks of rows with return_std=True")
        y_std, squeeze = face["y_std"], face["squeeze"]
        with torch.no_grad():
            noise = None if self.predict_noise == "sklearn" else self._extra_noise(mode)
            mean, var, cov = mode.predict(Xq, noise=noise, batch_size=self.batch_size,
                                          want_var=return_std, want_cov=return_cov,
                                          observed=self.predict_noise != "latent")
            out = [self._squeeze(squeeze, face["y_mean"] + y_std * mean)]
            if return_std:  # one variance per row, or one per row and target
                var = clip_negative_variance(var)
                var = (var if var.dim() == 2 else var[:, None]) * y_std**2
                out.append(self._squeeze(squeeze, torch.sqrt(var)))
            if return_cov:
                cov = cov if cov.dim() == 3 else cov[..., None]
                out.append(self._squeeze(squeeze, cov * y_std**2))
            if return_noise:
                out.append(self._squeeze(squeeze, torch.sqrt(mode.noise_variance(Xq))
                                         * y_std))
        return out[0] if len(out) == 1 else tuple(out)

    @staticmethod
    def _squeeze(squeeze, values):
        return to_numpy(values[..., 0] if squeeze else values)

    # -------------------------------------------------------------- draws

    def _draw_options(self):
        return dict(n_features=self.n_features, feature_map=self.feature_map,
                    shared_basis=self.shared_basis, method=self.method,
                    batch_size=self.batch_size, frequency_sampling=self.frequency_sampling)

    def _memory_options(self):
        return dict(n_features=self.n_features, shared_basis=self.shared_basis,
                    device=self._current_device_dtype()[0])

    def sample_y(self, X, n_samples=1, random_state=0):
        """Draw samples from the GP posterior (the prior before ``fit``) at X.

        The draws take one of four routes (:meth:`sample_y_route` says which):

        * ``"pathwise"``: with ``prior="rff"`` (or ``"auto"`` above
          ``exact_prior_max``), a random-feature prior draw updated by Matheron's rule,
          linear in ``n_queries``; ``sample_functions(S, r)(X)`` gives the same values.
        * ``"weight_space"``: ``method="weight_space"``, Bayesian linear regression on
          the random features.
        * ``"exact_joint"``: ``prior="exact"`` (or ``"auto"`` within
          ``exact_prior_max``), the exact joint prior over the training (or inducing)
          and query rows updated by Matheron's rule, ``O((n + n_queries)^3)``.
        * ``"exact_at_queries"``: when the kernel has no random-feature map
          (``ExpSineSquared``, ``Exponentiation``, ``PairwiseKernel``, a product with
          ``DotProduct``, kernels on structured inputs, ...), ``prior="rff"`` falls
          back to exact joint draws at X: the posterior mean plus the Cholesky factor
          of the posterior covariance at X times standard normals, as scikit-learn's
          ``sample_y`` draws, ``O(n n_queries^2 + n_queries^3)``.  The covariance gets
          the exact prior's ``jitter`` (relative to the mean prior variance at X).

        Both exact routes draw from the exact posterior at X, jointly: draws from two
        calls on two halves of X are independent, not one joint draw.  Observation
        noise follows ``predict_noise``.

        Parameters
        ----------
        X : array-like of shape (n_queries, n_features) or list of object
        n_samples : int, default=1
        random_state : int, RandomState instance or None, default=0
            Seeds the draws (a CPU torch generator, so CPU and GPU agree).  None uses
            the seed drawn in ``fit`` from the estimator's ``random_state``.

        Returns
        -------
        y_samples : ndarray of shape (n_queries, n_samples) or \
                (n_queries, n_targets, n_samples)

        Raises
        ------
        ValueError
            If a value of X exceeds the largest supported magnitude (1e150 with
            ``dtype='float64'``, 1e15 with ``'float32'``), where squares would overflow.
        InsufficientMemoryError
            Before drawing, when the ``n_samples`` draws and their buffers cannot fit in
            the memory available (ask for fewer draws, or call it on chunks of X), or,
            on the exact routes, when the dense ``n_queries x n_queries`` matrices
            cannot (fewer query rows per call, or a kernel with random features).
        NotImplementedError
            ``method="weight_space"`` with a kernel that has no random-feature map.
        """
        mode, face, Xq = self._query(X)
        post = mode.posterior(**face)
        n_samples = check_n_samples(n_samples, minimum=0)
        route = self._route(mode, post, Xq)
        n_query = Xq.shape[0]
        n_train = post.centers.shape[0] if post.fitted else 0
        check_draws_memory(post, n_samples, 0 if route == "exact_at_queries" else n_train,
                           n_query, route != "pathwise" and route != "weight_space",
                           f"PathwiseGPSampler.sample_y on {n_query} rows",
                           **self._memory_options())
        if route == "exact_joint":
            self._check_query_memory(n_train + n_query, "sample_y with prior='exact'",
                                     "use prior='rff' (linear in the query rows)")
        elif route == "exact_at_queries":
            check_exact_at_queries_memory(post, n_query, n_train, not mode.exact_draws,
                                          *self._current_device_dtype())
        generator = prediction_generator(self, random_state)
        with torch.no_grad():
            values = draw_by_route(route, mode, post, Xq, n_samples, generator,
                                   jitter=self.jitter, batch_size=self.batch_size,
                                   draw_options=self._draw_options())
            noise = self._extra_noise(post)
            if noise > 0:
                z = post.streams(generator).normal(values.shape[:-1])
                values = values + post.y_std * np.sqrt(noise) * z
            own = None if self.predict_noise == "latent" else mode.sample_noise(
                Xq, n_samples, generator, self._draw_options())
            if own is not None:  # a non-Gaussian likelihood's noise
                values = values + post.y_std * own
            return to_numpy(sklearn_layout(values, post.squeeze))

    def sample_y_route(self, X):
        """The route :meth:`sample_y` takes to draw at X, without drawing.

        Parameters
        ----------
        X : array-like of shape (n_queries, n_features) or list of object

        Returns
        -------
        route : {"pathwise", "weight_space", "exact_joint", "exact_at_queries"}
            See :meth:`sample_y`: random features updated by Matheron's rule, the
            weight-space baseline, the exact joint prior, or exact joint draws at X
            from the posterior mean and covariance there (a kernel without
            random-feature map).
        """
        mode, face, Xq = self._query(X)
        return self._route(mode, mode.posterior(**face), Xq)

    def _route(self, mode, post, Xq):
        """The route of ``sample_y`` at the validated rows ``Xq`` (see its docstring)."""
        return choose_route(mode, post, Xq, prior=self.prior, method=self.method,
                            likelihood=self.likelihood, exact_prior_max=self.exact_prior_max)

    def sample_functions(self, n_samples=1, random_state=0):
        """Draw posterior functions that can be evaluated anywhere.

        Parameters
        ----------
        n_samples : int, default=1
        random_state : int, RandomState instance or None, default=0
            Seeds the draws as in :meth:`sample_y`; with ``prior="rff"`` and no noise,
            ``sample_functions(S, r)(X)`` equals ``sample_y(X, S, r)`` exactly.

        Returns
        -------
        functions : PathwiseFunctions
            Latent function draws; ``functions(X)`` has the layout of :meth:`sample_y`.

        Raises
        ------
        InsufficientMemoryError
            Before drawing, when the ``n_samples`` draws and their buffers cannot fit in
            the memory available (ask for fewer draws, or call it on chunks of X).
        NotImplementedError
            If the kernel has no random-feature expansion (use ``prior="exact"``
            with :meth:`sample_y`).
        """
        check_is_fitted(self, "X_train_")  # requires_fit=False would make a bare check pass
        n_samples = check_n_samples(n_samples, minimum=0)
        if self._structured_inputs():
            raise random_features_error(self.kernel, "sample_functions")
        mode, face = self._fitted_or_prior(self.n_features_in_)
        post = mode.posterior(**face)
        check_draws_memory(post, n_samples, post.centers.shape[0], 0, False,
                           "PathwiseGPSampler.sample_functions", **self._memory_options())
        generator = prediction_generator(self, random_state)
        with torch.no_grad():
            return draw_functions(post, n_samples, generator, **self._draw_options())

    def log_marginal_likelihood(self, theta=None, eval_gradient=False, clone_kernel=True):
        """Log marginal likelihood of ``theta`` for the training data, summed over targets.

        Parameters
        ----------
        theta : array-like of shape (n_kernel_params,), default=None
            Log hyperparameters; None returns ``log_marginal_likelihood_value_``.
        eval_gradient : bool, default=False
            Also return the gradient with respect to ``theta`` (by autograd).
        clone_kernel : bool, default=True
            As in scikit-learn: False sets ``kernel_.theta`` to ``theta`` (the fitted
            posterior, and so predictions and draws, stay those of the fit).

        Returns
        -------
        log_likelihood : numpy.float64
        log_likelihood_gradient : ndarray of shape (n_kernel_params,), optional
        """
        if theta is None:
            if eval_gradient:
                raise ValueError("Gradient can only be evaluated for theta!=None")
            return np.float64(self.log_marginal_likelihood_value_)
        check_is_fitted(self, "X_train_")  # requires_fit=False would make a bare check pass
        theta_tensor = self._mode.as_theta(theta)
        result = self._mode.log_marginal_likelihood(
            self._context(theta_tensor.device, theta_tensor.dtype), theta_tensor, eval_gradient)
        if not clone_kernel:
            self.kernel_.theta = np.asarray(theta, dtype=np.float64)
        # numpy scalars, as scikit-learn returns: NumPy 2 promotion keeps float64 arithmetic
        if eval_gradient:
            return np.float64(result[0]), result[1]
        return np.float64(result)

    def _check_query_memory(self, n_rows, what, way_out):
        """Refuse a dense ``n_rows x n_rows`` result that cannot fit (before any work)."""
        device, dtype = self._current_device_dtype()
        itemsize = 4 if dtype == torch.float32 else 8
        check_memory(3 * n_rows * n_rows * itemsize,
                     what=f"{what} on {n_rows} rows (dense {n_rows} x {n_rows} matrices)",
                     way_out=way_out, device=device)

    @property
    def L_(self):
        L = getattr(getattr(self, "_mode", None), "L", None)
        if L is None:
            raise AttributeError("L_ exists only in exact mode with the Cholesky solver.")
        return to_numpy(L)

    @property
    def alpha_(self):
        a = getattr(getattr(self, "_mode", None), "a", None)
        if a is None:
            raise AttributeError("alpha_ exists only in exact mode.")
        return to_numpy(a).reshape(self.y_train_.shape)
