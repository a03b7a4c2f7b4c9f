"""The authors' settings as options: each reaches the model or the optimiser it names, the
presets switch them on, bad values are refused naming the setting, and the command line's
``--set`` reaches them."""
import math

import pytest
import torch

from ppl_vae.cli import main
from ppl_vae.recipes import SettingError, with_overrides
from ppl_vae.recipes import base as recipes_base
from ppl_vae.recipes.configs import DecompositionConfig, PartedConfig
from ppl_vae.recipes.decomposition import authors_settings as decomposition_authors
from ppl_vae.recipes.decomposition import build_untrained as decomposition_model
from ppl_vae.recipes.parted import MNIST_AUTHORS_EPOCH_STEPS, authors_lr_plateau, build_model, mnist_config
from ppl_vae.recipes.parted import authors_settings as parted_authors
from ppl_vae.train import LRPlateau


def test_parted_network_options_reach_the_model():
    config = PartedConfig(hidden=16, top_activation="leaky_relu", negative_slope=0.2, class_prior_init="randn")
    model = build_model(config, (1, 64, 64), 3)
    leaky = [m for m in model.encoder.modules() if isinstance(m, torch.nn.LeakyReLU)]
    assert [m.negative_slope for m in leaky] == [0.2, 0.2]
    assert (model.class_priors[0].log_variance_logit != 0).all()
    default = build_model(PartedConfig(hidden=16), (1, 64, 64), 3)
    assert not any(isinstance(m, torch.nn.LeakyReLU) for m in default.modules())
    assert (default.class_priors[0].log_variance_logit == 0).all()


def test_parted_authors_settings_switch_on_their_networks_initialisation_and_schedules():
    config = parted_authors(PartedConfig(hidden=64, label_fraction=0.005))
    assert (config.network, config.hidden, config.top_activation, config.negative_slope, config.class_prior_init) == (
        "conv", 256, "leaky_relu", 0.1, "randn")
    assert (config.train.lr, config.train.batch_size) == (5e-4, 64)
    assert config.train.lr_plateau == {
        "elbo": LRPlateau(factor=0.5, patience=1, threshold=1e-2, cooldown=4, eps=1e-7),
        "classifier": LRPlateau(factor=0.5, patience=1, threshold=1e-1, cooldown=2, eps=1e-6),
    }
    mnist = parted_authors(mnist_config())
    assert (mnist.network, mnist.image_size) == ("conv", 32)
    assert mnist.train.lr_plateau["elbo"].patience == 2
    assert (mnist.train.lr_plateau["classifier"].patience, mnist.train.lr_plateau["classifier"].cooldown) == (2, 3)
    assert set(authors_lr_plateau("dsprites", supervised=False)) == {"elbo"}


def test_mnist_plateau_epoch_is_the_authors_938_steps_not_a_pass_over_our_smaller_pool():
    mnist = parted_authors(mnist_config())
    assert MNIST_AUTHORS_EPOCH_STEPS == math.ceil(60_000 / 64) == 938
    assert {name: p.every_n_steps for name, p in mnist.train.lr_plateau.items()} == {"elbo": 938, "classifier": 938}
    dsprites = parted_authors(PartedConfig(label_fraction=0.005))
    assert all(p.every_n_steps is None for p in dsprites.train.lr_plateau.values())  # an epoch: one pass


def test_student_t_degrees_of_freedom_reach_the_prior():
    config = DecompositionConfig(prior="student-t", df=9.0)
    model, _ = decomposition_model(config, {"image_shape": [2], "shape": [2]})
    assert float(model.prior.df) == 9.0
    assert float(model.prior().base_dist.df[0]) == 9.0


def test_decomposition_authors_settings_switch_on_amsgrad_and_their_dsprites_encoder():
    pinwheel = decomposition_authors(DecompositionConfig())
    assert pinwheel.train.amsgrad and pinwheel.hidden == 100 and pinwheel.hidden_activation == "relu"
    dsprites = decomposition_authors(DecompositionConfig(dataset="dsprites", latent_dim=10, prior="isotropic"))
    assert dsprites.train.amsgrad and (dsprites.hidden, dsprites.hidden_activation) == (128, "identity")
    model, _ = decomposition_model(dsprites, {"image_shape": [1, 64, 64], "shape": [1, 64, 64]})
    assert isinstance(model.encoder.fc[-1], torch.nn.Identity) and model.encoder.out_features == 128
    assert _transposed_convolutions(model.decoder) == [(64, 64), (64, 64), (64, 32), (32, 1)]  # theirs
    flat = decomposition_authors(DecompositionConfig(dataset="dsprites", latent_dim=10, prior="isotropic", flatten=True))
    assert flat.hidden_activation == "relu" and flat.decoder_channels is None


def _transposed_convolutions(decoder: torch.nn.Module) -> list[tuple[int, int]]:
    return [(layer.in_channels, layer.out_channels) for layer in decoder.modules()
            if isinstance(layer, torch.nn.ConvTranspose2d)]


def test_the_default_decomposition_decoder_mirrors_the_encoder():
    config = DecompositionConfig(dataset="dsprites", latent_dim=10, prior="isotropic")
    model, _ = decomposition_model(config, {"image_shape": [1, 64, 64], "shape": [1, 64, 64]})
    assert _transposed_convolutions(model.decoder) == [(64, 64), (64, 32), (32, 32), (32, 1)]


@pytest.mark.parametrize("shape, channels, message", [
    ([1, 64, 64], (64, 64, 32), "decoder_channels must be 4 positive widths, one per convolution of the encoder on "
                                "64-pixel images, got (64, 64, 32)"),
    ([784], (64,), "decoder_channels must be None for MLP networks (flattened points)"),
])
def test_decoder_channels_that_do_not_fit_the_networks_are_refused_by_name(shape, channels, message):
    config = DecompositionConfig(dataset="dsprites", latent_dim=10, prior="isotropic", decoder_channels=channels)
    with pytest.raises(ValueError) as info:
        decomposition_model(config, {"image_shape": [1, 64, 64], "shape": shape})
    assert message in str(info.value)


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: PartedConfig(top_activation="gelu"), "top_activation must be one of ('relu', 'leaky_relu', 'identity'), got 'gelu'"),
        (lambda: PartedConfig(class_prior_init="ones"), "class_prior_init must be one of ('zeros', 'randn'), got 'ones'"),
        (lambda: PartedConfig(negative_slope=-0.1), "negative_slope must be a finite number >= 0, got -0.1"),
        (lambda: PartedConfig(image_size=32), "image_size must be None or 64 for dSprites, got 32"),
        (lambda: mnist_config(image_size=30), "image_size must be one of (28, 32), got 30"),
        (lambda: DecompositionConfig(hidden_activation="tanh"), "hidden_activation must be one of ('relu', 'leaky_relu', 'identity'), got 'tanh'"),
        (lambda: DecompositionConfig(decoder_channels=(64, 0)), "decoder_channels must be None or positive widths, got (64, 0)"),
    ],
)
def test_bad_authors_options_are_refused_naming_the_setting(make, message):
    with pytest.raises(SettingError) as info:
        make()
    assert message in str(info.value)


def test_set_reaches_the_optimiser_and_network_options(monkeypatch):
    seen = []
    monkeypatch.setattr(recipes_base, "train_recipe", lambda recipe, config, *args, **kwargs: seen.append(config) or {})
    argv = ["train", "parted", "--set", "top_activation=leaky_relu", "--set", "class_prior_init=randn",
            "--set", "train.amsgrad=true", "--set", 'train.lr_plateau={"elbo": {"factor": 0.5, "patience": 1}}']
    assert main(argv) == 0
    config = seen[0]
    assert config.top_activation == "leaky_relu" and config.class_prior_init == "randn" and config.train.amsgrad
    assert config.train.lr_plateau == {"elbo": LRPlateau(factor=0.5, patience=1)}


def test_a_bad_plateau_setting_is_refused_naming_the_field():
    with pytest.raises(SettingError, match=r"setting train.lr_plateau: .*factor must be in \(0, 1\), got 2.0"):
        with_overrides(PartedConfig(), {"train.lr_plateau": '{"elbo": {"factor": 2}}'})
    with pytest.raises(SettingError, match=r"unknown setting 'fctor'; did you mean 'factor'"):
        with_overrides(PartedConfig(), {"train.lr_plateau": '{"elbo": {"fctor": 0.5}}'})


def test_contrastive_glorot_init_reaches_every_layer_of_the_model():
    from ppl_vae.recipes.configs import ContrastiveConfig
    from ppl_vae.recipes.contrastive import build_untrained as contrastive_model

    inputs = {"event_shape": [20], "target_size": 50, "background_size": 50}
    model, _ = contrastive_model(ContrastiveConfig(hidden=16, weight_init="glorot"), inputs)
    layers = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    assert len(layers) == 8  # two encoders with two heads each, and the decoder's two layers
    for layer in layers:
        bound = (6 / (layer.in_features + layer.out_features)) ** 0.5
        assert torch.equal(layer.bias, torch.zeros_like(layer.bias)) and layer.weight.abs().max() <= bound
    default, _ = contrastive_model(ContrastiveConfig(hidden=16), inputs)
    assert any((m.bias != 0).any() for m in default.modules() if isinstance(m, torch.nn.Linear))
    with pytest.raises(SettingError, match="weight_init must be one of \\('torch', 'glorot'\\), got 'he'"):
        ContrastiveConfig(weight_init="he")


def test_the_configs_name_the_choices_the_networks_take():
    from ppl_vae import nn as networks
    from ppl_vae.infer import decomposition
    from ppl_vae.recipes import configs

    assert configs.ACTIVATIONS is networks.ACTIVATIONS and configs.WEIGHT_INITS is networks.WEIGHT_INITS
    assert configs.DISCRIMINATORS is networks.DISCRIMINATORS and configs.DIVERGENCES is decomposition.DIVERGENCES
