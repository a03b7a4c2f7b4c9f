"""The recipes' config dataclasses: documented, typed and validated on construction, and
importable without torch."""
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from ppl_vae.recipes import RECIPES, SettingError, config_from_dict, config_to_dict, with_overrides
from ppl_vae.recipes.configs import ContrastiveConfig, DecompositionConfig, PartedConfig, VAEConfig
from ppl_vae.recipes.settings import settings_of

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_every_setting_has_a_one_line_doc(name):
    for setting in settings_of(RECIPES[name].config_class):
        assert setting.doc and "\n" not in setting.doc, setting.name


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_default_and_demo_configs_survive_a_json_round_trip(name):
    recipe = RECIPES[name]
    for config in (recipe.config_class(), recipe.demo()):
        saved = json.loads(json.dumps(config_to_dict(config)))
        assert config_from_dict(recipe.config_class, saved) == config


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"latent_dim": True}, "setting latent_dim: True is not an integer (type int)"),
        ({"latent_dim": 2.5}, "setting latent_dim: 2.5 is not an integer (type int)"),
        ({"latent_dim": "10"}, "setting latent_dim: '10' is not an integer (type int)"),
        ({"beta": math.inf}, "setting beta: inf is not a finite number or null (type float | None)"),
        ({"num_train": 1}, "num_train must be an integer >= 2, got 1"),
        ({"likelihood_scale": 0.0}, "likelihood_scale must be a finite number > 0, got 0.0"),
    ],
)
def test_a_config_refuses_a_bad_python_value_naming_the_field(kwargs, message):
    with pytest.raises(SettingError) as error:
        VAEConfig(**kwargs)
    assert str(error.value) == message


def test_python_values_are_converted_to_the_declared_types():
    config = PartedConfig(gamma_z=15, z_capacity=[0, 7])
    assert config.gamma_z == 15.0 and isinstance(config.gamma_z, float)
    assert config.z_capacity == (0.0, 7.0)


def test_a_config_checks_settings_that_depend_on_each_other():
    with pytest.raises(SettingError, match="latent_dim must be 2 for prior='mixture'"):
        DecompositionConfig(latent_dim=5)
    assert DecompositionConfig(latent_dim=5, prior="isotropic").latent_dim == 5


def test_with_overrides_parses_text_and_names_nested_settings():
    config = with_overrides(VAEConfig(), {"train.lr": "2e-3", "beta": "4", "num_train": "null"})
    assert (config.train.lr, config.beta, config.num_train) == (0.002, 4.0, None)
    with pytest.raises(SettingError, match=r"^train.batch_size must be a positive integer, got -1$"):
        with_overrides(VAEConfig(), {"train": {"batch_size": -1}})


def test_the_configs_and_the_registry_import_no_torch():
    script = (
        "import sys\n"
        "from ppl_vae.recipes import RECIPES, with_overrides\n"
        "from ppl_vae.recipes.configs import VAEConfig\n"
        "with_overrides(VAEConfig(), {'beta': '2'})\n"
        "print(sorted(m for m in ('torch', 'pyro', 'lightning') if m in sys.modules))\n"
    )
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_the_configs_take_the_objectives_default_weights_and_the_models_temperature():
    import inspect

    from ppl_vae.infer import ContrastiveELBO, PartedELBO

    for config, objective, names in [
        (PartedConfig(), PartedELBO, ("gamma_z", "gamma_u", "gamma_c", "gamma_h", "gamma_bc", "delta")),
        (ContrastiveConfig(), ContrastiveELBO, ("gamma", "discriminator")),
    ]:
        defaults = inspect.signature(objective).parameters
        assert {name: getattr(config, name) for name in names} == {name: defaults[name].default for name in names}
    from ppl_vae.models import PartedVAE

    assert PartedConfig().temperature == inspect.signature(PartedVAE).parameters["temperature"].default
    capacities = PartedELBO().terms[:2]
    assert (capacities[0].capacity.start, capacities[0].capacity.end) == PartedConfig().z_capacity
    assert (capacities[1].capacity.start, capacities[1].capacity.end) == PartedConfig().u_capacity


@pytest.mark.parametrize(
    "config, objective, setting, value, expected",
    [
        (PartedConfig, "PartedELBO", "gamma_z", -1.0, "a finite number"),
        (PartedConfig, "PartedELBO", "gamma_bc", -0.5, "a finite number"),
        (PartedConfig, "PartedELBO", "delta", 1.5, "a finite number"),
        (ContrastiveConfig, "ContrastiveELBO", "gamma", -1.0, "a finite number"),
        (DecompositionConfig, "DecompositionELBO", "alpha", -2.0, "a finite number"),
        (ContrastiveConfig, "ContrastiveELBO", "discriminator", "svm", "one of"),
        (DecompositionConfig, "DecompositionELBO", "divergence", "kl", "one of"),
    ],
)
def test_a_config_refuses_a_bad_setting_of_its_objective_in_the_objectives_words(config, objective, setting, value, expected):
    """The config refuses early (before any data or torch), the objective when built from Python:
    the same check of ppl_vae._validation, the same message."""
    from ppl_vae import infer

    with pytest.raises(SettingError) as refused_by_config:
        config(**{setting: value})
    with pytest.raises(ValueError) as refused_by_objective:
        getattr(infer, objective)(**{setting: value})
    assert str(refused_by_config.value) == str(refused_by_objective.value)
    assert str(refused_by_config.value).startswith(f"{setting} must be {expected}")


@pytest.mark.parametrize("config", [VAEConfig, DecompositionConfig, ContrastiveConfig])
def test_a_config_refuses_an_unknown_likelihood_in_the_models_words(config):
    """Refused before any data or torch, with the message the model gives when built from Python."""
    import torch

    from ppl_vae.models import ContrastiveVAE, likelihood

    with pytest.raises(SettingError) as refused_by_config:
        config(likelihood="poisson")
    with pytest.raises(ValueError) as refused_by_model:
        if config is ContrastiveConfig:
            ContrastiveVAE.mlp((4,), likelihood="poisson")
        else:
            likelihood("poisson", torch.zeros(1, 2), 1, 0.1)
    assert str(refused_by_config.value) == str(refused_by_model.value)
    assert str(refused_by_config.value).startswith("likelihood must be one of")


def test_a_saved_config_with_a_retired_setting_loads_with_a_warning():
    """Runs saved by earlier versions hold ``train.replay_loss``: they still load (the setting
    is ignored with a warning), while an unknown name is still refused."""
    saved = config_to_dict(PartedConfig())
    saved["train"]["replay_loss"] = True
    with pytest.warns(UserWarning, match=r"train\.replay_loss no longer exists"):
        config = config_from_dict(PartedConfig, saved)
    assert config == PartedConfig()
    saved["train"]["replay_losses"] = False
    with pytest.raises(SettingError, match="unknown setting 'train.replay_losses'"):
        config_from_dict(PartedConfig, saved)


def test_a_retired_setting_given_on_the_command_line_is_refused():
    with pytest.raises(SettingError, match="unknown setting 'train.replay_loss'"):
        with_overrides(PartedConfig(), {"train.replay_loss": "true"})


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_a_recipe_loads_the_module_of_its_name_which_builds_and_gives_a_demo(name):
    import importlib

    module = RECIPES[name].load()
    assert module is importlib.import_module(f"ppl_vae.recipes.{name}")
    assert all(callable(getattr(module, function)) for function in ("build", "build_untrained", "demo"))
    assert type(RECIPES[name].demo()) is RECIPES[name].config_class
