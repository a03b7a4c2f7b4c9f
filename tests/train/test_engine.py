"""The training engine: loss falls, resume is exact, steps are isolated, faults are loud."""
import math

import lightning as L
import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro.infer import SVI, Trace_ELBO, TraceMeanField_ELBO

from ppl_vae import fit
from ppl_vae.infer import AuxiliaryStep, DecompositionELBO, TrainingLoss
from ppl_vae.models import VAE
from ppl_vae.nn import MLP, mlp_decoder
from ppl_vae.train import CheckpointError, NonFiniteLossError, RunDirectoryExistsError, read_checkpoint

FAST = dict(progress_bar=False, log_every_n_steps=5, batch_size=32, lr=1e-2)


def small_vae(seed: int = 0, latent_dim: int = 2, hidden: int = 16) -> VAE:
    torch.manual_seed(seed)
    encoder = MLP([8, hidden], final_activation=torch.nn.ReLU())
    return VAE(encoder, mlp_decoder(latent_dim, [hidden], (8,)), latent_dim, likelihood="gaussian", likelihood_scale=0.5)


class Interrupt(Exception):
    pass


class InterruptAt(L.Callback):
    def __init__(self, iteration: int) -> None:
        self.iteration = iteration

    def on_train_batch_end(self, trainer, module, *args) -> None:
        if module.iteration == self.iteration:
            raise Interrupt


def test_small_vae_loss_falls(data):
    result = fit(small_vae(), TraceMeanField_ELBO(), data, steps=60, **FAST)
    losses = [record["elbo_loss"] for record in result.history]
    assert result.steps == 60
    assert losses[-1] < 0.7 * losses[0]


def test_resumed_run_ends_in_the_state_of_an_uninterrupted_run(data, tmp_path):
    settings = dict(steps=40, checkpoint_every_n_steps=10, **FAST)
    straight = fit(small_vae(), TraceMeanField_ELBO(), data, run_dir=tmp_path / "a", **settings)
    with pytest.raises(Interrupt):
        fit(small_vae(), TraceMeanField_ELBO(), data, run_dir=tmp_path / "b", callbacks=[InterruptAt(25)], **settings)
    saved = read_checkpoint(tmp_path / "b" / "checkpoints" / "last.ckpt")
    assert saved["ppl_vae"]["iteration"] == 20
    adam_state = saved["optimizer_states"][0]["state"]
    assert all(int(s["step"]) == 20 for s in adam_state.values())
    resumed = fit(small_vae(seed=5), TraceMeanField_ELBO(), data, run_dir=tmp_path / "b", resume=True, **settings)
    assert resumed.steps == 40
    for p, q in zip(straight.model.parameters(), resumed.model.parameters(), strict=False):
        torch.testing.assert_close(p, q)
    assert straight.history == resumed.history


class BatchCounter(L.Callback):
    def __init__(self) -> None:
        self.block_sizes: list[int] = []

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
        self.block_sizes.append(len(batch))


def test_blocks_of_iterations_train_and_checkpoint_as_single_iterations_do(data, tmp_path):
    settings = dict(steps=30, checkpoint_every_n_steps=10, **FAST)
    single = fit(small_vae(), AuxiliaryObjective(), data, **settings)
    counter = BatchCounter()
    with pytest.raises(Interrupt):
        fit(small_vae(), AuxiliaryObjective(), data, run_dir=tmp_path, iterations_per_training_step=4,
            callbacks=[counter, InterruptAt(24)], **settings)
    assert counter.block_sizes == [4] * 6
    assert read_checkpoint(tmp_path / "checkpoints" / "last.ckpt")["ppl_vae"]["iteration"] == 20
    counter = BatchCounter()
    resumed = fit(small_vae(seed=5), AuxiliaryObjective(), data, run_dir=tmp_path, resume=True,
                  iterations_per_training_step=4, callbacks=[counter], **settings)
    assert counter.block_sizes == [4, 4, 2]
    assert resumed.steps == 30
    for p, q in zip(single.model.parameters(), resumed.model.parameters(), strict=True):
        torch.testing.assert_close(p, q)
    assert [r["step"] for r in resumed.history] == [5, 10, 15, 20, 25, 30]
    assert resumed.history == single.history


class CountBackwardHooks(L.Callback):
    def __init__(self) -> None:
        self.calls = 0

    def on_before_backward(self, trainer, module, loss) -> None:
        self.calls += 1


class StepsTaken(L.Callback):
    def on_train_end(self, trainer, module) -> None:
        self.global_step = trainer.global_step


def test_every_step_goes_through_lightnings_backward_and_optimiser_hooks(data):
    steps, counter = StepsTaken(), CountBackwardHooks()
    fit(small_vae(), AuxiliaryObjective(), data, steps=12, callbacks=[steps, counter], **FAST)
    assert counter.calls == 24
    assert steps.global_step == 24


def test_the_engine_takes_the_same_iterations_as_a_training_iteration_loop(data):
    """The engine's history is that of TrainingIteration with the same optimisers and batches."""
    from ppl_vae.infer import TrainingIteration
    from ppl_vae.train.batches import TensorBatches, as_groups

    engine = fit(small_vae(), AuxiliaryObjective(), data, steps=6, **FAST)
    model, objective = small_vae(), AuxiliaryObjective()
    iteration = TrainingIteration(model, objective, lr=FAST.get("lr", 1e-3))
    batches = TensorBatches(as_groups(data), FAST["batch_size"], 6, seed=0)
    pyro.set_rng_seed(0)
    for step, batch in enumerate(batches):
        with pyro.validation_enabled(False):
            iteration(batch, step)
    for p, q in zip(engine.model.parameters(), model.parameters(), strict=True):
        torch.testing.assert_close(p, q)


def test_resume_with_another_seed_is_refused_naming_the_batch_order(data, tmp_path):
    with pytest.raises(Interrupt):
        fit(small_vae(), TraceMeanField_ELBO(), data, run_dir=tmp_path, steps=10, checkpoint_every_n_steps=5,
            callbacks=[InterruptAt(7)], **FAST)
    with pytest.raises(ValueError, match="batch order"):
        fit(small_vae(), TraceMeanField_ELBO(), data, run_dir=tmp_path, resume=True, steps=10, seed=1, **FAST)


def test_checkpoint_of_another_model_is_refused(data, tmp_path):
    fit(small_vae(), TraceMeanField_ELBO(), data, run_dir=tmp_path, steps=10, checkpoint_every_n_steps=5, **FAST)
    with pytest.raises(CheckpointError, match="another configuration"):
        fit(small_vae(hidden=8), TraceMeanField_ELBO(), data, run_dir=tmp_path, resume=True, steps=10, **FAST)
    with pytest.raises(CheckpointError, match="Trace_ELBO"):
        fit(small_vae(), Trace_ELBO(), data, run_dir=tmp_path, resume=True, steps=10, **FAST)


def test_corrupt_checkpoint_gives_a_clear_error(data, tmp_path):
    fit(small_vae(), TraceMeanField_ELBO(), data, run_dir=tmp_path, steps=5, **FAST)
    (tmp_path / "checkpoints" / "last.ckpt").write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match="corrupt"):
        fit(small_vae(), TraceMeanField_ELBO(), data, run_dir=tmp_path, resume=True, steps=5, **FAST)


def test_existing_run_directory_is_not_overwritten_unless_asked(data, tmp_path):
    fit(small_vae(), TraceMeanField_ELBO(), data, run_dir=tmp_path, steps=5, **FAST)
    with pytest.raises(RunDirectoryExistsError, match="overwrite"):
        fit(small_vae(), TraceMeanField_ELBO(), data, run_dir=tmp_path, steps=5, **FAST)
    fit(small_vae(), TraceMeanField_ELBO(), data, run_dir=tmp_path, steps=5, overwrite=True, **FAST)


def test_run_directory_holds_config_checkpoint_and_metrics(data, tmp_path):
    fit(small_vae(), TraceMeanField_ELBO(), data, run_dir=tmp_path, steps=10, extra_config={"note": "x"}, **FAST)
    config = (tmp_path / "config.json").read_text()
    assert '"torch"' in config and '"note"' in config and '"steps": 10' in config
    assert (tmp_path / "checkpoints" / "last.ckpt").is_file()
    lines = (tmp_path / "metrics.csv").read_text().splitlines()
    assert lines[0] == "step,elbo_loss" and len(lines) == 3


class AuxiliaryObjective(TraceMeanField_ELBO):
    """An ELBO with an auxiliary step that pulls the decoder's output bias towards 3;
    ``elbo_weight=0`` makes the ELBO step a no-op, isolating the auxiliary one."""

    def __init__(self, elbo_weight: float = 1.0) -> None:
        super().__init__()
        self.elbo_weight = elbo_weight
        self.steps_seen: list[int] = []

    def auxiliary_steps(self, model):
        bias = model.decoder[0][-1].bias
        return [AuxiliaryStep("pull", lambda **batch: (bias - 3).pow(2).sum(), [bias], when="before", lr=0.1)]

    def training_loss(self, model, guide, *args, step, global_batch=None, **kwargs) -> TrainingLoss:
        self.steps_seen.append(step)
        return TrainingLoss(self.elbo_weight * super().differentiable_loss(model, guide, *args, **kwargs), {}, {})


def test_auxiliary_step_changes_only_its_parameters(data):
    model = small_vae()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    fit(model, AuxiliaryObjective(elbo_weight=0.0), data, steps=10, **FAST)
    changed = {n for n, p in model.named_parameters() if not torch.equal(before[n], p)}
    assert changed == {"decoder.0.3.bias"}


def test_auxiliary_and_elbo_steps_alternate_and_are_logged(data):
    objective = AuxiliaryObjective()
    result = fit(small_vae(), objective, data, steps=30, **FAST)
    assert objective.steps_seen == list(range(30))
    assert {"pull_loss", "elbo_loss", "step"} == set(result.history[-1])
    assert result.history[-1]["pull_loss"] < result.history[0]["pull_loss"]


class ExplodingELBO(TraceMeanField_ELBO):
    def __init__(self, at: int) -> None:
        super().__init__()
        self.at = at

    def training_loss(self, model, guide, *args, step, global_batch=None, **kwargs) -> TrainingLoss:
        loss = super().differentiable_loss(model, guide, *args, **kwargs)
        exploded = step >= self.at
        logged = {"reconstruction": loss.detach(), "penalty": torch.tensor(float("nan") if exploded else 0.0)}
        return TrainingLoss(loss * float("nan") if exploded else loss, logged, {})


def test_nan_loss_stops_the_run_naming_step_and_terms_and_keeps_the_last_checkpoint(data, tmp_path):
    with pytest.raises(NonFiniteLossError, match=r"step 12.*penalty"):
        fit(small_vae(), ExplodingELBO(at=12), data, run_dir=tmp_path, steps=30, checkpoint_every_n_steps=5, **FAST)
    saved = read_checkpoint(tmp_path / "checkpoints" / "last.ckpt")
    assert saved["ppl_vae"]["iteration"] == 10
    assert all(torch.isfinite(t).all() for t in saved["state_dict"].values())


def test_plain_svi_trains_next_to_the_engine(data):
    fit(small_vae(), TraceMeanField_ELBO(), data, steps=5, **FAST)
    pyro.clear_param_store()
    model = small_vae(seed=3)
    svi = SVI(model.model, model.guide, pyro.optim.Adam({"lr": 1e-2}), TraceMeanField_ELBO())
    losses = [svi.step(data["x"]) for _ in range(60)]
    assert losses[-1] < 0.7 * losses[0]
    engine_model = small_vae(seed=3)
    result = fit(engine_model, TraceMeanField_ELBO(), data, steps=40, **FAST)
    assert result.history[-1]["elbo_loss"] < result.history[0]["elbo_loss"]


def test_unpaired_data_groups_reach_the_model_by_name():
    seen = []

    class TwoGroupModel(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.loc = torch.nn.Parameter(torch.zeros(1))

        def model(self, target, background):
            seen.append((target.shape[0], background.shape[0]))
            with pyro.plate("t", target.shape[0]):
                pyro.sample("obs_t", dist.Normal(self.loc, 1.0), obs=target[:, 0])

        def guide(self, target, background):
            pass

    data = {"target": torch.randn(100, 1), "background": torch.randn(30, 1)}
    fit(TwoGroupModel(), Trace_ELBO(), data, steps=3, batch_size=16, progress_bar=False)
    assert seen == [(16, 16)] * (1 + 3)  # the first batch, traced once before training, then 3 steps


def test_bad_training_input_names_the_argument(data):
    with pytest.raises(ValueError, match="steps"):
        fit(small_vae(), TraceMeanField_ELBO(), data, steps=0, progress_bar=False)
    with pytest.raises(ValueError, match="NaN"):
        fit(small_vae(), TraceMeanField_ELBO(), {"x": torch.full((8, 8), float("nan"))}, steps=1, progress_bar=False)
    with pytest.raises(TypeError, match="unknown training setting 'stepz'; did you mean 'steps'"):
        fit(small_vae(), TraceMeanField_ELBO(), data, stepz=3)
    with pytest.raises(ValueError, match="cuda"):
        if torch.cuda.is_available():
            raise ValueError("cuda present: nothing to check")
        fit(small_vae(), TraceMeanField_ELBO(), data, steps=1, device="cuda", progress_bar=False)


class DeviceRecorder(L.Callback):
    def __init__(self) -> None:
        self.devices: list[torch.device] = []

    def on_train_batch_start(self, trainer, module, batch, batch_idx) -> None:
        self.devices.append(module.batches.groups["x"]["x"].device)


@pytest.mark.parametrize("data_on_device", [True, False])
def test_gpu_data_path_option_places_the_training_tensors(data, data_on_device):
    recorder = DeviceRecorder()
    result = fit(small_vae(), TraceMeanField_ELBO(), data, steps=3, data_on_device=data_on_device, callbacks=[recorder], **FAST)
    assert result.steps == 3
    assert {d.type for d in recorder.devices} == {"cpu"}
    if torch.cuda.is_available():
        cuda = DeviceRecorder()
        fit(small_vae(), TraceMeanField_ELBO(), data, steps=3, device="cuda", data_on_device=data_on_device, callbacks=[cuda], **FAST)
        assert {d.type for d in cuda.devices} == {"cuda" if data_on_device else "cpu"}


def test_engine_trains_under_module_local_params_and_leaves_the_param_store_alone(data):
    pyro.settings.set(module_local_params=True)
    try:
        model = small_vae()
        result = fit(model, TraceMeanField_ELBO(), data, steps=40, **FAST)
    finally:
        pyro.settings.set(module_local_params=False)
    assert result.history[-1]["elbo_loss"] < result.history[0]["elbo_loss"]
    assert len(pyro.get_param_store()) == 0


def test_adam_is_fused_on_cuda_parameters_and_foreach_elsewhere():
    from types import SimpleNamespace

    from ppl_vae.train.module import adam_implementation

    on_gpu = [SimpleNamespace(is_cuda=True), SimpleNamespace(is_cuda=True)]
    assert adam_implementation(on_gpu) == {"fused": True}
    assert adam_implementation([torch.zeros(2, requires_grad=True)]) == {"foreach": True}
    assert adam_implementation([*on_gpu, torch.zeros(2)]) == {"foreach": True}
    optimizer = torch.optim.Adam([torch.zeros(2, requires_grad=True)], **adam_implementation([torch.zeros(2)]))
    assert optimizer.defaults["foreach"] is True


class OptimizerBetas(L.Callback):
    def on_train_start(self, trainer, module) -> None:
        self.betas = [optimizer.param_groups[0]["betas"] for optimizer in trainer.optimizers]


def test_an_auxiliary_step_that_names_adam_betas_trains_with_them_and_the_elbo_with_the_configs(data):
    from ppl_vae.infer.baselines import factor_vae

    seen = OptimizerBetas()
    objective = factor_vae(5.0, discriminator_hidden=(8,), discriminator_betas=(0.5, 0.9), input_dim=2)
    fit(small_vae(), objective, data, steps=2, callbacks=[seen], betas=(0.8, 0.99), **FAST)
    assert seen.betas == [(0.8, 0.99), (0.5, 0.9)]


def test_elbo_arguments_reach_the_objective_on_every_step(data):
    runs = []
    for elbo_arguments in ({}, {"aggregate_data": {"x": data["x"]}}):
        model = small_vae()
        result = fit(model, DecompositionELBO(alpha=1.0, divergence="inclusive_kl", chunk_size=100), data, steps=10,
                     elbo_arguments=elbo_arguments, **FAST)
        assert all(math.isfinite(v) for record in result.history for v in record.values())
        runs.append([p.detach().clone() for p in model.parameters()])
    assert any(not torch.equal(a, b) for a, b in zip(*runs, strict=True))


def test_the_decomposition_recipe_passes_the_whole_training_set_as_an_argument_when_it_aggregates_over_it():
    from ppl_vae.recipes.configs import DecompositionConfig
    from ppl_vae.recipes.decomposition import build

    experiment = build(DecompositionConfig(aggregate_over_dataset=True, num_train=200))
    assert experiment.elbo_arguments["aggregate_data"]["x"] is experiment.train_data["x"]
    assert build(DecompositionConfig(num_train=200)).elbo_arguments == {}
