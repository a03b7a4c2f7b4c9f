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
mid-write leaves such a temporary file, which the next run in the folder removes. The rename
replaces a symbolic link instead of writing through it, and a run folder whose files or folders
are symbolic links leading outside it is refused (:meth:`RunDirectory.check_links`), so
nothing is written outside the run.
"""
from __future__ import annotations

import json
import os
import platform
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any

import lightning
import pyro
import torch

from ppl_vae._files import check_stays_within, read_json, write_atomically
from ppl_vae._validation import boolean
from ppl_vae._version import __version__


class RunDirectoryExistsError(FileExistsError):
    """The run directory holds a previous run and neither overwrite nor resume was asked."""


def write_json_atomic(path: str | os.PathLike, payload: Any, within: str | os.PathLike | None = None) -> None:
    """Write ``payload`` as indented JSON via a temporary file and a rename
    (a symbolic link at ``path`` is replaced, never written through; the file must stay
    ``within`` that folder).

    :param path: the JSON file.
    :param payload: JSON-ready data (other objects are written as their ``str``).
    :param within: a folder the file must stay inside, through symbolic links too; ``None``
        checks nothing.
    """

    def write(handle: IO) -> None:
        json.dump(payload, handle, indent=2, sort_keys=True, default=str)
        handle.write("\n")

    write_atomically(path, write, within=within)


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
    :param create: make the ``checkpoints`` and ``pictures`` folders (for a run that trains or
        evaluates); ``False`` opens the folder as it is and writes nothing (:meth:`create`
        makes them later).
    :raises ValueError: (``UnsafePathError``) one of the run's files or folders is a symbolic
        link leading outside the run folder (the library would write through it).
    :raises ValueError: the run folder, ``checkpoints`` or ``pictures`` is a file.
    """

    def __init__(self, path: str | os.PathLike, overwrite: bool = False, resume: bool = False, create: bool = True) -> None:
        boolean("overwrite", overwrite)
        boolean("resume", resume)
        boolean("create", create)
        self.path = Path(path)
        self.check_links()
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
        for folder in (self.path, self.checkpoints, self.pictures):
            if folder.exists() and not folder.is_dir():
                raise ValueError(f"{folder} must be a folder of the run, but it is a file")
        if create:
            self.create()

    def create(self) -> None:
        """Make the run folder with its ``checkpoints`` and ``pictures`` folders."""
        for folder in (self.checkpoints, self.pictures):
            folder.mkdir(parents=True, exist_ok=True)

    def check_links(self) -> None:
        """Refuse a run folder where a file or folder the library writes (``config.json``,
        ``metrics.csv``, ``metrics.json``, ``checkpoints/``, ``pictures/`` and each picture,
        ``tensorboard/``) is a symbolic link leading outside it.

        :raises ValueError: (``UnsafePathError``) naming the link and where it leads.
        """
        written = [self.config_path, self.metrics_csv, self.metrics_path, self.last_checkpoint, self.tensorboard]
        if self.pictures.is_dir():
            written += sorted(self.pictures.iterdir())
        for path in [*written, self.pictures]:
            check_stays_within(path, self.path)

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
        """Save the run's settings with versions and the start time.

        :param config: the settings, JSON-ready, as ``config.json`` holds them.
        """
        payload = dict(config)
        payload["versions"] = versions()
        payload["created"] = datetime.now(timezone.utc).isoformat()
        write_json_atomic(self.config_path, payload, within=self.path)

    def read_config(self) -> dict[str, Any]:
        """The settings saved by :meth:`write_config`.

        :raises FileNotFoundError: no ``config.json``.
        :raises ValueError: naming the file, when it is empty, not UTF-8, not JSON, nested too
            deeply or not a JSON object.
        """
        if not self.config_path.exists():
            raise FileNotFoundError(f"{self.config_path} does not exist: not a run directory")
        settings = read_json(self.config_path, "run config")
        if not isinstance(settings, dict):
            raise ValueError(f"run config {self.config_path} must hold a JSON object, got a {type(settings).__name__}")
        return settings

    def write_metrics(self, metrics: dict[str, Any]) -> None:
        """Save final figures to ``metrics.json``.

        :param metrics: name -> figure (nested mappings allowed), JSON-ready.
        """
        write_json_atomic(self.metrics_path, metrics, within=self.path)
