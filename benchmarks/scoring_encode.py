"""How many images per call the campaign's scoring should hand a convolutional encoder on one CPU core.

The metrics of :mod:`ppl_vae.metrics` draw and encode ``encode_batch_size`` (1,024) images per
``encode`` call. On a CPU the activations of 1,024 dSprites images do not fit the caches, and
the campaign's scoring (``experiments/campaign.py``, :func:`scoring_encoder`) instead calls the
encoder on chunks of 64 images and concatenates the codes. This script measures what that buys
and checks that the codes are the same bits.

For each of the campaign's dSprites encoders (the VAE recipe's, PartedVAE's and the Decomposition
VAE's, untrained, from each recipe's ``build_untrained``) and 1,024 random dSprites images:

- ``whole``: ``model.encode`` on the 1,024 images at once;
- ``chunks of C``: ``model.encode`` on consecutive chunks of C images, concatenated.

Timing: CPU time (``time.process_time``) per image, one thread, the variants interleaved round by
round after a warm-up; printed and written: each variant's median over the rounds and the median
of the paired ratio ``variant_i / whole_i``, and whether the codes equal the whole batch's bits.

    python benchmarks/scoring_encode.py --rounds 10
    python benchmarks/scoring_encode.py --quick --json out.json  # checks the script, not speed
"""
from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
from harness import dsprites_images
from reporting import machine_description, recorded_path, write_results

from ppl_vae.recipes.configs import DecompositionConfig, PartedConfig, VAEConfig

DEFAULT_JSON = Path(__file__).parent / "records" / "scoring_encode.json"
CHUNKS = (16, 32, 64, 128, 256)


def encoders() -> dict[str, torch.nn.Module]:
    """The campaign's dSprites models, untrained, in eval mode."""
    from ppl_vae.recipes import decomposition, parted, vae

    torch.manual_seed(0)
    models = {
        "vae": vae.build_untrained(VAEConfig(), {"shape": [1, 64, 64], "num_points": 1024})[0],
        "parted": parted.build_untrained(PartedConfig(), {"image_shape": [1, 64, 64], "num_classes": 3})[0],
        "decomposition": decomposition.build_untrained(
            DecompositionConfig(dataset="dsprites", latent_dim=10, prior="isotropic", flatten=False, hidden=128,
                                hidden_activation="identity"),
            {"shape": [1, 64, 64], "image_shape": [1, 64, 64]})[0],
    }
    return {name: model.eval() for name, model in models.items()}


def variants(model: torch.nn.Module, chunks: tuple[int, ...]) -> dict[str, Callable[[torch.Tensor], torch.Tensor]]:
    """The whole-batch call and one chunked call per size."""
    found: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {"whole": model.encode}
    for size in chunks:
        found[f"chunks of {size}"] = lambda x, size=size: torch.cat([model.encode(part) for part in x.split(size)])
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--images", type=int, default=1024)
    parser.add_argument("--quick", action="store_true", help="2 rounds of 128 images: checks the script")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON)
    args = parser.parse_args()
    rounds, count = (2, 128) if args.quick else (args.rounds, args.images)
    torch.set_num_threads(1)
    x = dsprites_images(count, seed=0)["x"].float()
    results: dict[str, dict[str, dict[str, float | bool]]] = {}
    with torch.no_grad():
        for name, model in encoders().items():
            calls = variants(model, CHUNKS)
            reference = calls["whole"](x)
            same = {label: torch.equal(call(x), reference) for label, call in calls.items()}
            seconds: dict[str, list[float]] = {label: [] for label in calls}
            for _ in range(rounds + 1):  # the first round warms up
                for label, call in calls.items():
                    start = time.process_time()
                    call(x)
                    seconds[label].append((time.process_time() - start) / count)
            results[name] = {
                label: {
                    "median_ms_per_image": 1e3 * statistics.median(times[1:]),
                    "paired_ratio_to_whole": statistics.median(t / w for t, w in zip(times[1:], seconds["whole"][1:], strict=True)),
                    "same_bits_as_whole": same[label],
                }
                for label, times in seconds.items()
            }
            print(f"{name}:")
            for label, row in results[name].items():
                print(f"  {label:>14}: {row['median_ms_per_image']:.3f} ms/image, "
                      f"{row['paired_ratio_to_whole']:.2f}x whole, same bits {row['same_bits_as_whole']}")
    write_results(args.json, {"script": recorded_path(__file__), "images": count, "rounds": rounds,
                              "machine": machine_description(), "results": results})


if __name__ == "__main__":
    main()
