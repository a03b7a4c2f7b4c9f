"""Peak memory and time of the Factor score as the number of encoded images grows.

The parted protocol runs on random subsets of ``num_images`` images growing up to the full data
set (None: all 737,280 dSprites images, the PartedVAE authors' protocol); one row of the standard
protocol (disentanglement_lib defaults) is added for comparison. The encoder is a fixed
random linear map 4096 -> D, so the time is the metric's and the renderer's, not a network's.

Each measurement runs in a fresh child process ("fork" where the platform has it, so the
imports are not repeated; "spawn" elsewhere), so that its peak resident memory is its own:
``rss_delta_mib`` is ru_maxrss after the metric minus ru_maxrss after building the data set
and encoding one warm-up batch (everything: torch, numpy, Python); ``traced_peak_mib`` is tracemalloc's peak during the metric (Python and numpy
allocations only: torch's CPU allocator is not traced).

Usage:
    python benchmarks/factor_score_memory.py [--dataset synthetic|dsprites] [--quick]
        [--json PATH]

``--dataset dsprites`` uses ``ppl_vae.data.DSprites`` (rendered on demand) when it can be
imported; ``synthetic`` (default) is ``ppl_vae.metrics.synthetic.SyntheticFactors``: each image
is zeros with the factor values written into its first pixels.
"""
from __future__ import annotations

import argparse
import math
import multiprocessing
import os
import platform
import resource
import sys
import time
import tracemalloc
from typing import Any

import torch
from reporting import write_results

from ppl_vae.metrics import factor_score
from ppl_vae.metrics.synthetic import DSPRITES_FACTOR_SIZES, SyntheticFactors

DEFAULT_JSON = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "factor_score_memory.json")


class LinearEncoder:
    """Fixed random linear map of the flattened image to ``num_dims``; counts encoded images."""

    def __init__(self, num_dims: int, seed: int = 0) -> None:
        generator = torch.Generator().manual_seed(seed)
        self.weight = torch.randn(64 * 64, num_dims, generator=generator) / 64
        self.images = 0

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        """Representation (n, num_dims) of images (n, 1, 64, 64)."""
        self.images += images.shape[0]
        return images.reshape(images.shape[0], -1) @ self.weight


def make_dataset(name: str) -> Any:
    """The data set called ``name``; ImportError's message if dSprites is not available."""
    if name == "synthetic":
        return SyntheticFactors()
    try:
        from ppl_vae.data import DSprites
    except ImportError:
        from ppl_vae.data.dsprites import DSprites
    return DSprites()


def maxrss_mib() -> float:
    """Peak resident set size of this process so far, MiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure(config: dict[str, Any]) -> dict[str, Any]:
    """Run one Factor score in this process; figures of time and memory."""
    torch.set_num_threads(1)
    dataset = make_dataset(config["dataset"])
    encoder = LinearEncoder(config["num_dims"])
    encoder(dataset.images_from_factors(dataset.sample_factors(8, torch.Generator())))
    encoder.images = 0
    baseline = maxrss_mib()
    tracemalloc.start()
    start = time.perf_counter()
    result = factor_score(encoder, dataset, progress=False, **config["options"])
    seconds = time.perf_counter() - start
    _, traced_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {
        **config,
        "images_encoded": encoder.images,
        "seconds": round(seconds, 3),
        "images_per_second": round(encoder.images / seconds),
        "traced_peak_mib": round(traced_peak / 2**20, 2),
        "rss_delta_mib": round(maxrss_mib() - baseline, 2),
        "score": round(result.score, 4),
    }


def _child(config: dict[str, Any], queue: multiprocessing.Queue) -> None:
    queue.put(measure(config))


def start_method() -> str:
    """"fork" where available (no repeated imports), else "spawn"."""
    return "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"


def measure_in_fresh_process(config: dict[str, Any]) -> dict[str, Any]:
    """:func:`measure` in a child process, so that ru_maxrss is this run's alone."""
    context = multiprocessing.get_context(start_method())
    queue = context.Queue()
    process = context.Process(target=_child, args=(config, queue))
    process.start()
    row = queue.get()
    process.join()
    return row


def configurations(dataset: str, quick: bool, num_dims: int, encode_batch_size: int) -> list[dict]:
    """Parted runs on growing ``num_images``, then one standard run."""
    caps: list[int | None] = [2000, 8000] if quick else [16_000, 64_000, 256_000, None]
    standard = {"n_train": 500, "n_eval": 250, "n_variance": 1000} if quick else {}
    options = [{"protocol": "parted", "num_images": cap} for cap in caps]
    options.append({"protocol": "standard", **standard})
    return [
        {
            "dataset": dataset,
            "num_dims": num_dims,
            "options": {**option, "encode_batch_size": encode_batch_size},
        }
        for option in options
    ]


ROW_FORMAT = "{:>9} {:>9} {:>8} {:>8} {:>7} {:>10} {:>8} {:>6}"


def print_header() -> None:
    """Column titles of :func:`print_row`."""
    print(ROW_FORMAT.format(
        "protocol", "subset", "images", "seconds", "img/s", "traced MiB", "rss MiB", "score"
    ))


def print_row(row: dict[str, Any]) -> None:
    """One line per run."""
    options = row["options"]
    cap = options.get("num_images", "-")
    print(
        ROW_FORMAT.format(
            options["protocol"], "all" if cap is None else cap, row["images_encoded"],
            f"{row['seconds']:.2f}", row["images_per_second"], f"{row['traced_peak_mib']:.2f}",
            f"{row['rss_delta_mib']:.2f}", f"{row['score']:.3f}",
        ),
        flush=True,
    )


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark, print the table, write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", choices=("synthetic", "dsprites"), default="synthetic")
    parser.add_argument("--quick", action="store_true", help="small runs only (CI, seconds)")
    parser.add_argument("--json", default=DEFAULT_JSON, help=f"output (default {DEFAULT_JSON})")
    parser.add_argument("--num-dims", type=int, default=10)
    parser.add_argument("--encode-batch-size", type=int, default=1024)
    args = parser.parse_args(argv)
    try:
        make_dataset(args.dataset)
    except ImportError as error:
        parser.error(f"--dataset {args.dataset} is not available: {error}")
    rows = []
    print_header()
    for config in configurations(args.dataset, args.quick, args.num_dims, args.encode_batch_size):
        rows.append(measure_in_fresh_process(config))
        print_row(rows[-1])
    write_results(
        args.json,
        {
            "dataset": args.dataset,
            "num_images": math.prod(DSPRITES_FACTOR_SIZES),
            "torch_threads": 1,
            "machine": platform.platform(),
            "cpus": os.cpu_count(),
            "start_method": start_method(),
            "rows": rows,
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
