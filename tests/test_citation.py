"""CITATION.cff is valid YAML in the Citation File Format 1.2.0 layout and cites the five papers."""
from pathlib import Path

import yaml

import skgpx

CITATION = Path(__file__).resolve().parents[1] / "CITATION.cff"

# the source paper of each family, by title
PAPERS = {
    "Efficiently sampling functions from Gaussian process posteriors": 2020,
    "A fast point solver for deep nonlinear function approximators": 2021,
    "Deep Q-Exponential Processes": None,
    "Self-Attention through Kernel-Eigen Pair Sparse Variational Gaussian Processes": 2024,
    'Sparse Bayesian structure learning with "dependent relevance determination" priors': 2014,
}


def test_citation_file():
    cff = yaml.safe_load(CITATION.read_text(encoding="utf-8"))
    assert cff["cff-version"] == "1.2.0"
    for key in ("message", "title", "authors"):  # required by the format
        assert cff[key]
    assert cff["type"] == "software"
    assert cff["version"] == skgpx.__version__

    references = cff["references"]
    assert {ref["title"].strip(): ref.get("year") for ref in references} == PAPERS
    for ref in references:
        assert ref["type"] in {"article", "conference-paper"}
        assert ref["authors"] and all(author["family-names"] for author in ref["authors"])
