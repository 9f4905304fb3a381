"""The package's layout rules (``doc/adding_a_family.rst``), read from the source as text.

* no family imports another: shared maths lives once in ``skgpx/`` outside the families;
* no private name (``_x``) is imported from another module: what a module offers others
  has a public name, and a private one is its own;
* code, tests and benchmarks say what they do, not where they came from: no issue
  numbers, no "brief", no documents outside the repository.
"""

import ast
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "skgpx"
FAMILIES = ("pathwise", "dkp", "qep", "kepsvgp", "drd")


def _modules():
    return sorted(PACKAGE.rglob("*.py"))


def _module_name(path):
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path):
    """``(absolute module, imported name or None, line)`` of every import in ``path``."""
    package = _module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, None, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            for alias in node.names:
                yield module, alias.name, node.lineno


def _family(module):
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "skgpx" and parts[1] in FAMILIES \
        else None


def _is_module(module, name):
    target = PACKAGE.parent.joinpath(*module.split("."), name)
    return target.with_suffix(".py").exists() or (target / "__init__.py").exists()


def test_no_family_imports_another():
    crossings = []
    for path in _modules():
        own = _family(_module_name(path))
        for module, name, line in _imports(path):
            other = _family(module)
            if other is not None and own is not None and other != own:
                crossings.append(f"{path.relative_to(ROOT)}:{line} imports {module}")
    assert not crossings, "\n".join(crossings)


def test_no_private_name_is_imported_from_another_module():
    private = []
    for path in _modules():
        for module, name, line in _imports(path):
            if (name is None or not name.startswith("_") or name.startswith("__")
                    or not module.startswith("skgpx") or _is_module(module, name)):
                continue
            private.append(f"{path.relative_to(ROOT)}:{line} imports {name} from {module}")
    assert not private, "\n".join(private)


# an issue number, the brief, or a document outside the repository
HISTORY = re.compile(r"\bissues? #?\d+|\bbrief\b|shared/(spec|conventions|fixtures|seeds)"
                     r"|\bspec §|\bconventions §|\.\./shared", re.IGNORECASE)


@pytest.mark.parametrize("folder", ["skgpx", "tests", "benchmarks", "examples"])
def test_sources_say_what_they_do_not_where_they_came_from(folder):
    this = pathlib.Path(__file__).resolve()
    hits = []
    for path in sorted((ROOT / folder).rglob("*")):
        if path.suffix not in (".py", ".sh", ".md", ".rst") or path.resolve() == this:
            continue
        for number, text in enumerate(path.read_text().splitlines(), 1):
            if HISTORY.search(text):
                hits.append(f"{path.relative_to(ROOT)}:{number}: {text.strip()}")
    assert not hits, "\n".join(hits)
