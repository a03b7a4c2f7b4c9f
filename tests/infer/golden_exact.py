"""Objectives whose every output is pinned in ``golden_exact.pt``: the cases of
``golden_cases.py``, the presets and ``MeanFieldELBO`` with several particles, and a user's own
Pyro program (a subsampled, scaled plate, a latent whose KL has no closed form, an auxiliary
guide site) with terms, sequential and vectorised particles, and an autoguide messenger.
``outputs`` computes what the file holds, and ``numerics`` what decides its bits besides the code.

The pins were first recorded at commit d71d545, before ``MeanFieldELBO`` was rebuilt on Pyro's
public hooks, and the rebuilt objectives kept them bit for bit on that machine. They were
recorded again on a machine with other CPU kernels (AVX-512), where the same code's outputs
differed from the first recording by float32 rounding only (at most 3e-7 of a tensor's
largest value; 6e-6 relative on one logged Monte Carlo estimate)."""
from __future__ import annotations

import platform
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyro
import pyro.distributions as dist
import torch
from golden_cases import CASES, EVENT, _binary, _decomposition, _parted, _small_vae, _vae_beta, named_parameters
from pyro import poutine
from pyro.infer.autoguide import AutoNormalMessenger
from torch import nn

from ppl_vae.distributions import IsotropicGaussianPrior
from ppl_vae.infer import Capacity, ContrastiveELBO, LinearCapacity, MeanFieldELBO, PartedELBO
from ppl_vae.models import VAE, ContrastiveVAE


class UserProgram(nn.Module):
    """A user's own model and guide: a global latent w (Laplace prior, Normal guide: no closed-form
    KL), a local z under a subsampled plate scaled by ``scale``, and an auxiliary guide site."""

    def __init__(self) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(5)
        self.register_buffer("data", torch.randn(10, 2, generator=generator))
        self.loc = nn.Parameter(0.5 * torch.randn(10, 2, generator=generator))
        self.log_scale = nn.Parameter(torch.full((10, 2), -1.0))
        self.w_loc = nn.Parameter(torch.tensor([0.3, -0.2]))

    def model(self, subsample_size: int | None = 4, scale: float = 2.5) -> None:
        w = pyro.sample("w", dist.Laplace(torch.zeros(2), 1.0).to_event(1))
        with pyro.plate("data", 10, subsample_size=subsample_size) as index, poutine.scale(scale=scale):
            z = pyro.sample("z", dist.Normal(torch.zeros(len(index), 2), 1.0).to_event(1))
            pyro.sample("x", dist.Normal(z + w, 0.5).to_event(1), obs=self.data[index])

    def guide(self, subsample_size: int | None = 4, scale: float = 2.5) -> None:
        pyro.module("program", self)
        pyro.sample("w", dist.Normal(self.w_loc, 0.3).to_event(1))
        with pyro.plate("data", 10, subsample_size=subsample_size) as index, poutine.scale(scale=scale):
            pyro.sample("z", dist.Normal(self.loc[index], self.log_scale[index].exp()).to_event(1))
            pyro.sample("aux", dist.Normal(self.loc[index].sum(-1), 1.0), infer={"is_auxiliary": True})


def _capacities() -> list[Capacity]:
    return [Capacity("z", 2.0, LinearCapacity(0.0, 3.0, 100)), Capacity("w", 0.5, LinearCapacity(1.0, 2.0, 100))]


def _user_program(objective: MeanFieldELBO, messenger: bool = False, **kwargs: Any):
    program = UserProgram()
    params = dict(program.named_parameters())
    guide: Callable = program.guide
    if messenger:
        guide = AutoNormalMessenger(program.model)
        pyro.set_rng_seed(3)
        guide(**kwargs)  # builds its parameters
        params.update({f"guide.{name}": p for name, p in guide.named_parameters()})
    return program.model, guide, objective, {**kwargs, "step": 40}, params


def _library(build: Callable[[], tuple], objective: Any = None):
    """A case of ``golden_cases`` (optionally with another objective)."""
    model, case_objective, batch, step = build()
    objective = case_objective if objective is None else objective
    return model.model, model.guide, objective, {**batch, "step": step}, named_parameters(model, objective)


def _contrastive_particles():
    torch.manual_seed(0)
    model = ContrastiveVAE.mlp(EVENT, hidden=16, target_size=50, background_size=80)
    objective = ContrastiveELBO(gamma=2.5, discriminator="mlp", discriminator_hidden=(8,), num_particles=3)
    torch.manual_seed(1)
    objective.auxiliary_steps(model)
    batch = {"target": _binary(8, 2), "background": _binary(10, 3), "step": 0}
    return model.model, model.guide, objective, batch, named_parameters(model, objective)


def _vae(objective: MeanFieldELBO):
    model = _small_vae(VAE, IsotropicGaussianPrior(2))
    return model.model, model.guide, objective, {"x": _binary(16, 1), "step": 40}, dict(model.named_parameters())


EXACT_CASES: dict[str, Callable[[], tuple]] = {
    **{name: (lambda build=build: _library(build)) for name, build in CASES.items()},
    "parted_labelled_particles": lambda: _library(lambda: _parted(3, 2, True, 50), PartedELBO(
        z_capacity=LinearCapacity(0, 10, 100), u_capacity=LinearCapacity(0, 4, 100), num_particles=3)),
    "contrastive_particles": _contrastive_particles,
    "decomposition_particles": lambda: _library(lambda: _decomposition(
        lambda: IsotropicGaussianPrior(2), beta=0.5, alpha=10.0, num_particles=3)),
    "vae_beta_particles": lambda: _library(_vae_beta, MeanFieldELBO(beta=4.0, num_particles=3)),
    "vae_capacity": lambda: _vae(MeanFieldELBO(terms=[Capacity("z", 5.0, LinearCapacity(0.0, 3.0, 100))])),
    "vae_plain": lambda: _vae(MeanFieldELBO()),
    "user_program": lambda: _user_program(MeanFieldELBO()),
    "user_program_full_batch": lambda: _user_program(MeanFieldELBO(beta=2.0), subsample_size=None, scale=1.0),
    "user_program_terms_particles": lambda: _user_program(MeanFieldELBO(beta=0.5, terms=_capacities(), num_particles=3)),
    "user_program_terms_vectorised": lambda: _user_program(MeanFieldELBO(
        beta=0.5, terms=_capacities(), num_particles=3, vectorize_particles=True, max_plate_nesting=1)),
    "user_program_terms_vectorised_guessed_nesting": lambda: _user_program(MeanFieldELBO(
        terms=_capacities()[:1], num_particles=3, vectorize_particles=True)),
    "user_program_messenger_particles": lambda: _user_program(
        MeanFieldELBO(num_particles=2), messenger=True, subsample_size=None, scale=1.0),
}


def _grads(loss: torch.Tensor, params: dict[str, nn.Parameter]) -> dict[str, torch.Tensor]:
    grads = torch.autograd.grad(loss, list(params.values()), allow_unused=True)
    return {name: (g if g is not None else torch.zeros_like(p)) for (name, p), g in zip(params.items(), grads, strict=True)}


def _detached(values: dict[str, Any]) -> dict[str, Any]:
    return {name: torch.as_tensor(value).detach().clone() for name, value in values.items()}


def numerics() -> dict[str, str]:
    """What decides the bits of a float32 result besides the code: torch's version, the CPU
    kernels it dispatches to (its capability), and the processor (model name and instruction-set
    flags, from ``/proc/cpuinfo`` where there is one)."""
    processor = platform.processor()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        first = cpuinfo.read_text().split("\n\n")[0]
        pairs = (line.split(":", 1) for line in first.splitlines() if ":" in line)
        fields = {key.strip(): value.strip() for key, value in pairs}
        processor = f"{fields.get('model name', '')} | {' '.join(sorted(fields.get('flags', '').split()))}"
    return {"torch": str(torch.__version__), "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "processor": processor}


def outputs(model: Callable, guide: Callable, objective: Any, kwargs: dict, params: dict[str, nn.Parameter]) -> dict:
    """Every output of the objective at seed 7: ``differentiable_loss`` (value, gradients,
    ``logged``), ``training_loss`` (value, logged values, step arguments), ``loss`` (a float,
    and ``logged``) and ``loss_and_grads`` (a float, and the gradients it leaves)."""
    result: dict[str, Any] = {"params": {name: p.detach().clone() for name, p in params.items()}}
    pyro.set_rng_seed(7)
    loss = objective.differentiable_loss(model, guide, **kwargs)
    result["differentiable_loss"] = {"loss": loss.detach(), "grads": _grads(loss, params), "logged": _detached(objective.logged)}
    pyro.set_rng_seed(7)
    training = objective.training_loss(model, guide, **kwargs)
    result["training_loss"] = {
        "loss": training.loss.detach(),
        "grads": _grads(training.loss, params),
        "logged": _detached(training.logged),
        "step_arguments": {step: _detached({name: value for name, value in arguments.items() if name != "global_batch"})
                           for step, arguments in training.step_arguments.items()},
    }
    pyro.set_rng_seed(7)
    value = objective.loss(model, guide, **kwargs)
    result["loss"] = {"loss": torch.tensor(value, dtype=torch.float64), "type": type(value).__name__,
                      "logged": _detached(objective.logged)}
    for p in params.values():
        p.grad = None
    pyro.set_rng_seed(7)
    value = objective.loss_and_grads(model, guide, **kwargs)
    result["loss_and_grads"] = {
        "loss": torch.tensor(value, dtype=torch.float64), "type": type(value).__name__,
        "grads": {name: (p.grad.clone() if p.grad is not None else torch.zeros_like(p)) for name, p in params.items()},
        "logged": _detached(objective.logged),
    }
    for p in params.values():
        p.grad = None
    return result


if __name__ == "__main__":  # records golden_exact.pt
    pyro.enable_validation(True)
    torch.set_num_threads(1)
    recorded = {}
    for name, build in sorted(EXACT_CASES.items()):
        pyro.clear_param_store()
        pyro.set_rng_seed(0)
        recorded[name] = outputs(*build())
    torch.save({"numerics": numerics(), "cases": recorded}, Path(__file__).with_name("golden_exact.pt"))
