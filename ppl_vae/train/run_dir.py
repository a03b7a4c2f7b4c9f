"""Run directories: config, checkpoints, metrics and pictures of one training run.

Layout::

    RUN_DIR/config.json          settings, library/torch/pyro versions, start time
    RUN_DIR/checkpoints/last.ckpt
    RUN_DIR/metrics.csv          per-term losses every ``log_every_n_steps`` (ppl_vae.train.metrics)
    RUN_DIR/tensorboard/         the same as TensorBoard events, with ``loggers=("csv", "tensorboard")``
    RUN_DIR/metrics.json         final evaluation figures
    RUN_DIR/pictures/*.png       reconstructions, samples, traversals

Every file but ``metrics.csv`` (appended row by row) and the TensorBoard events is written
whole to a temporary ``.NAME.*.tmp`` file beside it and renamed over it; a process killed
mid-write leaves such a temporary file, which the next run in the folder removes.
"""
from __future__ import annotations

import json
import os
import platform
import tempfile
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any

import lightning
import pyro
import torch

from ppl_vae._validation import boolean
from ppl_vae._version import __version__


class RunDirectoryExistsError(FileExistsError):
    """The run directory holds a previous run and neither overwrite nor resume was asked."""


def write_atomically(path: str | os.PathLike, write: Callable[[IO], None], binary: bool = False) -> None:
    """Write the file at ``path`` through ``write(handle)`` atomically: a temporary file in the
    same folder (readable by others, as a plain write would leave it), ``fsync``, rename. A
    reader sees the old file or the new one, never a part; an interrupted write leaves only a
    ``.<name>.*.tmp`` file, which :meth:`RunDirectory.remove_temporary_files` clears."""
    path = Path(path)
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


def write_json_atomic(path: str | os.PathLike, payload: Any) -> None:
    """Write ``payload`` as indented JSON via a temporary file and a rename."""

    def write(handle: IO) -> None:
        json.dump(payload, handle, indent=2, sort_keys=True, default=str)
        handle.write("\n")

    write_atomically(path, write)


def versions() -> dict[str, str]:
    """Versions of the library and the packages that decide its numerics."""
    return {
        "ppl_vae": __version__,
        "torch": torch.__version__,
        "pyro": pyro.__version__,
        "lightning": lightning.__version__,
        "python": platform.python_version(),
    }


class RunDirectory:
    """A training run's folder.

    :param path: the folder.
    :param overwrite: allow reusing a folder that already holds a run (its files are
        replaced as the new run writes them).
    :param resume: the folder must hold a run with a checkpoint to continue.
    """

    def __init__(self, path: str | os.PathLike, overwrite: bool = False, resume: bool = False) -> None:
        boolean("overwrite", overwrite)
        boolean("resume", resume)
        self.path = Path(path)
        if resume:
            if not self.last_checkpoint.is_file():
                raise FileNotFoundError(
                    f"cannot resume: {self.last_checkpoint} does not exist (run_dir={self.path})"
                )
        elif self.config_path.exists() and not overwrite:
            raise RunDirectoryExistsError(
                f"run_dir {self.path} already holds a run; pass overwrite=True "
                "(--overwrite) to replace it or resume=True (--resume) to continue it"
            )
        self.checkpoints.mkdir(parents=True, exist_ok=True)
        self.pictures.mkdir(parents=True, exist_ok=True)

    @property
    def config_path(self) -> Path:
        """``config.json``: every setting and the library versions."""
        return self.path / "config.json"

    @property
    def checkpoints(self) -> Path:
        """The ``checkpoints`` folder."""
        return self.path / "checkpoints"

    @property
    def last_checkpoint(self) -> Path:
        """``checkpoints/last.ckpt``, the checkpoint a resume starts from."""
        return self.checkpoints / "last.ckpt"

    @property
    def metrics_csv(self) -> Path:
        """The per-term losses logged during training (:mod:`ppl_vae.train.metrics`)."""
        return self.path / "metrics.csv"

    @property
    def tensorboard(self) -> Path:
        """The folder of TensorBoard event files."""
        return self.path / "tensorboard"

    def remove_temporary_files(self) -> list[Path]:
        """Remove the temporary files (``.NAME.*.tmp``) that a process killed while writing a
        checkpoint, ``config.json``, ``metrics.json`` or ``metrics.csv`` left; returns them."""
        written = (self.config_path, self.metrics_path, self.metrics_csv)
        stale = [*self.checkpoints.glob(".*.ckpt.*.tmp")]
        stale += [tmp for path in written for tmp in self.path.glob(f".{path.name}.*.tmp")]
        for path in stale:
            path.unlink(missing_ok=True)
        return stale

    @property
    def pictures(self) -> Path:
        """The ``pictures`` folder."""
        return self.path / "pictures"

    @property
    def metrics_path(self) -> Path:
        """``metrics.json``: the final figures of the evaluation."""
        return self.path / "metrics.json"

    def write_config(self, config: dict[str, Any]) -> None:
        """Save the run's settings with versions and the start time."""
        payload = dict(config)
        payload["versions"] = versions()
        payload["created"] = datetime.now(timezone.utc).isoformat()
        write_json_atomic(self.config_path, payload)

    def read_config(self) -> dict[str, Any]:
        """The settings saved by :meth:`write_config`."""
        if not self.config_path.is_file():
            raise FileNotFoundError(f"{self.config_path} does not exist: not a run directory")
        with open(self.config_path) as handle:
            return json.load(handle)

    def write_metrics(self, metrics: dict[str, Any]) -> None:
        """Save final figures to ``metrics.json``."""
        write_json_atomic(self.metrics_path, metrics)
