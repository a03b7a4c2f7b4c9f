"""A resume from a checkpoint that cannot be continued fails with a clear CheckpointError
before it touches a file of the run; a damaged or non-finite checkpoint is refused on load."""
import zipfile
from pathlib import Path

import pytest
import torch
from pyro.infer import TraceMeanField_ELBO
from test_engine import FAST, Interrupt, InterruptAt, small_vae

from ppl_vae import fit
from ppl_vae.train import CheckpointError, read_checkpoint
from ppl_vae.train.checkpoint import tensor_digest

SETTINGS = dict(steps=40, checkpoint_every_n_steps=10, **FAST)


def files_of(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (hidden ones too) and its bytes."""
    return {str(path.relative_to(folder)): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


@pytest.fixture
def killed_run(data, tmp_path) -> Path:
    """A run stopped at iteration 25: its checkpoint holds iteration 20, metrics.csv rows to 25."""
    with pytest.raises(Interrupt):
        fit(small_vae(), TraceMeanField_ELBO(), data, run_dir=tmp_path, callbacks=[InterruptAt(25)], **SETTINGS)
    assert "25," in (tmp_path / "metrics.csv").read_text()
    return tmp_path


def rewrite_checkpoint(run: Path, change) -> None:
    """Apply ``change`` to the run's checkpoint and save it with a digest of the changed tensors
    (so that the check under test, not the digest, refuses it)."""
    path = run / "checkpoints" / "last.ckpt"
    checkpoint = torch.load(path, weights_only=True)
    change(checkpoint)
    if isinstance(checkpoint.get("ppl_vae"), dict):
        checkpoint["ppl_vae"]["digest"] = tensor_digest(checkpoint)
    torch.save(checkpoint, path)


def without_optimiser_states(checkpoint):
    del checkpoint["optimizer_states"]


def without_a_bias(checkpoint):
    del checkpoint["state_dict"][next(name for name in checkpoint["state_dict"] if name.endswith("bias"))]


def with_random_states_of_the_wrong_type(checkpoint):
    checkpoint["ppl_vae"]["rng"] = "a random state"


def with_a_nan_weight(checkpoint):
    weight = next(name for name in checkpoint["state_dict"] if name.endswith("weight"))
    checkpoint["state_dict"][weight][0, 0] = float("nan")


def with_a_state_dict_that_is_a_list(checkpoint):
    checkpoint["state_dict"] = list(checkpoint["state_dict"].values())


def without_history(checkpoint):
    del checkpoint["ppl_vae"]["history"]


def with_a_history_of_strings(checkpoint):
    checkpoint["ppl_vae"]["history"] = ["step", "elbo_loss"]


def with_optimiser_states_of_another_model(checkpoint):
    checkpoint["optimizer_states"][0]["param_groups"][0]["params"] = [0]


def with_loop_states_that_are_text(checkpoint):
    checkpoint["loops"] = "loops"


def without_lightnings_version(checkpoint):
    del checkpoint["pytorch-lightning_version"]


def with_a_plateau_state_that_is_text(checkpoint):
    checkpoint["ppl_vae"]["lr_plateau"] = "plateau"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (with_loop_states_that_are_text, "Lightning's version or loop states"),
        (without_lightnings_version, "Lightning's version or loop states"),
        (with_a_plateau_state_that_is_text, "ppl_vae state cannot be restored"),
        (without_optimiser_states, "states of 1 optimiser"),
        (without_a_bias, "does not fit the model"),
        (with_random_states_of_the_wrong_type, "random states cannot be restored"),
        (with_a_nan_weight, "NaN or infinite"),
        (with_a_state_dict_that_is_a_list, "state_dict must map names to tensors"),
        (without_history, "history must be a list"),
        (with_a_history_of_strings, "history row 0"),
        (with_optimiser_states_of_another_model, "state of optimiser 0 does not fit"),
    ],
)
def test_a_resume_that_fails_changes_no_file_and_names_the_problem(killed_run, data, change, message):
    rewrite_checkpoint(killed_run, change)
    before = files_of(killed_run)
    with pytest.raises(CheckpointError, match=message):
        fit(small_vae(), TraceMeanField_ELBO(), data, run_dir=killed_run, resume=True, **SETTINGS)
    assert files_of(killed_run) == before


def flip_a_bit_of_a_tensor(path: Path) -> None:
    """Flip one bit in the first tensor record of a torch zip file, leaving the zip's
    structure (and its now wrong CRC, which torch does not check) as it is."""
    with zipfile.ZipFile(path) as archive:
        record = next(info for info in archive.infolist() if "/data/" in info.filename and info.file_size >= 4)
        header = archive.fp
        header.seek(record.header_offset)
        local = header.read(30)
        start = record.header_offset + 30 + int.from_bytes(local[26:28], "little") + int.from_bytes(local[28:30], "little")
    data = bytearray(path.read_bytes())
    data[start] ^= 0x10
    path.write_bytes(bytes(data))


def test_a_flipped_bit_in_a_checkpoints_tensors_is_refused_by_its_digest(killed_run):
    path = killed_run / "checkpoints" / "last.ckpt"
    flip_a_bit_of_a_tensor(path)
    with pytest.raises(CheckpointError, match="damaged"):
        read_checkpoint(path)


def test_a_checkpoint_edited_without_a_new_digest_is_refused(killed_run):
    path = killed_run / "checkpoints" / "last.ckpt"
    checkpoint = torch.load(path, weights_only=True)
    weight = next(name for name in checkpoint["state_dict"] if name.endswith("weight"))
    checkpoint["state_dict"][weight] += 1.0
    torch.save(checkpoint, path)
    with pytest.raises(CheckpointError, match="digest"):
        read_checkpoint(path)


def test_loading_refuses_non_finite_weights_naming_the_tensor(killed_run):
    rewrite_checkpoint(killed_run, with_a_nan_weight)
    with pytest.raises(CheckpointError, match=r"weight 'model\..*weight' holds NaN"):
        read_checkpoint(killed_run / "checkpoints" / "last.ckpt")


def test_a_valid_resume_still_continues_the_killed_run(killed_run, data):
    resumed = fit(small_vae(), TraceMeanField_ELBO(), data, run_dir=killed_run, resume=True, **SETTINGS)
    assert resumed.steps == 40
    assert read_checkpoint(killed_run / "checkpoints" / "last.ckpt")["ppl_vae"]["digest"]


def rewrite_archive(path: Path, compress_type: int) -> None:
    """Write the zip archive at ``path`` again with every entry in ``compress_type``."""
    with zipfile.ZipFile(path) as archive:
        entries = [(info.filename, archive.read(info.filename)) for info in archive.infolist()]
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in entries:
            archive.writestr(name, data, compress_type=compress_type)


def test_a_checkpoint_with_compressed_entries_is_refused_before_anything_is_inflated(killed_run):
    path = killed_run / "checkpoints" / "last.ckpt"
    rewrite_archive(path, zipfile.ZIP_DEFLATED)
    with pytest.raises(CheckpointError, match=r"entry '.*' is compressed"):
        read_checkpoint(path)


def test_a_checkpoint_whose_entries_claim_more_bytes_than_the_file_is_refused(killed_run):
    path = killed_run / "checkpoints" / "last.ckpt"
    data = bytearray(path.read_bytes())
    central = data.index(b"PK\x01\x02")  # the first central-directory record
    data[central + 24 : central + 28] = (2**31).to_bytes(4, "little")  # its uncompressed size
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=r"claim \d+ bytes, more than the file's"):
        read_checkpoint(path)


def test_a_checkpoint_in_an_older_torch_format_is_read_only_when_trusted(killed_run):
    path = killed_run / "checkpoints" / "last.ckpt"
    torch.save(torch.load(path, weights_only=True), path, _use_new_zipfile_serialization=False)
    with pytest.raises(CheckpointError, match=r"not a zip archive .*weights_only=False"):
        read_checkpoint(path)
    assert read_checkpoint(path, weights_only=False)["ppl_vae"]["iteration"] == 20


def test_a_tensor_repeating_its_storage_beyond_the_files_size_is_refused_before_it_is_materialised(killed_run):
    path = killed_run / "checkpoints" / "last.ckpt"
    checkpoint = torch.load(path, weights_only=True)
    checkpoint["state_dict"]["model.repeated"] = torch.zeros(1).expand(1000, 1000)  # 4 MB of one stored float
    torch.save(checkpoint, path)
    assert path.stat().st_size < 4_000_000
    with pytest.raises(CheckpointError, match=r"tensor '/state_dict/model.repeated' \(1000, 1000\) spans 4000000 bytes"):
        read_checkpoint(path)


def test_a_checkpoint_nesting_containers_too_deep_is_refused(killed_run):
    path = killed_run / "checkpoints" / "last.ckpt"
    checkpoint = torch.load(path, weights_only=True)
    nested: list = [torch.zeros(1)]
    for _ in range(100):
        nested = [nested]
    checkpoint["ppl_vae"]["nested"] = nested
    torch.save(checkpoint, path)
    with pytest.raises(CheckpointError, match="nests containers deeper than 64"):
        read_checkpoint(path)
