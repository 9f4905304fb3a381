"""What a pickle written by another version of skgpx meets when it is loaded.

Every estimator records the skgpx version in its pickled state, as scikit-learn's estimators
record theirs.  A pickle from another version loads with an :class:`InconsistentVersionWarning`
naming both versions.  A pickle that records no version comes from skgpx 0.1.0, a name the
package kept through changes of its fitted state (an estimator from one of them could load and
then fail in ``predict``); it is refused at loading, with the way out.  Such pickles usually
fail sooner, at a private module that has since moved: a finder at the end of ``sys.meta_path``
turns the plain ``No module named ...`` into the same explanation.
"""

import pickle
import sys
import warnings

from skgpx._version import __version__

# The version every skgpx called itself before pickles recorded one, and the first that does.
UNRECORDED_VERSION = "0.1.0"
FIRST_RECORDED_VERSION = "0.2.0"
# the key under which a pickled state records the skgpx version that wrote it
VERSION_KEY = "_skgpx_version"


class InconsistentVersionWarning(UserWarning):
    """Warning raised when an object is unpickled by a version of skgpx other than the one
    that pickled it.

    Its fitted state may differ between the two versions, so that the object may fail or
    predict differently: refit it with this version, or load it with the version that wrote it.

    Attributes
    ----------
    estimator_name : str
        The class of the unpickled object.
    current_version : str
        The version of skgpx loading it.
    original_version : str
        The version of skgpx that pickled it.
    """

    def __init__(self, *, estimator_name, current_version, original_version):
        self.estimator_name = estimator_name
        self.current_version = current_version
        self.original_version = original_version

    def __str__(self):
        return (
            f"{self.estimator_name} was pickled by skgpx {self.original_version} and is "
            f"loaded by skgpx {self.current_version}, whose fitted state may differ: it may "
            f"fail or predict differently. Refit it with skgpx {self.current_version}, or "
            f"load it with skgpx {self.original_version}."
        )


def _way_out():
    return (f"Load it with the skgpx version that wrote it, or refit it with skgpx "
            f"{__version__} and pickle the new fit.")


def add_version(state):
    """``state`` (a pickled attribute dict) with the skgpx version recorded in it."""
    return dict(state, **{VERSION_KEY: __version__})


def pop_version(state, owner):
    """Remove the recorded version from an unpickled ``state`` and check it.

    Warns with :class:`InconsistentVersionWarning` when another version of skgpx wrote the
    state; raises :class:`pickle.UnpicklingError` naming skgpx 0.1.0 when it records no version.
    ``owner`` names the unpickled object's class in both.
    """
    original = state.pop(VERSION_KEY, None)
    if original is None:
        raise pickle.UnpicklingError(
            f"This {owner} was pickled by skgpx {UNRECORDED_VERSION}: its state records no "
            f"skgpx version, as every skgpx from {FIRST_RECORDED_VERSION} on does. skgpx "
            f"{__version__} does not load objects pickled by skgpx {UNRECORDED_VERSION}, a "
            f"version name that covered many different fitted states. {_way_out()}"
        )
    if original != __version__:
        warnings.warn(InconsistentVersionWarning(
            estimator_name=owner, current_version=__version__, original_version=original))
    return state


class _MovedModuleFinder:
    """The last finder on ``sys.meta_path``: a module named ``skgpx.<...>`` that no finder
    before it found is one this version does not have.  Pickles name the private modules of
    the classes in a fitted state, so one written by another version can ask for a module
    that has moved; the import error says so instead of only ``No module named ...``.

    It raises from ``find_spec`` rather than returning a spec whose loading fails, so that
    ``importlib.util.find_spec`` never reports a module that does not exist (it raises this
    :class:`ModuleNotFoundError` instead of returning None).
    """

    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        if not fullname.startswith("skgpx."):
            return None
        raise ModuleNotFoundError(
            f"No module named {fullname!r} in skgpx {__version__}. If a pickle refers to it, "
            f"another version of skgpx wrote it, whose private modules differ (skgpx "
            f"{UNRECORDED_VERSION} if it was written before skgpx {FIRST_RECORDED_VERSION}: "
            f"this version cannot load those). {_way_out()}",
            name=fullname,  # `from skgpx import missing` still gives Python's own ImportError
        )


def _is_moved_module_finder(finder):
    # by name, so that a reloaded copy of this module does not install a second finder
    return (getattr(finder, "__qualname__", None) == _MovedModuleFinder.__qualname__
            and getattr(finder, "__module__", None) == __name__)


if not any(_is_moved_module_finder(finder) for finder in sys.meta_path):
    sys.meta_path.append(_MovedModuleFinder)
