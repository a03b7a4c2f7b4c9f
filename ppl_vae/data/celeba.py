"""CelebA face images (Liu et al., 2015) through torchvision, for users who have the files.

Nothing is downloaded here: the files must already be in torchvision's layout, ``{root}/celeba/``
holding ``img_align_celeba/`` and the ``list_*.txt`` / ``identity_CelebA.txt`` annotation files.
"""

from __future__ import annotations

import numbers
import os
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch.utils.data import Dataset

from ppl_vae._validation import positive_integer, shown

#: The 40 binary attributes of CelebA, in the order of ``list_attr_celeba.txt``.
CELEBA_ATTRIBUTES: tuple[str, ...] = (
    "5_o_Clock_Shadow", "Arched_Eyebrows", "Attractive", "Bags_Under_Eyes", "Bald", "Bangs", "Big_Lips",
    "Big_Nose", "Black_Hair", "Blond_Hair", "Blurry", "Brown_Hair", "Bushy_Eyebrows", "Chubby", "Double_Chin",
    "Eyeglasses", "Goatee", "Gray_Hair", "Heavy_Makeup", "High_Cheekbones", "Male", "Mouth_Slightly_Open",
    "Mustache", "Narrow_Eyes", "No_Beard", "Oval_Face", "Pale_Skin", "Pointy_Nose", "Receding_Hairline",
    "Rosy_Cheeks", "Sideburns", "Smiling", "Straight_Hair", "Wavy_Hair", "Wearing_Earrings", "Wearing_Hat",
    "Wearing_Lipstick", "Wearing_Necklace", "Wearing_Necktie", "Young",
)  # fmt: skip
SPLITS = ("train", "valid", "test", "all")
CROP_SIZE = 148
REQUIRED_FILES = (
    "img_align_celeba",
    "list_attr_celeba.txt",
    "identity_CelebA.txt",
    "list_bbox_celeba.txt",
    "list_landmarks_align_celeba.txt",
    "list_eval_partition.txt",
)
HOW_TO_GET = (
    "Download the 'Align&Cropped Images' (img_align_celeba.zip, unzipped) and the annotation files "
    "list_attr_celeba.txt, identity_CelebA.txt, list_bbox_celeba.txt, list_landmarks_align_celeba.txt and "
    "list_eval_partition.txt from https://mmlab.ie.cuhk.edu.hk/projects/CelebA.html into {folder}, or run "
    "torchvision.datasets.CelebA({root!r}, download=True) once (Google Drive quotas often make that fail)."
)


def _check_attribute_names(argument: str, names: Sequence[str]) -> None:
    unknown = [name for name in names if name not in CELEBA_ATTRIBUTES]
    if unknown:
        raise ValueError(
            f"{argument}: unknown CelebA attribute(s) {shown(unknown)}; valid names are {list(CELEBA_ATTRIBUTES)}"
        )


def _attribute_names(attributes: Any) -> tuple[str, ...]:
    """``attributes`` (None, a name or a list or tuple of names) as a tuple of known names."""
    if attributes is None:
        return tuple(CELEBA_ATTRIBUTES)
    names = (attributes,) if isinstance(attributes, str) else attributes
    if not isinstance(names, (list, tuple)) or not all(isinstance(name, str) for name in names):
        raise ValueError(f"attributes must be an attribute name or a list of names; got {shown(attributes)}")
    _check_attribute_names("attributes", names)
    return tuple(names)


def _where(where: Any) -> dict[str, int]:
    """``where`` (None or a mapping of known attribute names to 0/1 or False/True) as a dict."""
    if where is None:
        return {}
    if not isinstance(where, Mapping):
        raise ValueError(f"where must be a mapping of attribute names to 0/1, e.g. {{'Eyeglasses': 1}}; got {shown(where)}")
    _check_attribute_names("where", [str(name) for name in where])
    bad = {name: value for name, value in where.items() if not isinstance(value, numbers.Integral) or value not in (0, 1)}
    if bad:
        raise ValueError(f"where: attribute values must be 0/1 or False/True; got {shown(bad)}")
    return {name: int(value) for name, value in where.items()}


class CelebA(Dataset):
    """CelebA faces as 64x64 centre crops (crop 148 x 148, then resize), with binary attribute labels.

    Images are read from disk per item, so the data set never holds all images in memory.
    Items are ``(x, attributes)``: ``x`` is ``(3, size, size)`` float32 in [0, 1] and ``attributes``
    is ``(k,)`` int64 in {0, 1} for the names in ``attribute_names``.

    :param root: folder holding ``celeba/`` (torchvision's layout; the ``celeba`` folder itself is also
        accepted).
    :param split: ``"train"``, ``"valid"``, ``"test"`` or ``"all"``.
    :param size: side of the returned images after the 148-pixel centre crop (default 64).
    :param attributes: attribute name(s) to return as labels (default: all 40, in CelebA's order).
    :param where: keep only images whose attributes equal the given values, e.g. ``{"Eyeglasses": 1}``.
    :raises ValueError: unknown ``split``, attribute names or ``where`` values, bad ``size``, or files that
        fail torchvision's integrity check.
    :raises FileNotFoundError: the files are missing (the message says how to get them).
    """

    def __init__(
        self,
        root: str | os.PathLike,
        split: str = "train",
        size: int = 64,
        attributes: str | Sequence[str] | None = None,
        where: Mapping[str, int | bool] | None = None,
    ) -> None:
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}; got {split!r}")
        positive_integer("size", size)
        names = _attribute_names(attributes)
        where = _where(where)

        root = self._torchvision_root(os.fspath(root))
        import torchvision
        from torchvision import transforms

        transform = transforms.Compose(
            [transforms.CenterCrop(CROP_SIZE), transforms.Resize(size, antialias=True), transforms.ToTensor()]
        )
        try:
            self._dataset = torchvision.datasets.CelebA(
                root, split=split, target_type="attr", transform=transform, download=False
            )
        except RuntimeError as err:
            raise ValueError(f"root: the CelebA files under {root!r} failed torchvision's check ({err})") from err
        columns = [list(self._dataset.attr_names).index(name) for name in names]
        keep = torch.ones(len(self._dataset.attr), dtype=torch.bool)
        for name, value in where.items():
            keep &= self._dataset.attr[:, list(self._dataset.attr_names).index(name)] == int(value)
        self.attribute_names: tuple[str, ...] = names
        self.size = size
        self.indices = torch.nonzero(keep).flatten()
        self._labels = self._dataset.attr[self.indices][:, columns].to(torch.int64)

    @staticmethod
    def _torchvision_root(root: str) -> str:
        if os.path.basename(os.path.normpath(root)) == "celeba" and os.path.isdir(
            os.path.join(root, "img_align_celeba")
        ):
            root = os.path.dirname(os.path.normpath(root))
        folder = os.path.join(root, "celeba")
        missing = [name for name in REQUIRED_FILES if not os.path.exists(os.path.join(folder, name))]
        if missing:
            raise FileNotFoundError(
                f"root: CelebA not found under {root!r} (missing {missing} in {folder!r}). "
                + HOW_TO_GET.format(folder=folder, root=root)
            )
        return root

    def __len__(self) -> int:
        return self.indices.shape[0]

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        image, _ = self._dataset[int(self.indices[index])]
        return image, self._labels[index]

    def tensors(self, indices: torch.Tensor | Sequence[int] | None = None) -> dict[str, torch.Tensor]:
        """Images and labels as whole tensors, read from disk now.

        :param indices: ``(n,)`` positions in this (filtered) data set; ``None`` loads all of them (the
            train split takes about 8 GB as float32 at size 64, so pass indices on small machines).
        :returns: ``{"x": (n, 3, size, size) float32 in [0, 1], "attributes": (n, k) int64 in {0, 1}}``.
        """
        indices = (
            torch.arange(len(self)) if indices is None else torch.as_tensor(indices, dtype=torch.int64).reshape(-1)
        )
        images = torch.empty((indices.shape[0], 3, self.size, self.size))
        for row, index in enumerate(indices.tolist()):
            images[row] = self[index][0]
        return {"x": images, "attributes": self._labels[indices]}
