"""Data-parallel training on the CPU: 2 processes against 1 with the same global batch.

For every registered model (``ppl_vae.recipes.RECIPES``) this trains the recipe's demo
settings three times through the command line, one torch thread per process:

- ``1 proc``: one process, global batch G (the demo's batch size), seed 0;
- ``1 proc s1``: the same with seed 1, to show how much the figures move with the seed;
- ``2 proc``: ``--devices 2 --strategy ddp`` (gloo), batch G / 2 per process, seed 0.

and prints each run's final figures (``metrics.json``) side by side. ``--quick`` trains for
a few steps and skips the seed-1 run (a smoke test for CI). Results go to ``benchmarks/results/ddp_cpu.json``.

    python benchmarks/ddp_cpu.py [--quick] [--models vae,decomposition] [--out FILE]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from reporting import write_results

from ppl_vae.recipes import RECIPES
from ppl_vae.train.sweep import flatten_metrics

RUNS = {"1 proc": (1, 0), "1 proc s1": (1, 1), "2 proc": (2, 0)}
QUICK_STEPS = 30


def train(model: str, processes: int, seed: int, global_batch: int, run_dir: Path, steps: int | None) -> dict:
    """One ``ppl-vae train`` run; returns its flattened metrics and wall time."""
    command = [
        sys.executable, "-m", "ppl_vae.cli", "--threads", "1", "train", model, "--demo-settings",
        "--run-dir", str(run_dir), "--overwrite", "--no-progress", "--seed", str(seed),
        "--batch-size", str(global_batch // processes),
    ]
    if processes > 1:
        command += ["--devices", str(processes), "--strategy", "ddp"]
    if steps is not None:
        command += ["--steps", str(steps)]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stderr[-3000:]}")
    metrics = flatten_metrics(json.loads((run_dir / "metrics.json").read_text()))
    return {"seconds": round(seconds, 1), "metrics": metrics}


def table(model: str, runs: dict[str, dict]) -> str:
    """Figures of one model side by side, with |2 proc - 1 proc| next to the seed spread."""
    names = sorted(set.intersection(*(set(r["metrics"]) for r in runs.values())) - {"final_losses.step"})
    header = f"{'metric':36s}" + "".join(f"{label:>14s}" for label in runs) + f"{'|2p-1p|':>12s}{'|s1-s0|':>12s}"
    lines = [f"== {model} ==", header]
    for name in names:
        values = [runs[label]["metrics"][name] for label in runs]
        ddp_gap = abs(runs["2 proc"]["metrics"][name] - runs["1 proc"]["metrics"][name])
        seed_gap = (
            f"{abs(runs['1 proc s1']['metrics'][name] - runs['1 proc']['metrics'][name]):12.3g}"
            if "1 proc s1" in runs
            else f"{'-':>12s}"
        )
        lines.append(f"{name:36s}" + "".join(f"{v:14.4g}" for v in values) + f"{ddp_gap:12.3g}" + seed_gap)
    lines.append(f"{'seconds':36s}" + "".join(f"{runs[label]['seconds']:14.1f}" for label in runs))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_STEPS} steps per run (CI smoke test)")
    parser.add_argument("--models", help=f"comma-separated subset of {', '.join(RECIPES)}")
    parser.add_argument("--out", default="benchmarks/results/ddp_cpu.json")
    args = parser.parse_args()
    models = args.models.split(",") if args.models else list(RECIPES)
    unknown = [m for m in models if m not in RECIPES]
    if unknown:
        parser.error(f"unknown models {unknown}; available: {', '.join(RECIPES)}")
    steps = QUICK_STEPS if args.quick else None
    results = {}
    with tempfile.TemporaryDirectory(prefix="ddp-cpu-") as scratch:
        for model in models:
            global_batch = RECIPES[model].demo().train.batch_size
            if global_batch % 2:
                global_batch -= 1
            runs = {
                label: train(model, processes, seed, global_batch, Path(scratch) / model / label.replace(" ", "-"), steps)
                for label, (processes, seed) in RUNS.items()
                if not (args.quick and label == "1 proc s1")
            }
            results[model] = {"global_batch": global_batch, "steps": steps or RECIPES[model].demo().train.steps,
                              "runs": runs}
            print(table(model, runs), flush=True)
    write_results(args.out, {"quick": args.quick, "models": results})


if __name__ == "__main__":
    main()
