"""Sphinx configuration of the skgpx documentation.

Build it with ``make docs`` (warnings are errors; HTML in ``doc/_build/html``), or directly::

    python -m sphinx -W --keep-going -b html doc doc/_build/html

Options, as ``make`` targets or on the ``sphinx-build`` command line:

* ``make docs-noplot`` (``-D plot_gallery=0``): the gallery pages are written from the
  example sources without running them, so they have no figures or output; a build in
  seconds.
* ``make docs-quick`` (environment variable ``SKGPX_DOCS_QUICK=1``): the examples run,
  on their small settings (``SKGPX_EXAMPLE_SIZE=small`` unless that variable is already
  set), for a complete site at a fraction of the full examples' cost.

The build never reads the network: intersphinx uses the inventories in ``_intersphinx/``
(see ``_intersphinx/make_inventories.py``).  Nor do the pages it writes: the equations are
typeset by a copy of MathJax in ``_static/mathjax`` (see "maths, offline" below), and no
page loads a script from another site.
"""
import inspect
import os
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

import skgpx

HERE = Path(__file__).resolve().parent

# -- quick mode: must run before sphinx-gallery executes anything ------------------------
if os.environ.get("SKGPX_DOCS_QUICK", "").strip().lower() not in ("", "0", "false", "no"):
    os.environ.setdefault("SKGPX_EXAMPLE_SIZE", "small")

# -- project -------------------------------------------------------------------------------
project = "skgpx"
author = "skgpx developers"
copyright = "skgpx developers"
release = skgpx.__version__  # the source tree's, not the metadata of an older editable install
version = ".".join(release.split(".")[:2])

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.intersphinx",
    "sphinx.ext.mathjax",
    "numpydoc",
    "sphinx_gallery.gen_gallery",
]

root_doc = "index"
templates_path = ["_templates"]
# sg_execution_times.rst: pages that builds of older settings left behind (see
# "write_computation_times" below) are not built
exclude_patterns = ["_build", "_intersphinx", "Thumbs.db", ".DS_Store",
                    "sg_execution_times.rst", "**/sg_execution_times.rst"]
# `text` in single backquotes is code, as in scikit-learn's docstrings
default_role = "literal"

# -- API reference: autodoc, autosummary, numpydoc -----------------------------------------
# api.rst lists every public name in autosummary tables; autosummary writes one page per
# name into generated/ from the templates in _templates/autosummary/.
autosummary_generate = True
autodoc_typehints = "none"
autodoc_member_order = "alphabetical"

numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
# The known words of parameter types become links: numpydoc's own aliases (int, bool,
# array-like, ndarray, RandomState, ...) and the torch types below; every other word
# ("of", "shape", "n_samples", ...) stays text.
numpydoc_xref_param_type = True
numpydoc_xref_aliases = {
    name: name for name in ("torch.Tensor", "torch.Generator", "torch.device", "torch.dtype")
}
numpydoc_xref_aliases["Tensor"] = "torch.Tensor"
numpydoc_xref_ignore = "all"

# -- intersphinx, offline ------------------------------------------------------------------
# (base URL the links point to, local inventory file).  The inventories are files in this
# repository, so a build never downloads anything.  The docstrings every estimator inherits
# from scikit-learn (set_*_request, get_metadata_routing, score) cite its user guide and
# glossary (:ref:`metadata_routing`, :term:`meta-estimator`, ...): sklearn.inv resolves
# them to scikit-learn's pages, which is what keeps those methods warning-free.
_INV = HERE / "_intersphinx"
intersphinx_mapping = {
    "sklearn": ("https://scikit-learn.org/stable/", str(_INV / "sklearn.inv")),
    "numpy": ("https://numpy.org/doc/stable/", str(_INV / "numpy.inv")),
    "torch": ("https://docs.pytorch.org/docs/stable/", str(_INV / "torch.inv")),
    # numpydoc's links of parameter types (bool, int, ...) point into the Python docs
    "python": ("https://docs.python.org/3/", str(_INV / "python.inv")),
}

# -- maths, offline -----------------------------------------------------------------------
# sphinx.ext.mathjax writes the equations as TeX and, by default, has every page load
# MathJax from a CDN: opened without a network, the pages show raw LaTeX.  The package
# sphinx-mathjax-offline (in the "docs" extra) ships MathJax 3.2.2 with its fonts and TeX
# extensions; its folder is one more static path, so the build copies it to
# _static/mathjax and every page with maths loads it from there.  The package is used as
# files, not as a Sphinx extension: as an extension it declares no parallel safety, which
# under -W turns `make docs SPHINXOPTS="-j 2"` into an error.
_MATHJAX_DIST = "sphinx-mathjax-offline"
try:
    _MATHJAX_STATIC = Path(distribution(_MATHJAX_DIST).locate_file(f"{_MATHJAX_DIST}/static"))
except PackageNotFoundError:
    raise RuntimeError(
        f"The documentation typesets its equations with the MathJax of the package "
        f"{_MATHJAX_DIST!r}, which is not installed: install the documentation tools with "
        f"`pip install -e '.[docs]'` (or `make install`)."
    ) from None
if not (_MATHJAX_STATIC / "mathjax" / "tex-chtml.js").is_file():
    raise RuntimeError(
        f"{_MATHJAX_DIST!r} is installed but has no mathjax/tex-chtml.js in "
        f"{_MATHJAX_STATIC}: this configuration expects the layout of its version 0.0.2."
    )
# relative to html_static_path: the page links _static/mathjax/tex-chtml.js, and MathJax
# finds its fonts and extensions beside that file
mathjax_path = "mathjax/tex-chtml.js"

# -- sphinx-gallery ------------------------------------------------------------------------
sphinx_gallery_conf = {
    "examples_dirs": str(HERE.parent / "examples"),
    "gallery_dirs": "auto_examples",
    # only plot_*.py files are gallery examples: demo.py and any helper module stay out
    # of the gallery altogether (ignore_pattern is matched against the file name)
    "filename_pattern": r"plot_",
    "ignore_pattern": r"^(?!plot_).*\.py$",
    "within_subsection_order": "FileNameSortKey",
    # "Gallery examples using ..." on the API pages, and links from the examples' code
    # to the API pages
    "doc_module": ("skgpx",),
    "backreferences_dir": "generated/backreferences",
    "remove_config_comments": True,
    # no page of execution times: sphinx-gallery's table loads jQuery and DataTables from
    # CDNs, and the site loads no remote script (the times are in the build's log, and on
    # each example's page)
    "write_computation_times": False,
}

# -- HTML ----------------------------------------------------------------------------------
html_theme = "pydata_sphinx_theme"
html_title = f"skgpx {release}"
html_static_path = ["_static", str(_MATHJAX_STATIC)]
html_css_files = ["skgpx.css"]
html_show_sourcelink = False
html_theme_options = {
    "navbar_align": "left",
    "show_toc_level": 2,
    "navigation_with_keys": False,
    "secondary_sidebar_items": ["page-toc"],
    "footer_start": ["copyright"],
    "footer_end": ["sphinx-version", "theme-version"],
}
html_context = {"default_mode": "light"}


# -- hooks ---------------------------------------------------------------------------------
def _drop_type_docstring(app, what, name, obj, options, lines):
    """Module constants without a ``#:`` comment of their own get no text, rather than the
    docstring of their type (``STATIONARY_PROFILES`` would read "Built-in immutable
    sequence")."""
    type_doc = inspect.getdoc(type(obj))
    if what == "data" and type_doc and "\n".join(lines).strip() == type_doc.strip():
        lines.clear()


def setup(app):
    # before numpydoc (priority 500) reformats the lines
    app.connect("autodoc-process-docstring", _drop_type_docstring, priority=100)
