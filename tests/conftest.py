"""Test-wide settings: one torch thread (CI machines have 2 cores), Pyro validation on."""
import os

import pyro
import pytest
import torch

from ppl_vae.infer.schedules import set_training_step

torch.set_num_threads(int(os.environ.get("PPL_VAE_TEST_THREADS", "1")))


@pytest.fixture(autouse=True)
def _fresh_pyro_state():
    """Each test starts with an empty param store, validation on, a fixed seed and training step 0."""
    set_training_step(0)
    pyro.clear_param_store()
    pyro.enable_validation(True)
    pyro.set_rng_seed(0)
    yield
    pyro.clear_param_store()
