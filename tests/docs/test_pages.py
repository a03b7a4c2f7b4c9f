"""The documentation's pages: model pages show their model (plate diagram, typeset math, the
paper linked), every citation is in the bibliography, and the user guide speaks to users."""
from __future__ import annotations

import importlib.util
import re
import shutil
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs"
MODEL_PAGES = {"parted": "2102.00892", "contrastive": "1902.04601", "decomposition": "1812.02833"}
CITATION = re.compile(r"\{cite:[pt]\}`([^`]+)`")


@pytest.mark.parametrize("page", sorted(MODEL_PAGES))
def test_a_model_page_shows_its_plate_diagram_typeset_math_and_links_its_paper(page):
    text = (DOCS / f"{page}.md").read_text(encoding="utf-8")
    diagram = re.search(rf"!\[[^\]]+\]\(diagrams/{page}\.svg\)", text)
    assert diagram, f"{page}.md shows no diagrams/{page}.svg"
    assert (DOCS / "diagrams" / f"{page}.svg").read_text(encoding="utf-8").lstrip().startswith(("<?xml", "<svg"))
    assert re.search(r"^\$\$$", text, re.M), f"{page}.md has no displayed formula"
    assert f"https://arxiv.org/abs/{MODEL_PAGES[page]}" in text
    assert CITATION.search(text)


def test_every_cited_key_is_in_the_bibliography():
    bibliography = (DOCS / "references.bib").read_text(encoding="utf-8")
    entries = set(re.findall(r"^@\w+\{([^,]+),", bibliography, re.M))
    cited = {key.strip() for page in DOCS.rglob("*.md") for keys in CITATION.findall(page.read_text(encoding="utf-8"))
             for key in keys.split(",")}
    assert cited and cited <= entries, cited - entries


#: Words of the project's own work that a user of the library has no use for.
INTERNAL = re.compile(r"campaign|the issue|project's own", re.IGNORECASE)


def test_the_user_guide_pages_speak_of_the_library_not_of_its_making():
    pages = sorted(DOCS.glob("*.md"))  # the results pages (docs/results/) keep their provenance notes
    found = [f"{page.name}:{number}: {line.strip()}" for page in pages
             for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1) if INTERNAL.search(line)]
    assert not found, "\n".join(found)


def _make_diagrams():
    spec = importlib.util.spec_from_file_location("make_diagrams", DOCS / "diagrams" / "make_diagrams.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(shutil.which("dot") is None or importlib.util.find_spec("graphviz") is None,
                    reason="needs Graphviz (the graphviz package and its dot binary)")
def test_the_committed_diagrams_show_the_sites_the_models_have_now(tmp_path):
    make_diagrams = _make_diagrams()
    labels = re.compile(r"<text[^>]*>([^<]*)</text>")
    for name in make_diagrams.MODELS:
        drawn = make_diagrams.draw(name, tmp_path).read_text(encoding="utf-8")
        committed = (DOCS / "diagrams" / f"{name}.svg").read_text(encoding="utf-8")
        assert sorted(labels.findall(drawn)) == sorted(labels.findall(committed)), name
