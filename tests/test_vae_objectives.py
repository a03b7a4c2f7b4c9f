"""The VAE recipe's objectives (``objective``): the baselines of ppl_vae.infer.baselines, built
from the settings, trained by the engine, and the plain VAE's objective left as it was."""
import math

import pyro
import pytest
import torch

import ppl_vae
from ppl_vae.infer import MeanFieldELBO, TrainingIteration
from ppl_vae.infer.baselines import ESTIMATORS
from ppl_vae.recipes import RECIPES, SettingError, with_overrides
from ppl_vae.recipes.configs import TC_ESTIMATORS, VAE_OBJECTIVES, VAEConfig
from ppl_vae.recipes.vae import (
    FACTOR_DISCRIMINATOR_BETAS,
    FACTOR_DISCRIMINATOR_LR,
    build,
    build_untrained,
    make_objective,
)
from ppl_vae.train import TrainConfig

#: The terms each objective adds to the ELBO, by name.
TERMS = {
    "vae": [],
    "beta-vae": [],
    "annealed-beta-vae": ["capacity_z"],
    "factor-vae": ["total_correlation"],
    "beta-tcvae": ["kl_decomposition_z"],
    "dip-vae-i": ["dip_z"],
    "dip-vae-ii": ["dip_z"],
    "info-vae": ["mmd_z"],
}


def tiny(objective: str, **settings) -> VAEConfig:
    """A VAE on the pinwheel points, D = 2, 8 hidden units, two steps of 16 points."""
    train = TrainConfig(steps=2, batch_size=16, lr=1e-3, progress_bar=False, log_every_n_steps=1)
    return VAEConfig(dataset="pinwheel", latent_dim=2, hidden=8, factor_score_votes=0,
                     objective=objective, train=train, **settings)


def test_every_objective_has_its_terms():
    assert sorted(TERMS) == sorted(VAE_OBJECTIVES)
    for name, terms in TERMS.items():
        _, elbo = build_untrained(tiny(name), {"shape": [2], "num_points": 32})
        assert isinstance(elbo, MeanFieldELBO) and [term.name for term in elbo.terms] == terms, name


@pytest.mark.parametrize("name", VAE_OBJECTIVES)
def test_two_training_steps_of_every_objective_give_finite_losses(name):
    pyro.set_rng_seed(0)
    experiment = build(tiny(name))
    iteration = TrainingIteration(experiment.model, experiment.objective, lr=1e-3)
    x = experiment.train_data["x"]
    for step in range(2):
        values = iteration({"x": x[16 * step: 16 * (step + 1)]}, step)
        assert all(math.isfinite(float(value)) for value in values.values()), values
    assert ("discriminator_loss" in values) == (name == "factor-vae")
    assert experiment.model_inputs == {"shape": [2], "num_points": len(x)}


def test_the_vae_objective_is_the_plain_mean_field_elbo_with_beta():
    config = tiny("vae", beta=2.5)
    model, elbo = build_untrained(config, {"shape": [2]})
    assert type(elbo) is MeanFieldELBO and elbo.beta == 2.5 and elbo.terms == ()
    x = torch.randn(16, 2)
    losses = []
    for objective in (elbo, MeanFieldELBO(beta=2.5)):
        pyro.set_rng_seed(1)
        losses.append(objective.differentiable_loss(model.model, model.guide, x))
    assert torch.equal(losses[0], losses[1])


def test_the_defaults_are_disentanglement_libs_dsprites_settings():
    annealed = make_objective(VAEConfig(objective="annealed-beta-vae"), None).term("capacity_z")
    assert annealed.weight == 1000.0
    assert (annealed.capacity.c_min, annealed.capacity.c_max, annealed.capacity.num_steps) == (0.0, 25.0, 100_000)
    factor = make_objective(VAEConfig(objective="factor-vae"), None).term("total_correlation")
    assert factor.weight == 30.0 and factor.discriminator_lr == FACTOR_DISCRIMINATOR_LR == 1e-4
    assert factor.discriminator_betas == FACTOR_DISCRIMINATOR_BETAS == (0.5, 0.9)
    assert factor.discriminator.kind == "mlp" and factor.discriminator.hidden == (1000,) * 6
    dip_i = make_objective(VAEConfig(objective="dip-vae-i"), None).term("dip_z")
    dip_ii = make_objective(VAEConfig(objective="dip-vae-ii"), None).term("dip_z")
    assert (dip_i.kind, dip_i.lambda_od, dip_i.lambda_d) == ("i", 5.0, 50.0)
    assert (dip_ii.kind, dip_ii.lambda_od, dip_ii.lambda_d) == ("ii", 5.0, 5.0)
    tc = make_objective(VAEConfig(objective="beta-tcvae"), 737_280).term("kl_decomposition_z")
    assert (tc.beta, tc.alpha, tc.gamma, tc.estimator, tc.data_size) == (4.0, 1.0, 1.0, "mws", 737_280)
    assert TC_ESTIMATORS == ESTIMATORS


def test_beta_defaults_to_1_for_the_plain_vae_and_to_the_studys_4_for_beta_vae_and_beta_tcvae():
    assert make_objective(VAEConfig(), None).beta == 1.0
    assert make_objective(VAEConfig(objective="beta-vae"), None).beta == 4.0
    assert make_objective(VAEConfig(objective="beta-tcvae"), 100).term("kl_decomposition_z").beta == 4.0
    assert make_objective(VAEConfig(objective="beta-vae", beta=2.0), None).beta == 2.0  # a beta set wins
    assert VAEConfig(objective="factor-vae").objective_beta is None  # reads no beta


def test_the_settings_reach_the_terms():
    config = with_overrides(VAEConfig(), {
        "objective": "factor-vae", "gamma": "10", "lambda_od": "2", "tc_estimator": "mss", "latent_dim": "3",
    })
    assert make_objective(config, None).term("total_correlation").weight == 10.0
    assert make_objective(with_overrides(config, {"objective": "dip-vae-i"}), None).term("dip_z").lambda_d == 20.0
    assert make_objective(with_overrides(config, {"objective": "annealed-beta-vae"}), None).term("capacity_z").weight == 10.0
    assert make_objective(with_overrides(config, {"objective": "beta-tcvae"}), 100).term("kl_decomposition_z").estimator == "mss"


def test_the_engine_takes_the_discriminator_step_and_feeds_the_capacity_the_training_step(tmp_path):
    pyro.set_rng_seed(0)
    factor = build(tiny("factor-vae"))
    result = ppl_vae.fit(factor.model, factor.objective, factor.train_data, tiny("factor-vae").train, run_dir=tmp_path / "factor")
    assert [row["step"] for row in result.history] == [1, 2]
    assert all(math.isfinite(row["discriminator_loss"]) and math.isfinite(row["total_correlation"]) for row in result.history)
    annealed_config = tiny("annealed-beta-vae", capacity_max=10.0, capacity_steps=4)
    annealed = build(annealed_config)
    result = ppl_vae.fit(annealed.model, annealed.objective, annealed.train_data, annealed_config.train,
                         run_dir=tmp_path / "annealed")
    assert [row["capacity_z/target"] for row in result.history] == pytest.approx([0.0, 2.5])


def test_an_unknown_objective_is_refused_naming_the_setting():
    with pytest.raises(SettingError, match=r"^objective must be one of \('vae', 'beta-vae', .*got 'betavae'$"):
        with_overrides(RECIPES["vae"].demo(), {"objective": "betavae"})
    with pytest.raises(SettingError, match=r"^tc_estimator must be one of \('mws', 'mss'\), got 'mc'$"):
        VAEConfig(tc_estimator="mc")
    with pytest.raises(SettingError, match=r"^info_lambda must be a finite number >= 1"):
        VAEConfig(objective="info-vae", info_lambda=0.5)


def test_a_run_saved_without_the_number_of_points_loads_unless_beta_tcvae_needs_it():
    model, elbo = build_untrained(VAEConfig(), {"shape": [2]})
    assert type(elbo) is MeanFieldELBO
    with pytest.raises(ValueError, match="objective 'beta-tcvae' needs num_points, the number of training points"):
        build_untrained(VAEConfig(objective="beta-tcvae"), {"shape": [2]})
