"""The ppl-vae command line: train, resume, evaluate, demo, and one-line errors."""
import json
import re

import pytest
import torch

from ppl_vae.cli import main

TINY = ["--steps", "4", "--batch-size", "16", "--no-progress", "--set", "num_train=96", "--set", "factor_score_votes=10", "--set", "latent_dim=2", "--set", "train.checkpoint_every_n_steps=2"]


def test_train_writes_a_complete_run_directory_and_evaluate_rereads_it(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", "vae", "--run-dir", str(run), *TINY]) == 0
    config = json.loads((run / "config.json").read_text())
    assert config["recipe"] == "vae" and config["config"]["train"]["steps"] == 4
    assert set(config["versions"]) >= {"ppl_vae", "torch", "pyro"}
    metrics = json.loads((run / "metrics.json").read_text())
    assert {"elbo_per_point", "factor_score", "posterior_predictive"} <= set(metrics)
    assert (run / "metrics.csv").is_file() and (run / "checkpoints" / "last.ckpt").is_file()
    pictures = {p.name for p in (run / "pictures").iterdir()}
    assert {"reconstructions.png", "samples.png", "traversals.png", "posterior_predictive.png"} <= pictures
    assert str(run.resolve()) in capsys.readouterr().out
    assert main(["evaluate", str(run)]) == 0
    assert json.loads((run / "metrics.json").read_text())["elbo_per_point"] == pytest.approx(metrics["elbo_per_point"])


def test_train_says_what_it_evaluates_and_how_long_it_took(tmp_path, capsys):
    assert main(["train", "vae", "--run-dir", str(tmp_path / "run"), *TINY]) == 0
    err = capsys.readouterr().err
    assert re.search(r"^\[\d\d:\d\d:\d\d\] evaluating: ELBO per point and a posterior predictive check .*"
                     r"Factor score \(10 votes\)$", err, re.M), err
    assert re.search(r"^\[\d\d:\d\d:\d\d\] posterior predictive check: done in \d+\.\d s$", err, re.M), err
    assert re.search(r"^\[\d\d:\d\d:\d\d\] evaluated in \d+\.\d s; metrics and pictures in ", err, re.M), err


def test_resuming_a_finished_run_from_the_command_line_changes_no_file(tmp_path):
    run = tmp_path / "run"
    assert main(["train", "vae", "--run-dir", str(run), *TINY]) == 0
    files = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in run.rglob("*") if p.is_file()}
    assert main(["train", "--resume", str(run)]) == 0
    assert {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in run.rglob("*") if p.is_file()} == files
    assert json.loads((run / "metrics.json").read_text())["final_losses"]["step"] == 4


@pytest.mark.parametrize(
    "argv, message",
    [
        (["train", "nope"], "unknown model 'nope'"),
        (["train", "vae", "--set", "bogus=1"], "unknown setting 'bogus'"),
        (["train", "vae", "--set", "novalue"], "--set expects name=value"),
        (["train", "vae", "--set", "train.learning_rate=1e-3"], "unknown setting 'train.learning_rate'; did you mean 'train.lr' or"),
        (["train", "vae", "--steps", "0"], "steps must be a positive integer"),
        (["train", "vae", "--set", "dataset=cifar"], "dataset must be one of"),
        (["train", "--resume", "/nonexistent/run"], "run directory '/nonexistent/run' does not exist"),
        (["evaluate", "/nonexistent/run"], "run directory '/nonexistent/run' does not exist"),
        (["train"], "train needs MODEL or --resume"),
        (["train", "parted", "--demo-settings", "--steps", "1", "--set", 'train.lr_plateau={"discriminator": {}}'],
         "lr_plateau names steps ['discriminator'] that this objective does not take"),
    ],
)
def test_bad_input_prints_one_line_and_exits_2(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and "Traceback" not in err


def test_blocks_of_iterations_train_a_recipe_from_the_command_line(tmp_path):
    run = tmp_path / "run"
    assert main(["train", "vae", "--run-dir", str(run), *TINY, "--set", "train.iterations_per_training_step=3"]) == 0
    train = json.loads((run / "config.json").read_text())["config"]["train"]
    assert train["iterations_per_training_step"] == 3
    assert json.loads((run / "metrics.json").read_text())["final_losses"]["step"] == 4


def test_existing_run_directory_needs_overwrite(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", "vae", "--run-dir", str(run), *TINY]) == 0
    assert main(["train", "vae", "--run-dir", str(run), *TINY]) == 2
    assert "already holds a run" in capsys.readouterr().err
    assert main(["train", "vae", "--run-dir", str(run), "--overwrite", *TINY]) == 0


def test_list_names_every_model(capsys):
    assert main(["list"]) == 0
    assert "vae" in capsys.readouterr().out


@pytest.mark.parametrize(
    "options",
    [pytest.param(["--device", "cuda"], marks=pytest.mark.skipif(torch.cuda.is_available(), reason="needs no CUDA")), ["--strategy", "no-such-strategy"]],
    ids=["missing device", "bad strategy"],
)
def test_a_failed_start_on_the_command_line_leaves_nothing_and_the_retry_trains(tmp_path, capsys, options):
    run = tmp_path / "run"
    assert main(["train", "vae", "--run-dir", str(run), *TINY, *options]) in (1, 2)
    assert not run.exists()
    capsys.readouterr()
    assert main(["train", "vae", "--run-dir", str(run), *TINY, "--device", "cpu"]) == 0
    assert (run / "checkpoints" / "last.ckpt").is_file()


class _Terminal:
    """A stream that says it is a terminal, as a person's shell is."""

    def __init__(self, stream) -> None:
        self.stream = stream

    def isatty(self) -> bool:
        return True

    def __getattr__(self, name):
        return getattr(self.stream, name)


@pytest.mark.parametrize(
    "watched, options, shown",
    [("terminal", [], True), ("jupyter", [], True), ("pipe", [], False), ("pipe", ["--progress"], True),
     ("terminal", ["--no-progress"], False)],
)
def test_the_demo_shows_progress_where_a_person_watches(tmp_path, monkeypatch, watched, options, shown):
    import sys
    import types

    from ppl_vae.recipes import base

    bars = []
    monkeypatch.setattr(base, "train_recipe", lambda recipe, config, run_dir, **_: bars.append(config.train.progress_bar) or {})
    if watched == "terminal":
        monkeypatch.setattr(sys, "stdout", _Terminal(sys.stdout))
    if watched == "jupyter":
        kernel_shell = types.SimpleNamespace(kernel=object())
        monkeypatch.setitem(sys.modules, "IPython", types.SimpleNamespace(get_ipython=lambda: kernel_shell))
    assert main(["demo", "--models", "vae,parted", "--out", str(tmp_path / "demo"), *options]) == 0
    assert bars == [shown, shown]
