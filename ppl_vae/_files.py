"""Reading and writing the library's files: one atomic writer that stays inside its folder,
and bounded readers of text, JSON and YAML whose errors name the file.

Every file the library writes goes through :func:`write_atomically`; every JSON or YAML file
it reads goes through :func:`read_json` or :func:`read_yaml`.
"""
from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

MAX_NESTING = 64
"""Deepest nesting of lists and mappings accepted in a JSON or YAML file or value."""

MAX_TEXT_BYTES = 64 * 2**20
"""Largest settings or metrics text file read (64 MiB)."""

MAX_YAML_NODES = 100_000
"""Most values a YAML file may expand to, aliases counted as often as they are used."""


class NestingError(ValueError):
    """A JSON or YAML value nests lists or mappings deeper than :data:`MAX_NESTING`."""


class UnsafePathError(ValueError):
    """A file to write is, or lies in, a symbolic link leading outside the folder it must stay in
    or into a loop of links."""


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def check_stays_within(path: str | os.PathLike, within: str | os.PathLike) -> None:
    """Refuse ``path`` when it, or a folder between ``within`` and it, is a symbolic link
    leading outside ``within`` (where a write would land in someone else's file or folder).

    :raises UnsafePathError: naming the link and where it leads.
    """
    path, within = Path(path), Path(within)
    root = _resolved(within)
    relative = path.relative_to(within) if _inside(path, within) else None
    if relative is None:
        raise UnsafePathError(f"{path} lies outside {within}, where it must be written")
    current = within
    for part in relative.parts:
        current = current / part
        if current.is_symlink() and not _inside(_resolved(current), root):
            raise UnsafePathError(
                f"{current} is a symbolic link to {current.resolve()}, outside {within}: refusing to write through it"
            )


def _resolved(path: Path) -> Path:
    """``path.resolve()``; a loop of symbolic links (pathlib's ``RuntimeError``, an ``OSError``
    from Python 3.13) is refused naming the link.

    :raises UnsafePathError: naming ``path``.
    """
    try:
        return path.resolve()
    except (RuntimeError, OSError):
        raise UnsafePathError(f"{path} is a symbolic link that leads into a loop of links") from None


def write_atomically(
    path: str | os.PathLike, write: Callable[[IO], None], binary: bool = False, within: str | os.PathLike | None = None
) -> None:
    """Write the file at ``path`` through ``write(handle)`` atomically: a temporary file in the
    same folder (readable by others, as a plain write would leave it), ``fsync``, rename. A
    reader sees the old file or the new one, never a part; an interrupted write leaves only a
    ``.<name>.*.tmp`` file. The rename replaces a symbolic link at ``path`` instead of writing
    through it.

    :param within: the folder the file must stay in (default: its own folder); a target or
        folder on the way that is a symbolic link leading outside it is refused
        (:func:`check_stays_within`) before anything is created.
    :raises UnsafePathError: for such a link, or a folder at ``path``.
    """
    path = Path(path)
    check_stays_within(path, path.parent if within is None else within)
    if path.is_dir() and not path.is_symlink():
        raise UnsafePathError(f"{path} is a folder: refusing to replace it with a file")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o644)  # mkstemp's 0o600 would hide the file from other users
        with os.fdopen(fd, "wb" if binary else "w") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_text(path: str | os.PathLike, what: str, max_bytes: int = MAX_TEXT_BYTES) -> str:
    """The UTF-8 text of the file ``path`` (``what`` it is, for messages), at most ``max_bytes``.

    :raises FileNotFoundError: no such file.
    :raises ValueError: a folder or other non-file, a file larger than ``max_bytes``, bytes
        that are not UTF-8 (naming the offset), or a file that cannot be read.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{what} {path} does not exist")
    if not path.is_file():
        raise ValueError(f"{what} {path} is not a file")
    try:
        with open(path, "rb") as handle:
            data = handle.read(max_bytes + 1)
    except OSError as error:
        raise ValueError(f"cannot read {what} {path}: {error.strerror or error}") from None
    if len(data) > max_bytes:
        raise ValueError(f"{what} {path} is larger than {max_bytes} bytes: not a file the library wrote")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(f"{what} {path} is not UTF-8 text (byte {error.start} is 0x{data[error.start]:02x})") from None


def nesting(value: Any) -> int:
    """How deep lists, tuples and dicts nest in ``value`` (0 for a number or a string), walked
    without recursion."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, (list, tuple)) else None
        if children is not None:
            deepest = max(deepest, depth + 1)
            stack.extend((child, depth + 1) for child in children)
    return deepest


def parse_json(text: str, what: str) -> Any:
    """The JSON value of ``text`` (``what`` it is, for messages), nested at most :data:`MAX_NESTING` deep.

    :raises ValueError: naming ``what``, for invalid JSON.
    :raises NestingError: naming ``what``, for deeper nesting.
    """
    try:
        value = json.loads(text)
    except RecursionError:
        value = None
    except ValueError as error:
        raise ValueError(f"{what} is not valid JSON: {error}") from None
    else:
        if nesting(value) <= MAX_NESTING:
            return value
    raise NestingError(f"{what} nests lists or objects deeper than {MAX_NESTING}")


def read_json(path: str | os.PathLike, what: str) -> Any:
    """The JSON value in the file ``path`` (:func:`read_text`, :func:`parse_json`); an empty file is refused.

    :raises FileNotFoundError: no such file.
    :raises ValueError: naming the file, for an empty, unreadable, non-UTF-8, invalid or too deeply nested file.
    """
    text = read_text(path, what)
    if not text.strip():
        raise ValueError(f"{what} {path} is empty")
    return parse_json(text, f"{what} {path}")


def read_yaml(path: str | os.PathLike, what: str) -> Any:
    """The YAML value in the file ``path``, read with PyYAML's safe loader (no Python objects)
    and refused when aliases expand it beyond :data:`MAX_YAML_NODES` values or it nests deeper
    than :data:`MAX_NESTING` (an "alias bomb" of a few lines that would expand to billions).

    :raises ValueError: naming the file, for unreadable text, invalid YAML or too large an expansion.
    """
    import yaml

    text = read_text(path, what)
    try:
        loader = yaml.SafeLoader(text)  # its reader refuses control characters (NUL) here
    except yaml.YAMLError as error:
        raise ValueError(f"{what} {path} is not valid YAML: {' '.join(str(error).split())[:500]}") from None
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_yaml_size(node, f"{what} {path}")
        return loader.construct_document(node)
    except yaml.YAMLError as error:
        raise ValueError(f"{what} {path} is not valid YAML: {' '.join(str(error).split())[:500]}") from None
    except RecursionError:
        raise NestingError(f"{what} {path} nests lists or mappings deeper than {MAX_NESTING}") from None
    finally:
        loader.dispose()


def _check_yaml_size(root: Any, what: str) -> None:
    """Refuse a composed YAML graph that expands to more than :data:`MAX_YAML_NODES` values
    or nests deeper than :data:`MAX_NESTING`; shared (aliased) nodes are counted per use but
    measured once."""
    import yaml

    sizes: dict[int, tuple[int, int]] = {}

    def measure(node: Any, depth: int) -> tuple[int, int]:
        if depth > MAX_NESTING:
            raise NestingError(f"{what} nests lists or mappings deeper than {MAX_NESTING}")
        if id(node) in sizes:
            return sizes[id(node)]
        if isinstance(node, yaml.MappingNode):
            children = [child for pair in node.value for child in pair]
        elif isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        else:
            children = []
        count, deepest = 1, 0
        for child in children:
            size, child_depth = measure(child, depth + 1)
            count += size
            deepest = max(deepest, child_depth + 1)
            if count > MAX_YAML_NODES:
                raise ValueError(f"{what} expands (through its aliases) to more than {MAX_YAML_NODES} values")
        sizes[id(node)] = (count, deepest)
        return count, deepest

    measure(root, 0)
