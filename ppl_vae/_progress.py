"""Progress of the long loops (metrics, posterior predictive checks) on stderr.

On a terminal a tqdm bar, cleared when the loop ends. Elsewhere (a log file, a notebook, a
pipe), where every redraw of a bar would be a new line or message, one line when the loop
starts and one when it ends, each with the clock time; the last one gives the duration::

    [14:03:12] Factor score (standard): started, 10,000 images
    [14:03:40] Factor score (standard): done in 28.1 s
"""
from __future__ import annotations

import sys
import time
from types import TracebackType
from typing import TextIO

from tqdm import tqdm


class Progress:
    """Progress of a loop of ``total`` units (images, replicates) on ``stream``.

    Use as a context manager; call :meth:`update` after each unit or batch of units.

    :param total: the number of units the loop will do.
    :param description: what the loop computes, e.g. ``"Factor score (standard)"``.
    :param enabled: ``False`` writes nothing.
    :param unit: the name of one unit in the start line (``"images"``, ``"replicates"``).
    :param stream: where to write; default ``sys.stderr`` (read when the loop starts).
    """

    def __init__(
        self, total: int, description: str, enabled: bool = True, unit: str = "steps", stream: TextIO | None = None
    ) -> None:
        self.total = total
        self.description = description
        self.enabled = enabled
        self.unit = unit
        self.stream = stream
        self._bar: tqdm | None = None
        self._lines = False
        self._started = 0.0

    def __enter__(self) -> Progress:
        stream = self.stream if self.stream is not None else sys.stderr
        self.stream = stream
        self._started = time.perf_counter()
        if not self.enabled:
            return self
        if _is_terminal(stream):
            self._bar = tqdm(total=self.total, desc=self.description, file=stream, leave=False)
        else:
            self._lines = True
            self._write(f"{self.description}: started, {self.total:,} {self.unit}")
        return self

    def update(self, n: int = 1) -> None:
        """Count ``n`` more units done."""
        if self._bar is not None:
            self._bar.update(n)

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        if self._bar is not None:
            self._bar.close()
        if self._lines:
            seconds = time.perf_counter() - self._started
            self._write(f"{self.description}: {'done' if kind is None else 'stopped by an error'} in {seconds:.1f} s")

    def _write(self, message: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {message}", file=self.stream, flush=True)


def someone_is_watching() -> bool:
    """Whether a person sees this process's output as it comes: stdout or stderr is a terminal,
    or the code runs in a Jupyter kernel (IPython's shell has a ``kernel``). ``False`` in a pipe,
    a log file or CI, where progress redraws would only fill the log."""
    if _is_terminal(sys.stdout) or _is_terminal(sys.stderr):
        return True
    get_ipython = getattr(sys.modules.get("IPython"), "get_ipython", None)
    return get_ipython is not None and hasattr(get_ipython(), "kernel")


def _is_terminal(stream: TextIO) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty is not None and isatty())

