"""fit batches each bare tensor of its data as a group of its own, shuffled on its own: bare
tensors of one length are refused unless the model names them in its ``unpaired_groups``
(ContrastiveVAE's target and background), so rows that belong together (images and their
labels) are never shuffled apart."""
import pytest
import torch

from ppl_vae import fit
from ppl_vae.infer import ContrastiveELBO, MeanFieldELBO
from ppl_vae.models import VAE, ContrastiveVAE, PartedVAE
from ppl_vae.nn import MLP, mlp_decoder

SETTINGS = dict(steps=2, batch_size=16, progress_bar=False)


def test_images_and_their_labels_given_as_bare_tensors_are_refused_and_taken_as_one_group():
    parted = PartedVAE.mlp((8,), z_dim=2, num_classes=3, u_dims=2, hidden=(8,))
    x, y = torch.rand(64, 8).round(), torch.randint(0, 3, (64,))
    with pytest.raises(ValueError, match=r"^data \['x', 'y'\] are tensors of the same length \(64 rows\): fit batches "
                                         r"each bare tensor as a group of its own.*data=\{'data': \{'x': x, 'y': y\}\}"):
        fit(parted, MeanFieldELBO(), {"x": x, "y": y}, **SETTINGS)
    assert fit(parted, MeanFieldELBO(), {"data": {"x": x, "y": y}}, **SETTINGS).steps == 2


def test_target_and_background_of_one_length_train_the_contrastive_model_which_takes_them_unpaired():
    contrastive = ContrastiveVAE.mlp((8,), hidden=8)
    assert contrastive.unpaired_groups == ("target", "background")
    data = {"target": torch.rand(64, 8).round(), "background": torch.rand(64, 8).round()}
    assert fit(contrastive, ContrastiveELBO(gamma=0.0), data, **SETTINGS).steps == 2


def test_a_model_of_yours_names_the_groups_it_takes_unpaired():
    class TwoSets(VAE):
        unpaired_groups = ("x", "other")

        def model(self, x: torch.Tensor, other: torch.Tensor) -> None:
            super().model(x)

        def guide(self, x: torch.Tensor, other: torch.Tensor) -> None:
            super().guide(x)

    model = TwoSets(MLP([8, 16]), mlp_decoder(2, [16], (8,)), 2)
    data = {"x": torch.rand(64, 8).round(), "other": torch.rand(64, 8).round()}
    assert fit(model, MeanFieldELBO(), data, **SETTINGS).steps == 2
