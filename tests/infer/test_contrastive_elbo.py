"""ContrastiveELBO: the TC factor, the discriminator's separation from the VAE, the TC estimate."""
import dataclasses

import pyro
import pytest
import torch
from pyro import poutine
from pyro.infer import SVI, TraceMeanField_ELBO

import ppl_vae
from ppl_vae.infer import TrainingIteration
from ppl_vae.infer.contrastive import ContrastiveELBO, discriminator_loss
from ppl_vae.models.contrastive import ContrastiveVAE
from ppl_vae.nn import TCDiscriminator

FEATURES = 10


def small_model() -> ContrastiveVAE:
    return ContrastiveVAE.mlp((FEATURES,), 2, 2, hidden=8, likelihood="gaussian", likelihood_scale=0.5,
                              target_size=64, background_size=32)


def batch() -> dict[str, torch.Tensor]:
    return {"target": torch.randn(16, FEATURES), "background": torch.randn(8, FEATURES)}


def snapshot(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in module.named_parameters()}


def changed(before: dict[str, torch.Tensor], module: torch.nn.Module) -> list[str]:
    return [name for name, p in module.named_parameters() if not torch.equal(before[name], p)]


def test_total_correlation_is_a_factor_site_scaled_like_the_target_plate():
    model, elbo, data = small_model(), ContrastiveELBO(gamma=2.0, discriminator="mlp"), batch()
    elbo.auxiliary_steps(model)
    model_trace, guide_trace = elbo.traces(model.model, model.guide, **data)
    site = model_trace.nodes["total_correlation"]
    s, z = guide_trace.nodes["target_s"]["value"], guide_trace.nodes["target_z"]["value"]
    expected = -2.0 * (64 / 16) * elbo.log_density_ratio(s, z).sum()
    assert site["is_observed"] and torch.allclose(site["fn"].log_prob(site["value"]).sum(), expected)


def test_loss_and_differentiable_loss_report_the_same_objective():
    model, elbo, data = small_model(), ContrastiveELBO(gamma=3.0, discriminator="mlp"), batch()
    elbo.auxiliary_steps(model)
    with poutine.seed(rng_seed=1):
        reported = elbo.loss(model.model, model.guide, **data)
    with poutine.seed(rng_seed=1):
        differentiable = elbo.differentiable_loss(model.model, model.guide, **data)
    with poutine.seed(rng_seed=1):
        plain = TraceMeanField_ELBO().loss(model.model, model.guide, **data)
    assert reported == pytest.approx(differentiable.item(), rel=1e-5)
    assert reported != pytest.approx(plain, rel=1e-6)


def test_discriminator_lives_outside_model_and_param_store():
    model, elbo, data = small_model(), ContrastiveELBO(gamma=1.0), batch()
    (step,) = elbo.auxiliary_steps(model)
    svi = SVI(model.model, model.guide, pyro.optim.Adam({"lr": 1e-2}), elbo)
    svi.step(**data)
    discriminator_ids = {id(p) for p in step.parameters}
    assert not discriminator_ids & {id(p) for p in model.parameters()}
    assert not discriminator_ids & {id(p) for p in pyro.get_param_store().values()}
    assert elbo.auxiliary_modules() == {"discriminator": elbo.discriminator}


def test_vae_step_changes_no_discriminator_parameter_and_discriminator_step_no_vae_parameter():
    model, elbo, data = small_model(), ContrastiveELBO(gamma=5.0, discriminator="mlp"), batch()
    (step,) = elbo.auxiliary_steps(model)
    vae_optim = torch.optim.Adam(model.parameters(), lr=1e-2)
    d_optim = torch.optim.Adam(step.parameters, lr=1e-2)

    vae_before, d_before = snapshot(model), snapshot(elbo.discriminator)
    vae_optim.zero_grad()
    elbo.differentiable_loss(model.model, model.guide, **data).backward()
    assert all(p.grad is None for p in elbo.discriminator.parameters())
    vae_optim.step()
    assert changed(vae_before, model) and not changed(d_before, elbo.discriminator)

    vae_before, d_before = snapshot(model), snapshot(elbo.discriminator)
    model.zero_grad(set_to_none=True)
    d_optim.zero_grad()
    step.loss(**data).backward()
    assert all(p.grad is None for p in model.parameters())
    d_optim.step()
    assert changed(d_before, elbo.discriminator) and not changed(vae_before, model)


def test_engine_takes_the_discriminator_step_after_the_elbo_step_and_logs_tc():
    model, elbo = small_model(), ContrastiveELBO(gamma=1.0, discriminator="mlp")
    data = {"target": torch.randn(64, FEATURES), "background": torch.randn(32, FEATURES)}
    d_before = snapshot(elbo.discriminator.build(4))
    result = ppl_vae.fit(model, elbo, data, steps=4, batch_size=16, log_every_n_steps=2, progress_bar=False)
    assert {"elbo_loss", "discriminator_loss", "total_correlation"} <= set(result.history[-1])
    assert changed(d_before, elbo.discriminator)


def independent(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(n, 2), torch.randn(n, 2)


def dependent(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    s = torch.randn(n, 2)
    return s, s + 0.1 * torch.randn(n, 2)


def tc_estimate(kind: str, draw, steps: int = 300) -> float:
    """Train D on fresh draws each step, as during SVI, then estimate TC on held-out draws."""
    discriminator = TCDiscriminator(kind, hidden=(32, 32)).build(4)
    optim = torch.optim.Adam(discriminator.parameters(), lr=1e-2)
    for _ in range(steps):
        optim.zero_grad()
        discriminator_loss(discriminator, *draw(256)).backward()
        optim.step()
    with torch.no_grad():
        return discriminator(torch.cat(draw(4000), -1)).mean().item()


def test_tc_estimate_is_near_zero_for_independent_and_positive_for_dependent_latents():
    torch.manual_seed(0)
    near_zero = tc_estimate("mlp", independent)
    positive = tc_estimate("mlp", dependent)
    assert abs(near_zero) < 0.15, near_zero
    assert positive > 1.0, positive


def test_linear_discriminator_cannot_see_dependence():
    """Joint and product samples share their means, so logistic regression stays near logit 0."""
    torch.manual_seed(0)
    assert abs(tc_estimate("linear", dependent)) < 0.15


@pytest.mark.parametrize("kwargs, argument", [({"gamma": -1.0}, "gamma"), ({"discriminator": "svm"}, "discriminator"),
                                               ({"discriminator_lr": 0.0}, "discriminator_lr")])
def test_bad_settings_raise_value_error_naming_the_argument(kwargs, argument):
    with pytest.raises(ValueError, match=argument):
        ContrastiveELBO(**kwargs)


def test_the_discriminator_step_takes_the_elbo_steps_samples_as_arguments_without_encoding_again(monkeypatch):
    model, elbo, data = small_model(), ContrastiveELBO(gamma=1.0, discriminator="mlp"), batch()
    iteration = TrainingIteration(model, elbo, lr=1e-2)
    (step,) = iteration.steps
    taken: dict[str, torch.Tensor] = {}

    def recorded(**arguments: torch.Tensor) -> torch.Tensor:
        taken.update(arguments)
        return step.loss(**arguments)

    iteration.steps = [dataclasses.replace(step, loss=recorded)]
    pyro.set_rng_seed(3)
    drawn = elbo.training_loss(model.model, model.guide, **data).step_arguments["discriminator"]
    monkeypatch.setattr(elbo.total_correlation, "guide_samples", pytest.fail)
    pyro.set_rng_seed(3)
    values = iteration(data, 0)
    for name in ("salient_sample", "shared_sample"):
        torch.testing.assert_close(taken[name], drawn[name])
        assert not taken[name].requires_grad
    assert taken["global_batch"] is iteration.global_batch
    assert torch.isfinite(values["discriminator_loss"])


def test_tc_term_reads_its_input_size_from_the_models_sites_without_touching_the_random_state():
    model = small_model()
    elbo = ContrastiveELBO(gamma=1.0)
    state = torch.get_rng_state()

    size = elbo.total_correlation.discriminator_input_dim(model)

    assert size == model.salient_dim + model.shared_dim
    assert torch.equal(torch.get_rng_state(), state)


def test_tc_term_takes_its_input_size_and_guide_arguments_as_arguments():
    from ppl_vae.infer import TotalCorrelation

    class NoPriorDraws(torch.nn.Module):  # a model whose model() takes no batch_size
        def model(self, target=None, background=None):
            raise AssertionError("the term must not run the model when input_dim is given")

    term = TotalCorrelation("target_s", "target_z", gamma=1.0, input_dim=7, guide_arguments=("x",))
    (step,) = term.auxiliary_steps(NoPriorDraws())

    assert sum(p.numel() for p in step.parameters) == 7 + 1, "a linear discriminator on 7 inputs"
    assert term.guide_arguments == ("x",)
    with pytest.raises(ValueError, match="input_dim"):
        TotalCorrelation("target_s", "target_z", gamma=1.0).auxiliary_steps(NoPriorDraws())
