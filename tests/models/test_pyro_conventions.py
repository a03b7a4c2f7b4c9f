"""Pyro's conventions on every model: prior predictive draws through ``Predictive`` without
observations, posterior predictive with the guide, ``sample`` draws from the likelihood, and two
instances of one class train independently with plain SVI and ``pyro.optim``."""
import pyro
import pytest
import torch
from pyro.infer import SVI, Predictive

from ppl_vae.distributions import IsotropicGaussianPrior
from ppl_vae.infer import ContrastiveELBO, MeanFieldELBO, PartedELBO
from ppl_vae.models import VAE, ContrastiveVAE, DecompositionVAE, PartedVAE
from ppl_vae.nn import MLP, ConvDecoder, ConvEncoder, mlp_decoder

EVENT = (12,)


def binary(n: int, seed: int = 1) -> torch.Tensor:
    return (torch.rand(n, *EVENT, generator=torch.Generator().manual_seed(seed)) > 0.5).float()


def vae(cls=VAE):
    return cls(MLP([EVENT[0], 16], final_activation=torch.nn.ReLU()), mlp_decoder(2, [16], EVENT), 2,
               prior=IsotropicGaussianPrior(2))


MODELS = {
    "vae": (vae, MeanFieldELBO, lambda: {"x": binary(8)}, {"batch_size": 5}, {"x": (5, *EVENT), "z": (5, 2)}),
    "decomposition": (lambda: vae(DecompositionVAE), MeanFieldELBO, lambda: {"x": binary(8)}, {"batch_size": 5},
                      {"x": (5, *EVENT), "z": (5, 2)}),
    "parted": (lambda: PartedVAE.mlp(EVENT, z_dim=2, num_classes=3, u_dims=2, hidden=(16,)), PartedELBO,
               lambda: {"x": binary(8)}, {"batch_size": 5}, {"x": (5, *EVENT), "c0": (5, 3), "u0": (5, 2)}),
    "contrastive": (lambda: ContrastiveVAE.mlp(EVENT, hidden=16), lambda: ContrastiveELBO(gamma=0.0),
                    lambda: {"target": binary(8), "background": binary(6, 2)},
                    {"batch_size": 5, "background_batch_size": 4}, {"target_x": (5, *EVENT), "background_x": (4, *EVENT)}),
}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_prior_predictive_draws_need_no_observations(name):
    build, _, _, sizes, shapes = MODELS[name]
    samples = Predictive(build().model, num_samples=3)(**sizes)
    for site, shape in shapes.items():
        assert samples[site].shape == (3, *shape)
    for site in (s for s in shapes if s.endswith("x")):
        assert set(samples[site].unique().tolist()) <= {0.0, 1.0}  # Bernoulli draws, not means


@pytest.mark.parametrize("name", sorted(MODELS))
def test_posterior_predictive_draws_come_from_the_guide(name):
    build, _, data, _, _ = MODELS[name]
    model, batch = build(), data()
    samples = Predictive(model.model, guide=model.guide, num_samples=4)(**batch)
    observed = {"x": "x", "target_x": "target", "background_x": "background"}
    for site, key in observed.items():
        if site in samples:
            assert samples[site].shape == (4, *batch[key].shape)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_sample_draws_from_the_likelihood_and_mean_gives_its_means(name):
    model = MODELS[name][0]()
    draws, means = model.sample(6), model.sample(6, mean=True)
    assert draws.shape == means.shape == (6, *EVENT)
    assert set(draws.unique().tolist()) <= {0.0, 1.0}
    assert ((means > 0) & (means < 1)).all()


def test_prior_predictive_without_a_batch_size_names_it():
    with pytest.raises(ValueError, match="batch_size"):
        vae().model()


@pytest.mark.parametrize("name", sorted(MODELS))
def test_two_instances_train_independently_with_plain_svi_and_pyro_optim(name):
    build, objective, data, _, _ = MODELS[name]
    torch.manual_seed(0)
    first = build()
    torch.manual_seed(0)
    second = build()
    alone = build()
    alone.load_state_dict(first.state_dict())
    batch = data()
    optimiser = pyro.optim.Adam({"lr": 1e-2})
    svi_first = SVI(first.model, first.guide, optimiser, objective())
    svi_second = SVI(second.model, second.guide, pyro.optim.Adam({"lr": 1e-2}), objective())
    before = {k: v.clone() for k, v in second.state_dict().items()}
    for step in range(3):
        pyro.set_rng_seed(1)
        svi_first.step(**batch, step=step)
    assert all(torch.equal(v, before[k]) for k, v in second.state_dict().items()), "training one moved the other"
    pyro.set_rng_seed(1)
    svi_second.step(**batch, step=0)
    assert any(not torch.equal(v, before[k]) for k, v in second.state_dict().items())
    reference = SVI(alone.model, alone.guide, pyro.optim.Adam({"lr": 1e-2}), objective())
    for step in range(3):
        pyro.set_rng_seed(1)
        reference.step(**batch, step=step)
    for key, value in first.state_dict().items():
        torch.testing.assert_close(value, alone.state_dict()[key])


def test_each_instance_gets_its_own_pyro_name_without_a_count_kept_by_the_process():
    import ppl_vae.models.vae as vae_module

    torch.manual_seed(0)
    first_names = [vae()._pyro_name for _ in range(3)]
    torch.manual_seed(0)
    second_names = [vae()._pyro_name for _ in range(3)]
    names = first_names + second_names
    assert len(set(names)) == len(names) and all(name.startswith("VAE_") for name in names)
    assert not any(isinstance(value, dict) and "VAE" in value for value in vars(vae_module).values())


def test_two_instances_train_independently_with_the_engine():
    from ppl_vae import fit

    torch.manual_seed(0)
    first = vae()
    torch.manual_seed(0)
    second = vae()
    initial = {k: v.clone() for k, v in second.state_dict().items()}
    data = {"x": binary(32)}
    settings = dict(steps=3, batch_size=16, lr=1e-2, progress_bar=False)
    fit(first, MeanFieldELBO(), data, **settings)
    assert all(torch.equal(v, initial[k]) for k, v in second.state_dict().items()), "training one moved the other"
    fit(second, MeanFieldELBO(), data, **settings)
    for key, value in first.state_dict().items():
        torch.testing.assert_close(value, second.state_dict()[key])


@pytest.mark.parametrize("build", [lambda: VAE(ConvEncoder(28), ConvDecoder(3, 28), 3),
                                   lambda: PartedVAE.conv(28, z_dim=2, hidden=32)], ids=["vae", "parted"])
def test_plain_svi_with_pyro_optim_updates_every_parameter_of_a_conv_model(build):
    """Pyro's param store keeps a contiguous copy of what it registers: every weight must be the
    store's own tensor, or pyro.optim would step a copy and the network would never train."""
    torch.manual_seed(0)
    model = build()
    objective = PartedELBO(labelled_group=None) if isinstance(model, PartedVAE) else MeanFieldELBO()
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    svi = SVI(model.model, model.guide, pyro.optim.Adam({"lr": 1e-2}), objective)
    svi.step((torch.rand(8, 1, 28, 28) > 0.5).float(), step=0)
    frozen = [name for name, p in model.named_parameters() if torch.equal(p, before[name]) and "class_priors" not in name]
    assert not frozen


def test_vae_posterior_predictive_with_pyro_predictive_and_parallel_refused():
    torch.manual_seed(0)
    vae = VAE(MLP([6, 8], final_activation=torch.nn.ReLU()), mlp_decoder(2, [8], (6,)), 2)
    x = (torch.rand(5, 6) > 0.5).float()
    z = Predictive(vae.guide, num_samples=3)(x)["z"]
    replicates = Predictive(vae.model, posterior_samples={"z": z})(batch_size=5)["x"]
    assert replicates.shape == (3, 5, 6) and set(replicates.unique().tolist()) <= {0.0, 1.0}
    with pytest.raises(ValueError, match=r"parallel=False"):
        Predictive(vae.model, guide=vae.guide, num_samples=3, parallel=True)(x)


def test_parted_posterior_predictive_with_pyro_predictive_keeps_the_classes_and_parallel_refused():
    torch.manual_seed(0)
    parted = PartedVAE.mlp(EVENT, z_dim=2, num_classes=3, u_dims=2, hidden=(16,))
    x, y = binary(5), torch.tensor([0, 1, 2, 0, 1])
    latents = Predictive(parted.guide, num_samples=3)(x, y)
    draws = Predictive(parted.model, posterior_samples=latents)(y=y, batch_size=5)
    assert draws["x"].shape == (3, 5, *EVENT) and set(draws["x"].unique().tolist()) <= {0.0, 1.0}
    assert torch.equal(draws["c0"].argmax(-1), y.expand(3, 5))
    with pytest.raises(ValueError, match=r"parallel=False"):
        Predictive(parted.model, guide=parted.guide, num_samples=3, parallel=True)(x, y)
    with pytest.raises(ValueError, match=r"parallel=False"):
        Predictive(parted.model, num_samples=3, parallel=True)(batch_size=5)


def test_contrastive_posterior_predictive_with_pyro_predictive_and_parallel_refused():
    torch.manual_seed(0)
    cvae = ContrastiveVAE.mlp(EVENT, hidden=16)
    target, background = binary(5), binary(4, 2)
    latents = Predictive(cvae.guide, num_samples=3)(target, background)
    draws = Predictive(cvae.model, posterior_samples=latents)(batch_size=5, background_batch_size=4)
    assert draws["target_x"].shape == (3, 5, *EVENT) and draws["background_x"].shape == (3, 4, *EVENT)
    assert set(draws["target_x"].unique().tolist()) <= {0.0, 1.0}
    with pytest.raises(ValueError, match=r"parallel=False"):
        Predictive(cvae.model, guide=cvae.guide, num_samples=3, parallel=True)(target, background)
    with pytest.raises(ValueError, match=r"parallel=False"):
        Predictive(cvae.model, num_samples=3, parallel=True)(batch_size=5, background_batch_size=4)
