"""Sphinx configuration: ``sphinx-build -W -b html docs docs/_build/html`` (warnings are errors).

The API reference is generated from the docstrings of every public module of ``ppl_vae``
(``api/public_api.py`` says which names are public); the Markdown pages are read by MyST and
the notebooks are rendered with the outputs they were committed with, never executed here.
"""
from __future__ import annotations

import os
import sys
from dataclasses import asdict
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS.parent))
sys.path.insert(0, str(DOCS / "api"))
os.environ.setdefault("PPL_VAE_NUM_THREADS", "1")

from public_api import PACKAGE, api_by_module, public_module_names  # noqa: E402

import ppl_vae  # noqa: E402

project = "ppl_vae"
author = "The ppl_vae authors"
copyright = "2026, The ppl_vae authors"
release = ppl_vae.__version__
version = release

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "sphinx-mathjax-offline",  # (its module name has hyphens) serves MathJax from the site's _static/mathjax (works offline)
    "sphinx.ext.viewcode",
    "myst_nb",
]
source_suffix = {".rst": "restructuredtext", ".md": "myst-nb", ".ipynb": "myst-nb"}
exclude_patterns = ["_build", "api/_templates", "**.ipynb_checkpoints"]
templates_path = ["api/_templates"]

# API reference: one generated page per public module, listing that module's public names.
PUBLIC_MODULES = public_module_names()
autosummary_generate = True
autosummary_ignore_module_all = False
autosummary_context = {
    "package": PACKAGE,
    "public_modules": PUBLIC_MODULES,
    "public_api": {name: asdict(api) for name, api in api_by_module().items()},
}
autodoc_typehints = "description"
autodoc_typehints_format = "short"
autodoc_member_order = "bysource"
autodoc_class_signature = "mixed"
autodoc_preserve_defaults = True
# A method shows its own docstring only, never the one of the torch, Pyro or Lightning method
# it overrides (those are written for other documentation tools).
autodoc_inherit_docstrings = False
# Without network access there is no intersphinx: references to torch, Pyro, Lightning and
# numpy objects stay plain text instead of links.
nitpicky = False
# Some model pages start at a level-2 heading; MyST takes it as the page title all the same.
suppress_warnings = ["myst.header"]

# Notebooks: rendered with their committed outputs, not re-executed at build time.
nb_execution_mode = "off"
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence"]
myst_heading_anchors = 3



def _drop_type_docstring(app, what, name, obj, options, lines):
    """A module constant (``DATASETS``, a dict) has no docstring of its own: show none rather
    than its type's (``dict``'s)."""
    if what == "data" and lines and "\n".join(lines).strip() == (type(obj).__doc__ or "").strip():
        lines.clear()


def setup(app):
    app.connect("autodoc-process-docstring", _drop_type_docstring)


html_theme = "furo"
html_title = f"ppl_vae {release}"
html_static_path = ["_static"]
