"""Synthetic counts with salient subgroups, and the target/background table helper."""
import numpy as np
import pytest
import torch

from ppl_vae.data.counts import SyntheticCounts, contrastive_tensors
from ppl_vae.metrics import silhouette
from ppl_vae.models.baselines import ContrastivePCA


def small_counts(**kwargs) -> SyntheticCounts:
    return SyntheticCounts(**{"num_target": 600, "num_background": 500, "num_genes": 60, "salient_genes": 10, **kwargs})


def test_tensors_have_documented_keys_shapes_and_integer_counts():
    data = small_counts().tensors()
    assert data["target"].shape == (600, 60) and data["background"].shape == (500, 60)
    assert data["target_labels"].shape == (600,) and set(data["target_labels"].tolist()) == {0, 1, 2}
    assert torch.equal(data["target"], data["target"].round()) and data["target"].min() >= 0


def test_subgroup_genes_are_raised_in_their_subgroup_only():
    counts = small_counts(fold_change=float(np.log(4.0)))
    data = counts.tensors()
    target, labels, background = data["target"], data["target_labels"], data["background"]
    for k, genes in enumerate(counts.salient_gene_blocks):
        inside = target[labels == k][:, genes].mean()
        outside = target[labels != k][:, genes].mean()
        assert inside > 2 * outside
        assert background[:, genes].mean() < 1.5 * outside


def test_same_seed_same_data():
    assert torch.equal(small_counts(seed=3).tensors()["target"], small_counts(seed=3).tensors()["target"])


def test_subgroups_are_hidden_from_pca_but_found_by_contrastive_pca():
    data = SyntheticCounts(seed=0).tensors()
    target, background = torch.log1p(data["target"]), torch.log1p(data["background"])
    labels = data["target_labels"]
    pca = silhouette(ContrastivePCA(2, alpha=0.0).fit_transform(target, background), labels)
    cpca = silhouette(ContrastivePCA(2, alpha=5.0).fit_transform(target, background), labels)
    assert pca < 0.1 and cpca > 0.5, (pca, cpca)


def test_contrastive_tensors_accepts_numpy_tensors_and_sparse():
    scipy_sparse = pytest.importorskip("scipy.sparse")
    target = np.random.default_rng(0).poisson(2.0, (5, 4))
    out = contrastive_tensors(scipy_sparse.csr_matrix(target), torch.ones(3, 4), counts=True)
    assert out["target"].dtype == torch.float32 and torch.equal(out["target"], torch.as_tensor(target).float())
    assert out["background"].shape == (3, 4)


class FakeAnnData:
    def __init__(self, x, genes):
        self.X, self.var_names, self.layers = x, genes, {"counts": x}


def test_contrastive_tensors_reads_anndata_like_objects_and_checks_gene_names():
    a, b = FakeAnnData(np.ones((3, 2)), ["g1", "g2"]), FakeAnnData(np.ones((4, 2)), ["g1", "g2"])
    assert contrastive_tensors(a, b, layer="counts")["background"].shape == (4, 2)
    with pytest.raises(ValueError, match="var_names"):
        contrastive_tensors(a, FakeAnnData(np.ones((4, 2)), ["g2", "g1"]))


@pytest.mark.parametrize(
    "target, background, argument",
    [
        (np.ones((3, 4)), np.ones((3, 5)), "background"),
        (np.ones((3, 4)), np.ones((0, 4)), "background"),
        (np.array([["a", "b"]]), np.ones((3, 2)), "target"),
        (np.ones((3, 4), dtype=bool), np.ones((3, 4)), "target"),
        (np.ones((3, 4)), np.full((3, 4), np.nan), "background"),
    ],
)
def test_bad_tables_raise_value_error_naming_the_argument(target, background, argument):
    with pytest.raises(ValueError, match=argument):
        contrastive_tensors(target, background)


def test_non_counts_are_refused_when_counts_are_required():
    with pytest.raises(ValueError, match="target"):
        contrastive_tensors(np.full((2, 3), 0.5), np.ones((2, 3)), counts=True)


def test_contrastive_pca_refuses_mismatched_features():
    with pytest.raises(ValueError, match="background"):
        ContrastivePCA(2).fit(np.random.rand(10, 4), np.random.rand(10, 3))
