"""``fit``: one training path for every model/objective pair, on CPU or GPU."""
from __future__ import annotations

import dataclasses
import importlib.util
import logging
import os
import shutil
import sys
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from math import ceil
from pathlib import Path
from typing import Any, TextIO

import lightning as L
import pyro
import torch
from lightning.pytorch.callbacks import ProgressBar, TQDMProgressBar
from lightning.pytorch.loggers import Logger, TensorBoardLogger
from lightning.pytorch.utilities import disable_possible_user_warnings
from pyro import poutine
from torch import nn

from ppl_vae._devices import available_device
from ppl_vae._validation import boolean, did_you_mean, shown, threads_from_environment
from ppl_vae.infer.observations import check_observations_in_support
from ppl_vae.train.batches import BatchBlocks, TensorBatches, as_groups
from ppl_vae.train.checkpoint import AtomicCheckpointIO, CheckpointError, IterationCheckpoint, read_checkpoint
from ppl_vae.train.config import TrainConfig
from ppl_vae.train.distributed import SetupAgreement, launch_rank, launched_by_a_launcher, training_strategy
from ppl_vae.train.metrics import CSVMetricsLogger, write_metrics_table
from ppl_vae.train.module import SVIModule, architecture, random_states, set_random_states
from ppl_vae.train.run_dir import RunDirectory

_LIGHTNING_LOG = logging.getLogger("lightning.pytorch.utilities.rank_zero")


@dataclass
class FitResult:
    """What :func:`fit` returns.

    :param model: the trained model (on the CPU).
    :param history: per-term means, one dict per logging interval (with ``"step"``).
    :param steps: training iterations completed.
    :param run_dir: the run directory, when one was written.
    :param global_rank: this process's rank under data parallelism (0 on one process):
        every process returns, only rank 0 should evaluate and write results.
    :param already_finished: ``resume=True`` found the run finished (its checkpoint holds
        ``steps`` iterations): the model was loaded from the checkpoint, and nothing was
        trained or written.
    """

    model: nn.Module
    history: list[dict[str, float]]
    steps: int
    run_dir: RunDirectory | None = None
    global_rank: int = 0
    already_finished: bool = False


_LIGHTNING_ACCELERATORS = {"cpu": "cpu", "cuda": "gpu", "mps": "mps"}


def _lightning_devices(config: TrainConfig) -> tuple[str, int | list[int]]:
    """Lightning's ``accelerator`` and ``devices`` for ``config.device``, checked once to be on
    this machine (:func:`~ppl_vae._devices.available_device`) before anything is built or
    written: ``"cuda:1"`` is Lightning's ``devices=[1]``; ``"cuda"`` and ``"auto"`` take
    ``config.devices`` devices.

    :raises ValueError: naming the device when it is not there, is not one Lightning trains on,
        or has an index while ``config.devices`` asks for more than one.
    """
    device = available_device(config.device)
    if device.type not in _LIGHTNING_ACCELERATORS:
        raise ValueError(f"device={config.device!r}: fit trains on 'cpu', 'cuda', 'cuda:N', 'mps' or 'auto'")
    if device.index is None or config.device == "auto":
        return _LIGHTNING_ACCELERATORS[device.type], config.devices
    if config.devices > 1:
        raise ValueError(
            f"device={config.device!r} names one device but devices={config.devices}: use device='cuda' "
            "with devices=N (and CUDA_VISIBLE_DEVICES to pick them)"
        )
    return _LIGHTNING_ACCELERATORS[device.type], [device.index]


def cpu_has_amx_bf16() -> bool:
    """Whether the CPU multiplies bfloat16 matrices in hardware (Intel AMX: the ``amx_bf16``
    flag of ``/proc/cpuinfo``; ``False`` where that file does not exist)."""
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return "amx_bf16" in cpuinfo.split()


def _warn_if_bf16_is_slow(config: TrainConfig, accelerator: str) -> None:
    """bf16-mixed pays on GPUs that support it and on CPUs with AMX; on other CPUs (AVX512-BF16
    included: measured 0.74-0.92x of float32's speed) and GPUs without bfloat16 it is slower
    than float32."""
    if config.precision != "bf16-mixed":
        return
    on_gpu = accelerator == "gpu"
    supported = torch.cuda.is_bf16_supported() if on_gpu else cpu_has_amx_bf16()
    if not supported:
        where = "GPU without bfloat16 support" if on_gpu else "CPU without AMX"
        warnings.warn(
            f"precision='bf16-mixed' on a {where}: bfloat16 matrix products are emulated or slower "
            "there, usually slower than precision='32-true'",
            stacklevel=3,
        )


#: How often the training bar is redrawn, in all, where each redraw is a new line or message.
_REDRAWS_OFF_A_TERMINAL = 20


def _training_progress_bar(training_steps: int, stream: TextIO | None = None) -> TQDMProgressBar:
    """Lightning's tqdm bar over ``training_steps`` Lightning training steps, written to
    ``stream`` (stdout by default, as Lightning does).

    On a terminal it is redrawn at every step, in place. Elsewhere each redraw is a new line
    (a log file) or a new stream message (Jupyter, where a 1,000-step run would otherwise
    store thousands of them in the notebook): there it is redrawn about 20 times in all.
    With ipywidgets installed, Lightning draws tqdm's notebook widget in Jupyter
    (``tqdm.auto``), updated in place.
    """
    stream = sys.stdout if stream is None else stream
    on_terminal = bool(getattr(stream, "isatty", None) and stream.isatty())
    refresh_rate = 1 if on_terminal else max(1, training_steps // _REDRAWS_OFF_A_TERMINAL)
    return TQDMProgressBar(refresh_rate=refresh_rate)


def _with_progress_bar(callbacks: list[L.Callback], config: TrainConfig) -> list[L.Callback]:
    """``callbacks`` and, when ``config.progress_bar`` is on and none of them is a progress
    bar, a bar whose redraws suit where it is written."""
    if not config.progress_bar or any(isinstance(callback, ProgressBar) for callback in callbacks):
        return callbacks
    training_steps = ceil(config.steps / config.iterations_per_training_step)
    return [*callbacks, _training_progress_bar(training_steps)]


@contextmanager
def _quiet_lightning() -> Iterator[None]:
    """Lightning's own switches for its chatter during :func:`fit`: its rank-zero log (devices,
    advertisements, "`Trainer.fit` stopped") raised to WARNING, its ``PossibleUserWarning`` s
    turned off (advice that does not apply: the engine indexes tensors on the device, without
    DataLoader workers), and the deprecation that its pytree helper triggers in torch ignored
    by category and module. Everything is restored afterwards."""
    level = _LIGHTNING_LOG.level
    _LIGHTNING_LOG.setLevel(logging.WARNING)
    try:
        with warnings.catch_warnings():
            disable_possible_user_warnings()
            warnings.filterwarnings("ignore", category=FutureWarning, module=r"lightning\.pytorch\.utilities\._pytree")
            yield
    finally:
        _LIGHTNING_LOG.setLevel(level)


def _check_resumable(checkpoint: Mapping[str, Any], checkpoint_path: Path, module: SVIModule) -> None:
    """Refuse a checkpoint that another model, objective or configuration wrote, or that this
    run cannot continue from; then restore its weights and optimiser states into ``module``
    and check its random states and history, so that a resume fails here, before any file of
    the run is touched, rather than in Lightning after ``metrics.csv`` was rewritten.

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
    """Refuse random states (one, or one per process) that torch, numpy or Python cannot take:
    each is set, then this process's own state is put back."""
    own = random_states()
    try:
        for state in states if isinstance(states, list) else [states]:
            set_random_states(state)
    except Exception as error:  # a state of the wrong type or size fails in torch, numpy or random
        raise CheckpointError(
            f"checkpoint {checkpoint_path}: its random states cannot be restored ({type(error).__name__}: "
            f"{shown(str(error), 200)})"
        ) from None
    finally:
        set_random_states(own)


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


def _configured(config: TrainConfig | None, overrides: Mapping[str, Any]) -> TrainConfig:
    config = TrainConfig() if config is None else config
    if not isinstance(config, TrainConfig):
        raise TypeError(f"config must be a TrainConfig or None, got {type(config).__name__}")
    if overrides:
        settings = [field.name for field in dataclasses.fields(TrainConfig)]
        unknown = sorted(set(overrides) - set(settings))
        if unknown:
            raise TypeError(f"unknown training setting {shown(unknown[0])}{did_you_mean(unknown[0], settings)}")
        config = TrainConfig(**{**config.to_dict(), **overrides})
    if "tensorboard" in config.loggers and not any(
        importlib.util.find_spec(name) for name in ("tensorboard", "tensorboardX")
    ):
        raise ValueError(
            "loggers includes 'tensorboard' but the tensorboard package is not installed: "
            "pip install 'ppl_vae[tensorboard]'"
        )
    return config


@dataclass
class _Setup:
    """What :func:`fit` prepared on this process before training: the training module, the run
    directory and the checkpoint resumed from (``None`` for a new run)."""

    module: L.LightningModule
    run: RunDirectory | None = None
    checkpoint: dict[str, Any] | None = None

    @property
    def resumed_iteration(self) -> int | None:
        return None if self.checkpoint is None else int(self.checkpoint["ppl_vae"]["iteration"])


class _SetupFailed(L.LightningModule):
    """Stands in for the training module on a process whose setup failed, so that it meets the
    other processes in :class:`~ppl_vae.train.distributed.SetupAgreement`, which raises first."""

    def training_step(self, *args: Any) -> None:
        raise RuntimeError("a process whose setup failed cannot train")

    def configure_optimizers(self) -> None:
        return None


def _check_first_batch(module: SVIModule) -> None:
    """Trace the guide and the model once on the first ELBO batch, in a parameter store of their
    own, and refuse before training what training could not use: observations outside the
    support of their likelihood (:func:`~ppl_vae.infer.observations.check_observations_in_support`)
    and ``pyro.param`` sites whose tensors are not parameters of the model (or of the
    objective's auxiliary steps), which the torch optimisers would never update.

    :raises ValueError: naming the site and the data's range, or the ``pyro.param`` names.
    """
    batches, model = module.batches, module.model
    if batches.num_batches == 0:
        return
    start = batches.start
    first = next(iter(batches))
    batches.seek(start)
    inputs = {key: value for name in module.elbo_groups for key, value in first[name].items()}
    store = pyro.get_param_store()
    with store.scope(), torch.random.fork_rng(devices=[]), torch.no_grad(), pyro.validation_enabled(False):
        guide_trace = poutine.trace(model.guide).get_trace(**inputs)
        model_trace = poutine.trace(poutine.replay(model.model, trace=guide_trace)).get_trace(**inputs)
        trained = {id(parameter) for parameter in module.parameters()}
        untrained = sorted(name for name, value in store.named_parameters() if id(value) not in trained)
    if untrained:
        raise ValueError(
            f"the model or guide creates pyro.param sites {untrained} that fit would not train (its optimisers "
            "own model.parameters()): make them attributes of the module (nn.Parameter, or pyro.nn.PyroParam "
            "for a constrained one)"
        )
    check_observations_in_support(model_trace)


def _set_up(
    model: nn.Module,
    objective: Any,
    data: Mapping[str, Any],
    config: TrainConfig,
    run_dir: str | os.PathLike | None,
    resume: bool,
    overwrite: bool,
    extra_config: Mapping[str, Any] | None,
    weights_only: bool,
    rank: int,
    elbo_arguments: Mapping[str, Any] | None = None,
) -> _Setup:
    """Check the inputs, build the training module, read the checkpoint resumed from, and (on
    rank 0) prepare the run directory; raises on the first problem."""
    for name in ("model", "guide"):
        if not callable(getattr(model, name, None)):
            raise TypeError(f"model must have a callable {name}() method; got {type(model).__name__}")
    if not hasattr(objective, "differentiable_loss"):
        raise TypeError(f"objective must be a Pyro ELBO, got {type(objective).__name__}")
    if resume and run_dir is None:
        raise ValueError("resume=True needs the run_dir to resume from")
    batches = TensorBatches(
        as_groups(data), config.batch_size, config.steps, seed=config.seed, batch_sizes=config.batch_sizes,
        binarize=config.binarize,
    )
    module = SVIModule(model, objective, config, batches, elbo_arguments)
    _check_first_batch(module)
    if run_dir is None:
        return _Setup(module)
    run = RunDirectory(run_dir, overwrite=overwrite or rank > 0, resume=resume, create=False)
    checkpoint = None
    if resume:
        checkpoint = read_checkpoint(run.last_checkpoint, weights_only=weights_only)
        _check_resumable(checkpoint, run.last_checkpoint, module)
    return _Setup(module, run, checkpoint)


class _NewRunFiles:
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
        run = self.run
        run.create()
        run.remove_temporary_files()
        for stale in [*run.checkpoints.glob("*.ckpt"), *run.tensorboard.glob("events.out.tfevents.*")]:
            stale.unlink()
        run.write_config({"train": config.to_dict(), **dict(extra_config or {})})
        write_metrics_table(run.metrics_csv, [])

    def remove(self) -> None:
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


class _ResumedRunFiles(L.Callback):
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
        if trainer.is_global_zero:
            self.run.remove_temporary_files()
            write_metrics_table(self.run.metrics_csv, self.rows)


def _loggers(config: TrainConfig, setup: _Setup) -> list[Logger]:
    """The run's loggers (on every process; they write on rank 0 only). TensorBoard hides the
    events a killed run logged after the checkpoint resumed from (``purge_step``)."""
    if setup.run is None:
        return []
    loggers: list[Logger] = []
    history = setup.checkpoint["ppl_vae"]["history"] if setup.checkpoint is not None else []
    if "csv" in config.loggers:
        loggers.append(CSVMetricsLogger(setup.run.metrics_csv, history))
    if "tensorboard" in config.loggers:
        resumed = setup.resumed_iteration
        purge = {"purge_step": resumed + 1} if resumed is not None else {}
        loggers.append(
            TensorBoardLogger(setup.run.path, name=setup.run.tensorboard.name, version="", default_hp_metric=False, **purge)
        )
    return loggers


def _finished(setup: _Setup, model: nn.Module, rank: int) -> FitResult:
    """The result of resuming a finished run: the checkpoint's model and history, nothing written."""
    module = setup.module
    module.load_state_dict(setup.checkpoint["state_dict"])
    module.on_load_checkpoint(setup.checkpoint)
    model.cpu()
    return FitResult(
        model=model, history=module.history, steps=module.iteration, run_dir=setup.run, global_rank=rank,
        already_finished=True,
    )


def fit(
    model: nn.Module,
    objective: Any,
    data: Mapping[str, torch.Tensor | Mapping[str, torch.Tensor]],
    config: TrainConfig | None = None,
    run_dir: str | os.PathLike | None = None,
    resume: bool = False,
    overwrite: bool = False,
    extra_config: Mapping[str, Any] | None = None,
    callbacks: Sequence[L.Callback] = (),
    weights_only: bool = True,
    elbo_arguments: Mapping[str, Any] | None = None,
    **overrides: Any,
) -> FitResult:
    """Train ``model`` on ``objective`` by SVI with Lightning.

    :param model: a module with ``model(**batch)`` and ``guide(**batch)`` methods
        (every model in :mod:`ppl_vae.models`).
    :param objective: a Pyro ELBO (``TraceMeanField_ELBO()``, or one of
        :mod:`ppl_vae.infer`'s objectives, which may declare auxiliary steps).
    :param data: named training tensors: ``{"x": X}``; unpaired groups such as
        ``{"target": T, "background": B}``; or groups of aligned tensors such as
        ``{"x": X, "labelled": {"x": XL, "y": YL}}``. Each group's tensors are batched
        together and passed to the model by key.
    :param config: :class:`TrainConfig`; keyword ``overrides`` replace its fields.
    :param run_dir: where config, checkpoints and metrics go; ``None`` trains in memory. The
        device and every setting are checked before anything is written there, and a new run
        that fails before its first iteration (Lightning refusing a strategy, a device that
        fails as training starts) removes what it created, leaving the folder as it found it
        for a retry.
    :param resume: continue the run in ``run_dir`` from ``checkpoints/last.ckpt`` with its
        optimiser state, step count, batch order and random state. ``metrics.csv`` is made to
        hold the checkpoint's rows (rows logged after it by a killed run are dropped, and
        logged again as training repeats those iterations). A finished run is left as it is:
        its trained model is returned with ``already_finished=True``.
    :param overwrite: allow ``run_dir`` to hold an earlier run.
    :param extra_config: more settings to save in ``config.json`` (model, data).
    :param callbacks: extra Lightning callbacks.
    :param weights_only: load the checkpoint resumed from with
        ``torch.load(weights_only=True)`` (tensors and plain data, never code). ``False``
        resumes from a trusted checkpoint of an older ppl_vae, which pickled numpy arrays;
        unpickling can run any code the file holds.
    :param elbo_arguments: keyword arguments of the objective on every ELBO step besides the
        batch, e.g. ``{"aggregate_data": {"x": X}}``: the whole data set whose encodings form
        q(z) in :class:`~ppl_vae.infer.decomposition.AggregateDivergence`'s inclusive KL. Their tensors
        are moved to the training device once.
    :param overrides: fields of :class:`TrainConfig` to replace (``lr=1e-3``, ``batch_size=256``),
        applied to ``config`` or to the defaults; an unknown name raises a ``TypeError`` that
        suggests the close ones (``learning_rate`` -> ``'lr'``).

    ``$PPL_VAE_NUM_THREADS``, when set, is the number of torch CPU threads (``torch.set_num_threads``)
    fit trains with, as for ``ppl-vae``; 1 where other processes share the CPU.

    Data parallelism: ``devices``/``num_nodes`` > 1 with ``strategy="ddp"`` (see
    :func:`~ppl_vae.train.distributed.training_strategy`) trains one process per device,
    each on its own rows of every global batch of ``devices * num_nodes * batch_size``
    rows. Lightning re-launches the calling script for the other processes, or a launcher
    (torchrun, srun) starts them all; each runs ``fit``. Only rank 0 prepares ``run_dir``
    and writes checkpoints; the ``global_rank`` of the :class:`FitResult` tells the others apart. When the
    setup of one process fails (a run directory that exists, data it cannot use), every
    process raises that error as soon as they all have started
    (:class:`~ppl_vae.train.distributed.SetupAgreement`).

    The torch optimisers own ``model.parameters()`` (and the parameters of the
    objective's auxiliary steps); Pyro's parameter store is never read for training, so
    stale entries from an earlier notebook run cannot leak into this one, and
    ``pyro.settings`` (e.g. ``module_local_params``) are left as the user set them.
    Models keep their networks and priors as plain ``nn.Module`` s for that reason.

    Before training, the guide and the model are traced once on the first batch: a
    ``pyro.param`` site whose tensor is not one of those parameters (it would stay at its
    initial value) and observations outside the support of their likelihood (grey levels
    under a Bernoulli likelihood) raise a ``ValueError`` naming them.
    """
    for name, flag in (("resume", resume), ("overwrite", overwrite), ("weights_only", weights_only)):
        boolean(name, flag)
    config = _configured(config, overrides)
    accelerator, devices = _lightning_devices(config)
    threads = threads_from_environment()
    if threads is not None:
        torch.set_num_threads(threads)
    _warn_if_bf16_is_slow(config, accelerator)
    L.seed_everything(config.seed, workers=False, verbose=False)
    num_processes = config.devices * config.num_nodes
    rank = launch_rank(config.devices)
    failure = None
    try:
        setup = _set_up(
            model, objective, data, config, run_dir, resume, overwrite, extra_config, weights_only, rank, elbo_arguments
        )
    except Exception as error:
        if num_processes == 1 or not launched_by_a_launcher():
            raise
        setup, failure = _Setup(_SetupFailed()), error
    if setup.resumed_iteration == config.steps:
        return _finished(setup, model, rank)

    callbacks = list(callbacks)
    if num_processes > 1:
        callbacks.insert(0, SetupAgreement(failure))
    if setup.run is not None:
        callbacks.append(IterationCheckpoint(setup.run.last_checkpoint))
    if setup.checkpoint is not None:
        rows = setup.checkpoint["ppl_vae"]["history"] if "csv" in config.loggers else []
        callbacks.append(_ResumedRunFiles(setup.run, rows))
    callbacks = _with_progress_bar(callbacks, config)
    with _quiet_lightning():
        trainer = L.Trainer(
            accelerator=accelerator,
            devices=devices,
            num_nodes=config.num_nodes,
            strategy=training_strategy(config.strategy, num_processes),
            max_epochs=1,
            max_steps=-1,
            precision=config.precision,
            logger=_loggers(config, setup) or False,
            callbacks=callbacks,
            enable_checkpointing=False,
            plugins=[AtomicCheckpointIO()],
            enable_progress_bar=config.progress_bar,
            enable_model_summary=False,
            num_sanity_val_steps=0,
            use_distributed_sampler=False,
            default_root_dir=str(setup.run.path) if setup.run is not None else None,
            log_every_n_steps=min(config.log_every_n_steps, config.steps),
        )
    module = setup.module
    new_run = _NewRunFiles(setup.run) if setup.run is not None and setup.checkpoint is None and rank == 0 else None
    if new_run is not None:
        new_run.write(config, extra_config)
    elif setup.run is not None and rank == 0:
        setup.run.create()
    with pyro.validation_enabled(config.validate):
        try:
            with _quiet_lightning():
                trainer.fit(
                    module,
                    train_dataloaders=BatchBlocks(module.batches, config.iterations_per_training_step) if failure is None else [],
                    ckpt_path=str(setup.run.last_checkpoint) if setup.checkpoint is not None else None,
                    weights_only=weights_only,
                )
        except BaseException:
            if new_run is not None and module.iteration == 0:
                new_run.remove()
            raise
        if setup.run is not None:
            trainer.save_checkpoint(setup.run.last_checkpoint, weights_only=False)
    model.cpu()
    return FitResult(
        model=model, history=module.history, steps=module.iteration, run_dir=setup.run, global_rank=trainer.global_rank
    )
