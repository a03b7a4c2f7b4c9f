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


# (moment, its count, last checkpoint at the kill, last metrics row at the kill)
KILLS = {
    "between-checkpoints": ("iteration", 47, 40, 45),
    "during-a-checkpoint-write": ("checkpoint-write", 2, 20, 40),
    "during-evaluation": ("evaluation", 1, 60, 60),
}


@pytest.mark.parametrize("case", list(KILLS))
def test_sigkilled_run_resumes_to_the_uninterrupted_result_with_every_row_once(case, straight, tmp_path):
    moment, count, checkpointed, last_row = KILLS[case]
    killed = run(str(WORKER), moment, str(count), *ARGS, "--run-dir", str(tmp_path))
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    assert checkpoint(tmp_path)["ppl_vae"]["iteration"] == checkpointed
    logged = read_training_metrics(tmp_path)["step"]
    assert logged == list(range(LOG_EVERY, last_row + 1, LOG_EVERY))
    leftovers = list((tmp_path / "checkpoints").glob(".last.ckpt.*.tmp"))
    assert bool(leftovers) == (moment == "checkpoint-write")
    assert not (tmp_path / "metrics.json").exists()

    resumed = run("-m", "ppl_vae.cli", "train", "--resume", str(tmp_path))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert not list((tmp_path / "checkpoints").glob(".*.tmp"))
    expected, found = checkpoint(straight), checkpoint(tmp_path)
    assert expected["ppl_vae"]["iteration"] == found["ppl_vae"]["iteration"] == STEPS
    for name, value in expected["state_dict"].items():
        torch.testing.assert_close(found["state_dict"][name], value, rtol=1e-5, atol=1e-6)
    rows, expected_rows = read_training_metrics(tmp_path), read_training_metrics(straight)
    assert rows["step"] == expected_rows["step"] == list(range(LOG_EVERY, STEPS + 1, LOG_EVERY))
    assert rows.keys() == expected_rows.keys()
    for name in rows:
        assert rows[name] == pytest.approx(expected_rows[name], rel=1e-5)
    assert (tmp_path / "metrics.json").is_file()


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
