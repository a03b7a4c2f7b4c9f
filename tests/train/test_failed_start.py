"""A start that fails before its first iteration leaves the run directory as it found it, so
that a retry (``--device cpu``, a corrected setting) starts afresh; what existed stays."""
import lightning as L
import pytest
import torch
from pyro.infer import TraceMeanField_ELBO
from test_engine import FAST, small_vae

from ppl_vae import fit

no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")


class FailAtStart(L.Callback):
    def on_train_start(self, trainer, module) -> None:
        raise RuntimeError("the device went away")


def contents(folder):
    return {path.relative_to(folder): path.read_bytes() if path.is_file() else None for path in folder.rglob("*")}


def a_folder_with_a_note(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine")
    return folder


@pytest.mark.parametrize(
    "setting",
    [pytest.param({"device": "cuda"}, marks=no_cuda), {"strategy": "no-such-strategy"}, {"callbacks": [FailAtStart()]}],
    ids=["missing device", "bad strategy", "failure as training starts"],
)
def test_a_failed_start_of_fit_leaves_the_run_directory_as_it_found_it(data, tmp_path, setting):
    new, existing = tmp_path / "runs" / "new", a_folder_with_a_note(tmp_path)
    before = contents(existing)
    for run_dir in (new, existing):
        with pytest.raises(Exception):  # noqa: B017 - each setting fails in its own way
            fit(small_vae(), TraceMeanField_ELBO(), data, steps=2, run_dir=run_dir, **{**FAST, **setting})
    assert not (tmp_path / "runs").exists()
    assert contents(existing) == before
    for run_dir in (new, existing):
        assert fit(small_vae(), TraceMeanField_ELBO(), data, steps=2, run_dir=run_dir, **FAST).steps == 2
        assert (run_dir / "checkpoints" / "last.ckpt").is_file()
    assert (existing / "notes.txt").read_text() == "mine"
