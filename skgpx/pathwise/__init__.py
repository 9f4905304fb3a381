"""Pathwise conditioning of Gaussian processes (Wilson et al., 2020)."""

from ._classifier import PathwiseGPClassifier
from ._functions import PathwiseFunctions
from ._regressor import PathwiseGPSampler

__all__ = ["PathwiseFunctions", "PathwiseGPClassifier", "PathwiseGPSampler"]
