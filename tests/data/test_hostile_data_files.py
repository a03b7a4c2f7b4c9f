"""Corrupt and hostile data files and arguments: each reader names what is wrong, checks
declared sizes before it allocates, and accepts nothing silently."""
import gzip
import struct
import zipfile

import numpy as np
import pytest
import torch

from ppl_vae.data import MNIST, GrassyMNIST, grass_texture, read_idx
from ppl_vae.data.celeba import CelebA
from ppl_vae.data.counts import SyntheticCounts, contrastive_tensors
from ppl_vae.data.dsprites import FACTOR_SIZES, NUM_IMAGES, DSprites, _grid_factors


def idx_header(type_code: int, shape: tuple[int, ...]) -> bytes:
    return struct.pack(">BBBB", 0, 0, type_code, len(shape)) + struct.pack(f">{len(shape)}I", *shape)


def write_labels(folder, labels: np.ndarray, type_code: int) -> None:
    images = np.zeros((len(labels), 28, 28), np.uint8)
    (folder / "train-images-idx3-ubyte").write_bytes(idx_header(0x08, images.shape) + images.tobytes())
    (folder / "train-labels-idx1-ubyte").write_bytes(idx_header(type_code, labels.shape) + labels.tobytes())


# IDX ---------------------------------------------------------------------------------------


def test_a_small_gzip_idx_file_that_unpacks_to_gigabytes_is_refused_within_little_memory(tmp_path, run_with_little_memory):
    member = gzip.compress(bytes(64 * 2**20), compresslevel=9)
    path = tmp_path / "train-images-idx3-ubyte.gz"
    path.write_bytes(gzip.compress(idx_header(0x08, (60_000, 28, 28))) + member * 40)  # 2.5 GiB unpacked
    assert path.stat().st_size < 4 * 2**20
    child = run_with_little_memory("from ppl_vae.data import read_idx", f"read_idx({str(path)!r})")
    assert "ValueError" in child.stderr and "more than 47040000 data bytes" in child.stderr, child.stderr[-2000:]


def test_an_idx_header_declaring_a_terabyte_is_refused_before_reading(tmp_path, run_with_little_memory):
    path = tmp_path / "huge.idx"
    path.write_bytes(idx_header(0x08, (2**20, 2**20)) + bytes(100))
    child = run_with_little_memory("from ppl_vae.data import read_idx", f"read_idx({str(path)!r})")
    assert "ValueError" in child.stderr and "above the 1073741824 read" in child.stderr, child.stderr[-2000:]


def test_an_idx_header_with_an_empty_axis_beside_huge_ones_is_refused(tmp_path):
    path = tmp_path / "empty.idx"
    path.write_bytes(idx_header(0x08, (0, 2**31, 2**31)))
    with pytest.raises(ValueError, match=r"declares shape \(0, 2147483648, 2147483648\)"):
        read_idx(path)


def test_an_idx_file_of_65_dimensions_is_named(tmp_path):
    path = tmp_path / "deep.idx"
    path.write_bytes(idx_header(0x08, (1,) * 65))
    with pytest.raises(ValueError, match="declares 65 dimensions"):
        read_idx(path)


@pytest.mark.parametrize(
    ("labels", "type_code"),
    [
        (np.array([1, 200], ">u1"), 0x08),
        (np.array([1, -5], ">i1"), 0x09),
        (np.array([1.0, np.nan], ">f4"), 0x0D),
    ],
)
def test_idx_labels_outside_0_to_9_or_not_integers_are_refused(tmp_path, labels, type_code):
    write_labels(tmp_path, labels, type_code)
    with pytest.raises(ValueError, match="integer labels in 0..9"):
        MNIST(idx_dir=tmp_path)


def test_an_mnist_folder_variable_naming_no_folder_is_an_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PPL_VAE_MNIST_DIR", str(tmp_path / "missing"))
    with pytest.raises(FileNotFoundError, match="PPL_VAE_MNIST_DIR=.*names no folder"):
        MNIST()


def test_a_corrupt_gzip_idx_file_is_named(tmp_path):
    path = tmp_path / "train-images-idx3-ubyte.gz"
    data = gzip.compress(idx_header(0x08, (2, 28, 28)) + bytes(2 * 784))
    path.write_bytes(data[:-12] + b"garbage!" + data[-4:])
    with pytest.raises(ValueError, match="cannot decompress"):
        read_idx(path)


# dSprites npz ------------------------------------------------------------------------------


def npy_member(header_dict: dict, data: bytes = b"") -> bytes:
    buffer = __import__("io").BytesIO()
    np.lib.format.write_array_header_1_0(buffer, header_dict)
    return buffer.getvalue() + data


def write_npz(path, members: dict[str, bytes], compression=zipfile.ZIP_STORED) -> None:
    with zipfile.ZipFile(path, "w", compression) as archive:
        for name, data in members.items():
            archive.writestr(f"{name}.npy", data)


def array_member(array: np.ndarray) -> bytes:
    buffer = __import__("io").BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


def test_an_npz_member_declaring_a_trillion_rows_is_refused_within_little_memory(tmp_path, run_with_little_memory):
    path = tmp_path / "dsprites.npz"
    header = {"descr": "<i8", "fortran_order": False, "shape": (10**12, 6)}
    write_npz(path, {"imgs": npy_member(header), "latents_classes": npy_member(header)})
    child = run_with_little_memory("from ppl_vae.data.dsprites import DSprites", f"DSprites(path={str(path)!r})")
    assert "ValueError" in child.stderr and "its header declares (1000000000000, 6)" in child.stderr, child.stderr[-2000:]


@pytest.fixture(scope="module")
def grid_member() -> bytes:
    return array_member(_grid_factors().astype(np.int8))


def test_dsprites_images_of_a_zero_width_dtype_are_refused(tmp_path, grid_member):
    path = tmp_path / "dsprites.npz"
    images = npy_member({"descr": "|V0", "fortran_order": False, "shape": (NUM_IMAGES, 64, 64)})
    write_npz(path, {"imgs": images, "latents_classes": grid_member})
    with pytest.raises(ValueError, match="'imgs' .* must hold C-ordered numbers"):
        DSprites(path=path)


def test_dsprites_nan_factor_values_are_refused(tmp_path, grid_member):
    values = np.zeros((NUM_IMAGES, len(FACTOR_SIZES)), np.float32)
    values[5, 2] = np.nan
    path = tmp_path / "dsprites.npz"
    write_npz(path, {"imgs": b"", "latents_classes": grid_member, "latents_values": array_member(values)})
    with pytest.raises(ValueError, match="'latents_values' .* NaN"):
        DSprites(path=path)


def test_dsprites_object_arrays_are_refused_without_unpickling(tmp_path):
    path = tmp_path / "dsprites.npz"
    header = {"descr": "|O", "fortran_order": False, "shape": (NUM_IMAGES, 6)}
    write_npz(path, {"imgs": b"", "latents_classes": npy_member(header, b"\x80\x04N.")})
    with pytest.raises(ValueError, match="'latents_classes' .* must hold C-ordered numbers"):
        DSprites(path=path)


def test_a_truncated_or_crc_damaged_npz_member_is_named(tmp_path, grid_member):
    path = tmp_path / "dsprites.npz"
    write_npz(path, {"imgs": b"", "latents_classes": grid_member[: len(grid_member) // 2]})
    with pytest.raises(ValueError, match="ends before its 737280 rows"):
        DSprites(path=path)
    write_npz(path, {"imgs": b"", "latents_classes": grid_member}, zipfile.ZIP_DEFLATED)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="'latents_classes' in .* is corrupt"):
        DSprites(path=path)


def test_an_empty_npz_or_cache_file_and_a_cache_dir_that_is_a_file_are_named(tmp_path):
    (tmp_path / "empty.npz").write_bytes(b"")
    with pytest.raises(ValueError, match="not a readable .npz archive"):
        DSprites(path=tmp_path / "empty.npz")
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "dsprites_render_v1_packed.npy").write_bytes(b"")
    with pytest.raises(ValueError, match="cache_dir: .* is not a readable .npy file"):
        DSprites(cache_dir=tmp_path / "cache")
    (tmp_path / "a_file").write_text("x")
    with pytest.raises(ValueError, match="cache_dir: .* is a file, not a folder"):
        DSprites(cache_dir=tmp_path / "a_file")


# count tables ------------------------------------------------------------------------------


def test_a_huge_sparse_count_matrix_is_refused_before_it_is_made_dense(tmp_path, run_with_little_memory):
    child = run_with_little_memory(
        "import scipy.sparse\nfrom ppl_vae.data.counts import contrastive_tensors",
        "table = scipy.sparse.csr_matrix(([1.0, 2.0], ([0, 199_999], [0, 29_999])), shape=(200_000, 30_000))\n"
        "contrastive_tensors(table, table)",
    )
    assert "ValueError" in child.stderr and "target is a sparse table of shape (200000, 30000)" in child.stderr, child.stderr[-2000:]


def test_a_small_sparse_count_matrix_is_accepted():
    import scipy.sparse

    table = scipy.sparse.random(20, 5, density=0.3, format="csr", random_state=0)
    assert contrastive_tensors(table, table)["target"].shape == (20, 5)


class AnnDataLike:
    def __init__(self, x, layers):
        self.X, self.layers, self.var_names = x, layers, [f"g{i}" for i in range(x.shape[1])]


@pytest.mark.parametrize(
    ("table", "layer", "message"),
    [
        ([[1, 2], [3]], None, "rectangular"),
        (np.full((2, 2), 1e300), None, "beyond float32's range"),
        (np.ones((2, 2), np.longdouble) * np.longdouble(1e300) ** 2, None, "NaN or infinite"),
        (torch.ones(2, 2, dtype=torch.complex64), None, "integer or floating-point"),
        (AnnDataLike(np.ones((2, 2)), None), "counts", "has no layer 'counts'"),
    ],
)
def test_count_tables_that_cannot_be_used_are_named(table, layer, message):
    with pytest.raises(ValueError, match=message):
        contrastive_tensors(table, np.ones((2, 2)), layer=layer)


@pytest.mark.parametrize(
    "table",
    [torch.ones(3, 2, dtype=torch.bfloat16), torch.ones(3, 2).to_sparse(), np.ones((3, 2), np.longdouble)],
)
def test_bfloat16_sparse_torch_and_long_double_count_tables_are_converted(table):
    assert contrastive_tensors(table, np.ones((3, 2)))["target"].dtype == torch.float32


@pytest.mark.parametrize(
    ("argument", "value"),
    [("shared_factors", -1), ("seed", -1), ("fold_change", "1"), ("fold_change", float("inf")), ("base_mean", 1e300)],
)
def test_synthetic_counts_name_bad_arguments(argument, value):
    with pytest.raises(ValueError, match=argument):
        SyntheticCounts(num_target=10, num_background=10, num_genes=60, **{argument: value})


# GrassyMNIST and CelebA ----------------------------------------------------------------------


def test_grassy_mnist_refuses_nan_photographs_nan_digits_and_infinite_amplitude():
    photograph = np.full((64, 64), 0.5)
    photograph[3, 3] = np.nan
    with pytest.raises(ValueError, match=r"photographs\[0\] must be .* \(no NaN\)"):
        grass_texture([photograph])
    digits = torch.rand(10, 1, 28, 28)
    digits[0, 0, 0, 0] = float("nan")
    with pytest.raises(ValueError, match=r"digits_source images .* \(no NaN\)"):
        GrassyMNIST(digits_source=(digits, torch.arange(10)))
    with pytest.raises(ValueError, match="amplitude must be a finite number"):
        GrassyMNIST(digits_source=(torch.rand(10, 1, 28, 28), torch.arange(10)), amplitude=float("inf"))


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"where": "Eyeglasses"}, "where must be a mapping"),
        ({"where": ["Eyeglasses"]}, "where must be a mapping"),
        ({"where": np.array([1])}, "where must be a mapping"),
        ({"where": {"Eyeglasses": np.array([1, 0])}}, "attribute values must be 0/1"),
        ({"attributes": 5}, "attributes must be an attribute name or a list"),
    ],
)
def test_celeba_names_attributes_and_filters_of_the_wrong_type(tmp_path, arguments, message):
    with pytest.raises(ValueError, match=message):
        CelebA(root=tmp_path, **arguments)


