"""skgpx: scikit-learn estimators for Gaussian-process-family methods, on PyTorch."""

from .pathwise import PathwiseFunctions, PathwiseGPSampler

__version__ = "0.1.0"

__all__ = ["PathwiseFunctions", "PathwiseGPSampler", "__version__"]
