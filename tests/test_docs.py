"""The documentation builds with warnings as errors and has the pages it promises.

One build of a copy of ``doc/`` and ``examples/`` (the build writes generated pages into its
source folder, so the working tree is left alone) is shared by the checks of the module.  It
does not run the gallery (``-D plot_gallery=0``: a build in well under a minute); the build
that runs every example, on its small settings, is marked ``slow``.
"""
import importlib
import os
import re
import shutil
import subprocess
import sys
import zlib
from pathlib import Path

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


def test_build_without_gallery(html):
    # the fixture asserted a clean build; the landing page links every part of the site
    index = (html / "index.html").read_text(encoding="utf-8")
    for page in ("guide/index.html", "large_data.html", "scaling_out.html",
                 "auto_examples/index.html", "api.html", "adding_a_family.html"):
        assert f'href="{page}' in index, page
    assert "The first estimator" not in index


@pytest.mark.parametrize("page", GUIDE_PAGES)
def test_guide_pages(html, page):
    assert (html / "guide" / f"{page}.html").is_file()


def test_api_pages_of_the_package(html):
    names = _public_names("skgpx")
    assert "PathwiseGPSampler" in names
    missing = [name for name in names if not (html / "generated" / f"skgpx.{name}.html").is_file()]
    assert not missing, f"doc/api.rst does not list skgpx.{missing}"


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
