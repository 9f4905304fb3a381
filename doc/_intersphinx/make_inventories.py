"""Write the intersphinx inventories that the docs build reads offline.

The build machines have no network, so ``doc/conf.py`` points intersphinx at the files in
this folder instead of the projects' sites.  Where a machine can reach the sites, the real
inventories are better (every object, not only the names below): save

* https://scikit-learn.org/stable/objects.inv as ``sklearn.inv``,
* https://numpy.org/doc/stable/objects.inv as ``numpy.inv``,
* https://docs.pytorch.org/docs/stable/objects.inv as ``torch.inv``,
* https://docs.python.org/3/objects.inv as ``python.inv``

in this folder (``urllib.request.urlretrieve(url, path)`` does it).  Without a network,
this script writes small inventories (format version 2, as Sphinx reads them) that list
the names the skgpx docs, the docstrings they inherit from scikit-learn and numpydoc's
links of parameter types refer to::

    python doc/_intersphinx/make_inventories.py

Each entry is ``name: (domain:role, page relative to the project's base URL[, title])``;
where the page has no anchor, Sphinx's anchor of a Python object (``#name``, or
``#module-name`` for a module) is added.  The title is what a ``:ref:`` without a title
of its own shows.  Add a name here when a page starts referring to it, and rerun the
script.
"""
import sys
import zlib
from pathlib import Path

HERE = Path(__file__).resolve().parent

_SK_GEN = "modules/generated/{}.html"
_NP_GEN = "reference/generated/{}.html"
_TORCH_GEN = "generated/{}.html"


def _generated(pattern, role, names):
    return {name: (role, pattern.format(name)) for name in names}


SKLEARN = {
    # the User Guide labels and glossary terms cited by the docstrings that every
    # estimator inherits (set_*_request, get_metadata_routing, score)
    "r2_score": ("std:label", "modules/model_evaluation.html#r2-score",
                 "R² score, the coefficient of determination"),
    "accuracy_score": ("std:label", "modules/model_evaluation.html#accuracy-score",
                       "Accuracy score"),
    "metadata_routing": ("std:label", "metadata_routing.html#metadata-routing",
                         "Metadata Routing"),
    "meta-estimator": ("std:term", "glossary.html#term-meta-estimator"),
    "meta-estimators": ("std:term", "glossary.html#term-meta-estimators"),
    "estimator": ("std:term", "glossary.html#term-estimator"),
    "estimators": ("std:term", "glossary.html#term-estimators"),
    "random_state": ("std:term", "glossary.html#term-random_state"),
    "glossary": ("std:label", "glossary.html#glossary",
                 "Glossary of Common Terms and API Elements"),
    "gaussian_process": ("std:label", "modules/gaussian_process.html#gaussian-process",
                         "Gaussian Processes"),
    "sklearn.utils.metadata_routing": ("py:module", "api/sklearn.utils.html"),
    "sklearn.clone": ("py:function", _SK_GEN.format("sklearn.base.clone")
                      + "#sklearn.base.clone"),
    **_generated(_SK_GEN, "py:class", [
        "sklearn.base.BaseEstimator",
        "sklearn.base.RegressorMixin",
        "sklearn.base.ClassifierMixin",
        "sklearn.base.MultiOutputMixin",
        "sklearn.gaussian_process.GaussianProcessRegressor",
        "sklearn.gaussian_process.GaussianProcessClassifier",
        "sklearn.gaussian_process.kernels.Kernel",
        "sklearn.gaussian_process.kernels.RBF",
        "sklearn.gaussian_process.kernels.Matern",
        "sklearn.gaussian_process.kernels.RationalQuadratic",
        "sklearn.gaussian_process.kernels.ExpSineSquared",
        "sklearn.gaussian_process.kernels.DotProduct",
        "sklearn.gaussian_process.kernels.ConstantKernel",
        "sklearn.gaussian_process.kernels.WhiteKernel",
        "sklearn.gaussian_process.kernels.Sum",
        "sklearn.gaussian_process.kernels.Product",
        "sklearn.linear_model.ARDRegression",
        "sklearn.linear_model.BayesianRidge",
        "sklearn.linear_model.Ridge",
        "sklearn.linear_model.RidgeCV",
        "sklearn.linear_model.LassoCV",
        "sklearn.multioutput.MultiOutputRegressor",
        "sklearn.linear_model.LogisticRegression",
        "sklearn.kernel_approximation.RBFSampler",
        "sklearn.kernel_approximation.Nystroem",
        "sklearn.calibration.CalibratedClassifierCV",
        "sklearn.pipeline.Pipeline",
        "sklearn.preprocessing.StandardScaler",
        "sklearn.model_selection.GridSearchCV",
        "sklearn.model_selection.KFold",
        "sklearn.neural_network.MLPClassifier",
        "sklearn.neural_network.MLPRegressor",
        "sklearn.utils.Bunch",
        "sklearn.utils.metadata_routing.MetadataRequest",
        "sklearn.exceptions.ConvergenceWarning",
        "sklearn.exceptions.NotFittedError",
        "sklearn.exceptions.DataConversionWarning",
    ]),
    **_generated(_SK_GEN, "py:function", [
        "sklearn.set_config",
        "sklearn.show_versions",
        "sklearn.base.clone",
        "sklearn.calibration.calibration_curve",
        "sklearn.datasets.load_diabetes",
        "sklearn.datasets.load_digits",
        "sklearn.datasets.load_breast_cancer",
        "sklearn.datasets.make_friedman1",
        "sklearn.datasets.make_regression",
        "sklearn.datasets.make_classification",
        "sklearn.datasets.make_blobs",
        "sklearn.datasets.make_moons",
        "sklearn.metrics.r2_score",
        "sklearn.metrics.mean_squared_error",
        "sklearn.metrics.accuracy_score",
        "sklearn.metrics.log_loss",
        "sklearn.metrics.brier_score_loss",
        "sklearn.metrics.roc_auc_score",
        "sklearn.metrics.average_precision_score",
        "sklearn.metrics.matthews_corrcoef",
        "sklearn.model_selection.train_test_split",
        "sklearn.model_selection.cross_val_score",
        "sklearn.model_selection.cross_validate",
        "sklearn.pipeline.make_pipeline",
        "sklearn.utils.check_random_state",
        "sklearn.utils.estimator_checks.parametrize_with_checks",
        "sklearn.utils.estimator_checks.check_estimator",
        "sklearn.utils.validation.check_is_fitted",
        "sklearn.utils.validation.validate_data",
    ]),
}

NUMPY = {
    # the glossary term and label that numpydoc's type links use ("array-like", "scalar")
    "array_like": ("std:term", "glossary.html#term-array_like"),
    "arrays.scalars": ("std:label", "reference/arrays.scalars.html#arrays-scalars", "Scalars"),
    "numpy": ("py:module", "reference/index.html"),
    "numpy.inf": ("py:data", "reference/constants.html"),
    "numpy.nan": ("py:data", "reference/constants.html"),
    "numpy.ndarray": ("py:class", _NP_GEN.format("numpy.ndarray")),
    "numpy.memmap": ("py:class", _NP_GEN.format("numpy.memmap")),
    "numpy.dtype": ("py:class", _NP_GEN.format("numpy.dtype")),
    "numpy.float64": ("py:attribute", "reference/arrays.scalars.html"),
    "numpy.float32": ("py:attribute", "reference/arrays.scalars.html"),
    "numpy.int64": ("py:attribute", "reference/arrays.scalars.html"),
    "numpy.random.Generator": ("py:class", "reference/random/generator.html"),
    "numpy.random.RandomState": ("py:class", "reference/random/legacy.html"),
    "numpy.random.default_rng": ("py:function", "reference/random/generator.html"),
    "numpy.linalg.LinAlgError": ("py:exception", _NP_GEN.format("numpy.linalg.LinAlgError")),
    **_generated(_NP_GEN, "py:function", [
        "numpy.array", "numpy.asarray", "numpy.ascontiguousarray", "numpy.unique",
        "numpy.argmax", "numpy.linspace", "numpy.zeros", "numpy.ones", "numpy.load",
        "numpy.save", "numpy.linalg.cholesky", "numpy.linalg.solve",
    ]),
}

TORCH = {
    "torch.Tensor": ("py:class", "tensors.html"),
    "torch.device": ("py:class", "tensor_attributes.html"),
    "torch.dtype": ("py:class", "tensor_attributes.html"),
    "torch.float64": ("py:attribute", "tensor_attributes.html#torch.dtype"),
    "torch.float32": ("py:attribute", "tensor_attributes.html#torch.dtype"),
    "torch.nn": ("py:module", "nn.html"),
    "torch.linalg": ("py:module", "linalg.html"),
    "torch.cuda": ("py:module", "cuda.html"),
    **_generated(_TORCH_GEN, "py:class", [
        "torch.Generator", "torch.nn.Module", "torch.nn.Linear", "torch.nn.MultiheadAttention",
        "torch.nn.TransformerEncoderLayer", "torch.optim.Adam", "torch.optim.LBFGS",
        "torch.optim.SGD", "torch.autograd.Function", "torch.no_grad",
    ]),
    **_generated(_TORCH_GEN, "py:function", [
        "torch.tensor", "torch.as_tensor", "torch.from_numpy", "torch.randn", "torch.rand",
        "torch.randperm", "torch.manual_seed", "torch.set_num_threads",
        "torch.get_rng_state", "torch.cdist", "torch.cholesky_solve",
        "torch.linalg.cholesky", "torch.linalg.cholesky_ex", "torch.linalg.solve_triangular",
        "torch.linalg.eigh", "torch.linalg.svd", "torch.cuda.is_available",
        "torch.cuda.mem_get_info", "torch.random.fork_rng",
    ]),
}

PYTHON = {
    # numpydoc turns these words of parameter types into links to the Python docs
    "bltin-boolean-values": ("std:label", "library/stdtypes.html#bltin-boolean-values",
                             "Boolean Type - bool"),
    "None": ("py:data", "library/constants.html"),
    "True": ("py:data", "library/constants.html"),
    "False": ("py:data", "library/constants.html"),
    "iterable": ("std:term", "glossary.html#term-iterable"),
    "sequence": ("std:term", "glossary.html#term-sequence"),
    "generator": ("std:term", "glossary.html#term-generator"),
    "callable": ("py:function", "library/functions.html"),
    "contextlib.contextmanager": ("py:function", "library/contextlib.html"),
    "collections.namedtuple": ("py:function", "library/collections.html"),
    **{name: ("py:class", "library/stdtypes.html")
       for name in ("list", "tuple", "str", "dict", "set", "frozenset", "range")},
    **{name: ("py:class", "library/functions.html")
       for name in ("bool", "int", "float", "complex", "object", "slice")},
    **{name: ("py:exception", "library/exceptions.html")
       for name in ("Exception", "MemoryError", "ValueError", "TypeError", "RuntimeError",
                    "FloatingPointError", "ArithmeticError", "UserWarning",
                    "RuntimeWarning")},
}

PROJECTS = {
    # file name: (project name, version, entries)
    "sklearn.inv": ("scikit-learn", "1.9", SKLEARN),
    "numpy.inv": ("NumPy", "2.3", NUMPY),
    "torch.inv": ("PyTorch", "2.13", TORCH),
    "python.inv": ("Python", "3", PYTHON),
}


def inventory_bytes(project, version, entries):
    """The bytes of an inventory file (format version 2) listing ``entries``."""
    header = (
        "# Sphinx inventory version 2\n"
        f"# Project: {project}\n"
        f"# Version: {version}\n"
        "# The remainder of this file is compressed using zlib.\n"
    ).encode()
    lines = []
    for name, (role, page, *title) in sorted(entries.items()):
        uri = page
        if "#" not in page and role.startswith("py:"):
            uri = f"{page}#module-{name}" if role == "py:module" else f"{page}#{name}"
        # a display name of "-" means the object's own name
        lines.append(f"{name} {role} 1 {uri} {title[0] if title else '-'}\n")
    return header + zlib.compress("".join(lines).encode())


def main(folder=HERE):
    for filename, (project, version, entries) in PROJECTS.items():
        data = inventory_bytes(project, version, entries)
        (Path(folder) / filename).write_bytes(data)
        print(f"wrote {Path(folder) / filename}: {len(entries)} entries")


if __name__ == "__main__":
    main(*sys.argv[1:])
