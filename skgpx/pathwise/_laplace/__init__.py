"""Laplace classification: the Newton posterior, the batched hyperparameter fit, the mode,
the latent draws and the ``base_estimator_`` views."""
