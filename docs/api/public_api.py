"""What the API reference documents and the docstring test checks: the public API of ``ppl_vae``.

The public modules are ``ppl_vae`` and its direct submodules and subpackages whose names do not
start with ``_``. A module's public names are its ``__all__``; a module without one offers the
classes and functions it defines whose names do not start with ``_``. The modules of a public
subpackage (``ppl_vae.infer.terms``) get pages of their own for their docstrings, which carry the
math and the design of what they define; their names are documented on the subpackage's page.
"""
from __future__ import annotations

import importlib
import inspect
import pkgutil
import sys
from dataclasses import dataclass, field
from types import ModuleType

from sphinx.pycode import ModuleAnalyzer

PACKAGE = "ppl_vae"


@dataclass
class ModuleAPI:
    """The public names of one module, by the kind of object they name."""

    name: str
    classes: list[str] = field(default_factory=list)
    exceptions: list[str] = field(default_factory=list)
    functions: list[str] = field(default_factory=list)
    data: list[str] = field(default_factory=list)
    modules: list[str] = field(default_factory=list)
    aliases: dict[str, str] = field(default_factory=dict)
    """Names of objects documented under another public module: name -> that full name."""
    submodules: dict[str, list[str]] = field(default_factory=dict)
    """For a subpackage, its modules whose names do not start with ``_`` (full names) -> the full
    names under which the objects each defines are documented on the subpackage's page."""


def public_module_names(package: str = PACKAGE) -> list[str]:
    """``package`` and its direct submodules whose names do not start with ``_``, sorted."""
    root = importlib.import_module(package)
    children = (info.name for info in pkgutil.iter_modules(root.__path__) if not info.name.startswith("_"))
    return [package, *sorted(f"{package}.{child}" for child in children)]


def submodule_names(package: str) -> list[str]:
    """The modules of the package ``package`` whose names do not start with ``_`` (full names,
    sorted); none for a plain module."""
    root = importlib.import_module(package)
    if not hasattr(root, "__path__"):
        return []
    return sorted(f"{package}.{info.name}" for info in pkgutil.iter_modules(root.__path__)
                  if not info.name.startswith("_"))


def public_names(module: ModuleType) -> list[str]:
    """``module.__all__``, or the classes and functions ``module`` defines without a leading ``_``."""
    if hasattr(module, "__all__"):
        return list(module.__all__)
    return [
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and (inspect.isclass(value) or inspect.isfunction(value))
        and value.__module__ == module.__name__
    ]


def module_api(name: str) -> ModuleAPI:
    """The public names of the module ``name``, sorted by kind (``__version__`` counts as data)."""
    module = importlib.import_module(name)
    api = ModuleAPI(name)
    for public in public_names(module):
        value = getattr(module, public)
        if inspect.ismodule(value):
            api.modules.append(public)
        elif inspect.isclass(value):
            (api.exceptions if issubclass(value, BaseException) else api.classes).append(public)
        elif inspect.isroutine(value):
            api.functions.append(public)
        else:
            api.data.append(public)
    for submodule in submodule_names(name) if name != PACKAGE else []:
        api.submodules[submodule] = [
            f"{name}.{public}"
            for public in api.classes + api.exceptions + api.functions
            if getattr(getattr(module, public), "__module__", None) == submodule
        ]
    return api


def api_by_module(package: str = PACKAGE) -> dict[str, ModuleAPI]:
    """:func:`module_api` of every public module and of every module of a public subpackage, each
    object documented once: where a public submodule exports it (the first in sorted order), not
    where ``package`` re-exports it; its other public names are listed in ``aliases``.

    A module of a subpackage documents only the names of its ``__all__`` that its subpackage does
    not export (a module without ``__all__`` documents none: its page is its docstring)."""
    names = public_module_names(package)
    apis = {name: module_api(name) for name in names}
    pages = [submodule for name in names[1:] for submodule in apis[name].submodules]
    for submodule in pages:
        declares_all = hasattr(importlib.import_module(submodule), "__all__")
        apis[submodule] = module_api(submodule) if declares_all else ModuleAPI(submodule)
    home: dict[int, str] = {}
    for name in [*names[1:], names[0], *pages]:
        module, api = importlib.import_module(name), apis[name]
        exported = _exported_by_package(name) if name in pages else {}
        for kind in (api.classes, api.exceptions, api.functions, api.data):
            for public in list(kind):
                value, own = getattr(module, public), f"{name}.{public}"
                full = exported.get(id(value)) or (own if kind is api.data else home.setdefault(id(value), own))
                if full != own:
                    kind.remove(public)
                    api.aliases[public] = full
        for submodule, defined in api.submodules.items():
            api.submodules[submodule] = [full for full in defined if full.rsplit(".", 1)[1] not in api.aliases]
    return apis


def _exported_by_package(module_name: str) -> dict[int, str]:
    """The full names under which the package of ``module_name`` exports objects, by their ``id``."""
    package = importlib.import_module(module_name.rsplit(".", 1)[0])
    return {id(getattr(package, public)): f"{package.__name__}.{public}" for public in reversed(public_names(package))}


def documented_names(package: str = PACKAGE) -> dict[int, str]:
    """The full name each public class, exception and function is documented under, by the
    ``id`` of the object (:func:`api_by_module` documents each once)."""
    return {
        id(getattr(importlib.import_module(name), public)): f"{name}.{public}"
        for name, api in api_by_module(package).items()
        for public in api.classes + api.exceptions + api.functions
    }


def public_methods(cls: type) -> dict[str, object]:
    """Methods and properties ``cls`` itself defines (not inherited) whose names do not start with ``_``."""
    return {
        name: value
        for name, value in vars(cls).items()
        if not name.startswith("_")
        and (inspect.isfunction(value) or isinstance(value, (classmethod, staticmethod, property)))
    }


def constant_doc(module_name: str, name: str) -> list[str]:
    """The lines of the ``#:`` comment (or string after the assignment) that documents the public
    constant ``name`` of ``module_name``, where ``module_name`` or the module of ``PACKAGE`` that
    defines it (a package re-exports most) writes it; none when no module documents it."""
    value = getattr(importlib.import_module(module_name), name)
    holders = [module_name, *sorted(module for module in sys.modules
                                    if module.startswith(f"{PACKAGE}.") and module != module_name
                                    and getattr(sys.modules[module], name, None) is value)]
    for holder in holders:
        doc = ModuleAnalyzer.for_module(holder).find_attr_docs().get(("", name))
        if doc and "".join(doc).strip():
            return list(doc)
    return []
