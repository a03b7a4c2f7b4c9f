"""Networks: output shapes for every supported image size, bias-free maps 0 to 0, clear shape errors."""
import pytest
import torch

from ppl_vae.nn import MLP, ConvDecoder, ConvEncoder, GaussianHead, activation, mlp_decoder


@pytest.mark.parametrize("size", [28, 32, 64])
def test_conv_pair_round_trips_image_shapes(size):
    encoder, decoder = ConvEncoder(size, hidden_dim=32), ConvDecoder(5, size, hidden_dim=32)
    features = encoder(torch.rand(3, 1, size, size))
    assert features.shape == (3, 32) and encoder.out_features == 32
    assert decoder(torch.randn(3, 5)).shape == (3, 1, size, size)
    assert decoder(torch.randn(2, 3, 5)).shape == (2, 3, 1, size, size)


def test_bias_free_networks_map_zero_to_zero():
    assert torch.equal(ConvDecoder(4, 28, bias=False)(torch.zeros(2, 4)), torch.zeros(2, 1, 28, 28))
    assert torch.equal(ConvEncoder(28, bias=False)(torch.zeros(2, 1, 28, 28)), torch.zeros(2, 256))
    assert torch.equal(mlp_decoder(3, [16], (1, 28, 28), bias=False)(torch.zeros(2, 3)), torch.zeros(2, 1, 28, 28))
    loc, _ = GaussianHead(8, 2, bias=False)(torch.zeros(5, 8))
    assert torch.equal(loc, torch.zeros(5, 2))


def test_gaussian_head_scale_is_positive_for_extreme_features():
    loc, scale = GaussianHead(4, 3)(torch.tensor([[1e6, -1e6, 0.0, 1.0]]))
    assert torch.all(scale > 0) and torch.all(torch.isfinite(scale))


def test_mlp_flattens_images():
    assert MLP([784, 10])(torch.rand(2, 1, 28, 28)).shape == (2, 10)


def test_wrong_shapes_are_named():
    with pytest.raises(ValueError, match=r"x must have shape \(batch, 1, 64, 64\)"):
        ConvEncoder(64)(torch.rand(2, 1, 28, 28))
    with pytest.raises(ValueError, match="last dimension 5"):
        ConvDecoder(5, 28)(torch.rand(2, 4))
    with pytest.raises(ValueError, match="image_size must be 28, 32 or 64"):
        ConvEncoder(48)
    with pytest.raises(ValueError, match="sizes"):
        MLP([10])


@pytest.mark.parametrize("size, channels", [(64, 1), (28, 1), (32, 3)])
def test_channels_last_networks_compute_what_the_usual_layout_computes(size, channels):
    torch.manual_seed(0)
    usual = (ConvEncoder(size, channels, channels_last=False), ConvDecoder(5, size, channels, channels_last=False))
    fast = (ConvEncoder(size, channels), ConvDecoder(5, size, channels))
    for source, target in zip(usual, fast, strict=True):
        target.load_state_dict(source.state_dict())
    x = torch.rand(3, channels, size, size)
    (encoder, decoder), (fast_encoder, fast_decoder) = usual, fast
    out = decoder(encoder(x)[:, :5])
    fast_out = fast_decoder(fast_encoder(x)[:, :5])
    assert fast_out.shape == out.shape == x.shape
    torch.testing.assert_close(fast_out, out, rtol=1e-4, atol=1e-5)
    out.square().sum().backward()
    fast_out.square().sum().backward()
    torch.testing.assert_close(fast_encoder.conv[0].weight.grad, encoder.conv[0].weight.grad, rtol=1e-3, atol=1e-5)
    # weights keep the usual layout: Pyro's param store would otherwise train a contiguous copy
    assert all(p.is_contiguous() for p in (*fast_encoder.parameters(), *fast_decoder.parameters()))


@pytest.mark.parametrize("size", [28, 64])
def test_in_place_relus_give_the_values_and_gradients_of_out_of_place_ones(size):
    torch.manual_seed(0)
    fast = (ConvEncoder(size), ConvDecoder(5, size))
    plain = (ConvEncoder(size), ConvDecoder(5, size))
    for source, target in zip(fast, plain, strict=True):
        target.load_state_dict(source.state_dict())
        relus = [m for m in target.modules() if isinstance(m, torch.nn.ReLU)]
        assert relus and all(m.inplace for m in relus)
        for relu in relus:
            relu.inplace = False
    x = torch.rand(4, 1, size, size)
    outputs = []
    for encoder, decoder in (fast, plain):
        out = decoder(encoder(x)[:, :5])
        out.square().sum().backward()
        outputs.append(out)
    assert torch.equal(outputs[0], outputs[1])
    for fast_net, plain_net in zip(fast, plain, strict=True):
        for (name, a), b in zip(fast_net.named_parameters(), plain_net.parameters(), strict=True):
            assert torch.equal(a.grad, b.grad), name


@pytest.mark.parametrize("size", [28, 32, 64])
def test_leaky_activations_follow_the_last_convolution_and_the_linear_layer(size):
    encoder = ConvEncoder(size, hidden_dim=8, last_conv_activation="leaky_relu", hidden_activation="leaky_relu",
                          negative_slope=0.1)
    kinds = [type(m).__name__ for m in encoder.modules() if isinstance(m, (torch.nn.ReLU, torch.nn.LeakyReLU))]
    assert kinds == ["ReLU"] * (len(kinds) - 2) + ["LeakyReLU", "LeakyReLU"]
    linear = encoder.fc[1]
    with torch.no_grad():
        linear.weight.zero_()
        linear.bias.fill_(-2.0)
    torch.testing.assert_close(encoder(torch.rand(3, 1, size, size)), torch.full((3, 8), -0.2))
    relu_encoder = ConvEncoder(size, hidden_dim=8)
    assert not any(isinstance(m, torch.nn.LeakyReLU) for m in relu_encoder.modules())


def test_an_identity_hidden_activation_leaves_the_linear_layers_output_as_it_is():
    encoder = ConvEncoder(64, hidden_dim=8, hidden_activation="identity")
    with torch.no_grad():
        encoder.fc[1].weight.zero_()
        encoder.fc[1].bias.fill_(-2.0)
    torch.testing.assert_close(encoder(torch.rand(2, 1, 64, 64)), torch.full((2, 8), -2.0))
    assert isinstance(encoder.conv[-1], torch.nn.ReLU)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"hidden_activation": "gelu"}, r"activation must be one of \('relu', 'leaky_relu', 'identity'\), got 'gelu'"),
        ({"last_conv_activation": "gelu"}, r"activation must be one of .*got 'gelu'"),
        ({"hidden_activation": "leaky_relu", "negative_slope": -0.1}, "negative_slope must be a finite number >= 0, got -0.1"),
    ],
)
def test_bad_activation_settings_name_the_argument(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ConvEncoder(64, **kwargs)


def test_activations_by_name():
    assert isinstance(activation("relu"), torch.nn.ReLU)
    assert isinstance(activation("identity"), torch.nn.Identity)
    assert activation("leaky_relu", 0.1).negative_slope == 0.1
    with pytest.raises(ValueError, match="negative_slope must be a finite number >= 0, got nan"):
        activation("leaky_relu", float("nan"))


def test_glorot_init_redraws_linear_and_convolution_layers_and_torch_init_keeps_them():
    from ppl_vae.nn import initialise

    torch.manual_seed(0)
    encoder = ConvEncoder(28, hidden_dim=8)
    before = [p.detach().clone() for p in encoder.parameters()]
    assert all(torch.equal(p, q) for p, q in zip(initialise(encoder, "torch").parameters(), before, strict=True))
    initialise(encoder, "glorot")
    assert all(torch.equal(layer.bias, torch.zeros_like(layer.bias))
               for layer in encoder.modules() if isinstance(layer, (torch.nn.Conv2d, torch.nn.Linear)))
    with pytest.raises(ValueError, match=r"weight init scheme must be one of \('torch', 'glorot'\), got 'he'"):
        initialise(encoder, "he")
