"""Does storing the convolution weights channels-last speed up the conv models' training iteration?

The library's conv networks (:mod:`ppl_vae.nn.conv`) run on channels-last activations and keep
their weights in the usual contiguous layout: Pyro's parameter store keeps a contiguous copy of
every parameter it registers, so a channels-last weight would not be the tensor ``pyro.optim``
updates under plain SVI. This script measures what the other layout would buy, to decide
whether training could store the weights channels-last where no parameter store is involved.

For each conv workload of :mod:`overhead` (Decomposition, Parted) two plain loops of
:class:`~ppl_vae.infer.TrainingIteration` (as ``harness.plain_loop``) are built on fresh networks
from the workload's seed:

- ``contiguous``: the library's networks as they are;
- ``channels_last``: the same, every ``Conv2d`` and ``ConvTranspose2d`` weight stored
  channels-last first (:func:`store_conv_weights_channels_last`).

Timing: CPU time (``time.process_time``) per iteration, the two loops interleaved iteration by
iteration after a warm-up; printed and written per workload: the median over the timed
iterations of the paired ratio ``channels_last_i / contiguous_i`` and each loop's median.

    python benchmarks/conv_weight_layout.py --pairs 40
    python benchmarks/conv_weight_layout.py --quick --json out.json  # checks the script, not speed
"""
from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch
from harness import DSPRITES_IMAGES, SHAPE, Step, dsprites_images, plain_loop
from overhead import decomposition_workload, parted_workload
from reporting import machine_description, write_results
from torch import nn

DEFAULT_JSON = Path(__file__).parent / "records" / "conv_weight_layout.json"


def store_conv_weights_channels_last(model: nn.Module) -> None:
    """Store every ``Conv2d`` and ``ConvTranspose2d`` weight of ``model`` channels-last, in place."""
    for layer in model.modules():
        if isinstance(layer, (nn.Conv2d, nn.ConvTranspose2d)):
            layer.weight.data = layer.weight.data.contiguous(memory_format=torch.channels_last)


def paired_cpu_times(loops: dict[str, Step], pairs: int, warmup: int) -> dict[str, list[float]]:
    """CPU seconds of each loop's iterations, the loops interleaved iteration by iteration."""
    for step in loops.values():
        for _ in range(warmup):
            step()
    seconds: dict[str, list[float]] = {name: [] for name in loops}
    for _ in range(pairs):
        for name, step in loops.items():
            start = time.process_time()
            step()
            seconds[name].append(time.process_time() - start)
    return seconds


def main(argv: list[str] | None = None) -> int:
    """Time both layouts on each workload, print the paired ratios, write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", choices=("decomposition", "parted"), default=["decomposition", "parted"])
    parser.add_argument("--pairs", type=int, default=40, help="timed iterations per loop")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--pool", type=int, default=2048, help="training images drawn")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="tiny sizes: checks the script, not speed")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON)
    args = parser.parse_args(argv)
    labelled_count = round(0.005 * DSPRITES_IMAGES)
    if args.quick:
        args.pairs, args.warmup, args.batch_size, args.pool, labelled_count = 2, 1, 8, 64, 32
    torch.set_num_threads(args.threads)
    results = {}
    for name in args.models:
        images = dsprites_images(args.pool, 0)["x"]
        if name == "decomposition":
            workload = decomposition_workload(images, args.batch_size)
        else:
            labelled = dsprites_images(labelled_count, 1)
            workload = parted_workload(images, labelled["x"], labelled["factors"][:, SHAPE], args.batch_size)
        seconds = paired_cpu_times(
            {"contiguous": plain_loop(workload), "channels_last": plain_loop(workload, store_conv_weights_channels_last)},
            args.pairs, args.warmup,
        )
        ratios = [cl / contiguous for cl, contiguous in zip(seconds["channels_last"], seconds["contiguous"], strict=True)]
        results[name] = {
            "median_cpu_seconds": {loop: statistics.median(times) for loop, times in seconds.items()},
            "paired_ratio_channels_last_to_contiguous": statistics.median(ratios),
            "paired_ratio_quartiles": statistics.quantiles(ratios, n=4) if len(ratios) > 1 else ratios,
            "batch_size": args.batch_size,
        }
        print(f"{name}: contiguous {1000 * results[name]['median_cpu_seconds']['contiguous']:.1f} ms, "
              f"channels-last weights {1000 * results[name]['median_cpu_seconds']['channels_last']:.1f} ms, "
              f"paired ratio {results[name]['paired_ratio_channels_last_to_contiguous']:.3f} ({args.pairs} pairs, CPU time)")
    write_results(args.json, {"models": results, "settings": vars(args) | {"json": str(args.json)},
                              "machine": machine_description()})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
