"""precision="bf16-mixed": networks in bfloat16, every distribution and loss term in float32."""
import importlib

import pyro
import pytest
import torch
from pyro import poutine
from pyro.poutine.util import prune_subsample_sites

from ppl_vae import fit
from ppl_vae.infer import ContrastiveELBO, DecompositionELBO, PartedELBO
from ppl_vae.models import ContrastiveVAE, DecompositionVAE, PartedVAE
from ppl_vae.nn import ConvDecoder, ConvEncoder, full_precision
from ppl_vae.train import TrainConfig


def conv_decomposition() -> tuple[DecompositionVAE, DecompositionELBO, dict]:
    torch.manual_seed(0)
    model = DecompositionVAE(ConvEncoder(28, hidden_dim=32), ConvDecoder(3, 28, hidden_dim=32), 3)
    return model, DecompositionELBO(alpha=1.0), {"x": (torch.rand(16, 1, 28, 28) > 0.5).float()}


def conv_parted() -> tuple[PartedVAE, PartedELBO, dict]:
    torch.manual_seed(0)
    model = PartedVAE.conv(28, z_dim=2, num_classes=3, u_dims=1, hidden=32)
    x = (torch.rand(16, 1, 28, 28) > 0.5).float()
    return model, PartedELBO(), {"x": x, "labelled": {"x": x[:8], "y": torch.arange(8) % 3}}


def mlp_contrastive() -> tuple[ContrastiveVAE, ContrastiveELBO, dict]:
    torch.manual_seed(0)
    model = ContrastiveVAE.mlp((1, 6, 6), 2, 2, hidden=16, likelihood="gaussian", likelihood_scale=0.3)
    return model, ContrastiveELBO(gamma=1.0, discriminator="mlp"), {"target": torch.rand(16, 1, 6, 6), "background": torch.rand(16, 1, 6, 6)}


MODELS = {"decomposition": conv_decomposition, "parted": conv_parted, "contrastive": mlp_contrastive}


def elbo_batch(data: dict) -> dict:
    return {name: value for name, value in data.items() if isinstance(value, torch.Tensor)}


def test_full_precision_lifts_only_lower_floating_point_precisions():
    assert full_precision(torch.zeros(2, dtype=torch.bfloat16)).dtype == torch.float32
    assert full_precision(torch.zeros(2, dtype=torch.float16)).dtype == torch.float32
    for dtype in (torch.float32, torch.float64, torch.int64):
        t = torch.zeros(2, dtype=dtype)
        assert full_precision(t) is t


@pytest.mark.parametrize("name", sorted(MODELS))
def test_under_autocast_every_distribution_and_the_loss_are_float32(name):
    model, objective, data = MODELS[name]()
    batch = elbo_batch(data)
    with pyro.validation_enabled(False), torch.autocast("cpu", dtype=torch.bfloat16):
        guide_trace = poutine.trace(model.guide).get_trace(**batch)
        model_trace = poutine.trace(poutine.replay(model.model, trace=guide_trace)).get_trace(**batch)
        loss = objective.differentiable_loss(model.model, model.guide, **batch, step=0)
    for trace in (prune_subsample_sites(guide_trace), prune_subsample_sites(model_trace)):
        for site in trace.nodes.values():
            if site["type"] == "sample":
                assert site["value"].dtype == torch.float32, site["name"]
                assert site["fn"].log_prob(site["value"]).dtype == torch.float32, site["name"]
    assert loss.dtype == torch.float32


@pytest.mark.parametrize("name", sorted(MODELS))
def test_mixed_precision_loss_is_close_to_the_float32_loss(name):
    model, objective, data = MODELS[name]()
    batch = elbo_batch(data)
    losses = []
    for enabled in (False, True):
        pyro.set_rng_seed(3)
        with pyro.validation_enabled(False), torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=enabled):
            losses.append(float(objective.differentiable_loss(model.model, model.guide, **batch, step=0)))
    assert losses[1] == pytest.approx(losses[0], rel=0.02)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_engine_trains_in_bf16_mixed_with_float32_parameters(name):
    model, objective, data = MODELS[name]()
    before = {key: value.clone() for key, value in model.state_dict().items()}
    result = fit(model, objective, data, steps=4, batch_size=8, precision="bf16-mixed", progress_bar=False, log_every_n_steps=2)
    assert all(torch.isfinite(torch.tensor(list(record.values()))).all() for record in result.history)
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert any(not torch.equal(before[key], value) for key, value in model.state_dict().items())


def test_unknown_precision_is_refused_naming_the_choices():
    with pytest.raises(ValueError, match=r"precision must be one of \('32-true', 'bf16-mixed'\), got '16-mixed'"):
        TrainConfig(precision="16-mixed")


def test_bf16_on_a_cpu_without_amx_warns(monkeypatch):
    accelerators = importlib.import_module("ppl_vae.train.accelerators")

    model, objective, data = MODELS["decomposition"]()
    monkeypatch.setattr(accelerators, "cpu_has_amx_bf16", lambda: False)
    with pytest.warns(UserWarning, match="CPU without AMX.*usually slower than precision='32-true'"):
        fit(model, objective, data, steps=1, batch_size=8, precision="bf16-mixed", progress_bar=False)


def test_bf16_on_a_cpu_with_amx_does_not_warn(monkeypatch):
    import warnings

    accelerators = importlib.import_module("ppl_vae.train.accelerators")

    model, objective, data = MODELS["decomposition"]()
    monkeypatch.setattr(accelerators, "cpu_has_amx_bf16", lambda: True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit(model, objective, data, steps=1, batch_size=8, precision="bf16-mixed", progress_bar=False)
    assert not [w for w in caught if "bf16-mixed" in str(w.message)]
