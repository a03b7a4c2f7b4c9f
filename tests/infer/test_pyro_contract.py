"""Pyro's contract: on the models a user writes, :class:`MeanFieldELBO` has the outcome of Pyro's
:class:`~pyro.infer.TraceMeanField_ELBO`: the same error type, the same warnings, or the same loss
and gradients (and floats where Pyro returns floats). The cases are written for this library from
the ideas of Pyro's ``tests/infer/test_valid_models.py`` and ``test_gradient.py``; the presets
(:class:`PartedELBO`, :class:`ContrastiveELBO`, :class:`DecompositionELBO`) with their terms off
are held to the same on their own models."""
from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field

import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro import poutine
from pyro.distributions.testing.rejection_gamma import ShapeAugmentedGamma
from pyro.infer import SVI, TraceMeanField_ELBO
from pyro.infer.autoguide import AutoDelta, AutoDiagonalNormal, AutoMultivariateNormal, AutoNormal
from pyro.optim import Adam

from ppl_vae.infer import Capacity, ContrastiveELBO, DecompositionELBO, LinearCapacity, MeanFieldELBO, PartedELBO

ERRORS = (NotImplementedError, KeyError, ValueError, RuntimeError, TypeError, AssertionError)


@dataclass
class Outcome:
    """What one call of ``differentiable_loss`` gave: an error type, or a loss and the gradients
    of every parameter in the store; the first line of each warning either way."""

    error: type | None = None
    loss: torch.Tensor | None = None
    grads: dict[str, torch.Tensor] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def outcome(elbo, model: Callable, guide: Callable, *args, seed: int = 0, **kwargs) -> Outcome:
    """``elbo.differentiable_loss(model, guide, *args, **kwargs)`` from an empty param store at ``seed``."""
    pyro.clear_param_store()
    pyro.set_rng_seed(seed)
    result = Outcome()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            loss = elbo.differentiable_loss(model, guide, *args, **kwargs)
        except ERRORS as error:
            result.error = type(error)
        else:
            store = pyro.get_param_store()
            names = sorted(store.keys())
            if torch.is_tensor(loss) and loss.requires_grad and names:
                grads = torch.autograd.grad(loss, [store[name].unconstrained() for name in names], allow_unused=True)
                result.grads = {name: grad for name, grad in zip(names, grads, strict=True) if grad is not None}
            result.loss = torch.as_tensor(loss).detach()
    result.warnings = sorted({str(warning.message).splitlines()[0] for warning in caught})
    return result


def assert_same_outcome(ours: Outcome, pyros: Outcome) -> None:
    assert ours.error == pyros.error
    assert ours.warnings == pyros.warnings
    if pyros.error is None:
        torch.testing.assert_close(ours.loss, pyros.loss)
        assert ours.grads.keys() == pyros.grads.keys()
        for name, grad in pyros.grads.items():
            torch.testing.assert_close(ours.grads[name], grad, msg=f"gradient of {name}")


# ---------------------------------------------------------------- the cases: (model, guide, args)

def _loc(name: str, shape=(), value: float = 0.3) -> torch.Tensor:
    return pyro.param(name, torch.full(shape, value))


def _scale(name: str, shape=()) -> torch.Tensor:
    return pyro.param(name, torch.full(shape, 0.7), constraint=dist.constraints.positive)


def _observed_only():
    def model():
        pyro.sample("x", dist.Normal(_loc("m", (2,)), 1.0).to_event(1), obs=torch.tensor([0.5, -1.0]))

    def guide():
        pass

    return model, guide


def _empty():
    def model():
        pass

    return model, model


def _latent(prior: Callable[[], dist.Distribution] = lambda: dist.Normal(0.0, 1.0)):
    def model():
        z = pyro.sample("z", prior())
        pyro.sample("x", dist.Normal(z, 1.0), obs=torch.tensor(0.4))

    def guide():
        pyro.sample("z", dist.Normal(_loc("q_loc"), _scale("q_scale")))

    return model, guide


DATA = torch.linspace(-1, 1, 6)


def _plate(subsample_size: int | None, scale: float = 1.0):
    """A latent per point in a (subsampled, scaled) vectorised plate."""

    def model():
        loc = _loc("prior_loc")
        with pyro.plate("data", 6, subsample_size=subsample_size) as index, poutine.scale(scale=scale):
            z = pyro.sample("z", dist.Normal(loc, 1.0).expand(index.shape))
            pyro.sample("x", dist.Normal(z, 0.5), obs=DATA[index])

    def guide():
        q_loc = _loc("q_loc", (6,))
        with pyro.plate("data", 6, subsample_size=subsample_size) as index, poutine.scale(scale=scale):
            pyro.sample("z", dist.Normal(q_loc[index], 0.6))

    return model, guide


def _sequential_plate(subsample_size: int | None):
    """A latent per point in a sequential (subsampled) plate."""

    def model():
        loc = _loc("prior_loc")
        for i in pyro.plate("data", 6, subsample_size=subsample_size):
            z = pyro.sample(f"z_{i}", dist.Normal(loc, 1.0))
            pyro.sample(f"x_{i}", dist.Normal(z, 0.5), obs=DATA[i])

    def guide():
        q_loc = _loc("q_loc", (6,))
        for i in pyro.plate("data", 6, subsample_size=subsample_size):
            pyro.sample(f"z_{i}", dist.Normal(q_loc[i], 0.6))

    return model, guide


def _nested_plates(inner_dim: int = -2):
    data = torch.randn(3, 4, generator=torch.Generator().manual_seed(1))

    def model():
        with pyro.plate("rows", 4, dim=-1):
            w = pyro.sample("w", dist.Normal(0.0, 1.0))
            with pyro.plate("columns", 3, dim=inner_dim):
                pyro.sample("x", dist.Normal(w, 1.0), obs=data)

    def guide():
        with pyro.plate("rows", 4, dim=-1):
            pyro.sample("w", dist.Normal(_loc("w_loc", (4,)), 0.8))

    return model, guide


def _masked(mask_in_model, mask_in_guide):
    """A latent under ``poutine.mask`` in the model, the guide (``None``: not masked there), or both."""

    def masked(mask):
        return nullcontext() if mask is None else poutine.mask(mask=mask)

    def model():
        with pyro.plate("data", 3):
            with masked(mask_in_model):
                z = pyro.sample("z", dist.Normal(0.0, 1.0).expand([3]))
            pyro.sample("x", dist.Normal(z, 1.0), obs=torch.tensor([0.1, 0.5, -0.3]))

    def guide():
        with pyro.plate("data", 3), masked(mask_in_guide):
            pyro.sample("z", dist.Normal(_loc("q_loc", (3,)), 0.5))

    return model, guide


def _obs_mask():
    def model():
        loc = _loc("prior_loc")
        with pyro.plate("data", 3):
            pyro.sample("x", dist.Normal(loc, 1.0).expand([3]), obs=torch.tensor([0.2, 0.0, 1.1]),
                        obs_mask=torch.tensor([True, False, True]))

    def guide():
        with pyro.plate("data", 3):
            pyro.sample("x_unobserved", dist.Normal(_loc("q_loc", (3,)), 0.5))

    return model, guide


def _factor(in_guide: bool):
    model, guide = _latent()

    def model_with_factor():
        model()
        pyro.factor("penalty", -(_loc("m") ** 2))

    def guide_with_factor():
        guide()
        pyro.factor("guide_penalty", torch.tensor(0.3), has_rsample=True)

    return model_with_factor, guide_with_factor if in_guide else guide


def _auxiliary():
    model, guide = _latent()

    def guide_with_auxiliary():
        guide()
        pyro.sample("u", dist.Normal(_loc("u_loc"), 1.0), infer={"is_auxiliary": True})

    return model, guide_with_auxiliary


def _guide_site(fn: Callable[[], dist.Distribution], model_fn: Callable[[], dist.Distribution], **infer):
    def model():
        pyro.sample("z", model_fn())

    def guide():
        pyro.sample("z", fn(), infer=infer)

    return model, guide


def _misordered():
    def model():
        a = pyro.sample("a", dist.Normal(0.0, 1.0))
        pyro.sample("b", dist.Normal(a, 1.0))

    def guide():
        pyro.sample("b", dist.Normal(_loc("b_loc"), 1.0))
        pyro.sample("a", dist.Normal(_loc("a_loc"), 1.0))

    return model, guide


def _missing_in_guide():
    def model():
        pyro.sample("a", dist.Normal(0.0, 1.0))
        pyro.sample("b", dist.Normal(0.0, 1.0))

    def guide():
        pyro.sample("a", dist.Normal(_loc("a_loc"), 1.0))

    return model, guide


def _extra_in_guide():
    def model():
        pyro.sample("a", dist.Normal(0.0, 1.0))

    def guide():
        pyro.sample("a", dist.Normal(_loc("a_loc"), 1.0))
        pyro.sample("b", dist.Normal(0.0, 1.0))

    return model, guide


def _clash():
    def model():
        pyro.sample("a", dist.Normal(0.0, 1.0))

    def guide():
        pyro.sample("a", dist.Normal(_loc("a_loc"), 1.0))
        pyro.sample("a", dist.Normal(0.0, 1.0))

    return model, guide


def _wrong_shape():
    def model():
        with pyro.plate("data", 3):
            pyro.sample("z", dist.Normal(0.0, 1.0).expand([2]))

    def guide():
        with pyro.plate("data", 3):
            pyro.sample("z", dist.Normal(_loc("q", (2,)), 1.0))

    return model, guide


def _plate_in_guide_only():
    def model():
        pyro.sample("z", dist.Normal(0.0, 1.0).expand([3]).to_event(1))

    def guide():
        with pyro.plate("data", 3):
            pyro.sample("z", dist.Normal(_loc("q", (3,)), 1.0))

    return model, guide


def _auto(guide_class):
    def model():
        loc = pyro.sample("loc", dist.Normal(0.0, 1.0))
        with pyro.plate("data", 4):
            z = pyro.sample("z", dist.Normal(loc, 1.0))
            pyro.sample("x", dist.StudentT(4.0, z, 1.0), obs=torch.tensor([0.1, 0.7, -0.4, 1.2]))

    return model, guide_class(model)


CASES: dict[str, Callable[[], tuple[Callable, Callable]]] = {
    "observed_only": _observed_only,
    "empty": _empty,
    "closed_form_kl": _latent,
    "monte_carlo_kl": lambda: _latent(lambda: dist.StudentT(3.0, 0.0, 1.0)),
    "plate": lambda: _plate(None),
    "subsampled_plate": lambda: _plate(4),
    "sequential_plate": lambda: _sequential_plate(None),
    "sequential_subsampled_plate": lambda: _sequential_plate(2),
    "scaled_plate": lambda: _plate(4, scale=2.5),
    "nested_plates": _nested_plates,
    "plate_dims_clash": lambda: _nested_plates(inner_dim=-1),
    "mask_tensor_in_model": lambda: _masked(torch.tensor([True, False, True]), None),
    "mask_tensor_in_guide": lambda: _masked(None, torch.tensor([False, True, True])),
    "mask_false_in_model": lambda: _masked(False, None),
    "mask_false_in_guide": lambda: _masked(None, False),
    "mask_false_in_both": lambda: _masked(False, False),
    "obs_mask": _obs_mask,
    "factor_in_model": lambda: _factor(in_guide=False),
    "factor_in_guide": lambda: _factor(in_guide=True),
    "auxiliary_guide_site": _auxiliary,
    "delta_guide": lambda: _guide_site(lambda: dist.Delta(_loc("d")), lambda: dist.Normal(0.0, 1.0)),
    "discrete_guide_site": lambda: _guide_site(
        lambda: dist.Bernoulli(_loc("p", (), 0.4)), lambda: dist.Bernoulli(0.5)
    ),
    "enumerated_guide_site": lambda: _guide_site(
        lambda: dist.Bernoulli(_loc("p", (), 0.4)), lambda: dist.Bernoulli(0.5), enumerate="parallel"
    ),
    "rejection_sampled_guide_site": lambda: _guide_site(
        lambda: ShapeAugmentedGamma(_scale("alpha") + 1.0, torch.tensor(1.0)), lambda: dist.Gamma(2.0, 1.0)
    ),
    "misordered_sites": _misordered,
    "site_missing_in_guide": _missing_in_guide,
    "extra_site_in_guide": _extra_in_guide,
    "site_clash_in_guide": _clash,
    "wrong_batch_shape": _wrong_shape,
    "plate_in_guide_only": _plate_in_guide_only,
    "auto_normal": lambda: _auto(AutoNormal),
    "auto_diagonal_normal": lambda: _auto(AutoDiagonalNormal),
    "auto_multivariate_normal": lambda: _auto(AutoMultivariateNormal),
    "auto_delta": lambda: _auto(AutoDelta),
}

ELBO_SETTINGS = {
    "one_particle": {},
    "particles": {"num_particles": 3},
    "vectorized_particles": {"num_particles": 3, "vectorize_particles": True},
}


@pytest.mark.parametrize("settings", sorted(ELBO_SETTINGS))
@pytest.mark.parametrize("validate", [True, False], ids=["validated", "unvalidated"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_mean_field_elbo_has_the_outcome_of_pyros_trace_mean_field_elbo(case, validate, settings):
    kwargs = ELBO_SETTINGS[settings]
    with pyro.validation_enabled(validate):
        pyros = outcome(TraceMeanField_ELBO(**kwargs), *CASES[case]())
        ours = outcome(MeanFieldELBO(**kwargs), *CASES[case]())
    assert_same_outcome(ours, pyros)


@pytest.mark.parametrize("case", ["closed_form_kl", "monte_carlo_kl", "subsampled_plate", "obs_mask", "auto_normal"])
def test_loss_loss_and_grads_and_svi_step_return_pyros_floats(case):
    values = {}
    for name, elbo in (("pyro", TraceMeanField_ELBO()), ("ours", MeanFieldELBO())):
        model, guide = CASES[case]()
        pyro.clear_param_store()
        pyro.set_rng_seed(0)
        step = SVI(model, guide, Adam({"lr": 1e-6}), elbo).step()
        pyro.set_rng_seed(1)
        loss = elbo.loss(model, guide)
        pyro.set_rng_seed(1)
        loss_and_grads = elbo.loss_and_grads(model, guide)
        values[name] = (step, loss, loss_and_grads)
    assert all(type(value) is float for value in values["ours"])
    assert values["ours"] == pytest.approx(values["pyro"])


def test_a_discrete_guide_site_gets_one_error_naming_it():
    model, guide = _guide_site(lambda: dist.Categorical(logits=_loc("logits", (3,))), lambda: dist.Categorical(logits=torch.zeros(3)))
    with pytest.raises(NotImplementedError, match="fully reparameterized.*'z' is a Categorical"):
        MeanFieldELBO().differentiable_loss(model, guide)


def test_a_rejection_sampled_guide_site_is_refused_as_pyro_refuses_it():
    """Pyro's check also wants a zero score-function term, which a Rejector's rsample has not."""
    model, guide = CASES["rejection_sampled_guide_site"]()
    with pytest.raises(NotImplementedError, match="fully reparameterized"):
        TraceMeanField_ELBO().differentiable_loss(model, guide)
    with pytest.raises(NotImplementedError, match="'z' is a ShapeAugmentedGamma"):
        MeanFieldELBO().differentiable_loss(model, guide)


def test_misordered_model_and_guide_sites_warn_as_pyro_does():
    model, guide = _misordered()
    with pytest.warns(UserWarning, match="Failed to verify mean field restriction on the guide"):
        MeanFieldELBO().differentiable_loss(model, guide)


def test_a_latent_masked_out_in_the_model_alone_keeps_its_kl_as_in_pyro():
    """Pyro scales and masks the closed-form KL with the guide site's mask."""
    model, guide = _masked(False, None)
    pyros, ours = outcome(TraceMeanField_ELBO(), model, guide), outcome(MeanFieldELBO(), model, guide)
    assert_same_outcome(ours, pyros)
    without_kl = outcome(MeanFieldELBO(), *_masked(False, False))
    assert ours.loss > without_kl.loss


@pytest.mark.parametrize("method", ["loss", "differentiable_loss"])
def test_a_nan_loss_warns_as_pyro_does(method):
    def model():
        pyro.sample("x", dist.Normal(_loc("m"), 1.0), obs=torch.tensor(float("nan")))

    def guide():
        pass

    for elbo in (TraceMeanField_ELBO(), MeanFieldELBO()):
        with pyro.validation_enabled(False), pytest.warns(UserWarning, match="Encountered NaN: loss"):
            getattr(elbo, method)(model, guide)


def test_svi_step_with_a_training_step_and_vectorized_particles_guesses_the_plate_nesting():
    """Pyro's guess of ``max_plate_nesting`` runs model and guide on the model's own arguments."""
    model, guide = _plate(4)
    elbo = MeanFieldELBO(num_particles=3, vectorize_particles=True,
                         terms=[Capacity("z", gamma=1.0, capacity=LinearCapacity(0.0, 1.0, 10))])
    loss = SVI(model, guide, Adam({"lr": 1e-3}), elbo).step(step=0)
    assert isinstance(loss, float) and math.isfinite(loss)
    assert elbo.max_plate_nesting == 2


# ---------------------------------------------------------------- the presets, terms off, on their own models

def _preset_cases() -> dict[str, Callable[[], tuple]]:
    """Each preset with its terms' weights 0, the model it is for, a batch, and the sites its
    terms replace (whose KLs Pyro drops when they are masked out in model and guide).

    Several particles only for PartedELBO: a term of weight 0 is still evaluated for the log,
    and the TC's permutation and the aggregate divergence's prior draws take random numbers
    between particles, so a second particle's draws are not Pyro's. The library's models
    refuse vectorised particles (they draw one sample per point)."""
    from ppl_vae.models import ContrastiveVAE, DecompositionVAE, PartedVAE
    from ppl_vae.nn import MLP, mlp_decoder

    image = (torch.rand(8, 1, 4, 4, generator=torch.Generator().manual_seed(2)) > 0.5).float()

    def parted(**settings):
        torch.manual_seed(0)
        model = PartedVAE.mlp((1, 4, 4), z_dim=2, num_classes=3, u_dims=2, hidden=(8,), data_size=40)
        objective = PartedELBO(gamma_z=0, gamma_u=0, gamma_c=0, gamma_h=0, gamma_bc=0, labelled_group=None, **settings)
        return model, objective, {"x": image, "step": 5}, objective.replaced_sites(model.model)

    def contrastive(**settings):
        torch.manual_seed(0)
        model = ContrastiveVAE.mlp((1, 4, 4), 2, 2, hidden=8, target_size=30, background_size=20)
        return model, ContrastiveELBO(gamma=0.0, **settings), {"target": image, "background": image[:6]}, ()

    def decomposition(**settings):
        torch.manual_seed(0)
        model = DecompositionVAE(MLP([16, 8], final_activation=torch.nn.ReLU()), mlp_decoder(3, [8], (1, 4, 4)), 3,
                                 data_size=50)
        return model, DecompositionELBO(alpha=0.0, **settings), {"x": image}, ()

    return {
        "parted": parted,
        "parted_particles": lambda: parted(num_particles=2),
        "contrastive": contrastive,
        "decomposition": decomposition,
    }


class _MaskedOut(poutine.messenger.Messenger):
    """Masks out the sample sites ``names``, as ``poutine.mask(mask=False)`` around each would."""

    def __init__(self, names) -> None:
        super().__init__()
        self.names = frozenset(names)

    def _process_message(self, msg) -> None:
        if msg["type"] == "sample" and msg["name"] in self.names:
            msg["mask"] = False


def _module_outcome(elbo, module, model, guide, batch, seed: int = 4) -> tuple[torch.Tensor, list]:
    pyro.set_rng_seed(seed)
    loss = elbo.differentiable_loss(model, guide, **batch)
    params = [p for p in module.parameters() if p.requires_grad]
    return loss.detach(), torch.autograd.grad(loss, params, allow_unused=True)


@pytest.mark.parametrize("validate", [True, False], ids=["validated", "unvalidated"])
@pytest.mark.parametrize("case", sorted(_preset_cases()))
def test_a_preset_with_its_terms_off_is_pyros_trace_mean_field_elbo(case, validate):
    """Terms of weight 0 add no site; the KLs the preset's terms replace are those Pyro drops
    when their sites are masked out in model and guide. Pyro's values are taken without
    validation, which would score every site, PartedVAE's replaced relaxed c too (outside
    OneHotCategorical's support; the preset never scores it)."""
    module, objective, batch, replaced = _preset_cases()[case]()
    reference = TraceMeanField_ELBO(num_particles=objective.num_particles,
                                    vectorize_particles=objective.vectorize_particles,
                                    max_plate_nesting=objective.max_plate_nesting)
    pyro_batch = {name: value for name, value in batch.items() if name != "step" or objective.model_takes_step}
    with pyro.validation_enabled(validate):
        ours = _module_outcome(objective, module, module.model, module.guide, batch)
    with pyro.validation_enabled(False):
        pyros = _module_outcome(reference, module, _MaskedOut(replaced)(module.model), _MaskedOut(replaced)(module.guide),
                                pyro_batch)
    torch.testing.assert_close(ours[0], pyros[0])
    for mine, theirs in zip(ours[1], pyros[1], strict=True):
        assert (mine is None) == (theirs is None)
        if theirs is not None:
            torch.testing.assert_close(mine, theirs)



@pytest.mark.parametrize("preset", ["parted", "contrastive"])
def test_a_preset_on_a_model_without_its_sites_fails_naming_what_is_missing(preset):
    """A term of weight 0 is still evaluated for the log, so it reads its sites."""
    model, guide = _plate(None)
    objective = {
        "parted": lambda: PartedELBO(gamma_z=0, gamma_u=0, gamma_c=0, gamma_h=0, gamma_bc=0, labelled_group=None),
        "contrastive": lambda: ContrastiveELBO(gamma=0.0),
    }[preset]()
    with pytest.raises(ValueError, match="class variables|no sample site 'target_s'"):
        objective.differentiable_loss(model, guide, step=0)
