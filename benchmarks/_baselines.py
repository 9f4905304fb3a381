"""The peer models of the benchmarks, each defined once.

GPyTorch's exact GP (:class:`GPyTorchExactGP`), SGPR (:func:`gpytorch_sgpr`), SVGP
(:func:`gpytorch_svgp`, trained for classification by :func:`train_gpytorch_svgp`) and deep
GP (:func:`gpytorch_deep_gp`); BoTorch's pathwise draws (:func:`botorch_exact_gp`,
:func:`botorch_variational_gp`, :func:`botorch_paths`, :func:`botorch_draws`).  GPyTorch
and BoTorch are imported inside the functions, so that a script runs without them
(``_common.available`` says whether they are installed) and a cell that times another
method does not load them.  The baselines of our own making live with their family:
Adam for the inducing-point deep kernel process in ``dkp/_adam.py``, our SVGP engine with
Adam on ``q`` instead of natural steps in ``pathwise/_adam_q.py``.

Imported by the scripts after ``_common`` (which pins the threads); running it does nothing.
"""

import functools
import time

import _common as C
import numpy as np
import scipy.linalg
import torch

from _fits import classification_scores

# ---------------------------------------------------------------- GPyTorch exact GP


class GPyTorchExactGP:
    """A GPyTorch ``ExactGP`` (zero mean, ``ScaleKernel(RBFKernel(ard))``, Gaussian noise)
    fitted by ``torch.optim.LBFGS`` from the sklearn kernel's start (output scale, length
    scales and noise 1) on ``y`` standardised; sklearn-like ``predict`` and ``kernel_``.
    ``nfev`` counts the loss evaluations."""

    def __init__(self, X, y, max_iter):
        import gpytorch

        class ExactGP(gpytorch.models.ExactGP):
            def __init__(self, train_x, train_y, likelihood):
                super().__init__(train_x, train_y, likelihood)
                self.mean_module = gpytorch.means.ZeroMean()
                self.covar_module = gpytorch.kernels.ScaleKernel(
                    gpytorch.kernels.RBFKernel(ard_num_dims=train_x.shape[1]))

            def forward(self, x):
                return gpytorch.distributions.MultivariateNormal(self.mean_module(x),
                                                                 self.covar_module(x))

        self.gpytorch = gpytorch
        self.y_mean, self.y_std = float(np.mean(y)), float(np.std(y))
        train_x = torch.as_tensor(X, dtype=torch.float64)
        train_y = torch.as_tensor((y - self.y_mean) / self.y_std, dtype=torch.float64)
        likelihood = gpytorch.likelihoods.GaussianLikelihood().to(torch.float64)
        model = ExactGP(train_x, train_y, likelihood).to(torch.float64)
        model.covar_module.outputscale = 1.0
        model.covar_module.base_kernel.lengthscale = torch.ones(1, X.shape[1])
        likelihood.noise = 1.0  # the same initial values as the sklearn kernel
        model.train()
        likelihood.train()
        mll = gpytorch.mlls.ExactMarginalLogLikelihood(likelihood, model)
        optimizer = torch.optim.LBFGS(model.parameters(), lr=1.0, max_iter=max_iter,
                                      tolerance_grad=1e-5, tolerance_change=1e-9,
                                      line_search_fn="strong_wolfe")
        self.nfev = 0
        n = train_x.shape[0]

        def closure():
            optimizer.zero_grad()
            with self._settings():
                loss = -mll(model(train_x), train_y) * n  # sum, as in sklearn's LML
            loss.backward()
            self.nfev += 1
            return loss

        optimizer.step(closure)
        model.eval()
        likelihood.eval()
        self.model, self.likelihood = model, likelihood

    def _settings(self):
        from contextlib import ExitStack

        stack = ExitStack()
        stack.enter_context(self.gpytorch.settings.max_cholesky_size(10**7))
        stack.enter_context(self.gpytorch.settings.fast_computations(False, False, False))
        return stack

    def predict(self, X, return_std=False):
        with torch.no_grad(), self._settings():
            out = self.likelihood(self.model(torch.as_tensor(X, dtype=torch.float64)))
            mean = out.mean.numpy() * self.y_std + self.y_mean
            std = out.variance.sqrt().numpy() * self.y_std
        return (mean, std) if return_std else mean

    @property
    def kernel_(self):
        from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel

        ck = self.model.covar_module
        return (ConstantKernel(float(ck.outputscale))
                * RBF(ck.base_kernel.lengthscale.detach().numpy().ravel())
                + WhiteKernel(float(self.likelihood.noise)))


# ---------------------------------------------------------------- GPyTorch SGPR


def gpytorch_sgpr(X, y, Z, amplitude, length_scale, noise, learn_z=False):
    """GPyTorch's SGPR (``ExactGP`` + ``InducingPointKernel``, zero mean) at the given
    starting values, in training mode: ``(model, likelihood, mll, train_x, train_y)``.
    ``model.base_covar`` is its ``ScaleKernel(RBFKernel(ard))``."""
    import gpytorch

    class SGPR(gpytorch.models.ExactGP):
        def __init__(self, train_x, train_y, likelihood):
            super().__init__(train_x, train_y, likelihood)
            self.mean_module = gpytorch.means.ZeroMean()
            self.base_covar = gpytorch.kernels.ScaleKernel(
                gpytorch.kernels.RBFKernel(ard_num_dims=train_x.shape[1]))
            self.covar_module = gpytorch.kernels.InducingPointKernel(
                self.base_covar, inducing_points=torch.as_tensor(Z).clone(),
                likelihood=likelihood)

        def forward(self, x):
            return gpytorch.distributions.MultivariateNormal(self.mean_module(x),
                                                             self.covar_module(x))

    train_x, train_y = torch.as_tensor(X), torch.as_tensor(y)
    likelihood = gpytorch.likelihoods.GaussianLikelihood()
    model = SGPR(train_x, train_y, likelihood)
    model.base_covar.outputscale = amplitude
    model.base_covar.base_kernel.lengthscale = torch.as_tensor(
        np.asarray(length_scale, float)).reshape(1, -1)
    likelihood.noise = noise
    model.covar_module.inducing_points.requires_grad_(learn_z)
    model.train()
    likelihood.train()
    mll = gpytorch.mlls.ExactMarginalLogLikelihood(likelihood, model)
    return model, likelihood, mll, train_x, train_y


# ---------------------------------------------------------------- GPyTorch SVGP


def gpytorch_svgp(inducing, *, ard_dims=None, mean="zero"):
    """GPyTorch's whitened SVGP (``ApproximateGP`` + ``VariationalStrategy`` with learned
    inducing locations, ``CholeskyVariationalDistribution``) on ``inducing`` (a tensor),
    with ``ScaleKernel(RBFKernel(ard_num_dims=ard_dims))`` and a zero or constant mean."""
    import gpytorch

    class SVGP(gpytorch.models.ApproximateGP):
        def __init__(self, inducing):
            q = gpytorch.variational.CholeskyVariationalDistribution(inducing.shape[0])
            strategy = gpytorch.variational.VariationalStrategy(
                self, inducing, q, learn_inducing_locations=True)
            super().__init__(strategy)
            self.mean_module = (gpytorch.means.ZeroMean() if mean == "zero"
                                else gpytorch.means.ConstantMean())
            self.covar_module = gpytorch.kernels.ScaleKernel(
                gpytorch.kernels.RBFKernel(ard_num_dims=ard_dims))

        def forward(self, x):
            return gpytorch.distributions.MultivariateNormal(self.mean_module(x),
                                                             self.covar_module(x))

    return SVGP(inducing)


def gpytorch_svgp_classifier(Xtr, Z, length_scale, ard=False, outputscale=None, frozen=False):
    """:func:`gpytorch_svgp` (zero mean) with ``BernoulliLikelihood`` and
    ``VariationalELBO``, at ``length_scale`` (one per feature with ``ard``) and
    ``outputscale`` (None: GPyTorch's start); ``frozen``: the kernel is not trained."""
    import gpytorch

    model = gpytorch_svgp(torch.as_tensor(Z).clone(), ard_dims=Xtr.shape[1] if ard else None)
    model.covar_module.base_kernel.lengthscale = length_scale
    if outputscale is not None:
        model.covar_module.outputscale = outputscale
    if frozen:
        for parameter in model.covar_module.parameters():
            parameter.requires_grad_(False)
    likelihood = gpytorch.likelihoods.BernoulliLikelihood()
    elbo = gpytorch.mlls.VariationalELBO(likelihood, model, num_data=len(Xtr))
    return model, likelihood, elbo


def train_gpytorch_svgp(Xtr, ytr, Xte, yte, Z, epochs, batch, lr, seed=0, *, device="cpu",
                        **kernel):
    """The binary SVGP classifier trained by Adam on every trainable parameter, ``epochs``
    passes of mini-batches of ``batch`` rows: (seconds per epoch, test scores after each
    epoch, ``_fits.classification_scores``).  ``kernel``: the options of
    :func:`gpytorch_svgp_classifier` (default: length scale sqrt(d))."""
    kernel.setdefault("length_scale", float(np.sqrt(Xtr.shape[1])))
    model, likelihood, elbo = gpytorch_svgp_classifier(Xtr, Z, **kernel)
    model, likelihood = model.to(device), likelihood.to(device)  # the same device as ours
    trainable = [p for p in list(model.parameters()) + list(likelihood.parameters())
                 if p.requires_grad]
    optimizer = torch.optim.Adam(trainable, lr=lr)
    X = torch.as_tensor(Xtr, device=device)
    y = torch.as_tensor(ytr, dtype=torch.float64, device=device)
    generator = torch.Generator().manual_seed(seed)
    seconds, per_epoch = [], []
    for _ in range(epochs):
        C.sync(device)
        start = time.perf_counter()
        order = torch.randperm(len(X), generator=generator).to(device)
        for i in range(0, len(X), batch):
            rows = order[i:i + batch]
            optimizer.zero_grad()
            loss = -elbo(model(X[rows]), y[rows])
            loss.backward()
            optimizer.step()
        C.sync(device)
        seconds.append(time.perf_counter() - start)
        model.eval()
        likelihood.eval()
        with torch.no_grad():
            p = likelihood(model(torch.as_tensor(Xte, device=device))).mean.cpu().numpy()
        model.train()
        likelihood.train()
        per_epoch.append(classification_scores(yte, np.column_stack([1 - p, p]),
                                               np.array([0, 1])))
    return seconds, per_epoch


# ---------------------------------------------------------------- GPyTorch deep GP


def gpytorch_deep_gp(Xt, n_tasks, dtype, *, n_inducing, hidden):
    """GPyTorch's two-layer deep GP (``DeepGPLayer`` s of ``hidden`` units, Matern 3/2 ARD,
    a linear mean in the hidden layer, ``MultitaskGaussianLikelihood`` with per-task noise
    0.1), ``n_inducing`` inducing inputs: a random subset of ``Xt`` in the hidden layer,
    standard normal in the last (torch's global generator)."""
    import gpytorch
    from gpytorch.distributions import MultivariateNormal
    from gpytorch.kernels import MaternKernel, ScaleKernel
    from gpytorch.means import ConstantMean, LinearMean
    from gpytorch.models.deep_gps import DeepGP, DeepGPLayer
    from gpytorch.variational import CholeskyVariationalDistribution, VariationalStrategy

    class Layer(DeepGPLayer):
        def __init__(self, inducing, linear_mean):
            n_units, m, d_in = inducing.shape
            batch = torch.Size([n_units])
            variational = CholeskyVariationalDistribution(m, batch_shape=batch)
            strategy = VariationalStrategy(self, inducing, variational,
                                           learn_inducing_locations=True)
            super().__init__(strategy, d_in, n_units)
            self.mean_module = (LinearMean(d_in, batch_shape=batch) if linear_mean
                                else ConstantMean(batch_shape=batch))
            self.covar_module = ScaleKernel(
                MaternKernel(nu=1.5, batch_shape=batch, ard_num_dims=d_in), batch_shape=batch)
            self.covar_module.outputscale = 1.0
            self.covar_module.base_kernel.lengthscale = 1.0

        def forward(self, x):
            return MultivariateNormal(self.mean_module(x), self.covar_module(x))

    class GPyTorchDeepGP(DeepGP):
        def __init__(self):
            super().__init__()
            m = min(n_inducing, Xt.shape[0])
            subset = torch.randperm(Xt.shape[0])[:m]
            self.hidden = Layer(Xt[subset].expand(hidden, -1, -1).clone(), True)
            self.last = Layer(torch.randn(n_tasks, m, hidden, dtype=Xt.dtype), False)
            self.likelihood = gpytorch.likelihoods.MultitaskGaussianLikelihood(
                num_tasks=n_tasks, has_global_noise=False)
            self.likelihood.task_noises = torch.full((n_tasks,), 0.1)

        def forward(self, x):
            return self.last(self.hidden(x))

    return GPyTorchDeepGP().to(dtype)


# ---------------------------------------------------------------- BoTorch pathwise draws


def botorch_exact_gp(X, y, *, noise, nu, length_scale, amplitude, device="cpu"):
    """BoTorch's ``SingleTaskGP`` with fixed noise ``noise``, zero mean and
    ``ScaleKernel(MaternKernel(nu))`` at the given hyperparameters, float64, in eval mode."""
    from botorch.models import SingleTaskGP
    from gpytorch.kernels import MaternKernel, ScaleKernel

    train_X = torch.as_tensor(X, dtype=torch.float64, device=device)
    train_Y = torch.as_tensor(y, dtype=torch.float64, device=device).unsqueeze(-1)
    train_Yvar = torch.full_like(train_Y, noise)
    covar = ScaleKernel(MaternKernel(nu=nu, ard_num_dims=None))
    model = SingleTaskGP(train_X, train_Y, train_Yvar=train_Yvar, covar_module=covar,
                         outcome_transform=None).to(device=device, dtype=torch.float64)
    model.covar_module.base_kernel.lengthscale = length_scale
    model.covar_module.outputscale = amplitude
    model.mean_module.constant = 0.0
    model.eval()
    return model


def botorch_variational_gp(X, Z, q_mu, q_sqrt, amplitude, length_scale, device="cpu"):
    """``SingleTaskVariationalGP`` carrying Z, the kernel and q(u) = N(q_mu, q_sqrt q_sqrt^T).

    GPyTorch's ``VariationalStrategy`` is whitened: u = L u_w with L the Cholesky factor of
    Kzz that BoTorch's pathwise update uses, so we load mean L^-1 q_mu and the lower
    Cholesky factor of (L^-1 q_sqrt)(L^-1 q_sqrt)^T (a QR of (L^-1 q_sqrt)^T).  The
    strategy is marked initialised, or its first call would overwrite q(u)."""
    from botorch.models import SingleTaskVariationalGP
    from gpytorch.kernels import RBFKernel, ScaleKernel

    d = X.shape[1]
    model = SingleTaskVariationalGP(
        torch.as_tensor(X), inducing_points=torch.as_tensor(Z).clone(),
        covar_module=ScaleKernel(RBFKernel(ard_num_dims=d)), learn_inducing_points=False)
    inner = model.model
    inner.covar_module.outputscale = amplitude
    inner.covar_module.base_kernel.lengthscale = torch.as_tensor(
        np.asarray(length_scale, float)).reshape(1, -1)
    inner.mean_module.constant = 0.0
    strategy = inner.variational_strategy
    with torch.no_grad():
        prior = strategy(torch.as_tensor(Z), prior=True).lazy_covariance_matrix
        L = strategy._cholesky_factor(prior).to_dense().numpy()
        M = scipy.linalg.solve_triangular(L, q_sqrt, lower=True)
        _, r = np.linalg.qr(M.T)
        chol = r.T * np.sign(np.diag(r))[None, :]
        dist = strategy._variational_distribution
        dist.variational_mean.copy_(torch.as_tensor(
            scipy.linalg.solve_triangular(L, np.ravel(q_mu), lower=True)))
        dist.chol_variational_covar.copy_(torch.as_tensor(chol))
        strategy.variational_params_initialized.fill_(1)
    model.eval()
    return model.to(device)


def botorch_paths(model, S, F):
    """BoTorch's ``draw_matheron_paths`` with ``S`` paths on ``F`` random features (seeded
    through torch's global generator by the caller), under ``torch.no_grad()``."""
    from botorch.sampling.pathwise import draw_kernel_feature_paths, draw_matheron_paths

    with torch.no_grad():
        return draw_matheron_paths(
            model, sample_shape=torch.Size([S]),
            prior_sampler=functools.partial(draw_kernel_feature_paths, num_features=F))


def botorch_draws(model, Xq, S, F, seed, device="cpu"):
    """(paths, (S, n*) latent draws at ``Xq``) by :func:`botorch_paths`, seeded by
    ``torch.manual_seed(seed)``."""
    torch.manual_seed(seed)
    paths = botorch_paths(model, S, F)
    with torch.no_grad():
        return paths, paths(torch.as_tensor(Xq, device=device))
