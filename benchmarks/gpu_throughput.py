"""Images per second of full PartedVAE and DecompositionVAE training iterations on one GPU.

dSprites 64x64 (the whole set by default, stored as bool and resident on the GPU: the
engine's ``data_on_device=True``, no DataLoader, no host-to-device copies), batch 64 and 512,
the workloads of :mod:`overhead`: DecompositionVAE with the MMD term, PartedVAE with the
authors' dSprites settings and its classifier step on a labelled set of 0.5% of dSprites.
The loops are alternated per setting:

- ``engine``: ``ppl_vae.fit(..., device="cuda", data_on_device=True)`` with a timing callback
  that synchronises the device at the first timed batch and at the last;
- ``engine_bf16``: the same with ``precision="bf16-mixed"`` (networks in bfloat16, losses in
  float32);
- ``engine_blocks``: the float32 engine taking ``--iterations-per-training-step`` iterations
  (default 10) per Lightning training step, which spreads Lightning's per-batch cost (about
  1 ms of host time, which a fast GPU waits on) over them;
- ``torch``: the hand-written float32 PyTorch iteration of :mod:`overhead` with the same
  networks and losses, data on the GPU (the floor).

Throughput counts the images of the ELBO's batch (PartedVAE's labelled batch is extra work
per iteration), so ``epoch_seconds`` = 737,280 / images per second is the time of one pass
over dSprites. Target of issue 5: >= 50,000 images/s at batch 512 on one H200.

Without a CUDA device the script says so, writes a JSON with ``"cuda_available": false`` and
no rows, and exits 0: it never reports figures it did not measure. ``--device cpu`` runs the
same harness on the CPU (to check it; the figures are not GPU figures).

    python benchmarks/gpu_throughput.py                      # on a GPU machine
    python benchmarks/gpu_throughput.py --quick --json out.json
"""
from __future__ import annotations

import argparse
import logging
import warnings
from pathlib import Path

import torch
from harness import (
    DSPRITES_IMAGES,
    SHAPE,
    Workload,
    add_timing_arguments,
    floor_loop,
    round_to_training_steps,
    summarise,
    time_engine,
    time_steps,
)
from overhead import decomposition_workload, parted_workload
from reporting import machine_description, recorded_path, write_results

from ppl_vae.data import DSprites

DEFAULT_JSON = Path(__file__).resolve().parent / "results" / "gpu_throughput.json"
TARGET_IMAGES_PER_SECOND = 50_000


def dsprites_pool(size: int | None, seed: int) -> dict[str, torch.Tensor]:
    """``size`` random dSprites images as bool (``None``: all 737,280, about 3 GB) and factors."""
    if size is None:
        return DSprites().tensors(dtype=torch.bool)
    indices = torch.randint(DSPRITES_IMAGES, (size,), generator=torch.Generator().manual_seed(seed))
    return DSprites().tensors(indices, dtype=torch.bool)


def build_workloads(batch_size: int, images: torch.Tensor, labelled: dict[str, torch.Tensor]) -> list[Workload]:
    """PartedVAE and DecompositionVAE at ``batch_size`` on the same image pool."""
    return [
        parted_workload(images, labelled["x"], labelled["factors"][:, SHAPE], batch_size),
        decomposition_workload(images, batch_size),
    ]


def measure(
    workload: Workload, steps: int, warmup: int, rounds: int, device: str, iterations_per_training_step: int
) -> dict[str, dict]:
    """Seconds per iteration of each loop (module docstring), alternated ``rounds`` times."""
    loops = {
        "engine": lambda: time_engine(workload, steps, warmup, device=device),
        "engine_bf16": lambda: time_engine(workload, steps, warmup, device=device, precision="bf16-mixed"),
        "engine_blocks": lambda: time_engine(workload, steps, warmup, device=device,
                                             iterations_per_training_step=iterations_per_training_step),
        "torch": lambda: time_steps(floor_loop(workload, device), steps, warmup, device),
    }
    seconds: dict[str, list[float]] = {name: [] for name in loops}
    for index in range(rounds):
        for name, run in loops.items():
            seconds[name].append(run())
            print(
                f"  {workload.name} batch {workload.batch_sizes['x']} round {index + 1}/{rounds} "
                f"{name:11s}: {1000 * seconds[name][-1]:8.2f} ms/iteration",
                flush=True,
            )
    batch = workload.batch_sizes["x"]
    rows = summarise(seconds, batch)
    for row in rows.values():
        row["epoch_seconds"] = DSPRITES_IMAGES * row["median_seconds"] / batch
    return rows


def machine(device: str) -> dict[str, object]:
    """What the figures were measured on."""
    if torch.device(device).type == "cuda":
        return machine_description(cuda_available=True, gpu=torch.cuda.get_device_name(device))
    return machine_description(cuda_available=torch.cuda.is_available())


def main(argv: list[str] | None = None) -> int:
    """Measure (or explain why not), print the table, write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda", help="'cuda' (default) or 'cpu' to check the harness")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[64, 512])
    parser.add_argument("--pool", type=int, default=None, help="images resident on the device (default: all)")
    parser.add_argument("--labelled", type=int, default=round(0.005 * DSPRITES_IMAGES))
    add_timing_arguments(parser, DEFAULT_JSON, steps=100, warmup=20, rounds=3)
    parser.add_argument("--iterations-per-training-step", type=int, default=10,
                        help="of the engine_blocks loop; --steps and --warmup are rounded up to multiples")
    args = parser.parse_args(argv)
    if args.quick:
        args.steps, args.warmup, args.rounds, args.pool, args.labelled = 2, 1, 1, 1024, 64
        args.iterations_per_training_step = 2
        if args.device == "cpu":
            args.batch_sizes = [8]
    round_to_training_steps(parser, args)
    if args.device == "cpu":
        torch.set_num_threads(1)
    payload = {"settings": vars(args) | {"json": recorded_path(args.json)}, "machine": machine("cpu"), "rows": []}
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("no CUDA device available: gpu_throughput measures nothing on this machine (run it where torch sees a GPU)")
        payload["cuda_available"] = False
        write_results(args.json, payload)
        return 0
    payload["cuda_available"] = torch.cuda.is_available()
    payload["machine"] = machine(args.device)
    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", message=".*GPU available but not used.*")
    if torch.device(args.device).type == "cuda":
        torch.backends.cudnn.benchmark = True
    images = dsprites_pool(args.pool, 0)["x"]
    labelled = dsprites_pool(args.labelled, 1)
    for batch_size in args.batch_sizes:
        for workload in build_workloads(batch_size, images, labelled):
            rows = measure(workload, args.steps, args.warmup, args.rounds, args.device, args.iterations_per_training_step)
            payload["rows"].append({"model": workload.name, "batch_size": batch_size, "loops": rows})

    print(f"\n{payload['machine'].get('gpu', args.device)}: {args.rounds} rounds x {args.steps} iterations")
    print(f"{'model':14s} {'batch':>6s} {'loop':11s} {'median ms':>10s} {'images/s':>10s} {'epoch s':>8s} {'/torch':>7s}")
    for row in payload["rows"]:
        for loop, figures in row["loops"].items():
            print(
                f"{row['model']:14s} {row['batch_size']:6d} {loop:11s} {1000 * figures['median_seconds']:10.2f} "
                f"{figures['images_per_second']:10.0f} {figures['epoch_seconds']:8.1f} "
                f"{figures.get('ratio_to_torch', 1.0):7.3f}"
            )
    payload["target_images_per_second"] = TARGET_IMAGES_PER_SECOND
    write_results(args.json, payload)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
