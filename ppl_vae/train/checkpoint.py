"""Atomic checkpoint files, weights-only loading, and clear errors for checkpoints that cannot be used.

A checkpoint holds only tensors, numbers, strings, lists, tuples and dicts (Lightning's loop
and optimiser states, the module's ``state_dict``, and ppl_vae's own state: iteration,
random states, logged history, model and objective class names, architecture), so that
``torch.load(path, weights_only=True)`` reads it without unpickling arbitrary objects.
:func:`read_checkpoint` and :func:`~ppl_vae.fit` load with ``weights_only=True`` unless
asked otherwise.

Before unpickling anything, a weights-only load checks that the file is the zip archive
``torch.save`` writes, with every entry stored uncompressed and their sizes together within the
file's own size: a compressed entry (which torch inflates into memory before checking it, so a
megabyte can claim a gigabyte) or an older torch's non-zip format (whose storages are allocated
at the sizes the pickle claims) is refused. After loading, a tensor whose elements span more
bytes than the file (a view repeating its storage's elements, which a check would materialise)
is refused too: reading a file never takes much more memory than its size.

ppl_vae's checkpoints carry a SHA-256 digest of their weights and optimiser states
(``checkpoint["ppl_vae"]["digest"]``, ``tensor_digest``): torch does not check the CRCs of
the zip file it writes, so a flipped bit would otherwise load as a changed weight.
:func:`read_checkpoint` verifies the digest and refuses weights that are NaN or infinite.

A checkpoint read for a resume is then checked against the run resuming from it
(``check_resumable``, which :func:`~ppl_vae.fit` calls): its model, objective, architecture,
iteration, history and random states, and whether its weights and optimiser states load.
"""
from __future__ import annotations

import hashlib
import os
import pickle
import random
import re
import zipfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import lightning as L
import numpy as np
import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO
from torch import nn

from ppl_vae._files import MAX_NESTING, NestingError, write_atomically
from ppl_vae._validation import shown

if TYPE_CHECKING:
    from ppl_vae.train.module import SVIModule

DIGESTED = ("state_dict", "optimizer_states")
"""The parts of a checkpoint whose tensors its digest covers."""


class CheckpointError(RuntimeError):
    """A checkpoint is unreadable, or belongs to another model or configuration."""


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning checkpoint IO that writes to a temporary file in the target folder,
    flushes it to disk, then renames it over the target: a process killed mid-write
    leaves the previous checkpoint intact, never a truncated one."""

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: str | os.PathLike, storage_options: Any = None
    ) -> None:
        """Write ``checkpoint`` to ``path`` atomically: a temporary file, fsync, rename.

        :param checkpoint: the state Lightning saves (weights, optimiser states, callbacks' states).
        :param path: the checkpoint file.
        :param storage_options: Lightning's extra options for the storage; none are used.
        """
        write_atomically(path, lambda handle: torch.save(checkpoint, handle), binary=True)


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
            trainer.save_checkpoint(self.path, weights_only=False)  # the full state (optimisers too)


def _last_line(error: Exception) -> str:
    """The last non-empty line of an error's message (torch's messages span many lines)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[-1] if lines else type(error).__name__


_UNSUPPORTED_GLOBAL = re.compile(r"Unsupported global: GLOBAL (\S+)")


def _tensors(tree: Any, where: str) -> Iterator[tuple[str, torch.Tensor]]:
    """``(path, tensor)`` for every tensor in nested dicts, lists and tuples, depth first in a
    fixed order (a dict's keys sorted as text).

    :raises NestingError: for containers nested deeper than ``MAX_NESTING`` (64).
    """
    stack = [(where, tree, 0)]
    while stack:
        place, node, depth = stack.pop()
        if isinstance(node, torch.Tensor):
            yield place, node
            continue
        if isinstance(node, dict):
            children = [(f"{place}/{key}", node[key]) for key in sorted(node, key=str)]
        elif isinstance(node, (list, tuple)):
            children = [(f"{place}/{index}", item) for index, item in enumerate(node)]
        else:
            continue
        if children and depth >= MAX_NESTING:
            raise NestingError(f"{place} nests containers deeper than {MAX_NESTING}")
        stack.extend((child_place, child, depth + 1) for child_place, child in reversed(children))


def tensor_digest(checkpoint: dict[str, Any]) -> str:
    """The SHA-256 hex digest of the tensors in the checkpoint's :data:`DIGESTED` parts: each
    tensor's place, dtype, shape and bytes."""
    digest = hashlib.sha256()
    for part in DIGESTED:
        for where, tensor in _tensors(checkpoint.get(part), part):
            data = tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8)
            digest.update(f"{where}:{tensor.dtype}:{tuple(tensor.shape)}:".encode())
            digest.update(data.numpy().tobytes())
    return digest.hexdigest()


def _check_digest(checkpoint: dict[str, Any], path: Path) -> None:
    """Refuse a checkpoint whose tensors differ from the digest saved with them (checkpoints
    of other code, without a digest, pass)."""
    state = checkpoint.get("ppl_vae")
    saved = state.get("digest") if isinstance(state, dict) else None
    if saved is not None and saved != tensor_digest(checkpoint):
        raise CheckpointError(
            f"checkpoint {path} is damaged: its weights or optimiser states differ from the digest written "
            "with them (a changed or corrupted file)"
        )


def _check_finite_weights(checkpoint: dict[str, Any], path: Path) -> None:
    """Refuse a checkpoint whose ``state_dict`` is not a mapping of names to tensors, or holds
    a NaN or infinite weight (naming the first such tensor)."""
    state_dict = checkpoint["state_dict"]
    if not isinstance(state_dict, dict):
        raise CheckpointError(f"checkpoint {path}: its state_dict must map names to tensors, got a {type(state_dict).__name__}")
    for name, tensor in state_dict.items():
        if not isinstance(tensor, torch.Tensor):
            raise CheckpointError(f"checkpoint {path}: state_dict entry {name!r} is a {type(tensor).__name__}, not a tensor")
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            raise CheckpointError(f"checkpoint {path}: weight {name!r} holds NaN or infinite values")


def _check_tensor_extents(checkpoint: dict[str, Any], path: Path, size: int) -> None:
    """Refuse a checkpoint holding a tensor that is not dense, or whose elements span more bytes
    than the whole file of ``size`` bytes (a view repeating its storage's elements,
    ``expand``-style, which the checks after it would materialise), and one nesting containers
    deeper than ``MAX_NESTING`` (64)."""
    try:
        for where, tensor in _tensors(checkpoint, ""):
            if tensor.layout != torch.strided:
                raise CheckpointError(f"checkpoint {path}: tensor {where!r} is {tensor.layout}; checkpoints hold dense tensors")
            span = tensor.numel() * tensor.element_size()
            if span > size:
                raise CheckpointError(
                    f"checkpoint {path}: tensor {where!r} {tuple(tensor.shape)} spans {span} bytes, more than the "
                    f"file's {size}: a view repeating the elements of its storage"
                )
    except NestingError as error:
        raise CheckpointError(f"checkpoint {path}: {error}") from error


def _check_archive(path: Path, size: int) -> None:
    """Refuse a file that is not a zip archive of uncompressed entries whose sizes sum to at
    most the file's ``size`` in bytes (what ``torch.save`` writes): the bound that keeps a
    weights-only load from allocating more than the file holds."""
    try:
        with zipfile.ZipFile(path) as archive:
            entries = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError) as error:
        raise CheckpointError(
            f"checkpoint {path} is not a zip archive as torch.save writes it ({_last_line(error)}): a corrupt file, "
            "another kind of file, or an older torch's format, which only weights_only=False reads (if you trust it)"
        ) from error
    compressed = next((entry.filename for entry in entries if entry.compress_type != zipfile.ZIP_STORED), None)
    if compressed is not None:
        raise CheckpointError(
            f"checkpoint {path}: entry {compressed!r} is compressed; torch.save stores entries uncompressed, and "
            "a compressed one could inflate far beyond the file's size"
        )
    claimed = sum(entry.file_size for entry in entries)
    if claimed > size:
        raise CheckpointError(f"checkpoint {path}: its entries claim {claimed} bytes, more than the file's {size}")


def read_checkpoint(path: str | os.PathLike, weights_only: bool = True) -> dict[str, Any]:
    """Load a checkpoint dict on the CPU, turning unreadable files into :class:`CheckpointError`.

    :param path: the checkpoint file.
    :param weights_only: load with ``torch.load(weights_only=True)``: tensors and plain data
        only, never code. ``False`` is for trusted files written by other code or by an
        older ppl_vae (which pickled numpy arrays): unpickling such a file can run any code
        it holds.
    :raises CheckpointError: for a missing, corrupt or foreign file; (weights-only) one that is
        not an archive of uncompressed entries within its own size; one holding a tensor that is
        not dense or spans more bytes than the file, or containers nested deeper than 64 levels;
        one whose tensors differ from its digest; one with a NaN or infinite weight (naming it);
        and one holding objects a weights-only load refuses (naming the first such object).
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist")
    size = path.stat().st_size
    if weights_only:
        _check_archive(path, size)
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=weights_only)
    except pickle.UnpicklingError as error:
        refused = _UNSUPPORTED_GLOBAL.search(str(error))
        if weights_only and refused:
            raise CheckpointError(
                f"checkpoint {path} holds objects that a weights-only load refuses ({refused.group(1)}): "
                "it was written by an older ppl_vae or by other code; only if you trust the file, load it "
                "with weights_only=False (read_checkpoint, fit), which can run code stored in it"
            ) from error
        raise CheckpointError(f"checkpoint {path} is corrupt or not a checkpoint: {_last_line(error)}") from error
    except Exception as error:  # torch raises many types for a corrupt file
        raise CheckpointError(f"checkpoint {path} is corrupt or not a checkpoint: {_last_line(error)}") from error
    if not isinstance(checkpoint, dict) or "state_dict" not in checkpoint:
        raise CheckpointError(f"checkpoint {path} is not a ppl_vae/Lightning checkpoint")
    _check_tensor_extents(checkpoint, path, size)
    _check_finite_weights(checkpoint, path)
    _check_digest(checkpoint, path)
    return checkpoint


def random_states() -> dict[str, Any]:
    """The random states, as tensors and plain data (a weights-only checkpoint holds them)."""
    numpy_state = np.random.get_state(legacy=False)
    key = torch.from_numpy(numpy_state["state"]["key"].astype(np.int64))
    state = {
        "torch": torch.get_rng_state(),
        "numpy": {**numpy_state, "state": {**numpy_state["state"], "key": key}},
        "python": random.getstate(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _numpy_state(saved: Any) -> Any:
    """numpy's state as :func:`random_states` saved it (the key a tensor), or in the tuple form
    of older checkpoints, in the form ``numpy.random.set_state`` takes."""
    if isinstance(saved, dict):
        key = saved["state"]["key"].numpy().astype(np.uint32)
        return {**saved, "state": {**saved["state"], "key": key}}
    return saved


def set_random_states(state: dict[str, Any]) -> None:
    """Restore :func:`random_states`'s states (numpy's also in the tuple form of older checkpoints)."""
    torch.set_rng_state(state["torch"])
    np.random.set_state(_numpy_state(state["numpy"]))
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _check_restorable(state: Any) -> None:
    """Raise what :func:`set_random_states` would raise for ``state``, by setting it into new
    generators of torch, numpy and Python (never the process's own)."""
    torch.Generator().set_state(state["torch"])
    np.random.RandomState().set_state(_numpy_state(state["numpy"]))
    random.Random().setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        for index, cuda_state in enumerate(state["cuda"]):
            torch.Generator(device=f"cuda:{index}").set_state(cuda_state)


def architecture(module: nn.Module) -> dict[str, list[int]]:
    """Parameter and buffer names with their shapes: what a checkpoint must match."""
    return {name: list(t.shape) for name, t in module.state_dict().items()}


def check_resumable(checkpoint: Mapping[str, Any], checkpoint_path: Path, module: SVIModule) -> None:
    """Refuse a checkpoint that another model, objective or configuration wrote, or that this
    run cannot continue from; then restore its weights and optimiser states into ``module``
    and check its random states and history, so that a resume fails here, before any file of
    the run is touched, rather than in Lightning after ``metrics.csv`` was rewritten.

    :param checkpoint: what :func:`read_checkpoint` read from ``checkpoint_path``.
    :param checkpoint_path: the file, for the messages.
    :param module: the training module of the run resuming.
    :raises CheckpointError: naming the checkpoint and what is wrong with it.
    """
    state = checkpoint.get("ppl_vae")
    if not isinstance(state, dict):
        raise CheckpointError(f"checkpoint {checkpoint_path} was not written by ppl_vae")
    expected = (type(module.model).__qualname__, type(module.objective).__qualname__)
    found = (state.get("model_class"), state.get("objective_class"))
    if found != expected:
        raise CheckpointError(
            f"checkpoint {checkpoint_path} holds a {found[0]} trained with {found[1]}, "
            f"not a {expected[0]} with {expected[1]}"
        )
    if state.get("architecture") != architecture(module):
        saved, current = state.get("architecture"), architecture(module)
        saved = saved if isinstance(saved, dict) else {}
        differing = sorted(k for k in set(saved) | set(current) if saved.get(k) != current.get(k))
        raise CheckpointError(
            f"checkpoint {checkpoint_path} was written by a model of another configuration: "
            f"parameters that differ: {differing[:6]}"
        )
    iteration = state.get("iteration")
    if isinstance(iteration, bool) or not isinstance(iteration, int) or not 0 <= iteration <= module.batches.num_batches:
        raise CheckpointError(
            f"checkpoint {checkpoint_path} holds iteration {shown(iteration)}, not one of the "
            f"{module.batches.num_batches} steps of this run: resume with the run's own steps"
        )
    if not isinstance(checkpoint.get("pytorch-lightning_version"), str) or not isinstance(checkpoint.get("loops", {}), dict):
        raise CheckpointError(f"checkpoint {checkpoint_path} lacks Lightning's version or loop states: not a training checkpoint")
    _check_history(state.get("history"), checkpoint_path)
    _check_random_states(state.get("rng"), checkpoint_path)
    _restore_weights_and_optimisers(checkpoint, checkpoint_path, module)
    try:
        module.on_load_checkpoint(checkpoint)
    except Exception as error:  # a plateau state or iteration of the wrong form fails in many ways
        raise CheckpointError(
            f"checkpoint {checkpoint_path}: its ppl_vae state cannot be restored ({type(error).__name__}: "
            f"{shown(str(error), 200)})"
        ) from None


def _check_history(history: Any, checkpoint_path: Path) -> None:
    """Refuse a logged history that is not a list of rows ``{"step": int, term: number}`` with increasing steps."""
    if not isinstance(history, list):
        raise CheckpointError(f"checkpoint {checkpoint_path}: its history must be a list of logged rows, got {shown(history)}")
    previous = -1
    for number, row in enumerate(history):
        step = row.get("step") if isinstance(row, dict) else None
        values_are_numbers = isinstance(row, dict) and all(
            isinstance(value, (int, float)) and not isinstance(value, bool) for value in row.values()
        )
        if isinstance(step, bool) or not isinstance(step, int) or step <= previous or not values_are_numbers:
            raise CheckpointError(
                f"checkpoint {checkpoint_path}: history row {number} must map 'step' (an integer above the "
                f"previous row's) and terms to numbers, got {shown(row)}"
            )
        previous = step


def _check_random_states(states: Any, checkpoint_path: Path) -> None:
    """Refuse random states (one, or one per process) that torch, numpy or Python cannot take."""
    try:
        for state in states if isinstance(states, list) else [states]:
            _check_restorable(state)
    except Exception as error:  # a state of the wrong type or size fails in torch, numpy or random
        raise CheckpointError(
            f"checkpoint {checkpoint_path}: its random states cannot be restored ({type(error).__name__}: "
            f"{shown(str(error), 200)})"
        ) from None


def _restore_weights_and_optimisers(checkpoint: Mapping[str, Any], checkpoint_path: Path, module: SVIModule) -> None:
    """Load the checkpoint's weights and optimiser states into ``module`` and its optimisers
    (Lightning loads the same ones again when training starts), and check that the plateau
    schedules it needs have states."""
    try:
        module.load_state_dict(checkpoint["state_dict"])
    except (RuntimeError, TypeError, KeyError) as error:
        raise CheckpointError(f"checkpoint {checkpoint_path} does not fit the model: {shown(str(error), 300)}") from None
    optimizers = list(module.training_iteration.optimizers)
    states = checkpoint.get("optimizer_states")
    if not isinstance(states, list) or len(states) != len(optimizers):
        raise CheckpointError(
            f"checkpoint {checkpoint_path} must hold the states of {len(optimizers)} optimiser(s), got "
            f"{shown(states) if states is not None else 'none'}: it was not written by a training run"
        )
    for index, (optimizer, optimizer_state) in enumerate(zip(optimizers, states, strict=True)):
        try:
            optimizer.load_state_dict(optimizer_state)
        except Exception as error:  # torch raises KeyError, ValueError, TypeError for foreign states
            raise CheckpointError(
                f"checkpoint {checkpoint_path}: the state of optimiser {index} does not fit it "
                f"({type(error).__name__}: {shown(str(error), 200)})"
            ) from None
    if module.plateau.names and not isinstance(checkpoint.get("lr_schedulers"), list):
        raise CheckpointError(f"checkpoint {checkpoint_path} lacks the states of the lr_plateau schedules")
