"""Pathwise conditioning of Gaussian processes (Wilson et al., 2020)."""

from ._classifier import PathwiseGPClassifier
from ._estimator import PathwiseGPSampler
from ._functions import PathwiseFunctions

__all__ = ["PathwiseFunctions", "PathwiseGPClassifier", "PathwiseGPSampler"]
