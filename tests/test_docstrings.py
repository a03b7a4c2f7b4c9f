"""Every public class, function and method of ppl_vae has a docstring (the API reference is built
from them) that describes each of its parameters, in the signature's order; every public constant
has a ``#:`` description.

Public means what ``docs/api/public_api.py`` says, the same rule the API reference follows: the
names in each public module's ``__all__`` (``ppl_vae`` and its direct submodules; a module of a
subpackage adds the names of its ``__all__`` the subpackage does not export), and the methods
and properties a public class defines itself (inherited and dunder ones excluded). A method that
overrides a documented base method still needs its own docstring: the reference shows only the
class's own.
"""
from __future__ import annotations

import importlib
import importlib.util
import inspect
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load_public_api():
    spec = importlib.util.spec_from_file_location("public_api", ROOT / "docs" / "api" / "public_api.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


public_api = _load_public_api()
API = public_api.api_by_module()


def _documented(obj: object) -> bool:
    target = obj.fget if isinstance(obj, property) else getattr(obj, "__func__", obj)
    return bool((getattr(target, "__doc__", None) or "").strip())


def undocumented(module_name: str) -> list[str]:
    """Full names of the objects the page of ``module_name`` documents whose docstring is missing or blank."""
    module = importlib.import_module(module_name)
    api = API[module_name]
    missing = []
    for name in api.classes + api.exceptions + api.functions:
        value = getattr(module, name)
        if not _documented(value):
            missing.append(f"{module_name}.{name}")
        if inspect.isclass(value):
            missing.extend(
                f"{module_name}.{name}.{method}"
                for method, member in public_api.public_methods(value).items()
                if not _documented(member)
            )
    return missing


def test_the_public_modules_are_the_documented_packages():
    names = public_api.public_module_names()
    for expected in ("models", "infer", "distributions", "data", "metrics", "checks", "train", "nn", "viz"):
        assert f"ppl_vae.{expected}" in names
    assert all(not part.startswith("_") for name in names for part in name.split("."))


@pytest.mark.parametrize("module_name", list(API))
def test_every_public_object_has_a_docstring(module_name):
    missing = undocumented(module_name)
    assert not missing, "public objects without a docstring:\n  " + "\n  ".join(missing)


def test_a_module_without_all_offers_the_classes_and_functions_it_defines():
    module = importlib.import_module("ppl_vae.cli")
    if hasattr(module, "__all__"):
        pytest.skip("ppl_vae.cli now declares __all__")
    names = public_api.public_names(module)
    assert "main" in names and "build_parser" in names
    assert not any(name.startswith("_") for name in names)
    assert "argparse" not in names  # an imported module is not part of the API


def test_every_param_field_names_one_parameter():
    """Sphinx renders ``:param a, b:`` as a parameter ``b`` of type ``a``: one name per field."""
    package = ROOT / "ppl_vae"
    multi_name = re.compile(r"^\s*:param\s+\w+\s*,")
    offending = [f"{path.relative_to(package.parent)}:{number}"
                 for path in sorted(package.rglob("*.py"))
                 for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
                 if multi_name.match(line)]
    assert offending == []


_FIELD = re.compile(r"^\s*:(param|ivar|var|cvar)\s+(?:[^:]*\s)?\*{0,2}(\w+)\s*:", re.MULTILINE)


def _signature_parameters(callable_: object, method: bool) -> list[str]:
    """The parameters of ``callable_`` the reference shows, in order: not ``self``/``cls`` of a
    method, not those whose names start with ``_`` (``torch.distributions``' ``_instance``)."""
    parameters = list(inspect.signature(callable_).parameters)
    return [name for name in parameters[1 if method else 0:] if not name.startswith("_")]


def _constructor_parameters(cls: type) -> list[str]:
    """The parameters of ``cls``'s constructor when ppl_vae defines it (none for a Protocol, or a
    constructor inherited from torch, Pyro or Lightning)."""
    owner = next((base for base in cls.__mro__ if "__init__" in vars(base) or "__new__" in vars(base)), object)
    if getattr(cls, "_is_protocol", False) or not owner.__module__.startswith(f"{public_api.PACKAGE}."):
        return []
    return _signature_parameters(cls, method=False)


def _attribute_docs(cls: type) -> set[str]:
    """Attributes of ``cls`` documented by a ``#:`` comment or a string after the assignment."""
    from sphinx.pycode import ModuleAnalyzer

    return {name for scope, name in ModuleAnalyzer.for_module(cls.__module__).find_attr_docs() if scope == cls.__qualname__}


def parameter_problems(module_name: str) -> dict[str, list[str]]:
    """Full name of each callable the page of ``module_name`` documents -> its problems: a
    parameter without a ``:param:`` (for a class also ``:ivar:`` or ``#:``) description, or
    fields in an order other than the signature's."""
    module = importlib.import_module(module_name)
    api = API[module_name]
    callables = []
    for name in api.classes + api.exceptions + api.functions:
        value = getattr(module, name)
        if not inspect.isclass(value):
            callables.append((f"{module_name}.{name}", value, _signature_parameters(value, method=False), set()))
            continue
        callables.append((f"{module_name}.{name}", value, _constructor_parameters(value), _attribute_docs(value)))
        for method, member in public_api.public_methods(value).items():
            if isinstance(member, property):
                continue
            function = getattr(member, "__func__", member)
            parameters = _signature_parameters(function, method=not isinstance(member, staticmethod))
            callables.append((f"{module_name}.{name}.{method}", function, parameters, set()))
    problems = {}
    for full_name, value, parameters, attributes in callables:
        fields = list(dict.fromkeys(name for _, name in _FIELD.findall(inspect.getdoc(value) or "")))
        found = [f"no description of {name}" for name in parameters if name not in fields and name not in attributes]
        described = [name for name in fields if name in parameters]
        if described != [name for name in parameters if name in described]:
            found.append(f"fields in the order {', '.join(described)}, not the signature's")
        if found:
            problems[full_name] = found
    return problems


@pytest.mark.parametrize("module_name", list(API))
def test_every_parameter_is_described_in_signature_order(module_name):
    problems = parameter_problems(module_name)
    assert not problems, "parameters without a description, or out of order:\n" + "\n".join(
        f"  {name}: {'; '.join(found)}" for name, found in problems.items())


@pytest.mark.parametrize("module_name", list(API))
def test_every_public_constant_is_described(module_name):
    undescribed = sorted(f"{module_name}.{name}" for name in API[module_name].data
                         if not public_api.constant_doc(module_name, name))
    assert not undescribed, "constants without a #: description: " + ", ".join(undescribed)
