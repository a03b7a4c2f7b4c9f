"""Training throughput of the same VAE three ways, plus the dSprites render time.

A conv VAE (the Decomposition/PartedVAE 64x64 networks, Bernoulli likelihood, analytic
KL, Adam) on dSprites images, trained

- ``torch``: a hand-written PyTorch loop (BCE-with-logits + closed-form KL, one Adam);
- ``svi``: a plain ``pyro.infer.SVI`` loop with ``TraceMeanField_ELBO`` and ``pyro.optim.Adam``;
- ``engine``: ``ppl_vae.fit`` (Lightning, torch Adam, device-resident batches).

The three are interleaved step by step in one process (engine, torch, svi, engine, ...,
``overhead.InterleavedTimer``), each round timing ``--steps`` steps after ``--warmup``;
the medians over rounds of each round's median (with min/max) and the paired ratio (median
over all timed steps of ``loop_i / torch_i``) are printed and written as JSON.

    python benchmarks/engine_throughput.py                 # 2-core CPU figures for the README
    python benchmarks/engine_throughput.py --quick         # seconds, for CI (checks the harness)
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

import pyro
import torch
from pyro.infer import SVI, TraceMeanField_ELBO
from torch.nn import functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))

from dsprites_render import time_render  # noqa: E402
from overhead import InterleavedTimer, own_param_store, paired_ratios  # noqa: E402

from ppl_vae import fit  # noqa: E402
from ppl_vae.data import DSprites  # noqa: E402
from ppl_vae.models import VAE  # noqa: E402
from ppl_vae.nn import ConvDecoder, ConvEncoder  # noqa: E402

DEFAULT_JSON = Path(__file__).resolve().parent / "results" / "engine_throughput.json"


def make_vae(latent_dim: int, seed: int) -> VAE:
    torch.manual_seed(seed)
    return VAE(ConvEncoder(64), ConvDecoder(latent_dim, 64), latent_dim)


def torch_loop(x: torch.Tensor, batch: int, latent_dim: int) -> Callable[[], None]:
    """One step of a hand-written loop on the same networks and loss."""
    vae = make_vae(latent_dim, 0)
    optimizer = torch.optim.Adam(vae.parameters(), lr=5e-4, foreach=True)
    generator = torch.Generator().manual_seed(0)

    def step() -> None:
        xb = x[torch.randint(len(x), (batch,), generator=generator)].float()
        loc, scale = vae.head(vae.encoder(xb))
        z = loc + scale * torch.randn_like(loc)
        logits = vae.decoder(z)
        recon = F.binary_cross_entropy_with_logits(logits, xb, reduction="sum")
        kl = 0.5 * (loc.pow(2) + scale.pow(2) - 1 - 2 * scale.log()).sum()
        optimizer.zero_grad(set_to_none=True)
        (recon + kl).backward()
        optimizer.step()

    return step


def svi_loop(x: torch.Tensor, batch: int, latent_dim: int) -> Callable[[], None]:
    """One step of a plain SVI loop (validation off, as in training), with a param store of
    its own (the engine's model registers the same names)."""
    contents: tuple[dict, dict, dict] = ({}, {}, {})
    vae = make_vae(latent_dim, 0)
    svi = SVI(vae.model, vae.guide, pyro.optim.Adam({"lr": 5e-4}), TraceMeanField_ELBO())
    generator = torch.Generator().manual_seed(0)

    def step() -> None:
        with pyro.validation_enabled(False), own_param_store(contents):
            svi.step(x[torch.randint(len(x), (batch,), generator=generator)].float())

    return step


def measure_round(x: torch.Tensor, batch: int, steps: int, warmup: int, latent_dim: int) -> dict[str, list[float]]:
    """Seconds of each timed step of the three loops, interleaved step by step inside the
    engine's run (``overhead.InterleavedTimer``: engine, torch, svi, engine, ...)."""
    pyro.clear_param_store()
    timer = InterleavedTimer({"torch": torch_loop(x, batch, latent_dim), "svi": svi_loop(x, batch, latent_dim)}, warmup)
    fit(
        make_vae(latent_dim, 0),
        TraceMeanField_ELBO(),
        {"x": x},
        steps=warmup + steps,
        batch_size=batch,
        lr=5e-4,
        progress_bar=False,
        log_every_n_steps=max(steps, 1),
        callbacks=[timer],
    )
    pyro.clear_param_store()
    return {name: timer.seconds[name] for name in ("torch", "svi", "engine")}


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
    latent_dim = 10
    per_round = []
    for round_index in range(args.rounds):
        per_round.append(measure_round(x, args.batch_size, args.steps, args.warmup, latent_dim))
        line = ", ".join(f"{name} {1000 * statistics.median(v):.1f}" for name, v in per_round[-1].items())
        print(f"round {round_index + 1}/{args.rounds} (median ms/step): {line}", flush=True)
    per_step = {name: [statistics.median(seconds[name]) for seconds in per_round] for name in per_round[0]}
    paired = paired_ratios(per_round, "torch")

    base = statistics.median(per_step["torch"])
    rows = {}
    print(f"\nbatch {args.batch_size}, {args.threads} threads, {args.rounds} rounds x {args.steps} steps")
    print(f"{'loop':8s} {'median ms/step':>15s} {'min':>8s} {'max':>8s} {'images/s':>10s} {'vs torch':>9s} {'paired':>7s}")
    for name, values in per_step.items():
        median = statistics.median(values)
        rows[name] = {
            "median_seconds_per_step": median,
            "min_seconds_per_step": min(values),
            "max_seconds_per_step": max(values),
            "images_per_second": args.batch_size / median,
            "ratio_to_torch": median / base,
            "paired_ratio_to_torch": paired[name],
        }
        print(
            f"{name:8s} {1000 * median:15.1f} {1000 * min(values):8.1f} {1000 * max(values):8.1f} "
            f"{args.batch_size / median:10.0f} {median / base:9.3f} {paired[name]:7.3f}"
        )
    payload = {
        "render": render,
        "throughput": rows,
        "settings": vars(args) | {"json": str(args.json)},
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "torch": torch.__version__, "pyro": pyro.__version__},
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
