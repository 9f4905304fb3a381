"""The two simulated data sets of the deep Q-EP paper."""

import numbers

import numpy as np
from sklearn.utils import check_random_state

from ._checks import check_args, check_n_samples

# The two label rules of ``make_annular_rhombus`` / ``rhombus_labels``.
_RHOMBUS_SHAPES = ("script", "paper")


def _step(t):
    # u_J of Sec. 5.1: 1 on [0, 1], 0.5 on (1, 1.5], 2 on (1.5, 2], 0 otherwise.
    return np.select(
        [(t >= 0) & (t <= 1), (t > 1) & (t <= 1.5), (t > 1.5) & (t <= 2)], [1.0, 0.5, 2.0], 0.0
    )


def _turn(t):
    # u_T of Sec. 5.1: 1.5 t on [0, 1], 3.5 - 2 t on (1, 1.5], 3 t - 4 on (1.5, 2], 0 otherwise.
    return np.select(
        [(t >= 0) & (t <= 1), (t > 1) & (t <= 1.5), (t > 1.5) & (t <= 2)],
        [1.5 * t, 3.5 - 2.0 * t, 3.0 * t - 4.0],
        0.0,
    )


def make_step_turn_series(n_samples=100, noise_std=0.1, random_state=None):
    """The two-output time series of the deep Q-EP paper, Sec. 5.1 (a step and a turning function).

    On the grid ``x = linspace(0, 1, n_samples)`` with ``t = 2 x`` (so ``t`` is evenly spaced on
    [0, 2]), the noise-free outputs are ``y_true = [u_J(t), u_T(t)]`` with::

        u_J(t) = 1        for t in [0, 1],    u_T(t) = 1.5 t     for t in [0, 1],
                 0.5      for t in (1, 1.5],           3.5 - 2 t for t in (1, 1.5],
                 2        for t in (1.5, 2],           3 t - 4   for t in (1.5, 2],
                 0        otherwise;                   0         otherwise,

    and ``y = y_true + e`` with ``e`` i.i.d. ``N(0, noise_std^2)`` in both outputs. ``u_J`` jumps at
    ``t = 1`` and ``t = 1.5``; ``u_T`` is continuous with kinks there (values 1.5 and 0.5).

    Parameters
    ----------
    n_samples : int, default=100
        Number of grid points (the paper uses N = 100).
    noise_std : float, default=0.1
        Standard deviation of the additive Gaussian noise (the paper's sigma = 0.1).
    random_state : int, RandomState instance or None, default=None
        Seed or generator for the noise (the inputs are a fixed grid).

    Returns
    -------
    X : ndarray of shape (n_samples, 1)
        The grid ``x`` in [0, 1] (not ``t``; ``t = 2 x``).
    y : ndarray of shape (n_samples, 2)
        Noisy outputs: column 0 the step series, column 1 the turning series.
    y_true : ndarray of shape (n_samples, 2)
        Noise-free values ``[u_J(2 x), u_T(2 x)]``.

    Notes
    -----
    Source: Chang, Obite, Zhou and Lan, "Deep Q-Exponential Processes", Sec. 5.1 "Time
    Series": the table defining ``u_J`` and ``u_T`` above, and
    "``y_i* = [u_J(t_i), u_T(t_i)]^T + eps_i``, ``eps_i ~iid N(0, sigma^2 I_2)``, with
    sigma = 0.1", at "N = 100 evenly spaced points ``t_i in [0, 2]``". The parametrisation
    ``x in [0, 1]``, ``t = 2 x`` is the authors' script's (``train_x = linspace(0, 1, 100)``,
    outputs ``f(train_x * 2)``); the paper states only ``t`` on [0, 2], which is the same
    grid.

    Ambiguities, and how they are resolved here:

    * The endpoints of the pieces matter only on grid points that hit ``t = 1`` or ``t = 1.5``
      exactly (not the case for ``n_samples = 100``; the case for, e.g., 3 or 5 points). The
      paper's closed/half-open intervals are followed: ``u_J(1) = 1``, ``u_J(1.5) = 0.5``.
      The grid is computed as ``i / (n_samples - 1)`` (correctly rounded, within one ulp of
      ``numpy.linspace``), so that those breakpoints are hit exactly when they are grid points.
    * The paper predicts at "50 points evenly spread over [0, 2]"; the script tests on 51
      (``linspace(0, 1, 51)``). Test points are not produced here: evaluate ``y_true`` of another
      call (e.g. ``make_step_turn_series(50, noise_std=0)``) for the noise-free truth.
    * The script draws the noise with ``torch.manual_seed(2024)``; this function uses numpy's
      generator from ``random_state``, so the noise values differ from the script's.

    Examples
    --------
    >>> from skgpx.datasets import make_step_turn_series
    >>> X, y, y_true = make_step_turn_series(n_samples=5, noise_std=0.0)
    >>> X[:, 0].tolist()
    [0.0, 0.25, 0.5, 0.75, 1.0]
    >>> y_true.tolist()
    [[1.0, 0.0], [1.0, 0.75], [1.0, 1.5], [0.5, 0.5], [2.0, 2.0]]
    """
    check_args(n_samples, noise_std, noise_name="noise_std")
    rng = check_random_state(random_state)
    x = np.arange(n_samples, dtype=np.float64) / max(n_samples - 1, 1)
    t = 2.0 * x
    y_true = np.column_stack([_step(t), _turn(t)])
    y = y_true + noise_std * rng.standard_normal((n_samples, 2))
    return x[:, None], y, y_true


def _check_rhombus_params(shape, u):
    if not isinstance(shape, str) or shape not in _RHOMBUS_SHAPES:
        raise ValueError(f"shape must be one of {_RHOMBUS_SHAPES}; got {shape!r}")
    if isinstance(u, bool) or not isinstance(u, numbers.Real) or not np.isfinite(u):
        raise ValueError(f"u={u!r} must be a finite real number")


def rhombus_labels(X, shape="script", u=0.857396):
    """Labels of the annular-rhombus problem (deep Q-EP paper, Sec. 5.2) at arbitrary points.

    With ``a = 0.4 u pi``:

    * ``shape="script"`` (default, the authors' script):
      ``y = round(cos(a |x1| + |x2|) + 1)``;
    * ``shape="paper"`` (the printed formula): ``y = round(cos(a (|x1| + |x2|))) + 1``.

    ``round`` is to the nearest integer, ties to even (``numpy.rint``, as ``torch.round``); since
    ``cos`` lies in [-1, 1] the labels are 0, 1 or 2.

    Parameters
    ----------
    X : array-like of shape (n_points, 2)
        Points to label, e.g. the 50 x 50 test grid of [-3, 3]^2.
    shape : {"script", "paper"}, default="script"
        Which label rule to use (see above and ``make_annular_rhombus``).
    u : float, default=0.857396
        The frequency factor ``u`` (one value for the whole data set); the default is the value
        ``torch.rand(1)`` gives in the authors' script (``torch.manual_seed(2019)``).

    Returns
    -------
    y : ndarray of shape (n_points,), dtype int64
        Labels in {0, 1, 2}.

    Examples
    --------
    >>> from skgpx.datasets import rhombus_labels
    >>> rhombus_labels([[0.0, 0.0], [0.0, 1.0], [0.0, 2.0]]).tolist()
    [2, 2, 1]
    >>> rhombus_labels([[0.0, 0.0], [0.0, 1.0], [0.0, 2.0]], shape="paper").tolist()
    [2, 1, 0]
    """
    _check_rhombus_params(shape, u)
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2 or X.shape[1] != 2:
        raise ValueError(f"X must be of shape (n_points, 2); got shape {X.shape}")
    if not np.all(np.isfinite(X)):
        raise ValueError("X contains NaN or infinity")
    a = 0.4 * float(u) * np.pi
    ax1, ax2 = np.abs(X[:, 0]), np.abs(X[:, 1])
    if shape == "script":
        y = np.rint(np.cos(a * ax1 + ax2) + 1.0)
    else:
        y = np.rint(np.cos(a * (ax1 + ax2))) + 1.0
    return y.astype(np.int64)


def make_annular_rhombus(n_samples=500, shape="script", u=0.857396, random_state=None):
    """Three-class "annular rhombus" classification data of the deep Q-EP paper, Sec. 5.2.

    ``X ~ N(0, I_2)`` (i.i.d. rows) and ``y = rhombus_labels(X, shape, u)``, i.e., with
    ``a = 0.4 u pi``,

    * ``shape="script"`` (default): ``y = round(cos(a |x1| + |x2|) + 1)``,
    * ``shape="paper"``: ``y = round(cos(a ||x||_1)) + 1``.

    The labels are deterministic given ``X``: there is no label noise.

    Parameters
    ----------
    n_samples : int, default=500
        Number of training points (the paper uses N = 500).
    shape : {"script", "paper"}, default="script"
        Label rule: the authors' script's or the paper's printed formula (see Notes).
    u : float, default=0.857396
        The frequency factor, one value for the whole data set.
    random_state : int, RandomState instance or None, default=None
        Seed or generator for the inputs.

    Returns
    -------
    X : ndarray of shape (n_samples, 2)
        Inputs, standard normal.
    y : ndarray of shape (n_samples,), dtype int64
        Labels in {0, 1, 2}.

    Notes
    -----
    Source: Chang, Obite, Zhou and Lan, "Deep Q-Exponential Processes", Sec. 5.2
    "Simulation with Inhomogeneous Boundaries":
    "``y_i = [cos(0.4 * u * pi ||x_i||_1)] + 1``, ``u ~ Unif[0, 1]``, ``x_i ~ N(0, I_2)``,
    where [x] rounds x to the nearest integer", N = 500. The test set is the 50 x 50 grid of
    [-3, 3]^2: label it with ``rhombus_labels``.

    The printed formula and the authors' script differ:
    the script computes ``torch.round(cos(0.4 * u * pi * |x| + |y|) + 1)``, so by operator
    precedence only ``|x1|`` is scaled by ``0.4 u pi``, and it draws **one** ``u = torch.rand(1)``
    for the whole data set after the inputs with ``torch.manual_seed(2019)``, which gives
    ``u = 0.8573957...``; the default ``u = 0.857396`` is that value rounded. The paper's
    ``u ~ Unif[0, 1]`` does not say whether ``u`` is drawn per point or once; a per-point ``u``
    would not give the "class regions [with] clear shapes with edges" the paper describes, so one
    ``u`` is used for both shapes.
    The script's version (default) is what produced the paper's numbers. The two shapes round at
    different places (``round(c + 1)`` vs ``round(c) + 1``), which differ only at exact ties.
    The inputs come from numpy's generator (``random_state``), not torch's, so for a given
    seed the points differ from the script's.

    Examples
    --------
    >>> from skgpx.datasets import make_annular_rhombus
    >>> X, y = make_annular_rhombus(n_samples=500, random_state=0)
    >>> X.shape, y.shape, sorted(set(y.tolist()))
    ((500, 2), (500,), [0, 1, 2])
    """
    check_n_samples(n_samples)
    _check_rhombus_params(shape, u)
    rng = check_random_state(random_state)
    X = rng.standard_normal((n_samples, 2))
    return X, rhombus_labels(X, shape=shape, u=u)


# The authors' script seeds torch with this value before drawing the rhombus data.
_AUTHORS_SEED = 2019


def load_authors_rhombus(return_u=False):
    """The fixed annular-rhombus training set of the deep Q-EP authors' script.

    Regenerates, without network access, the 500 training points that the authors' script
    draws once and reuses for every model seed::

        torch.random.manual_seed(2019)
        x = torch.randn(500, 1); y = torch.randn(500, 1); u = torch.rand(1)
        labels = torch.round(torch.cos(0.4 * u * pi * torch.abs(x) + torch.abs(y)) + 1)

    The draws come from a private ``torch.Generator`` seeded with 2019, in the same order
    (``x``, ``y``, then ``u``), so they equal the script's draws from torch's global generator
    while leaving the global random state (torch's and numpy's) untouched. This gives
    ``u = 0.8573957085609436`` (a float32) and class counts 131, 226 and 143 for labels 0, 1
    and 2.

    Parameters
    ----------
    return_u : bool, default=False
        Whether to return the drawn frequency factor ``u`` as well.

    Returns
    -------
    X : ndarray of shape (500, 2)
        Inputs: the script's float32 standard-normal draws, exactly converted to float64
        (column 0 the script's ``x``, column 1 its ``y``).
    y : ndarray of shape (500,), dtype int64
        Labels in {0, 1, 2} by the script's rule, ``rhombus_labels(X, shape="script", u=u)``.
    u : float
        The frequency factor, 0.8573957085609436. Only returned if ``return_u`` is True.

    See Also
    --------
    make_annular_rhombus : Fresh draws of the same problem from numpy's generator.
    rhombus_labels : Labels at other points, e.g. the 50 x 50 test grid of [-3, 3]^2.

    Notes
    -----
    Source: Chang, Obite, Zhou and Lan, "Deep Q-Exponential Processes", Sec. 5.2 and
    Table B.2, and the authors'
    script ``classification/run_Deep_QEP.py`` of the repository ``lanzithinking/DeepQEP`` on
    GitHub (commit 6c995a67). The paper's accuracies were measured on this one draw, whereas
    ``make_annular_rhombus`` draws new inputs for each seed. Most of the test grid lies
    outside the bulk of the training inputs (59% of the grid points have ``max |x_j| > 2``,
    against 10% of these training points), so grid accuracy is mostly extrapolation and
    depends on the draw: use this data set to compare with the paper's numbers.

    The labels are computed here in float64 by ``rhombus_labels``; the script computes them in
    float32. Both give the same labels on this set, whose values of ``cos(.) + 1`` lie at least
    0.003 from the rounding boundaries 0.5 and 1.5. ``rhombus_labels``' default
    ``u = 0.857396`` gives the same labels too.

    The draws are made in float32 whatever ``torch.get_default_dtype()`` is, as the script's
    were under torch's stock default: from the same seed, float64 draws differ. The values
    depend on torch's CPU generator and its normal sampler; should a torch release change
    either, the tests, which pin the first rows and the class counts, fail.

    Examples
    --------
    >>> import numpy as np
    >>> from skgpx.datasets import load_authors_rhombus
    >>> X, y, u = load_authors_rhombus(return_u=True)
    >>> X.shape, np.bincount(y).tolist(), round(u, 7)
    ((500, 2), [131, 226, 143], 0.8573957)
    """
    # Imported here so that the numpy-only generators do not pay for importing torch.
    import torch

    from .._base import cpu_generator

    generator = cpu_generator(_AUTHORS_SEED)
    # The script ran under torch's stock default dtype, float32; the float64 sampler draws
    # other values from the same seed, so the dtype (and the device) must not follow the
    # caller's defaults.
    draw = dict(generator=generator, dtype=torch.float32, device="cpu")
    x1 = torch.randn(500, 1, **draw)
    x2 = torch.randn(500, 1, **draw)
    u = float(torch.rand(1, **draw).item())
    X = torch.cat((x1, x2), dim=1).numpy().astype(np.float64)
    y = rhombus_labels(X, shape="script", u=u)
    return (X, y, u) if return_u else (X, y)
