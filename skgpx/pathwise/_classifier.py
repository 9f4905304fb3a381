"""PathwiseGPClassifier: scikit-learn's Laplace GP classifier in torch, with latent draws."""

from numbers import Integral, Real

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassifierMixin, clone
from sklearn.gaussian_process.kernels import RBF, CompoundKernel, ConstantKernel, Kernel
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted, validate_data

from .._base import (
    Interval, StrOptions, TorchEstimatorMixin, array_bytes, check_magnitude, check_memory,
    draw_seed, encode_classes, rows_per_chunk, to_numpy, to_probabilities,
)
from ..kernels import ObjectRows, TorchKernel
from ._classifier_sparse import check_sparse_options, fit_sparse, is_sparse, sparse_bound
from ._laplace import LINKS, latent_moments, positive_probability
from ._laplace_draws import LaplaceDrawsMixin
from ._laplace_fit import LaplaceFitMixin, LaplaceProblems
from ._laplace_views import (
    LaplaceBinaryView, LaplaceEnsembleView, ovo_scores, probabilities_only, select_problems,
)


class PathwiseGPClassifier(LaplaceFitMixin, LaplaceDrawsMixin, ClassifierMixin,
                           TorchEstimatorMixin, BaseEstimator):
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

    Parameters
    ----------
    kernel : kernel instance, default=None
        The latent function's kernel; None means ``ConstantKernel(1.0, "fixed") *
        RBF(1.0, "fixed")`` as in scikit-learn (no hyperparameter to fit).  Not a
        ``CompoundKernel``.
    optimizer : "fmin_l_bfgs_b", "adam", callable or None, default="fmin_l_bfgs_b"
        Maximises the approximate log marginal likelihood over ``theta`` as scikit-learn
        does (scipy's L-BFGS-B with its default options).  A callable has scikit-learn's
        signature ``optimizer(obj_func, initial_theta, bounds) -> (theta_opt, func_min)``.
        None keeps the kernel's hyperparameters.  ``"adam"`` belongs to the sparse mode.
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
    n_inducing, inducing_points, optimize_inducing, max_iter, tol, learning_rate, \
natgrad_step, minibatch_size, n_quadrature, n_mc_samples
        Options of the sparse variational mode (``n_inducing`` or ``inducing_points``
        set), validated here; that mode lands with the SVGP engine.
    n_features : int, default=1024
        Random features of a prior draw in :meth:`sample_functions` (even for
        ``"sincos"``).
    feature_map : {"sincos", "cosine"}, default="sincos"
    jitter : float, default=1e-8
        Sparse mode's jitter (validated here).
    batch_size : int, default=8192
        Query rows per chunk in prediction.
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
        The fitted kernel (binary), or a ``CompoundKernel`` of one fitted kernel per
        binary problem (multi-class).
    log_marginal_likelihood_value_ : float
        The approximate log marginal likelihood of ``kernel_.theta`` (the mean over the
        binary problems for several classes).
    base_estimator_ : LaplaceBinaryView or LaplaceEnsembleView
        The binary problem (two classes), else a view with one binary problem per class
        or pair in ``estimators_``, as scikit-learn's ``OneVsRestClassifier`` and
        ``OneVsOneClassifier`` hold them.
    X_train_ : ndarray of shape (n_samples, n_features) or list of object
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

    References
    ----------
    .. [1] C. E. Rasmussen and C. K. I. Williams, "Gaussian Processes for Machine
       Learning", MIT Press, 2006.
    .. [2] J. T. Wilson et al., "Pathwise conditioning of Gaussian processes", JMLR 22, 2021.

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
        "optimizer": [StrOptions({"fmin_l_bfgs_b", "adam"}), callable, None],
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

    def __init__(self, kernel=None, *, optimizer="fmin_l_bfgs_b", n_restarts_optimizer=0,
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

    def _validate_X(self, X, reset, y="no_validation"):
        kw = dict(ensure_2d=False, dtype=None) if self._structured() else dict(dtype=np.float64)
        if reset:
            return validate_data(self, X, y, multi_output=False, ensure_min_samples=2, **kw)
        return validate_data(self, X, reset=False, **kw)

    def fit(self, X, y):
        """Fit the Laplace approximation (and the kernel hyperparameters).

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
        NotImplementedError
            In sparse mode (``n_inducing`` or ``inducing_points``), for now.
        skgpx.InsufficientMemoryError
            If the ``n x n`` matrices cannot fit (before any work).
        """
        self._validate_params()
        self._check_options()
        X, y = self._validate_X(X, reset=True, y=y)
        classes, codes = encode_classes(self, y)
        device, dtype = self._fit_device_dtype()
        structured = self._structured()
        if not structured:
            check_magnitude(X, "X", dtype)
        kernel = (ConstantKernel(1.0, constant_value_bounds="fixed")
                  * RBF(1.0, length_scale_bounds="fixed")) if self.kernel is None \
            else clone(self.kernel)
        torch_kernel = TorchKernel(kernel)
        if not structured:
            torch_kernel.check_n_features(X.shape[1])
        if is_sparse(self):
            return self._fit_sparse(kernel, X, classes, codes, device, dtype)
        self._svgp = None
        groups = self._problem_groups(codes, len(classes))
        self._check_fit_memory(groups, len(codes), dtype, device)
        X_t = (ObjectRows.of(np.copy(X), dtype, device) if structured
               else self._as_tensor(X, device, dtype))
        problems = []
        for rows, labels in groups:
            index = rows if structured or rows is None else torch.as_tensor(rows,
                                                                            device=device)
            Xg = X_t if rows is None else X_t[index]
            Y = self._as_tensor(np.stack(labels).astype(np.float64), device, dtype)
            problems.append(LaplaceProblems(torch_kernel, Xg, Y, self.link,
                                            self.max_iter_predict, self.warm_start))
        n_problems = sum(p.n_problems for p in problems)
        starts = self._starts(kernel, n_problems)
        history = []
        thetas, lmls = self._optimise(problems, kernel, starts, history)
        kernels = [kernel.clone_with_theta(theta) for theta in thetas]
        for k in kernels:
            if self.optimizer is not None and kernel.n_dims > 0:
                k._check_bounds_params()
        theta_t = torch.as_tensor(np.asarray(thetas, dtype=np.float64).reshape(n_problems, -1),
                                  dtype=dtype, device=device)
        modes, offset = [], 0
        for p in problems:
            members = list(range(p.n_problems))
            _, mode = p.mode(members, theta_t[offset: offset + p.n_problems])
            modes.append(mode)
            offset += p.n_problems
        if lmls is None:  # no optimisation: scikit-learn's lml at the kernel's theta
            lmls = np.concatenate([m.lml.cpu().numpy() for m in modes]).astype(np.float64)
            history.append(-float(np.sum(lmls)))
        self.classes_, self.n_classes_ = classes, len(classes)
        self.X_train_ = np.copy(X) if self.copy_X_train else X
        self._kernels, self._lml_values = kernels, np.asarray(lmls, dtype=np.float64)
        self.kernel_ = kernels[0] if len(kernels) == 1 else CompoundKernel(kernels)
        self.log_marginal_likelihood_value_ = np.float64(np.mean(lmls))
        self.objective_history_ = [float(v) for v in history]
        self.n_iter_ = len(history)
        self.device_, self.dtype_ = device, self.dtype
        self._torch_kernel, self._thetas = torch_kernel, theta_t
        self._groups = [(p.X, p.Y, mode) for p, mode in zip(problems, modes)]
        self._shift = None if structured else X_t.mean(0)
        self._prediction_seed = draw_seed(check_random_state(self.random_state))
        self.base_estimator_ = self._views()
        return self

    def _fit_sparse(self, kernel, X, classes, codes, device, dtype):
        rng = check_random_state(self.random_state)
        mode = fit_sparse(self, kernel, X, codes, len(classes), rng, device, dtype)
        self.classes_, self.n_classes_ = classes, len(classes)
        self.X_train_ = np.copy(X) if self.copy_X_train else X
        self.kernel_ = mode.kernel_
        self._kernels = [mode.kernel_]
        self.log_marginal_likelihood_value_ = np.float64(mode.elbo)
        self.objective_history_ = [-float(v) for v in mode.history]
        self.n_iter_ = max(1, int(mode.n_iter))
        self.inducing_points_ = to_numpy(mode.Z)
        self.q_mu_ = to_numpy(mode.q_mu)
        self.q_sqrt_ = to_numpy(mode.q_sqrt)
        self.jitter_ = float(mode.jitter_)
        self.device_, self.dtype_ = device, self.dtype
        self._svgp, self._codes = mode, codes
        self._torch_kernel, self._thetas = mode.torch_kernel, mode.theta[None, :]
        self._shift = self._as_tensor(X, device, dtype).mean(0)
        self._prediction_seed = draw_seed(rng)
        return self

    def _problem_groups(self, codes, n_classes):
        """Binary problems as ``(rows, [labels...])`` groups sharing their rows."""
        if n_classes == 2:
            return [(None, [codes])]
        if self.multi_class == "one_vs_rest":
            return [(None, [codes == c for c in range(n_classes)])]
        groups = []
        for i in range(n_classes):
            for j in range(i + 1, n_classes):
                rows = np.flatnonzero((codes == i) | (codes == j))
                groups.append((rows, [codes[rows] == j]))
        return groups

    def _check_fit_memory(self, groups, n_rows, dtype, device):
        # K, B/L and the Newton temporaries per problem; when fitting also R, C and G, and
        # one problem's kernel graph at a time
        per_problem = 8 if self.optimizer is not None else 4
        largest = max(len(labels) * (n_rows if rows is None else len(rows)) ** 2
                      for rows, labels in groups)
        check_memory(
            per_problem * array_bytes(largest, dtype=dtype),
            what=f"PathwiseGPClassifier (exact Laplace mode) on {n_rows} rows "
                 f"({per_problem} dense n x n matrices per binary problem)",
            way_out="use the sparse mode (n_inducing=256), fewer rows, or a GPU "
                    "(device='cuda')", device=device)

    def _views(self):
        if self.n_classes_ == 2:
            return LaplaceBinaryView(self, 0, self.classes_)
        if self.multi_class == "one_vs_rest":
            views = [LaplaceBinaryView(self, c, [0, 1]) for c in range(self.n_classes_)]
        else:
            n = self.n_classes_
            pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
            views = [LaplaceBinaryView(self, k, self.classes_[list(pair)])
                     for k, pair in enumerate(pairs)]
        return LaplaceEnsembleView(self.multi_class, views, self.classes_)

    def _posteriors(self):
        """The Gaussian posteriors of the latent functions, for the draws."""
        if self._svgp is not None:
            return [self._svgp.posterior(self._shift, self.n_features_in_)]
        return super()._posteriors()

    # ------------------------------------------------------------ prediction

    def _query(self, X):
        check_is_fitted(self)
        X = self._validate_X(X, reset=False)
        if self._structured():
            return ObjectRows.of(np.copy(X), self._thetas.dtype, self._thetas.device)
        check_magnitude(X, "X", self._thetas.dtype)
        return self._as_tensor(X, self._thetas.device, self._thetas.dtype)

    def _latent(self, Xq, problems=None):
        """Latent mean and variance (P, m) numpy of the binary problems at validated rows."""
        mean, var = self._latent_torch(Xq, problems)
        return to_numpy(mean), to_numpy(var)

    def _latent_torch(self, Xq, problems=None):
        if self._svgp is not None:
            with torch.no_grad():
                mean, var = self._svgp.latent_mean_and_variance(Xq)
            keep = slice(None) if problems is None else list(problems)
            return mean.T[keep], var.T[keep]
        means, variances, offset = [], [], 0
        for X_g, Y_g, mode in self._groups:
            members = [c for c in range(offset, offset + Y_g.shape[0])
                       if problems is None or c in problems]
            local = [c - offset for c in members]
            offset += Y_g.shape[0]
            if not members:
                continue
            sub = select_problems(mode, local)
            m = Xq.shape[0]
            step = rows_per_chunk(self.batch_size, len(members) * X_g.shape[0],
                                  self._thetas.device)
            mean = self._thetas.new_zeros(len(members), m)
            var = torch.zeros_like(mean)
            with torch.no_grad():
                for i in range(0, m, step):
                    rows = Xq[i: i + step]
                    cross = torch.stack([self._torch_kernel(X_g, rows, theta=self._thetas[c])
                                         for c in members])
                    diag = torch.stack([self._torch_kernel.diag(rows, self._thetas[c])
                                        for c in members])
                    mean[:, i: i + step], var[:, i: i + step] = latent_moments(sub, cross, diag)
            means.append(mean)
            variances.append(var)
        return torch.cat(means), torch.cat(variances)

    def _positive_probability(self, Xq, problems=None):
        mean, var = self._latent_torch(Xq, problems)
        return to_numpy(positive_probability(mean, var, self.link))

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
        if self._svgp is not None:
            with torch.no_grad():
                return to_probabilities(self._svgp.predict_proba(self._query(X)))
        p = self._positive_probability(self._query(X))
        if self.n_classes_ == 2:
            return np.stack([1.0 - p[0], p[0]], axis=1)
        return to_probabilities(torch.from_numpy(p.T.copy()))

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
            Xq = self._query(X)
            mean, var = self._latent_torch(Xq)
            confidences = to_numpy(positive_probability(mean, var, self.link)).T
            scores = ovo_scores(to_numpy(mean).T > 0, confidences, self.n_classes_)
            return self.classes_[scores.argmax(axis=1)]
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

    # ------------------------------------------------------------ likelihood

    def _problem_lml(self, problem, theta, eval_gradient):
        """Log marginal likelihood (and gradient) of one binary problem at ``theta``."""
        offset = 0
        for X_g, Y_g, mode in self._groups:
            if problem < offset + Y_g.shape[0]:
                local = problem - offset
                evaluator = LaplaceProblems(self._torch_kernel, X_g, Y_g, self.link,
                                            self.max_iter_predict, self.warm_start)
                evaluator.f_cache[local] = mode.f[local]
                values, grads = evaluator.objective([local], theta[None, :], eval_gradient)
                return np.float64(values[0]), None if grads is None else grads[0]
            offset += Y_g.shape[0]
        raise IndexError(problem)

    def log_marginal_likelihood(self, theta=None, eval_gradient=False, clone_kernel=True):
        """Approximate log marginal likelihood of ``theta`` (GPML eq. 3.32 and Alg. 5.1).

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
        theta = np.asarray(theta, dtype=np.float64)
        n_problems, n_dims = len(self._kernels), self._kernels[0].n_dims
        if self._svgp is not None:  # the bound, q(u) at its optimum for theta (Z fitted)
            result = sparse_bound(self, theta, eval_gradient)
            if not clone_kernel:
                self.kernel_.theta = theta
            return result
        if n_problems == 1:
            value, grad = self._problem_lml(0, theta, eval_gradient)
            thetas = [theta]
        else:
            if eval_gradient:
                raise NotImplementedError(
                    "Gradient of log-marginal-likelihood not implemented for multi-class GPC.")
            if theta.shape[0] == n_dims:
                thetas = [theta] * n_problems
            elif theta.shape[0] == n_dims * n_problems:
                thetas = np.split(theta, n_problems)
            else:
                raise ValueError("Shape of theta must be either %d or %d. Obtained theta with "
                                 "shape %d." % (n_dims, n_dims * n_problems, theta.shape[0]))
            value = np.float64(np.mean([self._problem_lml(c, t, False)[0]
                                        for c, t in enumerate(thetas)]))
        if not clone_kernel:
            for kernel, t in zip(self._kernels, thetas):
                kernel.theta = t
        return (value, grad) if eval_gradient else value


__all__ = ["PathwiseGPClassifier"]
