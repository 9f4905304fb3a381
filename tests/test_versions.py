"""One version, written once: the changelog and the build follow it, pickles record it, and a
pickle written by another version loads with a warning or fails with one clear message."""

import ast
import importlib.machinery
import importlib.util
import pickle
import re
import sys
import types
import warnings
from pathlib import Path

import numpy as np
import pytest
from packaging.version import Version
from sklearn.base import BaseEstimator

import skgpx
from skgpx import InconsistentVersionWarning, PathwiseFunctions, PathwiseGPSampler
from skgpx._base import TorchEstimatorMixin

ROOT = Path(__file__).resolve().parents[1]
VERSION_KEY = "_skgpx_version"
X = np.linspace(0.0, 1.0, 8).reshape(-1, 1)
y = np.sin(6.0 * X[:, 0])


def _changelog_sections():
    """(version, date) of every ``## [version] - date`` heading, newest first."""
    headings = re.findall(r"^## (.*)$", (ROOT / "CHANGELOG.md").read_text(encoding="utf-8"),
                          flags=re.MULTILINE)
    sections = []
    for heading in headings:
        match = re.fullmatch(r"\[([^\]]+)\] - (unreleased|\d{4}-\d{2}-\d{2})", heading)
        assert match, f"CHANGELOG heading {heading!r} is not '## [X.Y.Z] - YYYY-MM-DD|unreleased'"
        sections.append((Version(match[1]), match[2]))
    return sections


def test_changelog_newest_section_is_this_version():
    version = Version(skgpx.__version__)
    sections = _changelog_sections()
    (newest, date), older = sections[0], sections[1:]
    if version.is_devrelease or version.is_prerelease:
        # development towards a release gathers under that release's unreleased section
        assert (newest, date) == (Version(version.base_version), "unreleased")
    else:
        assert newest == version and date != "unreleased"
    assert all(date != "unreleased" for _, date in older)
    versions = [section[0] for section in sections]
    assert versions == sorted(versions, reverse=True) and len(set(versions)) == len(versions)


def test_the_build_reads_the_version_from_the_package():
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" not in project["project"] and project["project"]["dynamic"] == ["version"]
    module, _, name = project["tool"]["setuptools"]["dynamic"]["version"]["attr"].rpartition(".")
    # setuptools reads a literal assignment from the file, without importing the package
    tree = ast.parse(ROOT.joinpath(*module.split(".")).with_suffix(".py").read_text())
    literals = {target.id: ast.literal_eval(node.value) for node in tree.body
                if isinstance(node, ast.Assign) for target in node.targets}
    assert literals[name] == skgpx.__version__


def test_every_public_estimator_pickles_through_the_versioned_state():
    public = [getattr(skgpx, name) for name in skgpx.__all__]
    estimators = [cls for cls in public if isinstance(cls, type) and issubclass(cls, BaseEstimator)]
    assert len(estimators) == 7
    for cls in estimators:
        assert cls.__getstate__ is TorchEstimatorMixin.__getstate__, cls.__name__
        assert cls.__setstate__ is TorchEstimatorMixin.__setstate__, cls.__name__


@pytest.fixture(scope="module")
def fitted():
    return PathwiseGPSampler(alpha=1e-2, optimizer=None, random_state=0).fit(X, y)


def test_round_trip_with_this_version_is_silent(fitted):
    assert fitted.__getstate__()[VERSION_KEY] == skgpx.__version__
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loaded = pickle.loads(pickle.dumps(fitted))
    assert vars(loaded).keys() == vars(fitted).keys()  # the version is not an attribute
    np.testing.assert_array_equal(loaded.predict(X), fitted.predict(X))


def test_pickle_of_another_version_warns_naming_both(fitted, monkeypatch):
    from skgpx import _pickle_versions

    monkeypatch.setattr(_pickle_versions, "__version__", "0.2.1")
    data = pickle.dumps(fitted)
    monkeypatch.undo()
    message = (f"PathwiseGPSampler was pickled by skgpx 0.2.1 and is loaded by skgpx "
               f"{re.escape(skgpx.__version__)}, whose fitted state may differ")
    with pytest.warns(InconsistentVersionWarning, match=message) as record:
        loaded = pickle.loads(data)
    assert len(record) == 1
    warning = record[0].message
    assert (warning.estimator_name, warning.original_version, warning.current_version) == (
        "PathwiseGPSampler", "0.2.1", skgpx.__version__)
    np.testing.assert_array_equal(loaded.predict(X), fitted.predict(X))


def _unversioned_pickle(obj, monkeypatch):
    """``obj`` pickled as it was before pickles recorded the skgpx version: the same class
    and state, without the version."""
    cls = type(obj)
    get_state = cls.__getstate__

    def unversioned(self):
        state = get_state(self)
        state.pop(VERSION_KEY, None)
        return state

    with monkeypatch.context() as patch:
        patch.setattr(cls, "__getstate__", unversioned)
        return pickle.dumps(obj)


def test_pickle_without_a_version_is_refused_naming_0_1_0(fitted, monkeypatch):
    functions = fitted.sample_functions(n_samples=2, random_state=0)
    for obj in (fitted, functions):
        data = _unversioned_pickle(obj, monkeypatch)
        name = type(obj).__name__
        with pytest.raises(pickle.UnpicklingError,
                           match=f"This {name} was pickled by skgpx 0.1.0: its state records "
                                 "no skgpx version") as error:
            pickle.loads(data)
        assert f"refit it with skgpx {skgpx.__version__}" in str(error.value)
    # with the version, PathwiseFunctions loads too
    loaded = pickle.loads(pickle.dumps(functions))
    assert isinstance(loaded, PathwiseFunctions)
    np.testing.assert_array_equal(loaded(X), functions(X))


def _missing_module_message(name):
    return (f"No module named '{re.escape(name)}' in skgpx {re.escape(skgpx.__version__)}. "
            r"If a pickle refers to it, another version of skgpx wrote it, whose private "
            r"modules differ \(skgpx 0.1.0 if it was written before skgpx 0.2.0")


def test_pickle_naming_a_moved_module_fails_with_the_version_message(fitted, monkeypatch):
    # a fitted state whose mode class lives in a module that this version does not have
    moved = "skgpx.pathwise._mode_of_another_version"
    mode_class = type(fitted._mode)
    monkeypatch.setattr(mode_class, "__module__", moved)
    monkeypatch.setitem(sys.modules, moved, types.SimpleNamespace(
        **{mode_class.__qualname__: mode_class}))
    data = pickle.dumps(fitted)
    monkeypatch.undo()
    assert moved.encode() in data
    with pytest.raises(ModuleNotFoundError, match=_missing_module_message(moved)):
        pickle.loads(data)
    # the same from the plain opcodes of a stream that names a class of a moved module
    with pytest.raises(ModuleNotFoundError, match=_missing_module_message(moved)):
        pickle.loads(f"c{moved}\nExactMode\n.".encode())


def test_missing_module_finder_leaves_other_imports_alone():
    name = "skgpx.pathwise._no_such_module"
    with pytest.raises(ModuleNotFoundError, match=_missing_module_message(name)) as error:
        importlib.import_module(name)
    assert error.value.name == name
    # find_spec explains too rather than reporting a module that does not exist
    with pytest.raises(ModuleNotFoundError, match=_missing_module_message(name)):
        importlib.util.find_spec(name)
    # a from-import of a missing name is Python's own ImportError
    with pytest.raises(ImportError, match="cannot import name '_no_such_module' from"):
        from skgpx.pathwise import _no_such_module  # noqa: F401
    # modules that exist, and other packages, are found as before
    assert importlib.util.find_spec("skgpx.kernels").origin.endswith("kernels.py")
    assert importlib.util.find_spec("skgpx_no_such_package") is None
    finders = [finder for finder in sys.meta_path
               if getattr(finder, "__module__", None) == "skgpx._pickle_versions"]
    assert len(finders) == 1
    assert sys.meta_path.index(finders[0]) > sys.meta_path.index(importlib.machinery.PathFinder)
