"""The engine in float32 and in bf16 mixed precision, against the float32 floor and the
PartedVAE authors' iteration.

For the two conv workloads of ``overhead.py`` (DecompositionVAE with the MMD; PartedVAE with
its classifier step on 3,686 labelled images, 0.5% of dSprites), at batch 64:

- ``torch``: the hand-written float32 iteration (``harness.floor_loop``), the floor;
- ``engine``: ``ppl_vae.fit`` with ``precision="32-true"``;
- ``engine_bf16``: ``ppl_vae.fit`` with ``precision="bf16-mixed"`` (networks in bfloat16
  under ``torch.autocast``, distributions and losses in float32);
- ``authors`` (PartedVAE): the authors' iteration as reproduced in ``overhead.py``
  (float32, NCHW networks, the labelled set reshuffled and copied every iteration).

bfloat16 pays where the CPU has bfloat16 matrix units (AMX, AVX512-BF16; this script
records the CPU flags it found) or on a recent GPU; elsewhere it can be slower than float32.
Each round runs the engine twice, once per precision, and interleaves the float32 floor
(and the authors' iteration) with it iteration by iteration (``harness.InterleavedTimer``);
each engine loop's paired ratio (median over iterations of ``engine_i / torch_i``) is taken
against the floor iterations of its own run (``torch_bf16``/``authors_bf16`` are the floor
and the authors' loop timed inside the bf16 run: the same float32 loops, other iterations).

With ``--quality-steps N`` the script also trains each model N steps in each precision from
the same seed and scores both on the same 1,024 held-out dSprites images: the
DecompositionVAE by its float32 objective per image (mean over 5 draws), the PartedVAE by
the accuracy of its classifier q(c|x) on the shape factor (matched to the labels by the
Hungarian assignment). What bfloat16 networks cost in fit, at equal steps.

    python benchmarks/precision.py --threads 1 --rounds 3 --steps 20 --quality-steps 1000   # docs/performance.md
    python benchmarks/precision.py --quick --json out.json  # seconds: checks the harness
"""
from __future__ import annotations

import argparse
import logging
import statistics
from pathlib import Path

import pyro
import torch
from harness import (
    DSPRITES_IMAGES,
    SHAPE,
    InterleavedTimer,
    Workload,
    add_timing_arguments,
    dsprites_images,
    fit_workload,
    floor_loop,
    summarise,
)
from overhead import decomposition_workload, parted_workload
from reporting import machine_description, recorded_path, write_results
from torch import nn

from ppl_vae.metrics import clustering_accuracy

DEFAULT_JSON = Path(__file__).resolve().parent / "results" / "precision.json"
BF16_CPU_FLAGS = ("amx_bf16", "avx512_bf16")


def cpu_bf16_flags() -> list[str]:
    """The bfloat16 instruction-set flags of this CPU (Linux ``/proc/cpuinfo``; empty elsewhere)."""
    try:
        flags = Path("/proc/cpuinfo").read_text().split()
    except OSError:
        return []
    return sorted(set(flags) & set(BF16_CPU_FLAGS))


def measure_round(workload: Workload, steps: int, warmup: int) -> dict[str, list[float]]:
    """Seconds of every timed iteration of one round: two engine runs, one per precision, each
    with the float32 floor (and the authors' iteration) interleaved iteration by iteration
    (``harness.InterleavedTimer``); the loops timed inside the bf16 run are named ``*_bf16``."""
    seconds: dict[str, list[float]] = {}
    for precision, suffix in (("32-true", ""), ("bf16-mixed", "_bf16")):
        others = {"torch": floor_loop(workload)}
        if workload.authors is not None:
            others["authors"] = floor_loop(workload, authors=True)
        timer = InterleavedTimer(others, warmup)
        fit_workload(workload, warmup + steps, "cpu", [timer], precision=precision)
        for name, values in timer.seconds.items():
            seconds[name + suffix] = values
    return seconds


def trained_by_precision(workload: Workload, steps: int) -> dict[str, tuple[nn.Module, object]]:
    """``(model, objective)`` after ``steps`` training steps in each precision, from the same
    seed and batches."""
    return {precision: fit_workload(workload, steps, precision=precision) for precision in ("32-true", "bf16-mixed")}


def held_out_loss_by_precision(workload: Workload, steps: int, held_out: int = 1024, draws: int = 5) -> dict[str, float]:
    """The float32 objective per image on ``held_out`` unseen dSprites images after ``steps``
    training steps in each precision."""
    x = dsprites_images(held_out, seed=7)["x"].float()
    losses = {}
    for precision, (model, objective) in trained_by_precision(workload, steps).items():
        pyro.set_rng_seed(0)
        with pyro.validation_enabled(False), torch.no_grad():
            losses[precision] = sum(objective.loss(model.model, model.guide, x=x) for _ in range(draws)) / draws / held_out
    return losses


def held_out_accuracy_by_precision(workload: Workload, steps: int, held_out: int = 1024) -> dict[str, float]:
    """Accuracy of the PartedVAE's q(c|x) on the shape of ``held_out`` unseen dSprites images
    after ``steps`` training steps in each precision."""
    images = dsprites_images(held_out, seed=7)
    x, shape = images["x"].float(), images["factors"][:, SHAPE]
    accuracies = {}
    for precision, (model, _) in trained_by_precision(workload, steps).items():
        with torch.no_grad():
            predicted = model.classify(x)[0].argmax(-1)
        accuracies[precision] = clustering_accuracy(predicted.numpy(), shape.numpy())
    return accuracies


def main(argv: list[str] | None = None) -> int:
    """Run the rounds, print the tables, write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--pool", type=int, default=4096)
    parser.add_argument("--labelled", type=int, default=round(0.005 * DSPRITES_IMAGES))
    add_timing_arguments(parser, DEFAULT_JSON, steps=15, warmup=3, rounds=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--quality-steps", type=int, default=0, help="also compare the fit after N steps (0: skip)")
    args = parser.parse_args(argv)
    if args.quick:
        args.steps, args.warmup, args.rounds, args.batch_size, args.pool, args.labelled = 2, 1, 1, 8, 64, 32
        args.quality_steps = min(args.quality_steps, 3)
    torch.set_num_threads(args.threads)
    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)

    labelled = dsprites_images(args.labelled, 1)
    images = dsprites_images(args.pool, 0)["x"]
    workloads = [
        decomposition_workload(images, args.batch_size),
        parted_workload(images, labelled["x"], labelled["factors"][:, SHAPE], args.batch_size),
    ]
    results = {}
    for workload in workloads:
        per_round = [measure_round(workload, args.steps, args.warmup) for _ in range(args.rounds)]
        for index, seconds in enumerate(per_round):
            line = ", ".join(f"{name} {1000 * statistics.median(values):.1f}" for name, values in seconds.items())
            print(f"  {workload.name} round {index + 1}/{args.rounds} (median ms/iteration): {line}", flush=True)
        main_loops = [name for name in ("torch", "engine", "engine_bf16", "authors") if name in per_round[0]]
        medians = {name: [statistics.median(seconds[name]) for seconds in per_round] for name in main_loops}
        rows = summarise(medians, sum(workload.batch_sizes.values()))
        for name in main_loops:
            suffix = "_bf16" if name == "engine_bf16" else ""
            for reference in ("torch", "authors"):
                if reference in per_round[0]:
                    rows[name][f"paired_ratio_to_{reference}"] = statistics.median(
                        a / b
                        for seconds in per_round
                        for a, b in zip(seconds[name], seconds[reference + suffix], strict=True)
                    )
        results[workload.name] = {
            "loops": rows,
            "batch_sizes": workload.batch_sizes,
            "floor_in_bf16_run_median_seconds": statistics.median(
                statistics.median(seconds["torch_bf16"]) for seconds in per_round
            ),
        }

    quality: dict[str, dict[str, float]] = {}
    if args.quality_steps:
        quality["decomposition_held_out_loss_per_image"] = held_out_loss_by_precision(workloads[0], args.quality_steps)
        quality["parted_held_out_shape_accuracy"] = held_out_accuracy_by_precision(workloads[1], args.quality_steps)

    print(f"\n{args.threads} thread(s), {args.rounds} rounds x {args.steps} iterations; CPU bf16 flags: {cpu_bf16_flags()}")
    for name, result in results.items():
        print(f"\n{name} (batch {result['batch_sizes']})")
        print(f"  {'loop':12s} {'median ms':>10s} {'img/s':>8s} {'/torch':>7s} {'/authors':>9s}  (paired)")
        for loop, row in result["loops"].items():
            authors = f"{row['paired_ratio_to_authors']:9.3f}" if "paired_ratio_to_authors" in row else ""
            print(f"  {loop:12s} {1000 * row['median_seconds']:10.1f} {row['images_per_second']:8.0f} "
                  f"{row['paired_ratio_to_torch']:7.3f} {authors}")
    for name, values in quality.items():
        print(f"\nafter {args.quality_steps} steps, {name.replace('_', ' ')}: "
              + ", ".join(f"{precision} {value:.4g}" for precision, value in values.items()))
    payload = {
        "models": results,
        "quality": {"steps": args.quality_steps, **quality},
        "settings": vars(args) | {"json": recorded_path(args.json)},
        "machine": machine_description(cpu_bf16_flags=cpu_bf16_flags()),
    }
    print()
    write_results(args.json, payload)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
