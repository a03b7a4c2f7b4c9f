"""Time rendering the dSprites set with ppl_vae's renderer.

Renders the first ``fraction`` of the 720 (shape, scale, orientation) blocks of 1,024 images each
into a bit-packed array, as the on-disk cache does, and reports images per second and total seconds
(renderer setup included). Also reports the speed of on-demand rendering of random batches
(``DSprites.images_from_factors``), the path used when training without a cache.

    python benchmarks/dsprites_render.py               # the whole set (737,280 images)
    python benchmarks/dsprites_render.py --quick       # 2% of the set, for CI
    python benchmarks/dsprites_render.py --fraction 0.25 --json out.json
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import numpy as np
import torch
from reporting import write_results

from ppl_vae.data.dsprites import IMAGE_SIZE, NUM_IMAGES, DSprites, DSpritesRenderer

DEFAULT_JSON = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "dsprites_render.json")
QUICK_FRACTION = 0.02
BLOCK_SIZE = 1024
RANDOM_BATCH = 4096


def time_render(fraction: float) -> dict[str, float | int]:
    """Render ``fraction`` of the set; returns image count, seconds (setup included) and images/s."""
    start = time.perf_counter()
    renderer = DSpritesRenderer()
    setup_s = time.perf_counter() - start
    num_blocks = max(1, round(fraction * NUM_IMAGES / BLOCK_SIZE))
    packed = np.empty((num_blocks * BLOCK_SIZE, IMAGE_SIZE * IMAGE_SIZE // 8), dtype=np.uint8)
    for _, (start_row, block) in zip(range(num_blocks), renderer.iter_blocks(), strict=False):
        packed[start_row : start_row + BLOCK_SIZE] = np.packbits(block.reshape(BLOCK_SIZE, -1), axis=1)
    images = packed.shape[0]
    total_s = time.perf_counter() - start
    return {
        "images": images,
        "fraction": images / NUM_IMAGES,
        "setup_seconds": setup_s,
        "total_seconds": total_s,
        "images_per_second": images / total_s,
        "projected_full_set_seconds": total_s * NUM_IMAGES / images,
        "random_batch_images_per_second": _time_random_batches(),
    }


def _time_random_batches(repeats: int = 5) -> float:
    """Images/s of ``DSprites.images_from_factors`` on random batches (on-demand rendering for training)."""
    data = DSprites()
    generator = torch.Generator().manual_seed(0)
    factors = [data.sample_factors(RANDOM_BATCH, generator) for _ in range(repeats)]
    start = time.perf_counter()
    for batch in factors:
        data.images_from_factors(batch)
    return repeats * RANDOM_BATCH / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fraction", type=float, default=1.0, help="share of the set to render, in (0, 1]")
    parser.add_argument("--quick", action="store_true", help=f"render {QUICK_FRACTION:.0%} of the set (for CI)")
    parser.add_argument("--json", default=DEFAULT_JSON, help="where to write the figures")
    args = parser.parse_args()
    fraction = QUICK_FRACTION if args.quick else args.fraction
    if not 0 < fraction <= 1:
        parser.error(f"--fraction must lie in (0, 1]; got {fraction}")
    result = time_render(fraction)
    result.update(
        torch_threads=torch.get_num_threads(),
        cpu_count=os.cpu_count(),
        machine=platform.machine(),
        python=platform.python_version(),
    )
    print(
        f"rendered {result['images']:,} images ({result['fraction']:.1%} of the set) "
        f"in {result['total_seconds']:.2f} s: "
        f"{result['images_per_second']:,.0f} images/s (whole set: {result['projected_full_set_seconds']:.1f} s); "
        f"random batches of {RANDOM_BATCH}: {result['random_batch_images_per_second']:,.0f} images/s"
    )
    write_results(args.json, result)


if __name__ == "__main__":
    main()
