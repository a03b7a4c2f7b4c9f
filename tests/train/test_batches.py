"""Device-resident minibatches: determinism, resumption, unpaired groups, sharding, storage dtypes."""
import pytest
import torch

from ppl_vae.train import BatchBlocks, TensorBatches, as_groups


def collect(batches, key="x", group="x"):
    return [b[group][key].clone() for b in batches]


def test_same_seed_gives_the_same_batches_and_seek_resumes_midway():
    groups = as_groups({"x": torch.arange(100.0).unsqueeze(1)})
    full = collect(TensorBatches(groups, 16, 20, seed=3))
    assert len(full) == 20
    assert all(torch.equal(a, b) for a, b in zip(full, collect(TensorBatches(groups, 16, 20, seed=3)), strict=False))
    resumed = TensorBatches(groups, 16, 20, seed=3)
    resumed.seek(7)
    assert all(torch.equal(a, b) for a, b in zip(full[7:], collect(resumed), strict=False))
    assert not torch.equal(full[0], collect(TensorBatches(groups, 16, 20, seed=4))[0])


def test_blocks_hold_consecutive_batches_and_follow_a_seek():
    groups = as_groups({"x": torch.arange(100.0).unsqueeze(1)})
    full = collect(TensorBatches(groups, 16, 10, seed=3))
    batches = TensorBatches(groups, 16, 10, seed=3)
    blocks = BatchBlocks(batches, 4)
    assert len(blocks) == 3
    assert [len(block) for block in blocks] == [4, 4, 2]
    batches.seek(4)
    resumed = [b["x"]["x"] for block in blocks for b in block]
    assert all(torch.equal(a, b) for a, b in zip(full[4:], resumed, strict=True))
    with pytest.raises(ValueError, match="size must be a positive integer"):
        BatchBlocks(batches, 0)


def test_each_pass_visits_every_row_once():
    groups = as_groups({"x": torch.arange(64.0).unsqueeze(1)})
    rows = torch.cat(collect(TensorBatches(groups, 16, 4)))
    assert sorted(rows.squeeze(1).tolist()) == list(range(64))


def test_unpaired_groups_are_batched_separately():
    groups = as_groups({"target": torch.zeros(50, 3), "background": torch.ones(7, 3), "labelled": {"x": torch.zeros(20, 3), "y": torch.arange(20)}})
    batch = next(iter(TensorBatches(groups, 16, 1, batch_sizes={"labelled": 4})))
    assert batch["target"]["target"].shape == (16, 3)
    assert batch["background"]["background"].shape == (7, 3)
    assert batch["labelled"]["x"].shape == (4, 3) and batch["labelled"]["y"].shape == (4,)


def test_ranks_take_disjoint_slices_of_one_permutation():
    groups = as_groups({"x": torch.arange(64.0).unsqueeze(1)})
    seen = []
    for rank in range(2):
        batches = TensorBatches(groups, 8, 4, seed=1)
        batches.shard(rank, 2)
        seen.append(torch.cat(collect(batches)).squeeze(1))
    assert set(seen[0].tolist()).isdisjoint(seen[1].tolist())
    assert len(set(seen[0].tolist()) | set(seen[1].tolist())) == 64


def test_compact_storage_is_returned_as_float():
    groups = as_groups({"bits": torch.tensor([[True, False]] * 4), "bytes": torch.full((4, 2), 255, dtype=torch.uint8)})
    batch = next(iter(TensorBatches(groups, 4, 1)))
    assert batch["bits"]["bits"].dtype == torch.float32 and batch["bits"]["bits"].sum() == 4
    assert torch.all(batch["bytes"]["bytes"] == 1.0)


def test_bad_data_names_the_problem():
    with pytest.raises(ValueError, match="non-empty mapping"):
        as_groups({})
    with pytest.raises(ValueError, match="differ in length"):
        as_groups({"labelled": {"x": torch.zeros(5, 2), "y": torch.zeros(4)}})
    with pytest.raises(ValueError, match="must be a torch.Tensor or a mapping"):
        as_groups({"x": [1, 2, 3]})
    with pytest.raises(ValueError, match="NaN or inf"):
        as_groups({"x": torch.tensor([[1.0], [float("inf")]])})
    with pytest.raises(ValueError, match="batch_size"):
        TensorBatches(as_groups({"x": torch.zeros(4, 1)}), 0, 1)
    with pytest.raises(ValueError, match="unknown data groups"):
        TensorBatches(as_groups({"x": torch.zeros(4, 1)}), 2, 1, batch_sizes={"y": 2})
