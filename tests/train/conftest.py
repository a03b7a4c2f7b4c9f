"""Fixtures shared by the engine's tests."""
import pytest
import torch


@pytest.fixture
def data():
    """256 points of 8 features near a 2-d linear subspace (a small VAE fits them in tens of
    steps). Test modules that need other data define their own ``data``."""
    generator = torch.Generator().manual_seed(1)
    z = torch.randn(256, 2, generator=generator)
    return {"x": z @ torch.randn(2, 8, generator=generator) + 0.1 * torch.randn(256, 8, generator=generator)}
