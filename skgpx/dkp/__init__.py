"""Deep kernel (Wishart) processes fitted by Aitchison's point solver."""

from ._estimator import DeepKernelProcessRegressor

__all__ = ["DeepKernelProcessRegressor"]
