"""Property-based fuzzing of every reader of files and hostile input: whatever hypothesis
generates, a reader either succeeds with what it promises or raises the library's own clear
error naming the file or argument; it never raises another exception type, never hangs, and
never writes (outside the run, or at all for readers)."""
import gzip
import io
import json
import shutil
import signal
import struct
import zipfile
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import ppl_vae
from ppl_vae.data import read_idx
from ppl_vae.data.celeba import CelebA
from ppl_vae.data.counts import contrastive_tensors
from ppl_vae.data.dsprites import DSprites
from ppl_vae.recipes import RECIPES, train_recipe, with_overrides
from ppl_vae.recipes.configs import VAEConfig
from ppl_vae.recipes.settings import read_settings_file, setting_value
from ppl_vae.train import CheckpointError, read_checkpoint, read_training_metrics

FUZZ = settings(
    max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
SECONDS_PER_EXAMPLE = 20
CLEAR_ERRORS = (ValueError, FileNotFoundError, CheckpointError)


class Hang(Exception):
    """A reader ran past :data:`SECONDS_PER_EXAMPLE`."""


@contextmanager
def time_limit(seconds: float = SECONDS_PER_EXAMPLE):
    def stop(*_):
        raise Hang(f"ran past {seconds} s")

    previous = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def snapshot(folder: Path) -> dict[str, bytes | None]:
    return {
        str(path.relative_to(folder)): path.read_bytes() if path.is_file() and not path.is_symlink() else None
        for path in sorted(folder.rglob("*"))
    }


def outcome(read: Callable[[], object], folder: Path, names: str | None = None) -> object | None:
    """``read()``'s result, or None after a clear error naming ``names`` (when given); any other
    exception, a hang, or a change to ``folder`` fails the test."""
    before = snapshot(folder)
    try:
        with time_limit():
            return read()
    except CLEAR_ERRORS as error:
        if names is not None:
            assert names in str(error), f"{type(error).__name__} does not name {names}: {error}"
        assert len(str(error)) < 5000, "an error message formats an unbounded value"
        return None
    finally:
        assert snapshot(folder) == before, "a reader changed its folder"


# IDX -----------------------------------------------------------------------------------------

idx_headers = st.builds(
    lambda code, dims: struct.pack(">BBBB", 0, 0, code, len(dims)) + struct.pack(f">{len(dims)}I", *dims),
    st.sampled_from([0x08, 0x09, 0x0B, 0x0C, 0x0D, 0x0E, 0x01, 0xFF]),
    st.lists(st.one_of(st.integers(0, 40), st.integers(0, 2**32 - 1)), max_size=6),
)


@FUZZ
@given(header=st.one_of(idx_headers, st.binary(max_size=12)), payload=st.binary(max_size=3000), compress=st.booleans())
def test_read_idx_returns_what_its_header_declares_or_names_the_file(tmp_path, header, payload, compress):
    path = tmp_path / "file.idx"
    path.write_bytes(gzip.compress(header + payload) if compress else header + payload)
    array = outcome(lambda: read_idx(path), tmp_path, names=str(path))
    if array is not None:
        assert array.size * array.itemsize == len(header + payload) - 4 - 4 * (header + payload)[3]


# dSprites npz --------------------------------------------------------------------------------

npy_headers = st.builds(
    lambda descr, shape, fortran: {"descr": descr, "fortran_order": fortran, "shape": tuple(shape)},
    st.sampled_from(["|u1", "<i8", "<f8", "|V0", "|O", "<U3", "|b1", "<c8", ">f4"]),
    st.lists(st.one_of(st.integers(0, 8), st.sampled_from([737280, 64, 6, 10**12])), max_size=4),
    st.booleans(),
)


def npy_bytes(header: dict, data: bytes) -> bytes:
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, header)
    return buffer.getvalue() + data


@FUZZ
@given(
    members=st.dictionaries(
        st.sampled_from(["imgs", "latents_classes", "latents_values", "other"]),
        st.tuples(npy_headers, st.binary(max_size=200)),
        max_size=4,
    ),
    compressed=st.booleans(),
    cut=st.one_of(st.none(), st.integers(0, 4000)),
)
def test_dsprites_reads_an_npz_or_names_the_file(tmp_path, members, compressed, cut):
    path = tmp_path / "dsprites.npz"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED if compressed else zipfile.ZIP_STORED) as archive:
        for name, (header, data) in members.items():
            archive.writestr(f"{name}.npy", npy_bytes(header, data))
    if cut is not None:
        path.write_bytes(path.read_bytes()[:cut])
    assert outcome(lambda: DSprites(path=path), tmp_path, names=str(path)) is None  # never the real 3 GB set


# metrics.csv ---------------------------------------------------------------------------------

cells = st.one_of(
    st.integers(-3, 100).map(str), st.floats(allow_nan=True).map(repr), st.just(""), st.sampled_from(["step", "elbo_loss", "kl"]),
    st.text(max_size=5),
)
lines = st.lists(cells, min_size=1, max_size=4).map(",".join)


@FUZZ
@given(
    table=st.lists(lines, max_size=6).map("\n".join),
    end=st.sampled_from(["", "\n"]),
    extra=st.binary(max_size=4),
)
def test_read_training_metrics_returns_a_complete_table_or_names_the_file(tmp_path, table, end, extra):
    path = tmp_path / "metrics.csv"
    path.write_bytes((table + end).encode("utf-8", "surrogatepass") + extra)
    columns = outcome(lambda: read_training_metrics(tmp_path), tmp_path, names=str(path))
    if columns:
        lengths = {len(values) for values in columns.values()}
        assert len(lengths) == 1 and columns["step"] == sorted(set(columns["step"]))


# settings files and --set values -------------------------------------------------------------

json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=8)),
    lambda children: st.one_of(st.lists(children, max_size=4), st.dictionaries(st.text(max_size=6), children, max_size=4)),
    max_leaves=20,
)
setting_names = st.sampled_from(["latent_dim", "train.lr", "train.betas", "train.lr_plateau", "hidden", "dataset", "beta"])


@FUZZ
@given(
    values=st.one_of(json_values, st.dictionaries(setting_names, json_values, max_size=4)),
    suffix=st.sampled_from([".json", ".yaml"]),
    prefix=st.sampled_from(["", "[" * 200, "a: &a [1, 2]\nb: [*a, *a]\n", "!!python/name:os.system\n"]),
)
def test_read_settings_file_returns_a_mapping_or_names_the_file(tmp_path, values, suffix, prefix):
    path = tmp_path / f"settings{suffix}"
    path.write_text(prefix + json.dumps(values))
    result = outcome(lambda: read_settings_file(path), tmp_path, names=str(path))
    assert result is None or isinstance(result, dict)


@FUZZ
@given(name=setting_names, text=st.one_of(st.text(max_size=30), json_values.map(json.dumps), st.just("[" * 5000), st.just("9" * 5000)))
def test_a_set_value_is_converted_or_refused_naming_the_setting(tmp_path, name, text):
    outcome(lambda: setting_value(VAEConfig, name, text), tmp_path, names=name)


# run folders: config.json and checkpoints ----------------------------------------------------


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("fuzz") / "run"
    overrides = {"num_train": 64, "latent_dim": 2, "factor_score_votes": 10, "train.steps": 2, "train.batch_size": 16,
                 "train.progress_bar": False, "train.log_every_n_steps": 1, "train.checkpoint_every_n_steps": 1}
    train_recipe(RECIPES["vae"], with_overrides(RECIPES["vae"].demo(), overrides), run)
    return run


def replaced(settings_: object, path: tuple, value: object) -> object:
    """``settings_`` with the value at ``path`` (keys, as far as they go) replaced by ``value``."""
    if not path or not isinstance(settings_, dict) or not settings_:
        return value
    key = sorted(settings_)[path[0] % len(settings_)]
    return {**settings_, key: replaced(settings_[key], path[1:], value)}


@settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(where=st.lists(st.integers(0, 50), max_size=3).map(tuple), value=json_values)
def test_load_run_loads_or_names_a_config_json_it_cannot_use(trained_run, tmp_path_factory, where, value):
    run = Path(shutil.copytree(trained_run, tmp_path_factory.mktemp("config") / "run"))
    settings_ = json.loads((run / "config.json").read_text())
    (run / "config.json").write_text(json.dumps(replaced(settings_, where, value)))
    outcome(lambda: ppl_vae.load_run(run), run, names=str(run))


@FUZZ
@given(position=st.floats(0, 1), flips=st.binary(min_size=1, max_size=4), truncate=st.booleans())
def test_read_checkpoint_gives_the_saved_weights_or_refuses_the_file(trained_run, tmp_path_factory, position, flips, truncate):
    folder = tmp_path_factory.mktemp("checkpoint")
    original = (trained_run / "checkpoints" / "last.ckpt").read_bytes()
    at = int(position * (len(original) - len(flips)))
    damaged = original[:at] if truncate else original[:at] + bytes(a ^ b for a, b in zip(original[at:], flips, strict=False)) + original[at + len(flips):]
    path = folder / "last.ckpt"
    path.write_bytes(damaged)
    checkpoint = outcome(lambda: read_checkpoint(path), folder, names=str(path))
    if checkpoint is not None:
        saved = torch.load(trained_run / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
        assert checkpoint["state_dict"].keys() == saved.keys()
        assert all(torch.equal(checkpoint["state_dict"][name], saved[name]) for name in saved)


# count tables, GrassyMNIST and CelebA arguments ---------------------------------------------

count_tables = st.one_of(
    hnp.arrays(
        st.sampled_from([np.float16, np.float32, np.float64, np.longdouble, np.int64, np.uint8, np.bool_, np.complex64, "U2"]),
        hnp.array_shapes(min_dims=0, max_dims=3, max_side=4),
    ),
    st.lists(st.lists(st.one_of(st.integers(-2, 5), st.floats()), max_size=3), max_size=3),
    st.sampled_from([torch.ones(2, 3, dtype=torch.bfloat16), torch.ones(2, 3).to_sparse(), torch.full((2, 3), float("nan"))]),
)


@FUZZ
@given(target=count_tables, counts=st.booleans())
def test_contrastive_tensors_give_finite_float32_tables_or_name_the_argument(tmp_path, target, counts):
    tables = outcome(lambda: contrastive_tensors(target, np.ones((2, 3)), counts=counts), tmp_path, names="target")
    if tables is not None:
        assert tables["target"].dtype == torch.float32 and bool(torch.isfinite(tables["target"]).all())


anything = st.one_of(json_values, st.sampled_from([np.array([1, 0]), float("inf"), float("nan"), "Eyeglasses", b"x"]))


@FUZZ
@given(amplitude=anything, noise=anything)
def test_grassy_mnist_arguments_are_used_or_named(tmp_path, amplitude, noise):
    source = (torch.rand(10, 1, 28, 28, generator=torch.Generator().manual_seed(0)), torch.arange(10))
    data = outcome(lambda: ppl_vae.data.GrassyMNIST(digits_source=source, amplitude=amplitude, background_noise=noise), tmp_path)
    if data is not None:
        assert all(bool(torch.isfinite(tensor.float()).all()) for tensor in data.tensors().values())


@FUZZ
@given(attributes=anything, where=anything)
def test_celeba_arguments_are_checked_before_its_files(tmp_path, attributes, where):
    outcome(lambda: CelebA(root=tmp_path, attributes=attributes, where=where), tmp_path)


# writers: nothing lands outside the run ------------------------------------------------------

RUN_ENTRIES = ["config.json", "metrics.csv", "metrics.json", "checkpoints", "checkpoints/last.ckpt", "pictures", "pictures/samples.png"]


def write_everything(run: Path) -> None:
    """Every write of a training run and its evaluation, through the library's writers."""
    from matplotlib.figure import Figure

    from ppl_vae.train import RunDirectory
    from ppl_vae.train.checkpoint import AtomicCheckpointIO
    from ppl_vae.train.metrics import write_metrics_table

    directory = RunDirectory(run, overwrite=True)
    directory.write_config({"train": {}})
    write_metrics_table(directory.metrics_csv, [{"step": 1, "elbo_loss": 1.0}])
    AtomicCheckpointIO().save_checkpoint({"state_dict": {}}, directory.last_checkpoint)
    ppl_vae.viz.save_figure(Figure(), directory.pictures / "samples.png")
    directory.write_metrics({"elbo": 1.0})


@settings(max_examples=100, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(links=st.dictionaries(st.sampled_from(RUN_ENTRIES), st.sampled_from(["outside file", "outside folder", "inside file"]), max_size=3))
def test_the_writers_of_a_run_never_write_outside_it(tmp_path_factory, links):
    base = tmp_path_factory.mktemp("links")
    outside, run = base / "outside", base / "run"
    (outside / "folder").mkdir(parents=True)
    (outside / "file").write_bytes(b"the user's")
    (run / "pictures").mkdir(parents=True)
    (run / "kept").write_bytes(b"inside")
    for entry, target in sorted(links.items(), key=lambda item: item[0].count("/")):
        link = run / entry
        if link.parent.is_symlink() or link.exists() or link.is_symlink():
            continue
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to({"outside file": outside / "file", "outside folder": outside / "folder", "inside file": run / "kept"}[target])
    before = snapshot(outside)
    try:
        with time_limit():
            write_everything(run)
    except ValueError as error:
        assert "symbolic link" in str(error) or "folder" in str(error), error
    assert snapshot(outside) == before


# the cases a fuzz of every reader found last (issue 42) ---------------------------------------


def test_a_yaml_config_with_a_nul_byte_is_a_usage_error_naming_the_file(tmp_path, capsys):
    from ppl_vae.cli import main

    config = tmp_path / "settings.yaml"
    config.write_bytes(b"latent_dim: 3\x00\n")
    assert main(["train", "vae", "--config", str(config), "--run-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"ppl-vae: error: config file {config} is not valid YAML: unacceptable character #x0000")
    assert len(err.splitlines()) == 1 and not (tmp_path / "run").exists()


def test_a_config_json_in_a_loop_of_links_is_named_by_every_reader(trained_run, tmp_path_factory, capsys):
    from ppl_vae.cli import main

    run = Path(shutil.copytree(trained_run, tmp_path_factory.mktemp("loop") / "run"))
    (run / "config.json").unlink()
    (run / "config.json").symlink_to("config.json")
    named = f"{run / 'config.json'} is a symbolic link that leads into a loop of links"
    assert outcome(lambda: ppl_vae.load_run(run), run, names=named) is None
    for argv in (["train", "--resume", str(run)], ["evaluate", str(run)], ["train", "vae", "--run-dir", str(run), "--overwrite"]):
        assert main(argv) == 2
        assert capsys.readouterr().err.strip() == f"ppl-vae: error: {named}"


def test_resuming_a_finished_run_whose_metrics_json_is_a_list_names_the_file(trained_run, tmp_path_factory, capsys):
    from ppl_vae.cli import main

    run = Path(shutil.copytree(trained_run, tmp_path_factory.mktemp("metrics") / "run"))
    (run / "metrics.json").write_text("[1, 2]\n")
    before = snapshot(run)
    assert main(["train", "--resume", str(run)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"ppl-vae: error: run metrics {run / 'metrics.json'} must hold a JSON object of figures, got a list: "
        f"remove it and run `ppl-vae evaluate {run}`"
    )
    assert snapshot(run) == before


@pytest.mark.parametrize("folder", ["pictures", "checkpoints"])
def test_load_run_refuses_a_run_whose_folder_is_a_file(trained_run, tmp_path_factory, folder):
    run = Path(shutil.copytree(trained_run, tmp_path_factory.mktemp("folder") / "run"))
    shutil.rmtree(run / folder)
    (run / folder).write_bytes(b"not a folder")
    named = f"{run / folder} must be a folder of the run, but it is a file"
    assert outcome(lambda: ppl_vae.load_run(run), run, names=named) is None


@pytest.mark.parametrize(
    "table",
    [torch.tensor([[0.0, 3.0, 256.0], [1.5, 0.0, 7.0]], dtype=torch.bfloat16),
     torch.tensor([[0.0, 3.0, 2048.0], [1.5, 0.0, 7.0]], dtype=torch.float16),
     torch.tensor([[0.0, 3.0, 5.0], [1.0, 0.0, 7.0]]).to_sparse(),
     torch.tensor([[0.0, 3.0, 5.0], [1.0, 0.0, 7.0]]).to_sparse_csr()],
    ids=["bfloat16", "float16", "sparse COO", "sparse CSR"],
)
def test_bfloat16_and_sparse_count_tables_become_the_same_float32_table(table):
    """The documented choice of contrastive_tensors: widen to float32 (exact) and make dense."""
    tables = contrastive_tensors(table, table)
    dense = table.to_dense() if table.layout != torch.strided else table
    assert tables["target"].dtype == torch.float32 and tables["target"].layout == torch.strided
    assert torch.equal(tables["target"], dense.float()) and torch.equal(tables["background"], dense.float())
