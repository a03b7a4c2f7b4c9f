"""Training throughput of the same VAE four ways, plus the dSprites render time.

A conv VAE (the Decomposition/PartedVAE 64x64 networks, Bernoulli likelihood, analytic
KL, Adam) on dSprites images, trained

- ``torch``: a hand-written PyTorch loop (BCE-with-logits + closed-form KL, one Adam);
- ``svi``: a plain ``pyro.infer.SVI`` loop with ``TraceMeanField_ELBO`` and ``pyro.optim.Adam``;
- ``plain``: the same objective's ``differentiable_loss`` in a plain PyTorch loop with torch's
  Adam (:func:`harness.plain_loop`, no Lightning);
- ``engine``: ``ppl_vae.fit`` (Lightning, torch Adam, device-resident batches).

The four are timed by ``harness.measure`` (interleaved step by step in one process,
engine, torch, svi, plain, engine, ...), each round timing ``--steps`` steps after ``--warmup``;
the medians over rounds of each round's median (with min/max) and the paired ratio (median
over all timed steps of ``loop_i / torch_i``) are printed and written as JSON.

    python benchmarks/engine_throughput.py                 # 2-core CPU figures
    python benchmarks/engine_throughput.py --quick         # seconds, for CI (checks the harness)
"""
from __future__ import annotations

import argparse
import logging
import statistics
from pathlib import Path

import torch
from dsprites_render import time_render
from harness import Workload, add_timing_arguments, dsprites_images, measure, paired_ratio, print_table, summarise
from overhead import vae_floor
from pyro.infer import TraceMeanField_ELBO
from reporting import machine_description, recorded_path, write_results

from ppl_vae.models import VAE
from ppl_vae.nn import ConvDecoder, ConvEncoder

DEFAULT_JSON = Path(__file__).resolve().parent / "results" / "engine_throughput.json"


def vae_workload(images: torch.Tensor, batch_size: int, latent_dim: int = 10) -> Workload:
    """The conv VAE with ``TraceMeanField_ELBO``; its floor is BCE-with-logits + closed-form KL
    (:func:`overhead.vae_floor`)."""

    def build() -> tuple[VAE, TraceMeanField_ELBO]:
        torch.manual_seed(0)
        return VAE(ConvEncoder(64), ConvDecoder(latent_dim, 64), latent_dim), TraceMeanField_ELBO()

    return Workload("vae", build, {"x": images}, {"x": batch_size}, 5e-4, vae_floor,
                    description={"network": "conv 64x64", "latent_dim": latent_dim, "objective": "TraceMeanField_ELBO"})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch-size", type=int, default=64)
    add_timing_arguments(parser, DEFAULT_JSON, steps=20, warmup=3, rounds=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--render-fraction", type=float, default=1.0)
    args = parser.parse_args()
    if args.quick:
        args.steps, args.warmup, args.rounds, args.render_fraction = 3, 1, 1, 0.01
    torch.set_num_threads(args.threads)
    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)

    render = time_render(args.render_fraction)
    print(
        f"dSprites render: {render['images']} images in {render['total_seconds']:.1f} s "
        f"({render['images_per_second']:.0f} images/s; whole set projected {render['projected_full_set_seconds']:.1f} s)"
    )
    workload = vae_workload(dsprites_images(4096, 0)["x"], args.batch_size)
    per_round = measure(workload, args.steps, args.warmup, args.rounds)
    rows = summarise({name: [statistics.median(r[name]) for r in per_round] for name in per_round[0]}, args.batch_size)
    for name, row in rows.items():
        row["paired_ratio_to_torch"] = paired_ratio(per_round, name, "torch")
    print(f"\n{args.threads} thread(s), {args.rounds} rounds x {args.steps} steps")
    print_table(f"conv VAE (batch {args.batch_size})", rows)
    payload = {
        "render": render,
        "throughput": rows,
        "settings": vars(args) | {"json": recorded_path(args.json)},
        "machine": machine_description(),
    }
    print()
    write_results(args.json, payload)


if __name__ == "__main__":
    main()
