r"""PartedVAE: class-related and class-independent factors (Hajimiri, Lotfi & Soleymani
Baghshah 2021).

Generative model, for V categorical variables (variable i takes L_i values) and a batch
of B points::

    z_n ~ p(z)                                  class-independent, default N(0, I)
    for i = 1..V:
        c_{n,i} ~ Categorical(p(c_i))           one-hot, p(c_i) fixed (uniform by default)
        u_{n,i} | c_{n,i} = k ~ N(mu_{i,k}, diag sigma_{i,k}^2)   learned prior psi_{i,k}
    x_n ~ p(x | decoder([z_n, u_{n,1}, ..., u_{n,V}]))

c reaches x only through u. Guide::

    h_n = encoder(x_n)
    q(z_n | x_n)        = N(loc_z(h_n), diag scale_z(h_n)^2)
    q(c_{n,i} | x_n)    = RelaxedOneHotCategorical(temperature, logits_i(h_n))   (Gumbel-softmax)
    q(u_{n,i} | c, x_n) = N(loc_i(h_n * a_{n,i}), diag scale_i(h_n * a_{n,i})^2),
                          a_{n,i} = sigmoid(k (W_i c_{n,i} + b_i))             (attention gate)

Given labels ``y``, c is observed in the model and the guide uses the labels' one-hot
codes instead of sampling c.

Train with :class:`ppl_vae.infer.parted.PartedELBO`: the relaxed c has neither an analytic
KL to the model's categorical nor a log-density that is safe at low temperature (pyro
issue 3304), and the objective replaces the ELBO's c and u terms by the paper's (Eq. 6),
reading the table of class priors from :meth:`PartedVAE.class_variables`.
"""
from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any

import pyro
import pyro.distributions as dist
import torch
from pyro import poutine
from pyro.infer.util import is_validation_enabled
from pyro.nn import PyroModule, pyro_method
from torch import nn
from torch.nn import functional as F

from ppl_vae._constants import PARTED
from ppl_vae._validation import finite, positive_integer
from ppl_vae.distributions import ClassConditionalGaussianPrior
from ppl_vae.models.inputs import ModelInputError, check_batch, check_decoder_size, encoder_input_shape, network_dtype
from ppl_vae.models.likelihoods import check_likelihood, likelihood, likelihood_mean
from ppl_vae.models.vae import StandardNormalPrior, batch_size_of, data_scale, one_draw_per_point, unique_pyro_name
from ppl_vae.nn import MLP, ConvDecoder, ConvEncoder, GaussianHead, full_precision, mlp_decoder
from ppl_vae.nn.attention import AttentionGate
from ppl_vae.schedules import LinearSchedule
from ppl_vae.variables import ClassVariable


def _as_sizes(value: int | Sequence[int], name: str) -> tuple[int, ...]:
    sizes = (value,) if isinstance(value, int) else tuple(value)
    if not sizes or any(isinstance(s, bool) or not isinstance(s, int) or s < 1 for s in sizes):
        raise ValueError(f"{name} must be a positive integer or a non-empty list of them, got {value!r}")
    return sizes


def _u_sizes(num_classes: int | Sequence[int], u_dims: int | Sequence[int]) -> tuple[int, ...]:
    """The dimension of each u_i; one size is used for every variable."""
    num_variables = len(_as_sizes(num_classes, "num_classes"))
    sizes = _as_sizes(u_dims, "u_dims")
    if len(sizes) == 1:
        sizes = sizes * num_variables
    if len(sizes) != num_variables:
        raise ValueError(f"u_dims must give one size per categorical variable ({num_variables}), got {u_dims!r}")
    return sizes


def _default_trained_step(
    module: nn.Module, state_dict: dict[str, Any], prefix: str, *args: Any
) -> None:
    """Load-state-dict pre-hook: a state dict without ``trained_step`` (saved before the buffer
    was persistent) loads with -1, "never trained here", so its sharpness is the schedule's end value."""
    state_dict.setdefault(prefix + "trained_step", torch.tensor(-1, dtype=torch.long))


class PartedVAE(PyroModule):
    r"""PartedVAE as a Pyro model/guide pair (see :mod:`ppl_vae.models.parted` for the story).

    Sites: ``"z"``; ``"c{i}"`` and ``"u{i}"`` for each categorical variable i; ``"x"``.
    The model writes p(u_i | c_i) as ``class_priors[i](c_i)``, the Gaussian of the class that
    the one-hot c_i picks. :meth:`class_variables` names, for each i, the two sites and the
    module of its class priors, from which :class:`~ppl_vae.infer.PartedELBO` takes
    expectations over q(c_i | x) in closed form, as the authors' objective does.

    :param encoder: ``x (B, *event) -> h (B, F)`` with attribute ``out_features`` = F.
    :param decoder: ``[z, u] (B, z_dim + sum(u_dims)) -> decoded (B, *event)``.
    :param z_dim: dimension of z.
    :param num_classes: L_i for each categorical variable (an int for one variable).
    :param u_dims: dimension of each u_i (an int is used for every variable).
    :param class_probs: p(c_i) for each variable, each ``(L_i,)``; default uniform.
    :param prior: module whose ``forward()`` returns p(z) with ``event_shape (z_dim,)``;
        default N(0, I) (any prior of :mod:`ppl_vae.distributions` works).
    :param likelihood: ``"bernoulli"`` (dSprites, MNIST), ``"gaussian"`` or ``"laplace"``.
    :param likelihood_scale: fixed scale of a Gaussian or Laplace likelihood.
    :param temperature: Gumbel-softmax temperature of q(c | x), > 0 (authors: 0.67).
    :param sharpness: schedule of the attention sharpness k over the training step, which
        the model and guide take as their ``step`` argument (:class:`~ppl_vae.infer.PartedELBO`
        passes its own on); default ``LinearSchedule.from_rate(1, 2e-4, 8)`` (the authors');
        without a step (evaluation, :meth:`encode`) k is the schedule's end value.
    :param data_size: N; when set, per-point sites are scaled by N / B.
    :param class_prior_init: how the class priors' log-variance parameters start
        (:class:`~ppl_vae.distributions.ClassConditionalGaussianPrior`): ``"zeros"``, or
        ``"randn"`` as in the authors' code.

    Differences from the authors' code: their heads output log-variances; here
    :class:`~ppl_vae.nn.GaussianHead` gives ``softplus(.) + 1e-4`` scales (no overflow).

    One categorical variable with three values on 8 x 8 images, one step of Pyro's SVI with
    the paper's objective (the step drives its schedules):

    >>> import pyro, torch
    >>> from pyro.infer import SVI
    >>> from ppl_vae.infer import PartedELBO
    >>> model = PartedVAE.mlp((1, 8, 8), z_dim=2, num_classes=3, u_dims=1, hidden=(32,))
    >>> x = torch.rand(16, 1, 8, 8).round()
    >>> svi = SVI(model.model, model.guide, pyro.optim.Adam({"lr": 1e-3}), PartedELBO())
    >>> loss = svi.step(x, step=0)
    >>> [probs.shape for probs in model.classify(x)]  # q(c_i | x) of each variable
    [torch.Size([16, 3])]
    """

    def __init__(
        self,
        encoder: nn.Module,
        decoder: nn.Module,
        z_dim: int,
        num_classes: int | Sequence[int],
        u_dims: int | Sequence[int] = 1,
        class_probs: Sequence[Sequence[float] | torch.Tensor] | None = None,
        prior: nn.Module | None = None,
        likelihood: str = "bernoulli",
        likelihood_scale: float | None = None,
        temperature: float = PARTED.temperature,
        sharpness: LinearSchedule | None = None,
        data_size: int | None = None,
        class_prior_init: str = "zeros",
    ) -> None:
        super().__init__(name=unique_pyro_name(type(self).__name__))
        positive_integer("z_dim", z_dim)
        u_dims = _u_sizes(num_classes, u_dims)
        num_classes = _as_sizes(num_classes, "num_classes")
        finite("temperature", temperature, positive=True)
        if data_size is not None:
            positive_integer("data_size", data_size)
        check_likelihood(likelihood, likelihood_scale)
        prior = prior if prior is not None else StandardNormalPrior(z_dim)
        if getattr(prior, "dim", z_dim) != z_dim:
            raise ValueError(f"prior has dimension {prior.dim} but z_dim is {z_dim}")
        check_decoder_size(decoder, z_dim + sum(u_dims), "z_dim + sum(u_dims)")
        features = encoder.out_features
        self.encoder = encoder
        #: what one point of ``x`` must be (:func:`~ppl_vae.models.inputs.encoder_input_shape`).
        self.point_input = encoder_input_shape(encoder)
        self.decoder = decoder
        self.prior = prior
        self.z_head = GaussianHead(features, z_dim)
        self.class_heads = nn.ModuleList(nn.Linear(features, size) for size in num_classes)
        self.attention = nn.ModuleList(AttentionGate(size, features) for size in num_classes)
        self.u_heads = nn.ModuleList(GaussianHead(features, dim) for dim in u_dims)
        self.class_priors = nn.ModuleList(
            ClassConditionalGaussianPrior(size, dim, class_prior_init)
            for size, dim in zip(num_classes, u_dims, strict=True)
        )
        for i, probs in enumerate(self._class_probs(class_probs, num_classes)):
            self.register_buffer(f"class_probs_{i}", probs)
        self.z_dim = z_dim
        self.num_classes = num_classes
        self.u_dims = u_dims
        self.likelihood = likelihood
        self.likelihood_scale = likelihood_scale
        self.temperature = float(temperature)
        self.sharpness = sharpness if sharpness is not None else LinearSchedule.from_rate(1.0, 2e-4, 8.0)
        # The last step the guide was trained at (-1: never), so that evaluation gates at
        # k(trained step) rather than the schedule's end value; saved with the weights, so a
        # loaded run evaluates as it was trained. A state dict saved before it existed loads
        # with -1 (the end value) through the pre-hook.
        self.register_buffer("trained_step", torch.tensor(-1, dtype=torch.long))
        self.register_load_state_dict_pre_hook(_default_trained_step)
        self.data_size = data_size

    @classmethod
    def conv(
        cls,
        image_size: int = 64,
        z_dim: int = 5,
        num_classes: int | Sequence[int] = 3,
        u_dims: int | Sequence[int] = 1,
        channels: int = 1,
        hidden: int = 256,
        channels_last: bool = True,
        top_activation: str = "relu",
        negative_slope: float = 0.01,
        **kwargs,
    ) -> PartedVAE:
        """The authors' convolutional pair: :class:`~ppl_vae.nn.ConvEncoder` to
        ``hidden`` features and the mirrored :class:`~ppl_vae.nn.ConvDecoder` from ``[z, u]``.
        Defaults are the authors' dSprites sizes (z 5, c [3], u 1).

        :param image_size: side of the square images, in pixels (64 for dSprites).
        :param z_dim: dimension of z.
        :param num_classes: L_i for each categorical variable (an int for one variable).
        :param u_dims: dimension of each u_i (an int is used for every variable).
        :param channels: number of image channels.
        :param hidden: width of the encoder's features h (and of the decoder's first layer).
        :param channels_last: the networks' memory format (see :mod:`ppl_vae.nn.conv`).
        :param top_activation: the encoder's activation after its last convolution and its
            linear layer; the authors': ``"leaky_relu"`` with ``negative_slope=0.1``.
        :param negative_slope: the slope of ``"leaky_relu"`` for negative inputs.
        :param kwargs: passed to the constructor (``likelihood``, ``temperature``, ...).
        """
        num_u = sum(_u_sizes(num_classes, u_dims))
        encoder = ConvEncoder(
            image_size, channels, hidden_dim=hidden, channels_last=channels_last,
            last_conv_activation=top_activation, hidden_activation=top_activation, negative_slope=negative_slope,
        )
        decoder = ConvDecoder(z_dim + num_u, image_size, channels, hidden_dim=hidden, channels_last=channels_last)
        return cls(encoder, decoder, z_dim, num_classes, u_dims, **kwargs)

    @classmethod
    def mlp(
        cls,
        event_shape: Sequence[int],
        z_dim: int = 6,
        num_classes: int | Sequence[int] = 10,
        u_dims: int | Sequence[int] = 10,
        hidden: Sequence[int] = (512, 256),
        **kwargs,
    ) -> PartedVAE:
        """Fully connected networks: encoder ``prod(event) -> hidden[0] -> ... -> hidden[-1]``
        (ReLU), decoder ``[z, u] -> hidden[-1] -> ... -> hidden[0] -> prod(event)``. Defaults are
        the authors' MNIST networks (784-512-256, z 6, c [10], u 10).

        :param event_shape: shape of one observation, e.g. ``(1, 28, 28)``.
        :param z_dim: dimension of z.
        :param num_classes: L_i for each categorical variable (an int for one variable).
        :param u_dims: dimension of each u_i (an int is used for every variable).
        :param hidden: widths of the encoder's hidden layers (the decoder's in reverse order).
        :param kwargs: passed to the constructor.
        """
        event_shape = tuple(int(d) for d in event_shape)
        hidden = [int(h) for h in hidden]
        num_u = sum(_u_sizes(num_classes, u_dims))
        encoder = MLP([math.prod(event_shape), *hidden], final_activation=nn.ReLU())
        decoder = mlp_decoder(z_dim + num_u, hidden[::-1], event_shape)
        return cls(encoder, decoder, z_dim, num_classes, u_dims, **kwargs)

    @staticmethod
    def _class_probs(class_probs, num_classes: tuple[int, ...]) -> list[torch.Tensor]:
        if class_probs is None:
            return [torch.full((size,), 1.0 / size) for size in num_classes]
        if len(class_probs) != len(num_classes):
            raise ValueError(
                f"class_probs must give one vector per categorical variable ({len(num_classes)}), "
                f"got {len(class_probs)}"
            )
        tensors = []
        for i, (probs, size) in enumerate(zip(class_probs, num_classes, strict=True)):
            probs = torch.as_tensor(probs, dtype=torch.get_default_dtype())
            if probs.shape != (size,) or (probs < 0).any() or abs(float(probs.sum()) - 1) > 1e-5:
                raise ValueError(
                    f"class_probs[{i}] must be {size} non-negative numbers summing to 1, got {probs.tolist()}"
                )
            tensors.append(probs)
        return tensors

    @property
    def num_variables(self) -> int:
        """V, the number of categorical variables."""
        return len(self.num_classes)

    @property
    def latent_dim(self) -> int:
        """Width of the representation ``[z, u_1, ..., u_V]`` that :meth:`encode` returns."""
        return self.z_dim + sum(self.u_dims)

    def class_prior_probs(self, i: int) -> torch.Tensor:
        """p(c_i): ``(L_i,)``.

        :param i: the index of the categorical variable, in [0, V)."""
        return getattr(self, f"class_probs_{i}")

    def class_variables(self) -> tuple[ClassVariable, ...]:
        """For each categorical variable i: its site ``"c{i}"``, the site ``"u{i}"`` of its
        class-conditional latent, and the submodule ``"class_priors.{i}"`` whose call returns the
        L_i class priors (what :mod:`ppl_vae.infer.terms`' class terms read)."""
        return tuple(ClassVariable(f"c{i}", f"u{i}", f"class_priors.{i}") for i in range(self.num_variables))

    def sharpness_at(self, step: int | torch.Tensor | None) -> float | torch.Tensor:
        """k at training step ``step`` (an int >= 0 or a 0-dim tensor); for ``None`` (a trained
        model) k at the last step the guide was trained at in this process
        (the buffer ``trained_step``), or the schedule's end value when it has not been trained here.

        :param step: the training step, or ``None``."""
        if step is not None:
            return self.sharpness(step)
        trained = int(self.trained_step)
        return self.sharpness.end if trained < 0 else self.sharpness(trained)

    def check_labels(self, y: torch.Tensor, batch_size: int) -> torch.Tensor:
        """Labels as an int64 ``(B, V)`` tensor; ``y`` is ``(B,)`` for one variable or ``(B, V)``.

        The values are checked against [0, L_i) when ``y`` is on the CPU or Pyro's validation
        is on: on a GPU that check reads the labels back to the host, a pipeline stall on every
        step, so training there relies on the engine's one check of the whole labelled set
        before training (:meth:`~ppl_vae.infer.PartedELBO.auxiliary_steps`).

        :param y: integer class indices, ``(B,)`` (one variable) or ``(B, V)``.
        :param batch_size: B, the batch size ``y`` must match.
        :raises ModelInputError: (a ``ValueError``, one line under Pyro's trace) on a wrong shape, a non-integer dtype or a value outside [0, L_i).
        """
        if not isinstance(y, torch.Tensor) or y.is_floating_point() or y.is_complex() or y.dtype == torch.bool:
            raise ModelInputError(f"y must be an integer tensor of class indices, got {type(y).__name__} "
                             f"{getattr(y, 'dtype', '')}")
        if y.dim() == 1 and self.num_variables == 1:
            y = y.unsqueeze(-1)
        if y.shape != (batch_size, self.num_variables):
            expected = f"({batch_size},) or " if self.num_variables == 1 else ""
            raise ModelInputError(
                f"y must have shape {expected}({batch_size}, {self.num_variables}), got {tuple(y.shape)}"
            )
        if y.device.type != "cpu" and not is_validation_enabled():
            return y.long()
        for i, size in enumerate(self.num_classes):
            if y.numel() and (y[:, i].min() < 0 or y[:, i].max() >= size):
                raise ModelInputError(
                    f"y[:, {i}] must hold class indices in [0, {size}), got values in "
                    f"[{int(y[:, i].min())}, {int(y[:, i].max())}]"
                )
        return y.long()

    def _one_hot(self, y: torch.Tensor, i: int, dtype: torch.dtype) -> torch.Tensor:
        return F.one_hot(y[:, i], self.num_classes[i]).to(dtype)

    @pyro_method
    def model(
        self,
        x: torch.Tensor | None = None,
        y: torch.Tensor | None = None,
        batch_size: int | None = None,
        step: int | torch.Tensor | None = None,
    ) -> torch.Tensor:
        """p(x, c, u, z) for ``x (B, *event)``, ``y (B,)`` or ``(B, V)`` int (observes c); without
        ``x``, ``batch_size`` prior predictive draws. Returns the decoded batch ``(B, *event)``.
        ``step`` is the guide's (the model does not depend on it; the two take the same
        arguments).
        With Pyro::

            prior_draws = Predictive(parted.model, num_samples=S)(batch_size=B)  # "x" (S, B, *event), "c0"
            # posterior predictive of labelled data: z and u from the guide on (x, y); in the
            # model x is unobserved (x=None) and the classes stay observed (y=y)
            latents = Predictive(parted.guide, num_samples=S)(x, y)  # "z" (S, B, z_dim), "u0" (S, B, u_dim)
            replicates = Predictive(parted.model, posterior_samples=latents)(y=y, batch_size=B)["x"]

        ``Predictive(parted.model, guide=parted.guide, ...)(x, y)["x"]`` returns x itself (Pyro
        returns observed values), and ``parallel=True`` is refused: the networks take one batch
        of points at a time.

        :param x: ``(B, *event)`` observations, or ``None`` for draws from the model.
        :param y: ``(B,)`` or ``(B, V)`` int class labels, which observe c; ``None`` leaves c
            latent.
        :param batch_size: B when ``x`` is ``None``; when both are given they must agree.
        :param step: the training step (not read by the model)."""
        decoder = self.decoder  # a PyroModule registers a network's parameters on each access
        if x is not None:
            check_batch("x", x, self.point_input, network_dtype(decoder))
        batch = batch_size_of(x, batch_size)
        labels = None if y is None else self.check_labels(y, batch)
        with pyro.plate("data", batch), poutine.scale(scale=data_scale(batch, self.data_size)):
            latents = [one_draw_per_point(pyro.sample("z", self.prior().expand([batch])), "z")]
            for i, class_prior in enumerate(self.class_priors):
                c = pyro.sample(
                    f"c{i}",
                    dist.OneHotCategorical(probs=self.class_prior_probs(i)).expand([batch]),
                    obs=None if labels is None else self._one_hot(labels, i, torch.get_default_dtype()),
                )
                latents.append(pyro.sample(f"u{i}", class_prior(c)))
            decoded = decoder(torch.cat(latents, dim=-1))
            pyro.sample(
                "x",
                likelihood(self.likelihood, decoded, decoded.dim() - 1, self.likelihood_scale),
                obs=x,
            )
        return decoded

    @pyro_method
    def guide(self, x: torch.Tensor, y: torch.Tensor | None = None, step: int | torch.Tensor | None = None) -> torch.Tensor:
        """q(z, c, u | x) for ``x (B, *event)``; with labels ``y`` c is not sampled; the
        attention sharpness is k(``step``) (:meth:`sharpness_at`; the end value without a step).
        Returns the sampled ``[z, u] (B, latent_dim)``.

        :param x: ``(B, *event)`` observations.
        :param y: ``(B,)`` or ``(B, V)`` int class labels, or ``None`` (c is then sampled from
            its relaxed q(c | x)).
        :param step: the training step (an int >= 0 or a 0-dim tensor) that sets the attention
            sharpness; ``None`` for the schedule's end value."""
        encoder = self.encoder  # a PyroModule registers a network's parameters on each access
        batch = check_batch("x", x, self.point_input, network_dtype(encoder)).shape[0]
        labels = None if y is None else self.check_labels(y, batch)
        h = encoder(x)
        z_loc, z_scale = self.z_head(h)
        sharpness = self.sharpness_at(step)
        if step is not None and self.training:
            self.trained_step.fill_(step)
        with pyro.plate("data", batch), poutine.scale(scale=data_scale(batch, self.data_size)):
            latents = [pyro.sample("z", dist.Normal(z_loc, z_scale).to_event(1))]
            for i, (class_head, gate, u_head) in enumerate(zip(self.class_heads, self.attention, self.u_heads, strict=True)):
                if labels is None:
                    logits = full_precision(class_head(h))
                    c = pyro.sample(
                        f"c{i}", dist.RelaxedOneHotCategorical(logits.new_tensor(self.temperature), logits=logits)
                    )
                else:
                    c = self._one_hot(labels, i, h.dtype)
                u_loc, u_scale = u_head(h * gate(c, sharpness))
                latents.append(pyro.sample(f"u{i}", dist.Normal(u_loc, u_scale).to_event(1)))
        return torch.cat(latents, dim=-1)

    def class_logits(self, x: torch.Tensor) -> list[torch.Tensor]:
        """Logits of q(c_i | x) for each variable: ``[(B, L_i)]``; the encoder's c-path.

        :param x: ``(B, *event)`` observations."""
        h = self.encoder(x)
        return [full_precision(head(h)) for head in self.class_heads]

    def classify(self, x: torch.Tensor) -> list[torch.Tensor]:
        """Probabilities q(c_i | x) for each variable: ``[(B, L_i)]``.

        :param x: ``(B, *event)`` observations."""
        return [logits.softmax(-1) for logits in self.class_logits(x)]

    def classifier_parameters(self) -> Iterator[nn.Parameter]:
        """The parameters that produce q(c | x): the encoder trunk and the class heads
        (what the semi-supervised cross-entropy step updates, and nothing else)."""
        yield from self.encoder.parameters()
        yield from self.class_heads.parameters()

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """The representation ``[z, u_1, ..., u_V] (B, latent_dim)``: means of q(z | x) and of
        q(u_i | c_i, x) at the most probable class c_i and the sharpness of the step trained to
        (:meth:`sharpness_at` ``(None)``; the Factor score uses it).

        :param x: ``(B, *event)`` observations."""
        h = self.encoder(x)
        sharpness = self.sharpness_at(None)
        means = [self.z_head(h)[0]]
        for i, (class_head, gate, u_head) in enumerate(zip(self.class_heads, self.attention, self.u_heads, strict=True)):
            c = F.one_hot(class_head(h).argmax(-1), self.num_classes[i]).to(h.dtype)
            means.append(u_head(h * gate(c, sharpness))[0])
        return torch.cat(means, dim=-1)

    def split_latent(self, latent: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``[z, u] (B, latent_dim) -> (z (B, z_dim), u (B, sum(u_dims)))``.

        :param latent: ``(B, latent_dim)`` representations, as :meth:`encode` returns them."""
        if latent.shape[-1] != self.latent_dim:
            raise ValueError(f"latent must have {self.latent_dim} columns, got {tuple(latent.shape)}")
        return latent[..., : self.z_dim], latent[..., self.z_dim :]

    def decode(self, z: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        """The likelihood's mean ``(B, *event)`` for ``z (B, z_dim)`` and ``u (B, sum(u_dims))``
        (``u = [u_1, ..., u_V]``). For a traversal of ``[z, u]`` use
        ``lambda latent: model.decode(*model.split_latent(latent))``.

        :param z: ``(B, z_dim)`` values of z.
        :param u: ``(B, sum(u_dims))`` values of ``[u_1, ..., u_V]``."""
        if z.shape[-1] != self.z_dim or u.shape[-1] != sum(self.u_dims):
            raise ValueError(
                f"z and u must have {self.z_dim} and {sum(self.u_dims)} columns, "
                f"got {tuple(z.shape)} and {tuple(u.shape)}"
            )
        return likelihood_mean(self.likelihood, self.decoder(torch.cat([z, u], dim=-1)))

    def reconstruct(self, x: torch.Tensor) -> torch.Tensor:
        """Decode the representation of :meth:`encode`: ``x (B, *event) -> (B, *event)``.

        :param x: ``(B, *event)`` observations."""
        return self.decode(*self.split_latent(self.encode(x)))

    def sample(self, n: int, c: torch.Tensor | int | None = None, mean: bool = False) -> torch.Tensor:
        """n draws x ~ p(x | z, u) with z ~ p(z), c ~ p(c) (or the given classes),
        u_i ~ p(u_i | c_i): ``(n, *event)``; with ``mean=True`` the likelihood's means.

        :param n: the number of draws.
        :param c: ``None``; a class index (one variable); ``(V,)`` classes for every draw
            (V > 1); or ``(n,)`` (one variable) / ``(n, V)`` classes per draw.
        :param mean: return the likelihood's means instead of draws.
        """
        device = self.class_priors[0].loc.device
        if c is None:
            labels = torch.stack(
                [torch.multinomial(self.class_prior_probs(i), n, replacement=True) for i in range(self.num_variables)],
                dim=-1,
            )
        else:
            c = torch.as_tensor(c, device=device)
            if c.dim() == 0 or (c.dim() == 1 and (self.num_variables > 1 or c.shape[0] == 1)):
                c = c.reshape(1, -1).expand(n, -1)
            labels = self.check_labels(c, n)
        u = [prior(labels[:, i]).sample() for i, prior in enumerate(self.class_priors)]
        z = self.prior().sample((n,))
        if mean:
            return self.decode(z, torch.cat(u, dim=-1))
        decoded = self.decoder(torch.cat([z, *u], dim=-1))
        return likelihood(self.likelihood, decoded, decoded.dim() - 1, self.likelihood_scale).sample()
