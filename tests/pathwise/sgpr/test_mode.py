"""SGPRMode under the mode contract, with rows on Dask workers in the pickling test."""

from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel

from skgpx import PathwiseGPSampler
from skgpx.pathwise._sgpr._mode import SGPRMode

from .._mode_contract import ModeContract
from .._oracles import query_points, sine_data

KERNEL = ConstantKernel(1.0) * RBF(0.5) + WhiteKernel(0.1)


def _data():
    X, y = sine_data()
    return X, y, query_points(9)


def _estimator():
    return PathwiseGPSampler(KERNEL, n_inducing=8, device="cpu", random_state=0)


def _dask():
    import dask.array as da

    X, y, Xq = _data()
    X, y = da.from_array(X, chunks=(12, X.shape[1])), da.from_array(y, chunks=12)
    return _estimator().set_params(normalize_y=True), X, y, Xq


class TestSGPRMode(ModeContract):
    mode_class = SGPRMode
    data = staticmethod(_data)
    estimator = staticmethod(_estimator)
    variants = (_dask,)
