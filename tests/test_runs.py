"""ppl_vae.load_run: recipe runs and fit runs come back trained, without their data unless asked."""
import pytest
import torch
from pyro.infer import TraceMeanField_ELBO

import ppl_vae
from ppl_vae.models import VAE
from ppl_vae.nn import MLP, mlp_decoder
from ppl_vae.recipes import RECIPES, train_recipe, with_overrides
from ppl_vae.train import CheckpointError

TINY_VAE = {"num_train": 96, "latent_dim": 2, "factor_score_votes": 10, "train.steps": 4, "train.batch_size": 16,
            "train.progress_bar": False, "train.log_every_n_steps": 2, "train.checkpoint_every_n_steps": 2}


@pytest.fixture(scope="module")
def recipe_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("recipe") / "run"
    config = with_overrides(RECIPES["vae"].demo(), TINY_VAE)
    train_recipe(RECIPES["vae"], config, run)
    return run


def small_vae() -> VAE:
    return VAE(MLP([6, 16], final_activation=torch.nn.ReLU()), mlp_decoder(2, [16], (6,)), 2, likelihood="gaussian", likelihood_scale=0.5)


@pytest.fixture(scope="module")
def fit_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("fit") / "run"
    torch.manual_seed(0)
    result = ppl_vae.fit(small_vae(), TraceMeanField_ELBO(), {"x": torch.randn(64, 6)}, run_dir=run, steps=5,
                         batch_size=16, progress_bar=False)
    return run, result.model


def test_recipe_run_comes_back_trained_in_eval_mode_without_its_data(recipe_run, monkeypatch):
    from ppl_vae.recipes import vae

    monkeypatch.setattr(vae, "load_training_data", lambda *a, **k: pytest.fail("load_run loaded the training data"))
    loaded = ppl_vae.load_run(recipe_run)
    checkpoint = torch.load(recipe_run / "checkpoints" / "last.ckpt", weights_only=False)["state_dict"]
    for name, value in loaded.model.state_dict().items():
        torch.testing.assert_close(value, checkpoint[f"model.{name}"])
    assert not loaded.model.training
    assert loaded.recipe == "vae" and loaded.config.latent_dim == 2 and loaded.data is None
    assert loaded.objective is not None


def test_recipe_run_with_data_rebuilds_the_training_data(recipe_run):
    loaded = ppl_vae.load_run(recipe_run, with_data=True)
    assert loaded.data["x"].shape == (96, 1, 64, 64)
    assert loaded.experiment.model is loaded.model


def test_recipe_run_directory_holds_training_curves(recipe_run):
    assert (recipe_run / "pictures" / "training_curves.png").stat().st_size > 0


@pytest.mark.parametrize("name, overrides", [
    ("vae", {"num_train": 32, "latent_dim": 2}),
    ("parted", {"num_train": 64, "num_eval": 8, "hidden": 16}),
    ("contrastive", {"num_target": 64, "hidden": 16}),
    ("decomposition", {"prior": "learned-pca", "alpha": 0.0}),
])
def test_every_recipe_rebuilds_its_model_without_data(name, overrides):
    recipe = RECIPES[name]
    config = with_overrides(recipe.demo(), overrides)
    experiment = recipe.build(config)
    rebuilt, objective = recipe.build_model(config, experiment.model_inputs)
    assert type(rebuilt) is type(experiment.model) and type(objective) is type(experiment.objective)
    assert {k: v.shape for k, v in rebuilt.state_dict().items()} == {k: v.shape for k, v in experiment.model.state_dict().items()}
    rebuilt.load_state_dict(experiment.model.state_dict())


def test_fit_run_loads_into_the_given_model(fit_run):
    run, trained = fit_run
    loaded = ppl_vae.load_run(run, model=small_vae())
    for name, value in trained.state_dict().items():
        torch.testing.assert_close(loaded.model.state_dict()[name], value)
    assert loaded.recipe is None and loaded.config.steps == 5 and not loaded.model.training


def test_fit_run_without_a_model_says_to_pass_one(fit_run):
    with pytest.raises(ValueError, match="pass model="):
        ppl_vae.load_run(fit_run[0])


def test_fit_run_into_a_model_of_another_shape_is_a_checkpoint_error(fit_run):
    other = VAE(MLP([6, 8], final_activation=torch.nn.ReLU()), mlp_decoder(2, [8], (6,)), 2, likelihood="gaussian", likelihood_scale=0.5)
    with pytest.raises(CheckpointError, match="does not fit the model"):
        ppl_vae.load_run(fit_run[0], model=other)


def test_missing_run_directory_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        ppl_vae.load_run(tmp_path / "nowhere")


def test_run_directory_without_a_checkpoint_is_named(fit_run, tmp_path):
    (tmp_path / "config.json").write_text((fit_run[0] / "config.json").read_text())
    with pytest.raises(FileNotFoundError, match="holds no checkpoint"):
        ppl_vae.load_run(tmp_path, model=small_vae())


def test_corrupt_checkpoint_is_a_checkpoint_error(fit_run, tmp_path):
    (tmp_path / "config.json").write_text((fit_run[0] / "config.json").read_text())
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "last.ckpt").write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match="corrupt"):
        ppl_vae.load_run(tmp_path, model=small_vae())


def test_fit_run_has_no_training_data_to_rebuild(fit_run):
    with pytest.raises(ValueError, match="not of a recipe"):
        ppl_vae.load_run(fit_run[0], model=small_vae(), with_data=True)
