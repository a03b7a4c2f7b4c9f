"""Typed settings of a recipe config: names, types, defaults and docs; parsing and validation.

A recipe config is a dataclass whose fields are its settings; a field whose type is a
dataclass (``train: TrainConfig``) is a group, and its settings are named with dots
(``train.lr``). Values come as text (``--set train.lr=1e-3``), as JSON or YAML values
(``--config FILE``) or from Python, and are converted to the field's declared type before
anything is built. Every refusal is a :class:`SettingError` naming the setting and the value.

Imports nothing heavy (no torch), so that the command line can list settings quickly.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import math
import re
import types
import typing
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ppl_vae._files import MAX_NESTING, NestingError, parse_json, read_json, read_yaml
from ppl_vae._validation import did_you_mean, shown

_INTEGER = re.compile(r"[+-]?\d+")
_NONE_TEXT = ("null", "none")
_BOOL_TEXT = {"true": True, "false": False}


class SettingError(ValueError):
    """A setting's name or value is not valid; the message (one line) names both."""


@dataclass(frozen=True)
class Setting:
    """One setting of a config.

    :param name: dotted name, e.g. ``"train.lr"``.
    :param hint: the declared type (``int``, ``float | None``, ``tuple[float, float]``, ...).
    :param default: the value in a default-constructed config.
    :param doc: one line from the config's docstring (``:param name: ...``).
    """

    name: str
    hint: Any
    default: Any
    doc: str

    @property
    def type_name(self) -> str:
        """The type as written in Python, e.g. ``"int | None"``."""
        return type_name(self.hint)


class _Mismatch(Exception):
    """A value does not fit a type; ``expected`` says what would."""

    def __init__(self, expected: str) -> None:
        super().__init__(expected)
        self.expected = expected


def type_name(hint: Any) -> str:
    """``hint`` as written in Python: ``"float"``, ``"str | None"``, ``"tuple[float, float]"``."""
    if hint is type(None):
        return "None"
    args = typing.get_args(hint)
    if _is_union(hint):
        return " | ".join(type_name(arg) for arg in args)
    origin = typing.get_origin(hint)
    if origin is not None:
        inner = ", ".join("..." if arg is Ellipsis else type_name(arg) for arg in args)
        return f"{origin.__name__}[{inner}]"
    return getattr(hint, "__name__", str(hint))


def _is_union(hint: Any) -> bool:
    return typing.get_origin(hint) in (typing.Union, types.UnionType)


def is_group(hint: Any) -> bool:
    """Whether a field of type ``hint`` is a group of settings (a dataclass)."""
    return isinstance(hint, type) and dataclasses.is_dataclass(hint)


def convert(hint: Any, value: Any, from_text: bool = True) -> Any:
    """``value`` as type ``hint``, or :class:`_Mismatch`.

    :param from_text: also parse strings given for non-string types (``"1e-3"`` for a float,
        ``"true"``, ``"null"``, ``"[0, 30]"`` or ``"0,30"`` for a tuple); ``False`` takes
        Python values only (ints for floats and lists for tuples are still converted).
    """
    if hint is Any:
        return value
    if _is_union(hint):
        return _convert_union(hint, value, from_text)
    if hint is type(None):
        if value is None or (from_text and isinstance(value, str) and value.strip().lower() in _NONE_TEXT):
            return None
        raise _Mismatch("null")
    if hint is bool:
        return _convert_bool(value, from_text)
    if hint is int:
        return _convert_int(value, from_text)
    if hint is float:
        return _convert_float(value, from_text)
    if hint is str:
        return _convert_str(value, from_text)
    origin = typing.get_origin(hint)
    if origin is tuple:
        return _convert_tuple(hint, value, from_text)
    if origin is dict:
        return _convert_dict(hint, value, from_text)
    if isinstance(hint, type) and isinstance(value, hint):
        return value
    if is_group(hint):
        return _convert_group(hint, value)
    raise _Mismatch(type_name(hint))


def _convert_group(hint: type, value: Any) -> Any:
    """A settings dataclass inside another setting (the values of ``train.lr_plateau``) from a
    mapping of its fields."""
    if not isinstance(value, Mapping):
        raise _Mismatch(f"a mapping of {hint.__name__} settings")
    try:
        return config_from_dict(hint, value)
    except SettingError as error:
        raise _Mismatch(f"valid {hint.__name__} settings ({error})") from None


def _convert_union(hint: Any, value: Any, from_text: bool) -> Any:
    members = typing.get_args(hint)
    if type(None) in members and (value is None or (from_text and isinstance(value, str) and value.strip().lower() in _NONE_TEXT)):
        return None
    failures = []
    for member in members:
        if member is type(None):
            continue
        try:
            return convert(member, value, from_text)
        except _Mismatch as mismatch:
            failures.append(mismatch.expected)
    if type(None) in members:
        failures.append("null")
    raise _Mismatch(" or ".join(failures))


def _convert_bool(value: Any, from_text: bool) -> bool:
    if isinstance(value, bool):
        return value
    if from_text and isinstance(value, str) and value.strip().lower() in _BOOL_TEXT:
        return _BOOL_TEXT[value.strip().lower()]
    raise _Mismatch("true or false")


def _convert_int(value: Any, from_text: bool) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if from_text and isinstance(value, str) and _INTEGER.fullmatch(value.strip()):
        try:
            return int(value)
        except ValueError:  # more digits than Python converts
            raise _Mismatch("an integer of at most 4300 digits") from None
    raise _Mismatch("an integer")


def _convert_float(value: Any, from_text: bool) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        number = float(value)
    elif from_text and isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            raise _Mismatch("a finite number") from None
    else:
        raise _Mismatch("a finite number")
    if not math.isfinite(number):
        raise _Mismatch("a finite number")
    return number


def _convert_str(value: Any, from_text: bool) -> str:
    if not isinstance(value, str):
        raise _Mismatch("text")
    text = value.strip() if from_text else value
    if from_text and len(text) >= 2 and text[0] == text[-1] == '"':
        try:
            return json.loads(text)  # a JSON string, as sweeps pass them
        except ValueError:
            pass
    return text


def _convert_tuple(hint: Any, value: Any, from_text: bool) -> tuple:
    args = typing.get_args(hint)
    any_length = len(args) == 2 and args[1] is Ellipsis
    expected = "a list" if any_length else f"a list of {len(args)} values"
    if from_text and isinstance(value, str):
        value = _text_sequence(value)
    if not isinstance(value, (list, tuple)) or (not any_length and len(value) != len(args)):
        raise _Mismatch(expected)
    types_ = [args[0]] * len(value) if any_length else args
    return tuple(convert(arg, item, from_text) for arg, item in zip(types_, value, strict=True))


def _text_sequence(text: str) -> Any:
    text = text.strip()
    if text.startswith("["):
        try:
            return parse_json(text, "the value")
        except NestingError:
            raise _Mismatch(f"a list nested at most {MAX_NESTING} deep") from None
        except ValueError:
            return text
    return [item.strip() for item in text.split(",")]


def _convert_dict(hint: Any, value: Any, from_text: bool) -> dict:
    key_type, value_type = typing.get_args(hint) or (Any, Any)
    if from_text and isinstance(value, str):
        try:
            value = parse_json(value, "the value")
        except ValueError:
            raise _Mismatch(f"a JSON object of {type_name(key_type)}: {type_name(value_type)}") from None
    if not isinstance(value, Mapping):
        raise _Mismatch(f"a mapping of {type_name(key_type)}: {type_name(value_type)}")
    return {convert(key_type, k, from_text): convert(value_type, v, from_text) for k, v in value.items()}


def parse_value(name: str, hint: Any, value: Any, from_text: bool = True) -> Any:
    """``value`` of setting ``name`` converted to ``hint`` (see :func:`convert`).

    :raises SettingError: naming the setting, the value and the expected type.
    """
    try:
        return convert(hint, value, from_text)
    except _Mismatch as mismatch:
        raise SettingError(
            f"setting {name}: {shown(value)} is not {mismatch.expected} (type {type_name(hint)})"
        ) from None


def check_types(config: Any) -> None:
    """Convert every field of dataclass ``config`` to its declared type in place (ints for
    floats, lists for tuples) and refuse values that do not fit (bools for ints, non-finite
    floats, ...): the ``__post_init__`` of the recipe configs.

    :raises SettingError: naming the field and the value.
    """
    hints = typing.get_type_hints(type(config))
    for field in dataclasses.fields(config):
        hint = hints[field.name]
        if is_group(hint):
            if not isinstance(getattr(config, field.name), hint):
                raise SettingError(f"setting {field.name}: expected a {hint.__name__}, got {shown(getattr(config, field.name))}")
            continue
        setattr(config, field.name, parse_value(field.name, hint, getattr(config, field.name), from_text=False))


def refused_as_setting_errors(validate: Callable[[Any], None]) -> Callable[[Any], None]:
    """``validate`` (a config's ``__post_init__``, whose range checks are those of
    :mod:`ppl_vae._validation`), its ``ValueError`` s raised as :class:`SettingError` with the
    same message: a config refuses a value in the words an objective or a model would."""

    @functools.wraps(validate)
    def validated(config: Any) -> None:
        try:
            validate(config)
        except SettingError:
            raise
        except ValueError as error:
            raise SettingError(str(error)) from None

    return validated


def param_docs(cls: type) -> dict[str, str]:
    """First sentences of the ``:param name: text`` entries of ``cls``'s docstring, by name."""
    docs: dict[str, str] = {}
    entries = re.split(r"^\s*:param\s+", cls.__doc__ or "", flags=re.MULTILINE)[1:]
    for entry in entries:
        names, _, text = entry.partition(":")
        text = " ".join(line.strip() for line in text.splitlines() if line.strip())
        text = re.split(r"(?<!e\.g)(?<!i\.e)\.\s+(?=[A-Z:`])", text, maxsplit=1)[0]  # not after e.g. / i.e.
        text = re.sub(r":\w+:`~?([^`]+)`", r"\1", text).replace("``", "")
        if text.endswith(".") and not text.endswith("..."):
            text = text[:-1]
        docs[names.strip()] = text
    return docs


def settings_of(config: Any, prefix: str = "") -> list[Setting]:
    """Every setting of a config (a dataclass or an instance, whose values are the defaults
    shown), groups flattened into dotted names, in field order."""
    instance = config() if isinstance(config, type) else config
    hints = typing.get_type_hints(type(instance))
    docs = param_docs(type(instance))
    found = []
    for field in dataclasses.fields(instance):
        value = getattr(instance, field.name)
        if is_group(hints[field.name]):
            found += settings_of(value, f"{prefix}{field.name}.")
        else:
            found.append(Setting(f"{prefix}{field.name}", hints[field.name], value, docs.get(field.name, "")))
    return found


def config_to_dict(config: Any) -> dict[str, Any]:
    """A recipe config as a JSON-ready dict.

    :param config: a recipe's config dataclass instance.
    """
    return dataclasses.asdict(config)


def config_from_dict(config_class: type, values: Mapping[str, Any], prefix: str = "") -> Any:
    """Build ``config_class`` from a nested, possibly partial dict (a saved ``config.json``,
    a ``--config`` file); values are converted to the declared types (text parsed).

    :param config_class: the config dataclass to build (a recipe's, or a group of one).
    :param values: setting name -> value, groups as nested mappings; missing ones keep their defaults.
    :param prefix: the dotted name of the group ``values`` belongs to (``"train."``), for messages.
    :raises SettingError: for an unknown setting (with close names), a value of the wrong
        type, or a value out of range (naming the setting and the value). A setting the
        class lists in its ``retired_settings`` (one that older versions wrote) warns and is
        ignored.
    """
    if not isinstance(values, Mapping):
        raise SettingError(f"settings {prefix.rstrip('.') or config_class.__name__} must be a mapping, got {shown(values)}")
    hints = typing.get_type_hints(config_class)
    fields = {field.name for field in dataclasses.fields(config_class)}
    kwargs = {}
    retired = getattr(config_class, "retired_settings", {})
    for name, value in values.items():
        if name in retired and name not in fields:
            warnings.warn(f"setting {prefix}{name} no longer exists ({retired[name]}); ignored", UserWarning, stacklevel=2)
            continue
        if name not in fields:
            raise unknown_setting(f"{prefix}{name}", config_class, prefix)
        hint = hints[name]
        if is_group(hint):
            kwargs[name] = value if isinstance(value, hint) else config_from_dict(hint, value, f"{prefix}{name}.")
        else:
            kwargs[name] = parse_value(f"{prefix}{name}", hint, value)
    try:
        return config_class(**kwargs)
    except (ValueError, TypeError) as error:
        message = str(error)
        if message.startswith("setting "):
            message = message.removeprefix("setting ")
            raise SettingError(f"setting {prefix}{message}") from None
        raise SettingError(f"{prefix}{message}") from None


def config_from_file(config_class: type, values: Any, path: str | Path) -> Any:
    """:func:`config_from_dict` for the settings read from the file ``path``, whose errors
    name the file.

    :raises SettingError: as :func:`config_from_dict`, the message starting with ``path``.
    """
    try:
        return config_from_dict(config_class, values)
    except SettingError as error:
        raise SettingError(f"{path}: {error}") from None


def setting_hint(config_class: type, name: str) -> Any:
    """The declared type of the setting with dotted ``name`` of ``config_class``.

    :raises SettingError: for an unknown name (with close names).
    """
    for setting in settings_of(config_class):
        if setting.name == name:
            return setting.hint
    raise unknown_setting(name, config_class)


def setting_value(config_class: type, name: str, value: Any) -> Any:
    """``value`` (text or a Python value) of the setting with dotted ``name`` of
    ``config_class``, converted to its type.

    :raises SettingError: for an unknown name (with close names) or a value of the wrong type.
    """
    return parse_value(name, setting_hint(config_class, name), value)


def text_holds_commas(hint: Any) -> bool:
    """Whether a value of type ``hint`` is written with commas (a tuple ``0,5``, a JSON
    object), so that a list of such values needs another separator."""
    members = typing.get_args(hint) if _is_union(hint) else (hint,)
    return any(typing.get_origin(member) in (tuple, dict) for member in members)


def unknown_setting(name: str, config_class: type, prefix: str = "") -> SettingError:
    """The error for an unknown setting ``name``, suggesting close names."""
    known = [prefix + setting.name for setting in settings_of(config_class)]
    return SettingError(f"unknown setting {shown(name)}{did_you_mean(name, known)}")


def flatten_settings(config_class: type, values: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested and dotted settings as ``{dotted name: value}``: a mapping given for a group
    (``{"train": {"lr": 1e-3}}``) is opened, a mapping for a dict-valued setting is not."""
    hints = typing.get_type_hints(config_class)
    fields = [field.name for field in dataclasses.fields(config_class)]
    flat: dict[str, Any] = {}
    for key, value in values.items():
        head, _, rest = str(key).partition(".")
        if head not in fields:
            raise unknown_setting(f"{prefix}{key}", config_class, prefix)
        hint = hints[head]
        if is_group(hint) and rest:
            flat.update(flatten_settings(hint, {rest: value}, f"{prefix}{head}."))
        elif is_group(hint) and isinstance(value, Mapping):
            flat.update(flatten_settings(hint, value, f"{prefix}{head}."))
        elif is_group(hint):
            example = dataclasses.fields(hint)[0].name
            raise SettingError(
                f"setting {prefix}{head} is a group of settings, got {shown(value)}; set its members, e.g. {prefix}{head}.{example}"
            )
        elif rest:
            raise unknown_setting(f"{prefix}{key}", config_class, prefix)
        else:
            flat[f"{prefix}{head}"] = value
    return flat


def with_overrides(config: Any, overrides: Mapping[str, Any]) -> Any:
    """A copy of ``config`` with settings replaced, e.g. ``{"train.steps": 100, "beta": "4"}``
    or ``{"train": {"lr": 1e-3}}``; text values are parsed to the declared types, and the
    result is validated.

    :param config: the config dataclass instance to copy.
    :param overrides: dotted setting name -> value, or nested mappings of groups.
    :raises SettingError: naming the setting and the value.
    """
    values = config_to_dict(config)
    for name, value in flatten_settings(type(config), overrides).items():
        *groups, leaf = name.split(".")
        target = values
        for group in groups:
            target = target[group]
        target[leaf] = value
    return config_from_dict(type(config), values)


def read_settings_file(path: str | Path) -> dict[str, Any]:
    """The settings in a JSON (``.json``) or YAML file: a mapping of (nested or dotted)
    settings; a run's ``config.json`` (``{"recipe": ..., "config": {...}}``) gives its
    ``config``.

    :raises SettingError: when the file is missing, unreadable, not UTF-8, not valid JSON or
        YAML, nested or (through YAML aliases) expanded beyond the bounds of
        :func:`~ppl_vae._files.read_json` and :func:`~ppl_vae._files.read_yaml`, or not a mapping.
    """
    path = Path(path)
    if not path.exists():
        raise SettingError(f"cannot read config file {str(path)!r}: it does not exist")
    try:
        values = read_json(path, "config file") if path.suffix.lower() == ".json" else read_yaml(path, "config file")
    except ValueError as error:
        raise SettingError(str(error)) from None
    if values is None:
        return {}
    if not isinstance(values, Mapping):
        raise SettingError(f"config file {str(path)!r} must hold a mapping of settings, got {type(values).__name__}")
    if "recipe" in values and isinstance(values.get("config"), Mapping):
        return dict(values["config"])
    return dict(values)
