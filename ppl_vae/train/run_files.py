"""The files :func:`~ppl_vae.fit` writes into a run directory as a run starts, and how a failed
start takes them back."""
from __future__ import annotations

import shutil
from collections.abc import Mapping, Sequence
from typing import Any

import lightning as L

from ppl_vae.train.config import TrainConfig
from ppl_vae.train.metrics import write_metrics_table
from ppl_vae.train.run_dir import RunDirectory

__all__ = ["NewRunFiles", "ResumedRunFiles"]


class NewRunFiles:
    """What a new run writes into its run directory, and how to take it back.

    :meth:`write` makes the folders, removes what a killed process left, the earlier run's
    checkpoints, TensorBoard events and ``metrics.csv``, then writes ``config.json``.
    :meth:`remove` removes the run's files and folders (``config.json``, ``metrics.csv``,
    ``metrics.json``, ``checkpoints/``, ``pictures/``, ``tensorboard/``) that did not exist
    before, then the run folder and its parents that did not exist, where they are left empty;
    everything else stays: a start that fails before its first iteration leaves the folder as
    it found it, and a retry (``--device cpu``) starts afresh.

    :param run: the run directory (not created yet).
    """

    def __init__(self, run: RunDirectory) -> None:
        self.run = run
        self.missing_folders = [folder for folder in [*reversed(run.path.parents), run.path] if not folder.exists()]
        entries = (run.config_path, run.metrics_csv, run.metrics_path, run.checkpoints, run.pictures, run.tensorboard)
        self.missing_entries = [entry for entry in entries if not entry.exists() and not entry.is_symlink()]

    def write(self, config: TrainConfig, extra_config: Mapping[str, Any] | None) -> None:
        """Create the run directory and write ``config.json`` (``config`` under ``"train"``,
        then ``extra_config``) and an empty ``metrics.csv``.

        :param config: the training settings, saved as ``config.json``'s ``"train"`` entry.
        :param extra_config: more top-level entries of ``config.json`` (e.g. a recipe's
            ``"recipe"``, ``"config"`` and ``"model_inputs"``), or ``None`` for none.
        """
        run = self.run
        run.create()
        run.remove_temporary_files()
        for stale in [*run.checkpoints.glob("*.ckpt"), *run.tensorboard.glob("events.out.tfevents.*")]:
            stale.unlink()
        run.write_config({"train": config.to_dict(), **dict(extra_config or {})})
        write_metrics_table(run.metrics_csv, [])

    def remove(self) -> None:
        """Remove what :meth:`write` and the start of training created."""
        self.run.remove_temporary_files()
        for entry in self.missing_entries:
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)
        for folder in reversed(self.missing_folders):
            try:
                folder.rmdir()
            except OSError:  # it holds what this start did not make
                break


class ResumedRunFiles(L.Callback):
    """On a resume, when training starts (Lightning has restored the weights, optimiser and
    loop states by then, so a checkpoint it cannot use has changed no file), rank 0 removes
    what a killed process left and makes ``metrics.csv`` hold the checkpoint's rows.

    :param run: the run directory.
    :param rows: the rows ``metrics.csv`` must hold (none when the run does not log to it).
    """

    def __init__(self, run: RunDirectory, rows: Sequence[Mapping[str, float]]) -> None:
        self.run = run
        self.rows = rows

    def on_train_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        """Rank 0: remove temporary files, write ``metrics.csv`` with the checkpoint's rows.

        :param trainer: the Lightning trainer; only its ``is_global_zero`` is read.
        :param module: the module being trained (unused).
        """
        if trainer.is_global_zero:
            self.run.remove_temporary_files()
            write_metrics_table(self.run.metrics_csv, self.rows)
