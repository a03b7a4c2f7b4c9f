"""The control runner without the authors' code (it is not in CI): a stand-in checkout with
their module layout trains, checkpoints, resumes exactly and writes the campaign's record
schema with the authors' commit; bad arguments get one clear error; and the library does not
depend on the runner."""
from __future__ import annotations

import dataclasses
import json
import math
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from experiments.controls import run as controls  # noqa: E402

COMMIT = "0123456789abcdef0123456789abcdef01234567"
STAND_IN_MODEL = '''
import torch
from torch import nn


class VAE(nn.Module):
    """Their constructor and the attributes the runner touches; a linear encoder."""

    def __init__(self, img_size, latent_spec, c_priors, device, temperature=0.67):
        super().__init__()
        self.z_dim, self.c_dims = latent_spec["z"], latent_spec["c"]
        self.sum_c_dims, self.c_count = sum(self.c_dims), len(self.c_dims)
        self.img_to_features = nn.Flatten()
        self.features_to_hidden = nn.Linear(64 * 64, 4)
        self.h_to_c_logit_fc = nn.Linear(4, self.sum_c_dims)
        self.z_mean_fc = nn.Linear(4, self.z_dim)
        self.u_mean_fc = nn.Linear(4, 1)
        self.sigmoid_coef = 1

    def encode(self, x, only_disc_dist=False):
        hidden = self.features_to_hidden(self.img_to_features(x))
        latent = {"log_c": torch.log_softmax(self.h_to_c_logit_fc(hidden), dim=1)}
        if not only_disc_dist:
            latent["z"] = [self.z_mean_fc(hidden), None]
            latent["u"] = [self.u_mean_fc(hidden), None]
        return latent
'''
STAND_IN_TRAINING = '''
import numpy as np
import torch
from torch.optim.lr_scheduler import ReduceLROnPlateau


class Trainer:
    """Their constructor, optimisers, schedulers (with `verbose`, as theirs) and step methods;
    a noisy loss, so that a resume that lost the RNG state would differ."""

    def __init__(self, model, optimizers, dataset=None, device=None, recon_type=None, z_capacity=None,
                 u_capacity=None, c_gamma=None, entropy_gamma=None, bc_gamma=None, bc_threshold=None):
        self.model = model
        self.optimizer_warm_up, self.optimizer_model = optimizers
        self.scheduler_warm_up = ReduceLROnPlateau(self.optimizer_warm_up, factor=0.5, patience=0, verbose=True)
        self.scheduler_model = ReduceLROnPlateau(self.optimizer_model, factor=0.5, patience=0, verbose=True)
        self.num_steps = 0

    def _warm_up(self, loader):
        return 0

    def _train_iteration(self, data):
        self.num_steps += 1
        self.model.sigmoid_coef += 2e-4
        latent = self.model.encode(data)
        noise = torch.randn_like(latent["z"][0])
        loss = (latent["z"][0] + noise).pow(2).mean() + latent["u"][0].pow(2).mean()
        self.optimizer_model.zero_grad()
        loss.backward()
        self.optimizer_model.step()
        return np.array([loss.item()]) * data.size(0)
'''
STAND_IN_LOADER = '''
class FastTensorDataLoader:
    def __init__(self, *tensors, batch_size=32, shuffle=False, drop_last=True):
        self.tensors = tensors
'''


@pytest.fixture
def stand_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[type, type, type]:
    """The runner's view of a checkout with their layout (partedvae/, utils/), stand-in classes."""
    checkout = tmp_path / "checkout"
    for path, text in {"partedvae/__init__.py": "", "partedvae/models.py": STAND_IN_MODEL,
                       "partedvae/training.py": STAND_IN_TRAINING, "utils/__init__.py": "",
                       "utils/fast_tensor_dataloader.py": STAND_IN_LOADER}.items():
        (checkout / path).parent.mkdir(parents=True, exist_ok=True)
        (checkout / path).write_text(text)
    for name in ("partedvae", "partedvae.models", "partedvae.training", "utils", "utils.fast_tensor_dataloader"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.setattr(sys, "path", list(sys.path))
    classes = controls.import_authors_code(checkout)
    yield classes
    for name in ("partedvae", "partedvae.models", "partedvae.training", "utils", "utils.fast_tensor_dataloader"):
        sys.modules.pop(name, None)


TINY = dataclasses.replace(controls.CONTROLS["parted-dsprites-unsupervised"], steps=6, epoch_batches=4,
                           curve_every=1000)


def train(classes, tmp_path: Path, steps: int, monkeypatch: pytest.MonkeyPatch) -> dict:
    monkeypatch.setattr(controls, "score", lambda control, seed, training, classes: {"factor_score": 0.5})
    return controls.run_control(dataclasses.replace(TINY, steps=steps), 0, classes, COMMIT, tmp_path / "checkpoints",
                                tmp_path / "results", budget_minutes=5, checkpoint_minutes=5)


def test_a_finished_run_writes_the_campaign_record_with_the_authors_commit(stand_in, tmp_path, monkeypatch):
    record = train(stand_in, tmp_path, 6, monkeypatch)
    written = json.loads((tmp_path / "results" / TINY.experiment / "seed0.json").read_text())
    assert written == record
    assert record["complete"] and record["steps"] == 6 and record["target_steps"] == 6
    assert record["metrics"] == {"factor_score": 0.5}
    assert record["implementation"] == "authors"
    assert record["authors_repository"] == controls.REPOSITORIES["parted-vae"] and record["authors_commit"] == COMMIT
    campaign_keys = {"experiment", "seed", "complete", "steps", "target_steps", "stopped_at", "training_seconds",
                     "wall_seconds", "invocations", "updated", "commit", "versions", "machine", "recipe", "settings",
                     "votes", "metrics", "curve"}
    assert campaign_keys <= set(record)
    assert record["settings"]["z_capacity"] == [0.0, 30.0, 300000, 50.0]


def test_a_resumed_run_continues_exactly_as_an_uninterrupted_one(stand_in, tmp_path, monkeypatch):
    straight = tmp_path / "straight"
    train(stand_in, straight, 6, monkeypatch)
    train(stand_in, tmp_path, 3, monkeypatch)  # stops at 3, crossing no epoch yet; then resumes to 6
    record = train(stand_in, tmp_path, 6, monkeypatch)
    assert record["invocations"] == 2 and record["steps"] == 6
    resumed = torch.load(tmp_path / "checkpoints" / TINY.experiment / "seed0.pt", weights_only=False)
    expected = torch.load(straight / "checkpoints" / TINY.experiment / "seed0.pt", weights_only=False)
    for name, value in expected["model"].items():
        assert torch.equal(resumed["model"][name], value), name
    assert resumed["sigmoid_coef"] == expected["sigmoid_coef"] and resumed["epoch"] == expected["epoch"] == 1
    assert resumed["scheduler_model"] == expected["scheduler_model"]


def test_a_run_whose_checkpoint_is_gone_restarts_from_step_zero(stand_in, tmp_path, monkeypatch, capsys):
    train(stand_in, tmp_path, 3, monkeypatch)
    (tmp_path / "checkpoints" / TINY.experiment / "seed0.pt").unlink()
    record = train(stand_in, tmp_path, 3, monkeypatch)
    assert "is gone; restarting from step 0" in capsys.readouterr().out
    assert record["invocations"] == 1


@pytest.mark.parametrize(("arguments", "named"), [
    (["no-such-experiment"], "experiment: expected one of"),
    (["parted-dsprites-unsupervised", "--authors-commit", "HEAD"], "--authors-commit: expected the 40 hex digits"),
    (["parted-dsprites-unsupervised", "--budget-minutes", "0"], "--budget-minutes"),
    (["parted-dsprites-unsupervised", "--seed", "-1"], "--seed: expected an integer >= 0"),
])
def test_bad_arguments_get_one_error_naming_them(arguments, named, capsys):
    defaults = {"--seed": "0", "--authors-code": "/nowhere", "--authors-commit": COMMIT, "--budget-minutes": "1"}
    for flag, value in defaults.items():
        if flag not in arguments:
            arguments = [*arguments, flag, value]
    with pytest.raises(SystemExit):
        controls.parse_arguments(arguments)
    assert named in capsys.readouterr().err


@pytest.mark.parametrize("code", sorted(controls.REPOSITORIES))
def test_a_checkout_without_their_modules_is_refused_by_name(code, tmp_path):
    with pytest.raises(ValueError, match=f"--authors-code: expected a checkout of {controls.REPOSITORIES[code]}"):
        controls.IMPORTERS[code](tmp_path)


def test_every_control_names_a_campaign_experiment_and_a_known_repository():
    from experiments.campaign import MANIFEST, read_manifest

    experiments = {run.experiment for run in read_manifest(MANIFEST)}
    for name, control in controls.CONTROLS.items():
        assert name == control.experiment and name in experiments
        assert control.code in controls.REPOSITORIES and control.code in controls.TRAININGS


def test_the_library_does_not_depend_on_the_controls():
    for path in (ROOT / "ppl_vae").rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        assert "experiments.controls" not in text and "partedvae" not in text, path


def test_the_mnist_curve_stops_after_patience_points_without_improvement_and_keeps_the_best_weights(monkeypatch):
    import types

    import experiments.held_out as held_out

    accuracies = iter([0.5, 0.6, 0.55, 0.6, 0.55, 0.55, 0.55])
    monkeypatch.setattr(held_out, "held_out_accuracy", lambda model, data: next(accuracies))
    model = torch.nn.Linear(1, 1)
    training = types.SimpleNamespace(model=model, curve=[], best=None, best_weights=None, stopped_at=None, steps=0,
                                     data={"scoring": types.SimpleNamespace(validation=None)},
                                     encoder=lambda: None)
    control = dataclasses.replace(controls.CONTROLS["parted-mnist"], patience=5)
    for step in range(1000, 8000, 1000):
        training.steps = step
        with torch.no_grad():
            model.weight.fill_(step)
        controls.evaluate_curve(control, 0, training)
        assert (training.stopped_at is not None) == (step == 7000)
    assert training.best == {"step": 2000, "accuracy": 0.6}
    assert training.best_weights["weight"].item() == 2000


def test_the_student_t_control_is_also_scored_on_the_authors_cdf_mapped_codes():
    from experiments.campaign import DSpritesScoring

    student_t = controls.CONTROLS["decomposition-dsprites-student-t-df9"]
    isotropic = controls.CONTROLS["decomposition-dsprites-isotropic"]

    assert DSpritesScoring(student_t.campaign_run(0), controls.scoring_settings(student_t)).student_t_df == 9.0
    assert DSpritesScoring(isotropic.campaign_run(0), controls.scoring_settings(isotropic)).student_t_df is None


STAND_IN_DECOMPOSITION_MODELS = '''
import torch
from torch import nn


class VAE_dsprites(nn.Module):
    """Their constructor and encoder interface; a decoder whose logits leave [0, 1], as theirs."""

    def __init__(self, params):
        super().__init__()
        self.enc = nn.Sequential(nn.Flatten(), nn.Linear(64 * 64, 2))
        self.dec = nn.Linear(2, 64 * 64)
'''
STAND_IN_OBJECTIVES = '''
import torch
from torch.distributions import RelaxedBernoulli


def decomp_objective(model, x, K=1, beta=1.0, alpha=0.0, regs=None):
    """Their call shape: logits passed as RelaxedBernoulli's probs, which argument checks refuse."""
    logits = model.dec(model.enc(x)) * 10 - 5
    px_z = RelaxedBernoulli(torch.tensor(0.67), probs=logits)
    return -(px_z.probs - x.flatten(1)).pow(2).sum()
'''


def test_the_decomposition_step_runs_their_logits_as_probs_after_something_turned_argument_checks_on(
        tmp_path, monkeypatch):
    import pyro

    their_modules = ("models", "models.vae_dsprites", "objectives", "vis")

    checkout = tmp_path / "checkout"
    for path, text in {"src/models/__init__.py": "from models.vae_dsprites import VAE_dsprites\n",
                       "src/models/vae_dsprites.py": STAND_IN_DECOMPOSITION_MODELS,
                       "src/objectives.py": STAND_IN_OBJECTIVES}.items():
        (checkout / path).parent.mkdir(parents=True, exist_ok=True)
        (checkout / path).write_text(text)
    for name in their_modules:
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.setattr(sys, "path", list(sys.path))
    classes = controls.import_decomposition_code(checkout)
    control = dataclasses.replace(controls.CONTROLS["decomposition-dsprites-isotropic"], steps=2, epoch_batches=2)
    training = controls.DecompositionTraining(control, 0, classes)
    try:
        with pyro.validation_enabled(True):  # as an import of pyro.distributions or the curve's scoring leaves it
            training.step()
            training.step()
            with pytest.raises(ValueError, match="probs"):  # the checks are on again outside their objective
                torch.distributions.RelaxedBernoulli(torch.tensor(0.67), probs=torch.tensor([2.0]))
    finally:
        for name in their_modules:
            sys.modules.pop(name, None)
    assert training.iteration == 2 and math.isfinite(training.last_loss)


@pytest.mark.parametrize("arguments, named", [
    (["--batches", "0"], "--batches: expected an integer >= 1, got 0"),
    (["--authors-commit", "abc"], "--authors-commit"),
])
def test_the_objective_comparison_refuses_bad_arguments_by_name(arguments, named, tmp_path, capsys):
    from experiments.controls import objectives

    defaults = ["--authors-code", str(tmp_path), "--authors-commit", COMMIT]
    with pytest.raises(SystemExit):
        objectives.main([*defaults, *arguments])
    assert named in capsys.readouterr().err
