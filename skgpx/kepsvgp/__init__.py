"""KEP-SVGP attention (Chen et al., ICML 2024): a Transformer classifier whose attention is a
pair of sparse variational GPs on kernel-SVD eigenfeatures."""

from ._estimator import KEPSVGPClassifier

__all__ = ["KEPSVGPClassifier"]
