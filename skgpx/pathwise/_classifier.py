"""PathwiseGPClassifier: scikit-learn's Laplace GP classifier in torch, with latent draws."""

from numbers import Integral, Real

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, clone
from sklearn.gaussian_process.kernels import RBF, CompoundKernel, ConstantKernel, Kernel
from sklearn.utils.validation import check_is_fitted, validate_data

from .._base import (
    Interval, StrOptions, TorchEstimatorMixin, check_magnitude, check_n_samples, encode_classes,
    prediction_generator, to_numpy,
)
from .._dask import dask_class_labels, dask_summaries, is_dask_collection
from ..kernels import ObjectRows, TorchKernel, split_white_noise
from ._draws._spectra import has_random_features
from ._interface import FitContext, Training
from ._laplace._draws import draw_latent
from ._laplace._mode import LaplaceMode
from ._laplace._newton import LINKS
from ._laplace._views import probabilities_only
from ._modes import plan_classification
from ._svgp._classification import check_sparse_options, is_sparse


# fitted attributes that only one of the modes sets
MODE_ATTRIBUTES = ("base_estimator_", "inducing_points_", "q_mu_", "q_sqrt_", "jitter_",
                   "optimizer_")


class PathwiseGPClassifier(ClassifierMixin, TorchEstimatorMixin, BaseEstimator):
    """Gaussian process classification by Laplace's method, with latent function draws.

    Exact mode reproduces scikit-learn's
    :class:`~sklearn.gaussian_process.GaussianProcessClassifier` call for call: the
    Laplace approximation of the binary logistic model (Rasmussen and Williams [1]_,
    Algorithms 3.1, 3.2 and 5.1: Newton's method for the mode, scikit-learn's averaged
    predictive probability, the exact gradient of the approximate log marginal
    likelihood), L-BFGS-B on the kernel's ``theta`` with scikit-learn's restarts, and
    several classes one-vs-rest (one kernel per class) or one-vs-one.  It runs in torch on
    CPU or GPU, the classes of one-vs-rest as one batched computation (``(C, n, n)``
    matrices, their L-BFGS-B runs in lock step).  :meth:`sample_functions` draws the
    latent functions from the Laplace posterior by pathwise conditioning [2]_.

    Sparse mode (``n_inducing`` or ``inducing_points`` set) is a whitened sparse
    variational GP [3]_: ``q(v) = N(m, S)`` per latent function at inducing inputs ``Z``
    (``u = L_zz v``), the expected log-likelihood by Gauss-Hermite quadrature (Bernoulli)
    or Monte Carlo (softmax), natural-gradient steps on ``q`` and Adam (mini-batches) or
    L-BFGS-B (full-data passes, also on Dask arrays) on ``theta`` and ``Z`` [4]_.  Several
    classes are one-vs-rest or a softmax over latents that share ``Z`` and the kernel.
    Its draws update a random-feature prior by ``u ~ q(u)``.

    Parameters
    ----------
    kernel : kernel instance, default=None
        The latent function's kernel; None means ``ConstantKernel(1.0, "fixed") *
        RBF(1.0, "fixed")`` as in scikit-learn (no hyperparameter to fit).  Not a
        ``CompoundKernel``.
    optimizer : "auto", "fmin_l_bfgs_b", "adam", callable or None, default="auto"
        Maximises the approximate log marginal likelihood over ``theta``.  Exact mode:
        ``"auto"`` and ``"fmin_l_bfgs_b"`` are scikit-learn's default (scipy's L-BFGS-B with
        its default options).  A callable has scikit-learn's signature
        ``optimizer(obj_func, initial_theta, bounds) -> (theta_opt, func_min)``.  None keeps
        the kernel's hyperparameters.  Sparse mode: ``"fmin_l_bfgs_b"`` (or the callable)
        on the bound over full-data passes with ``q`` brought to its optimum at each
        evaluation; ``"adam"`` (sparse mode only, rows in memory) takes one natural step on
        ``q`` and one Adam step on ``theta`` and ``Z`` per mini-batch; None fits ``q``
        alone.  ``"auto"`` is ``"fmin_l_bfgs_b"`` up to 10 000 training rows and on Dask
        arrays, ``"adam"`` beyond, where an L-BFGS-B iteration costs several full passes
        (tens of times an epoch's work) and the mini-batch route fits several times sooner
        for a bound a few per cent lower (``optimizer_`` records the route taken).
    n_restarts_optimizer : int, default=0
        Extra optimizer runs per binary problem, from starting points drawn as
        scikit-learn draws them (see Notes); the bounds must then be finite.
    max_iter_predict : int, default=100
        Largest number of Newton steps for the mode.
    warm_start : bool, default=False
        Start each Newton search of a fit from the mode of the problem's previous one
        (scikit-learn's ``f_cached``); the fitted modes also start the searches of
        :meth:`log_marginal_likelihood`.
    copy_X_train : bool, default=True
        Store a copy of the training data in ``X_train_`` (else a reference).
    random_state : int, RandomState instance or None, default=None
        The restarts' starting points (drawn as scikit-learn draws them) and the default
        seed of the draws (``random_state=None`` in :meth:`sample_y`).
    multi_class : {"one_vs_rest", "one_vs_one", "softmax"}, default="one_vs_rest"
        Several classes: one binary problem per class against the rest, or per pair of
        classes (no :meth:`predict_proba`, as in scikit-learn).  ``"softmax"`` belongs to
        the sparse mode.
    n_jobs : int, default=None
        Accepted for scikit-learn compatibility; the problems are batched instead.
    link : {"logit", "probit"}, default="logit"
        ``p(y = 1 | f)``: the logistic function (scikit-learn's model) or the normal
        CDF, whose averaged predictive probability ``Phi(mu / sqrt(1 + var))`` is exact.
    n_inducing : int, default=None
        Sparse mode with this many inducing inputs, chosen by k-means++ on the rows.
    inducing_points : array-like of shape (m, n_features), default=None
        Sparse mode from these inducing inputs (set at most one of the two).
    optimize_inducing : bool, default=True
        Sparse mode: learn ``Z`` with the kernel hyperparameters.
    max_iter : int, default=100
        Sparse mode: epochs (``"adam"``) or L-BFGS-B iterations (of the route
        ``optimizer_`` names).
    tol : float or None, default=1e-4
        Sparse mode's stopping rule: ``"adam"`` stops once the epoch's mean bound rose by
        at most ``tol`` (relative) plus its mini-batch noise over three epochs; L-BFGS-B
        uses it for its plateau test.  None runs ``max_iter``.
    learning_rate : float, default=0.01
        Sparse mode: Adam's step size on ``log theta`` and ``Z``.
    natgrad_step : float, default=0.1
        Sparse mode: the natural-gradient step size on ``q`` after its warm-up.
    minibatch_size : int, default=1024
        Sparse mode: rows per ``"adam"`` step.
    n_quadrature : int, default=20
        Sparse mode: Gauss-Hermite points of the Bernoulli expected log-likelihood.
    n_mc_samples : int, default=64
        Sparse mode: Monte-Carlo draws of the softmax expectations (antithetic pairs).
    n_features : int, default=1024
        Random features of a prior draw in :meth:`sample_functions` (even for
        ``"sincos"``).
    feature_map : {"sincos", "cosine"}, default="sincos"
    jitter : float, default=1e-8
        Sparse mode: relative jitter of ``K_zz`` (escalated tenfold on failure).  Exact
        mode: the relative jitter of the exact latent draws of :meth:`sample_y`.
    batch_size : int, default=8192
        Rows per chunk in prediction and in the sparse mode's passes.
    device : str, default="auto"
        ``"auto"`` (CUDA if available), ``"cpu"``, ``"cuda"`` or ``"cuda:N"``.
    dtype : {"float64", "float32"}, default="float64"
    verbose : int, default=0
        1 shows a progress bar over the optimizer's batched evaluations; 2 adds a line
        per optimizer run.

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
    n_classes_ : int
    kernel_ : kernel instance
        The fitted kernel (binary; sparse mode), or a ``CompoundKernel`` of one fitted
        kernel per binary problem (exact mode, multi-class).
    log_marginal_likelihood_value_ : float
        The approximate log marginal likelihood of ``kernel_.theta`` (the mean over the
        binary problems for several classes); sparse mode: the evidence lower bound.
    base_estimator_ : LaplaceBinaryView or LaplaceEnsembleView
        Exact mode: the binary problem (two classes), else a view with one binary problem
        per class or pair in ``estimators_``, as scikit-learn's ``OneVsRestClassifier``
        and ``OneVsOneClassifier`` hold them.
    inducing_points_ : ndarray of shape (m, n_features)
        Sparse mode: the fitted inducing inputs ``Z``.
    q_mu_, q_sqrt_ : ndarray of shape (m, L) and (L, m, m)
        Sparse mode: the whitened means and Cholesky factors of ``q(v)``, one per latent.
    jitter_ : float
        Sparse mode: the jitter ``K_zz`` needed.
    optimizer_ : str, callable or None
        Sparse mode: the route the fit took (``optimizer`` with ``"auto"`` resolved).
    X_train_ : ndarray of shape (n_samples, n_features) or list of object
        (The Dask array itself after a fit on Dask collections.)
    objective_history_ : list of float
        The negative log marginal likelihoods the optimizer evaluated (summed over the
        problems evaluated together).
    n_iter_ : int
        Batched objective evaluations of ``fit`` (at least 1).
    n_features_in_ : int
    feature_names_in_ : ndarray of shape (`n_features_in_`,)
        Defined only when X has string feature names.
    device_ : str
    dtype_ : str

    See Also
    --------
    sklearn.gaussian_process.GaussianProcessClassifier : The numpy reference.
    PathwiseGPSampler : Gaussian process regression with pathwise draws.

    Notes
    -----
    Exact mode costs ``O(n^3)`` per Newton step and per gradient, ``O(C n^2)`` memory for
    ``C`` one-vs-rest classes; a memory guard refuses, before any work, problems whose
    matrices cannot fit.  As scikit-learn, a restart starts from ``exp(u)`` for ``u`` drawn
    uniformly within the (log) bounds, which L-BFGS-B then clips into the bounds; with
    several classes each problem draws from its own copy of ``random_state`` (an int or
    RandomState gives every class the same starting points).  ``log_marginal_likelihood``
    with ``clone_kernel=False`` sets ``kernel_.theta`` but, unlike scikit-learn, leaves the
    fitted posterior (and so the predictions) as fitted.

    Sparse mode needs ``O(L m^2 + b m)`` memory for ``L`` latents and row chunks of ``b``
    (never ``O(n m)``); its ``log_marginal_likelihood(theta)`` is the bound at ``theta``
    with the fitted ``q`` and ``Z``, its gradient exact.

    References
    ----------
    .. [1] C. E. Rasmussen and C. K. I. Williams, "Gaussian Processes for Machine
       Learning", MIT Press, 2006.
    .. [2] J. T. Wilson et al., "Pathwise conditioning of Gaussian processes", JMLR 22, 2021.
    .. [3] J. Hensman, A. G. de G. Matthews and Z. Ghahramani, "Scalable variational
       Gaussian process classification", AISTATS 2015.
    .. [4] H. Salimbeni, S. Eleftheriadis and J. Hensman, "Natural gradients in practice:
       non-conjugate variational inference in Gaussian process models", AISTATS 2018.

    Examples
    --------
    >>> from sklearn.datasets import load_iris
    >>> from sklearn.gaussian_process.kernels import RBF
    >>> from skgpx import PathwiseGPClassifier
    >>> X, y = load_iris(return_X_y=True)
    >>> gpc = PathwiseGPClassifier(1.0 * RBF(1.0), random_state=0, device="cpu").fit(X, y)
    >>> round(gpc.score(X, y), 3)
    0.987
    >>> gpc.predict_proba(X[:1]).round(3)
    array([[0.835, 0.032, 0.132]])
    >>> gpc.sample_y(X[:2], n_samples=4).shape
    (2, 3, 4)
    """

    _parameter_constraints = {
        "kernel": [None, Kernel],
        "optimizer": [StrOptions({"auto", "fmin_l_bfgs_b", "adam"}), callable, None],
        "n_restarts_optimizer": [Interval(Integral, 0, None, closed="left")],
        "max_iter_predict": [Interval(Integral, 1, None, closed="left")],
        "warm_start": ["boolean"],
        "copy_X_train": ["boolean"],
        "random_state": ["random_state"],
        "multi_class": [StrOptions({"one_vs_rest", "one_vs_one", "softmax"})],
        "n_jobs": [Integral, None],
        "link": [StrOptions(set(LINKS))],
        "n_inducing": [Interval(Integral, 1, None, closed="left"), None],
        "inducing_points": ["array-like", None],
        "optimize_inducing": ["boolean"],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "tol": [Interval(Real, 0, None, closed="left"), None],
        "learning_rate": [Interval(Real, 0, None, closed="neither")],
        "natgrad_step": [Interval(Real, 0, 1, closed="right")],
        "minibatch_size": [Interval(Integral, 1, None, closed="left")],
        "n_quadrature": [Interval(Integral, 1, None, closed="left")],
        "n_mc_samples": [Interval(Integral, 1, None, closed="left")],
        "n_features": [Interval(Integral, 1, None, closed="left")],
        "feature_map": [StrOptions({"sincos", "cosine"})],
        "jitter": [Interval(Real, 0, None, closed="left")],
        "batch_size": [Interval(Integral, 1, None, closed="left")],
        "device": [str],
        "dtype": [StrOptions({"float64", "float32"})],
        "verbose": ["verbose"],
    }

    def __init__(self, kernel=None, *, optimizer="auto", n_restarts_optimizer=0,
                 max_iter_predict=100, warm_start=False, copy_X_train=True, random_state=None,
                 multi_class="one_vs_rest", n_jobs=None, link="logit", n_inducing=None,
                 inducing_points=None, optimize_inducing=True, max_iter=100, tol=1e-4,
                 learning_rate=0.01, natgrad_step=0.1, minibatch_size=1024, n_quadrature=20,
                 n_mc_samples=64, n_features=1024, feature_map="sincos", jitter=1e-8,
                 batch_size=8192, device="auto", dtype="float64", verbose=0):
        self.kernel = kernel
        self.optimizer = optimizer
        self.n_restarts_optimizer = n_restarts_optimizer
        self.max_iter_predict = max_iter_predict
        self.warm_start = warm_start
        self.copy_X_train = copy_X_train
        self.random_state = random_state
        self.multi_class = multi_class
        self.n_jobs = n_jobs
        self.link = link
        self.n_inducing = n_inducing
        self.inducing_points = inducing_points
        self.optimize_inducing = optimize_inducing
        self.max_iter = max_iter
        self.tol = tol
        self.learning_rate = learning_rate
        self.natgrad_step = natgrad_step
        self.minibatch_size = minibatch_size
        self.n_quadrature = n_quadrature
        self.n_mc_samples = n_mc_samples
        self.n_features = n_features
        self.feature_map = feature_map
        self.jitter = jitter
        self.batch_size = batch_size
        self.device = device
        self.dtype = dtype
        self.verbose = verbose

    # ------------------------------------------------------------------ fit

    def _check_options(self):
        if isinstance(self.kernel, CompoundKernel):
            raise ValueError("kernel cannot be a CompoundKernel")
        sparse = is_sparse(self)
        if sparse:
            check_sparse_options(self, self._structured())
        if self.multi_class == "softmax" and not sparse:
            raise ValueError("multi_class='softmax' needs the sparse mode (n_inducing=256, "
                             "say); the exact mode offers 'one_vs_rest' and 'one_vs_one'.")
        if self.optimizer == "adam" and not sparse:
            raise ValueError("optimizer='adam' belongs to the sparse mode (n_inducing); the "
                             "exact mode takes 'fmin_l_bfgs_b', a callable or None.")
        if self.feature_map == "sincos" and self.n_features % 2:
            raise ValueError(f"n_features={self.n_features} must be even for "
                             "feature_map='sincos'; use an even number or 'cosine'.")

    def _structured(self):
        return self.kernel is not None and not self.kernel.requires_vector_input

    def _context(self, device, dtype, **fields):
        """What the modes know of this estimator: its parameters and where tensors live."""
        return FitContext.of(self, device=device, dtype=dtype, structured=self._structured(),
                             **fields)

    def _validate_X(self, X, reset, y="no_validation"):
        kw = dict(ensure_2d=False, dtype=None) if self._structured() else dict(dtype=np.float64)
        if reset:
            return validate_data(self, X, y, multi_output=False, ensure_min_samples=2, **kw)
        return validate_data(self, X, reset=False, **kw)

    def fit(self, X, y):
        """Fit the Laplace approximation or the sparse variational posterior (and the
        kernel hyperparameters).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features) or list of object
        y : array-like of shape (n_samples,)
            Class labels (at least two classes).

        Returns
        -------
        self : PathwiseGPClassifier

        Raises
        ------
        ValueError
            For invalid data or options (before any torch work).
        skgpx.InsufficientMemoryError
            If the mode's matrices cannot fit (before any work).
        """
        self._validate_params()
        self._check_options()
        if is_dask_collection(X) or is_dask_collection(y):
            return self._fit_dask(X, y)
        X, y = self._validate_X(X, reset=True, y=y)
        classes, codes = encode_classes(self, y)
        device, dtype = self._fit_device_dtype()
        if not self._structured():
            check_magnitude(X, "X", dtype)
        kernel = self._initial_kernel()
        if not self._structured():
            TorchKernel(kernel).check_n_features(X.shape[1])
        context = self._context(device, dtype)
        d = 1 if self._structured() else X.shape[1]
        mode = plan_classification(context, kernel, len(codes), d, len(classes))
        mode.fit(context, kernel, Training(X, codes, n_classes=len(classes)))
        return self._store(mode, classes, np.copy(X) if self.copy_X_train else X)

    def _initial_kernel(self):
        """A clone of ``kernel``; None is scikit-learn's fixed ``C(1.0) * RBF(1.0)``."""
        if self.kernel is None:
            return (ConstantKernel(1.0, constant_value_bounds="fixed")
                    * RBF(1.0, length_scale_bounds="fixed"))
        return clone(self.kernel)

    def _store(self, mode, classes, X_train):
        """The fitted attributes of ``mode``, fitted on ``X_train`` (kept as ``X_train_``)."""
        device, dtype = self._fit_device_dtype()
        self.classes_, self.n_classes_ = classes, len(classes)
        self.X_train_ = X_train
        self.device_, self.dtype_ = device, self.dtype
        self._mode, self._prediction_seed = mode, mode.seed
        for name in MODE_ATTRIBUTES:  # a refit in the other mode leaves none of the old
            self.__dict__.pop(name, None)
        for name, value in mode.attributes().items():
            setattr(self, name, value)
        views = mode.views(self, classes)
        if views is not None:
            self.base_estimator_ = views
        return self

    def _fit_dask(self, X, y):
        """Sparse fit on Dask collections: the rows stay on the workers, and every pass
        of L-BFGS-B's objective is a sum over their blocks (``skgpx._dask.DaskRows``)."""
        if not is_sparse(self) or self._structured():
            raise ValueError(
                "Fitting on Dask collections needs the sparse mode: set n_inducing (say 256) "
                "or inducing_points. The exact Laplace mode needs the n x n kernel matrix in "
                "one process; call fit on in-memory arrays for it.")
        X, Y, classes, feature_names = dask_class_labels(X, y, self.multi_class)
        self.n_features_in_ = X.shape[1]  # what validate_data(reset=True) records
        if feature_names is not None:
            self.feature_names_in_ = feature_names
        elif hasattr(self, "feature_names_in_"):
            del self.feature_names_in_
        device, dtype = self._fit_device_dtype()
        kernel = self._initial_kernel()
        TorchKernel(kernel).check_n_features(X.shape[1])
        x_mean, _, _ = dask_summaries(X, Y, dtype)  # finiteness and magnitude, on the workers
        context = self._context(device, dtype)
        mode = plan_classification(context, kernel, X.shape[0], X.shape[1], len(classes))
        mode.fit(context, kernel, Training(X, Y, shift=x_mean, n_classes=len(classes)))
        return self._store(mode, classes, X)

    # ------------------------------------------------------------ prediction

    def _query(self, X):
        check_is_fitted(self)
        X = self._validate_X(X, reset=False)
        theta = self._mode.theta
        if self._structured():
            return ObjectRows.of(np.copy(X), theta.dtype, theta.device)
        check_magnitude(X, "X", theta.dtype)
        return self._as_tensor(X, theta.device, theta.dtype)

    def _latent(self, Xq, problems=None):
        """Latent mean and variance (P, m) numpy of the binary problems at validated rows."""
        mean, var = self._mode.latent(Xq, problems)
        return to_numpy(mean), to_numpy(var)

    @probabilities_only
    def predict_proba(self, X):
        """Class probabilities: the latent Gaussian averaged through the link.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features) or list of object

        Returns
        -------
        proba : ndarray of shape (n_samples, n_classes)
            Columns follow ``classes_``; one-vs-rest probabilities are normalised per row,
            as ``OneVsRestClassifier`` does.

        Raises
        ------
        NoProbabilitiesError
            For one-vs-one with more than two classes: scikit-learn's ValueError, also an
            AttributeError (the method does not exist there).
        """
        check_is_fitted(self)
        return self._mode.predict_proba(self._query(X))

    def predict(self, X):
        """The most probable class (one-vs-one: scikit-learn's votes with confidences).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features) or list of object

        Returns
        -------
        y_pred : ndarray of shape (n_samples,)
        """
        check_is_fitted(self)
        if self.n_classes_ > 2 and self.multi_class == "one_vs_one":
            return self.classes_[self._mode.ovo_scores(self._query(X)).argmax(axis=1)]
        return self.classes_[np.argmax(self.predict_proba(X), axis=1)]

    def latent_mean_and_variance(self, X):
        """Mean and variance of the latent function at X (GPML Algorithm 3.2, lines 4-6).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features) or list of object

        Returns
        -------
        latent_mean, latent_var : ndarray of shape (n_samples,)

        Raises
        ------
        ValueError
            With more than two classes (as scikit-learn).
        """
        check_is_fitted(self)
        if self.n_classes_ > 2:
            raise ValueError(
                "Returning the mean and variance of the latent function f is only supported "
                f"for binary classification, received {self.n_classes_} classes.")
        mean, var = self._latent(self._query(X))
        return mean[0], var[0]

    def sample_functions(self, n_samples=1, random_state=0):
        """Draw latent functions from the fitted Gaussian posterior, evaluable anywhere.

        Parameters
        ----------
        n_samples : int, default=1
        random_state : int, RandomState instance or None, default=0
            Seeds the draws; None uses the seed drawn in ``fit``.

        Returns
        -------
        functions : PathwiseFunctions or ProblemFunctions
            Binary: ``functions(X)`` of shape (n_queries, n_samples); several problems:
            (n_queries, n_problems, n_samples), one kernel per problem.

        Raises
        ------
        NotImplementedError
            For kernels on structured inputs (no random-feature expansion).
        """
        check_is_fitted(self)
        n_samples = check_n_samples(n_samples, minimum=1)
        if self._structured():
            raise NotImplementedError(
                f"sample_functions needs random features, which the kernel {self.kernel} on "
                "structured inputs (requires_vector_input=False) has no expansion into.")
        return draw_latent(self, self._mode.posteriors(self.n_features_in_), n_samples,
                           random_state)

    @probabilities_only
    def sample_y(self, X, n_samples=1, random_state=0):
        """Class-probability draws: the link of latent draws (one-vs-rest: normalised).

        Parameters
        ----------
        X : array-like of shape (n_samples_X, n_features)
        n_samples : int, default=1
        random_state : int, RandomState instance or None, default=0
            As in :meth:`sample_functions`.

        Returns
        -------
        proba_samples : ndarray of shape (n_samples_X, n_classes, n_samples)
            The layout of ``DeepQEPClassifier.sample_y``.

        Notes
        -----
        The latent draws are :meth:`sample_functions` evaluated at X, or, in exact mode
        with a kernel that has no random-feature map (``ExpSineSquared``,
        ``PairwiseKernel``, kernels on structured inputs, ...), exact joint draws at X
        from each problem's Laplace posterior there (its mean and the Cholesky factor of
        its covariance, with ``jitter`` relative to the prior variance).  Sparse mode
        draws through random features only, and refuses such kernels.
        """
        check_is_fitted(self)
        Xq = self._query(X)
        exact = isinstance(self._mode, LaplaceMode)
        if exact and self._mode.without_random_features():
            f = self._mode.draw_at_queries(Xq, check_n_samples(n_samples, minimum=1),
                                           prediction_generator(self, random_state),
                                           self.jitter)
        else:
            if not exact and not has_random_features(split_white_noise(self.kernel_)[0]):
                raise NotImplementedError(
                    f"sample_y in sparse mode draws latent functions through random "
                    f"features, which the kernel {self.kernel_} has no expansion into; fit "
                    "the exact mode (n_inducing=None, inducing_points=None), which draws "
                    "exactly at X for such kernels, or use a kernel with random features "
                    "(sums and products of RBF, Matern, RationalQuadratic, DotProduct and "
                    "ConstantKernel terms).")
            f = self.sample_functions(n_samples, random_state)(Xq)
        return to_numpy(self._mode.draw_probabilities(f))

    # ------------------------------------------------------------ likelihood

    def log_marginal_likelihood(self, theta=None, eval_gradient=False, clone_kernel=True):
        """Approximate log marginal likelihood of ``theta`` (GPML eq. 3.32 and Alg. 5.1).

        In sparse mode: the bound (ELBO) at the fitted ``q(u)`` and inducing points.

        Parameters
        ----------
        theta : array-like of shape (n_kernel_params,), default=None
            Log hyperparameters; None returns ``log_marginal_likelihood_value_``.  With
            several classes, the theta of one kernel (used for every problem) or of the
            ``CompoundKernel`` (problem by problem); the mean over problems is returned.
        eval_gradient : bool, default=False
            Also return the gradient (binary only).
        clone_kernel : bool, default=True
            False sets ``kernel_.theta`` to ``theta`` (the fitted posterior stays).

        Returns
        -------
        log_likelihood : float
        log_likelihood_gradient : ndarray of shape (n_kernel_params,), optional
        """
        check_is_fitted(self)
        if theta is None:
            if eval_gradient:
                raise ValueError("Gradient can only be evaluated for theta!=None")
            return self.log_marginal_likelihood_value_
        context = self._context(self._mode.theta.device, self._mode.theta.dtype,
                                X_train=self.X_train_)
        return self._mode.log_marginal_likelihood(
            context, np.asarray(theta, dtype=np.float64), eval_gradient, clone_kernel)


__all__ = ["PathwiseGPClassifier"]
