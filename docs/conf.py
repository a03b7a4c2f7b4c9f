"""Sphinx configuration: ``sphinx-build -W -b html docs docs/_build/html`` (warnings are errors).

The API reference is generated from the docstrings of every public module of ``ppl_vae``
(``api/public_api.py`` says which names are public); the Markdown pages are read by MyST and
the notebooks are rendered with the outputs they were committed with, never executed here.
"""
from __future__ import annotations

import importlib
import inspect
import os
import re
import sys
from dataclasses import asdict, is_dataclass
from pathlib import Path

from docutils import nodes
from sphinx import addnodes
from sphinx.ext import intersphinx
from sphinx.ext.autosummary import Autosummary
from sphinx.transforms.post_transforms import SphinxPostTransform
from sphinx.util.nodes import make_refnode

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS.parent))
sys.path.insert(0, str(DOCS / "api"))
os.environ.setdefault("PPL_VAE_NUM_THREADS", "1")

sys.path.insert(0, str(DOCS / "inventories"))
sys.path.insert(0, str(DOCS))

import make_inventories  # noqa: E402
from check_site import ends_at_abbreviation  # noqa: E402
from public_api import PACKAGE, api_by_module, constant_doc, documented_names, public_module_names  # noqa: E402

import ppl_vae  # noqa: E402
from ppl_vae import _constants  # noqa: E402

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
    "sphinx.ext.intersphinx",
    "sphinxcontrib.bibtex",
    "myst_nb",
]
source_suffix = {".rst": "restructuredtext", ".md": "myst-nb", ".ipynb": "myst-nb"}
exclude_patterns = ["_build", "api/_templates", "**.ipynb_checkpoints"]
templates_path = ["api/_templates"]

# API reference: one generated page per public module, listing that module's public names.
PUBLIC_MODULES = public_module_names()
DOCUMENTED_HOMES = documented_names()
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
# Every reference must resolve: a role naming a ppl_vae object that is not documented fails the
# build (with -W), and so does one naming an object of torch, Pyro, numpy, matplotlib, ArviZ,
# Lightning or the standard library that their inventories lack. The build is offline: the
# inventories are files in the repository (docs/inventories/, written by make_inventories.py,
# one entry per name our pages use), and each links to the project's own documentation.
nitpicky = True
nitpick_ignore_regex: list[tuple[str, str]] = []
INVENTORIES = DOCS / "inventories"
intersphinx_mapping = {name: (project.url, str(INVENTORIES / f"{name}.inv"))
                       for name, project in make_inventories.PROJECTS.items()}
#: Short names our docstrings and type hints use for the outside packages and their classes.
OUTSIDE_ALIASES = {"Tensor": "torch.Tensor", "nn": "torch.nn", "np": "numpy", "dist": "pyro.distributions",
                   "L": "lightning.pytorch", "Path": "pathlib.Path", "Figure": "matplotlib.figure.Figure",
                   "Axes": "matplotlib.axes.Axes"}
# The papers the pages cite ({cite:p}`hajimiri2021parted`), listed on the citing page.
bibtex_bibfiles = ["references.bib"]
bibtex_reference_style = "author_year"
bibtex_default_style = "plain"
# Some model pages start at a level-2 heading; MyST takes it as the page title all the same.
suppress_warnings = ["myst.header"]

# Notebooks: rendered with their committed outputs, not re-executed at build time.
nb_execution_mode = "off"
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence", "deflist"]
myst_heading_anchors = 3



def _constant_docstring(app, what, name, obj, options, lines):
    """A module constant (``DATASETS``, a dict) shows the ``#:`` comment that documents it where
    it is defined (a package re-exports it), never its type's docstring (``dict``'s)."""
    if what != "data":
        return
    documented = constant_doc(*name.rsplit(".", 1))
    inherited = {(type(obj).__doc__ or "").strip(), (getattr(obj, "__doc__", None) or "").strip()}
    if documented or "\n".join(lines).strip() in inherited:
        lines[:] = documented


def _imported(dotted: str) -> object | None:
    """The object the dotted name ``dotted`` names (a module, or an attribute of one), or None."""
    parts = dotted.split(".")
    for split in range(len(parts), 0, -1):
        try:
            value = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for part in parts[split:]:
            value = getattr(value, part, None)
        return value
    return None


def _row_target(row) -> str | None:
    """The name of the object the first cell of the table row ``row`` refers to, whether that
    reference is resolved already (a link titled with the name) or not."""
    reference = row[0].next_node(lambda node: isinstance(node, (addnodes.pending_xref, nodes.reference)))
    return reference and (reference.get("reftarget") or reference.get("reftitle"))


def _defining_context(node) -> list[str]:
    """The module that defines the object whose description (or autosummary row) holds ``node``
    (``ppl_vae.infer.distributed`` for ``ppl_vae.infer.GlobalBatch``), with its class for a
    method; none elsewhere."""
    reference_module = node.get("py:module")
    while node is not None and not isinstance(node, (addnodes.desc, nodes.row)):
        node = node.parent
    if isinstance(node, addnodes.desc) and isinstance(node.children[0], addnodes.desc_signature):
        signature = node.children[0]
        module_name, owner_name = signature.get("module"), signature.get("fullname", "").split(".")[0]
    elif isinstance(node, nodes.row) and _row_target(node):
        # a row of an autosummary table: the summary line of the object the row's first cell names
        module_name, _, owner_name = _row_target(node).rpartition(".")
        module_name = module_name or reference_module
    else:
        return []
    owner = _imported(f"{module_name}.{owner_name}")
    module = getattr(owner, "__module__", None)
    if not isinstance(module, str):
        return []
    return [f"{module}.{owner_name}", module] if inspect.isclass(owner) else [module]


def _resolve_at_documented_home(app, env, node, contnode):
    """Resolve a reference to a ppl_vae object by a name it is not documented under to the page
    that documents it: ``ppl_vae.fit`` (``ppl_vae.train.fitting.fit``), ``ppl_vae.models.vae.VAE``
    (``ppl_vae.models.VAE``), or a name relative to the module that defines the object
    whose docstring holds the reference (``world_size`` in ``GlobalBatch``'s, defined in
    ``ppl_vae.infer.distributed``, is ``ppl_vae.infer.distributed.world_size``).

    The target, then the target under the reference's module and class, then under the defining
    module and class, is looked up: a documented name as it is, else the longest prefix of it
    that names a documented object is replaced by the name that object is documented under.
    """
    if node.get("refdomain") != "py":
        return None
    target = node["reftarget"].lstrip(".~")
    scopes = [node.get("py:module"), ".".join(filter(None, [node.get("py:module"), node.get("py:class")]))]
    candidates = [target, *(f"{scope}.{target}" for scope in [*reversed(scopes), *_defining_context(node)] if scope)]
    domain = env.get_domain("py")
    for candidate in dict.fromkeys(candidates):
        parts = candidate.split(".")
        if parts[0] != PACKAGE:
            continue
        if candidate in domain.objects:
            return domain.resolve_xref(env, node["refdoc"], app.builder, node["reftype"], candidate, node, contnode)
        for split in range(len(parts), 1, -1):
            home = DOCUMENTED_HOMES.get(id(_imported(".".join(parts[:split]))))
            if home is not None:
                resolved = domain.resolve_xref(env, node["refdoc"], app.builder, node["reftype"],
                                               ".".join([home, *parts[split:]]), node, contnode)
                if resolved is not None:
                    return resolved
                break
    return None


def _public_bases(app, name, obj, options, bases):
    """Show a private base class (``ppl_vae.data.mnist._IdxImages``) as its own bases: the
    reference documents no private class."""
    def public(base: type) -> list[type]:
        private = any(part.startswith("_") for part in f"{base.__module__}.{base.__qualname__}".split("."))
        private = private and base.__module__.split(".")[0] == PACKAGE
        return [found for parent in base.__bases__ for found in public(parent)] if private else [base]

    bases[:] = list(dict.fromkeys(found for base in bases for found in public(base)))


#: A default written as a field of one of the private module's default sets (``PARTED.gamma_z``).
_PRIVATE_DEFAULT = re.compile(r"\b({})\.(\w+)\b".format("|".join(
    name for name, value in vars(_constants).items() if is_dataclass(value) and not isinstance(value, type))))


def _private_defaults_as_values(app, what, name, obj, options, signature, return_annotation):
    """Show a default written as a field of ``ppl_vae._constants`` (``gamma_z=PARTED.gamma_z``)
    as its value (``gamma_z=50.0``): the reference documents no private object, and
    ``autodoc_preserve_defaults`` keeps the other defaults as written (``nn.ReLU``, ``sys.stdout``)."""
    if signature is None:
        return None
    value = _PRIVATE_DEFAULT.sub(lambda match: repr(getattr(getattr(_constants, match[1]), match[2])), signature)
    return value, return_annotation


def _outside_homes() -> dict[int, str]:
    """The name each object of the shipped inventories is documented under, by the object's id
    (a project that is not installed, ArviZ without the ``arviz`` extra, is left out: its
    names still link when written as its documentation writes them)."""
    homes = {}
    for name in make_inventories.PROJECTS:
        for documented in make_inventories.documented_names(INVENTORIES / f"{name}.inv"):
            try:
                homes[id(make_inventories.imported(documented))] = documented
            except (ImportError, AttributeError):
                continue
    return homes


_OUTSIDE_HOMES = _outside_homes()


def _resolve_outside_name(app, env, node, contnode):
    """Resolve a reference to an object of another project by the name its documentation gives
    it: ``torch.nn.modules.module.Module`` (where autodoc finds the class) and ``nn.Module``
    (a docstring's short name) link to ``torch.nn.Module``'s entry of the PyTorch inventory."""
    if node.get("refdomain") != "py":
        return None
    target = node["reftarget"].lstrip(".~")
    head, _, rest = target.partition(".")
    if head in OUTSIDE_ALIASES:
        target = ".".join(filter(None, [OUTSIDE_ALIASES[head], rest]))
    if target.split(".")[0] == PACKAGE:
        return None
    try:
        home = _OUTSIDE_HOMES.get(id(make_inventories.imported(target)))
    except (ImportError, AttributeError):
        return None
    if home is None or home == node["reftarget"]:
        return None
    renamed = node.deepcopy()
    renamed["reftarget"] = home
    return intersphinx.missing_reference(app, env, renamed, contnode)


#: A full stop that may end a sentence.
_FULL_STOP = re.compile(r"\.(?=\s|$)")


def first_sentence(paragraph: str) -> str:
    """The first sentence of ``paragraph``: up to the first full stop that ends no abbreviation
    (``Eq. 7``, ``Sec. 3``, ``App. B`` go on)."""
    for stop in _FULL_STOP.finditer(paragraph):
        if not ends_at_abbreviation(paragraph[:stop.end()]):
            return paragraph[:stop.end()].strip()
    return paragraph.strip()


class AutosummaryWholeSentences(Autosummary):
    """Sphinx's ``autosummary`` directive, whose summary line runs to the end of the docstring's
    first sentence also where the sentence holds an abbreviation (``(Mathieu et al. 2019, Eq. 7)``);
    the stock directive stops at the full stop of every abbreviation it does not know."""

    def get_items(self, names: list[str]) -> list[tuple[str, str, str, str]]:
        return [(name, signature, self._whole(summary, real_name), real_name)
                for name, signature, summary, real_name in super().get_items(names)]

    @staticmethod
    def _whole(summary: str, real_name: str) -> str:
        if not ends_at_abbreviation(summary):
            return summary
        docstring = inspect.getdoc(_imported(real_name)) or ""
        paragraph = " ".join(docstring.strip().split("\n\n", 1)[0].split())
        return first_sentence(paragraph)


#: Kinds of documented object a narrative page may name by its bare name (``PartedELBO``).
LINKED_BY_BARE_NAME = ("class", "function", "exception", "data")
#: A name in code font: dotted words, optionally called (``ppl_vae.fit()``).
_CODE_NAME = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)(?:\(\))?$")


class LinkNamesInCodeFont(SphinxPostTransform):
    """On the narrative pages (user guide, model and results pages, notebooks), make a name
    in code font a link to its API entry when it names a documented ppl_vae object: by its
    full name (``ppl_vae.infer.PartedELBO``, ``ppl_vae.fit()``), by a name it is reachable
    under (``ppl_vae.fit`` for ``ppl_vae.train.fitting.fit``), or by a bare class, function, exception
    or constant name that only one documented object has (``PartedELBO``). Other code (file
    names, settings, expressions) stays as it is; the API pages link through their roles."""

    default_priority = 5

    def run(self, **kwargs) -> None:
        if self.env.docname.startswith("api/"):
            return
        objects = self.env.get_domain("py").objects
        bare: dict[str, list[str]] = {}
        for full_name, entry in objects.items():
            if entry.objtype in LINKED_BY_BARE_NAME and not entry.aliased:
                bare.setdefault(full_name.rsplit(".", 1)[-1], []).append(full_name)
        for literal in list(self.document.findall(nodes.literal)):
            if isinstance(literal.parent, (nodes.reference, addnodes.pending_xref, nodes.literal_block)):
                continue
            match = _CODE_NAME.match(literal.astext())
            target = match and self._target(match["name"], objects, bare)
            if target:
                entry = objects[target]
                reference = make_refnode(self.app.builder, self.env.docname, entry.docname, entry.node_id,
                                         literal.deepcopy(), target)
                literal.replace_self(reference)

    @staticmethod
    def _target(name: str, objects: dict, bare: dict[str, list[str]]) -> str | None:
        """The documented full name ``name`` stands for, or None."""
        if name.startswith(f"{PACKAGE}."):
            if name in objects:
                return name
            home = DOCUMENTED_HOMES.get(id(_imported(name)))
            return home if home in objects else None
        homes = bare.get(name, [])
        return homes[0] if len(homes) == 1 else None


def setup(app):
    app.add_post_transform(LinkNamesInCodeFont)
    app.add_directive("autosummary", AutosummaryWholeSentences, override=True)
    app.connect("autodoc-process-signature", _private_defaults_as_values)
    app.connect("autodoc-process-docstring", _constant_docstring)
    app.connect("autodoc-process-bases", _public_bases)
    app.connect("missing-reference", _resolve_at_documented_home)
    app.connect("missing-reference", _resolve_outside_name, priority=600)


html_theme = "furo"
html_title = f"ppl_vae {release}"
html_static_path = ["_static"]
