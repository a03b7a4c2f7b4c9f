"""dSprites: factor grid, renderer geometry, storage back ends and input checks."""

import os

import numpy as np
import pytest
import torch

from ppl_vae.data import DSprites
from ppl_vae.data.dsprites import NUM_IMAGES, DSpritesRenderer, stratified_label_indices


@pytest.fixture(scope="module")
def dsprites():
    return DSprites()


@pytest.fixture
def generator():
    return torch.Generator().manual_seed(0)


def test_grid_has_the_original_factor_order_and_sizes(dsprites):
    assert dsprites.factor_names == ("color", "shape", "scale", "orientation", "posX", "posY")
    assert dsprites.factor_sizes == (1, 3, 6, 40, 32, 32)
    assert len(dsprites) == NUM_IMAGES == 737_280
    assert {name: len(v) for name, v in dsprites.factor_values.items()} == dict(
        zip(dsprites.factor_names, dsprites.factor_sizes, strict=False)
    )
    torch.testing.assert_close(dsprites.factor_values["scale"], torch.linspace(0.5, 1.0, 6, dtype=torch.float64))
    assert dsprites.factor_values["orientation"].max() < 2 * np.pi


def test_item_is_a_binary_float_image_and_its_factors(dsprites):
    x, factors = dsprites[NUM_IMAGES - 1]
    assert x.shape == (1, 64, 64) and x.dtype == torch.float32
    assert set(x.unique().tolist()) == {0.0, 1.0}
    assert factors.dtype == torch.int64
    assert factors.tolist() == [0, 2, 5, 39, 31, 31]
    assert dsprites[0][1].tolist() == [0] * 6
    with pytest.raises(IndexError):
        dsprites[NUM_IMAGES]


def test_index_of_is_row_major_like_latents_bases(dsprites, generator):
    sizes = np.array(dsprites.factor_sizes)
    latents_bases = np.concatenate((sizes[::-1].cumprod()[::-1][1:], np.array([1])))
    factors = dsprites.sample_factors(1000, generator)
    expected = torch.from_numpy(factors.numpy() @ latents_bases)
    assert torch.equal(dsprites.index_of(factors), expected)


def test_index_of_and_factors_of_round_trip(dsprites, generator):
    indices = torch.randint(NUM_IMAGES, (1000,), generator=generator)
    assert torch.equal(dsprites.index_of(dsprites.factors_of(indices)), indices)
    assert torch.equal(dsprites[int(indices[0])][1], dsprites.factors_of(indices[:1])[0])


def test_changing_only_pos_x_gives_a_shifted_copy(dsprites, generator):
    factors = dsprites.sample_factors(64, generator)
    factors[:, 4] = 0
    base = dsprites.images_from_factors(factors)
    for pos_x in (1, 7, 31):
        factors[:, 4] = pos_x
        assert torch.equal(dsprites.images_from_factors(factors), torch.roll(base, pos_x, dims=-1))


def test_changing_only_pos_y_gives_a_shifted_copy(dsprites, generator):
    factors = dsprites.sample_factors(64, generator)
    factors[:, 5] = 0
    base = dsprites.images_from_factors(factors)
    factors[:, 5] = 31
    assert torch.equal(dsprites.images_from_factors(factors), torch.roll(base, 31, dims=-2))


def test_no_sprite_is_clipped_by_the_patch_or_the_image(dsprites, generator):
    sprites = DSpritesRenderer().sprites
    border = np.concatenate([sprites[..., 0, :], sprites[..., -1, :], sprites[..., :, 0], sprites[..., :, -1]], -1)
    assert not border.any()
    assert sprites.sum(axis=(-1, -2)).min() > 0
    factors = dsprites.sample_factors(500, generator)
    pixels = dsprites.images_from_factors(factors).sum(dim=(1, 2, 3))
    expected = sprites.sum(axis=(-1, -2))[factors[:, 1], factors[:, 2], factors[:, 3]]
    assert torch.equal(pixels, torch.from_numpy(expected).to(torch.float32))


def test_larger_scale_gives_larger_sprites(dsprites):
    factors = torch.tensor([[0, shape, scale, 0, 16, 16] for shape in range(3) for scale in range(6)])
    areas = dsprites.images_from_factors(factors).sum(dim=(1, 2, 3)).reshape(3, 6)
    assert (areas.diff(dim=1) > 0).all()


def test_rendering_is_deterministic_across_instances(generator):
    factors = DSprites().sample_factors(256, generator)
    assert torch.equal(DSprites().images_from_factors(factors), DSprites().images_from_factors(factors))


def test_sample_factors_is_seeded_and_in_range(dsprites):
    first = dsprites.sample_factors(500, torch.Generator().manual_seed(3))
    second = dsprites.sample_factors(500, torch.Generator().manual_seed(3))
    assert first.shape == (500, 6) and first.dtype == torch.int64
    assert torch.equal(first, second)
    assert (first.max(dim=0).values < torch.tensor(dsprites.factor_sizes)).all()
    assert dsprites.sample_factors(0).shape == (0, 6)


def test_full_set_blocks_match_on_demand_rendering(dsprites):
    renderer = DSpritesRenderer()
    for expected_start, (start, block) in zip((0, 1024, 2048), renderer.iter_blocks(), strict=False):
        assert start == expected_start
        indices = torch.arange(start, start + block.shape[0])
        assert torch.equal(torch.from_numpy(block), renderer.render(dsprites.factors_of(indices)))


def test_tensors_for_indices_in_float_and_compact_dtypes(dsprites):
    indices = torch.tensor([5, 1000, 737_279])
    data = dsprites.tensors(indices)
    assert data["x"].shape == (3, 1, 64, 64) and data["x"].dtype == torch.float32
    assert torch.equal(data["factors"], dsprites.factors_of(indices))
    assert torch.equal(data["x"], dsprites.images_from_factors(data["factors"]))
    compact = dsprites.tensors(indices, dtype=torch.uint8)["x"]
    assert compact.dtype == torch.uint8 and torch.equal(compact.float(), data["x"])
    assert dsprites.tensors(indices, dtype=torch.bool)["x"].dtype == torch.bool


def test_cache_dir_writes_the_set_once_and_reads_it_back(tmp_path, generator):
    cached = DSprites(cache_dir=tmp_path)
    assert cached.source == "cache"
    assert os.listdir(tmp_path) == ["dsprites_render_v1_packed.npy"]
    reloaded = DSprites(cache_dir=tmp_path)
    factors = reloaded.sample_factors(300, generator)
    assert torch.equal(reloaded.images_from_factors(factors), DSprites().images_from_factors(factors))
    (tmp_path / "dsprites_render_v1_packed.npy").unlink()  # 377 MB; keep pytest's tmp folders small


def test_corrupt_cache_file_is_reported(tmp_path):
    np.save(tmp_path / "dsprites_render_v1_packed.npy", np.zeros((3, 3), dtype=np.uint8))
    with pytest.raises(ValueError, match="cache_dir"):
        DSprites(cache_dir=tmp_path)


def test_factors_out_of_range_name_the_factor(dsprites):
    with pytest.raises(ValueError, match=r"factors\[:, 4\] \(posX\)"):
        dsprites.images_from_factors(torch.tensor([[0, 0, 0, 0, 32, 0]]))
    with pytest.raises(ValueError, match=r"factors\[:, 1\] \(shape\)"):
        dsprites.index_of(torch.tensor([[0, -1, 0, 0, 0, 0]]))


def test_factors_of_wrong_shape_or_dtype_are_rejected(dsprites):
    with pytest.raises(ValueError, match=r"factors must have shape \(n, 6\)"):
        dsprites.images_from_factors(torch.zeros(2, 5, dtype=torch.int64))
    with pytest.raises(ValueError, match="integer class indices"):
        dsprites.index_of(torch.zeros(2, 6))


def test_negative_n_is_rejected(dsprites):
    with pytest.raises(ValueError, match="n must be an integer >= 0"):
        dsprites.sample_factors(-1)


def test_bad_tensors_arguments_are_rejected(dsprites):
    with pytest.raises(ValueError, match="dtype"):
        dsprites.tensors([0], dtype=torch.int32)
    with pytest.raises(IndexError, match="indices"):
        dsprites.tensors([NUM_IMAGES])


def test_missing_original_file_is_named(tmp_path):
    path = tmp_path / "dsprites_ndarray_co1sh3sc6or40x32y32_64x64.npz"
    with pytest.raises(FileNotFoundError, match="path: .*dsprites_ndarray"):
        DSprites(path=path)


def test_file_that_is_not_an_npz_is_rejected(tmp_path):
    path = tmp_path / "dsprites.npz"
    path.write_text("not an archive")
    with pytest.raises(ValueError, match="path"):
        DSprites(path=path)


def test_npz_without_the_original_keys_is_rejected(tmp_path):
    path = tmp_path / "dsprites.npz"
    np.savez(path, images=np.zeros((2, 64, 64), dtype=np.uint8))
    with pytest.raises(ValueError, match="imgs"):
        DSprites(path=path)


def test_npz_with_a_wrong_grid_is_rejected(tmp_path):
    path = tmp_path / "dsprites.npz"
    np.savez(path, imgs=np.zeros((2, 64, 64), dtype=np.uint8), latents_classes=np.zeros((2, 6), dtype=np.int64))
    with pytest.raises(ValueError, match="latents_classes"):
        DSprites(path=path)


def test_path_and_cache_dir_together_are_rejected(tmp_path):
    with pytest.raises(ValueError, match="path and cache_dir"):
        DSprites(path=tmp_path / "x.npz", cache_dir=tmp_path)


def test_label_fraction_is_taken_of_the_full_set_and_split_evenly_by_shape(dsprites):
    indices = stratified_label_indices(fraction=0.005, seed=0)

    assert indices.shape == (3686,) and indices.dtype == torch.int64
    assert torch.unique(indices).shape == (3686,)
    assert torch.equal(indices, torch.sort(indices).values)
    shapes = dsprites.factors_of(indices)[:, 1]
    assert torch.bincount(shapes).tolist() == [1229, 1229, 1228]


def test_label_count_gives_that_many_distinct_images(dsprites):
    indices = stratified_label_indices(count=100, seed=3)

    assert torch.unique(indices).shape == (100,)
    assert torch.bincount(dsprites.factors_of(indices)[:, 1]).tolist() == [34, 33, 33]


def test_labelled_images_are_spread_over_the_other_factors(dsprites):
    factors = dsprites.factors_of(stratified_label_indices(fraction=0.005, seed=0))

    for k in (2, 3, 4, 5):
        counts = torch.bincount(factors[:, k], minlength=dsprites.factor_sizes[k]).double()
        assert counts.min() > 0.5 * counts.mean(), dsprites.factor_names[k]


def test_label_indices_depend_on_the_seed_only():
    first = stratified_label_indices(count=500, seed=1)

    assert torch.equal(first, stratified_label_indices(count=500, seed=1))
    assert not torch.equal(first, stratified_label_indices(count=500, seed=2))


@pytest.mark.parametrize(
    ("arguments", "match"),
    [
        ({}, "exactly one of count and fraction"),
        ({"count": 10, "fraction": 0.1}, "exactly one of count and fraction"),
        ({"count": 0}, "count.*737280.*0"),
        ({"count": NUM_IMAGES + 1}, "count.*737281"),
        ({"count": True}, "count.*True"),
        ({"count": 2.5}, "count.*2.5"),
        ({"fraction": 0.0}, "fraction.*0.0"),
        ({"fraction": 1.5}, "fraction.*1.5"),
        ({"fraction": float("nan")}, "fraction.*nan"),
    ],
)
def test_bad_label_count_or_fraction_raises_value_error_naming_it(arguments, match):
    with pytest.raises(ValueError, match=match):
        stratified_label_indices(**arguments)
