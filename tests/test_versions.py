"""One version, written once: the changelog and the build follow it."""

import ast
import re
from pathlib import Path

from packaging.version import Version

import skgpx

ROOT = Path(__file__).resolve().parents[1]


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
