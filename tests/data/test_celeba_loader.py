"""CelebA: argument checks and the missing-data error; the real files are never needed."""

import pytest
import torch
import torchvision
from PIL import Image

from ppl_vae.data import CELEBA_ATTRIBUTES, CelebA
from ppl_vae.data.celeba import REQUIRED_FILES


class FakeTorchvisionCelebA:
    """Three 178x218 faces; attributes: Eyeglasses only on face 1, Smiling on faces 1 and 2."""

    def __init__(self, root, split, target_type, transform, download):
        assert (split, target_type, download) == ("train", "attr", False)
        self.transform = transform
        self.attr_names = list(CELEBA_ATTRIBUTES)
        self.attr = torch.zeros(3, 40, dtype=torch.int64)
        self.attr[1, CELEBA_ATTRIBUTES.index("Eyeglasses")] = 1
        self.attr[1:, CELEBA_ATTRIBUTES.index("Smiling")] = 1

    def __len__(self):
        return 3

    def __getitem__(self, index):
        return self.transform(Image.new("RGB", (178, 218), color=(index * 100, 0, 0))), self.attr[index]


@pytest.fixture
def fake_celeba(tmp_path, monkeypatch):
    folder = tmp_path / "celeba"
    folder.mkdir()
    (folder / "img_align_celeba").mkdir()
    for name in REQUIRED_FILES[1:]:
        (folder / name).touch()
    monkeypatch.setattr(torchvision.datasets, "CelebA", FakeTorchvisionCelebA)
    return tmp_path


def test_missing_files_say_how_to_get_them(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"root: CelebA not found .*img_align_celeba.*mmlab"):
        CelebA(tmp_path)


def test_unknown_attribute_names_list_the_valid_ones(tmp_path):
    with pytest.raises(ValueError, match=r"attributes: unknown CelebA attribute\(s\) \['Glasses'\].*Eyeglasses"):
        CelebA(tmp_path, attributes=["Smiling", "Glasses"])
    with pytest.raises(ValueError, match=r"where: unknown CelebA attribute"):
        CelebA(tmp_path, where={"smiling": 1})


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [({"split": "validation"}, "split"), ({"size": 0}, "size"), ({"where": {"Male": 2}}, "where")],
)
def test_bad_arguments_are_named(tmp_path, kwargs, argument):
    with pytest.raises(ValueError, match=argument):
        CelebA(tmp_path, **kwargs)


def test_center_crops_with_all_forty_attributes_by_default(fake_celeba):
    data = CelebA(fake_celeba)
    x, attributes = data[0]
    assert len(data) == 3 and x.shape == (3, 64, 64) and x.dtype == torch.float32
    assert attributes.shape == (40,) and data.attribute_names == CELEBA_ATTRIBUTES


def test_where_filters_rows_and_attributes_select_label_columns(fake_celeba):
    data = CelebA(fake_celeba / "celeba", size=32, attributes="Smiling", where={"Eyeglasses": 0})
    tensors = data.tensors()
    assert data.indices.tolist() == [0, 2]
    assert tensors["x"].shape == (2, 3, 32, 32)
    assert tensors["attributes"].tolist() == [[0], [1]]
