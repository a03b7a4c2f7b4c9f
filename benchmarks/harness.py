"""What the timing benchmarks share: a workload, its batches, the loops compared with the
engine, the timers, and the summary of the figures.

A :class:`Workload` is a model and objective built afresh from a fixed seed, its training data
in :func:`ppl_vae.fit`'s format, and its hand-written PyTorch iteration (``floor``). The loops
built from it (each ``() -> None``, one training iteration):

- :func:`floor_loop`: the hand-written iteration, the floor;
- :func:`svi_loop`: ``pyro.infer.SVI`` with ``pyro.optim.Adam``, the objective's auxiliary
  steps with ``torch.optim.Adam`` around it;
- :func:`plain_loop`: the library's :class:`~ppl_vae.infer.TrainingIteration`, no Lightning;
- the engine, :func:`fit_workload` (``ppl_vae.fit``), timed from inside its run by
  :class:`InterleavedTimer` (which runs the other loops between its iterations) or
  :class:`IterationTimer`.
"""
from __future__ import annotations

import itertools
import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lightning as L
import pyro
import torch
from pyro.infer import SVI
from torch import nn

from ppl_vae import fit
from ppl_vae._storage import stored_as_float
from ppl_vae.data import DSprites
from ppl_vae.infer import MeanFieldELBO, TrainingIteration, auxiliary_modules, auxiliary_steps
from ppl_vae.infer.iteration import step_inputs

DSPRITES_IMAGES = 737_280
SHAPE = 1  # column of dSprites' shape factor
Step = Callable[[], None]
Batches = Callable[[], dict[str, Any]]


def dsprites_images(count: int, seed: int) -> dict[str, torch.Tensor]:
    """``count`` random dSprites images (bool) and factors."""
    indices = torch.randint(DSPRITES_IMAGES, (count,), generator=torch.Generator().manual_seed(seed))
    return DSprites().tensors(indices, dtype=torch.bool)


def adam(params, lr: float) -> torch.optim.Optimizer:
    """Foreach Adam over the trainable ``params``, as the engine makes it on a CPU."""
    return torch.optim.Adam([p for p in params if p.requires_grad], lr=lr, foreach=True)


def take_step(optimizer: torch.optim.Optimizer, loss: torch.Tensor) -> None:
    """Clear the gradients, backpropagate ``loss``, step."""
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()


@dataclass
class Workload:
    """One model's benchmark.

    :param build: fresh ``(model, objective)`` from a fixed seed (``layers="authors"``: in the
        authors' layers, where the workload has an authors' iteration).
    :param data: training data in :func:`ppl_vae.fit`'s format.
    :param batch_sizes: rows per batch of each data group.
    :param floor: ``(model, objective, lr, batches) -> step``, the hand-written iteration.
    :param authors: the same for the authors' iteration, when there is one.
    :param description: settings written to the JSON with the figures.
    """

    name: str
    build: Callable[..., tuple[nn.Module, Any]]
    data: dict[str, Any]
    batch_sizes: dict[str, int]
    lr: float
    floor: Callable[..., Step]
    authors: Callable[..., Step] | None = None
    description: dict[str, Any] = field(default_factory=dict)

    def batches(self, seed: int = 0, device: torch.device | str = "cpu") -> Batches:
        """Random minibatches of every data group, drawn with replacement, in the format of
        :class:`~ppl_vae.infer.TrainingIteration` (bool images as float {0, 1})."""
        generator = torch.Generator(device).manual_seed(seed)
        groups = {name: value if isinstance(value, Mapping) else {name: value} for name, value in self.data.items()}
        groups = {name: {key: value.to(device) for key, value in group.items()} for name, group in groups.items()}

        def draw() -> dict[str, Any]:
            batch: dict[str, Any] = {}
            for name, group in groups.items():
                rows = next(iter(group.values())).shape[0]
                index = torch.randint(rows, (min(self.batch_sizes[name], rows),), generator=generator, device=device)
                tensors = {key: stored_as_float(value.index_select(0, index)) for key, value in group.items()}
                batch[name] = tensors if isinstance(self.data[name], Mapping) else tensors[name]
            return batch

        return draw


def floor_loop(workload: Workload, device: torch.device | str = "cpu", authors: bool = False) -> Step:
    """The hand-written iteration (or, with ``authors``, the authors'), on fresh networks and
    data on ``device``, with distributions' argument checks off as in the other loops."""
    model, objective = workload.build(layers="authors") if authors else workload.build()
    model.to(device)
    for module in auxiliary_modules(objective).values():
        module.to(device)
    make = workload.authors if authors else workload.floor
    floor = make(model, objective, workload.lr, workload.batches(device=device))

    def step() -> None:
        with pyro.validation_enabled(False):  # also torch.distributions' validate_args
            floor()

    return step


def svi_loop(workload: Workload) -> Step:
    """``SVI.step`` (``pyro.optim.Adam``, Pyro's validation off) with the objective's auxiliary
    steps around it, each by a ``torch.optim.Adam`` on ``step.loss`` of its data group."""
    model, objective = workload.build()
    svi = SVI(model.model, model.guide, pyro.optim.Adam({"lr": workload.lr}), objective)
    steps = [(step, adam(step.parameters, step.lr or workload.lr)) for step in auxiliary_steps(objective, model)]
    batches, counter = workload.batches(), itertools.count()
    # the library's objectives read the training step; a plain Pyro ELBO follows no schedule
    training_step = (lambda t: {"step": t}) if isinstance(objective, MeanFieldELBO) else (lambda t: {})

    def auxiliary(when: str, batch: dict[str, Any]) -> None:
        for step, optimizer in steps:
            if step.when == when:
                take_step(optimizer, step.loss(**step_inputs(batch, step.data_group)))

    def iteration() -> None:
        batch = batches()
        auxiliary("before", batch)
        with pyro.validation_enabled(False):
            svi.step(**step_inputs(batch, None), **training_step(next(counter)))
        auxiliary("after", batch)

    return iteration


def plain_loop(workload: Workload, prepare: Callable[[nn.Module], None] | None = None) -> Step:
    """The library's :class:`~ppl_vae.infer.TrainingIteration` (foreach Adam) in a plain loop,
    Pyro's validation off; ``prepare`` (if given) first changes the fresh model in place."""
    model, objective = workload.build()
    if prepare is not None:
        prepare(model)
    iteration = TrainingIteration(model, objective, workload.lr, optimizer=adam)
    batches, counter = workload.batches(), itertools.count()

    def step() -> None:
        with pyro.validation_enabled(False):
            iteration(batches(), next(counter))

    return step


def synchronize(device: torch.device | str) -> None:
    """Wait for the device's queued work (a no-op on the CPU)."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def time_steps(step: Step, steps: int, warmup: int, device: torch.device | str = "cpu") -> float:
    """Seconds per call of ``step`` over ``steps`` calls after ``warmup``."""
    for _ in range(warmup):
        step()
    synchronize(device)
    start = time.perf_counter()
    for _ in range(steps):
        step()
    synchronize(device)
    return (time.perf_counter() - start) / steps


def fit_workload(
    workload: Workload, steps: int, device: str = "cpu", callbacks: Sequence[L.Callback] = (), **settings: Any
) -> tuple[nn.Module, Any]:
    """``ppl_vae.fit`` of fresh networks for ``steps`` iterations, data resident on ``device``
    (``settings``: more :class:`~ppl_vae.train.TrainConfig` fields); the trained ``(model, objective)``."""
    pyro.clear_param_store()
    model, objective = workload.build()
    (first, size), *others = workload.batch_sizes.items()
    fit(model, objective, workload.data, steps=steps, batch_size=size, batch_sizes=dict(others), lr=workload.lr,
        device=device, data_on_device=True, progress_bar=False, callbacks=list(callbacks), **settings)
    return model, objective


class IterationTimer(L.Callback):
    """Wall time of the engine's training steps that begin at or after iteration ``warmup``."""

    def __init__(self, warmup: int) -> None:
        self.warmup, self.start, self.end, self.count = warmup, 0.0, 0.0, 0

    def on_train_batch_start(self, trainer, module, batch, batch_idx) -> None:
        if module.iteration >= self.warmup and not self.count:
            synchronize(module.device)
            self.start = time.perf_counter()

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
        if module.iteration - len(batch) >= self.warmup:
            synchronize(module.device)
            self.end, self.count = time.perf_counter(), self.count + len(batch)


def time_engine(workload: Workload, steps: int, warmup: int, device: str = "cpu", **settings: Any) -> float:
    """Seconds per iteration of ``ppl_vae.fit`` (Lightning's start-up excluded)."""
    timer = IterationTimer(warmup)
    fit_workload(workload, warmup + steps, device, [timer], **settings)
    return (timer.end - timer.start) / timer.count if timer.count else float("nan")


class InterleavedTimer(L.Callback):
    """Times each engine training step (from the end of this callback to the end of the next,
    so all of Lightning's per-batch work) and, after it, as many iterations of every other loop:
    engine, loop 1, loop 2, ..., engine, ... One figure per loop and training step that begins
    at or after iteration ``warmup``, in seconds per iteration."""

    def __init__(self, others: Mapping[str, Step], warmup: int) -> None:
        self.others, self.warmup, self.resumed = dict(others), warmup, 0.0
        self.seconds: dict[str, list[float]] = {"engine": [], **{name: [] for name in self.others}}

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
        synchronize(module.device)
        iterations = len(batch)
        timed = module.iteration - iterations >= self.warmup
        if timed:
            self.seconds["engine"].append((time.perf_counter() - self.resumed) / iterations)
        for name, step in self.others.items():
            start = time.perf_counter()
            for _ in range(iterations):
                step()
            synchronize(module.device)
            if timed:
                self.seconds[name].append((time.perf_counter() - start) / iterations)
        self.resumed = time.perf_counter()


def measure(workload: Workload, steps: int, warmup: int, rounds: int, **engine_settings: Any) -> list[dict[str, list[float]]]:
    """Seconds of every timed iteration of every loop, one dict per round, the loops interleaved
    iteration by iteration (``engine_settings``: more ``TrainConfig`` fields for the engine)."""
    per_round = []
    for index in range(rounds):
        pyro.clear_param_store()
        others = {"torch": floor_loop(workload), "svi": svi_loop(workload), "plain": plain_loop(workload)}
        if workload.authors is not None:
            others["authors"] = floor_loop(workload, authors=True)
        timer = InterleavedTimer(others, warmup)
        fit_workload(workload, warmup + steps, "cpu", [timer], **engine_settings)
        per_round.append({**{name: timer.seconds[name] for name in others}, "engine": timer.seconds["engine"]})
        line = ", ".join(f"{name} {1000 * statistics.median(values):.1f}" for name, values in per_round[-1].items())
        print(f"  {workload.name} round {index + 1}/{rounds} (median ms/iteration): {line}", flush=True)
    return per_round


def paired_ratio(per_round: Sequence[Mapping[str, list[float]]], name: str, reference: str) -> float:
    """Median over every timed iteration of ``name_i / reference_i`` (run back to back)."""
    return statistics.median(a / b for seconds in per_round for a, b in zip(seconds[name], seconds[reference], strict=True))


def summarise(per_iteration: dict[str, list[float]], images_per_iteration: int) -> dict[str, dict[str, Any]]:
    """Median, min and max of each loop's seconds per iteration over rounds (one figure per
    round), images per second, the ratio of medians to ``torch`` (and to ``authors``)."""
    rows = {}
    for name, values in per_iteration.items():
        median = statistics.median(values)
        rows[name] = {"median_seconds": median, "min_seconds": min(values), "max_seconds": max(values),
                      "rounds": values, "images_per_second": images_per_iteration / median}
        for reference in ("torch", "authors"):
            if reference in per_iteration:
                rows[name][f"ratio_to_{reference}"] = median / statistics.median(per_iteration[reference])
    return rows


def print_table(title: str, rows: Mapping[str, Mapping[str, float]]) -> None:
    """One line per loop: median ms, min, max, img/s, ratios to ``torch`` (and ``authors``), paired where measured."""
    print(f"\n{title}\n  {'loop':12s} {'median ms':>10s} {'min':>8s} {'max':>8s} {'img/s':>8s} "
          f"{'/torch':>7s} {'paired':>7s} {'/authors':>9s} {'paired':>7s}")
    for loop, row in rows.items():
        keys = ("ratio_to_torch", "paired_ratio_to_torch", "ratio_to_authors", "paired_ratio_to_authors")
        ratios = " ".join(f"{row[key]:7.3f}" if key in row else "" for key in keys)
        print(f"  {loop:12s} {1000 * row['median_seconds']:10.1f} {1000 * row['min_seconds']:8.1f} "
              f"{1000 * row['max_seconds']:8.1f} {row['images_per_second']:8.0f} {ratios}")


def add_timing_arguments(parser, default_json: Path, steps: int, warmup: int, rounds: int) -> None:
    """The options of every timing script: ``--steps`` (timed iterations per round), ``--warmup``,
    ``--rounds``, ``--quick`` (tiny sizes: checks the harness, not speed) and ``--json`` (where to write)."""
    parser.add_argument("--steps", type=int, default=steps, help="timed iterations per round")
    parser.add_argument("--warmup", type=int, default=warmup)
    parser.add_argument("--rounds", type=int, default=rounds)
    parser.add_argument("--quick", action="store_true", help="tiny sizes: checks the harness, not speed")
    parser.add_argument("--json", type=Path, default=default_json)


def round_to_training_steps(parser, args) -> None:
    """Round ``args.steps`` and ``args.warmup`` up to whole engine training steps of
    ``args.iterations_per_training_step`` iterations (at least one timed step)."""
    per_step = args.iterations_per_training_step
    if per_step < 1:
        parser.error("--iterations-per-training-step must be >= 1")
    args.warmup = math.ceil(args.warmup / per_step) * per_step
    args.steps = max(math.ceil(args.steps / per_step), 1) * per_step
