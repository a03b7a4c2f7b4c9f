"""A run killed with SIGKILL (between checkpoints, while writing a checkpoint, while evaluating)
resumes from its last checkpoint and ends where an uninterrupted run ends, with every row of
metrics.csv exactly once; what a killed write leaves is removed; checkpoint writes are atomic;
every checkpoint loads weights-only."""
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ppl_vae.train import AtomicCheckpointIO, read_checkpoint, read_training_metrics

STEPS, CHECKPOINT_EVERY, LOG_EVERY = 60, 20, 5
ARGS = [
    "train", "vae", "--no-progress", "--steps", str(STEPS), "--batch-size", "32",
    "--set", "dataset=pinwheel", "--set", "latent_dim=2", "--set", "hidden=16", "--set", "num_train=256",
    "--set", f"train.checkpoint_every_n_steps={CHECKPOINT_EVERY}", "--set", f"train.log_every_n_steps={LOG_EVERY}",
]
WORKER = Path(__file__).with_name("sigkill_worker.py")
ROOT = Path(__file__).resolve().parents[2]


def run(*command: str) -> subprocess.CompletedProcess:
    """``python COMMAND`` importing this checkout's ppl_vae."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = dict(os.environ, PPL_VAE_NUM_THREADS="1", PYTHONPATH=path)
    return subprocess.run([sys.executable, *command], env=env, capture_output=True, text=True, timeout=300)


def checkpoint(run_dir: Path) -> dict:
    return torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)


@pytest.fixture(scope="module")
def straight(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("straight")
    done = run("-m", "ppl_vae.cli", *ARGS, "--run-dir", str(run_dir), "--overwrite")
    assert done.returncode == 0, done.stderr[-3000:]
    return run_dir


def killed_at(run_dir: Path, moment: str, count: int, *args: str) -> None:
    """Run ``ppl-vae ARGS`` in a process that SIGKILLs itself at ``moment`` (sigkill_worker.py)."""
    killed = run(str(WORKER), moment, str(count), *args)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]


def logged_steps(run_dir: Path) -> list[int]:
    return read_training_metrics(run_dir)["step"]


def test_run_killed_between_checkpoints_during_a_checkpoint_write_and_during_evaluation_resumes_exactly(
    straight, tmp_path
):
    """One run killed three times, each resume killed again, then resumed to the end."""
    every_row = list(range(LOG_EVERY, STEPS + 1, LOG_EVERY))
    temporary = tmp_path / "checkpoints"

    killed_at(tmp_path, "iteration", 47, *ARGS, "--run-dir", str(tmp_path))
    assert checkpoint(tmp_path)["ppl_vae"]["iteration"] == 40
    assert logged_steps(tmp_path) == every_row[:9]  # 5..45: rows after the checkpoint are on disk too

    killed_at(tmp_path, "checkpoint-write", 1, "train", "--resume", str(tmp_path))
    assert checkpoint(tmp_path)["ppl_vae"]["iteration"] == 40  # the write of iteration 60 died halfway
    assert len(list(temporary.glob(".last.ckpt.*.tmp"))) == 1
    assert logged_steps(tmp_path) == every_row  # 45 logged once: the resume dropped it, then logged it again

    killed_at(tmp_path, "evaluation", 1, "train", "--resume", str(tmp_path))
    assert not list(temporary.glob(".*.tmp"))
    assert checkpoint(tmp_path)["ppl_vae"]["iteration"] == STEPS
    assert logged_steps(tmp_path) == every_row
    assert not (tmp_path / "metrics.json").exists()

    resumed = run("-m", "ppl_vae.cli", "train", "--resume", str(tmp_path))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert (tmp_path / "metrics.json").is_file()
    expected, found = checkpoint(straight), checkpoint(tmp_path)
    for name, value in expected["state_dict"].items():
        torch.testing.assert_close(found["state_dict"][name], value, rtol=1e-5, atol=1e-6)
    rows, expected_rows = read_training_metrics(tmp_path), read_training_metrics(straight)
    assert rows.keys() == expected_rows.keys() and rows["step"] == expected_rows["step"] == every_row
    for name in rows:
        assert rows[name] == pytest.approx(expected_rows[name], rel=1e-5)


def test_a_write_that_dies_midway_leaves_the_previous_checkpoint_intact(tmp_path, monkeypatch):
    path = tmp_path / "last.ckpt"
    io = AtomicCheckpointIO()
    io.save_checkpoint({"state_dict": {"w": torch.ones(3)}}, path)

    def dying_save(obj, handle, *args, **kwargs):
        handle.write(b"partial")
        raise KeyboardInterrupt

    monkeypatch.setattr(torch, "save", dying_save)
    with pytest.raises(KeyboardInterrupt):
        io.save_checkpoint({"state_dict": {"w": torch.zeros(3)}}, path)
    monkeypatch.undo()
    assert torch.equal(read_checkpoint(path)["state_dict"]["w"], torch.ones(3))
    assert [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]
