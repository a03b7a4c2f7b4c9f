"""The hand-written floors of ``benchmarks/overhead.py`` optimise the library's objectives: over
many draws their ELBO loss averages to the objective's ``differentiable_loss`` on the same
batches: each draws its own noise, so single draws differ, and the mean difference stays within
four standard errors of 0."""
from __future__ import annotations

import statistics
import sys
from pathlib import Path

import pyro
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import overhead  # noqa: E402

from ppl_vae.infer.iteration import step_inputs  # noqa: E402

DRAWS = 40


def images(n: int, seed: int, shape=(1, 64, 64)) -> torch.Tensor:
    return torch.rand(n, *shape, generator=torch.Generator().manual_seed(seed)) > 0.5


WORKLOADS = {
    "decomposition": lambda: overhead.decomposition_workload(images(64, 0), 8),
    "parted": lambda: overhead.parted_workload(images(64, 0), images(32, 1), torch.arange(32) % 3, 8),
    "contrastive": lambda: overhead.contrastive_workload(
        images(64, 2, (1, 28, 28)).float(), images(64, 3, (1, 28, 28)).float(), 16
    ),
}
ELBO_STEP = {"decomposition": 0, "parted": 1, "contrastive": 0}  # which of an iteration's steps is the ELBO's


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_floor_loss_averages_to_the_objectives_loss_on_the_same_batches(name, monkeypatch):
    workload = WORKLOADS[name]()
    model, objective = workload.build()
    losses: list[torch.Tensor] = []
    monkeypatch.setattr(overhead, "take_step", lambda optimizer, loss: losses.append(loss.detach()))
    floor = workload.floor(model, objective, workload.lr, workload.batches(seed=0))
    by_floor, by_library = [], []
    for _ in range(DRAWS):
        losses.clear()
        floor()
        by_floor.append(float(losses[ELBO_STEP[name]]))
    batches = workload.batches(seed=0)
    with torch.no_grad(), pyro.validation_enabled(False):
        for t in range(DRAWS):
            by_library.append(float(objective.differentiable_loss(model.model, model.guide, **step_inputs(batches(), None),
                                                                  step=t)))
    differences = [a - b for a, b in zip(by_floor, by_library, strict=True)]
    assert statistics.stdev(differences) > 0  # its own draws: the floor is not the library's loss
    assert abs(statistics.mean(differences)) < 4 * statistics.stdev(differences) / DRAWS**0.5

