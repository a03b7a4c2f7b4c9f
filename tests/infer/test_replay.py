"""ReplayedLoss: a recorded ELBO step gives the eager step's loss, gradients, logged values and
step arguments, reads parameters and buffers as they are, records each batch shape once, and
refuses what it cannot replay."""
import pyro
import pytest
import torch
from pyro.infer import TraceMeanField_ELBO
from torch import nn
from torch.fx.experimental.proxy_tensor import make_fx

from ppl_vae.distributions import IsotropicGaussianPrior, MixtureOfGaussiansPrior
from ppl_vae.infer import (
    ContrastiveELBO,
    DecompositionELBO,
    LinearCapacity,
    MeanFieldELBO,
    PartedELBO,
    ReplayedLoss,
)
from ppl_vae.infer.replay import _simplify, python_binding
from ppl_vae.models.contrastive import ContrastiveVAE
from ppl_vae.models.decomposition import DecompositionVAE
from ppl_vae.models.parted import PartedVAE
from ppl_vae.nn import MLP, mlp_decoder

FEATURES = 10


@pytest.fixture(autouse=True)
def _validation_off():
    """A replayed loss runs no Pyro validation, so it refuses to run with it on."""
    with pyro.validation_enabled(False):
        yield


def contrastive() -> tuple[ContrastiveVAE, ContrastiveELBO, list[nn.Module]]:
    torch.manual_seed(0)
    model = ContrastiveVAE.mlp((FEATURES,), 2, 2, hidden=8, likelihood="gaussian", likelihood_scale=0.5,
                               target_size=64, background_size=32)
    elbo = ContrastiveELBO(gamma=2.0, discriminator="mlp")
    elbo.auxiliary_steps(model)
    return model, elbo, [model, elbo.discriminator]


def contrastive_batch(rows: int = 16) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(rows)
    return {"target": torch.randn(rows, FEATURES, generator=generator),
            "background": torch.randn(rows // 2, FEATURES, generator=generator)}


def loss_and_gradients(loss_fn, parameters: list[torch.Tensor], seed: int, **batch) -> tuple[torch.Tensor, list]:
    """``loss_fn`` returns a loss or a TrainingLoss (a ReplayedLoss)."""
    for p in parameters:
        p.grad = None
    torch.manual_seed(seed)
    loss = loss_fn(**batch)
    loss = getattr(loss, "loss", loss)
    loss.backward()
    return loss.detach(), [None if p.grad is None else p.grad.clone() for p in parameters]


def assert_same(eager: tuple, replayed: tuple) -> None:
    torch.testing.assert_close(replayed[0], eager[0])
    for a, b in zip(eager[1], replayed[1], strict=True):
        assert (a is None) == (b is None)
        if a is not None:
            torch.testing.assert_close(b, a)


def test_replayed_contrastive_step_gives_the_eager_loss_gradients_logged_values_and_step_arguments():
    model, elbo, modules = contrastive()
    parameters = list(model.parameters()) + list(elbo.discriminator.parameters())
    replayed = ReplayedLoss(elbo, model.model, model.guide, modules)
    data = contrastive_batch()
    for seed in (1, 2, 3):
        torch.manual_seed(seed)
        eager_step = elbo.training_loss(model.model, model.guide, **data)
        eager = loss_and_gradients(lambda **b: elbo.differentiable_loss(model.model, model.guide, **b), parameters, seed, **data)
        torch.manual_seed(seed)
        replayed_step = replayed(**data)
        assert_same(eager, loss_and_gradients(replayed, parameters, seed, **data))
        assert replayed_step.logged.keys() == eager_step.logged.keys()
        for name, value in eager_step.logged.items():
            torch.testing.assert_close(replayed_step.logged[name], value)
        samples = replayed_step.step_arguments["discriminator"]
        assert samples.keys() == {"salient_sample", "shared_sample"}
        for name, value in eager_step.step_arguments["discriminator"].items():
            torch.testing.assert_close(samples[name], value)
            assert not samples[name].requires_grad
    assert replayed.recordings == 1


def test_replay_draws_fresh_noise_on_every_call():
    model, elbo, modules = contrastive()
    replayed = ReplayedLoss(elbo, model.model, model.guide, modules)
    data = contrastive_batch()
    first, second = replayed(**data).loss, replayed(**data).loss
    assert not torch.equal(first, second)


def test_replay_reads_the_parameters_and_buffers_as_they_are_at_each_call():
    model, elbo, modules = contrastive()
    replayed = ReplayedLoss(elbo, model.model, model.guide, modules)
    data = contrastive_batch()
    replayed(**data).loss.backward()
    torch.optim.SGD(model.parameters(), lr=1e-3).step()
    with torch.no_grad():
        model.salient_prior.loc.add_(0.5)
    parameters = list(model.parameters())
    eager = loss_and_gradients(lambda **b: elbo.differentiable_loss(model.model, model.guide, **b), parameters, 4, **data)
    assert_same(eager, loss_and_gradients(replayed, parameters, 4, **data))


def test_a_parameter_replaced_after_the_recording_is_the_one_replayed():
    model, elbo, modules = contrastive()
    replayed = ReplayedLoss(elbo, model.model, model.guide, modules)
    data = contrastive_batch()
    replayed(**data)
    head = next(m for m in model.modules() if isinstance(m, nn.Linear))
    head.weight = nn.Parameter(head.weight.detach() * 2.0)
    parameters = list(model.parameters())
    eager = loss_and_gradients(lambda **b: elbo.differentiable_loss(model.model, model.guide, **b), parameters, 5, **data)
    assert_same(eager, loss_and_gradients(replayed, parameters, 5, **data))
    assert head.weight.grad is not None


def test_each_batch_shape_is_recorded_once_and_the_oldest_is_dropped_past_the_limit():
    model, elbo, modules = contrastive()
    replayed = ReplayedLoss(elbo, model.model, model.guide, modules, max_recordings=2)
    parameters = list(model.parameters())
    for rows in (16, 8, 16, 4):
        data = contrastive_batch(rows)
        eager = loss_and_gradients(lambda **b: elbo.differentiable_loss(model.model, model.guide, **b), parameters, rows, **data)
        assert_same(eager, loss_and_gradients(replayed, parameters, rows, **data))
    assert replayed.recordings == 2


def test_grad_mode_switches_inside_the_loss_are_replayed():
    """The mixture prior's inclusive KL has a score-function baseline computed without gradients."""
    torch.manual_seed(0)
    model = DecompositionVAE(MLP([3, 8], final_activation=nn.ReLU()), mlp_decoder(2, [8], (3,)), 2,
                             MixtureOfGaussiansPrior.pinwheel(learn=True), "gaussian", 0.5)
    elbo = DecompositionELBO(beta=0.5, alpha=2.0, divergence="inclusive_kl")
    replayed = ReplayedLoss(elbo, model.model, model.guide, [model])
    x = torch.linspace(-1, 1, 48).reshape(16, 3)
    parameters = list(model.parameters())
    for seed in (1, 2):
        eager = loss_and_gradients(lambda **b: elbo.differentiable_loss(model.model, model.guide, **b), parameters, seed, x=x)
        eager_terms = dict(elbo.logged)
        assert_same(eager, loss_and_gradients(replayed, parameters, seed, x=x))
        torch.manual_seed(seed)
        replayed_terms = replayed(x=x).logged
        for name, value in eager_terms.items():
            torch.testing.assert_close(replayed_terms[name], value)


def test_the_library_base_objective_is_replayed_and_a_loss_that_reads_values_on_the_host_is_refused():
    torch.manual_seed(0)
    model = DecompositionVAE(MLP([3, 8], final_activation=nn.ReLU()), mlp_decoder(2, [8], (3,)), 2,
                             IsotropicGaussianPrior(2), "gaussian", 0.5)
    x = torch.linspace(-1, 1, 48).reshape(16, 3)
    parameters = list(model.parameters())
    elbo = MeanFieldELBO()
    eager = loss_and_gradients(lambda **b: elbo.differentiable_loss(model.model, model.guide, **b), parameters, 5, x=x)
    assert_same(eager, loss_and_gradients(ReplayedLoss(elbo, model.model, model.guide, [model]), parameters, 5, x=x))
    with pytest.raises(ValueError, match="reads a tensor's value on the host"):
        ReplayedLoss(TraceMeanField_ELBO(), model.model, model.guide, [model])(x=x)


def test_components_with_a_training_step_schedule_are_refused():
    model = PartedVAE.mlp((FEATURES,), z_dim=2, num_classes=3, u_dims=1, hidden=(8,))
    elbo = PartedELBO(z_capacity=LinearCapacity(0.0, 5.0, 100), u_capacity=LinearCapacity(0.0, 5.0, 100))
    with pytest.raises(ValueError, match="changes with the training step"):
        ReplayedLoss(elbo, model.model, model.guide, [model])


def test_decomposition_over_a_whole_data_set_is_refused():
    model = DecompositionVAE(MLP([3, 8], final_activation=nn.ReLU()), mlp_decoder(2, [8], (3,)), 2,
                             IsotropicGaussianPrior(2), "gaussian", 0.5)
    elbo = DecompositionELBO(alpha=1.0, divergence="inclusive_kl")
    replayed = ReplayedLoss(elbo, model.model, model.guide, [model])
    with pytest.raises(ValueError, match="tensors only.*'aggregate_data'.*activation checkpointing"):
        replayed(x=torch.zeros(8, 3), aggregate_data={"x": torch.zeros(32, 3)})


def test_calls_it_cannot_replay_faithfully_are_refused():
    model, elbo, modules = contrastive()
    replayed = ReplayedLoss(elbo, model.model, model.guide, modules)
    data = contrastive_batch()
    with pyro.validation_enabled(True), pytest.raises(RuntimeError, match="validation"):
        replayed(**data)
    with torch.no_grad(), pytest.raises(RuntimeError, match="gradients enabled"):
        replayed(**data)
    with pytest.raises(ValueError, match="tensors only.*'target'"):
        replayed(target=[[0.0] * FEATURES])
    with pytest.raises(ValueError, match="max_recordings"):
        ReplayedLoss(elbo, model.model, model.guide, modules, max_recordings=0)


def test_a_tensor_with_gradients_outside_the_given_modules_is_refused():
    model, elbo, _ = contrastive()
    replayed = ReplayedLoss(elbo, model.model, model.guide, [model])
    with pytest.raises(ValueError, match="not a parameter or buffer"):
        replayed(**contrastive_batch())


def test_simplification_keeps_copies_that_an_in_place_operation_writes_to():
    def scaled_then_rectified(x: torch.Tensor) -> torch.Tensor:
        y = x * 1.0
        y.relu_()
        return y + 0.0

    graph = _simplify(make_fx(scaled_then_rectified, pre_dispatch=True)(torch.randn(5)))
    x = torch.tensor([-1.0, 2.0, -3.0, 4.0, 0.5])
    torch.testing.assert_close(graph(x), x.clamp_min(0.0))
    torch.testing.assert_close(x, torch.tensor([-1.0, 2.0, -3.0, 4.0, 0.5]))
    assert [str(n.target) for n in graph.graph.nodes if n.op == "call_function"] == ["aten.mul.Tensor", "aten.relu_.default"]


def test_simplification_drops_grad_switches_and_expansions_that_change_nothing():
    def centred(x: torch.Tensor, loc: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            pass
        with torch.no_grad():
            offset = x.sum() * 0.0
        return (x - loc.expand(x.shape)).pow(2).sum() + offset

    x, loc = torch.randn(4, 3), torch.randn(3, requires_grad=True)
    graph = _simplify(make_fx(centred, pre_dispatch=True)(x, loc))
    targets = [n.target for n in graph.graph.nodes if n.op == "call_function"]
    assert torch.ops.aten.expand.default not in targets
    assert targets.count(torch._C._set_grad_enabled) == 2
    replayed = graph(x, loc)
    replayed.backward()
    torch.testing.assert_close(replayed, centred(x, loc.detach()))
    torch.testing.assert_close(loc.grad, -2 * (x - loc.detach()).sum(0))
    assert torch.is_grad_enabled()


def test_recorded_operators_are_called_through_the_public_namespaces_builtin_bindings():
    assert python_binding(torch.ops.aten.add.Tensor) is torch.add
    assert python_binding(torch.ops.aten.linear.default) is torch.nn.functional.linear
    assert python_binding(torch.ops.aten.normal_.default) is torch.Tensor.normal_
    assert python_binding(torch.ops.aten.special_erfcx.default) is torch.special.erfcx
    assert python_binding(torch.ops.prims.add.default) is None
    model, elbo, modules = contrastive()
    replayed = ReplayedLoss(elbo, model.model, model.guide, modules)
    replayed(**contrastive_batch())
    (graph,) = replayed._recordings.values()
    calls = [n for n in graph.graph.nodes if n.op == "call_function"]
    kept = [n.target for n in calls if hasattr(n.target, "overloadpacket")]
    assert all(python_binding(target) is None for target in kept)  # e.g. leaky_relu: only a Python wrapper is public
    assert len(kept) < 0.05 * len(calls)


def test_an_untested_torch_release_falls_back_to_the_eager_loss_with_a_warning(monkeypatch):
    import ppl_vae.infer.replay as replay

    monkeypatch.setattr(replay, "TESTED_TORCH_VERSIONS", ((1, 0),))
    model, elbo, modules = contrastive()
    with pytest.warns(RuntimeWarning, match="eager loss"):
        replayed = ReplayedLoss(elbo, model.model, model.guide, modules)
    data = contrastive_batch()
    parameters = list(model.parameters())
    eager = loss_and_gradients(lambda **b: elbo.differentiable_loss(model.model, model.guide, **b), parameters, 3, **data)
    assert_same(eager, loss_and_gradients(replayed, parameters, 3, **data))
    assert replayed.recordings == 0
