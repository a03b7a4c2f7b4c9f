"""Training throughput of the same VAE four ways, plus the dSprites render time.

A conv VAE (the Decomposition/PartedVAE 64x64 networks, Bernoulli likelihood, analytic
KL, Adam) on dSprites images, trained

- ``torch``: a hand-written PyTorch loop (BCE-with-logits + closed-form KL, one Adam);
- ``svi``: a plain ``pyro.infer.SVI`` loop with ``TraceMeanField_ELBO`` and ``pyro.optim.Adam``;
- ``plain``: the same objective's ``differentiable_loss`` in a plain PyTorch loop with torch's
  Adam (:func:`overhead.plain_loop`, no Lightning);
- ``engine``: ``ppl_vae.fit`` (Lightning, torch Adam, device-resident batches).

The four are timed by ``overhead.measure`` (interleaved step by step in one process,
engine, torch, svi, plain, engine, ...), each round timing ``--steps`` steps after ``--warmup``;
the medians over rounds of each round's median (with min/max) and the paired ratio (median
over all timed steps of ``loop_i / torch_i``) are printed and written as JSON.

    python benchmarks/engine_throughput.py                 # 2-core CPU figures for the README
    python benchmarks/engine_throughput.py --quick         # seconds, for CI (checks the harness)
"""
from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

import torch
from pyro.infer import TraceMeanField_ELBO
from torch.nn import functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))

from dsprites_render import time_render  # noqa: E402
from overhead import (  # noqa: E402
    Workload,
    _gaussian_kl,
    _reparameterised,
    measure,
    paired_ratios,
    print_table,
    summarise,
)
from reporting import machine_description, write_results  # noqa: E402

from ppl_vae.data import DSprites  # noqa: E402
from ppl_vae.models import VAE  # noqa: E402
from ppl_vae.nn import ConvDecoder, ConvEncoder  # noqa: E402

DEFAULT_JSON = Path(__file__).resolve().parent / "results" / "engine_throughput.json"


def vae_workload(images: torch.Tensor, batch_size: int, latent_dim: int = 10) -> Workload:
    """The conv VAE with ``TraceMeanField_ELBO``, and its hand-written iteration."""

    def build() -> tuple[VAE, TraceMeanField_ELBO]:
        torch.manual_seed(0)
        return VAE(ConvEncoder(64), ConvDecoder(latent_dim, 64), latent_dim), TraceMeanField_ELBO()

    def hand_written(vae: VAE, objective: TraceMeanField_ELBO, samplers) -> Callable[[], None]:
        """BCE-with-logits + closed-form KL on the same networks, one foreach Adam."""
        optimizer = torch.optim.Adam(vae.parameters(), lr=5e-4, foreach=True)

        def step() -> None:
            xb = samplers["x"]()["x"]
            loc, scale = vae.head(vae.encoder(xb))
            recon = F.binary_cross_entropy_with_logits(vae.decoder(_reparameterised(loc, scale)), xb, reduction="sum")
            optimizer.zero_grad(set_to_none=True)
            (recon + _gaussian_kl(loc, scale).sum()).backward()
            optimizer.step()

        return step

    return Workload(
        name="vae",
        build=build,
        data={"x": images},
        batch_sizes={"x": batch_size},
        lr=5e-4,
        hand_written=hand_written,
        description={"network": "conv 64x64", "latent_dim": latent_dim, "objective": "TraceMeanField_ELBO"},
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--steps", type=int, default=20, help="timed steps per round")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--render-fraction", type=float, default=1.0)
    parser.add_argument("--quick", action="store_true", help="tiny sizes: checks the harness, not speed")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON)
    args = parser.parse_args()
    if args.quick:
        args.steps, args.warmup, args.rounds, args.render_fraction = 3, 1, 1, 0.01
    torch.set_num_threads(args.threads)
    import logging

    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)

    render = time_render(args.render_fraction)
    print(
        f"dSprites render: {render['images']} images in {render['total_seconds']:.1f} s "
        f"({render['images_per_second']:.0f} images/s; whole set projected {render['projected_full_set_seconds']:.1f} s)"
    )
    x = DSprites().tensors(torch.randint(737_280, (4096,), generator=torch.Generator().manual_seed(0)), dtype=torch.bool)["x"]
    workload = vae_workload(x, args.batch_size)
    per_round = measure(workload, args.steps, args.warmup, args.rounds)
    rows = summarise({name: [statistics.median(r[name]) for r in per_round] for name in per_round[0]}, args.batch_size)
    for name, ratio in paired_ratios(per_round, "torch").items():
        rows[name]["paired_ratio_to_torch"] = ratio
    print(f"\n{args.threads} thread(s), {args.rounds} rounds x {args.steps} steps")
    print_table(f"conv VAE (batch {args.batch_size})", rows)
    payload = {
        "render": render,
        "throughput": rows,
        "settings": vars(args) | {"json": str(args.json)},
        "machine": machine_description(),
    }
    print()
    write_results(args.json, payload)


if __name__ == "__main__":
    main()
