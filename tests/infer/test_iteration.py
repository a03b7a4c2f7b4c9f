"""TrainingIteration: the auxiliary steps and the ELBO step each update only their own
parameters, no gradient leaks from one step into the next, and plain SVI with a classifier step
taken by hand does leak (the bug it exists to prevent)."""
import pyro
import pytest
import torch
from pyro.infer import SVI

from ppl_vae.infer import ContrastiveELBO, LinearCapacity, PartedELBO, TrainingIteration
from ppl_vae.infer.baselines import factor_vae
from ppl_vae.models import VAE, ContrastiveVAE, PartedVAE
from ppl_vae.nn import MLP, mlp_decoder

EVENT = (12,)


def binary(n: int, seed: int = 1) -> torch.Tensor:
    return (torch.rand(n, *EVENT, generator=torch.Generator().manual_seed(seed)) > 0.5).float()


def parted() -> tuple[PartedVAE, PartedELBO, dict]:
    torch.manual_seed(0)
    model = PartedVAE.mlp(EVENT, z_dim=2, num_classes=3, u_dims=2, hidden=(16,))
    objective = PartedELBO(LinearCapacity(0, 5, 10), LinearCapacity(0, 5, 10))
    x = binary(16)
    return model, objective, {"x": x, "labelled": {"x": x[:8], "y": torch.arange(8) % 3}}


def test_each_step_moves_only_its_own_parameters():
    model, objective, batch = parted()
    iteration = TrainingIteration(model, objective, lr=1e-2)
    classifier = {id(p) for p in model.classifier_parameters()}
    # the classifier step alone: only the encoder trunk and class heads move
    (step,), optimizer = iteration.steps, iteration.optimizers[1]
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    iteration.take_step(optimizer, step.loss(**batch["labelled"]))
    moved = {name for name, p in model.named_parameters() if not torch.equal(p, before[name])}
    assert moved and all(id(dict(model.named_parameters())[name]) in classifier for name in moved)


def test_no_gradient_of_one_step_reaches_the_next_steps_update():
    """The ELBO step's update equals the update from the ELBO's own gradient alone."""
    model, objective, batch = parted()
    iteration = TrainingIteration(model, objective, lr=1e-2, optimizer=lambda params, lr: torch.optim.SGD(params, lr=lr))
    reference, _, _ = parted()
    reference.load_state_dict(model.state_dict())
    pyro.set_rng_seed(4)
    iteration(batch, 0)
    # the same two steps by hand, the ELBO's gradient computed on fresh .grad
    classifier = torch.optim.SGD(list(reference.classifier_parameters()), lr=1e-2)
    elbo = torch.optim.SGD(reference.parameters(), lr=1e-2)
    pyro.set_rng_seed(4)
    loss = objective.auxiliary_steps(reference)[0].loss(**batch["labelled"])
    classifier.zero_grad()
    loss.backward()
    classifier.step()
    elbo.zero_grad(set_to_none=True)
    objective.differentiable_loss(reference.model, reference.guide, x=batch["x"], step=0).backward()
    elbo.step()
    for key, value in model.state_dict().items():
        torch.testing.assert_close(value, reference.state_dict()[key])


def test_plain_svi_after_a_classifier_step_taken_by_hand_leaks_its_gradients():
    """What TrainingIteration prevents: SVI adds to gradients it did not make."""
    leaky, objective, batch = parted()
    clean, _, _ = parted()
    clean.load_state_dict(leaky.state_dict())
    objective.auxiliary_steps(leaky)[0].loss(**batch["labelled"]).backward()  # a classifier step without zero_grad after
    for model in (leaky, clean):
        pyro.set_rng_seed(2)
        SVI(model.model, model.guide, pyro.optim.SGD({"lr": 1.0}), objective).step(batch["x"], step=0)
    differs = {n for n, p in leaky.named_parameters() if not torch.equal(p, clean.state_dict()[n])}
    assert differs and all(n.startswith(("encoder", "class_heads")) for n in differs)


def test_the_discriminator_step_after_the_elbo_trains_only_the_discriminator():
    torch.manual_seed(0)
    model = ContrastiveVAE.mlp(EVENT, hidden=16)
    objective = ContrastiveELBO(gamma=1.0, discriminator="mlp", discriminator_hidden=(8,))
    iteration = TrainingIteration(model, objective, lr=1e-2)
    batch = {"target": binary(8), "background": binary(6, 2)}
    before = {name: p.detach().clone() for name, p in objective.discriminator.named_parameters()}
    values = iteration(batch, 0)
    assert {"elbo_loss", "discriminator_loss", "total_correlation", "reconstruction"} <= set(values)
    assert any(not torch.equal(p, before[n]) for n, p in objective.discriminator.named_parameters())


def test_a_step_that_names_its_adam_betas_gets_them_and_the_others_keep_the_default():
    """FactorVAE's discriminator is trained by Adam with betas (0.5, 0.9), the VAE by the default."""
    torch.manual_seed(0)
    model = VAE(MLP([EVENT[0], 8]), mlp_decoder(3, [8], EVENT), latent_dim=3)
    objective = factor_vae(10.0, discriminator_hidden=(8,), discriminator_betas=(0.5, 0.9), input_dim=3)
    elbo, discriminator = TrainingIteration(model, objective, lr=1e-2).optimizers
    assert elbo.param_groups[0]["betas"] == (0.9, 0.999)
    assert discriminator.param_groups[0]["betas"] == (0.5, 0.9)
    assert discriminator.param_groups[0]["params"] == list(objective.term("total_correlation").discriminator.parameters())


@pytest.mark.parametrize("betas", [(0.5,), (0.5, 1.0), "0.5, 0.9", (float("nan"), 0.9)])
def test_bad_discriminator_betas_are_refused_by_name(betas):
    with pytest.raises(ValueError, match="discriminator_betas must be"):
        factor_vae(10.0, discriminator_betas=betas)


def test_training_iterations_lower_the_loss():
    model, objective, batch = parted()
    iteration = TrainingIteration(model, objective, lr=1e-2)
    losses = []
    for step in range(40):
        losses.append(float(iteration(batch, step)["elbo_loss"]))
    assert sum(losses[-5:]) < sum(losses[:5])


def test_bad_settings_name_the_argument():
    model, objective, batch = parted()
    with pytest.raises(ValueError, match="lr"):
        TrainingIteration(model, objective, lr=float("inf"))
    with pytest.raises(ValueError, match="labelled"):
        TrainingIteration(model, objective)({"x": batch["x"]}, 0)
