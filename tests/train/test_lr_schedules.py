"""Optimiser settings of the engine: learning rates reduced on a plateau of each step's own
loss (stepped by the engine under manual optimisation, exact across a resume) and AMSGrad."""
import lightning as L
import pytest
import torch
from pyro.infer import TraceMeanField_ELBO
from test_engine import FAST, Interrupt, InterruptAt, small_vae

from ppl_vae import fit
from ppl_vae.infer import AuxiliaryStep, LinearCapacity, PartedELBO, TrainingLoss
from ppl_vae.models import PartedVAE
from ppl_vae.train import LRPlateau, TrainConfig, read_checkpoint


@pytest.fixture
def data():
    generator = torch.Generator().manual_seed(1)
    return {"x": torch.randn(256, 8, generator=generator)}


class ScriptedLosses(TraceMeanField_ELBO):
    """An ELBO step and a "classifier" step after it whose loss values at training step t are
    ``elbo[t]`` and ``classifier[t]`` (no gradient: the parameters stay put, only the values
    the schedules watch are set); the ELBO step hands t to the classifier step."""

    def __init__(self, elbo: list[float], classifier: list[float]) -> None:
        super().__init__()
        self.elbo, self.classifier = elbo, classifier

    def auxiliary_steps(self, model):
        bias = model.decoder[0][-1].bias
        return [AuxiliaryStep("classifier", lambda t, **batch: 0 * bias.sum() + self.classifier[int(t)], [bias],
                              when="after")]

    def training_loss(self, model, guide, *args, step, global_batch=None, **kwargs) -> TrainingLoss:
        loss = 0 * super().differentiable_loss(model, guide, *args, **kwargs) + self.elbo[step]
        return TrainingLoss(loss, {}, {"classifier": {"t": torch.tensor(step)}})


class LearningRates(L.Callback):
    """The learning rate of every optimiser after each training step."""

    def __init__(self) -> None:
        self.rates: list[list[float]] = []

    def on_train_batch_end(self, trainer, module, *args) -> None:
        self.rates.append([optimizer.param_groups[0]["lr"] for optimizer in trainer.optimizers])


def windows(*means: float, size: int) -> list[float]:
    return [mean for mean in means for _ in range(size)]


def halved_at(*iterations: int, steps: int, lr: float = 1e-2) -> list[float]:
    """The rate after each of ``steps`` iterations when it is halved at the end of ``iterations``."""
    return [lr * 0.5 ** sum(i >= at for at in iterations) for i in range(1, steps + 1)]


def test_each_optimisers_rate_is_halved_after_a_plateau_of_its_own_loss(data):
    # windows of 4 iterations: the ELBO's loss stops falling after window 2, the classifier's never
    elbo = windows(10, 5, 5, 5, 5, 5, 5, 5, size=4)
    classifier = windows(8, 7, 6, 5, 4, 3, 2, 1, size=4)
    schedule = LRPlateau(every_n_steps=4, factor=0.5, patience=1, threshold=0.01)
    rates = LearningRates()
    fit(small_vae(), ScriptedLosses(elbo, classifier), data, steps=32, callbacks=[rates],
        lr_plateau={"elbo": schedule, "classifier": schedule}, **FAST)
    elbo_rates = [r[0] for r in rates.rates]
    # windows 3 and 4 do not improve: halved at the end of window 4 (iteration 16), then of 6 and 8
    assert elbo_rates == halved_at(16, 24, 32, steps=32)
    assert [r[1] for r in rates.rates] == [1e-2] * 32


def test_the_scheduled_rates_are_logged_with_the_losses(data):
    elbo = windows(10, 5, 5, 5, size=4)
    result = fit(small_vae(), ScriptedLosses(elbo, elbo), data, steps=16,
                 lr_plateau={"elbo": {"every_n_steps": 4, "factor": 0.5, "patience": 0}}, **FAST)
    assert [(r["step"], r["lr/elbo"]) for r in result.history] == [(5, 1e-2), (10, 1e-2), (15, 5e-3), (16, 2.5e-3)]
    assert "lr/classifier" not in result.history[0]


def test_the_classifier_rate_is_halved_after_a_plateau_of_the_classifier_loss_alone(data):
    elbo = windows(8, 7, 6, 5, size=4)
    classifier = windows(3, 3, 3, 3, size=4)
    rates = LearningRates()
    fit(small_vae(), ScriptedLosses(elbo, classifier), data, steps=16, callbacks=[rates],
        lr_plateau={"classifier": {"every_n_steps": 4, "factor": 0.5, "patience": 0}}, **FAST)
    assert [r[0] for r in rates.rates] == [1e-2] * 16
    assert [r[1] for r in rates.rates] == halved_at(8, 12, 16, steps=16)


class Schedulers(L.Callback):
    def on_train_end(self, trainer, module) -> None:
        self.schedulers = module.lr_schedulers()


def test_parted_schedules_watch_the_window_means_of_the_elbo_and_classifier_losses():
    torch.manual_seed(0)
    model = PartedVAE.mlp((12,), z_dim=2, num_classes=3, u_dims=1, hidden=(16,), likelihood="gaussian",
                          likelihood_scale=0.5)
    x = torch.randn(96, 12)
    data = {"x": x, "labelled": {"x": x[:24], "y": torch.arange(24) % 3}}
    objective = PartedELBO(LinearCapacity(0, 5, 10), LinearCapacity(0, 2, 10), labelled_group="labelled")
    callback = Schedulers()
    result = fit(model, objective, data, steps=5, callbacks=[callback],
                 lr_plateau={"elbo": {"every_n_steps": 5}, "classifier": {"every_n_steps": 5}}, **FAST)
    elbo, classifier = callback.schedulers
    assert elbo.optimizer.param_groups[0]["params"][0] is next(model.parameters())
    torch.testing.assert_close(elbo.best, result.history[0]["elbo_loss"], rtol=1e-5, atol=0)
    torch.testing.assert_close(classifier.best, result.history[0]["classifier_loss"], rtol=1e-5, atol=0)


def test_the_default_window_is_one_pass_over_the_elbo_data(data):
    # 256 points in batches of 32: 8 iterations per pass
    rates = LearningRates()
    constant = [1.0] * 24
    fit(small_vae(), ScriptedLosses(constant, constant), data, steps=24, callbacks=[rates],
        lr_plateau={"elbo": {"factor": 0.5, "patience": 0}}, **FAST)
    assert [r[0] for r in rates.rates] == halved_at(16, 24, steps=24)


def test_a_resumed_run_reduces_its_rates_exactly_when_an_uninterrupted_one_does(data, tmp_path):
    # windows of 3; the checkpoint at 10 falls inside the window 10-12, whose mean (5.9) is
    # worse than the best (5) only if its first iteration, before the checkpoint, is counted
    elbo = windows(5, 5, 5, size=3) + [9.0, 8.0, 0.7] + windows(4, 4, 4, 4, 4, size=3)
    settings = dict(steps=24, checkpoint_every_n_steps=10,
                    lr_plateau={"elbo": {"every_n_steps": 3, "factor": 0.5, "patience": 0}}, **FAST)
    straight_rates, resumed_rates = LearningRates(), LearningRates()
    straight = fit(small_vae(), ScriptedLosses(elbo, elbo), data, run_dir=tmp_path / "a",
                   callbacks=[straight_rates], **settings)
    with pytest.raises(Interrupt):
        fit(small_vae(), ScriptedLosses(elbo, elbo), data, run_dir=tmp_path / "b", callbacks=[InterruptAt(14)],
            **settings)
    saved = read_checkpoint(tmp_path / "b" / "checkpoints" / "last.ckpt")
    assert saved["ppl_vae"]["iteration"] == 10
    assert saved["ppl_vae"]["lr_plateau"] == {"elbo": 9.0}
    resumed = fit(small_vae(seed=3), ScriptedLosses(elbo, elbo), data, run_dir=tmp_path / "b", resume=True,
                  callbacks=[resumed_rates], **settings)
    assert resumed_rates.rates == straight_rates.rates[10:]
    final = [read_checkpoint(run / "checkpoints" / "last.ckpt")["lr_schedulers"] for run in (tmp_path / "a", tmp_path / "b")]
    assert final[0] == final[1]
    assert straight_rates.rates == [[lr, 1e-2] for lr in halved_at(6, 9, 12, 18, 21, 24, steps=24)]
    assert final[0][0]["_last_lr"] == [1e-2 / 64]
    assert straight.history == resumed.history


def test_amsgrad_is_used_by_every_optimiser_when_set(data):
    class Optimisers(L.Callback):
        def on_train_end(self, trainer, module) -> None:
            self.optimizers = trainer.optimizers

    for amsgrad in (False, True):
        callback = Optimisers()
        fit(small_vae(), ScriptedLosses([1.0] * 3, [1.0] * 3), data, steps=3, callbacks=[callback], amsgrad=amsgrad,
            **FAST)
        assert [o.param_groups[0]["amsgrad"] for o in callback.optimizers] == [amsgrad, amsgrad]
        assert all(("max_exp_avg_sq" in s) == amsgrad for o in callback.optimizers for s in o.state.values())


def test_a_schedule_for_a_step_the_objective_does_not_take_is_refused_naming_the_steps(data):
    with pytest.raises(ValueError, match=r"lr_plateau names steps \['classifier'\].*\['elbo'\]"):
        fit(small_vae(), TraceMeanField_ELBO(), data, steps=2, lr_plateau={"classifier": LRPlateau()}, **FAST)


@pytest.mark.parametrize(
    "schedule, message",
    [
        ({"factor": 1.0}, r"lr_plateau\['elbo'\]: factor must be in \(0, 1\), got 1.0"),
        ({"factor": 0.0}, r"factor must be in \(0, 1\), got 0.0"),
        ({"patience": -1}, r"patience must be an integer >= 0, got -1"),
        ({"every_n_steps": 0}, r"every_n_steps must be a positive integer, got 0"),
        ({"threshold_mode": "relative"}, r"threshold_mode must be one of \('rel', 'abs'\), got 'relative'"),
        ({"cooldown": 1.5}, r"cooldown must be an integer >= 0, got 1.5"),
        ({"threshold": -0.1}, r"threshold must be a finite number >= 0.0, got -0.1"),
        ({"eps": float("nan")}, r"eps must be a finite number"),
        ({"fator": 0.5}, r"lr_plateau\['elbo'\] has unknown fields \['fator'\]"),
    ],
)
def test_bad_plateau_settings_name_the_field_and_value(schedule, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig(lr_plateau={"elbo": schedule})


def test_bad_optimiser_settings_name_the_argument():
    with pytest.raises(ValueError, match="amsgrad must be True or False, got 'yes'"):
        TrainConfig(amsgrad="yes")
    with pytest.raises(ValueError, match="lr_plateau must be a dict of step name -> LRPlateau, got 0.5"):
        TrainConfig(lr_plateau=0.5)
    with pytest.raises(ValueError, match=r"lr_plateau\['elbo'\] must be an LRPlateau or a mapping of its fields"):
        TrainConfig(lr_plateau={"elbo": 0.5})
