"""Two changes to the conv networks that could speed up the conv models' training iteration:
storing the convolution weights channels-last, and compiling the networks.

The library's conv networks (:mod:`ppl_vae.nn.conv`) run on channels-last activations, keep
their weights in the usual contiguous layout (Pyro's parameter store keeps a contiguous copy of
every parameter it registers, so a channels-last weight would not be the tensor ``pyro.optim``
updates under plain SVI) and run eagerly. This script measures what each alternative buys, to
decide whether training should use it where no parameter store is involved.

For each conv workload of :mod:`overhead` (Decomposition, Parted) the plain loops of
:class:`~ppl_vae.infer.TrainingIteration` (as ``harness.plain_loop``) are built on fresh networks
from the workload's seed:

- ``contiguous``: the library's networks as they are;
- ``channels_last``: every ``Conv2d`` and ``ConvTranspose2d`` weight stored channels-last first
  (:func:`store_conv_weights_channels_last`);
- ``compiled``: every child network holding a convolution compiled in place with
  ``nn.Module.compile`` (Inductor, static shapes; the parameters keep their names, so Pyro's
  parameter store sees the same tensors) (:func:`compile_conv_networks`); the compilation
  happens during the warm-up;
- for Parted, also the authors' iteration (``harness.floor_loop(..., authors=True)``), the
  yardstick of the 0.72x target.

Timing: CPU time (``time.process_time``) per iteration, the loops interleaved iteration by
iteration after a warm-up; printed and written per workload: each loop's median, the median
over the timed iterations of the paired ratio ``variant_i / contiguous_i`` and, for Parted,
``variant_i / authors_i``.

    python benchmarks/conv_networks.py --pairs 40
    python benchmarks/conv_networks.py --quick --json out.json  # checks the script, not speed
"""
from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
from harness import DSPRITES_IMAGES, SHAPE, Step, dsprites_images, floor_loop, plain_loop
from overhead import decomposition_workload, parted_workload
from reporting import machine_description, recorded_path, write_results
from torch import nn

DEFAULT_JSON = Path(__file__).parent / "records" / "conv_networks.json"
CONVOLUTIONS = (nn.Conv2d, nn.ConvTranspose2d)


def store_conv_weights_channels_last(model: nn.Module) -> None:
    """Store every ``Conv2d`` and ``ConvTranspose2d`` weight of ``model`` channels-last, in place."""
    for layer in model.modules():
        if isinstance(layer, CONVOLUTIONS):
            layer.weight.data = layer.weight.data.contiguous(memory_format=torch.channels_last)


def compile_conv_networks(model: nn.Module) -> None:
    """Compile, in place (``nn.Module.compile``, static shapes), every child of ``model`` that
    holds a convolution (the encoder and decoder)."""
    for child in model.children():
        if any(isinstance(layer, CONVOLUTIONS) for layer in child.modules()):
            child.compile(dynamic=False)


VARIANTS: dict[str, Callable[[nn.Module], None] | None] = {
    "contiguous": None,
    "channels_last": store_conv_weights_channels_last,
    "compiled": compile_conv_networks,
}


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


def ratio_summary(numerator: list[float], denominator: list[float]) -> dict[str, float | list[float]]:
    """Median and quartiles of ``numerator_i / denominator_i``."""
    ratios = [a / b for a, b in zip(numerator, denominator, strict=True)]
    return {"median": statistics.median(ratios), "quartiles": statistics.quantiles(ratios, n=4) if len(ratios) > 1 else ratios}


def main(argv: list[str] | None = None) -> int:
    """Time every variant on each workload, print the paired ratios, write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", choices=("decomposition", "parted"), default=["decomposition", "parted"])
    parser.add_argument("--variants", nargs="+", choices=tuple(VARIANTS), default=list(VARIANTS),
                        help="network variants besides contiguous, which is always timed")
    parser.add_argument("--pairs", type=int, default=40, help="timed iterations per loop")
    parser.add_argument("--warmup", type=int, default=3, help="untimed iterations per loop (compilation happens here)")
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
    variants = ["contiguous", *(name for name in args.variants if name != "contiguous")]
    results = {}
    for name in args.models:
        images = dsprites_images(args.pool, 0)["x"]
        if name == "decomposition":
            workload = decomposition_workload(images, args.batch_size)
        else:
            labelled = dsprites_images(labelled_count, 1)
            workload = parted_workload(images, labelled["x"], labelled["factors"][:, SHAPE], args.batch_size)
        loops = {variant: plain_loop(workload, VARIANTS[variant]) for variant in variants}
        if workload.authors is not None:
            loops["authors"] = floor_loop(workload, authors=True)
        seconds = paired_cpu_times(loops, args.pairs, args.warmup)
        results[name] = {
            "median_cpu_seconds": {loop: statistics.median(times) for loop, times in seconds.items()},
            "paired_ratio_to_contiguous": {v: ratio_summary(seconds[v], seconds["contiguous"]) for v in variants if v != "contiguous"},
            "batch_size": args.batch_size,
        }
        if "authors" in seconds:
            results[name]["paired_ratio_to_authors"] = {v: ratio_summary(seconds[v], seconds["authors"]) for v in variants}
        for variant in variants:
            row = results[name]
            to_authors = row.get("paired_ratio_to_authors", {}).get(variant)
            print(f"{name} {variant}: {1000 * row['median_cpu_seconds'][variant]:.1f} ms"
                  + (f", paired ratio to contiguous {row['paired_ratio_to_contiguous'][variant]['median']:.3f}" if variant != "contiguous" else "")
                  + (f", to the authors' iteration {to_authors['median']:.3f}" if to_authors else "")
                  + f" ({args.pairs} pairs, CPU time)")
    write_results(args.json, {"models": results, "settings": vars(args) | {"json": recorded_path(args.json)},
                              "machine": machine_description()})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
