"""The version of skgpx: the one place it is written.

``pyproject.toml`` reads it when the package is built, ``skgpx.__version__`` re-exports it, and
every fitted estimator records it when pickled.  Versions follow semantic versioning, spelled
as PEP 440 allows: ``X.Y.Z`` is a release and has its section in ``CHANGELOG.md``;
``X.Y.Z.devN`` is the development towards it, whose changes gather under the changelog's
unreleased ``X.Y.Z`` section.  ``N`` goes up whenever a change alters what an estimator pickles,
so that a pickle written before that change is recognised as another version's.
"""

__version__ = "0.2.0.dev0"
