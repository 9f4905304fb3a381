"""The documentation builds with warnings as errors, has the pages it promises, and shows
them without a network (its equations typeset by a MathJax that ships with the pages).

One build of a copy of ``doc/`` and ``examples/`` (the build writes generated pages into its
source folder, so the working tree is left alone) is shared by the checks of the module.  It
does not run the gallery (``-D plot_gallery=0``: a build in well under a minute); the build
that runs every example runs on its small settings.  Both builds carry the ``slow`` marker:
``make test`` runs them, ``make test-fast`` leaves them out.
"""
import importlib
import os
import posixpath
import re
import shutil
import subprocess
import sys
import zlib
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "doc"
EXAMPLES = ROOT / "examples"

# one page per family and two across families, named by the user guide
GUIDE_PAGES = ("pathwise", "dkp", "deep_qep", "kep_svgp", "smooth_drd", "choosing",
               "calibration")
# the public namespaces besides the package itself
PUBLIC_MODULES = ("skgpx.kernels", "skgpx.linalg", "skgpx.metrics", "skgpx.datasets",
                  "skgpx.qep", "skgpx.distributed")
GALLERY = sorted(path.stem for path in EXAMPLES.glob("plot_*.py"))
# what a build writes into its source folder: never copied from the working tree
BUILD_OUTPUTS = ("_build", "auto_examples", "generated", "sg_execution_times.rst")


def _sphinx_build(root, *options, env=None):
    """Build the HTML of ``root/doc`` into ``root/html``, warnings as errors, one process.

    ``env`` updates the environment of the build; a value of None removes the variable.
    """
    shutil.copytree(DOC, root / "doc", ignore=shutil.ignore_patterns(*BUILD_OUTPUTS))
    shutil.copytree(EXAMPLES, root / "examples",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    environ = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
               "OPENBLAS_NUM_THREADS": "1", "MPLBACKEND": "Agg", **(env or {})}
    environ = {key: value for key, value in environ.items() if value is not None}
    command = [sys.executable, "-m", "sphinx", "-b", "html", "-W", "--keep-going", "-j", "1",
               "-q", "-d", str(root / "doctrees"), *options, str(root / "doc"),
               str(root / "html")]
    result = subprocess.run(command, cwd=root, env=environ, capture_output=True, text=True)
    assert result.returncode == 0, (
        f"sphinx-build failed ({result.returncode}):\n{result.stdout[-5000:]}\n"
        f"{result.stderr[-10000:]}"
    )
    return root / "html"


@pytest.fixture(scope="module")
def html(tmp_path_factory):
    """The HTML of a build that does not run the gallery."""
    return _sphinx_build(tmp_path_factory.mktemp("docs"), "-D", "plot_gallery=0")


def _public_names(module_name):
    module = importlib.import_module(module_name)
    return [name for name in module.__all__ if not name.startswith("__")]


@pytest.mark.slow
def test_build_without_gallery(html):
    # the fixture asserted a clean build; the landing page links every part of the site
    index = (html / "index.html").read_text(encoding="utf-8")
    for page in ("guide/index.html", "large_data.html", "scaling_out.html",
                 "auto_examples/index.html", "api.html", "adding_a_family.html"):
        assert f'href="{page}' in index, page
    assert "The first estimator" not in index


@pytest.mark.slow
@pytest.mark.parametrize("page", GUIDE_PAGES)
def test_guide_pages(html, page):
    assert (html / "guide" / f"{page}.html").is_file()


@pytest.mark.slow
def test_api_pages_of_the_package(html):
    names = _public_names("skgpx")
    assert "PathwiseGPSampler" in names
    missing = [name for name in names if not (html / "generated" / f"skgpx.{name}.html").is_file()]
    assert not missing, f"doc/api.rst does not list skgpx.{missing}"


@pytest.mark.slow
@pytest.mark.parametrize("module_name", PUBLIC_MODULES)
def test_api_pages_of_the_public_modules(html, module_name):
    names = _public_names(module_name)
    top_level = set(_public_names("skgpx"))

    def page(name):
        # names that skgpx itself exports (the Q-EP estimators) have their page there
        prefix = "skgpx" if name in top_level else module_name
        return html / "generated" / f"{prefix}.{name}.html"

    missing = [name for name in names if not page(name).is_file()]
    assert not missing, f"doc/api.rst does not list {module_name}.{missing}"


@pytest.mark.slow
def test_estimator_pages_link_scikit_learn_offline(html):
    # set_*_request and get_metadata_routing, inherited from scikit-learn, cite its user
    # guide and glossary: the links resolve through the local inventories
    text = (html / "generated" / "skgpx.PathwiseGPSampler.html").read_text(encoding="utf-8")
    assert 'id="skgpx.PathwiseGPSampler.set_predict_request"' in text
    assert 'href="https://scikit-learn.org/stable/metadata_routing.html' in text
    assert 'href="https://scikit-learn.org/stable/glossary.html#term-meta-estimator"' in text


def _read_conf():
    conf = {"__file__": str(DOC / "conf.py")}
    exec(compile((DOC / "conf.py").read_text(), str(DOC / "conf.py"), "exec"), conf)
    return conf


@pytest.mark.parametrize("quick, expected", [("1", "small"), ("0", None), (None, None)])
def test_quick_mode_asks_for_small_examples(monkeypatch, quick, expected):
    monkeypatch.delenv("SKGPX_EXAMPLE_SIZE", raising=False)
    if quick is None:
        monkeypatch.delenv("SKGPX_DOCS_QUICK", raising=False)
    else:
        monkeypatch.setenv("SKGPX_DOCS_QUICK", quick)
    _read_conf()
    assert os.environ.get("SKGPX_EXAMPLE_SIZE") == expected
    # a size set by the user wins
    monkeypatch.setenv("SKGPX_EXAMPLE_SIZE", "full")
    _read_conf()
    assert os.environ["SKGPX_EXAMPLE_SIZE"] == "full"


def test_intersphinx_reads_local_inventories(monkeypatch):
    monkeypatch.delenv("SKGPX_DOCS_QUICK", raising=False)
    mapping = _read_conf()["intersphinx_mapping"]
    assert {"sklearn", "numpy", "torch"} <= set(mapping)
    for name, (url, inventory) in mapping.items():
        assert url.startswith("https://")
        path = Path(inventory)
        assert path.is_absolute() and path.parent == DOC / "_intersphinx", name
        data = path.read_bytes()
        assert data.startswith(b"# Sphinx inventory version 2\n"), name
        body = zlib.decompress(data[data.index(b"zlib.\n") + len(b"zlib.\n"):]).decode()
        assert body.strip(), name


@pytest.mark.slow
def test_gallery_pages(html):
    assert GALLERY, "no examples/plot_*.py"
    index = (html / "auto_examples" / "index.html").read_text(encoding="utf-8")
    for stem in GALLERY:
        assert (html / "auto_examples" / f"{stem}.html").is_file(), stem
        assert f'href="{stem}.html' in index, stem
    # demo.py is a script, not a gallery example
    assert not (html / "auto_examples" / "demo.html").exists()


@pytest.mark.slow
def test_gallery_figures(tmp_path):
    """Every gallery example runs (small settings) and its page shows a figure."""
    # quick mode: conf.py asks the examples for their small settings
    html = _sphinx_build(tmp_path, env={"SKGPX_DOCS_QUICK": "1", "SKGPX_EXAMPLE_SIZE": None})
    for stem in GALLERY:
        text = (html / "auto_examples" / f"{stem}.html").read_text(encoding="utf-8")
        images = re.findall(r'src="((?:\.\./)*_images/sphx_glr_[^"]+\.png)"', text)
        assert images, f"{stem}: no figure"
        for image in images:
            assert (html / "auto_examples" / image).resolve().is_file(), image
    # what the examples printed and drew is on the pages, and still nothing is remote
    assert not _remote_loads(_page_assets(html))


# -- the pages need no network ----------------------------------------------------------------
# pages whose equations the tests below must see typeset by the local MathJax: the guide and
# design notes are where the maths is explained
MATHS_PAGES = ("guide/pathwise.html", "guide/pathwise_classifier.html", "design_notes.html",
               "large_data.html")
MATHJAX = "_static/mathjax/tex-chtml.js"


class _PageAssets(HTMLParser):
    """What a page loads (scripts, stylesheets, frames, ...) and whether it has maths."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.loads = []          # (tag, url) of every resource the page fetches itself
        self.inline_scripts = []
        self.maths = 0           # elements that sphinx.ext.mathjax wrote as TeX
        self._in_script = False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "script":
            if attrs.get("src"):
                self.loads.append((tag, attrs["src"]))
            else:
                self._in_script = True
                self.inline_scripts.append("")
        elif tag == "link" and attrs.get("href") and (
                set((attrs.get("rel") or "").split())
                & {"stylesheet", "preload", "modulepreload", "prefetch", "icon"}):
            self.loads.append((tag, attrs["href"]))
        elif tag in ("iframe", "embed") and attrs.get("src"):
            self.loads.append((tag, attrs["src"]))
        if tag in ("span", "div") and "math" in (attrs.get("class") or "").split():
            self.maths += 1

    def handle_endtag(self, tag):
        if tag == "script":
            self._in_script = False

    def handle_data(self, data):
        if self._in_script:
            self.inline_scripts[-1] += data


def _is_remote(url):
    # http(s)://, protocol-relative //host/..., or any other scheme but data:
    parts = urlsplit(url)
    return bool(parts.netloc) or parts.scheme not in ("", "data")


def _page_assets(html):
    """{page path relative to the build: its _PageAssets}, for every page of the build."""
    pages = {}
    for path in sorted(html.rglob("*.html")):
        page = path.relative_to(html).as_posix()
        if page.startswith("_static/"):
            continue        # theme macros copied as static files, not pages
        parser = _PageAssets()
        parser.feed(path.read_text(encoding="utf-8"))
        pages[page] = parser
    return pages


@pytest.fixture(scope="module")
def assets(html):
    return _page_assets(html)


def _remote_loads(assets):
    return sorted({(page, tag, url) for page, found in assets.items()
                   for tag, url in found.loads if _is_remote(url)})


def _resolve(page, url):
    """The file of the build that ``url``, linked from ``page``, points to."""
    return posixpath.normpath(posixpath.join(posixpath.dirname(page), urlsplit(url).path))


@pytest.mark.slow
def test_no_page_loads_anything_from_another_site(html, assets):
    assert len(assets) > 50, sorted(assets)
    remote = _remote_loads(assets)
    assert not remote, f"{len(remote)} remote loads, e.g. {remote[:5]}"
    # and what a page loads is in the build
    missing = sorted({(page, url) for page, found in assets.items() for _, url in found.loads
                      if not url.startswith("data:")
                      and not (html / _resolve(page, url)).is_file()})
    assert not missing, missing[:10]
    # nor does an inline script name another site (a MathJax configuration, a loader)
    fetching = sorted({page for page, found in assets.items() for body in found.inline_scripts
                       if re.search(r"(https?:)?//[\w.-]+\.\w+/", body)})
    assert not fetching, fetching


@pytest.mark.slow
def test_every_page_with_maths_loads_the_local_mathjax(html, assets):
    with_maths = {page for page, found in assets.items() if found.maths}
    assert set(MATHS_PAGES) <= with_maths, sorted(with_maths)
    for page in sorted(with_maths):
        scripts = [_resolve(page, url) for tag, url in assets[page].loads if tag == "script"]
        assert MATHJAX in scripts, (page, scripts)
    assert (html / MATHJAX).is_file()


@pytest.mark.slow
def test_the_local_mathjax_has_its_fonts_and_extensions(html):
    # MathJax finds its components beside its own script and the CHTML fonts in
    # output/chtml/fonts/woff-v2 below it; every font the script names is in the build
    assert (html / MATHJAX).is_file()
    root = (html / MATHJAX).parent
    script = (html / MATHJAX).read_text(encoding="utf-8")
    assert "document.currentScript" in script
    assert re.search(r'resolvePath\("output/chtml/fonts/woff-v2"', script)
    fonts = set(re.findall(r"MathJax_[A-Za-z0-9-]+\.woff", script))
    assert len(fonts) > 10, fonts
    missing = sorted(name for name in fonts
                     if not (root / "output" / "chtml" / "fonts" / "woff-v2" / name).is_file())
    assert not missing, missing
    # the TeX packages that MathJax loads on first use of one of their macros (\cancel,
    # \boldsymbol, ...) or on \require
    for extension in ("autoload", "require", "cancel", "boldsymbol", "mathtools"):
        assert (root / "input" / "tex" / "extensions" / f"{extension}.js").is_file(), extension
