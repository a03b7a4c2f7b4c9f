"""Atomic checkpoint files and clear errors for checkpoints that cannot be used."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO


class CheckpointError(RuntimeError):
    """A checkpoint is unreadable, or belongs to another model or configuration."""


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning checkpoint IO that writes to a temporary file in the target folder,
    flushes it to disk, then renames it over the target: a process killed mid-write
    leaves the previous checkpoint intact, never a truncated one."""

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: str | os.PathLike, storage_options: Any = None
    ) -> None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as handle:
                torch.save(checkpoint, handle)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


class IterationCheckpoint(L.Callback):
    """Writes the checkpoint ``path`` after every Lightning training step at whose end the
    training module says one is due (``module.checkpoint_due``: the step's iterations
    crossed a multiple of ``checkpoint_every_n_steps``, and its values were checked).

    It counts training iterations, not optimiser steps, so it needs no conversion for
    objectives with auxiliary steps nor for several iterations per training step. Every
    process calls :meth:`~lightning.pytorch.Trainer.save_checkpoint` (which writes on rank 0
    only), as data parallelism needs.
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)

    def on_train_batch_end(self, trainer: L.Trainer, module: L.LightningModule, *args: Any) -> None:
        if module.checkpoint_due:
            trainer.save_checkpoint(self.path)


def read_checkpoint(path: str | os.PathLike) -> dict[str, Any]:
    """Load a checkpoint dict on the CPU, turning unreadable files into :class:`CheckpointError`."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist")
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as error:  # torch raises many types for a corrupt file
        raise CheckpointError(f"checkpoint {path} is corrupt or not a checkpoint: {error}") from error
    if not isinstance(checkpoint, dict) or "state_dict" not in checkpoint:
        raise CheckpointError(f"checkpoint {path} is not a ppl_vae/Lightning checkpoint")
    return checkpoint
