"""The library's models refuse a bad batch at the entry of ``model`` and ``guide``, in one line
naming the argument, without Pyro's trace-shape table (which Pyro appends to a ValueError or
RuntimeError raised inside a trace), through plain SVI, Predictive and the library's check."""
import pytest
import torch
from pyro.infer import SVI, TraceMeanField_ELBO
from pyro.optim import Adam

from ppl_vae.checks import posterior_predictive_check
from ppl_vae.infer import ContrastiveELBO, PartedELBO
from ppl_vae.models import VAE, ContrastiveVAE, PartedVAE
from ppl_vae.models.inputs import all_finite
from ppl_vae.nn import MLP, ConvDecoder, ConvEncoder, mlp_decoder


def conv_vae() -> VAE:
    return VAE(ConvEncoder(28, 1, hidden_dim=16), ConvDecoder(2, 28, 1, hidden_dim=16), 2)


def svi_step_error(model, guide, objective, *args) -> str:
    svi = SVI(model, guide, Adam({"lr": 1e-3}), objective)
    with pytest.raises(ValueError) as refused:
        svi.step(*args)
    return str(refused.value)


def nan_images(n: int = 4) -> torch.Tensor:
    x = torch.rand(n, 1, 28, 28).round()
    x[0, 0, 3, 3] = float("nan")
    return x


def test_a_batch_of_the_wrong_shape_is_named_in_one_line_without_the_shape_table():
    vae = conv_vae()
    message = svi_step_error(vae.model, vae.guide, TraceMeanField_ELBO(), torch.rand(32, 28, 28))
    assert message == "x must have shape (batch, 1, 28, 28), got (32, 28, 28)"


def test_nan_in_the_data_through_plain_svi_names_x_in_one_line():
    vae = conv_vae()
    message = svi_step_error(vae.model, vae.guide, TraceMeanField_ELBO(), nan_images())
    assert message == "x must be finite, got 1 NaN or infinite value(s) among its 3136"


def test_nan_in_the_data_through_the_posterior_predictive_check_names_x_in_one_line():
    with pytest.raises(ValueError) as refused:
        posterior_predictive_check(conv_vae(), {"x": nan_images(8)}, num_samples=2)
    assert str(refused.value) == "x must be finite, got 1 NaN or infinite value(s) among its 6272"


@pytest.mark.parametrize(
    "values, finite",
    [
        ([0.0, 1.0, -2.5], True),
        ([3e38, 3e38, 3e38], True),  # finite values whose float32 sum overflows
        ([-3e38, -3e38], True),
        ([1.0, float("nan")], False),
        ([1.0, float("inf")], False),
        ([float("-inf"), 2.0], False),
        ([float("inf"), float("-inf")], False),  # the sum is NaN
    ],
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
def test_all_finite_answers_as_the_elementwise_check_also_where_the_sum_overflows(values, finite, dtype):
    if dtype == torch.float16:
        values = [max(min(v, 6e4), -6e4) if abs(v) < float("inf") else v for v in values]
    data = torch.tensor(values, dtype=dtype).reshape(-1, 1)
    assert bool(torch.isfinite(data).all()) is finite
    assert all_finite(data) is finite
    assert all_finite(data.clone().requires_grad_()) is finite  # data that requires gradients


def test_an_mlp_encoder_takes_points_of_any_shape_with_its_number_of_features():
    vae = VAE(MLP([8, 16], final_activation=torch.nn.ReLU()), mlp_decoder(2, [16], (8,)), 2, likelihood="gaussian",
              likelihood_scale=0.5)
    svi = SVI(vae.model, vae.guide, Adam({"lr": 1e-3}), TraceMeanField_ELBO())
    assert svi.step(torch.randn(4, 8)) > 0
    message = svi_step_error(vae.model, vae.guide, TraceMeanField_ELBO(), torch.randn(4, 9))
    assert message == "x must have shape (batch, *features) with 8 features per point, got (4, 9)"


@pytest.mark.parametrize(
    "build, named",
    [
        (lambda: VAE(MLP([8, 16], final_activation=torch.nn.ReLU()), mlp_decoder(2, [16], (8,)), 3,
                     likelihood="gaussian", likelihood_scale=0.5),
         "decoder must take latents of latent_dim=3 features, got a decoder of 2"),
        (lambda: VAE(ConvEncoder(28, 1, hidden_dim=16), ConvDecoder(4, 28, 1, hidden_dim=16), 2),
         "decoder must take latents of latent_dim=2 features, got a decoder of 4"),
        (lambda: PartedVAE(MLP([8, 16]), mlp_decoder(3, [16], (8,)), 2, 3, u_dims=2, likelihood="gaussian",
                           likelihood_scale=0.5),
         r"decoder must take latents of z_dim \+ sum\(u_dims\)=4 features, got a decoder of 3"),
        (lambda: ContrastiveVAE(MLP([8, 16]), MLP([8, 16]), mlp_decoder(5, [16], (8,)), 2, 2),
         r"decoder must take latents of salient_dim \+ shared_dim=4 features, got a decoder of 5"),
    ],
)
def test_a_decoder_whose_width_is_not_the_latent_size_is_refused_when_the_model_is_built(build, named):
    with pytest.raises(ValueError, match=f"^{named}$"):
        build()


def test_parted_vae_names_a_bad_batch_or_labels_in_one_line():
    model = PartedVAE.mlp((1, 28, 28), z_dim=2, num_classes=3, u_dims=2, hidden=(16,))
    objective = PartedELBO(labelled_group=None)
    assert svi_step_error(model.model, model.guide, objective, nan_images()) == (
        "x must be finite, got 1 NaN or infinite value(s) among its 3136"
    )
    labels = torch.tensor([0, 1, 2, 5])
    message = svi_step_error(model.model, model.guide, objective, torch.rand(4, 1, 28, 28).round(), labels)
    assert message.startswith("y[:, 0] must hold class indices in [0, 3)") and "\n" not in message


def test_contrastive_vae_names_nan_in_the_background_in_one_line():
    model = ContrastiveVAE.mlp((8,), salient_dim=2, shared_dim=2, hidden=16, likelihood="gaussian",
                               likelihood_scale=0.5)
    background = torch.randn(4, 8)
    background[1, 1] = float("inf")
    message = svi_step_error(model.model, model.guide, ContrastiveELBO(), torch.randn(4, 8), background)
    assert message == "background contains NaN or infinite values"


def test_contrastive_embeddings_are_plain_tensors_for_numpy_and_scikit_learn():
    model = ContrastiveVAE.mlp((8,), salient_dim=2, shared_dim=2, hidden=16, likelihood="gaussian",
                               likelihood_scale=0.5)
    x = torch.randn(5, 8)
    for embedding in (model.salient_embedding(x), model.shared_embedding(x), model.encode(x)):
        assert not embedding.requires_grad
        assert embedding.numpy().shape[0] == 5


def test_a_float64_batch_for_a_float32_model_is_named_in_one_line_with_the_conversion():
    vae = VAE(MLP([8, 16]), mlp_decoder(2, [16], (8,)), 2)
    message = svi_step_error(vae.model, vae.guide, TraceMeanField_ELBO(), torch.rand(4, 8, dtype=torch.float64).round())
    assert message == ("x must have the dtype of the model's parameters, torch.float32 (convert with "
                       "x.to(torch.float32); numpy's arrays come as float64), got dtype torch.float64")
    parted = PartedVAE.mlp((8,), z_dim=2, num_classes=3, u_dims=2, hidden=(8,))
    with pytest.raises(ValueError, match=r"^x must have the dtype of the model's parameters, torch.float32 .* "
                                         r"got dtype torch.int64$"):
        posterior_predictive_check(parted, {"x": torch.ones(4, 8, dtype=torch.int64)}, num_samples=2)
    contrastive = ContrastiveVAE.mlp((8,), hidden=8)
    message = svi_step_error(contrastive.model, contrastive.guide, ContrastiveELBO(gamma=0.0),
                             torch.rand(4, 8).round(), torch.rand(4, 8, dtype=torch.float64).round())
    assert message.startswith("background must have the dtype of the model's parameters, torch.float32")


def test_a_model_converted_to_float64_takes_float64_batches():
    vae = VAE(MLP([8, 16]), mlp_decoder(2, [16], (8,)), 2).double()
    svi = SVI(vae.model, vae.guide, Adam({"lr": 1e-3}), TraceMeanField_ELBO())
    assert svi.step(torch.rand(4, 8, dtype=torch.float64).round()) > 0
    message = svi_step_error(vae.model, vae.guide, TraceMeanField_ELBO(), torch.rand(4, 8).round())
    assert message.startswith("x must have the dtype of the model's parameters, torch.float64 (convert with "
                              "x.to(torch.float64)")
