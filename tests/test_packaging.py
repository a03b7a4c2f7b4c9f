"""The installed distribution and the package agree: one version, the license, the typing marker."""
from __future__ import annotations

import importlib.metadata
from pathlib import Path

import pytest

import ppl_vae

ROOT = Path(__file__).resolve().parents[1]


def test_installed_version_is_the_package_version():
    assert importlib.metadata.version("ppl_vae") == ppl_vae.__version__


def test_version_is_written_only_in_the_package():
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in pyproject["project"]
    assert "version" in pyproject["project"]["dynamic"]
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "ppl_vae._version.__version__"}
    assert ppl_vae.__version__ == ppl_vae._version.__version__


def test_metadata_states_the_mit_license():
    metadata = importlib.metadata.metadata("ppl_vae")
    assert metadata["License-Expression"] == "MIT"
    assert "MIT License" in (ROOT / "LICENSE").read_text()


def test_package_ships_the_typing_marker():
    assert (Path(ppl_vae.__file__).parent / "py.typed").is_file()
