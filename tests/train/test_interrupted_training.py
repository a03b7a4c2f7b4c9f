"""A run killed with SIGKILL resumes from its last checkpoint and ends where an
uninterrupted run ends; checkpoint writes are atomic."""
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from ppl_vae.train import AtomicCheckpointIO, read_checkpoint

ARGS = [
    "train", "vae", "--no-progress", "--steps", "1500", "--batch-size", "32",
    "--set", "dataset=pinwheel", "--set", "latent_dim=2", "--set", "hidden=32", "--set", "num_train=null",
    "--set", "train.checkpoint_every_n_steps=100", "--set", "train.log_every_n_steps=100",
]


def cli(*args: str, **kwargs) -> subprocess.Popen:
    env = dict(os.environ, PPL_VAE_NUM_THREADS="1")
    return subprocess.Popen([sys.executable, "-m", "ppl_vae.cli", *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, **kwargs)


def iteration_of(path) -> int:
    try:
        return int(read_checkpoint(path)["ppl_vae"]["iteration"])
    except Exception:
        return -1


def test_sigkilled_run_resumes_to_the_uninterrupted_result(tmp_path):
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    assert cli(*ARGS, "--run-dir", str(straight)).wait(timeout=300) == 0

    process = cli(*ARGS, "--run-dir", str(killed))
    checkpoint = killed / "checkpoints" / "last.ckpt"
    deadline = time.time() + 240
    while iteration_of(checkpoint) < 300 and time.time() < deadline and process.poll() is None:
        time.sleep(0.05)
    assert process.poll() is None, "the run ended before it could be killed; raise --steps"
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    interrupted_at = iteration_of(checkpoint)
    assert 300 <= interrupted_at < 1500

    resumed = cli("train", "--resume", str(killed))
    output = resumed.communicate(timeout=300)[0].decode()
    assert resumed.returncode == 0, output
    a = read_checkpoint(straight / "checkpoints" / "last.ckpt")
    b = read_checkpoint(checkpoint)
    assert a["ppl_vae"]["iteration"] == b["ppl_vae"]["iteration"] == 1500
    for name, value in a["state_dict"].items():
        torch.testing.assert_close(value, b["state_dict"][name], rtol=1e-5, atol=1e-6)


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
