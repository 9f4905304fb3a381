"""The SVGP engine's two modes under the mode contract: non-Gaussian regression (Student-t)
and classification (Bernoulli, and softmax in the pickling test)."""

from sklearn.datasets import make_classification
from sklearn.gaussian_process.kernels import RBF, ConstantKernel

from skgpx import PathwiseGPClassifier, PathwiseGPSampler
from skgpx.pathwise._svgp._classification import SVGPClassificationMode
from skgpx.pathwise._svgp._regression import SVGPRegressionMode

from .._mode_contract import ModeContract
from .._oracles import query_points, sine_data


def _regression_data():
    X, y = sine_data()
    return X, y, query_points(9)


def _classification_data(n_classes=2):
    X, y = make_classification(60, n_features=3, n_informative=3, n_redundant=0,
                               n_classes=n_classes, n_clusters_per_class=1, random_state=0)
    return X[:48], y[:48], X[48:]


def _classifier(**params):
    return PathwiseGPClassifier(ConstantKernel(1.0) * RBF(1.0), n_inducing=8, max_iter=10,
                                device="cpu", random_state=0, **params)


def _softmax():
    return (_classifier(multi_class="softmax"), *_classification_data(3))


class TestSVGPRegressionMode(ModeContract):
    mode_class = SVGPRegressionMode
    data = staticmethod(_regression_data)
    estimator = staticmethod(lambda: PathwiseGPSampler(
        ConstantKernel(1.0) * RBF(0.5), likelihood="student_t", n_inducing=8, max_iter=30,
        device="cpu", random_state=0))


class TestSVGPClassificationMode(ModeContract):
    mode_class = SVGPClassificationMode
    data = staticmethod(_classification_data)
    estimator = staticmethod(_classifier)
    variants = (_softmax,)
