"""What the models' check of their data for NaN and infinities costs on a CPU, per call and per training iteration.

On the CPU the library's models read every batch back at the entry of ``model`` and ``guide``
and refuse NaN or infinite values (:func:`~ppl_vae.models.inputs.check_batch`,
:func:`~ppl_vae.models.check_contrastive_data`); a training iteration pays it at each call of
both. The check is :func:`~ppl_vae.models.inputs.all_finite`: one sum, and the element-wise
check only where that sum is not finite. This script times it against the element-wise check
``torch.isfinite(x).all()`` alone:

- per call, on the batches of the campaign's workloads: 128 Grassy-MNIST-sized images
  (1 x 28 x 28, the contrastive VAE's) and 64 dSprites images (1 x 64 x 64);
- per training iteration, in :mod:`overhead`'s contrastive workload (the paper's MLP, 128 target
  and 128 background images; the library's ``TrainingIteration`` in a plain loop), where the
  networks are small enough for the check to show: the iteration with the library's check and
  the same iteration with the element-wise check in its place, each on its own fresh networks.

Timing: CPU time (``time.process_time``), one thread, the variants interleaved call by call after
a warm-up; printed and written: each variant's median and the median of the paired ratio
``all_finite_i / elementwise_i``.

    python benchmarks/input_check.py --rounds 200
    python benchmarks/input_check.py --quick --json out.json  # checks the script, not speed
"""
from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
from harness import plain_loop
from overhead import contrastive_workload
from reporting import machine_description, recorded_path, write_results

import ppl_vae.models.contrastive as contrastive_module
from ppl_vae.models.inputs import all_finite

DEFAULT_JSON = Path(__file__).parent / "records" / "input_check.json"


def elementwise(data: torch.Tensor) -> bool:
    """The element-wise check alone: ``torch.isfinite(data).all()``."""
    return bool(torch.isfinite(data).all())


def paired(calls: dict[str, Callable[[], object]], rounds: int, warmup: int) -> dict[str, dict[str, float]]:
    """Median CPU milliseconds of each call over ``rounds`` interleaved rounds, and the paired
    ratio of each to the first."""
    for _ in range(warmup):
        for call in calls.values():
            call()
    seconds: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(rounds):
        for name, call in calls.items():
            start = time.process_time()
            call()
            seconds[name].append(time.process_time() - start)
    reference = next(iter(seconds.values()))
    return {name: {"median_ms": 1000 * statistics.median(values),
                   "paired_ratio": statistics.median(a / b for a, b in zip(values, reference, strict=True) if b > 0)}
            for name, values in seconds.items()}


def contrastive_iteration(check: Callable[[torch.Tensor], bool], pool: int, batch_size: int) -> Callable[[], None]:
    """One plain-loop iteration of the contrastive workload whose data check is ``check``."""
    generator = torch.Generator().manual_seed(2)
    target, background = (torch.rand(pool, 1, 28, 28, generator=generator) for _ in range(2))
    step = plain_loop(contrastive_workload(target, background, batch_size))

    def iteration() -> None:
        contrastive_module.all_finite = check  # the check the model's entry calls
        try:
            step()
        finally:
            contrastive_module.all_finite = all_finite

    return iteration


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help="3 rounds on small batches: checks the script")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON)
    args = parser.parse_args()
    rounds, warmup, scale = (3, 1, 8) if args.quick else (args.rounds, args.warmup, 1)
    torch.set_num_threads(1)
    batches = {"128 images 1x28x28": torch.rand(128 // scale, 1, 28, 28),
               "64 images 1x64x64": torch.rand(64 // scale, 1, 64, 64).round()}
    results: dict[str, dict[str, dict[str, float]]] = {}
    for label, batch in batches.items():
        results[f"one call, {label}"] = paired(
            {"elementwise": lambda batch=batch: elementwise(batch), "all_finite": lambda batch=batch: all_finite(batch)},
            rounds * 10, warmup)
    iterations = {"elementwise": contrastive_iteration(elementwise, 2000 // scale, 128 // scale),
                  "all_finite": contrastive_iteration(all_finite, 2000 // scale, 128 // scale)}
    results["contrastive training iteration, 128 + 128"] = paired(iterations, rounds, warmup)
    for what, rows in results.items():
        print(f"{what}: " + ", ".join(f"{name} {row['median_ms']:.3f} ms (paired {row['paired_ratio']:.3f})"
                                      for name, row in rows.items()))
    write_results(args.json, {"benchmark": "input_check", "command": f"python benchmarks/input_check.py --rounds {rounds}",
                              "json": recorded_path(args.json), "quick": args.quick,
                              "machine": machine_description(threads=1), "results": results})


if __name__ == "__main__":
    main()
