"""The command line's settings: typed ``--set`` values, ``--config`` files, ``train MODEL
--help``, one-line errors with exit status 2 (bad input) or 1 (failed run), ``--debug``, and
no torch import before a command runs. Nothing here trains, except the non-finite run."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ppl_vae.cli import main
from ppl_vae.recipes import SettingError
from ppl_vae.recipes import base as recipes_base
from ppl_vae.recipes.parted import PartedConfig
from ppl_vae.recipes.settings import setting_value

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def built(monkeypatch):
    """Replace training by recording the config it was given."""
    seen = []

    def record(recipe, config, run_dir, resume=False, overwrite=False, threads=None):
        seen.append(config)
        return {}

    monkeypatch.setattr(recipes_base, "train_recipe", record)
    return seen


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize(
    "setting, value, expected",
    [
        ("beta", "1,5", "a finite number or null (type float | None)"),
        ("train.lr", "1e-3x", "a finite number (type float)"),
        ("train.lr", "Infinity", "a finite number (type float)"),
        ("train.lr", "nan", "a finite number (type float)"),
        ("latent_dim", "true", "an integer (type int)"),
        ("latent_dim", "ten", "an integer (type int)"),
        ("latent_dim", "2.5", "an integer (type int)"),
        ("num_train", "many", "an integer or null (type int | None)"),
        ("train.betas", "[0.9]", "a list of 2 values (type tuple[float, float])"),
    ],
)
def test_a_value_of_the_wrong_type_is_refused_naming_setting_value_and_type(setting, value, expected, built, capsys):
    assert main(["train", "vae", "--set", f"{setting}={value}"]) == 2
    assert one_line_error(capsys) == f"ppl-vae: error: setting {setting}: {value!r} is not {expected}"
    assert built == []


@pytest.mark.parametrize(
    "argv, message",
    [
        (["train", "vae", "--set", "latent_dim=0"], "latent_dim must be an integer >= 1, got 0"),
        (["train", "vae", "--set", "beta=-1"], "beta must be a finite number >= 0, got -1.0"),
        (["train", "vae", "--steps", "0"], "train.steps must be a positive integer, got 0"),
        (["train", "parted", "--set", "z_capacity=5,1"], "z_capacity must be (C_min, C_max) with 0 <= C_min <= C_max, got (5.0, 1.0)"),
        (["train", "decomposition", "--set", "latent_dim=3"], "latent_dim must be 2 for prior='mixture'"),
        (["train", "decomposition", "--set", "gamma=1"], "gamma must be a finite number in [0, 1), got 1.0"),
    ],
)
def test_a_value_out_of_range_is_refused_before_anything_is_built(argv, message, built, capsys):
    assert main(argv) == 2
    assert message in one_line_error(capsys)
    assert built == []


def test_an_unknown_setting_is_refused_with_close_names(built, capsys):
    assert main(["train", "vae", "--set", "latnt_dim=3"]) == 2
    assert one_line_error(capsys) == "ppl-vae: error: unknown setting 'latnt_dim'; did you mean 'latent_dim'?"
    assert main(["train", "vae", "--set", "train.stepz=3"]) == 2
    assert "unknown setting 'train.stepz'; did you mean 'train.steps'" in one_line_error(capsys)


def test_a_group_given_a_value_says_to_set_its_members(built, capsys):
    assert main(["train", "vae", "--set", "train=3"]) == 2
    assert "setting train is a group of settings, got '3'; set its members, e.g. train.steps" in one_line_error(capsys)


def test_threads_reach_training_as_an_argument_and_the_environment_is_left_alone(monkeypatch):
    given = []
    monkeypatch.setattr(recipes_base, "train_recipe", lambda *args, threads=None, **kwargs: given.append(threads) or {})
    monkeypatch.setenv("PPL_VAE_NUM_THREADS", "3")
    before = torch.get_num_threads()
    try:
        assert main(["--threads", "2", "train", "vae"]) == 0
        assert main(["train", "vae"]) == 0
    finally:
        torch.set_num_threads(before)
    assert given == [2, 3]
    assert os.environ["PPL_VAE_NUM_THREADS"] == "3"


def test_set_values_are_parsed_to_the_declared_types(built):
    argv = ["train", "parted", "--set", "num_train=null", "--set", "z_capacity=0,7", "--set", 'dataset="mnist"',
            "--set", "network=mlp", "--set", "gamma_z=15", "--set", 'train.batch_sizes={"labelled": 8}',
            "--lr", "1e-3", "--seed", "3"]
    assert main(argv) == 0
    config = built[0]
    assert config.num_train is None and config.z_capacity == (0.0, 7.0) and config.dataset == "mnist"
    assert config.gamma_z == 15.0 and isinstance(config.gamma_z, float)
    assert config.train.batch_sizes == {"labelled": 8} and config.train.lr == 1e-3 and config.train.seed == 3


@pytest.mark.parametrize("suffix", [".json", ".yaml"])
def test_a_config_file_sets_nested_settings_and_set_overrides_it(suffix, tmp_path, built):
    settings = {"latent_dim": 4, "beta": 2.5, "train": {"lr": 0.002, "steps": 7}}
    path = tmp_path / f"settings{suffix}"
    if suffix == ".json":
        path.write_text(json.dumps(settings))
    else:
        path.write_text("latent_dim: 4\nbeta: 2.5\ntrain:\n  lr: 2e-3  # PyYAML reads this as text\n  steps: 7\n")
    assert main(["train", "vae", "--config", str(path), "--set", "beta=4", "--steps", "9"]) == 0
    config = built[0]
    assert (config.latent_dim, config.beta, config.train.lr, config.train.steps) == (4, 4.0, 0.002, 9)
    assert config.train.batch_size == 64  # the recipe's default, untouched by the file


def test_a_config_file_takes_dotted_names_and_a_saved_run_config(tmp_path, built):
    dotted = tmp_path / "dotted.yaml"
    dotted.write_text("train.lr: 0.01\n")
    assert main(["train", "vae", "--config", str(dotted)]) == 0
    saved = tmp_path / "config.json"
    saved.write_text(json.dumps({"recipe": "vae", "config": {"latent_dim": 3}, "versions": {}}))
    assert main(["train", "vae", "--config", str(saved)]) == 0
    assert built[0].train.lr == 0.01 and built[1].latent_dim == 3


@pytest.mark.parametrize(
    "text, message",
    [
        ("latent_dim: ten\n", "setting latent_dim: 'ten' is not an integer (type int)"),
        ("train:\n  lr: .inf\n", "setting train.lr: inf is not a finite number (type float)"),
        ("laten_dim: 3\n", "unknown setting 'laten_dim'; did you mean 'latent_dim'?"),
        ("- 1\n- 2\n", "must hold a mapping of settings, got list"),
        ("a: [1\n", "is not valid YAML"),
    ],
)
def test_a_bad_config_file_is_refused_in_one_line(text, message, tmp_path, built, capsys):
    path = tmp_path / "settings.yaml"
    path.write_text(text)
    assert main(["train", "vae", "--config", str(path)]) == 2
    assert message in one_line_error(capsys)
    assert built == []


def test_a_missing_config_file_is_refused_naming_it(tmp_path, capsys):
    assert main(["train", "vae", "--config", str(tmp_path / "nope.json")]) == 2
    assert f"cannot read config file {str(tmp_path / 'nope.json')!r}" in one_line_error(capsys)


def test_resume_refuses_settings_that_would_change_the_run(tmp_path, capsys):
    assert main(["train", "--resume", str(tmp_path), "--set", "beta=2", "--lr", "0.1"]) == 2
    assert "--set, --lr cannot change them" in one_line_error(capsys)


@pytest.mark.parametrize("command", ["evaluate", "train --resume"])
def test_a_missing_run_directory_is_named(command, tmp_path, capsys):
    missing = tmp_path / "missing"
    assert main([*command.split(), str(missing)]) == 2
    assert one_line_error(capsys) == f"ppl-vae: error: run directory {str(missing)!r} does not exist"
    assert main([*command.split(), str(tmp_path)]) == 2
    assert f"{str(tmp_path)!r} is not a run directory: it holds no config.json" in one_line_error(capsys)


def test_train_model_help_lists_every_setting_with_type_default_and_doc(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["train", "vae", "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert "--config FILE" in out
    lines = out.splitlines()
    lr = lines.index("  train.lr (float, default 0.0005)")
    assert "learning rate" in lines[lr + 1]
    for line in ("  latent_dim (int, default 10)", "  num_train (int | None, default 20000)",
                 '  dataset (str, default "dsprites")', "  train.betas (tuple[float, float], default [0.9, 0.999])"):
        assert line in lines



def test_setting_docs_do_not_stop_at_e_g():
    from ppl_vae.recipes.settings import param_docs
    from ppl_vae.train import TrainConfig

    assert param_docs(TrainConfig)["batch_sizes"] == 'per data-group batch sizes, e.g. {"labelled": 64}'


def test_sweep_model_help_lists_the_settings_too(capsys):
    with pytest.raises(SystemExit):
        main(["sweep", "parted", "-h"])
    assert "  gamma_bc (float, default 10.0)" in capsys.readouterr().out.splitlines()


def test_debug_shows_the_error_itself(built):
    with pytest.raises(SettingError, match="setting beta"):
        main(["--debug", "train", "vae", "--set", "beta=x"])


def test_an_unexpected_failure_is_one_line_with_exit_status_1(monkeypatch, capsys):
    def broken(*args, **kwargs):
        raise RuntimeError("CUDA out of memory.\nTried to allocate 2 GiB")

    monkeypatch.setattr(recipes_base, "train_recipe", broken)
    assert main(["train", "vae"]) == 1
    assert one_line_error(capsys) == (
        "ppl-vae: error: the run failed: RuntimeError: CUDA out of memory. Tried to allocate 2 GiB "
        "(--debug shows the traceback)"
    )


def test_a_non_finite_loss_exits_1_naming_the_term_and_what_to_try(tmp_path, capsys):
    argv = ["train", "vae", "--run-dir", str(tmp_path / "run"), "--no-progress", "--steps", "10", "--lr", "1e12",
            "--batch-size", "16", "--set", "dataset=pinwheel", "--set", "num_train=64", "--set", "latent_dim=2",
            "--set", "train.log_every_n_steps=5", "--set", "factor_score_votes=0"]
    assert main(argv) == 1
    err = one_line_error(capsys)
    assert err.startswith("ppl-vae: error: training failed: non-finite values at training step")
    assert "elbo_loss" in err and "Try a lower learning rate (--lr, --set train.lr=...)" in err


def test_sweep_grid_values_are_typed_before_any_job_starts(built, capsys):
    assert main(["sweep", "vae", "--grid", "beta=1,x"]) == 2
    assert "setting beta: 'x' is not a finite number" in one_line_error(capsys)
    assert main(["sweep", "vae", "--grid", "latent_dim=2,3", "--set", "train.stepz=1"]) == 2
    assert "unknown setting 'train.stepz'" in one_line_error(capsys)


def test_sweep_grid_takes_pairs_separated_by_semicolons(monkeypatch, tmp_path):
    import ppl_vae.train.sweep as sweep

    planned = []

    def record(jobs, out, **kwargs):
        planned.extend(jobs)
        return {"runs": []}

    monkeypatch.setattr(sweep, "run_sweep", record)
    assert main(["sweep", "parted", "--grid", "z_capacity=0,5;0,10", "--grid", "gamma_bc=0,30", "--out", str(tmp_path)]) == 0
    assert [job.settings for job in planned] == [
        {"z_capacity": (0.0, 5.0), "gamma_bc": 0.0},
        {"z_capacity": (0.0, 5.0), "gamma_bc": 30.0},
        {"z_capacity": (0.0, 10.0), "gamma_bc": 0.0},
        {"z_capacity": (0.0, 10.0), "gamma_bc": 30.0},
    ]
    for job in planned:  # each job's --set values parse back to its settings
        sets = dict(job.command[i + 1].split("=", 1) for i, arg in enumerate(job.command) if arg == "--set")
        assert setting_value(PartedConfig, "z_capacity", sets["z_capacity"]) == job.settings["z_capacity"]
    planned.clear()
    assert main(["sweep", "parted", "--grid", "z_capacity=0,5", "--out", str(tmp_path / "one")]) == 0
    assert [job.settings for job in planned] == [{"z_capacity": (0.0, 5.0)}]  # one pair, not two numbers


def run_without_engine(*argv: str) -> subprocess.CompletedProcess:
    """``ppl_vae.cli.main(argv)`` in a fresh interpreter that reports, after the command,
    which of torch, pyro and lightning were imported."""
    script = (
        "import sys\n"
        "from ppl_vae.cli import main\n"
        "try:\n"
        f"    status = main({list(argv)!r})\n"
        "except SystemExit as exit_:\n"
        "    status = exit_.code\n"
        "print('imported:', sorted(m for m in ('torch', 'pyro', 'lightning') if m in sys.modules))\n"
        "sys.exit(status)\n"
    )
    return subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    "argv, status",
    [
        (["--help"], 0),
        (["list"], 0),
        (["train", "vae", "--help"], 0),
        (["train", "decomposition", "--set", "latent_dim=ten"], 2),
    ],
)
def test_help_list_and_bad_settings_import_no_torch(argv, status):
    result = run_without_engine(*argv)
    assert result.returncode == status, result.stderr
    assert "imported: []" in result.stdout


@pytest.mark.parametrize(
    "text, message",
    [
        ("{not json", "config.json is not valid JSON"),
        ('{"recipe": "gan", "config": {}}', "config.json is no run config: it needs a \"recipe\""),
        ('{"recipe": "vae", "config": {"latent_dim": "ten"}}', "setting latent_dim: 'ten' is not an integer"),
    ],
)
def test_resume_refuses_a_broken_run_config_in_one_line(text, message, tmp_path, built, capsys):
    (tmp_path / "config.json").write_text(text)
    assert main(["train", "--resume", str(tmp_path)]) == 2
    assert message in one_line_error(capsys)
    assert built == []
