"""Bad numbers through the library API are refused naming the argument: bools where integers are
meant, NaN and infinities where finite numbers are, non-integers where integers are."""
import math

import pytest
import torch
from pyro.infer import TraceMeanField_ELBO
from test_engine import small_vae

from ppl_vae import fit
from ppl_vae.models import VAE
from ppl_vae.nn import MLP, mlp_decoder
from ppl_vae.train import BatchBlocks, RunDirectory, TensorBatches, TrainConfig, as_groups, plan_sweep
from ppl_vae.train.distributed import process_seed

DATA = {"x": torch.randn(16, 8)}


@pytest.mark.parametrize("lr", [math.inf, -math.inf, math.nan, 0.0, True, "1e-3"])
def test_fit_refuses_a_learning_rate_that_is_not_a_finite_positive_number(lr):
    with pytest.raises(ValueError, match=r"^lr must be a finite number > 0, got"):
        fit(small_vae(), TraceMeanField_ELBO(), DATA, lr=lr, steps=1, progress_bar=False)


@pytest.mark.parametrize(
    "setting, value, named",
    [
        ("steps", True, "steps must be a positive integer, got True"),
        ("steps", 2.5, "steps must be a positive integer, got 2.5"),
        ("batch_size", False, "batch_size must be a positive integer"),
        ("checkpoint_every_n_steps", 10.0, "checkpoint_every_n_steps must be a positive integer"),
        ("seed", True, "seed must be an integer in"),
        ("seed", -1, "seed must be an integer in"),
        ("betas", (0.9, math.nan), "betas must be a finite number"),
        ("betas", (0.9,), "betas must be two numbers"),
        ("batch_sizes", {"x": True}, r"batch_sizes\['x'\] must be a positive integer"),
        ("validate", 1, "validate must be True or False"),
        ("loggers", ("csv", "wandb"), "loggers must be distinct names"),
        ("loggers", "csv", "loggers must be a list"),
    ],
)
def test_training_settings_of_the_wrong_kind_are_refused_naming_the_setting(setting, value, named):
    with pytest.raises(ValueError, match=named):
        TrainConfig(**{setting: value})


def test_fit_arguments_of_the_wrong_kind_are_refused_naming_the_argument(tmp_path):
    for name in ("resume", "overwrite", "weights_only"):
        with pytest.raises(ValueError, match=f"{name} must be True or False, got 1"):
            fit(small_vae(), TraceMeanField_ELBO(), DATA, run_dir=tmp_path, steps=1, **{name: 1})
    with pytest.raises(TypeError, match="config must be a TrainConfig"):
        fit(small_vae(), TraceMeanField_ELBO(), DATA, config={"steps": 1})


@pytest.mark.parametrize("latent_dim", [True, 2.5, 0, "2"])
def test_vae_refuses_a_latent_dim_that_is_not_a_positive_integer(latent_dim):
    encoder = MLP([8, 16], final_activation=torch.nn.ReLU())
    with pytest.raises(ValueError, match=r"^latent_dim must be a positive integer, got"):
        VAE(encoder, mlp_decoder(2, [16], (8,)), latent_dim, likelihood="gaussian", likelihood_scale=0.5)


def test_engine_parts_refuse_bools_and_fractions_where_integers_are_meant(tmp_path):
    groups = as_groups(DATA)
    cases = [
        (lambda: TensorBatches(groups, True, 4), "batch_size must be a positive integer"),
        (lambda: TensorBatches(groups, 4, 2.0), "num_batches must be an integer"),
        (lambda: TensorBatches(groups, 4, 4, seed=False), "seed must be an integer"),
        (lambda: TensorBatches(groups, 4, 4).seek(True), "iteration must be an integer"),
        (lambda: TensorBatches(groups, 4, 4, rank=2, world_size=2), r"rank must be an integer in \[0, 1\]"),
        (lambda: BatchBlocks(TensorBatches(groups, 4, 4), True), "size must be a positive integer"),
        (lambda: RunDirectory(tmp_path, overwrite=1), "overwrite must be True or False"),
        (lambda: process_seed(0, True), "rank must be an integer"),
        (lambda: plan_sweep("vae", {}, [0, True], tmp_path), r"seeds\[1\] must be an integer"),
        (lambda: plan_sweep("vae", {}, [0], tmp_path, threads=0), "threads must be a positive integer"),
    ]
    for call, named in cases:
        with pytest.raises(ValueError, match=named):
            call()
