"""``metrics.csv``: the per-term losses of a run, one row per logging interval.

Every row reaches the file when it is logged (appended and flushed, so a process killed at
any moment leaves every row it logged). The checkpoint holds the same rows
(``checkpoint["ppl_vae"]["history"]``); a resumed run rewrites the file from them, which
drops the rows a killed run logged after its last checkpoint (training repeats those
iterations and logs them again) and never loses an earlier one.

Layout: a header ``step,<term>,<term>,...`` (``step`` first, then the terms in the order
they were first logged), then one row per logging interval; a term missing from a row is
an empty cell. Numbers are written with ``repr`` and read back exactly.
"""
from __future__ import annotations

import csv
import io
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from lightning.pytorch.loggers import Logger
from lightning.pytorch.utilities import rank_zero_only

from ppl_vae._files import read_text, write_atomically
from ppl_vae._validation import shown

__all__ = ["CSVMetricsLogger", "metrics_table_text", "read_training_metrics", "write_metrics_table"]

METRICS_CSV = "metrics.csv"


def _columns(rows: Sequence[Mapping[str, float]]) -> list[str]:
    names = dict.fromkeys(name for row in rows for name in row if name != "step")
    return ["step", *names]


def _cell(value: float | None) -> str:
    return "" if value is None else repr(value)


def _line(row: Mapping[str, float], columns: Sequence[str]) -> str:
    return ",".join(_cell(row.get(name)) for name in columns) + "\n"


def metrics_table_text(rows: Sequence[Mapping[str, float]]) -> str:
    """The text of ``metrics.csv`` holding ``rows`` (dicts of term -> value with ``"step"``).

    :param rows: one dict per logged step, ``{"step": step, term: value, ...}``.
    """
    if not rows:
        return ""
    columns = _columns(rows)
    return ",".join(columns) + "\n" + "".join(_line(row, columns) for row in rows)


def write_metrics_table(path: str | os.PathLike, rows: Sequence[Mapping[str, float]]) -> None:
    """Make the file at ``path`` hold exactly ``rows``, atomically (temporary file, ``fsync``,
    rename); without rows the file is removed. A file that already holds them is left untouched.

    :param path: the CSV file.
    :param rows: one dict per logged step, ``{"step": step, term: value, ...}``.
    """
    path = Path(path)
    text = metrics_table_text(rows)
    if not text:
        path.unlink(missing_ok=True)
        return
    if path.is_file() and path.read_bytes() == text.encode():
        return
    write_atomically(path, lambda handle: handle.write(text))


def read_training_metrics(run_dir: str | os.PathLike) -> dict[str, list[float]]:
    """The training curves of a run: every logged term against the training iteration.

    :param run_dir: a run directory (or its ``metrics.csv``).
    :returns: ``{"step": [s_1, ..., s_R], term: [v_1, ..., v_R], ...}``: one list of length R
        (the number of logged rows) per column, ``"step"`` first (training iterations
        completed, as ints, increasing), then each term (``"elbo_loss"``, the objective's
        terms, auxiliary steps' losses) in the order it was first logged, as floats, NaN
        where a row lacks the term. Every list has the same length; an empty file gives
        ``{"step": []}``.
    :raises FileNotFoundError: if there is no ``metrics.csv``.
    :raises ValueError: naming the file (and line), if it is not a file, not UTF-8 text, not
        a metrics table (header without ``step`` first, a column named twice, a row of another
        length, a cell that is not a number, steps that do not increase) or its last line was
        cut short (no line end).
    """
    path = Path(run_dir)
    if path.is_dir():
        path = path / METRICS_CSV
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist: the run logged no metrics there")
    text = read_text(path, "metrics table")
    if text and not text.endswith("\n"):
        raise ValueError(
            f"{path}: its last line is incomplete (no line end): a write was cut short; resuming the run rewrites the file"
        )
    try:
        rows = list(csv.reader(io.StringIO(text)))
    except csv.Error as error:
        raise ValueError(f"{path} is not a metrics table: {error}") from None
    if not rows:
        return {"step": []}
    header, body = rows[0], rows[1:]
    if not header or header[0] != "step":
        raise ValueError(f"{path} is not a metrics table: its header {shown(header[:3])} does not start with 'step'")
    repeated = sorted({name for name in header if header.count(name) > 1})
    if repeated:
        raise ValueError(f"{path}: its header names the column(s) {shown(repeated)} more than once")
    table: dict[str, list[float]] = {name: [] for name in header}
    for number, row in enumerate(body, start=2):
        if len(row) != len(header):
            raise ValueError(f"{path} line {number} has {len(row)} cells, the header {len(header)}")
        try:
            step = int(row[0]) if len(row[0]) <= 20 else None
            values = [float(cell) if cell else math.nan for cell in row[1:]]
        except ValueError:
            step = None
        if step is None or any(len(cell) > 40 for cell in row):
            raise ValueError(f"{path} line {number} holds a cell that is not a number: {shown(row)}")
        if table["step"] and step <= table["step"][-1]:
            raise ValueError(f"{path} line {number}: step {step} does not follow step {table['step'][-1]} (steps must increase)")
        table["step"].append(step)
        for name, value in zip(header[1:], values, strict=True):
            table[name].append(value)
    return table


class CSVMetricsLogger(Logger):
    """A Lightning logger that appends each logged row to ``metrics.csv`` and flushes it.

    It writes on rank 0 only. It does not touch the file until a row is logged: the engine
    rewrites the file from the rows it resumes from before training
    (:func:`write_metrics_table`), and hands the logger those rows, so that a row with a new
    term rewrites the whole table under the wider header.

    :param path: the ``metrics.csv`` file.
    :param rows: the rows the file holds already (those of the checkpoint resumed from).
    """

    def __init__(self, path: str | os.PathLike, rows: Sequence[Mapping[str, float]] = ()) -> None:
        super().__init__()
        self.path = Path(path)
        self.rows = [dict(row) for row in rows]
        self.columns = _columns(self.rows) if self.rows else []

    @property
    def name(self) -> str:
        """``"csv"``."""
        return "csv"

    @property
    def version(self) -> str:
        """``""``: one history per run directory."""
        return ""

    @property
    def save_dir(self) -> str:
        """The run directory that holds ``metrics.csv``."""
        return str(self.path.parent)

    @rank_zero_only
    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        """Nothing: a run's settings are in ``config.json``.

        :param params: the hyperparameters Lightning passes (ignored).
        :param args: ignored.
        :param kwargs: ignored.
        """

    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        """Append the row ``{"step": step, **metrics}`` (rewrite the table if it has a new term).

        :param metrics: term -> value logged at this step.
        :param step: the training step (iteration) of the values.
        """
        row = {"step": step, **{name: float(value) for name, value in metrics.items()}}
        self.rows.append(row)
        if set(row) <= set(self.columns) and self.path.is_file():
            with open(self.path, "a") as handle:
                handle.write(_line(row, self.columns))
                handle.flush()
        else:
            self.columns = _columns(self.rows)
            write_metrics_table(self.path, self.rows)
