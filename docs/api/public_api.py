"""What the API reference documents and the docstring test checks: the public API of ``ppl_vae``.

The public modules are ``ppl_vae`` and its direct submodules and subpackages whose names do not
start with ``_``. A module's public names are its ``__all__``; a module without one offers the
classes and functions it defines whose names do not start with ``_``.
"""
from __future__ import annotations

import importlib
import inspect
import pkgutil
from dataclasses import dataclass, field
from types import ModuleType

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


def public_module_names(package: str = PACKAGE) -> list[str]:
    """``package`` and its direct submodules whose names do not start with ``_``, sorted."""
    root = importlib.import_module(package)
    children = (info.name for info in pkgutil.iter_modules(root.__path__) if not info.name.startswith("_"))
    return [package, *sorted(f"{package}.{child}" for child in children)]


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
    return api


def api_by_module(package: str = PACKAGE) -> dict[str, ModuleAPI]:
    """:func:`module_api` of every public module, each object documented once: where a public
    submodule exports it (the first in sorted order), not where ``package`` re-exports it; its
    other public names are listed in ``aliases``."""
    names = public_module_names(package)
    apis = {name: module_api(name) for name in names}
    home: dict[int, str] = {}
    for name in [*names[1:], names[0]]:
        module, api = importlib.import_module(name), apis[name]
        for kind in (api.classes, api.exceptions, api.functions):
            for public in list(kind):
                full = home.setdefault(id(getattr(module, public)), f"{name}.{public}")
                if full != f"{name}.{public}":
                    kind.remove(public)
                    api.aliases[public] = full
    return apis


def public_methods(cls: type) -> dict[str, object]:
    """Methods and properties ``cls`` itself defines (not inherited) whose names do not start with ``_``."""
    return {
        name: value
        for name, value in vars(cls).items()
        if not name.startswith("_")
        and (inspect.isfunction(value) or isinstance(value, (classmethod, staticmethod, property)))
    }
