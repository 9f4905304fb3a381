"""scikit-learn classifier: a Transformer with KEP-SVGP attention, trained through skorch."""

import numbers

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.validation import check_is_fitted, validate_data

from .._base import (
    Interval, ProbabilisticClassifierMixin, StrOptions, TorchEstimatorMixin, array_bytes,
    check_draw_memory, check_magnitude, check_memory, check_n_samples,
    column_standardisation, cpu_generator, encode_classes, fenced_global_rng, fit_seeds,
    prediction_generator, standard_normal, to_numpy, to_probabilities,
)
from ._model import KEPTransformer, tokenizer_geometry
from ._net import build_net

__all__ = ["KEPSVGPClassifier"]


def _attention_bytes(batch, n_tokens, *, n_heads, d_model, depth, softmax_layers, dropout,
                     token_mix, training, dtype):
    """Peak bytes of one batch through the network.

    Each softmax-attention block forms ``(batch, heads, N, N)`` weights (the KEP blocks form
    nothing ``N x N``).  Training keeps one per softmax block for the backward pass, two
    with dropout, plus one in flight; prediction (no graph) holds two at once.  Besides them
    ``24 depth`` activations of ``(batch, N, d_model)``, and for the concatenation merge
    without ``concat_rank`` the ``N x 2N`` token mixing with its gradient and two Adam
    moments.  Measured peaks (64 rows, 128 and 256 tokens, 0 to 3 softmax blocks, with
    and without dropout) were within 10% of these counts or below them.
    """
    scores = array_bytes(batch, n_heads, n_tokens, n_tokens, dtype=dtype)
    if training:
        copies = (softmax_layers + 1 + softmax_layers * (dropout > 0)) if softmax_layers else 0
    else:
        copies = 2 if softmax_layers else 0
    activations = 24 * depth * array_bytes(batch, n_tokens, d_model, dtype=dtype)
    mixing = (8 if training else 2) * array_bytes(n_tokens, n_tokens, dtype=dtype)
    return copies * scores + activations + (mixing if token_mix else 0)


class KEPSVGPClassifier(ClassifierMixin, ProbabilisticClassifierMixin, TorchEstimatorMixin,
                        BaseEstimator):
    """Transformer classifier with kernel-eigen-pair sparse variational GP attention.

    The last ``kep_layers`` self-attention layers of a small pre-LN Transformer are
    KEP-SVGP attention [1]_: the asymmetric cosine attention kernel is handled through its
    kernel SVD, and the layer output is a draw from a pair of sparse variational GPs whose
    inducing features are its left and right singular functions (linear in the number of
    tokens).  Training minimises ``-ELBO/n + eta * L_KSVD`` with Adam and a one-cycle
    schedule (through skorch); ``predict_proba`` averages the class probabilities of
    ``n_mc_samples`` posterior draws shared by every row, ``predict_proba_samples`` returns
    them and ``sample_y`` draws more.  Tabular rows become tokens per feature, image rows
    patches, sequence rows steps.

    Parameters
    ----------
    tokenizer : {"features", "patches", "sequence"}, default="features"
    image_shape : tuple or None, default=None
        ``(H, W)`` or ``(H, W, channels)`` for ``"patches"`` (None: square, one channel).
    patch_size : int, default=2
    token_dim : int, default=1
        Values per step for ``"sequence"``.
    d_model : int, default=32
    n_heads : int, default=4
    depth : int, default=2
    mlp_ratio : float, default=2.0
    dropout : float, default=0.0
    pooling : {"mean", "cls"}, default="mean"
    kep_layers : int, default=1
        Number of final blocks with KEP-SVGP attention; 0 is the softmax baseline.
    rank : int, default=5
        KSVD rank ``s`` (capped at the tokens and the head width: ``rank_``).
    merge : {"auto", "add", "concat"}, default="auto"
        ``"auto"``: concat for patches, add otherwise.
    concat_rank : int or None, default=None
    projection : {"data", "static"}, default="data"
    rank_multi : int, default=10
    whiten : bool, default=True
    eta : float, default=0.1
        Weight of the (token-normalised) KSVD regulariser.
    kl_weight : float, default=1.0
        1 is the ELBO per training example.
    n_mc_samples : int, default=10
        Posterior draws ``T`` of ``predict_proba``.
    mc_aggregation : {"probs", "logits"}, default="probs"
    max_iter : int, default=30
        Epochs.
    batch_size : int, default=128
    lr : float, default=3e-3
    weight_decay : float, default=1e-4
    device : str, default="auto"
    dtype : {"float64", "float32"}, default="float64"
    random_state : int, RandomState instance or None, default=None
    verbose : int, default=0

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
    n_tokens_ : int
        Tokens per row (with the CLS token).
    rank_ : int
    module_ : torch.nn.Module
    net_ : skorch.NeuralNet
    history_ : skorch.callbacks.History
    objective_history_ : list of float
    n_iter_ : int
    X_mean_, X_scale_ : ndarray of shape (n_features,)
        Column means and scales of the training inputs (inputs are standardised with them).
    n_features_in_ : int
    feature_names_in_ : ndarray of shape (`n_features_in_`,)
    device_ : str

    References
    ----------
    .. [1] Y. Chen, Q. Tao, F. Tonin and J. A. K. Suykens, "Self-Attention through
       Kernel-Eigen Pair Sparse Variational Gaussian Processes", Proceedings of the 41st
       International Conference on Machine Learning (ICML 2024), PMLR 235.

    Examples
    --------
    >>> from sklearn.datasets import load_iris
    >>> from skgpx.kepsvgp import KEPSVGPClassifier
    >>> X, y = load_iris(return_X_y=True)
    >>> clf = KEPSVGPClassifier(max_iter=20, random_state=0).fit(X, y)
    >>> clf.score(X, y) > 0.8
    True
    >>> clf.predict_proba_samples(X[:2]).shape
    (2, 3, 10)
    """

    _parameter_constraints = {
        "tokenizer": [StrOptions({"features", "patches", "sequence"})],
        "image_shape": [tuple, list, None],
        "patch_size": [Interval(numbers.Integral, 1, None, closed="left")],
        "token_dim": [Interval(numbers.Integral, 1, None, closed="left")],
        "d_model": [Interval(numbers.Integral, 1, None, closed="left")],
        "n_heads": [Interval(numbers.Integral, 1, None, closed="left")],
        "depth": [Interval(numbers.Integral, 1, None, closed="left")],
        "mlp_ratio": [Interval(numbers.Real, 0, None, closed="neither")],
        "dropout": [Interval(numbers.Real, 0, 1, closed="left")],
        "pooling": [StrOptions({"mean", "cls"})],
        "kep_layers": [Interval(numbers.Integral, 0, None, closed="left")],
        "rank": [Interval(numbers.Integral, 1, None, closed="left")],
        "merge": [StrOptions({"auto", "add", "concat"})],
        "concat_rank": [Interval(numbers.Integral, 1, None, closed="left"), None],
        "projection": [StrOptions({"data", "static"})],
        "rank_multi": [Interval(numbers.Integral, 1, None, closed="left")],
        "whiten": ["boolean"],
        "eta": [Interval(numbers.Real, 0, None, closed="left")],
        "kl_weight": [Interval(numbers.Real, 0, None, closed="left")],
        "n_mc_samples": [Interval(numbers.Integral, 1, None, closed="left")],
        "mc_aggregation": [StrOptions({"probs", "logits"})],
        "max_iter": [Interval(numbers.Integral, 1, None, closed="left")],
        "batch_size": [Interval(numbers.Integral, 1, None, closed="left")],
        "lr": [Interval(numbers.Real, 0, None, closed="neither")],
        "weight_decay": [Interval(numbers.Real, 0, None, closed="left")],
        "device": [str],
        "dtype": [StrOptions({"float64", "float32"})],
        "random_state": ["random_state"],
        "verbose": ["verbose"],
    }

    def __init__(self, *, tokenizer="features", image_shape=None, patch_size=2, token_dim=1,
                 d_model=32, n_heads=4, depth=2, mlp_ratio=2.0, dropout=0.0, pooling="mean",
                 kep_layers=1, rank=5, merge="auto", concat_rank=None, projection="data",
                 rank_multi=10, whiten=True, eta=0.1, kl_weight=1.0, n_mc_samples=10,
                 mc_aggregation="probs", max_iter=30, batch_size=128, lr=3e-3,
                 weight_decay=1e-4, device="auto", dtype="float64", random_state=None,
                 verbose=0):
        self.tokenizer = tokenizer
        self.image_shape = image_shape
        self.patch_size = patch_size
        self.token_dim = token_dim
        self.d_model = d_model
        self.n_heads = n_heads
        self.depth = depth
        self.mlp_ratio = mlp_ratio
        self.dropout = dropout
        self.pooling = pooling
        self.kep_layers = kep_layers
        self.rank = rank
        self.merge = merge
        self.concat_rank = concat_rank
        self.projection = projection
        self.rank_multi = rank_multi
        self.whiten = whiten
        self.eta = eta
        self.kl_weight = kl_weight
        self.n_mc_samples = n_mc_samples
        self.mc_aggregation = mc_aggregation
        self.max_iter = max_iter
        self.batch_size = batch_size
        self.lr = lr
        self.weight_decay = weight_decay
        self.device = device
        self.dtype = dtype
        self.random_state = random_state
        self.verbose = verbose

    # ------------------------------------------------------------------ fit

    def _check_architecture(self, n_features):
        if self.d_model % self.n_heads:
            raise ValueError(
                f"d_model={self.d_model} must be divisible by n_heads={self.n_heads}."
            )
        if self.kep_layers > self.depth:
            raise ValueError(f"kep_layers={self.kep_layers} must be <= depth={self.depth}.")
        return tokenizer_geometry(self.tokenizer, n_features, self.image_shape,
                                  self.patch_size, self.token_dim)

    def _check_memory(self, method, n_rows, n_tokens, merge, device, dtype, training):
        """Raise InsufficientMemoryError before any torch work when one batch of ``method``
        (``"fit"`` or ``"prediction"``) cannot fit: softmax attention is quadratic in the
        tokens."""
        batch = min(self.batch_size, n_rows)
        softmax_layers = self.depth - self.kep_layers
        token_mix = merge == "concat" and self.concat_rank is None and self.kep_layers > 0
        way_out = ["use a smaller batch_size"]
        if softmax_layers:
            way_out.append(f"more KEP layers (kep_layers={self.depth} leaves no softmax "
                           "attention, whose weights are quadratic in the tokens)")
        if token_mix:
            way_out.append("a concat_rank (the concat merge's token mixing is N x 2N)")
        way_out.append("fewer tokens per row (" + {
            "features": "fewer features", "patches": "a larger patch_size",
            "sequence": "a larger token_dim"}[self.tokenizer] + ")")
        way_out.append("a GPU (device='cuda')")
        check_memory(
            _attention_bytes(batch, n_tokens, n_heads=self.n_heads, d_model=self.d_model,
                             depth=self.depth, softmax_layers=softmax_layers,
                             dropout=self.dropout, token_mix=token_mix, training=training,
                             dtype=dtype),
            what=(f"KEPSVGPClassifier {method} on batches of {batch} rows of {n_tokens} "
                  f"tokens ({softmax_layers} softmax-attention block"
                  f"{'' if softmax_layers == 1 else 's'} of {self.n_heads} heads)"),
            way_out="; or ".join(way_out), device=device,
        )

    def _scaling(self, X):
        # feature tokens are standardised per column, image and sequence values as a whole
        return column_standardisation(X if self.tokenizer == "features" else X.reshape(-1, 1))

    def fit(self, X, y):
        """Train the network (``max_iter`` epochs of Adam with a one-cycle schedule).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)

        Returns
        -------
        self : KEPSVGPClassifier

        Raises
        ------
        ValueError
            If a value of X exceeds the largest supported magnitude (1e150 with
            ``dtype='float64'``, 1e15 with ``'float32'``), where squares would overflow.
        ValueError
            For fewer than two classes, or an architecture or tokenizer that does not fit.
        InsufficientMemoryError
            At once, before any torch work, when one batch (softmax attention is quadratic
            in the tokens) cannot fit in the memory available on the device.
        """
        self._validate_params()
        X, y = validate_data(self, X, y, dtype=np.float64, ensure_min_samples=2)
        classes, codes = encode_classes(self, y)
        n_tokens, details = self._check_architecture(X.shape[1])
        device, dtype = self._fit_device_dtype()
        check_magnitude(X, "X", dtype)
        merge = self.merge if self.merge != "auto" else (
            "concat" if self.tokenizer == "patches" else "add")
        total_tokens = n_tokens + (self.pooling == "cls")
        self._check_memory("fit", X.shape[0], total_tokens, merge, device, dtype, training=True)
        seeds = fit_seeds(self.random_state, ("train", "prediction"))
        train_seed = seeds["train"]
        X_mean, X_scale = self._scaling(X)
        rank = min(self.rank, total_tokens, self.d_model // self.n_heads)
        Xt = self._as_tensor((X - X_mean) / X_scale, device, dtype)
        yt = torch.tensor(codes, device=device)
        with fenced_global_rng(train_seed, device):
            module = KEPTransformer(
                n_features=X.shape[1], n_classes=len(classes), tokenizer=self.tokenizer,
                details=details, n_tokens=n_tokens, d_model=self.d_model, n_heads=self.n_heads,
                depth=self.depth, mlp_ratio=self.mlp_ratio, dropout=self.dropout,
                pooling=self.pooling, kep_layers=self.kep_layers, rank=rank, merge=merge,
                concat_rank=self.concat_rank, projection=self.projection,
                rank_multiplier=self.rank_multi, whiten=self.whiten,
                generator=cpu_generator(train_seed),
            ).to(device=device, dtype=dtype)
            net = build_net(module, n_rows=X.shape[0], params=self.get_params(),
                            seed=train_seed + 1, device=device)  # the shuffling stream
            net.fit(Xt, yt)
        module.eval()
        # fitted attributes only once training has succeeded
        self.classes_, self.n_tokens_, self.rank_ = classes, total_tokens, rank
        self.X_mean_, self.X_scale_ = X_mean, X_scale
        self.net_, self.module_ = net, module
        self.history_ = net.history
        self.objective_history_ = [float(row["train_loss"]) for row in net.history]
        self.n_iter_ = len(net.history)
        self.device_, self.dtype_ = device, self.dtype
        self._prediction_seed = seeds["prediction"]
        return self

    # ------------------------------------------------------------------ prediction

    def _draws(self, n_samples, generator):
        """Standard normal draws per KEP layer, (n_samples, h, s, s), from a CPU generator."""
        device, dtype = self._current_device_dtype()
        return [standard_normal((n_samples,) + layer.variational_mean.shape, generator, dtype,
                                device)
                for layer in self.module_.kep_attention]

    def _logits_samples(self, X, n_samples, generator):
        """Logits of every posterior draw, (n_samples, n, K); one evaluation when there is
        no KEP layer (every draw is the same network)."""
        X = validate_data(self, X, reset=False, dtype=np.float64)
        device, dtype = self._current_device_dtype()
        check_magnitude(X, "X", dtype)
        self._check_memory("prediction", X.shape[0], self.n_tokens_, None, device, dtype,
                           training=False)
        # per draw: the float64 normals of every KEP layer and their cast, and the logits,
        # their softmax, its permutation and the numpy result
        per_draw = (2 * sum(layer.variational_mean.numel()
                            for layer in self.module_.kep_attention)
                    + 4 * X.shape[0] * len(self.classes_))
        check_draw_memory(
            n_samples, per_draw, what=f"KEPSVGPClassifier prediction on {X.shape[0]} rows",
            way_out="ask for fewer draws (n_samples) per call, or call it on chunks of X",
            device=device,
        )
        Xt = self._as_tensor((X - self.X_mean_) / self.X_scale_, device, dtype)
        draws = self._draws(n_samples, generator)
        distinct = n_samples if draws else 1
        out = []
        with torch.no_grad():
            for start in range(0, Xt.shape[0], self.batch_size):
                encoded = self.module_.encode(Xt[start:start + self.batch_size])
                out.append(torch.stack([
                    self.module_.decode(encoded, [d[t] for d in draws])[0]
                    for t in range(distinct)
                ]))
        logits = torch.cat(out, dim=1)
        return logits.expand(n_samples, -1, -1) if distinct == 1 else logits

    def predict_proba_samples(self, X, n_samples=None, random_state=None):
        """Class probabilities of each posterior draw, draws last.

        Parameters
        ----------
        X : array-like of shape (n_samples_X, n_features)
        n_samples : int or None, default=None
            None: the ``n_mc_samples`` draws of :meth:`predict_proba`.
        random_state : int, RandomState instance or None, default=None
            None: the fit's own prediction seed (repeated calls agree).

        Returns
        -------
        proba : ndarray of shape (n_samples_X, n_classes, n_samples)

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
        n = check_n_samples(self.n_mc_samples if n_samples is None else n_samples)
        logits = self._logits_samples(X, n, prediction_generator(self, random_state))
        return to_numpy(torch.softmax(logits, dim=-1).permute(1, 2, 0))

    def predict_proba(self, X):
        """Posterior predictive class probabilities: the average over ``n_mc_samples`` draws
        of the softmax (``mc_aggregation="probs"``) or the softmax of the average logits.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        proba : ndarray of shape (n_samples, n_classes)

        Raises
        ------
        ValueError
            If a value of X exceeds the largest supported magnitude (1e150 with
            ``dtype='float64'``, 1e15 with ``'float32'``), where squares would overflow.
        """
        check_is_fitted(self)
        logits = self._logits_samples(X, self.n_mc_samples, prediction_generator(self, None))
        if self.mc_aggregation == "logits":
            proba = torch.softmax(logits.mean(0), dim=-1)
        else:
            proba = torch.softmax(logits, dim=-1).mean(0)
        return to_probabilities(proba)

    def sample_y(self, X, n_samples=1, random_state=0):
        """Posterior draws of the class-probability vector (draws last, as sklearn's
        ``GaussianProcessRegressor.sample_y``); ``random_state=None``
        uses the fit's own prediction seed.

        Returns
        -------
        proba_samples : ndarray of shape (n_samples_X, n_classes, n_samples)

        Raises
        ------
        ValueError
            If a value of X exceeds the largest supported magnitude (1e150 with
            ``dtype='float64'``, 1e15 with ``'float32'``), where squares would overflow.
        InsufficientMemoryError
            Before drawing, when the ``n_samples`` draws and their buffers cannot fit in
            the memory available (ask for fewer draws, or call it on chunks of X).
        """
        return self.predict_proba_samples(X, n_samples=n_samples, random_state=random_state)
