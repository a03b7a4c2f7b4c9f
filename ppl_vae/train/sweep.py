"""Sweeps: a grid of settings x seeds of one recipe, run as separate jobs, gathered into one table.

Each job is ``python -m ppl_vae.cli train MODEL --run-dir OUT/runs/SETTINGS/seed-S ...`` in
its own process, so jobs share nothing but the disk. Jobs run several at a time: one per
GPU (``CUDA_VISIBLE_DEVICES`` of the sweep, or every GPU torch sees), each job seeing only
its own; on a CPU-only machine ``jobs`` at a time with ``CUDA_VISIBLE_DEVICES=""`` and
``threads`` torch threads each. When every job has finished, the numbers of each run's
``metrics.json`` become one row of a table, written to ``OUT/sweep.json`` and
``OUT/sweep.csv``, and summarised (mean and standard deviation over seeds) per setting.
"""
from __future__ import annotations

import csv
import itertools
import json
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import torch
from tqdm import tqdm

from ppl_vae._files import check_stays_within, read_json, write_atomically
from ppl_vae._validation import integer, positive_integer
from ppl_vae.train.run_dir import write_json_atomic

__all__ = ["SweepJob", "flatten_metrics", "format_summary", "plan_sweep", "run_sweep", "summarise", "visible_gpus"]


@dataclass
class SweepJob:
    """One run of a sweep.

    :param settings: the grid's values for this run, e.g. ``{"beta": 4}``.
    :param seed: ``train.seed`` of this run.
    :param run_dir: its run directory.
    :param command: the ``ppl-vae train`` command line.
    :param status: ``"pending"``, ``"running"``, ``"ok"`` or ``"failed (...)"`` saying why.
    :param seconds: how long it ran.
    :param metrics: its final figures, flattened (:func:`flatten_metrics`).
    """

    settings: dict[str, Any]
    seed: int
    run_dir: Path
    command: list[str]
    status: str = "pending"
    seconds: float = 0.0
    metrics: dict[str, float] = field(default_factory=dict)

    def row(self) -> dict[str, Any]:
        """The job as a JSON-ready table row."""
        return {
            "settings": self.settings,
            "seed": self.seed,
            "status": self.status,
            "seconds": round(self.seconds, 1),
            "run_dir": str(self.run_dir),
            "metrics": self.metrics,
        }


def _setting_label(settings: Mapping[str, Any]) -> str:
    return ",".join(f"{key}={json.dumps(value)}" for key, value in settings.items()) or "defaults"


def _folder_name(settings: Mapping[str, Any]) -> str:
    label = _setting_label(settings)
    return "".join(c if c.isalnum() or c in "=,.-_" else "_" for c in label)


def plan_sweep(
    model: str,
    grid: Mapping[str, Sequence[Any]],
    seeds: Sequence[int],
    out: str | os.PathLike,
    overrides: Mapping[str, Any] | None = None,
    demo_settings: bool = False,
    threads: int | None = None,
) -> list[SweepJob]:
    """Every combination of ``grid`` values (in order, last key fastest) times every seed.

    :param model: a recipe name (``ppl_vae.recipes.RECIPES``).
    :param grid: dotted setting -> values, e.g. ``{"beta": [1, 4], "train.lr": [1e-3]}``.
    :param seeds: values of ``train.seed``.
    :param out: the sweep's folder; runs go to ``out/runs/<settings>/seed-<seed>``.
    :param overrides: settings shared by every run (``--set``).
    :param demo_settings: start every run from the recipe's demo settings.
    :param threads: torch threads of each job (``None``: torch's choice).
    :raises ValueError: for an empty grid value list, no seeds, or a setting given both in
        ``grid`` and ``overrides``.
    """
    if not seeds:
        raise ValueError("seeds must name at least one seed, got none")
    seeds = [integer(f"seeds[{i}]", seed, minimum=0, maximum=2**32 - 1) for i, seed in enumerate(seeds)]
    if threads is not None:
        positive_integer("threads", threads)
    for key, values in grid.items():
        if not values:
            raise ValueError(f"grid setting {key!r} has no values")
    shared = set(grid) & set(overrides or {})
    if shared:
        raise ValueError(f"settings {sorted(shared)} are given both in the grid and as fixed overrides")
    out = Path(out)
    jobs = []
    for values in itertools.product(*grid.values()):
        settings = dict(zip(grid, values, strict=True))
        for seed in seeds:
            run_dir = out / "runs" / _folder_name(settings) / f"seed-{seed}"
            command = [sys.executable, "-m", "ppl_vae.cli"]
            if threads is not None:
                command += ["--threads", str(threads)]
            command += ["train", model, "--run-dir", str(run_dir), "--overwrite", "--no-progress", "--seed", str(seed)]
            if demo_settings:
                command.append("--demo-settings")
            for key, value in {**dict(overrides or {}), **settings}.items():
                command += ["--set", f"{key}={json.dumps(value)}"]
            jobs.append(SweepJob(settings, int(seed), run_dir, command))
    return jobs


def visible_gpus() -> list[str]:
    """The GPUs a sweep may hand out: ``CUDA_VISIBLE_DEVICES`` when set, else every device
    torch sees (none on a CPU-only machine)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [d.strip() for d in visible.split(",") if d.strip() and d.strip() != "-1"]
    return [str(i) for i in range(torch.cuda.device_count())]


def flatten_metrics(metrics: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
    """The numbers of a ``metrics.json``, nested keys joined by dots (``final_losses.elbo_loss``).

    :param metrics: the figures of a run, nested mappings allowed; values that are not numbers are left out.
    :param prefix: put before every key (the dotted path of ``metrics`` in the enclosing mapping).
    """
    flat: dict[str, float] = {}
    for key, value in metrics.items():
        if isinstance(value, Mapping):
            flat.update(flatten_metrics(value, f"{prefix}{key}."))
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            flat[f"{prefix}{key}"] = float(value)
    return flat


def summarise(jobs: Sequence[SweepJob]) -> list[dict[str, Any]]:
    """Per setting: the number of finished runs and each metric's mean and standard
    deviation over their seeds (``std`` is 0 for a single run).

    :param jobs: the jobs of a sweep, run or not (only the finished ones count).
    """
    groups: dict[str, list[SweepJob]] = {}
    for job in jobs:
        groups.setdefault(_setting_label(job.settings), []).append(job)
    summary = []
    for group in groups.values():
        finished = [job for job in group if job.status == "ok"]
        names = sorted({name for job in finished for name in job.metrics})
        metrics = {}
        for name in names:
            values = [job.metrics[name] for job in finished if name in job.metrics]
            spread = statistics.stdev(values) if len(values) > 1 else 0.0
            metrics[name] = {"mean": statistics.fmean(values), "std": spread}
        summary.append({"settings": group[0].settings, "runs": len(finished), "metrics": metrics})
    return summary


def _slots(jobs: int) -> list[dict[str, str]]:
    gpus = visible_gpus()
    if gpus:
        return [{"CUDA_VISIBLE_DEVICES": gpu} for gpu in gpus]
    return [{"CUDA_VISIBLE_DEVICES": ""} for _ in range(jobs)]


def _finish(job: SweepJob, returncode: int, started: float) -> None:
    job.seconds = time.perf_counter() - started
    metrics_path = job.run_dir / "metrics.json"
    if returncode == 0 and metrics_path.is_file():
        try:
            job.metrics = flatten_metrics(read_json(metrics_path, "run metrics"))
            job.status = "ok"
        except ValueError as error:
            job.status = f"failed ({error})"
    else:
        job.status = f"failed (exit {returncode}; see {job.run_dir / 'sweep.log'})"


def run_sweep(
    jobs: list[SweepJob], out: str | os.PathLike, parallel: int = 1, stream: TextIO = sys.stdout, progress: bool = True
) -> dict:
    """Run ``jobs`` (from :func:`plan_sweep`) and write ``out/sweep.json`` and ``out/sweep.csv``.

    :param jobs: the runs, each updated with its status, time and metrics.
    :param out: the folder of the sweep's tables.
    :param parallel: jobs at once on a CPU-only machine; with GPUs, one job per GPU.
    :param stream: where progress lines and the summary table are printed.
    :param progress: a bar of finished jobs on stderr (shown only when stderr is a terminal).
    :returns: ``{"runs": [row, ...], "summary": [...]}``, as written to ``sweep.json``.
    :raises ValueError: for ``parallel`` < 1.
    """
    positive_integer("parallel", parallel)
    out = Path(out)
    free = _slots(parallel)
    waiting = list(jobs)
    running: list[tuple[SweepJob, subprocess.Popen, dict[str, str], float, TextIO]] = []
    bar = tqdm(total=len(jobs), desc="sweep", unit="job", disable=None if progress else True, leave=False)
    while waiting or running:
        while waiting and free:
            job, slot = waiting.pop(0), free.pop(0)
            job.run_dir.mkdir(parents=True, exist_ok=True)
            check_stays_within(job.run_dir / "sweep.log", job.run_dir)  # a log stream, not written atomically
            log = open(job.run_dir / "sweep.log", "w")
            process = subprocess.Popen(
                job.command, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **slot}
            )
            job.status = "running"
            running.append((job, process, slot, time.perf_counter(), log))
            print(f"[sweep] started {_setting_label(job.settings)} seed={job.seed}", file=stream, flush=True)
        time.sleep(0.2)
        for entry in list(running):
            job, process, slot, started, log = entry
            if process.poll() is None:
                continue
            log.close()
            running.remove(entry)
            free.append(slot)
            _finish(job, process.returncode, started)
            bar.update(1)
            print(
                f"[sweep] {job.status}: {_setting_label(job.settings)} seed={job.seed} ({job.seconds:.0f} s)",
                file=stream,
                flush=True,
            )
    bar.close()
    table = {"runs": [job.row() for job in jobs], "summary": summarise(jobs)}
    write_json_atomic(out / "sweep.json", table)
    _write_csv(jobs, out / "sweep.csv")
    print(format_summary(table["summary"]), file=stream, flush=True)
    return table


def _write_csv(jobs: Sequence[SweepJob], path: Path) -> None:
    settings = list(dict.fromkeys(key for job in jobs for key in job.settings))
    metrics = sorted({name for job in jobs for name in job.metrics})


    def write(handle: TextIO) -> None:
        writer = csv.writer(handle)
        writer.writerow([*settings, "seed", "status", "seconds", *metrics])
        for job in jobs:
            writer.writerow(
                [json.dumps(job.settings.get(key)) for key in settings]
                + [job.seed, job.status, round(job.seconds, 1)]
                + [job.metrics.get(name, "") for name in metrics]
            )

    write_atomically(path, write)


def format_summary(summary: Sequence[Mapping[str, Any]]) -> str:
    """The summary as an aligned text table: one row per setting, ``mean ± std`` per metric.

    :param summary: from :func:`summarise`.
    """
    names = sorted({name for entry in summary for name in entry["metrics"]})
    header = ["settings", "runs", *names]
    rows = []
    for entry in summary:
        cells = [_setting_label(entry["settings"]), str(entry["runs"])]
        for name in names:
            value = entry["metrics"].get(name)
            cells.append("-" if value is None else _format_mean(value["mean"], value["std"]))
        rows.append(cells)
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)) for row in [header, *rows])


def _format_mean(mean: float, std: float) -> str:
    if not math.isfinite(mean):
        return str(mean)
    return f"{mean:.4g} ± {std:.2g}" if std else f"{mean:.4g}"
