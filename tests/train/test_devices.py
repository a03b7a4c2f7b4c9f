"""One device vocabulary for fit, load_run, the recipes and the command line: what
``torch.device`` takes plus ``"auto"``, checked once, with one line naming a missing device."""
import lightning as L
import pytest
import torch
from pyro.infer import TraceMeanField_ELBO
from test_engine import FAST, small_vae

from ppl_vae import fit, load_run
from ppl_vae._devices import available_device
from ppl_vae.cli import main
from ppl_vae.train import TrainConfig

no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="trains on a GPU")


class RecordDevice(L.Callback):
    def __init__(self) -> None:
        self.devices: list[torch.device] = []

    def on_train_batch_start(self, trainer, module, *args) -> None:
        self.devices.append(next(module.model.parameters()).device)


@pytest.mark.parametrize(
    "device, saved",
    [("cuda:1", "cuda:1"), (torch.device("cuda", 1), "cuda:1"), (torch.device("cuda"), "cuda"), ("cpu", "cpu"),
     (torch.device("cpu"), "cpu"), ("mps", "mps"), ("auto", "auto")],
)
def test_training_settings_take_what_torch_takes_as_a_device_and_save_its_text(device, saved):
    assert TrainConfig(device=device).device == saved


@pytest.mark.parametrize("device", ["gpu", "cuda:x", "", 0, None, "cpu\n"])
def test_a_device_torch_cannot_parse_is_refused_naming_the_setting(device):
    with pytest.raises(ValueError, match=r"^device must be 'auto' or a torch device such as 'cpu', 'cuda', 'cuda:1'"):
        TrainConfig(device=device)


def test_fit_trains_on_a_torch_device_object(data):
    result = fit(small_vae(), TraceMeanField_ELBO(), data, steps=2, device=torch.device("cpu"), **FAST)
    assert result.steps == 2


@no_cuda
@pytest.mark.parametrize("device", ["cuda", "cuda:0", torch.device("cuda", 1)])
def test_fit_on_a_missing_gpu_says_so_in_one_line_naming_the_device(data, device):
    with pytest.raises(ValueError) as refused:
        fit(small_vae(), TraceMeanField_ELBO(), data, steps=2, device=device, **FAST)
    message = str(refused.value)
    assert message.startswith(f"device={str(device)!r} is not available: torch sees no CUDA device")
    assert len(message.splitlines()) == 1


def test_a_gpu_index_past_the_devices_torch_sees_is_named(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert available_device("cuda:1") == torch.device("cuda", 1)
    with pytest.raises(ValueError, match=r"^device='cuda:2' is not available: torch sees 2 CUDA device\(s\), cuda:0 to cuda:1$"):
        available_device("cuda:2")


def test_a_device_with_an_index_is_one_device(monkeypatch, data):
    with pytest.raises(ValueError, match="device='cpu:0' names one device but devices=2"):
        fit(small_vae(), TraceMeanField_ELBO(), data, steps=2, device="cpu:0", devices=2, **FAST)


@no_cuda
def test_load_run_on_a_missing_gpu_says_so_before_reading_the_run(data, tmp_path):
    fit(small_vae(), TraceMeanField_ELBO(), data, steps=2, run_dir=tmp_path / "run", **FAST)
    with pytest.raises(ValueError, match=r"^device='cuda' is not available: torch sees no CUDA device"):
        load_run(tmp_path / "run", model=small_vae(), device="cuda")
    assert load_run(tmp_path / "run", model=small_vae(), device=torch.device("cpu")).model.training is False


@no_cuda
def test_the_command_line_takes_a_gpu_index_and_names_a_missing_one(tmp_path, capsys):
    assert main(["train", "vae", "--run-dir", str(tmp_path / "run"), "--steps", "2", "--device", "cuda:1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "ppl-vae: error: device='cuda:1' is not available: torch sees no CUDA device "
        f"({'this torch build has no CUDA support' if torch.version.cuda is None else 'no NVIDIA driver or GPU found'}); "
        "use 'cpu' or 'auto'"
    )


@needs_cuda
def test_fit_trains_on_the_gpu_it_names(data):
    recorded = RecordDevice()
    result = fit(small_vae(), TraceMeanField_ELBO(), data, steps=4, device="cuda:0", callbacks=[recorded], **FAST)
    assert result.steps == 4 and recorded.devices == [torch.device("cuda", 0)] * 4
    assert next(result.model.parameters()).device == torch.device("cpu")
