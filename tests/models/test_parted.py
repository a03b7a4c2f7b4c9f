"""PartedVAE: the generative story's sites, labels observing c, the attention sharpness
schedule, accessors, a multi-label configuration that trains, and bad input."""
import math

import pyro
import pytest
import torch
from pyro import poutine

import ppl_vae
from ppl_vae.checks import posterior_predictive_check
from ppl_vae.infer.parted import PartedELBO
from ppl_vae.models.parted import PartedVAE
from ppl_vae.recipes.parted import PartedConfig, labelled_subset
from ppl_vae.schedules import LinearCapacity, LinearSchedule

EVENT = (1, 8, 8)


def small_model(num_classes=(3, 2), u_dims=(2, 1), **kwargs) -> PartedVAE:
    torch.manual_seed(0)
    return PartedVAE.mlp(EVENT, z_dim=2, num_classes=num_classes, u_dims=u_dims, hidden=(16,), **kwargs)


def images(n=8) -> torch.Tensor:
    return (torch.rand(n, *EVENT, generator=torch.Generator().manual_seed(2)) > 0.5).float()


def test_model_and_guide_share_the_sites_of_the_generative_story():
    model, x = small_model(), images()
    guide = poutine.trace(model.guide).get_trace(x)
    trace = poutine.trace(poutine.replay(model.model, trace=guide)).get_trace(x)
    samples = [n for n, s in trace.nodes.items() if s["type"] == "sample" and n != "data"]
    assert samples == ["z", "c0", "u0", "c1", "u1", "x"]
    assert [n for n, s in guide.nodes.items() if s["type"] == "sample" and n != "data"] == samples[:-1]
    assert guide.nodes["c0"]["value"].shape == (8, 3)
    assert torch.allclose(guide.nodes["c0"]["value"].sum(-1), torch.ones(8))
    assert trace.nodes["u0"]["fn"].batch_shape == (8,) and trace.nodes["u0"]["fn"].event_shape == (2,)
    assert model.class_variables()[1] == ("c1", "u1", "class_priors.1")
    assert model.get_submodule("class_priors.1")().batch_shape == (2,)


def test_prior_draws_of_u_come_from_the_class_that_c_picks():
    model = small_model()
    trace = poutine.trace(model.model).get_trace(images())
    c, u = trace.nodes["c0"]["value"], trace.nodes["u0"]["fn"]
    table = model.class_priors[0]()
    assert torch.equal(c.sum(-1), torch.ones(8))
    torch.testing.assert_close(u.mean, table.mean[c.argmax(-1)])


def test_c_reaches_the_decoder_only_through_u():
    model, x = small_model(), images()
    guide = poutine.trace(model.guide).get_trace(x)
    trace = poutine.trace(poutine.replay(model.model, trace=guide)).get_trace(x)
    latent = torch.cat([guide.nodes[n]["value"] for n in ("z", "u0", "u1")], -1)
    assert torch.allclose(trace.nodes["x"]["fn"].base_dist.logits, model.decoder(latent))


def test_labels_observe_c_in_the_model_and_replace_its_sample_in_the_guide():
    model, x = small_model(), images(4)
    y = torch.tensor([[0, 1], [2, 0], [1, 1], [2, 1]])
    guide = poutine.trace(model.guide).get_trace(x, y)
    trace = poutine.trace(poutine.replay(model.model, trace=guide)).get_trace(x, y)
    assert "c0" not in guide.nodes
    assert trace.nodes["c0"]["is_observed"]
    assert torch.equal(trace.nodes["c1"]["value"].argmax(-1), y[:, 1])


def test_one_variable_accepts_labels_of_shape_batch():
    model = small_model(num_classes=3, u_dims=2)
    assert torch.equal(model.check_labels(torch.tensor([2, 0]), 2), torch.tensor([[2], [0]]))


def test_attention_sharpness_follows_the_step_argument_and_is_final_without_one():
    model = small_model(sharpness=LinearSchedule.from_rate(1.0, 2e-4, 8.0))
    assert model.sharpness_at(0) == 1.0
    assert model.sharpness_at(10_000) == pytest.approx(3.0)
    assert float(model.sharpness_at(torch.tensor(10_000))) == pytest.approx(3.0)
    assert model.sharpness_at(None) == 8.0


def test_the_guide_gates_u_with_the_sharpness_of_its_step():
    model, x = small_model(sharpness=LinearSchedule.from_rate(1.0, 2e-4, 8.0)), images()
    u_loc = {}
    for step in (None, 0, 10_000):  # None first: an untrained model gates at the end value
        pyro.set_rng_seed(0)
        trace = poutine.trace(model.guide).get_trace(x, step=step)
        u_loc[step] = trace.nodes["u0"]["fn"].base_dist.loc
    model = small_model(sharpness=LinearSchedule.from_rate(1.0, 2e-4, 8.0))
    pyro.set_rng_seed(0)
    assert torch.equal(poutine.trace(model.guide).get_trace(x).nodes["u0"]["fn"].base_dist.loc, u_loc[None])
    assert not torch.allclose(u_loc[0], u_loc[10_000]) and not torch.allclose(u_loc[10_000], u_loc[None])


def test_evaluation_uses_the_sharpness_of_the_step_the_guide_was_trained_to():
    model, x = small_model(sharpness=LinearSchedule.from_rate(1.0, 2e-4, 8.0)), images()
    assert model.sharpness_at(None) == 8.0  # never trained here: the schedule's end value
    model.guide(x, step=25_000)  # training at step 25,000: k = 1 + 2e-4 * 25,000 = 6
    model.eval()
    model.guide(x, step=30_000)  # an evaluation-mode call with a step does not move it
    assert model.sharpness_at(None) == pytest.approx(6.0)
    h = model.encoder(x)
    c = torch.nn.functional.one_hot(model.class_heads[0](h).argmax(-1), 3).float()
    expected = model.u_heads[0](h * model.attention[0](c, 6.0))[0]
    assert torch.allclose(model.encode(x)[:, 2:4], expected)


def test_the_trained_step_is_saved_with_the_weights_and_old_state_dicts_still_load():
    trained = small_model(sharpness=LinearSchedule.from_rate(1.0, 2e-4, 8.0))
    trained.guide(images(), step=25_000)
    loaded = small_model(sharpness=LinearSchedule.from_rate(1.0, 2e-4, 8.0))
    loaded.load_state_dict(trained.state_dict())
    assert loaded.sharpness_at(None) == pytest.approx(6.0)  # a loaded run evaluates as trained
    old = {name: value for name, value in trained.state_dict().items() if name != "trained_step"}
    loaded.load_state_dict(old)  # saved before the buffer was persistent: strict loading passes
    assert loaded.sharpness_at(None) == 8.0


def test_encode_is_the_deterministic_representation_at_the_most_probable_class():
    model, x = small_model(), images()
    latent = model.encode(x)
    assert latent.shape == (8, model.latent_dim) == (8, 5)
    assert torch.equal(latent, model.encode(x))
    z, u = model.split_latent(latent)
    h = model.encoder(x)
    c = torch.nn.functional.one_hot(model.class_heads[1](h).argmax(-1), 2).float()
    assert torch.allclose(u[:, 2:], model.u_heads[1](h * model.attention[1](c, 8.0))[0])
    assert torch.allclose(z, model.z_head(h)[0])


def test_accessors_have_documented_shapes():
    model, x = small_model(), images(6)
    probs = model.classify(x)
    assert [p.shape for p in probs] == [(6, 3), (6, 2)]
    assert torch.allclose(probs[0].sum(-1), torch.ones(6))
    assert model.reconstruct(x).shape == (6, *EVENT)
    assert model.decode(torch.zeros(4, 2), torch.zeros(4, 3)).shape == (4, *EVENT)
    assert model.sample(5).shape == (5, *EVENT)
    assert model.sample(5, c=torch.tensor([2, 1])).shape == (5, *EVENT)
    assert model.sample(3, c=torch.tensor([[0, 0], [1, 1], [2, 0]])).shape == (3, *EVENT)
    assert small_model(num_classes=3, u_dims=1).sample(4, c=2).shape == (4, *EVENT)


def test_sampling_a_class_draws_u_from_that_class_prior():
    model = small_model(num_classes=3, u_dims=1)
    with torch.no_grad():
        model.class_priors[0].loc.copy_(torch.tensor([[-5.0], [0.0], [5.0]]))
    drawn = []
    model.decode = lambda z, u: u  # look at u itself
    for k in range(3):
        drawn.append(model.sample(400, c=k, mean=True).mean())
    assert drawn[0] < -4 and abs(drawn[1]) < 0.5 and drawn[2] > 4


def test_classifier_parameters_are_the_encoder_and_class_heads():
    model = small_model()
    ids = {id(p) for p in model.classifier_parameters()}
    assert ids == {id(p) for p in [*model.encoder.parameters(), *model.class_heads.parameters()]}


def test_multi_label_configuration_trains_with_the_engine():
    model = small_model(num_classes=(3, 2), u_dims=(2, 1))
    x = images(96)
    y = torch.stack([torch.arange(96) % 3, torch.arange(96) % 2], -1)
    objective = PartedELBO(
        LinearCapacity(0, 2, 40), LinearCapacity(0, 2, 40),
        gamma_z=5.0, gamma_u=5.0, gamma_c=5.0, gamma_h=1.0, gamma_bc=1.0, classifier_lr=1e-2,
    )
    result = ppl_vae.fit(
        model, objective, {"x": x, "labelled": {"x": x[:24], "y": y[:24]}},
        steps=40, batch_size=16, lr=1e-2, log_every_n_steps=10, progress_bar=False,
    )
    first, last = result.history[0], result.history[-1]
    assert all(math.isfinite(v) for record in result.history for v in record.values())
    assert last["elbo_loss"] < first["elbo_loss"]
    assert last["classifier_loss"] < first["classifier_loss"]


def test_posterior_predictive_check_runs_on_the_model():
    model = small_model()
    result = posterior_predictive_check(model, {"x": images(16)}, num_samples=3)
    assert 0.0 <= result.discrepancy_p_values["x"] <= 1.0


@pytest.mark.parametrize("temperature", [0.0, -0.5])
def test_non_positive_temperature_raises(temperature):
    with pytest.raises(ValueError, match="temperature"):
        small_model(temperature=temperature)


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"num_classes": (3, 0)}, "num_classes"),
        ({"u_dims": (1, 2, 3)}, "u_dims"),
        ({"class_probs": [[0.5, 0.5, 0.5], [0.5, 0.5]]}, "class_probs"),
        ({"class_probs": [[1.0, 0.0, 0.0]]}, "class_probs"),
        ({"class_prior_init": "normal"}, "log_variance_init must be one of .*got 'normal'"),
    ],
)
def test_bad_model_settings_raise_naming_the_argument(kwargs, name):
    with pytest.raises(ValueError, match=name):
        small_model(**kwargs)


@pytest.mark.parametrize(
    "y, match",
    [
        (torch.tensor([[0, 1], [3, 0], [1, 1], [2, 1]]), r"y\[:, 0\] must hold class indices in \[0, 3\)"),
        (torch.tensor([[0, 1], [2, 2], [1, 1], [2, 1]]), r"y\[:, 1\]"),
        (torch.tensor([0, 1, 2, 0]), r"shape \(4, 2\)"),
        (torch.tensor([[0, 1], [2, 0]]), "shape"),
        (torch.tensor([[0.0, 1.0]] * 4), "integer"),
    ],
)
def test_bad_labels_raise_in_model_and_guide(y, match):
    model, x = small_model(), images(4)
    for fn in (model.model, model.guide):
        with pytest.raises(ValueError, match=match):
            fn(x, y)


def test_decode_rejects_latents_of_the_wrong_width():
    with pytest.raises(ValueError, match="columns"):
        small_model().decode(torch.zeros(2, 3), torch.zeros(2, 3))


def test_labelled_subset_is_stratified_by_class():
    labels = torch.arange(3000) % 3
    chosen = labelled_subset(labels, fraction=0.005, seed=1)
    assert torch.bincount(labels[chosen]).tolist() == [5, 5, 5]
    assert torch.bincount(labels[labelled_subset(labels, count=256)]).tolist() == [86, 85, 85]


@pytest.mark.parametrize("fraction", [0.0, -0.1, 1.5])
def test_label_fraction_outside_zero_one_raises(fraction):
    with pytest.raises(ValueError, match="fraction"):
        labelled_subset(torch.arange(10) % 2, fraction=fraction)
    with pytest.raises(ValueError, match="label_fraction"):
        PartedConfig(label_fraction=fraction)


def test_class_prior_init_reaches_every_class_prior():
    assert all(torch.equal(p.log_variance_logit, torch.zeros_like(p.log_variance_logit))
               for p in small_model().class_priors)
    drawn = small_model(class_prior_init="randn")
    assert all((p.log_variance_logit != 0).all() for p in drawn.class_priors)


def test_conv_model_takes_the_authors_leaky_encoder_top():
    model = PartedVAE.conv(28, z_dim=2, num_classes=3, hidden=16, top_activation="leaky_relu", negative_slope=0.1)
    leaky = [m for m in model.encoder.modules() if isinstance(m, torch.nn.LeakyReLU)]
    assert [m.negative_slope for m in leaky] == [0.1, 0.1]
