"""Peak memory and time of the whole-data passes against data size.

Two passes read a whole data set rather than a minibatch:

- ``factor_score``: the Factor score's encoding of up to all 737,280 dSprites images (the
  PartedVAE authors' protocol). Measured by :mod:`factor_score_memory` (its rows are included
  as they are: a fixed linear encoder, so the figures are the metric's and the renderer's).
- ``inclusive_kl``: the Decomposition objective's full-data inclusive KL(p(z) || q(z)) with
  ``q(z) = (1/N) sum_j q(z | x_j)`` over N encodings, for B prior draws per step.

  * ``aggregate`` rows: :func:`ppl_vae.infer.inclusive_kl` on N precomputed encodings
    ``(N, D)`` that require gradients, forward and backward, with ``chunk_size`` encodings per
    block (:func:`~ppl_vae.infer.aggregate_log_density` recomputes each block in the backward
    pass), against one unchunked block (``chunk_size >= N``). N up to 737,280.
  * ``elbo_step`` rows: one ``differentiable_loss`` + ``backward`` of
    :class:`~ppl_vae.infer.decomposition.DecompositionELBO` called with
    ``aggregate_data={"x": X}`` of N points (the pinwheel MLP, 2-d data and latents, the paper's App. B setting grown to
    N points): the guide re-encodes all N points with gradients every step.

Each measurement runs in a fresh child process (fork) so that its peak resident memory is
its own: ``rss_delta_mib`` is ru_maxrss after the pass minus ru_maxrss before it (inputs
already built), with glibc's mmap threshold fixed (:func:`fix_mmap_threshold`) so that freed
large blocks leave the process. One torch thread.

    python benchmarks/whole_data_passes.py              # the figures of docs/performance.md
    python benchmarks/whole_data_passes.py --quick --json out.json
"""
from __future__ import annotations

import argparse
import ctypes
import multiprocessing
import resource
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))

import factor_score_memory  # noqa: E402
from reporting import machine_description, recorded_path, write_results  # noqa: E402

from ppl_vae.distributions import IsotropicGaussianPrior  # noqa: E402
from ppl_vae.infer.decomposition import DecompositionELBO  # noqa: E402
from ppl_vae.infer.divergences import inclusive_kl  # noqa: E402
from ppl_vae.models.decomposition import DecompositionVAE  # noqa: E402
from ppl_vae.nn import MLP  # noqa: E402

DEFAULT_JSON = Path(__file__).resolve().parent / "results" / "whole_data_passes.json"
DSPRITES_IMAGES = 737_280
M_MMAP_THRESHOLD = -3  # mallopt parameter number in glibc's malloc.h


def maxrss_mib() -> float:
    """Peak resident set size of this process so far, MiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def aggregate_pass(config: dict[str, Any]) -> dict[str, Any]:
    """:func:`inclusive_kl` of N(0, I) against N random encodings ``(N, D)``, forward and backward."""
    torch.manual_seed(0)
    size, dim = config["num_encodings"], config["latent_dim"]
    loc = torch.randn(size, dim, requires_grad=True)
    raw_scale = torch.zeros(size, dim, requires_grad=True)
    prior = IsotropicGaussianPrior(dim)()
    baseline = maxrss_mib()
    start = time.perf_counter()
    estimate = inclusive_kl(
        prior, loc, nn.functional.softplus(raw_scale), num_samples=config["prior_draws"], chunk_size=config["chunk_size"]
    )
    estimate.backward()
    return {"seconds": time.perf_counter() - start, "rss_delta_mib": maxrss_mib() - baseline, "value": float(estimate.detach())}


def elbo_step_pass(config: dict[str, Any]) -> dict[str, Any]:
    """One step of DecompositionELBO's inclusive KL over ``aggregate_data`` of N 2-d points."""
    torch.manual_seed(0)
    size, batch = config["num_encodings"], config["prior_draws"]
    data = torch.randn(size, 2)
    model = DecompositionVAE(MLP([2, 100], final_activation=nn.ReLU()), MLP([2, 100, 2]), 2,
                             likelihood="gaussian", likelihood_scale=0.1)
    objective = DecompositionELBO(alpha=1.0, divergence="inclusive_kl", chunk_size=config["chunk_size"])
    baseline = maxrss_mib()
    start = time.perf_counter()
    loss = objective.differentiable_loss(model.model, model.guide, x=data[:batch], aggregate_data={"x": data})
    loss.backward()
    return {"seconds": time.perf_counter() - start, "rss_delta_mib": maxrss_mib() - baseline, "value": float(loss.detach())}


PASSES: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "aggregate": aggregate_pass,
    "elbo_step": elbo_step_pass,
}


def fix_mmap_threshold(threshold: int = 128 * 1024) -> bool:
    """Make glibc serve every allocation above ``threshold`` bytes by mmap and return it to the
    system when freed (``mallopt(M_MMAP_THRESHOLD)``), so that peak RSS measures peak live
    memory rather than what glibc's adaptive threshold kept in its heap. False where there is
    no glibc (the figures are then upper bounds)."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    return bool(libc.mallopt(M_MMAP_THRESHOLD, threshold))


def _child(config: dict[str, Any], queue: multiprocessing.Queue) -> None:
    torch.set_num_threads(1)
    fix_mmap_threshold()
    run = PASSES[config["pass"]]
    run({**config, "num_encodings": 64, "chunk_size": 32, "prior_draws": 8})  # lazy imports and allocator warm-up
    queue.put(run(config))


def in_fresh_process(config: dict[str, Any]) -> dict[str, Any]:
    """``PASSES[config["pass"]](config)`` in a forked child, so that ru_maxrss is its own."""
    context = multiprocessing.get_context(factor_score_memory.start_method())
    queue = context.Queue()
    process = context.Process(target=_child, args=(config, queue))
    process.start()
    figures = queue.get()
    process.join()
    return {**config, **{key: round(value, 4) for key, value in figures.items()}}


def kl_configurations(quick: bool, chunk_size: int, prior_draws: int) -> list[dict[str, Any]]:
    """Chunked and unchunked aggregate passes at growing N, then ELBO steps at growing N."""
    if quick:
        sizes, unchunked, elbo_sizes = [256, 1024], [1024], [256, 1024]
    else:
        sizes = [4_096, 32_768, 262_144, DSPRITES_IMAGES]
        unchunked = [32_768, 262_144]
        elbo_sizes = [400, 4_000, 40_000, 200_000]
    common = {"latent_dim": 10, "prior_draws": prior_draws}
    rows = [{"pass": "aggregate", "num_encodings": n, "chunk_size": chunk_size, **common} for n in sizes]
    rows += [{"pass": "aggregate", "num_encodings": n, "chunk_size": n, **common} for n in unchunked]
    rows += [
        {"pass": "elbo_step", "num_encodings": n, "chunk_size": chunk_size, "latent_dim": 2, "prior_draws": min(400, n)}
        for n in elbo_sizes
    ]
    return rows


def main(argv: list[str] | None = None) -> int:
    """Run both benchmarks, print the tables, write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes only (CI, seconds)")
    parser.add_argument("--chunk-size", type=int, default=4096)
    parser.add_argument("--prior-draws", type=int, default=64, help="B, prior samples per KL estimate")
    parser.add_argument("--skip-factor-score", action="store_true")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON)
    args = parser.parse_args(argv)
    chunk_size = min(args.chunk_size, 512) if args.quick else args.chunk_size

    factor_rows = []
    if not args.skip_factor_score:
        print("Factor score (benchmarks/factor_score_memory.py)")
        factor_score_memory.print_header()
        for config in factor_score_memory.configurations("synthetic", args.quick, 10, 1024):
            factor_rows.append(factor_score_memory.measure_in_fresh_process(config))
            factor_score_memory.print_row(factor_rows[-1])

    print("\ninclusive KL(p(z) || q(z)) over N encodings")
    print(f"{'pass':10s} {'N':>8s} {'chunk':>8s} {'B':>5s} {'seconds':>8s} {'rss MiB':>9s}")
    kl_rows = []
    for config in kl_configurations(args.quick, chunk_size, args.prior_draws):
        kl_rows.append(in_fresh_process(config))
        row = kl_rows[-1]
        print(
            f"{row['pass']:10s} {row['num_encodings']:8d} {row['chunk_size']:8d} {row['prior_draws']:5d} "
            f"{row['seconds']:8.2f} {row['rss_delta_mib']:9.1f}",
            flush=True,
        )
    payload = {
        "factor_score": factor_rows,
        "inclusive_kl": kl_rows,
        "settings": vars(args) | {"json": recorded_path(args.json), "chunk_size": chunk_size},
        "machine": machine_description(torch_threads=1),
    }
    print()
    write_results(args.json, payload)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
