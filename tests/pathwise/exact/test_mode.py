"""ExactMode under the mode contract: the Cholesky fit, with CG and structured inputs in
the pickling test."""

from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel

from skgpx import PathwiseGPSampler
from skgpx.pathwise._exact._mode import ExactMode

from .._mode_contract import ModeContract
from .._oracles import query_points, sine_data
from ..test_sklearn_parity import SequenceKernel, _sequences

KERNEL = ConstantKernel(1.0) * RBF(0.5) + WhiteKernel(0.1)


def _data():
    X, y = sine_data()
    return X, y, query_points(9)


def _cg():
    est = PathwiseGPSampler(KERNEL, optimizer=None, solver="cg", device="cpu", random_state=0)
    return (est, *_data())


def _structured():
    X, y, Xq = _sequences()
    kernel = ConstantKernel(1.0) * SequenceKernel() + WhiteKernel(0.1)
    return PathwiseGPSampler(kernel, prior="exact", device="cpu", random_state=0), X, y, Xq


class TestExactMode(ModeContract):
    mode_class = ExactMode
    data = staticmethod(_data)
    estimator = staticmethod(lambda: PathwiseGPSampler(KERNEL, device="cpu", random_state=0))
    variants = (_cg, _structured)
