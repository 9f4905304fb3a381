"""Torch evaluation of scikit-learn kernel objects, and their spectral densities.

:class:`TorchKernel` mirrors the tree of a ``sklearn.gaussian_process.kernels`` object
and evaluates it in torch as a function of scikit-learn's ``theta`` (log of the free
hyperparameters, in the same order), so that autograd gives the gradients that
scikit-learn's ``eval_gradient`` gives.  Kernels without a torch port are evaluated by
scikit-learn in numpy (with their analytic theta gradient); they cannot be
differentiated with respect to the inputs.  Such kernels may take structured inputs
(strings, sequences, graphs: ``requires_vector_input`` False), which travel through the
torch code as :class:`ObjectRows`.

The closed-form stationary correlations (:func:`stationary_profile`) and the
squared-exponential spectral density (:func:`se_spectral_density`) serve more than one
family; the decomposition of a kernel into random-feature terms lives with the pathwise
family (``skgpx.pathwise._draws._spectra``).
"""

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch.autograd.function import once_differentiable
from scipy import special
from sklearn.gaussian_process import kernels as sk

__all__ = [
    "STATIONARY_PROFILES",
    "ObjectRows",
    "TorchKernel",
    "concatenate_rows",
    "default_kernel",
    "se_spectral_density",
    "split_white_noise",
    "squared_distance_profile_",
    "stationary_from_sklearn",
    "stationary_profile",
    "unit_stationary_kernel",
]


def default_kernel(fit=False):
    """scikit-learn's GPR default kernel.

    ``fit=False``: the prior of an unfitted model, ``ConstantKernel(1.0, "fixed") *
    RBF(1.0, "fixed")``; ``fit=True``: what ``fit`` starts from, ``ConstantKernel() *
    RBF()`` with the default bounds, so that its hyperparameters are optimised.
    """
    if fit:
        return sk.ConstantKernel() * sk.RBF()
    return sk.ConstantKernel(1.0, constant_value_bounds="fixed") * sk.RBF(
        1.0, length_scale_bounds="fixed"
    )


def _distance(X, Y):
    # Exact differences (no |x|^2 + |y|^2 - 2xy cancellation), and a zero gradient at
    # coincident points rather than the NaN of d sqrt(r^2)/dr.
    return torch.cdist(X, Y, compute_mode="donot_use_mm_for_euclid_dist")


class _MaternBessel(torch.autograd.Function):
    """g(z) = z^nu K_nu(z) for general nu, with dg/dz = -z^nu K_{nu-1}(z)."""

    @staticmethod
    def forward(ctx, z, nu):
        z_np = z.detach().cpu().numpy()
        safe = np.where(z_np > 0, z_np, 1.0)
        value = np.where(
            z_np > 0,
            safe**nu * special.kv(nu, safe),
            2.0 ** (nu - 1.0) * special.gamma(nu),
        )
        slope = np.where(z_np > 0, -(safe**nu) * special.kv(nu - 1.0, safe), 0.0)
        ctx.save_for_backward(torch.as_tensor(slope, dtype=z.dtype, device=z.device))
        return torch.as_tensor(value, dtype=z.dtype, device=z.device)

    @staticmethod
    def backward(ctx, grad):
        (slope,) = ctx.saved_tensors
        return grad * slope, None


@dataclass(frozen=True)
class ObjectRows:
    """Rows of structured inputs standing in for the ``(n, d)`` tensor of input rows.

    A kernel whose ``requires_vector_input`` is False (a string or sequence kernel) is
    evaluated by scikit-learn on the objects themselves; the exact GP code only counts,
    slices and concatenates its input rows, and reads the dtype and device of the kernel
    values from them, which this class provides.

    Parameters
    ----------
    values : ndarray of shape (n,) or (n, ...)
        The validated inputs (any dtype, objects included).
    anchor : Tensor of shape (0,)
        An empty tensor of the kernel values' dtype and device (moved with the other
        tensors when a fitted estimator is pickled or loaded elsewhere).
    """

    values: np.ndarray
    anchor: torch.Tensor

    @classmethod
    def of(cls, values, dtype, device):
        return cls(values, torch.empty(0, dtype=dtype, device=device))

    @property
    def shape(self):
        return (len(self.values), 1)

    @property
    def dtype(self):
        return self.anchor.dtype

    @property
    def device(self):
        return self.anchor.device

    def __len__(self):
        return len(self.values)

    def __getitem__(self, index):
        if isinstance(index, torch.Tensor):
            index = index.cpu().numpy()
        return ObjectRows(self.values[index], self.anchor)

    def new_zeros(self, *shape):
        return self.anchor.new_zeros(*shape)


def concatenate_rows(first, second):
    """``[first; second]`` for tensors of rows or :class:`ObjectRows`."""
    if isinstance(first, ObjectRows):
        return ObjectRows(np.concatenate([first.values, second.values]), first.anchor)
    return torch.cat([first, second])


def _numpy_rows(X):
    return X.values if isinstance(X, ObjectRows) else X.detach().cpu().numpy()


class _SklearnKernelFunction(torch.autograd.Function):
    """Evaluate an unported scikit-learn kernel; gradient w.r.t. its theta only."""

    @staticmethod
    def forward(ctx, theta, X, Y, kernel):
        kernel = kernel.clone_with_theta(theta.detach().cpu().numpy())
        X_np = _numpy_rows(X)
        if Y is None and theta.requires_grad and theta.numel():
            K, gradient = kernel(X_np, eval_gradient=True)
            ctx.save_for_backward(torch.as_tensor(gradient, dtype=X.dtype, device=X.device))
        else:
            K = kernel(X_np, None if Y is None else _numpy_rows(Y))
            ctx.save_for_backward(None)
        return torch.as_tensor(K, dtype=X.dtype, device=X.device)

    @staticmethod
    def backward(ctx, grad):
        (gradient,) = ctx.saved_tensors
        if gradient is None:
            return None, None, None, None
        return torch.einsum("ij,ijp->p", grad, gradient), None, None, None


# --------------------------------------------------------------------------- nodes


class _Node:
    """One sklearn kernel in the tree; reads its free hyperparameters from theta."""

    def __init__(self, kernel, offset):
        self.kernel = kernel
        self.offset = offset
        self.n_free = len(kernel.theta)

    def values(self, theta):
        """Hyperparameter values (natural scale) as tensors, by name."""
        out, pos = {}, self.offset
        for hp in self.kernel.hyperparameters:
            if hp.fixed:
                value = torch.as_tensor(
                    np.atleast_1d(getattr(self.kernel, hp.name)).astype(np.float64),
                    dtype=theta.dtype,
                    device=theta.device,
                )
            else:
                value = torch.exp(theta[pos : pos + hp.n_elements])
                pos += hp.n_elements
            out[hp.name] = value
        return out

    def check_n_features(self, n_features):
        # scikit-learn reads a length-scale list of one entry as isotropic (its
        # ``anisotropic`` is ``np.iterable(l) and len(l) > 1``): one scale for all features
        length_scale = getattr(self.kernel, "length_scale", None)
        if length_scale is not None and np.ndim(length_scale) == 1 and len(length_scale) > 1:
            if len(length_scale) != n_features:
                raise ValueError(
                    f"Anisotropic kernel {self.kernel} has {len(length_scale)} length "
                    f"scales but X has {n_features} features."
                )


class _Stationary(_Node):
    def scaled_distance(self, X, Y, theta):
        length_scale = self.values(theta)["length_scale"]
        Xs = X / length_scale
        return _distance(Xs, Xs if Y is None else Y / length_scale)

    def diag(self, X, theta):
        return torch.ones(X.shape[0], dtype=X.dtype, device=X.device)


_MATERN_SCALE = {"matern32": math.sqrt(3.0), "matern52": math.sqrt(5.0)}


def _matern_values_(z, e, name):
    """The Matérn 3/2 or 5/2 correlation ``(1 + z) e`` or ``(1 + z + z^2 / 3) e`` at
    ``z = sqrt(2 nu) r`` given ``e = exp(-z)``, written over ``z``."""
    if name == "matern52":
        z.add_(z * z / 3.0)
    return z.add_(1.0).mul_(e)


def squared_distance_profile_(d, name):
    """``k`` and its slope in ``d`` at squared scaled distances ``d = r^2``, for the RBF
    and the Matérn 3/2 and 5/2 profiles.

    Returns ``(k, slope, factor)`` with ``dk/dd = factor * slope``: ``-k / 2`` (``slope``
    is ``k`` itself), ``-3/2 e^{-sqrt3 r}`` or ``-5/6 (1 + sqrt5 r) e^{-sqrt5 r}``, all
    finite at ``d = 0``.  ``d`` is overwritten: ``k`` is its storage.  Negative ``d`` (the
    round-off of ``|x|^2 + |y|^2 - 2 x.y``) counts as zero.
    """
    d.clamp_min_(0.0)
    if name == "rbf":
        k = d.mul_(-0.5).exp_()
        return k, k, -0.5
    z = d.sqrt_().mul_(_MATERN_SCALE[name])  # sqrt(2 nu) r
    e = torch.exp(-z)
    if name == "matern32":
        return _matern_values_(z, e, name), e, -1.5
    slope = (z + 1.0).mul_(e)
    return _matern_values_(z, e, name), slope, -5.0 / 6.0


class _Profile(torch.autograd.Function):
    """``k(r)`` with a hand-written derivative: one exponential and in-place arithmetic,
    about half the memory traffic of the composed operations (kernel evaluation
    dominates the cost of a sparse variational layer)."""

    @staticmethod
    def forward(ctx, r, name):
        if name in ("rbf", "matern12"):
            # the output is saved as is (no copy): autograd's version counter refuses a
            # backward pass if anything changed it in place
            e = torch.exp(-0.5 * r * r) if name == "rbf" else torch.exp(-r)
            ctx.save_for_backward(r, e)
            ctx.name = name
            return e
        z = r * _MATERN_SCALE[name]
        e = torch.exp(-z)
        ctx.save_for_backward(r, e)
        ctx.name = name
        return _matern_values_(z, e, name)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        r, e = ctx.saved_tensors
        name = ctx.name
        if name == "matern12":  # d/dr exp(-r)
            return e.mul(grad).neg_(), None
        if name == "rbf":  # -r exp(-r^2/2)
            return e.mul(r).mul_(grad).neg_(), None
        if name == "matern32":  # -3 r exp(-sqrt(3) r)
            return e.mul(r).mul_(grad).mul_(-3.0), None
        # Matern 5/2: -(5/3) r (1 + sqrt(5) r) exp(-sqrt(5) r)
        return (r * math.sqrt(5.0)).add_(1.0).mul_(r).mul_(e).mul_(grad).mul_(-5.0 / 3.0), None


def stationary_profile(r, name):
    """Correlation ``k(r)`` of a closed-form stationary kernel at scaled distance ``r``.

    ``name`` is one of :data:`STATIONARY_PROFILES`: ``"matern12"`` (``exp(-r)``),
    ``"matern32"`` (``(1 + sqrt(3) r) exp(-sqrt(3) r)``), ``"matern52"`` or ``"rbf"``
    (``exp(-r^2 / 2)``).  Differentiable in ``r`` (twice through autograd only for
    the composed forms, which this function does not use).
    """
    if name not in STATIONARY_PROFILES:
        raise ValueError(f"Unknown stationary kernel {name!r}; use one of {STATIONARY_PROFILES}.")
    return _Profile.apply(r, name)


def se_spectral_density(omega, length_scale):
    """``sqrt(2 pi) l exp(-omega^2 l^2 / 2)``: the spectral density of the unit-variance
    squared-exponential kernel in one dimension (``k(0) = int c(omega) d omega / 2 pi = 1``)."""
    return math.sqrt(2 * math.pi) * length_scale * torch.exp(-0.5 * (omega * length_scale) ** 2)


STATIONARY_PROFILES = ("matern12", "matern32", "matern52", "rbf")
_MATERN_NAMES = {0.5: "matern12", 1.5: "matern32", 2.5: "matern52", np.inf: "rbf"}


class _RBF(_Stationary):
    def __call__(self, X, Y, theta):
        return stationary_profile(self.scaled_distance(X, Y, theta), "rbf")


class _Matern(_Stationary):
    def __call__(self, X, Y, theta):
        r, nu = self.scaled_distance(X, Y, theta), self.kernel.nu
        if nu in _MATERN_NAMES:
            return stationary_profile(r, _MATERN_NAMES[nu])
        z = math.sqrt(2.0 * nu) * r
        return _MaternBessel.apply(z, float(nu)) * (2.0 ** (1.0 - nu) / special.gamma(nu))


class _RationalQuadratic(_Stationary):
    def __call__(self, X, Y, theta):
        alpha = self.values(theta)["alpha"]
        r2 = self.scaled_distance(X, Y, theta) ** 2
        return (1.0 + r2 / (2.0 * alpha)) ** (-alpha)


class _ExpSineSquared(_Stationary):
    def __call__(self, X, Y, theta):
        values = self.values(theta)
        d = _distance(X, X if Y is None else Y)
        s = torch.sin(math.pi * d / values["periodicity"]) / values["length_scale"]
        return torch.exp(-2.0 * s**2)

    def check_n_features(self, n_features):
        pass


class _Constant(_Node):
    def __call__(self, X, Y, theta):
        m = X.shape[0] if Y is None else Y.shape[0]
        c = self.values(theta)["constant_value"]
        return c * torch.ones(X.shape[0], m, dtype=X.dtype, device=X.device)

    def diag(self, X, theta):
        return self.values(theta)["constant_value"] * torch.ones(
            X.shape[0], dtype=X.dtype, device=X.device
        )


class _White(_Node):
    def __call__(self, X, Y, theta):
        level = self.values(theta)["noise_level"]
        if Y is None:
            return level * torch.eye(X.shape[0], dtype=X.dtype, device=X.device)
        return torch.zeros(X.shape[0], Y.shape[0], dtype=X.dtype, device=X.device)

    def diag(self, X, theta):
        return self.values(theta)["noise_level"] * torch.ones(
            X.shape[0], dtype=X.dtype, device=X.device
        )


class _DotProduct(_Node):
    def __call__(self, X, Y, theta):
        sigma_0 = self.values(theta)["sigma_0"]
        return sigma_0**2 + X @ (X if Y is None else Y).T

    def diag(self, X, theta):
        return self.values(theta)["sigma_0"] ** 2 + (X**2).sum(1)


class _Fallback(_Node):
    """Any other kernel: evaluated by scikit-learn in numpy."""

    def _theta(self, theta):
        return theta[self.offset : self.offset + self.n_free]

    def __call__(self, X, Y, theta):
        return _SklearnKernelFunction.apply(self._theta(theta), X, Y, self.kernel)

    def diag(self, X, theta):
        kernel = self.kernel.clone_with_theta(self._theta(theta).detach().cpu().numpy())
        return torch.as_tensor(kernel.diag(_numpy_rows(X)), dtype=X.dtype,
                               device=X.device)

    def check_n_features(self, n_features):
        pass


class _Sum(_Node):
    def __init__(self, kernel, offset):
        super().__init__(kernel, offset)
        self.k1 = _build(kernel.k1, offset)
        self.k2 = _build(kernel.k2, offset + self.k1.n_free)

    def __call__(self, X, Y, theta):
        return self.k1(X, Y, theta) + self.k2(X, Y, theta)

    def diag(self, X, theta):
        return self.k1.diag(X, theta) + self.k2.diag(X, theta)

    def check_n_features(self, n_features):
        self.k1.check_n_features(n_features)
        self.k2.check_n_features(n_features)


class _Product(_Sum):
    def __call__(self, X, Y, theta):
        # A constant factor is a scale (c * 1 * k == c * k exactly): no matrix of ones,
        # and one product fewer in the backward pass of large cross-kernel blocks.
        if isinstance(self.k1, _Constant):
            return self.k1.values(theta)["constant_value"] * self.k2(X, Y, theta)
        if isinstance(self.k2, _Constant):
            return self.k1(X, Y, theta) * self.k2.values(theta)["constant_value"]
        return self.k1(X, Y, theta) * self.k2(X, Y, theta)

    def diag(self, X, theta):
        return self.k1.diag(X, theta) * self.k2.diag(X, theta)


class _Exponentiation(_Node):
    def __init__(self, kernel, offset):
        super().__init__(kernel, offset)
        self.base = _build(kernel.kernel, offset)

    def __call__(self, X, Y, theta):
        return self.base(X, Y, theta) ** self.kernel.exponent

    def diag(self, X, theta):
        return self.base.diag(X, theta) ** self.kernel.exponent

    def check_n_features(self, n_features):
        self.base.check_n_features(n_features)


_PORTS = [
    (sk.Sum, _Sum),
    (sk.Product, _Product),
    (sk.Exponentiation, _Exponentiation),
    (sk.Matern, _Matern),  # before RBF: Matern subclasses RBF
    (sk.RBF, _RBF),
    (sk.RationalQuadratic, _RationalQuadratic),
    (sk.ExpSineSquared, _ExpSineSquared),
    (sk.ConstantKernel, _Constant),
    (sk.WhiteKernel, _White),
    (sk.DotProduct, _DotProduct),
]


def _build(kernel, offset):
    for sk_class, node_class in _PORTS:
        if type(kernel) is sk_class:
            return node_class(kernel, offset)
    return _Fallback(kernel, offset)


def _top_level_terms(kernel):
    """Flatten the top-level sums of a kernel into its summands, left to right."""
    if isinstance(kernel, sk.Sum):
        return _top_level_terms(kernel.k1) + _top_level_terms(kernel.k2)
    return [kernel]


def split_white_noise(kernel):
    """Split a kernel into its signal part and its top-level ``WhiteKernel`` terms.

    Returns
    -------
    signal : sklearn kernel or None
        The sum of the summands that are not ``WhiteKernel`` (None if there are none).
    noise_level : float
        The total noise level of the top-level ``WhiteKernel`` summands.
    """
    terms = _top_level_terms(kernel)
    signal = [term for term in terms if not isinstance(term, sk.WhiteKernel)]
    noise = sum(float(term.noise_level) for term in terms if isinstance(term, sk.WhiteKernel))
    if not signal:
        return None, noise
    out = signal[0]
    for term in signal[1:]:
        out = out + term
    return out, noise


class TorchKernel:
    """Torch evaluator of a scikit-learn kernel as a function of its ``theta``.

    Parameters
    ----------
    kernel : sklearn.gaussian_process.kernels.Kernel
        The kernel; it is read, never modified.

    Notes
    -----
    ``K = tk(X, Y=None, theta=None, part="full")`` follows scikit-learn: with ``Y=None``
    a ``WhiteKernel`` adds its noise on the diagonal, with ``Y`` given it adds nothing.
    ``part="signal"`` leaves out the top-level ``WhiteKernel`` summands (the noise of a
    regression model) and ``noise_level(theta)`` returns their total level.
    """

    def __init__(self, kernel):
        self.kernel = kernel
        self.theta = np.asarray(kernel.theta, dtype=np.float64)
        self.bounds = kernel.bounds
        self._terms, offset = [], 0
        for term in _top_level_terms(kernel):
            self._terms.append((_build(term, offset), isinstance(term, sk.WhiteKernel)))
            offset += len(term.theta)

    @property
    def n_dims(self):
        return len(self.theta)

    def theta_tensor(self, device="cpu", dtype=torch.float64):
        return torch.tensor(self.theta, dtype=dtype, device=device)

    def _select(self, part):
        if part not in ("full", "signal"):
            raise ValueError(f"part={part!r} must be 'full' or 'signal'.")
        return [node for node, white in self._terms if part == "full" or not white]

    def _theta(self, X, theta):
        if theta is None:
            return self.theta_tensor(X.device, X.dtype)
        return theta

    def __call__(self, X, Y=None, theta=None, part="full"):
        theta = self._theta(X, theta)
        nodes = self._select(part)
        if not nodes:
            m = X.shape[0] if Y is None else Y.shape[0]
            return torch.zeros(X.shape[0], m, dtype=X.dtype, device=X.device)
        K = nodes[0](X, Y, theta)
        for node in nodes[1:]:
            K = K + node(X, Y, theta)
        return K

    def diag(self, X, theta=None, part="full"):
        theta = self._theta(X, theta)
        out = torch.zeros(X.shape[0], dtype=X.dtype, device=X.device)
        for node in self._select(part):
            out = out + node.diag(X, theta)
        return out

    def noise_level(self, theta=None, device="cpu", dtype=torch.float64):
        """Total level of the top-level ``WhiteKernel`` summands, as a 0-d tensor."""
        if theta is None:
            theta = self.theta_tensor(device, dtype)
        out = torch.zeros((), dtype=theta.dtype, device=theta.device)
        for node, white in self._terms:
            if white:
                out = out + node.values(theta)["noise_level"].sum()
        return out

    def check_n_features(self, n_features):
        """Raise ValueError when an anisotropic length scale does not match ``n_features``."""
        for node, _ in self._terms:
            node.check_n_features(n_features)

    def stationary_signal(self):
        """The signal as ``s * kappa(r^2)`` when it is ``[ConstantKernel *] RBF`` or
        ``Matern(nu in {3/2, 5/2, inf})``, else None.

        Returns ``(profile, scale, length_scale)``: the profile's name (``"rbf"``,
        ``"matern32"``, ``"matern52"``) and two functions of ``theta`` giving ``s`` and
        ``l`` (scalar or ARD) as differentiable tensors.  Large cross-kernel blocks of
        such kernels can then be formed by one matrix product and differentiated in
        closed form (see ``skgpx._inducing._collapsed``).
        """
        signal = [node for node, white in self._terms if not white]
        if len(signal) != 1:
            return None
        node, constant = signal[0], None
        if type(node) is _Product:
            if isinstance(node.k1, _Constant):
                constant, node = node.k1, node.k2
            elif isinstance(node.k2, _Constant):
                constant, node = node.k2, node.k1
        if type(node) is _RBF:
            profile = "rbf"
        elif type(node) is _Matern and node.kernel.nu in (1.5, 2.5, np.inf):
            profile = {1.5: "matern32", 2.5: "matern52", np.inf: "rbf"}[node.kernel.nu]
        else:
            return None

        def scale(theta):
            if constant is None:
                return torch.ones((), dtype=theta.dtype, device=theta.device)
            return constant.values(theta)["constant_value"].reshape(())

        return profile, scale, lambda theta: node.values(theta)["length_scale"]


# ------------------------------------------------------------------ batched unit kernels


def unit_stationary_kernel(X, Y, length_scale, output_scale, name):
    """Per-unit ARD stationary kernels, evaluated for a batch of units at once.

    Parameters
    ----------
    X : Tensor of shape (..., D, n, Q) or (n, Q)
        Inputs (broadcast over the ``D`` units when 2-D).
    Y : Tensor of shape (..., D, m, Q) or (m, Q)
    length_scale : Tensor of shape (D, 1, Q) or (D, 1, 1)
        Each unit's (ARD) length scales.
    output_scale : Tensor of shape (D,)
    name : str
        One of :data:`STATIONARY_PROFILES`.

    Returns
    -------
    K : Tensor of shape (..., D, n, m)
        ``output_scale_d * k(|x / l_d - y / l_d|)``.
    """
    Xs, Ys = X / length_scale, Y / length_scale
    if name == "matern12":  # its slope in r^2 is infinite at r = 0: through the distance
        k = stationary_profile(_distance(Xs, Ys), name)
    else:
        k = _SquaredDistanceProfile.apply(Xs, Ys, name)
    return output_scale[:, None, None] * k


class _SquaredDistanceProfile(torch.autograd.Function):
    """``k(|x - y|)`` for every pair of rows, differentiated through ``d = |x - y|^2``.

    With ``G = grad * dk/dd`` the input gradients are two thin products,

    .. math::

        \\partial x_i = 2 \\big(x_i \\textstyle\\sum_j G_{ij} - (G Y)_i\\big), \\qquad
        \\partial y_j = 2 \\big(y_j \\textstyle\\sum_i G_{ij} - (G^T X)_j\\big),

    and ``dk/dd`` is finite at ``d = 0`` for these profiles (``-k / 2`` for the RBF,
    ``-3/2 e^{-\\sqrt3 r}`` and ``-5/6 (1 + \\sqrt5 r) e^{-\\sqrt5 r}`` for the Matérn 3/2
    and 5/2), so no zero distance needs a mask.  ``d`` comes from the norms and one
    product, as ``torch.cdist`` computes it for all but tiny inputs; the backward pass is
    about half the full-size passes of ``cdist``'s followed by the profile's (the pair
    kernel dominates a deep Q-EP epoch).
    """

    @staticmethod
    def forward(ctx, X, Y, name):
        d = X @ Y.transpose(-1, -2)
        d.mul_(-2.0).add_((X * X).sum(-1, keepdim=True)).add_((Y * Y).sum(-1).unsqueeze(-2))
        k, slope, factor = squared_distance_profile_(d, name)
        ctx.save_for_backward(X, Y, slope)
        ctx.factor = factor
        return k

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        X, Y, slope = ctx.saved_tensors
        G = grad * slope
        scale = 2.0 * ctx.factor
        grad_X = grad_Y = None
        if ctx.needs_input_grad[0]:
            # sum_to_size: over the axes that broadcasting the other operand added
            grad_X = (X * G.sum(-1, keepdim=True) - G @ Y).mul_(scale).sum_to_size(X.shape)
        if ctx.needs_input_grad[1]:
            grad_Y = (Y * G.sum(-2).unsqueeze(-1) - G.transpose(-1, -2) @ X).mul_(scale)
            grad_Y = grad_Y.sum_to_size(Y.shape)
        return grad_X, grad_Y, None


def stationary_from_sklearn(kernel):
    """Read ``(name, output_scale, length_scale)`` from a scikit-learn ``Matern`` or ``RBF``,
    optionally multiplied by a ``ConstantKernel``.

    ``length_scale`` is a float or a 1-D array (anisotropic kernel).

    Raises
    ------
    ValueError
        For any other kernel structure, or a Matérn ``nu`` without a closed form
        (only 0.5, 1.5, 2.5 and inf are supported).
    """
    output_scale, base = 1.0, kernel
    if isinstance(kernel, sk.Product):
        pair = (kernel.k1, kernel.k2)
        constants = [k for k in pair if isinstance(k, sk.ConstantKernel)]
        others = [k for k in pair if not isinstance(k, sk.ConstantKernel)]
        if len(constants) == 1 and len(others) == 1:
            output_scale, base = float(constants[0].constant_value), others[0]
    if isinstance(base, sk.Matern):
        if base.nu not in _MATERN_NAMES:
            raise ValueError(
                f"Matern(nu={base.nu}) has no closed form here; use nu in 0.5, 1.5, 2.5 or inf."
            )
        name = _MATERN_NAMES[base.nu]
    elif type(base) is sk.RBF:
        name = "rbf"
    else:
        raise ValueError(
            f"kernel={kernel} is not supported; give a Matern or RBF kernel, optionally "
            "times a ConstantKernel, or one of the names " + ", ".join(STATIONARY_PROFILES) + "."
        )
    length_scale = np.asarray(base.length_scale, dtype=np.float64)
    return name, output_scale, (float(length_scale) if length_scale.ndim == 0 else length_scale)
