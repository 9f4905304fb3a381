"""Smooth dependent relevance determination: Bayesian linear regression on a grid."""

from ._estimator import SmoothDRDRegressor

__all__ = ["SmoothDRDRegressor"]
