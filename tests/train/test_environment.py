"""Lightning's NVML-based CUDA check is dropped only where NVML is missing, and CUDA's availability does not change."""
import os

import pytest
import torch

import ppl_vae.train  # noqa: F401  (imports Lightning, which sets the variable, and drops it where NVML is missing)
from ppl_vae.train import environment
from ppl_vae.train.environment import NVML_CHECK_VARIABLE, drop_nvml_check_without_nvml


def test_the_variable_is_dropped_where_nvml_cannot_be_loaded(monkeypatch):
    monkeypatch.setenv(NVML_CHECK_VARIABLE, "1")
    monkeypatch.setattr(environment, "nvml_loads", lambda: False)
    available = torch.cuda.is_available()
    assert drop_nvml_check_without_nvml() is True
    assert NVML_CHECK_VARIABLE not in os.environ
    assert torch.cuda.is_available() == available


@pytest.mark.parametrize("value", ["1", "0"])
def test_the_variable_stays_where_nvml_loads_or_it_is_not_one(monkeypatch, value):
    monkeypatch.setenv(NVML_CHECK_VARIABLE, value)
    monkeypatch.setattr(environment, "nvml_loads", lambda: value == "1")
    assert drop_nvml_check_without_nvml() is False
    assert os.environ[NVML_CHECK_VARIABLE] == value


def test_importing_the_engine_leaves_no_failing_nvml_check_behind():
    assert os.environ.get(NVML_CHECK_VARIABLE) != "1" or environment.nvml_loads()
