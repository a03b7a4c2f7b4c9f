"""dSprites (Matthey et al., 2017): 737,280 binary 64x64 sprites on a full grid of six factors.

The images are produced by a deterministic renderer of our own (:class:`DSpritesRenderer`), so the
data set needs no download; users who have the original
``dsprites_ndarray_co1sh3sc6or40x32y32_64x64.npz`` load it through the same API with
``DSprites(path=...)``.

Factor grid (same order and sizes as the original release, index ``i`` of the flat data set is the
row-major position in this grid, like the original's ``latents_bases``):

=============  ====  ==================================================================
factor         size  values (``DSprites.factor_values``)
=============  ====  ==================================================================
color          1     1.0 (white)
shape          3     1 square, 2 ellipse, 3 heart
scale          6     ``linspace(0.5, 1, 6)``
orientation    40    ``2 pi k / 40`` for k = 0..39 (radians, no endpoint: the original
                     repeats 0 as 2 pi)
posX           32    ``linspace(0, 1, 32)``
posY           32    ``linspace(0, 1, 32)``
=============  ====  ==================================================================

Rendering choices (the renderer approximates, it does not reproduce, the original pixels):

* A pixel is on when its centre lies strictly inside the sprite (a binary point-in-shape test, no
  anti-aliasing; centres exactly on an edge are off). At scale 1 the square has side 20 px, the
  ellipse has axes 20 x 10 px and the heart is 20 px wide and about 19.6 px tall; at scale ``s``
  every length is multiplied by ``s``.
* Orientation rotates the sprite counter-clockwise about its centre (the centre of its bounding box).
  The square repeats every quarter turn and the ellipse every half turn, as in the original.
* Positions move the sprite in whole pixels: posX index ``j`` puts the centre at column
  ``16.5 + j`` and posY index ``k`` at row ``16.5 + k`` (rows counted from the top, pixel ``r``
  covering ``[r, r + 1)``), so the centre spans ``[16.5, 47.5]`` symmetrically about the middle of
  the image. Hence two images that differ only in posX (or posY) are exact shifted copies of each
  other, and no sprite is ever clipped: every sprite fits in a 33x33 patch whose outermost ring of
  pixels is empty.
"""

from __future__ import annotations

import math
import os
import zipfile
import zlib
from collections.abc import Iterator, Sequence
from typing import IO

import numpy as np
import torch
from torch.utils.data import Dataset

from ppl_vae._files import write_atomically
from ppl_vae._validation import integer, shown

FACTOR_NAMES: tuple[str, ...] = ("color", "shape", "scale", "orientation", "posX", "posY")
FACTOR_SIZES: tuple[int, ...] = (1, 3, 6, 40, 32, 32)
NUM_IMAGES: int = math.prod(FACTOR_SIZES)
IMAGE_SIZE: int = 64
ORIGINAL_FILENAME = "dsprites_ndarray_co1sh3sc6or40x32y32_64x64.npz"
RENDER_VERSION = 1

_BASES = tuple(math.prod(FACTOR_SIZES[k + 1 :]) for k in range(len(FACTOR_SIZES)))
_SPRITE_SIZE = 33
_NUM_POSITIONS = FACTOR_SIZES[4]
_CANVAS_SIZE = IMAGE_SIZE + _NUM_POSITIONS - 1
_BYTES_PER_IMAGE = IMAGE_SIZE * IMAGE_SIZE // 8
_PACK_CHUNK = 32_768
_HEART_WIDTH = 2.278
_HEART_Y_CENTRE = 0.11825
_EPS = 1e-9  # pixel centres on a sprite's edge (exact ties, e.g. at scale 1) are off
_FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _factor_values() -> dict[str, torch.Tensor]:
    return {
        "color": torch.ones(1, dtype=torch.float64),
        "shape": torch.arange(1.0, 4.0, dtype=torch.float64),
        "scale": torch.linspace(0.5, 1.0, FACTOR_SIZES[2], dtype=torch.float64),
        "orientation": torch.arange(FACTOR_SIZES[3], dtype=torch.float64) * (2 * math.pi / FACTOR_SIZES[3]),
        "posX": torch.linspace(0.0, 1.0, FACTOR_SIZES[4], dtype=torch.float64),
        "posY": torch.linspace(0.0, 1.0, FACTOR_SIZES[5], dtype=torch.float64),
    }


def _square(u: np.ndarray, v: np.ndarray, scale: np.ndarray) -> np.ndarray:
    return np.maximum(np.abs(u), np.abs(v)) < 10.0 * scale - _EPS


def _ellipse(u: np.ndarray, v: np.ndarray, scale: np.ndarray) -> np.ndarray:
    return (u / (10.0 * scale)) ** 2 + (v / (5.0 * scale)) ** 2 < 1.0 - _EPS


def _heart(u: np.ndarray, v: np.ndarray, scale: np.ndarray) -> np.ndarray:
    # Implicit heart (x^2 + y^2 - 1)^3 <= x^2 y^3: x in [-1.139, 1.139], y in [-1, 1.2365].
    unit = 20.0 * scale / _HEART_WIDTH
    x = u / unit
    y = v / unit + _HEART_Y_CENTRE
    return (x**2 + y**2 - 1.0) ** 3 - x**2 * y**3 < -_EPS


def stratified_label_indices(
    count: int | None = None, fraction: float | None = None, seed: int = 0
) -> torch.Tensor:
    """Flat indices of a random labelled subset of the full dSprites grid, stratified by shape.

    The number of labelled images is a count or a fraction of all 737,280 images (the
    PartedVAE paper labels 0.5%: ``fraction=0.005`` gives ``round(0.005 * 737280) = 3,686``),
    whatever subset of images a model trains on; the labelled images may lie outside it. The
    count is split as evenly as the three shapes allow (3,686 -> 1,229 / 1,229 / 1,228, the
    first shapes taking the remainder), and each shape's images are drawn uniformly without
    replacement from its 245,760 images, so the other factors are uniform within a shape.

    :param count: number of labelled images, in [1, 737280]. Give exactly one of ``count`` and
        ``fraction``.
    :param fraction: share of the full set, in (0, 1]; at least one image.
    :param seed: seeds the draw (numpy Generator): same seed, same indices.
    :returns: int64 (n,), sorted flat indices (``DSprites.index_of`` order).
    :raises ValueError: both or neither of ``count`` and ``fraction``, a count that is not an
        integer in [1, 737280] (booleans refused), a fraction outside (0, 1].
    """
    if (count is None) == (fraction is None):
        raise ValueError(f"give exactly one of count and fraction, got count={count!r}, fraction={fraction!r}")
    if fraction is not None:
        if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 < fraction <= 1:
            raise ValueError(f"fraction must be a number in (0, 1] of the {NUM_IMAGES} images, got {fraction!r}")
        count = max(1, round(fraction * NUM_IMAGES))
    if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or not 1 <= count <= NUM_IMAGES:
        raise ValueError(f"count must be an integer in [1, {NUM_IMAGES}], got {count!r}")
    rng = np.random.default_rng(seed)
    shapes = FACTOR_SIZES[1]
    per_shape = _BASES[1]
    chosen = [
        shape * per_shape + rng.choice(per_shape, size=count // shapes + (shape < count % shapes), replace=False)
        for shape in range(shapes)
    ]
    return torch.from_numpy(np.sort(np.concatenate(chosen)).astype(np.int64))


class DSpritesRenderer:
    """Deterministic, vectorised renderer of the dSprites factor grid.

    Each of the 720 (shape, scale, orientation) sprites is rasterised once into a 33x33 patch; an
    image is that patch pasted at a whole-pixel offset given by (posX, posY). See the module
    docstring for the geometry.

    :ivar sprites: ``(3, 6, 40, 33, 33)`` bool, the sprite patches (centre at patch pixel 16).
    """

    def __init__(self) -> None:
        values = _factor_values()
        scale = values["scale"].numpy()[:, None, None, None]
        theta = values["orientation"].numpy()[None, :, None, None]
        coords = np.arange(_SPRITE_SIZE, dtype=np.float64) - (_SPRITE_SIZE - 1) / 2
        x = coords[None, None, None, :]
        y = -coords[None, None, :, None]
        u = np.cos(theta) * x + np.sin(theta) * y
        v = -np.sin(theta) * x + np.cos(theta) * y
        self.sprites = np.stack([shape(u, v, scale) for shape in (_square, _ellipse, _heart)])
        offset = _NUM_POSITIONS - 1
        canvases = np.zeros((self.sprites[..., 0, 0].size, _CANVAS_SIZE, _CANVAS_SIZE), dtype=np.uint8)
        canvases[:, offset : offset + _SPRITE_SIZE, offset : offset + _SPRITE_SIZE] = self.sprites.reshape(
            -1, _SPRITE_SIZE, _SPRITE_SIZE
        )
        self._canvases = torch.from_numpy(canvases)
        # Per device: (720, 32, 32, 64, 64) view, [sprite, a, b] = image with posY = 31 - a, posX = 31 - b.
        self._windows: dict[torch.device, torch.Tensor] = {}

    def render(self, factors: torch.Tensor) -> torch.Tensor:
        """Render images for valid factor class indices.

        :param factors: ``(n, 6)`` int64 class indices (already validated), on any device.
        :returns: ``(n, 64, 64)`` uint8 in {0, 1}, on the device of ``factors``.
        """
        device = factors.device
        if device not in self._windows:
            canvases = self._canvases.to(device)
            self._windows[device] = canvases.unfold(1, IMAGE_SIZE, 1).unfold(2, IMAGE_SIZE, 1)
        sprite = (factors[:, 1] * FACTOR_SIZES[2] + factors[:, 2]) * FACTOR_SIZES[3] + factors[:, 3]
        last = _NUM_POSITIONS - 1
        return self._windows[device][sprite, last - factors[:, 5], last - factors[:, 4]]

    def iter_blocks(self) -> Iterator[tuple[int, np.ndarray]]:
        """Render the whole grid, one (shape, scale, orientation) block at a time, in index order.

        :yields: ``(start, block)``: ``block`` is ``(1024, 64, 64)`` uint8 in {0, 1} holding images
            ``start .. start + 1023`` (posX major, posY minor).
        """
        canvases = self._canvases.numpy()
        block_size = _NUM_POSITIONS * _NUM_POSITIONS
        for sprite, canvas in enumerate(canvases):
            windows = np.lib.stride_tricks.sliding_window_view(canvas, (IMAGE_SIZE, IMAGE_SIZE))
            # windows[a, b] is the image with posY = 31 - a and posX = 31 - b.
            block = windows[::-1, ::-1].transpose(1, 0, 2, 3).reshape(block_size, IMAGE_SIZE, IMAGE_SIZE)
            yield sprite * block_size, block

    def render_all_packed(self) -> np.ndarray:
        """The whole data set, bit-packed.

        :returns: ``(737280, 512)`` uint8: row ``i`` is ``np.packbits`` of image ``i`` flattened row-major.
        """
        packed = np.empty((NUM_IMAGES, _BYTES_PER_IMAGE), dtype=np.uint8)
        for start, block in self.iter_blocks():
            packed[start : start + block.shape[0]] = np.packbits(block.reshape(block.shape[0], -1), axis=1)
        return packed


class _PackedImages:
    """Binary 64x64 images stored bit-packed, ``(N, 512)`` uint8 (possibly memory-mapped)."""

    def __init__(self, packed: np.ndarray) -> None:
        self.packed = packed

    def unpack(self, indices: np.ndarray) -> np.ndarray:
        """``(n, 64, 64)`` uint8 in {0, 1} for the given flat indices."""
        return np.unpackbits(self.packed[indices], axis=1).reshape(-1, IMAGE_SIZE, IMAGE_SIZE)

    def iter_blocks(self, block_size: int = _PACK_CHUNK) -> Iterator[tuple[int, np.ndarray]]:
        """``(start, (n, 64, 64) uint8)`` chunks covering all images in order."""
        for start in range(0, self.packed.shape[0], block_size):
            rows = np.asarray(self.packed[start : start + block_size])
            yield start, np.unpackbits(rows, axis=1).reshape(-1, IMAGE_SIZE, IMAGE_SIZE)


def _grid_factors() -> np.ndarray:
    """``(737280, 6)`` int64, the factor classes of every flat index in grid order."""
    grids = np.meshgrid(*[np.arange(size) for size in FACTOR_SIZES], indexing="ij")
    return np.stack([g.reshape(-1) for g in grids], axis=1).astype(np.int64)


_MEMBER_KINDS = {"imgs": "biu", "latents_classes": "iu", "latents_values": "f"}
"""The dtype kinds each array of the original archive may have (numpy ``dtype.kind``)."""
_MEMBER_SHAPES = {
    "imgs": (NUM_IMAGES, IMAGE_SIZE, IMAGE_SIZE),
    "latents_classes": (NUM_IMAGES, len(FACTOR_SIZES)),
    "latents_values": (NUM_IMAGES, len(FACTOR_SIZES)),
}
_NPY_HEADERS = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}


def _member_dtype(member: IO[bytes], path: str, key: str) -> np.dtype:
    """Read and check the ``.npy`` header of archive member ``key``: the original's shape, a
    numeric dtype of the member's kind, C order; the data stay unread."""
    version = np.lib.format.read_magic(member)
    if version not in _NPY_HEADERS:
        raise ValueError(f"path: {key!r} in {path!r} is in .npy format {version}, not 1.0 or 2.0")
    shape, fortran_order, dtype = _NPY_HEADERS[version](member)
    expected = _MEMBER_SHAPES[key]
    if shape != expected:
        raise ValueError(f"path: {key!r} in {path!r} must have shape {expected}; its header declares {shape}")
    if dtype.kind not in _MEMBER_KINDS[key] or dtype.itemsize == 0 or dtype.hasobject or fortran_order:
        raise ValueError(
            f"path: {key!r} in {path!r} must hold C-ordered numbers of kind {_MEMBER_KINDS[key]!r}; its header declares "
            f"{dtype.str}{' in Fortran order' if fortran_order else ''}"
        )
    return dtype


def _member_rows(archive: zipfile.ZipFile, path: str, key: str, rows: int = _PACK_CHUNK) -> Iterator[np.ndarray]:
    """The array ``key`` of the archive, ``rows`` rows at a time, after :func:`_member_dtype`
    checked its header; a corrupt, truncated or oversized member raises ``ValueError``."""
    row_shape = _MEMBER_SHAPES[key][1:]
    try:
        with archive.open(f"{key}.npy") as member:
            dtype = _member_dtype(member, path, key)
            row_bytes = math.prod(row_shape) * dtype.itemsize
            for start in range(0, NUM_IMAGES, rows):
                count = min(rows, NUM_IMAGES - start)
                data = member.read(count * row_bytes)
                if len(data) != count * row_bytes:
                    raise ValueError(f"path: {key!r} in {path!r} ends before its {NUM_IMAGES} rows")
                yield np.frombuffer(data, dtype).reshape(count, *row_shape)
            if member.read(1):
                raise ValueError(f"path: {key!r} in {path!r} holds more data than its header declares")
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError) as err:
        raise ValueError(f"path: {key!r} in {path!r} is corrupt ({err})") from err


def _member(archive: zipfile.ZipFile, path: str, key: str) -> np.ndarray:
    """The whole array ``key`` of the archive (:func:`_member_rows`)."""
    return np.concatenate(list(_member_rows(archive, path, key)))


def _load_original(path: str) -> tuple[_PackedImages, dict[str, torch.Tensor] | None]:
    """Read the original dSprites ``.npz`` into bit-packed storage, checking its layout: each
    member's header (shape, dtype) before its data are read, the factor grid, finite factor
    values. The images are read and packed a block at a time."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"path: no dSprites file at {path!r} (expected the original {ORIGINAL_FILENAME})")
    try:
        archive = zipfile.ZipFile(path)
    except (OSError, EOFError, zipfile.BadZipFile) as err:
        raise ValueError(f"path: {path!r} is not a readable .npz archive ({err})") from err
    with archive:
        keys = {name.removesuffix(".npy") for name in archive.namelist()}
        missing = {"imgs", "latents_classes"} - keys
        if missing:
            raise ValueError(f"path: {path!r} lacks the key(s) {sorted(missing)}; it has {shown(sorted(keys))}")
        classes = _member(archive, path, "latents_classes")
        if not np.array_equal(classes, _grid_factors()):
            raise ValueError(
                f"path: 'latents_classes' in {path!r} must be the ({NUM_IMAGES}, 6) dSprites grid in row-major order"
            )
        values = None
        if "latents_values" in keys:
            latent_values = _member(archive, path, "latents_values")
            if not np.isfinite(latent_values).all():
                raise ValueError(f"path: 'latents_values' in {path!r} holds NaN or infinite factor values")
            values = {
                name: torch.from_numpy(latent_values[np.arange(size) * base, k].astype(np.float64))
                for k, (name, size, base) in enumerate(zip(FACTOR_NAMES, FACTOR_SIZES, _BASES, strict=False))
            }
        packed = np.empty((NUM_IMAGES, _BYTES_PER_IMAGE), dtype=np.uint8)
        start = 0
        for chunk in _member_rows(archive, path, "imgs"):
            packed[start : start + len(chunk)] = np.packbits(chunk.reshape(len(chunk), -1) != 0, axis=1)
            start += len(chunk)
    return _PackedImages(packed), values


def _load_or_write_cache(cache_dir: str, renderer: DSpritesRenderer) -> _PackedImages:
    """Memory-map the rendered set from ``cache_dir``, rendering and writing it first if absent."""
    if os.path.exists(cache_dir) and not os.path.isdir(cache_dir):
        raise ValueError(f"cache_dir: {cache_dir!r} is a file, not a folder")
    path = os.path.join(cache_dir, f"dsprites_render_v{RENDER_VERSION}_packed.npy")
    if not os.path.exists(path):
        packed = renderer.render_all_packed()
        write_atomically(path, lambda handle: np.save(handle, packed), binary=True)
    try:
        packed = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError, EOFError) as err:
        raise ValueError(f"cache_dir: {path!r} is not a readable .npy file ({err}); delete it to re-render") from err
    if packed.shape != (NUM_IMAGES, _BYTES_PER_IMAGE) or packed.dtype != np.uint8:
        raise ValueError(
            f"cache_dir: {path!r} must hold a ({NUM_IMAGES}, {_BYTES_PER_IMAGE}) uint8 array; got "
            f"{packed.shape} {packed.dtype}; delete it to re-render"
        )
    return _PackedImages(packed)


class DSprites(Dataset):
    """dSprites: 737,280 binary 64x64 images of 2-D shapes on the full grid of six factors.

    Items are ``(x, factors)``: ``x`` is ``(1, 64, 64)`` float32 in {0, 1} and ``factors`` is
    ``(6,)`` int64 class indices in the order of ``factor_names``.

    :param path: the original ``dsprites_ndarray_co1sh3sc6or40x32y32_64x64.npz`` (keys ``imgs``,
        ``latents_classes``, optionally ``latents_values``). When ``None`` (default) images come
        from :class:`DSpritesRenderer`. Loading the original decompresses 3 GB once and keeps
        the images bit-packed (377 MB).
    :param cache_dir: render the whole set once and keep it there as a bit-packed ``.npy`` (377 MB,
        written atomically), memory-mapped on later runs. ``None`` (default) renders on demand.
        Not allowed together with ``path``.
    :raises FileNotFoundError: ``path`` does not exist.
    :raises ValueError: ``path`` is not an ``.npz`` in the original layout, or both arguments are given.
    """

    factor_names: tuple[str, ...] = FACTOR_NAMES
    factor_sizes: tuple[int, ...] = FACTOR_SIZES
    image_shape: tuple[int, int, int] = (1, IMAGE_SIZE, IMAGE_SIZE)

    def __init__(self, path: str | os.PathLike | None = None, cache_dir: str | os.PathLike | None = None) -> None:
        if path is not None and cache_dir is not None:
            raise ValueError("path and cache_dir: pass at most one (the original file needs no cache)")
        self._renderer = DSpritesRenderer()
        self._store: _PackedImages | None = None
        self.factor_values: dict[str, torch.Tensor] = _factor_values()
        self.source = "render"
        if path is not None:
            self._store, values = _load_original(os.fspath(path))
            self.factor_values = values or self.factor_values
            self.source = "file"
        elif cache_dir is not None:
            self._store = _load_or_write_cache(os.fspath(cache_dir), self._renderer)
            self.source = "cache"

    def __len__(self) -> int:
        return NUM_IMAGES

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        if not -NUM_IMAGES <= index < NUM_IMAGES:
            raise IndexError(f"index {index} out of range for {NUM_IMAGES} images")
        factors = self.factors_of(torch.tensor([index % NUM_IMAGES]))
        return self.images_from_factors(factors)[0], factors[0]

    def images_from_factors(self, factors: torch.Tensor | Sequence[Sequence[int]]) -> torch.Tensor:
        """Images for given factor classes, rendered (or read) for just those rows.

        :param factors: ``(n, 6)`` integer class indices, column ``k`` in ``[0, factor_sizes[k])``.
            When rendering, a CUDA tensor renders on its GPU.
        :returns: ``(n, 1, 64, 64)`` float32 in {0, 1}, on the device of ``factors``.
        """
        factors = self._check_factors(factors)
        return self._images_uint8(factors).to(torch.float32).unsqueeze(1)

    def sample_factors(self, n: int, generator: torch.Generator | None = None) -> torch.Tensor:
        """Draw factor classes uniformly and independently.

        :param n: number of rows, ``n >= 0``.
        :param generator: source of randomness (its device is the output device); global RNG if None.
        :returns: ``(n, 6)`` int64 class indices.
        """
        integer("n", n, minimum=0)
        device = generator.device if generator is not None else torch.device("cpu")
        columns = [torch.randint(size, (n,), generator=generator, device=device) for size in FACTOR_SIZES]
        return torch.stack(columns, dim=1)

    def index_of(self, factors: torch.Tensor | Sequence[Sequence[int]]) -> torch.Tensor:
        """Flat data set index of factor classes (row-major in the grid, like ``latents_bases``).

        :param factors: ``(n, 6)`` integer class indices.
        :returns: ``(n,)`` int64 in ``[0, 737280)``.
        """
        factors = self._check_factors(factors)
        return (factors * torch.tensor(_BASES, dtype=torch.int64, device=factors.device)).sum(dim=1)

    def factors_of(self, indices: torch.Tensor | Sequence[int]) -> torch.Tensor:
        """Factor classes of flat indices (inverse of :meth:`index_of`).

        :param indices: ``(n,)`` integers in ``[0, 737280)``.
        :returns: ``(n, 6)`` int64 class indices.
        """
        indices = self._check_indices(indices)
        sizes = torch.tensor(FACTOR_SIZES, dtype=torch.int64, device=indices.device)
        bases = torch.tensor(_BASES, dtype=torch.int64, device=indices.device)
        return torch.div(indices[:, None], bases, rounding_mode="floor") % sizes

    def tensors(
        self, indices: torch.Tensor | Sequence[int] | None = None, dtype: torch.dtype = torch.float32
    ) -> dict[str, torch.Tensor]:
        """Images and factors as whole tensors, for training without DataLoader workers.

        :param indices: ``(n,)`` flat indices to return; ``None`` (default) returns all 737,280.
        :param dtype: image dtype: a floating dtype (values 0.0/1.0), ``torch.uint8`` (values 0/1) or
            ``torch.bool``. The whole set takes 3 GB as uint8/bool and 12 GB as float32, so pass
            ``dtype=torch.uint8`` (and convert per batch) for the full set on small machines.
        :returns: ``{"x": (n, 1, 64, 64) dtype, "factors": (n, 6) int64}`` on the CPU.
        """
        if dtype not in (*_FLOAT_DTYPES, torch.uint8, torch.bool):
            raise ValueError(f"dtype must be a floating dtype, torch.uint8 or torch.bool; got {dtype}")
        if indices is None:
            images = torch.empty((NUM_IMAGES, *self.image_shape), dtype=dtype)
            blocks = self._store.iter_blocks() if self._store is not None else self._renderer.iter_blocks()
            for start, block in blocks:
                images[start : start + block.shape[0], 0] = torch.from_numpy(block)
            return {"x": images, "factors": torch.from_numpy(_grid_factors())}
        factors = self.factors_of(indices).cpu()
        return {"x": self._images_uint8(factors).to(dtype).unsqueeze(1), "factors": factors}

    def _images_uint8(self, factors: torch.Tensor) -> torch.Tensor:
        if self._store is None:
            return self._renderer.render(factors)
        indices = self.index_of(factors).cpu().numpy()
        return torch.from_numpy(self._store.unpack(indices)).to(factors.device)

    def _check_factors(self, factors: torch.Tensor | Sequence[Sequence[int]]) -> torch.Tensor:
        factors = torch.as_tensor(factors)
        if factors.dim() != 2 or factors.shape[1] != len(FACTOR_SIZES):
            raise ValueError(f"factors must have shape (n, 6); got {tuple(factors.shape)}")
        if factors.is_floating_point() or factors.is_complex() or factors.dtype == torch.bool:
            raise ValueError(f"factors must hold integer class indices; got dtype {factors.dtype}")
        factors = factors.to(torch.int64)
        if factors.numel():
            low, high = factors.min(dim=0).values, factors.max(dim=0).values
            for k, (name, size) in enumerate(zip(FACTOR_NAMES, FACTOR_SIZES, strict=False)):
                if low[k] < 0 or high[k] >= size:
                    raise ValueError(
                        f"factors[:, {k}] ({name}) must lie in [0, {size - 1}]; got values in "
                        f"[{int(low[k])}, {int(high[k])}]"
                    )
        return factors

    def _check_indices(self, indices: torch.Tensor | Sequence[int]) -> torch.Tensor:
        indices = torch.as_tensor(indices)
        if indices.dim() != 1 or indices.is_floating_point() or indices.dtype == torch.bool:
            raise ValueError(f"indices must be a 1-D integer tensor; got shape {tuple(indices.shape)}, {indices.dtype}")
        indices = indices.to(torch.int64)
        if indices.numel() and (indices.min() < 0 or indices.max() >= NUM_IMAGES):
            raise IndexError(
                f"indices must lie in [0, {NUM_IMAGES - 1}]; got values in [{int(indices.min())}, {int(indices.max())}]"
            )
        return indices
