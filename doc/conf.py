"""Sphinx configuration for the skgpx documentation (build: sphinx-build doc doc/_build)."""
from importlib.metadata import version as _version

project = "skgpx"
author = "skgpx developers"
release = _version("skgpx")
version = ".".join(release.split(".")[:2])

extensions = ["sphinx.ext.autodoc", "numpydoc"]
autodoc_default_options = {"members": True, "inherited-members": False}
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False

master_doc = "index"
exclude_patterns = ["_build"]
html_theme = "alabaster"
