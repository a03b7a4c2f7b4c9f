"""Checks of scalar arguments, with errors that name the argument, the value and what was expected.

Every refusal reads ``"{name} must be {expected}, got {value}"`` (:func:`require`), whether it
comes from an objective, a term, a model or a recipe's config (which raises it as a
:class:`~ppl_vae.recipes.settings.SettingError`). ``True`` and ``False`` are integers to Python
(``isinstance(True, int)``); these checks refuse them where a count or a seed is meant, and
refuse NaN and infinities where a finite number is.
"""
from __future__ import annotations

import difflib
import math
import os
import reprlib
from collections.abc import Sequence
from numbers import Integral, Real
from typing import Any


def require(name: str, value: Any, holds: bool, expected: str) -> None:
    """Refuse ``value`` of ``name`` unless ``holds``: the message of every check here.

    :raises ValueError: ``"{name} must be {expected}, got {value}"``.
    """
    if not holds:
        raise ValueError(f"{name} must be {expected}, got {shown(value)}")


def integer(name: str, value: Any, minimum: int | None = None, maximum: int | None = None) -> int:
    """``value`` as an ``int``, refused unless it is an integer (not a bool) in ``[minimum, maximum]``.

    :raises ValueError: naming ``name``, ``value`` and the expected range.
    """
    holds = (
        not isinstance(value, bool) and isinstance(value, Integral)
        and (minimum is None or value >= minimum) and (maximum is None or value <= maximum)
    )
    require(name, value, holds, f"an integer{_range(minimum, maximum)}")
    return int(value)


def positive_integer(name: str, value: Any) -> int:
    """``value`` as an ``int`` >= 1, refused unless it is a positive integer (not a bool).

    :raises ValueError: naming ``name`` and ``value``.
    """
    require(name, value, not isinstance(value, bool) and isinstance(value, Integral) and value >= 1, "a positive integer")
    return int(value)


def finite(
    name: str, value: Any, low: float | None = None, high: float | None = None, positive: bool = False, closed: bool = False
) -> float:
    """``value`` as a finite ``float`` (not a bool), in ``[low, high)`` where those are given
    (``[low, high]`` with ``closed``), and > 0 with ``positive``.

    :raises ValueError: naming ``name``, ``value`` and what was expected.
    """
    holds = (
        not isinstance(value, bool) and isinstance(value, Real) and math.isfinite(value)
        and not (positive and value <= 0) and (low is None or value >= low)
        and (high is None or value < high or (closed and value == high))
    )
    require(name, value, holds, "a finite number" + (" > 0" if positive else "") + _interval(low, high, closed))
    return float(value)


def capacity_range(name: str, value: Any) -> tuple[float, float]:
    """``value`` as ``(C_min, C_max)`` floats, refused unless it is a pair of finite numbers with
    ``0 <= C_min <= C_max``: the ends of an information capacity ramp, in nats
    (:class:`~ppl_vae.schedules.LinearCapacity`, and a recipe's ``z_capacity``).

    :raises ValueError: naming ``name`` and ``value``.
    """
    holds = (
        isinstance(value, (tuple, list)) and len(value) == 2
        and all(not isinstance(end, bool) and isinstance(end, Real) and math.isfinite(end) for end in value)
        and 0 <= value[0] <= value[1]
    )
    require(name, value, holds, "(C_min, C_max) with 0 <= C_min <= C_max")
    return float(value[0]), float(value[1])


def adam_betas(name: str, value: Any) -> tuple[float, float]:
    """``value`` as Adam's ``(beta_1, beta_2)``: two finite numbers in [0, 1)."""
    if isinstance(value, (str, bytes)) or not hasattr(value, "__len__") or len(value) != 2:
        raise ValueError(f"{name} must be two numbers in [0, 1), got {shown(value)}")
    return tuple(finite(name, b, low=0.0, high=1.0) for b in value)  # type: ignore[return-value]


def boolean(name: str, value: Any) -> bool:
    """``value`` itself, refused unless it is ``True`` or ``False``.

    :raises ValueError: naming ``name`` and ``value``.
    """
    require(name, value, isinstance(value, bool), "True or False")
    return value


def choice(name: str, value: Any, choices: Sequence[Any]) -> Any:
    """``value`` itself, refused unless it is one of ``choices`` (a model's likelihood, an
    objective's divergence, a config's dataset).

    :raises ValueError: naming ``name``, ``value`` and the choices.
    """
    require(name, value, value in choices, f"one of {tuple(choices)}")
    return value


def site_name(name: str, value: Any) -> str:
    """``value`` itself, refused unless it is a non-empty string (a Pyro site's or a term's name).

    :raises ValueError: naming ``name`` and ``value``.
    """
    require(name, value, isinstance(value, str) and bool(value), "a non-empty site name")
    return value


def did_you_mean(name: str, known: Sequence[str]) -> str:
    """The end of an "unknown name" error: ``"; did you mean 'lr'?"`` with the close names among
    ``known`` (:func:`difflib.get_close_matches`, and a name that is the initials of
    ``name``'s words: ``learning_rate`` -> ``lr``), else ``"; valid: a, b, c"``. The command
    line's settings and :func:`ppl_vae.fit`'s keyword settings say it alike."""
    name = str(name)[:200]
    close = [k for k in known if _initials(name) == k.rpartition(".")[2]]
    close += [k for k in difflib.get_close_matches(name, list(known), n=3, cutoff=0.6) if k not in close][: 3 - len(close)]
    return f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else f"; valid: {', '.join(known)}"


def _initials(name: str) -> str:
    words = name.rpartition(".")[2].split("_")
    return "".join(word[:1] for word in words) if len(words) > 1 else ""


THREADS_ENV = "PPL_VAE_NUM_THREADS"


def threads_from_environment() -> int | None:
    """``$PPL_VAE_NUM_THREADS`` (torch's CPU threads for :func:`ppl_vae.fit` and ``ppl-vae``) as
    a positive integer; ``None`` when it is unset or empty.

    :raises ValueError: naming the variable when it is not a positive integer.
    """
    text = os.environ.get(THREADS_ENV, "").strip()
    if not text:
        return None
    if not text.isdigit() or len(text) > 6 or int(text) < 1:
        raise ValueError(f"{THREADS_ENV} must be a positive integer (torch CPU threads), got {shown(text)}")
    return int(text)


def _range(minimum: int | None, maximum: int | None) -> str:
    if minimum is not None and maximum is not None:
        return f" in [{minimum}, {maximum}]"
    if minimum is not None:
        return f" >= {minimum}"
    if maximum is not None:
        return f" <= {maximum}"
    return ""


def _interval(low: float | None, high: float | None, closed: bool = False) -> str:
    if low is not None and high is not None:
        return f" in [{low}, {high}{']' if closed else ')'}"
    if low is not None:
        return f" >= {low}"
    if high is not None:
        return f" <= {high}" if closed else f" < {high}"
    return ""


def shown(value: Any, limit: int = 80) -> str:
    """``repr(value)`` cut to about ``limit`` characters, for error messages: a value read from
    a file or the command line may be huge (a 5,000-digit number, an expanded YAML alias), and
    a message never formats more than a line of it. Containers are summarised before ``repr``
    walks them."""
    if isinstance(value, (list, tuple, dict, set)) and len(value) > 8:
        return f"<{type(value).__name__} of {len(value)} items>"
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 3 * limit:
        return f"<an integer of about {int(value.bit_length() * 0.30103)} digits>"
    text = reprlib.repr(value) if isinstance(value, (list, tuple, dict, set)) else repr(value)
    return text if len(text) <= limit else f"{text[: limit - 3]}..."
