"""The baselines' batch-level terms under data parallelism (2 CPU processes, gloo): two processes
with B rows each give the loss and the gradients of one process with the 2B rows, because the
terms take the aggregate posterior and the permutations over the global batch (within each
particle's batch under vectorised particles)."""
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from test_baselines import term_sites, vectorized_term_sites

from ppl_vae.infer import DIPCovariance, GlobalBatch, KLDecomposition, TermSites
from ppl_vae.infer.total_correlation import density_ratio_loss
from ppl_vae.nn import TCDiscriminator

WORLD, ROWS, D = 2, 6, 3
PARTICLES = 3

TERMS = {
    "beta_tcvae_mws": lambda: KLDecomposition("z", data_size=40, beta=6.0, alpha=0.5, gamma=2.0),
    "beta_tcvae_mss": lambda: KLDecomposition("z", data_size=40, beta=6.0, estimator="mss"),
    "dip_i": lambda: DIPCovariance("z", 2.0, 20.0, "i"),
    "dip_ii": lambda: DIPCovariance("z", 2.0, 2.0, "ii"),
}


def global_inputs() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(11)
    loc = torch.randn(WORLD * ROWS, D, generator=generator, dtype=torch.float64)
    scale = 0.3 + torch.rand(WORLD * ROWS, D, generator=generator, dtype=torch.float64)
    noise = torch.randn(WORLD * ROWS, D, generator=generator, dtype=torch.float64)
    return loc, scale, noise


def particle_noise() -> torch.Tensor:
    """The noise of PARTICLES vectorised draws ``(P, WORLD * ROWS, D)``."""
    return torch.randn(PARTICLES, WORLD * ROWS, D, generator=torch.Generator().manual_seed(12), dtype=torch.float64)


def discriminator() -> TCDiscriminator:
    torch.manual_seed(2)
    return TCDiscriminator("mlp", (8,)).build(D).double()


def losses_and_gradients(rows: slice, global_batch: GlobalBatch) -> dict[str, dict[str, torch.Tensor]]:
    """Each term's factor ``N v`` (N these rows) and its gradients w.r.t. these rows' loc and
    scale; the FactorVAE discriminator's loss on these rows."""
    every_loc, every_scale, every_noise = global_inputs()
    results = {}
    draws = {"": lambda loc, scale: term_sites(loc, scale, every_noise[rows]),
             "_vectorized_particles": lambda loc, scale: vectorized_term_sites(loc, scale, particle_noise()[:, rows])}
    for name, make in TERMS.items():
        for suffix, traced in draws.items():
            loc, scale = every_loc[rows].clone().requires_grad_(), every_scale[rows].clone().requires_grad_()
            sites = traced(loc, scale)
            sites = TermSites(sites.guide_trace, sites.model_sites, None, sites.guide, global_batch=global_batch)
            term = make()
            value, _ = term.evaluate(sites)
            loss = term.num_points(sites) * value
            loss.backward()
            results[name + suffix] = {"loss": loss.detach(), "loc": loc.grad, "scale": scale.grad}
    z = every_loc[rows] + every_scale[rows] * every_noise[rows]
    network = discriminator()
    torch.manual_seed(5)  # the permutations are drawn on rank 0 and broadcast
    results["factor_discriminator"] = {"loss": density_ratio_loss(network, z, (1,) * D, global_batch)}
    return results


def _worker(rank: int, init_file: str, out_dir: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=WORLD)
    try:
        results = losses_and_gradients(slice(rank * ROWS, (rank + 1) * ROWS), GlobalBatch())
        torch.save(results, Path(out_dir) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def two_processes(tmp_path_factory) -> list[dict]:
    folder = tmp_path_factory.mktemp("baselines")
    mp.start_processes(_worker, args=(str(folder / "init"), str(folder)), nprocs=WORLD, start_method="fork")
    return [torch.load(folder / f"rank{rank}.pt", weights_only=False) for rank in range(WORLD)]


@pytest.mark.parametrize("name", sorted([*TERMS, *(f"{name}_vectorized_particles" for name in TERMS)]))
def test_two_processes_give_the_loss_and_gradients_of_one_with_the_global_batch(name, two_processes):
    single = losses_and_gradients(slice(None), GlobalBatch())[name]
    ranks = [results[name] for results in two_processes]
    torch.testing.assert_close(sum(r["loss"] for r in ranks), single["loss"])
    for part in ("loc", "scale"):
        if single[part] is None:
            assert all(r[part] is None for r in ranks)
            continue
        torch.testing.assert_close(torch.cat([r[part] for r in ranks]), single[part])


def test_factor_discriminator_loss_over_two_processes_is_the_loss_over_the_global_batch(two_processes):
    single = losses_and_gradients(slice(None), GlobalBatch())["factor_discriminator"]
    mean = sum(results["factor_discriminator"]["loss"] for results in two_processes) / WORLD
    torch.testing.assert_close(mean, single["loss"])
