"""The engine in float32 and in bf16 mixed precision, against the float32 floor and the
PartedVAE authors' iteration.

For the two conv workloads of ``overhead.py`` (DecompositionVAE with the MMD; PartedVAE with
its classifier step on 3,686 labelled images, 0.5% of dSprites), at batch 64:

- ``torch``: the hand-written float32 iteration (``overhead.hand_written_loop``), the floor;
- ``engine``: ``ppl_vae.fit`` with ``precision="32-true"``;
- ``engine_bf16``: ``ppl_vae.fit`` with ``precision="bf16-mixed"`` (networks in bfloat16
  under ``torch.autocast``, distributions and losses in float32);
- ``authors`` (PartedVAE): the authors' iteration as reproduced in ``overhead.py``
  (float32, NCHW networks, the labelled set reshuffled and copied every iteration).

bfloat16 pays where the CPU has bfloat16 matrix units (AMX, AVX512-BF16; this script
records the CPU flags it found) or on a recent GPU; elsewhere it can be slower than float32.
The loops are timed in rounds, alternated in one process (torch, engine, engine_bf16,
[authors,] torch, ...), each round timing ``--steps`` iterations after ``--warmup``.

With ``--quality-steps N`` the script also trains the DecompositionVAE N steps in each
precision from the same seed and scores both on the same 1,024 held-out dSprites images
with the float32 objective (per image, mean over 5 draws): what bfloat16 networks cost in
fit, at equal steps.

    python benchmarks/precision.py --threads 1 --quality-steps 1000   # the figures of docs/performance.md
    python benchmarks/precision.py --quick --json out.json  # seconds: checks the harness
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import sys
from pathlib import Path

import pyro
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from overhead import (  # noqa: E402
    DSPRITES_IMAGES,
    SHAPE,
    Workload,
    _time_steps,
    authors_loop,
    decomposition_workload,
    dsprites_images,
    parted_workload,
    summarise,
    time_engine,
    time_hand_written,
)

from ppl_vae import fit  # noqa: E402

DEFAULT_JSON = Path(__file__).resolve().parent / "results" / "precision.json"
BF16_CPU_FLAGS = ("amx_bf16", "avx512_bf16")


def cpu_bf16_flags() -> list[str]:
    """The bfloat16 instruction-set flags of this CPU (Linux ``/proc/cpuinfo``; empty elsewhere)."""
    try:
        flags = Path("/proc/cpuinfo").read_text().split()
    except OSError:
        return []
    return sorted(set(flags) & set(BF16_CPU_FLAGS))


def held_out_loss_by_precision(workload: Workload, steps: int, held_out: int = 1024, draws: int = 5) -> dict[str, float]:
    """The float32 objective per image on ``held_out`` unseen dSprites images after ``steps``
    training steps in each precision, from the same seed and batches."""
    x = dsprites_images(held_out, seed=7)["x"].float()
    losses = {}
    for precision in ("32-true", "bf16-mixed"):
        pyro.clear_param_store()
        model, objective = workload.build()
        first, *others = workload.batch_sizes.items()
        fit(model, objective, workload.data, steps=steps, batch_size=first[1], batch_sizes=dict(others),
            lr=workload.lr, precision=precision, progress_bar=False)
        pyro.set_rng_seed(0)
        with pyro.validation_enabled(False):
            losses[precision] = sum(objective.loss(model.model, model.guide, x=x) for _ in range(draws)) / draws / held_out
    return losses


def main(argv: list[str] | None = None) -> int:
    """Run the rounds, print the tables, write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--pool", type=int, default=4096)
    parser.add_argument("--labelled", type=int, default=round(0.005 * DSPRITES_IMAGES))
    parser.add_argument("--steps", type=int, default=15)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--quality-steps", type=int, default=0, help="also compare the fit after N steps (0: skip)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: checks the harness, not speed")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON)
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
        loops = {
            "torch": lambda w=workload: time_hand_written(w, args.steps, args.warmup),
            "engine": lambda w=workload: time_engine(w, args.steps, args.warmup),
            "engine_bf16": lambda w=workload: time_engine(w, args.steps, args.warmup, precision="bf16-mixed"),
        }
        if workload.authors is not None:
            loops["authors"] = lambda w=workload: _time_steps(authors_loop(w), args.steps, args.warmup)
        seconds: dict[str, list[float]] = {name: [] for name in loops}
        for index in range(args.rounds):
            for name, loop in loops.items():
                seconds[name].append(loop())
            line = ", ".join(f"{name} {1000 * values[-1]:.1f}" for name, values in seconds.items())
            print(f"  {workload.name} round {index + 1}/{args.rounds} (ms/iteration): {line}", flush=True)
        results[workload.name] = {"loops": summarise(seconds, sum(workload.batch_sizes.values())),
                                  "batch_sizes": workload.batch_sizes}

    quality = held_out_loss_by_precision(workloads[0], args.quality_steps) if args.quality_steps else {}

    print(f"\n{args.threads} thread(s), {args.rounds} rounds x {args.steps} iterations; CPU bf16 flags: {cpu_bf16_flags()}")
    for name, result in results.items():
        print(f"\n{name} (batch {result['batch_sizes']})")
        print(f"  {'loop':12s} {'median ms':>10s} {'img/s':>8s} {'/torch':>7s} {'/authors':>9s}")
        for loop, row in result["loops"].items():
            authors = f"{row['ratio_to_authors']:9.3f}" if "ratio_to_authors" in row else ""
            print(f"  {loop:12s} {1000 * row['median_seconds']:10.1f} {row['images_per_second']:8.0f} "
                  f"{row['ratio_to_torch']:7.3f} {authors}")
    if quality:
        print(f"\nDecompositionVAE after {args.quality_steps} steps, float32 loss per held-out image: "
              + ", ".join(f"{name} {value:.2f}" for name, value in quality.items()))
    payload = {
        "models": results,
        "quality": {"steps": args.quality_steps, "held_out_loss_per_image": quality},
        "settings": vars(args) | {"json": str(args.json)},
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "cpu_bf16_flags": cpu_bf16_flags(),
                    "torch": torch.__version__, "pyro": pyro.__version__, "load_average": os.getloadavg()},
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
