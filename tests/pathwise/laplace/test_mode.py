"""LaplaceMode under the mode contract: a binary problem, with one-vs-rest problems in the
pickling test."""

from sklearn.datasets import make_classification
from sklearn.gaussian_process.kernels import RBF, ConstantKernel

from skgpx import PathwiseGPClassifier
from skgpx.pathwise._laplace._mode import LaplaceMode

from .._mode_contract import ModeContract


def _data(n_classes=2):
    X, y = make_classification(60, n_features=3, n_informative=3, n_redundant=0,
                               n_classes=n_classes, n_clusters_per_class=1, random_state=0)
    return X[:48], y[:48], X[48:]


def _estimator():
    return PathwiseGPClassifier(ConstantKernel(1.0) * RBF(1.0), device="cpu", random_state=0)


def _one_vs_rest():
    return (_estimator(), *_data(3))


class TestLaplaceMode(ModeContract):
    mode_class = LaplaceMode
    data = staticmethod(_data)
    estimator = staticmethod(_estimator)
    variants = (_one_vs_rest,)
