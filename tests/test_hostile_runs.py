"""Run folders received from others or torn by crashes: load_run and evaluate name what is
wrong, write nothing outside the run, and load_run writes nothing at all."""
import json
import shutil
from pathlib import Path

import pytest

import ppl_vae
from ppl_vae._files import UnsafePathError
from ppl_vae.cli import main
from ppl_vae.recipes import RECIPES, train_recipe, with_overrides

TINY_VAE = {"num_train": 96, "latent_dim": 2, "factor_score_votes": 10, "train.steps": 4, "train.batch_size": 16,
            "train.progress_bar": False, "train.log_every_n_steps": 2, "train.checkpoint_every_n_steps": 2}


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("trained") / "run"
    train_recipe(RECIPES["vae"], with_overrides(RECIPES["vae"].demo(), TINY_VAE), run)
    return run


@pytest.fixture
def run(trained_run, tmp_path) -> Path:
    """A copy of the trained run, for one test to change."""
    return Path(shutil.copytree(trained_run, tmp_path / "run", symlinks=True))


def everything_in(folder: Path) -> dict[str, bytes | None]:
    """Every path under ``folder`` with the bytes of its files (None for folders and links)."""
    return {
        str(path.relative_to(folder)): path.read_bytes() if path.is_file() and not path.is_symlink() else None
        for path in sorted(folder.rglob("*"))
    }


def test_evaluate_refuses_a_pictures_symlink_leading_outside_the_run(run, tmp_path, capsys):
    elsewhere = tmp_path / "users_folder"
    elsewhere.mkdir()
    (elsewhere / "samples.png").write_bytes(b"the user's picture")
    shutil.rmtree(run / "pictures")
    (run / "pictures").symlink_to(elsewhere)
    assert main(["evaluate", str(run)]) == 2
    assert "symbolic link" in capsys.readouterr().err
    assert everything_in(elsewhere) == {"samples.png": b"the user's picture"}


def test_resume_refuses_a_pictures_symlink_leading_outside_the_run_and_changes_no_file(run, tmp_path, capsys):
    elsewhere = tmp_path / "users_folder"
    elsewhere.mkdir()
    shutil.rmtree(run / "pictures")
    (run / "pictures").symlink_to(elsewhere)
    before = everything_in(run)
    assert main(["train", "--resume", str(run)]) == 2
    assert "symbolic link" in capsys.readouterr().err
    assert everything_in(run) == before and everything_in(elsewhere) == {}


def test_evaluate_refuses_a_picture_symlink_leading_to_a_users_file(run, tmp_path, capsys):
    users_file = tmp_path / "thesis.png"
    users_file.write_bytes(b"the user's file")
    (run / "pictures" / "samples.png").unlink()
    (run / "pictures" / "samples.png").symlink_to(users_file)
    assert main(["evaluate", str(run)]) == 2
    assert "samples.png is a symbolic link" in capsys.readouterr().err
    assert users_file.read_bytes() == b"the user's file"


def test_train_refuses_a_metrics_csv_symlink_leading_outside_the_run(tmp_path, capsys):
    users_file = tmp_path / "notes.csv"
    users_file.write_text("the user's notes\n")
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.csv").symlink_to(users_file)
    assert main(["train", "vae", "--run-dir", str(run), "--steps", "2", "--no-progress", "--set", "num_train=32"]) == 2
    assert users_file.read_text() == "the user's notes\n"


def test_a_saved_figure_replaces_a_symlink_inside_its_folder_instead_of_writing_through_it(tmp_path):
    from matplotlib.figure import Figure

    (tmp_path / "kept.png").write_bytes(b"kept")
    (tmp_path / "link.png").symlink_to(tmp_path / "kept.png")
    ppl_vae.viz.save_figure(Figure(), tmp_path / "link.png")
    assert (tmp_path / "kept.png").read_bytes() == b"kept"
    assert not (tmp_path / "link.png").is_symlink()


def test_save_figure_refuses_a_symlink_leading_outside_its_folder(tmp_path):
    from matplotlib.figure import Figure

    (tmp_path / "outside.png").write_bytes(b"kept")
    (tmp_path / "pictures").mkdir()
    (tmp_path / "pictures" / "link.png").symlink_to(tmp_path / "outside.png")
    with pytest.raises(UnsafePathError, match="link.png is a symbolic link"):
        ppl_vae.viz.save_figure(Figure(), tmp_path / "pictures" / "link.png")
    assert (tmp_path / "outside.png").read_bytes() == b"kept"


def test_load_run_creates_and_changes_nothing(run):
    shutil.rmtree(run / "pictures")
    before = everything_in(run)
    ppl_vae.load_run(run)
    assert everything_in(run) == before


def test_load_run_works_where_nothing_can_be_written(run, monkeypatch):
    def refuse(*args, **kwargs):
        raise PermissionError("read-only file system")

    for method in ("mkdir", "write_text", "write_bytes", "touch", "unlink"):
        monkeypatch.setattr(Path, method, refuse)
    monkeypatch.setattr("tempfile.mkstemp", refuse)
    assert ppl_vae.load_run(run).recipe == "vae"


def rewrite_config(run: Path, change) -> None:
    settings = json.loads((run / "config.json").read_text())
    (run / "config.json").write_text(json.dumps(change(settings)))


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (b"", "is empty"),
        (b'{"recipe": "vae", \xff}', "is not UTF-8"),
        (b"[]", "must hold a JSON object"),
        (nested(100_000).encode(), "nests lists or objects deeper than 64"),
        (b'{"recipe": ["vae"], "config": {}}', '"recipe" must be a recipe'),
        (b'{"recipe": "vae"}', "needs a mapping of settings under 'config'"),
        (b'{"recipe": "vae", "config": [1]}', "needs a mapping of settings under 'config'"),
    ],
)
def test_load_run_names_a_config_json_it_cannot_use(run, text, message):
    (run / "config.json").write_bytes(text)
    with pytest.raises(ValueError, match=message):
        ppl_vae.load_run(run)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda s: {**s, "model_inputs": {}}, "model_inputs do not describe a vae model"),
        (lambda s: {**s, "model_inputs": {"shape": [1, 100_000, 100_000]}}, "more than 16777216 elements"),
        (lambda s: {**s, "model_inputs": {"shape": [10**10]}}, "more than 16777216 elements"),
        (lambda s: {**s, "config": {**s["config"], "hidden": 10**9}}, "hidden must be at most 65536"),
        (lambda s: {**s, "config": {**s["config"], "hidden": 65_536}}, "parameters, above the"),
    ],
)
def test_load_run_refuses_model_sizes_beyond_sane_bounds_before_building(run, change, message):
    rewrite_config(run, change)
    with pytest.raises(ValueError, match=message):
        ppl_vae.load_run(run)


def test_load_run_of_a_fit_run_without_train_settings_names_the_file(run):
    rewrite_config(run, lambda s: {"created": s["created"]})
    with pytest.raises(ValueError, match="needs a mapping of settings under 'train'"):
        ppl_vae.load_run(run, model=object())


@pytest.mark.parametrize("command", [["evaluate"], ["train", "--resume"]])
def test_the_command_line_names_a_broken_config_json_in_one_line(run, command, capsys):
    (run / "config.json").write_bytes(b"\xff\xfe")
    assert main([*command, str(run)]) == 2
    err = capsys.readouterr().err.strip()
    assert "config.json is not UTF-8" in err and len(err.splitlines()) == 1


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (b'{"recipe": ["vae"], "config": {}}', "is no run config"),
        (b'{"recipe": "vae", "config": {"latent_dim": "two"}}', "config.json: setting latent_dim"),
        (b"", "is empty"),
    ],
)
def test_resume_names_a_config_json_of_the_wrong_structure(run, text, message, capsys):
    (run / "config.json").write_bytes(text)
    assert main(["train", "--resume", str(run)]) == 2
    assert message in capsys.readouterr().err


def test_evaluate_refuses_nan_weights_naming_the_tensor(run, capsys):
    import torch

    from ppl_vae.train.checkpoint import tensor_digest

    path = run / "checkpoints" / "last.ckpt"
    checkpoint = torch.load(path, weights_only=True)
    name = next(name for name in checkpoint["state_dict"] if name.endswith("weight"))
    checkpoint["state_dict"][name].fill_(float("nan"))
    checkpoint["ppl_vae"]["digest"] = tensor_digest(checkpoint)
    torch.save(checkpoint, path)
    assert main(["evaluate", str(run)]) == 2
    assert f"weight {name!r} holds NaN" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "environment", "message"),
    [
        (["list"], {"PPL_VAE_NUM_THREADS": "abc"}, "PPL_VAE_NUM_THREADS must be a positive integer"),
        (["list"], {"PPL_VAE_NUM_THREADS": "0"}, "PPL_VAE_NUM_THREADS must be a positive integer"),
        (["train", "vae", "--set", "dataset=mnist", "--steps", "1", "--no-progress"], {"PPL_VAE_MNIST_DIR": "/nonexistent/mnist"},
         "PPL_VAE_MNIST_DIR='/nonexistent/mnist' names no folder"),
        (["train", "vae", "--set", "latent_dim=" + "9" * 5000], {}, "setting latent_dim"),
        (["train", "vae", "--set", "train.betas=" + nested(100_000)], {}, "setting train.betas"),
        (["train", "vae", "--set", "train.lr_plateau=" + "{" * 100_000], {}, "setting train.lr_plateau"),
    ],
)
def test_bad_command_line_input_and_environment_give_one_line_and_status_2(argv, environment, message, monkeypatch, capsys):
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and len(err) < 2000


def yaml_alias_bomb(levels: int = 9) -> str:
    lines = ['a0: &a0 ["x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    lines += [f"a{k}: &a{k} [{', '.join([f'*a{k - 1}'] * 9)}]" for k in range(1, levels)]
    return "\n".join([*lines, f"latent_dim: *a{levels - 1}"]) + "\n"


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("bomb.yaml", yaml_alias_bomb().encode(), "expands (through its aliases) to more than"),
        ("deep.yaml", nested(100_000).encode(), "nests lists or mappings deeper than"),
        ("deep.json", nested(100_000).encode(), "nests lists or objects deeper than 64"),
        ("latin1.yaml", b"latent_dim: \xe9\n", "is not UTF-8"),
        ("quotes.json", b'"' + b'\\"' * 500_000, "is not valid JSON"),
        ("python.yaml", b"latent_dim: !!python/object/apply:os.system ['true']\n", "is not valid YAML"),
    ],
)
def test_a_hostile_config_file_is_named_in_one_line_quickly(tmp_path, name, content, message, capsys):
    (tmp_path / name).write_bytes(content)
    assert main(["train", "vae", "--config", str(tmp_path / name)]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and str(tmp_path / name) in err and len(err.splitlines()) == 1 and len(err) < 2000


def test_evaluate_refuses_a_billion_wide_hidden_layer_within_little_memory(run, run_with_little_memory):

    rewrite_config(run, lambda s: {**s, "config": {**s["config"], "hidden": 10**9}})
    child = run_with_little_memory("from ppl_vae.cli import main\nimport ppl_vae.recipes.base", f"raise SystemExit(main(['evaluate', {str(run)!r}]))")
    assert child.returncode == 2 and "hidden must be at most 65536" in child.stderr, child.stderr[-2000:]
