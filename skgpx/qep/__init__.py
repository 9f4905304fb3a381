"""Deep q-exponential processes (Chang et al.): regression, classification and the
multivariate q-exponential distribution."""

from ._bounds import dirichlet_targets, expected_log_likelihood, kl_authors, kl_scaled
from ._classifier import DeepQEPClassifier
from ._distribution import (
    MultivariateQExponential,
    radius_moment,
    standard_univariate_draws,
    univariate_variance_factor,
    variance_factor,
)
from ._regressor import DeepQEPRegressor

__all__ = [
    "DeepQEPClassifier",
    "DeepQEPRegressor",
    "MultivariateQExponential",
    "dirichlet_targets",
    "expected_log_likelihood",
    "kl_authors",
    "kl_scaled",
    "radius_moment",
    "standard_univariate_draws",
    "univariate_variance_factor",
    "variance_factor",
]
