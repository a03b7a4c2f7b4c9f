"""The intersphinx inventories shipped in docs/inventories/ (the docs build offline)."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from sphinx.util.inventory import InventoryFile

INVENTORIES = Path(__file__).resolve().parents[2] / "docs" / "inventories"


def _make_inventories():
    spec = importlib.util.spec_from_file_location("make_inventories", INVENTORIES / "make_inventories.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


make_inventories = _make_inventories()


@pytest.mark.parametrize("project", sorted(make_inventories.PROJECTS))
def test_a_shipped_inventory_reads_as_sphinx_reads_it_and_holds_every_documented_name(project):
    url = make_inventories.PROJECTS[project].url
    inventory = InventoryFile.loads((INVENTORIES / f"{project}.inv").read_bytes(), uri=url)
    names = {name for (domain_role, name) in _items(inventory)}
    assert names == set(make_inventories.DOCUMENTED[project])


def _items(inventory):
    """(``py:class``, name) pairs of a loaded inventory, whichever shape this Sphinx returns."""
    data = getattr(inventory, "data", inventory)
    return [(kind, name) for kind, entries in data.items() for name in entries]


@pytest.mark.parametrize("project", sorted(make_inventories.PROJECTS))
def test_each_entry_links_into_its_projects_site_at_the_names_anchor(project):
    url = make_inventories.PROJECTS[project].url
    inventory = InventoryFile.loads((INVENTORIES / f"{project}.inv").read_bytes(), uri=url)
    data = getattr(inventory, "data", inventory)
    for entries in data.values():
        for name, item in entries.items():
            location = item.uri if hasattr(item, "uri") else item[2]
            assert location.startswith(url) and location.endswith(f".html#{name}"), (name, location)


def test_the_written_inventory_matches_the_shipped_one_but_for_the_version(tmp_path):
    for project in make_inventories.PROJECTS.values():
        written = make_inventories.write(project, tmp_path)
        assert make_inventories.documented_names(written) == make_inventories.documented_names(
            INVENTORIES / f"{project.name}.inv")


def test_a_name_the_installed_package_lacks_fails_the_script():
    with pytest.raises(AttributeError):
        make_inventories.imported("torch.NoSuchThing")
