"""What a run directory keeps: metrics.csv rows on disk as they are logged and exactly once after a
resume, a finished run resumed without a file changed, leftovers removed, weights-only
checkpoints (and the opt-in for trusted older ones), TensorBoard next to the CSV file."""
import logging
import math

import lightning as L
import numpy as np
import pytest
import torch
from pyro.infer import TraceMeanField_ELBO
from test_engine import FAST, Interrupt, InterruptAt, small_vae

from ppl_vae import fit
from ppl_vae.train import CheckpointError, CSVMetricsLogger, read_checkpoint, read_training_metrics

SETTINGS = dict(steps=40, checkpoint_every_n_steps=10, **FAST)


@pytest.fixture
def data():
    generator = torch.Generator().manual_seed(1)
    return {"x": torch.randn(128, 8, generator=generator)}


def files_of(folder) -> dict[str, tuple[bytes, int]]:
    return {str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mtime_ns) for p in folder.rglob("*") if p.is_file()}


class RowsOnDisk(L.Callback):
    """The steps in metrics.csv after every training step."""

    def __init__(self, run_dir) -> None:
        self.run_dir, self.seen = run_dir, {}

    def on_train_batch_end(self, trainer, module, *args) -> None:
        written = (self.run_dir / "metrics.csv").exists()
        self.seen[module.iteration] = read_training_metrics(self.run_dir)["step"] if written else []


def test_every_logged_row_is_on_disk_when_it_is_logged(data, tmp_path):
    rows = RowsOnDisk(tmp_path)
    fit(small_vae(), TraceMeanField_ELBO(), data, run_dir=tmp_path, callbacks=[rows], **SETTINGS)
    for iteration in (3, 5, 7, 15, 40):
        assert rows.seen[iteration] == list(range(5, iteration // 5 * 5 + 1, 5))


def test_resume_keeps_the_rows_up_to_the_checkpoint_and_logs_the_rest_once(data, tmp_path):
    straight = fit(small_vae(), TraceMeanField_ELBO(), data, run_dir=tmp_path / "a", **SETTINGS)
    with pytest.raises(Interrupt):
        fit(small_vae(), TraceMeanField_ELBO(), data, run_dir=tmp_path / "b", callbacks=[InterruptAt(27)], **SETTINGS)
    assert read_training_metrics(tmp_path / "b")["step"] == [5, 10, 15, 20, 25]
    fit(small_vae(), TraceMeanField_ELBO(), data, run_dir=tmp_path / "b", resume=True, **SETTINGS)
    assert (tmp_path / "b" / "metrics.csv").read_text() == (tmp_path / "a" / "metrics.csv").read_text()
    table = read_training_metrics(tmp_path / "b")
    assert table["step"] == [row["step"] for row in straight.history]
    assert table["elbo_loss"] == [row["elbo_loss"] for row in straight.history]


def test_resuming_a_finished_run_changes_no_file_and_returns_the_trained_model(data, tmp_path):
    trained = fit(small_vae(), TraceMeanField_ELBO(), data, run_dir=tmp_path, loggers=("csv", "tensorboard"), **SETTINGS)
    before = files_of(tmp_path)
    resumed = fit(small_vae(seed=7), TraceMeanField_ELBO(), data, run_dir=tmp_path, resume=True,
                  loggers=("csv", "tensorboard"), **SETTINGS)
    assert files_of(tmp_path) == before
    assert resumed.already_finished and not trained.already_finished
    assert resumed.steps == 40 and resumed.history == trained.history
    for p, q in zip(trained.model.parameters(), resumed.model.parameters(), strict=True):
        assert torch.equal(p, q)


def test_a_run_that_starts_or_resumes_removes_the_temporary_files_of_killed_writes(data, tmp_path):
    leftovers = [tmp_path / "checkpoints" / ".last.ckpt.abc123.tmp", tmp_path / ".config.json.x1.tmp",
                 tmp_path / ".metrics.csv.x2.tmp"]
    (tmp_path / "checkpoints").mkdir()
    for path in leftovers:
        path.write_bytes(b"partial")
    with pytest.raises(Interrupt):
        fit(small_vae(), TraceMeanField_ELBO(), data, run_dir=tmp_path, callbacks=[InterruptAt(12)], **SETTINGS)
    assert not any(path.exists() for path in leftovers)
    leftovers[0].write_bytes(b"partial")
    fit(small_vae(), TraceMeanField_ELBO(), data, run_dir=tmp_path, resume=True, **SETTINGS)
    assert not leftovers[0].exists()
    unrelated = tmp_path / "notes.tmp"
    unrelated.write_text("mine")
    fit(small_vae(), TraceMeanField_ELBO(), data, run_dir=tmp_path, resume=True, **SETTINGS)
    assert unrelated.read_text() == "mine"


def test_checkpoints_load_weights_only_and_older_pickled_ones_need_the_explicit_opt_in(data, tmp_path):
    with pytest.raises(Interrupt):
        fit(small_vae(), TraceMeanField_ELBO(), data, run_dir=tmp_path, callbacks=[InterruptAt(12)], **SETTINGS)
    path = tmp_path / "checkpoints" / "last.ckpt"
    saved = torch.load(path, weights_only=True)
    assert saved["ppl_vae"]["iteration"] == 10
    saved["ppl_vae"]["rng"]["numpy"] = np.random.get_state()  # what older versions wrote: a numpy array
    torch.save(saved, path)
    with pytest.raises(CheckpointError, match="weights_only=False"):
        read_checkpoint(path)
    with pytest.raises(CheckpointError, match="weights_only=False"):
        fit(small_vae(), TraceMeanField_ELBO(), data, run_dir=tmp_path, resume=True, **SETTINGS)
    assert read_checkpoint(path, weights_only=False)["ppl_vae"]["iteration"] == 10
    resumed = fit(small_vae(), TraceMeanField_ELBO(), data, run_dir=tmp_path, resume=True, weights_only=False, **SETTINGS)
    assert resumed.steps == 40
    torch.load(path, weights_only=True)


def test_tensorboard_gets_every_row_once_also_after_a_resume(data, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    settings = dict(SETTINGS, loggers=("csv", "tensorboard"))
    with pytest.raises(Interrupt):
        fit(small_vae(), TraceMeanField_ELBO(), data, run_dir=tmp_path, callbacks=[InterruptAt(27)], **settings)
    result = fit(small_vae(), TraceMeanField_ELBO(), data, run_dir=tmp_path, resume=True, **settings)
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    scalars = events.Scalars("elbo_loss")
    assert [s.step for s in scalars] == [row["step"] for row in result.history]
    assert [s.value for s in scalars] == pytest.approx([row["elbo_loss"] for row in result.history])


def test_a_new_run_in_an_overwritten_folder_starts_a_fresh_history(data, tmp_path):
    fit(small_vae(), TraceMeanField_ELBO(), data, run_dir=tmp_path, loggers=("csv", "tensorboard"), **SETTINGS)
    fit(small_vae(), TraceMeanField_ELBO(), data, run_dir=tmp_path, overwrite=True, steps=10, **FAST)
    assert read_training_metrics(tmp_path)["step"] == [5, 10]
    assert not list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))


def test_training_prints_no_lightning_chatter_and_restores_its_log_level(data, caplog):
    # Lightning's own logger level too: the command line lowers it in-process (other tests call it)
    rank_zero = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    with caplog.at_level(logging.INFO), caplog.at_level(logging.INFO, logger="lightning.pytorch"):
        level = rank_zero.level
        fit(small_vae(), TraceMeanField_ELBO(), data, steps=2, **FAST)
        assert rank_zero.level == level
    assert "GPU available" not in caplog.text
    assert "Tip:" not in caplog.text and "litlogger" not in caplog.text


def test_training_metrics_table_has_one_list_per_column_with_nan_for_missing_terms(tmp_path):
    logger = CSVMetricsLogger(tmp_path / "metrics.csv")
    logger.log_metrics({"elbo_loss": 3.5}, step=5)
    logger.log_metrics({"elbo_loss": 2.25, "pull_loss": 0.1}, step=10)
    logger.log_metrics({"elbo_loss": 1.0, "pull_loss": 0.2}, step=15)
    table = read_training_metrics(tmp_path)
    assert list(table) == ["step", "elbo_loss", "pull_loss"]
    assert table["step"] == [5, 10, 15] and table["elbo_loss"] == [3.5, 2.25, 1.0]
    assert math.isnan(table["pull_loss"][0]) and table["pull_loss"][1:] == [0.1, 0.2]


def test_reading_metrics_of_a_folder_without_them_names_the_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="metrics.csv"):
        read_training_metrics(tmp_path)
    (tmp_path / "metrics.csv").write_text("loss,step\n1.0,5\n")
    with pytest.raises(ValueError, match="not a metrics table"):
        read_training_metrics(tmp_path)
