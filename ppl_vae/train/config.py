"""Training settings, saved as JSON with every run."""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ppl_vae._devices import device_setting
from ppl_vae._validation import adam_betas, boolean, finite, integer, positive_integer, shown

PRECISIONS = ("32-true", "bf16-mixed")
LOGGERS = ("csv", "tensorboard")
THRESHOLD_MODES = ("rel", "abs")


@dataclass
class LRPlateau:
    """Halve (or scale by ``factor``) one optimiser's learning rate when its step's loss stops
    falling: ``torch.optim.lr_scheduler.ReduceLROnPlateau`` in mode ``"min"``, fed the mean of
    that step's loss (``"elbo_loss"``, ``"classifier_loss"``, ...) over each window of
    ``every_n_steps`` training iterations, at the end of the window. The defaults of the other
    fields are torch's.

    :param every_n_steps: iterations per window; ``None``: one pass over the ELBO step's data
        (an epoch; under data parallelism, of the global batches), as the PartedVAE authors step
        their schedulers after every epoch with the epoch's mean loss.
    :param factor: the learning rate is multiplied by this, in (0, 1), on a plateau.
    :param patience: windows without improvement tolerated before the rate is reduced.
    :param threshold: how much lower than the best so far a mean must be to count as an
        improvement, relative (``threshold_mode="rel"``: below ``best * (1 - threshold)``) or
        absolute (``"abs"``: below ``best - threshold``).
    :param threshold_mode: ``"rel"`` or ``"abs"``.
    :param cooldown: windows after a reduction during which plateaus are not counted.
    :param min_lr: the rate is never reduced below this.
    :param eps: a reduction smaller than this is skipped.
    """

    every_n_steps: int | None = None
    factor: float = 0.1
    patience: int = 10
    threshold: float = 1e-4
    threshold_mode: str = "rel"
    cooldown: int = 0
    min_lr: float = 0.0
    eps: float = 1e-8

    def __post_init__(self) -> None:
        if self.every_n_steps is not None:
            self.every_n_steps = positive_integer("every_n_steps", self.every_n_steps)
        self.factor = finite("factor", self.factor)
        if not 0 < self.factor < 1:
            raise ValueError(f"factor must be in (0, 1), got {shown(self.factor)}")
        self.patience = integer("patience", self.patience, minimum=0)
        self.threshold = finite("threshold", self.threshold, low=0.0)
        if self.threshold_mode not in THRESHOLD_MODES:
            raise ValueError(f"threshold_mode must be one of {THRESHOLD_MODES}, got {shown(self.threshold_mode)}")
        self.cooldown = integer("cooldown", self.cooldown, minimum=0)
        self.min_lr = finite("min_lr", self.min_lr, low=0.0)
        self.eps = finite("eps", self.eps, low=0.0)

    def scheduler_arguments(self) -> dict[str, Any]:
        """The keyword arguments of ``ReduceLROnPlateau`` (all but the optimiser)."""
        arguments = dataclasses.asdict(self)
        del arguments["every_n_steps"]
        return {"mode": "min", **arguments}


@dataclass
class TrainConfig:
    """How :func:`ppl_vae.fit` trains a model/objective pair.

    :param steps: training iterations (one ELBO step plus any auxiliary steps each).
    :param batch_size: minibatch size of every data group (``batch_sizes`` overrides).
    :param lr: Adam learning rate of the ELBO step (auxiliary steps may set their own).
    :param betas: Adam betas.
    :param amsgrad: every optimiser of the run is Adam's AMSGrad variant (Reddi et al. 2018;
        what the Decomposition VAE authors train with).
    :param lr_plateau: learning-rate schedules on a plateau of a step's loss, by step name:
        ``"elbo"`` for the ELBO step, an auxiliary step's name (``"classifier"``,
        ``"discriminator"``) for its optimiser, each an :class:`LRPlateau` (or a mapping of its
        fields); a step not named keeps its rate. Empty: no schedule. Each scheduled rate is
        logged with the losses as ``lr/NAME``.
    :param seed: seeds torch, numpy, Python and the batch order.
    :param device: where to train: what ``torch.device`` takes (``"cpu"``, ``"cuda"``,
        ``"cuda:1"``, ``"mps"``, a ``torch.device``, saved as its text) or ``"auto"`` (CUDA when
        torch sees it, else the CPU). :func:`~ppl_vae.fit` checks that it is on the machine
        before it builds or writes anything.
    :param devices: number of devices (processes under data parallelism); a device with an
        index (``"cuda:1"``) is one device.
    :param num_nodes: number of machines.
    :param strategy: Lightning strategy: ``"auto"``, ``"ddp"``, ...
    :param data_on_device: the GPU data path: move the training tensors to the device
        once and index them there (no DataLoader workers, no per-batch host-to-device
        copies). ``False`` keeps them in (pinned) host memory and copies each batch, for
        data larger than device memory.
    :param log_every_n_steps: per-term losses are averaged on the device and written
        every this many iterations (no host synchronisation in between).
    :param checkpoint_every_n_steps: write ``checkpoints/last.ckpt`` this often (at the end
        of the first training step at or after each multiple, see
        ``iterations_per_training_step``); a run interrupted at any time loses at most this
        many iterations (plus ``iterations_per_training_step - 1``).
    :param iterations_per_training_step: training iterations taken in one Lightning training
        step. Lightning's per-batch loop and hooks cost about 1 ms on a CPU; for small models
        whose iteration takes a few milliseconds, taking several iterations per training step
        spreads that cost over them. Callbacks' ``on_train_batch_*`` hooks then see a block of
        this many minibatches (a list) and run once per block; ``module.iteration`` counts
        iterations either way.
    :param precision: ``"32-true"`` (float32 throughout) or ``"bf16-mixed"``: the networks'
        linear and convolution layers run in bfloat16 under ``torch.autocast`` (CPUs with
        AMX or AVX512-BF16, recent GPUs), while parameters, optimiser state, every
        distribution and every loss term stay float32 (the models cast their networks'
        outputs at the boundary, :mod:`ppl_vae.nn`). :func:`~ppl_vae.fit` warns where the
        device has no native bfloat16 (it would be emulated, and slower than float32).
    :param validate: Pyro's argument validation (slower; on in tests, off in training).
    :param progress_bar: Lightning's progress bar on stdout, redrawn at every step on a
        terminal and about 20 times in all elsewhere (Jupyter, a log file), where each
        redraw is a new line or message.
    :param batch_sizes: per data-group batch sizes, e.g. ``{"labelled": 64}``.
    :param loggers: where the per-term losses of a run with a run directory go, any of
        ``"csv"`` (``metrics.csv``, one row per logging interval, on disk as soon as it is
        logged; :func:`~ppl_vae.train.read_training_metrics` reads it) and ``"tensorboard"``
        (event files in ``tensorboard/``; needs the ``tensorboard`` package, the
        ``ppl_vae[tensorboard]`` extra).
    :param binarize: keys of the data (e.g. ``("x",)``) whose grey levels in [0, 1] are drawn
        afresh as {0, 1} for every batch, ``x ~ Bernoulli(grey)``: dynamic binarisation, the
        usual way of training a Bernoulli VAE on MNIST. Evaluate and check on a fixed
        binarisation (``MNIST(binarize="fixed")``).
    """

    steps: int = 1000
    batch_size: int = 64
    lr: float = 5e-4
    betas: tuple[float, float] = (0.9, 0.999)
    amsgrad: bool = False
    lr_plateau: dict[str, LRPlateau] = field(default_factory=dict)
    seed: int = 0
    device: str = "cpu"
    devices: int = 1
    num_nodes: int = 1
    strategy: str = "auto"
    data_on_device: bool = True
    log_every_n_steps: int = 50
    checkpoint_every_n_steps: int = 500
    iterations_per_training_step: int = 1
    precision: str = "32-true"
    validate: bool = False
    progress_bar: bool = True
    batch_sizes: dict[str, int] = field(default_factory=dict)
    loggers: tuple[str, ...] = ("csv",)
    binarize: tuple[str, ...] = ()

    #: Settings that earlier versions of the library wrote into a run's ``config.json`` and
    #: that no longer exist, with what replaced them: reading one (a saved run, a config file)
    #: warns and ignores it, so older runs still load, evaluate and resume.
    retired_settings: ClassVar[dict[str, str]] = {
        "replay_loss": "the loss runs eagerly; a replayed loss computed the same values",
    }

    def __post_init__(self) -> None:
        for name in ("steps", "batch_size", "devices", "num_nodes", "log_every_n_steps",
                     "checkpoint_every_n_steps", "iterations_per_training_step"):
            setattr(self, name, positive_integer(name, getattr(self, name)))
        self.seed = integer("seed", self.seed, minimum=0, maximum=2**32 - 1)
        self.lr = finite("lr", self.lr, positive=True)
        self.betas = adam_betas("betas", self.betas)
        for name in ("amsgrad", "data_on_device", "validate", "progress_bar"):
            boolean(name, getattr(self, name))
        self.lr_plateau = _plateau_schedules(self.lr_plateau)
        if not isinstance(self.batch_sizes, dict):
            raise ValueError(f"batch_sizes must be a dict of group -> batch size, got {shown(self.batch_sizes)}")
        for group, size in self.batch_sizes.items():
            positive_integer(f"batch_sizes[{shown(group)}]", size)
        if isinstance(self.loggers, str):
            raise ValueError(f"loggers must be a list of names from {LOGGERS}, got the string {shown(self.loggers)}")
        self.loggers = tuple(self.loggers)
        unknown = [name for name in self.loggers if name not in LOGGERS]
        if unknown or len(set(self.loggers)) != len(self.loggers):
            raise ValueError(f"loggers must be distinct names from {LOGGERS}, got {list(self.loggers)}")
        if isinstance(self.binarize, str) or not all(isinstance(key, str) for key in self.binarize):
            raise ValueError(f"binarize must be a list of data keys, e.g. ['x'], got {self.binarize!r}")
        self.binarize = tuple(self.binarize)
        if not isinstance(self.strategy, str):
            raise ValueError(f"strategy must be a string, got {shown(self.strategy)}")
        self.device = device_setting("device", self.device)
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, got {shown(self.precision)}")

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of every field."""
        return dataclasses.asdict(self)


def _plateau_schedules(schedules: Any) -> dict[str, LRPlateau]:
    """``lr_plateau`` as ``{step name: LRPlateau}``; mappings of fields become :class:`LRPlateau`."""
    if not isinstance(schedules, Mapping):
        raise ValueError(f"lr_plateau must be a dict of step name -> LRPlateau, got {shown(schedules)}")
    checked = {}
    for name, schedule in schedules.items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"lr_plateau's keys must be step names ('elbo', 'classifier', ...), got {shown(name)}")
        if isinstance(schedule, Mapping):
            unknown = set(schedule) - {f.name for f in dataclasses.fields(LRPlateau)}
            if unknown:
                raise ValueError(f"lr_plateau[{shown(name)}] has unknown fields {sorted(unknown)}")
            try:
                schedule = LRPlateau(**schedule)
            except ValueError as error:
                raise ValueError(f"lr_plateau[{shown(name)}]: {error}") from None
        if not isinstance(schedule, LRPlateau):
            raise ValueError(f"lr_plateau[{shown(name)}] must be an LRPlateau or a mapping of its fields, got {shown(schedule)}")
        checked[name] = schedule
    return checked
