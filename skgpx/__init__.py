"""skgpx: scikit-learn estimators for Gaussian-process-family methods, on PyTorch."""

from ._memory import InsufficientMemoryError
from ._pickle_versions import InconsistentVersionWarning
from ._show_versions import show_versions
from ._version import __version__
from .dkp import DeepKernelProcessRegressor
from .drd import SmoothDRDRegressor
from .kepsvgp import KEPSVGPClassifier
from .pathwise import PathwiseFunctions, PathwiseGPClassifier, PathwiseGPSampler
from .qep import DeepQEPClassifier, DeepQEPRegressor

__all__ = [
    "DeepKernelProcessRegressor",
    "DeepQEPClassifier",
    "DeepQEPRegressor",
    "InconsistentVersionWarning",
    "InsufficientMemoryError",
    "KEPSVGPClassifier",
    "PathwiseFunctions",
    "PathwiseGPClassifier",
    "PathwiseGPSampler",
    "SmoothDRDRegressor",
    "__version__",
    "show_versions",
]
