"""Checks of scalar arguments, with errors that name the argument, the value and what was expected.

``True`` and ``False`` are integers to Python (``isinstance(True, int)``); these checks refuse
them where a count or a seed is meant, and refuse NaN and infinities where a finite number is.
"""
from __future__ import annotations

import math
import reprlib
from numbers import Integral, Real
from typing import Any


def integer(name: str, value: Any, minimum: int | None = None, maximum: int | None = None) -> int:
    """``value`` as an ``int``, refused unless it is an integer (not a bool) in ``[minimum, maximum]``.

    :raises ValueError: naming ``name``, ``value`` and the expected range.
    """
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise ValueError(f"{name} must be an integer{_range(minimum, maximum)}, got {shown(value)}")
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise ValueError(f"{name} must be an integer{_range(minimum, maximum)}, got {shown(value)}")
    return int(value)


def positive_integer(name: str, value: Any) -> int:
    """``value`` as an ``int`` >= 1, refused unless it is a positive integer (not a bool).

    :raises ValueError: naming ``name`` and ``value``.
    """
    if isinstance(value, bool) or not isinstance(value, Integral) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {shown(value)}")
    return int(value)


def finite(name: str, value: Any, low: float | None = None, high: float | None = None, positive: bool = False) -> float:
    """``value`` as a finite ``float`` (not a bool), in ``[low, high)`` where those are given, and > 0
    with ``positive``.

    :raises ValueError: naming ``name``, ``value`` and what was expected.
    """
    expected = "a finite number" + (" > 0" if positive else "") + _interval(low, high)
    if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value):
        raise ValueError(f"{name} must be {expected}, got {shown(value)}")
    if (positive and value <= 0) or (low is not None and value < low) or (high is not None and value >= high):
        raise ValueError(f"{name} must be {expected}, got {shown(value)}")
    return float(value)


def boolean(name: str, value: Any) -> bool:
    """``value`` itself, refused unless it is ``True`` or ``False``.

    :raises ValueError: naming ``name`` and ``value``.
    """
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be True or False, got {shown(value)}")
    return value


def site_name(name: str, value: Any) -> str:
    """``value`` itself, refused unless it is a non-empty string (a Pyro site's or a term's name).

    :raises ValueError: naming ``name`` and ``value``.
    """
    if not isinstance(value, str) or not value:
        raise ValueError(f"{name} must be a non-empty site name, got {shown(value)}")
    return value


def _range(minimum: int | None, maximum: int | None) -> str:
    if minimum is not None and maximum is not None:
        return f" in [{minimum}, {maximum}]"
    if minimum is not None:
        return f" >= {minimum}"
    if maximum is not None:
        return f" <= {maximum}"
    return ""


def _interval(low: float | None, high: float | None) -> str:
    if low is not None and high is not None:
        return f" in [{low}, {high})"
    if low is not None:
        return f" >= {low}"
    if high is not None:
        return f" < {high}"
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
