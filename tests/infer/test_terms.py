"""Composable terms: every paper term is a named pyro.factor site of its preset's model, terms
compose onto other models (trained, logged by name, reaching the right networks), the replaced
sites are neither scored nor counted, and bad settings are refused naming the argument."""
import math

import pyro
import pytest
import torch
from pyro import poutine
from pyro.infer import SVI, Predictive
from reach import groups_reached

from ppl_vae.distributions import IsotropicGaussianPrior
from ppl_vae.infer import (
    AggregateDivergence,
    Capacity,
    ClassEntropy,
    ContrastiveELBO,
    DecompositionELBO,
    LinearCapacity,
    MeanFieldELBO,
    PartedELBO,
)
from ppl_vae.models import VAE, ContrastiveVAE, DecompositionVAE, PartedVAE
from ppl_vae.nn import MLP, mlp_decoder

EVENT = (12,)


def binary(n: int, seed: int = 1) -> torch.Tensor:
    return (torch.rand(n, *EVENT, generator=torch.Generator().manual_seed(seed)) > 0.5).float()


def parted() -> PartedVAE:
    torch.manual_seed(0)
    return PartedVAE.mlp(EVENT, z_dim=2, num_classes=3, u_dims=2, hidden=(16,))


def contrastive() -> ContrastiveVAE:
    torch.manual_seed(0)
    return ContrastiveVAE.mlp(EVENT, hidden=16)


def vae(cls=VAE) -> VAE:
    torch.manual_seed(0)
    return cls(MLP([EVENT[0], 16], final_activation=torch.nn.ReLU()), mlp_decoder(2, [16], EVENT), 2,
               prior=IsotropicGaussianPrior(2))


def factor_sites(trace) -> dict[str, dict]:
    return {name: site for name, site in trace.nodes.items()
            if site["type"] == "sample" and site["is_observed"] and site["name"] != "x" and "Unit" in type(site["fn"]).__name__}


PRESETS = {
    "parted": (parted, lambda: PartedELBO(), lambda: {"x": binary(8)},
               {"capacity_z", "capacity_u", "entropy", "aggregate_kl", "bhattacharyya"}),
    "contrastive": (contrastive, lambda: ContrastiveELBO(gamma=1.0), lambda: {"target": binary(8), "background": binary(6, 2)},
                    {"total_correlation"}),
    "decomposition_mmd": (lambda: vae(DecompositionVAE), lambda: DecompositionELBO(alpha=2.0), lambda: {"x": binary(8)},
                          {"aggregate_divergence"}),
    "decomposition_inclusive_kl": (lambda: vae(DecompositionVAE), lambda: DecompositionELBO(alpha=2.0, divergence="inclusive_kl"),
                                   lambda: {"x": binary(8)}, {"aggregate_divergence"}),
}


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_each_paper_term_is_a_named_factor_site_outside_the_plates(name):
    build_model, build_objective, batch, expected = PRESETS[name]
    model, objective = build_model(), build_objective()
    model_trace, _ = objective.traces(model.model, model.guide, **batch(), step=0)
    factors = factor_sites(model_trace)
    assert set(factors) == expected
    for site in factors.values():
        assert site["cond_indep_stack"] == ()
    assert expected <= set(objective.logged)


def test_parted_replaced_sites_are_masked_and_scored_zero_without_evaluating_their_distributions():
    """The relaxed c, whose density underflows at low temperature and lies outside the support of
    the model's one-hot prior, is never evaluated: under validation its distribution would refuse it."""
    model, objective = parted(), PartedELBO()
    with pyro.validation_enabled(True):
        model_trace, guide_trace = objective.traces(model.model, model.guide, binary(8), step=0)
    for trace in (model_trace, guide_trace):
        for site in ("z", "c0", "u0"):
            node = trace.nodes[site]
            assert node["mask"] is False and isinstance(node["fn"], pyro.distributions.MaskedDistribution)
            assert not node["log_prob"].any()
    assert isinstance(model_trace.nodes["c0"]["fn"].base_dist, pyro.distributions.OneHotCategorical)
    assert "mask" in model_trace.nodes["x"] and model_trace.nodes["x"]["mask"] is None


def test_the_loss_is_the_reconstruction_plus_each_weighted_factor():
    model, objective = parted(), PartedELBO(gamma_z=2.0, gamma_u=3.0, gamma_c=5.0, gamma_h=7.0, gamma_bc=11.0, delta=0.0)
    x = binary(16)
    loss = objective.loss(model.model, model.guide, x, step=0)
    logged = objective.logged
    weights = {"capacity_z": 2.0, "capacity_u": 3.0, "aggregate_kl": 5.0, "entropy": 7.0, "bhattacharyya": 11.0}
    expected = 16 * (float(logged["reconstruction"]) + sum(w * float(logged[name]) for name, w in weights.items()))
    assert loss == pytest.approx(expected, rel=1e-5)


def train(model, objective, batch: dict, steps: int = 5) -> list[float]:
    svi = SVI(model.model, model.guide, pyro.optim.Adam({"lr": 1e-2}), objective)
    losses = []
    for step in range(steps):
        losses.append(svi.step(**batch, step=step))
    return losses


def test_a_capacity_on_the_contrastive_shared_latent_trains_is_logged_and_reaches_only_its_encoder():
    model = contrastive()
    capacity = Capacity("target_z", gamma=10.0, capacity=LinearCapacity(0.0, 5.0, 100))
    objective = ContrastiveELBO(gamma=1.0, extra_terms=[capacity])
    batch = {"target": binary(16), "background": binary(12, 2)}
    before = {name: p.detach().clone() for name, p in model.shared_head.named_parameters()}
    losses = train(model, objective, batch)
    assert all(math.isfinite(v) for v in losses)
    assert {"capacity_target_z", "capacity_target_z/kl", "capacity_target_z/target", "total_correlation"} <= set(objective.logged)
    assert any(not torch.equal(p, before[name]) for name, p in model.shared_head.named_parameters())
    terms = objective.differentiable_terms(model.model, model.guide, **batch, step=0)
    groups = ("salient_encoder", "salient_head", "shared_encoder", "shared_head", "decoder")
    assert groups_reached(model, terms["capacity_target_z"], groups) == {"shared_encoder", "shared_head"}
    model_trace, _ = objective.traces(model.model, model.guide, **batch, step=0)
    assert model_trace.nodes["target_z"]["mask"] is False and model_trace.nodes["background_z"]["mask"] is None


def test_the_aggregate_mmd_on_parted_z_trains_is_logged_and_reaches_only_the_z_path():
    model = parted()
    objective = PartedELBO(extra_terms=[AggregateDivergence("z", alpha=50.0, divergence="mmd")])
    batch = {"x": binary(16)}
    losses = train(model, objective, batch)
    assert all(math.isfinite(v) for v in losses)
    assert "aggregate_divergence" in objective.logged
    terms = objective.differentiable_terms(model.model, model.guide, **batch, step=0)
    groups = ("encoder", "z_head", "class_heads", "attention", "u_heads", "class_priors", "decoder")
    assert groups_reached(model, terms["aggregate_divergence"], groups) == {"encoder", "z_head"}


def test_a_generic_objective_with_a_capacity_term_replaces_the_kl_of_its_site():
    model = vae()
    x = binary(16)
    plain, annealed = MeanFieldELBO(), MeanFieldELBO(terms=[Capacity("z", gamma=4.0, capacity=LinearCapacity(1.0, 1.0, 1))])
    pyro.set_rng_seed(3)
    plain_loss = plain.loss(model.model, model.guide, x, step=0)
    pyro.set_rng_seed(3)
    annealed_loss = annealed.loss(model.model, model.guide, x, step=0)
    assert "kl" in plain.logged and "kl" not in annealed.logged
    kl = float(plain.logged["kl"])
    assert float(annealed.logged["capacity_z/kl"]) == pytest.approx(kl, rel=1e-5)
    assert annealed_loss - plain_loss == pytest.approx(16 * (4.0 * abs(kl - 1.0) - kl), rel=1e-4)


def test_two_terms_that_each_replace_the_same_kl_are_refused_naming_the_site_and_both_terms():
    from ppl_vae.infer.baselines import KLDecomposition

    model = vae()
    capacity = Capacity("z", gamma=4.0, capacity=LinearCapacity(1.0, 1.0, 1))
    elbo = MeanFieldELBO(terms=[capacity, KLDecomposition("z", data_size=16)])
    with pytest.raises(ValueError, match=r"terms must be terms that replace different sites: each of these stands "
                       r"in for the KL of 'z'.*got \['capacity_z', 'kl_decomposition_z'\]"):
        elbo.loss(model.model, model.guide, binary(16), step=0)
    with pytest.raises(ValueError, match="the KL of 'z'"):
        PartedELBO(extra_terms=[KLDecomposition("z", data_size=16)]).loss(
            parted().model, parted().guide, binary(16), step=0)


def test_the_entropy_and_aggregate_class_terms_split_the_kl_of_c_between_them():
    model = parted()
    elbo = PartedELBO()
    assert {type(term).__name__ for term in elbo.terms} >= {"ClassEntropy", "AggregateClassKL"}
    assert math.isfinite(elbo.loss(model.model, model.guide, binary(16), step=0))


def test_a_term_with_weight_zero_is_logged_without_a_factor_site_or_gradient():
    model, objective = parted(), PartedELBO(gamma_h=0.0)
    model_trace, _ = objective.traces(model.model, model.guide, binary(8), step=0)
    assert "entropy" not in model_trace.nodes and not objective.logged["entropy"].requires_grad
    assert float(objective.logged["entropy"]) > 0


def test_class_terms_on_a_model_without_class_variables_say_what_they_need():
    model = vae()
    with pytest.raises(ValueError, match="class_variables"):
        MeanFieldELBO(terms=[ClassEntropy(1.0)]).loss(model.model, model.guide, binary(4))


@pytest.mark.parametrize(
    "build, match",
    [
        (lambda: MeanFieldELBO(terms=[Capacity("z", 1.0, LinearCapacity(0, 1, 1))] * 2), "unique"),
        (lambda: MeanFieldELBO(terms=["capacity"]), "Term"),
        (lambda: Capacity("z", -1.0, LinearCapacity(0, 1, 1)), "gamma"),
        (lambda: Capacity("z", 1.0, (0, 1, 1)), "capacity"),
        (lambda: AggregateDivergence("z", float("inf")), "alpha"),
        (lambda: AggregateDivergence("z", 1.0, divergence="kl"), "divergence"),
        (lambda: MeanFieldELBO(beta=True), "beta"),
    ],
)
def test_bad_term_settings_name_the_argument(build, match):
    with pytest.raises(ValueError, match=match):
        build()


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_predictive_draws_posterior_predictive_samples_without_a_custom_objective(name):
    build_model, _, batch, _ = PRESETS[name]
    model = build_model()
    data = batch()
    samples = Predictive(model.model, guide=model.guide, num_samples=3)(**data)
    observed = [site for site in samples if site.endswith("x")]
    assert observed
    for site in observed:
        key = "x" if site == "x" else site.split("_")[0]
        assert samples[site].shape == (3, *data[key].shape)
    unconditioned = poutine.trace(poutine.uncondition(model.model)).get_trace(**data)
    assert all(torch.isfinite(site["value"]).all() for site in unconditioned.nodes.values() if site["type"] == "sample")


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_the_traces_hold_pyros_own_nodes_and_keys_only(name):
    """The terms' values reach the loss without a node of their own in Pyro's traces or a
    private key in a site: both traces are what Pyro's estimator builds, with the terms' factors."""
    build_model, build_objective, batch, _ = PRESETS[name]
    model, objective = build_model(), build_objective()
    plain_trace = poutine.trace(model.model).get_trace(**batch())
    site_keys = set(next(site for site in plain_trace.nodes.values() if site["type"] == "sample"))
    for trace in objective.traces(model.model, model.guide, **batch(), step=0):
        assert {site["type"] for site in trace.nodes.values()} <= {"sample", "param", "args", "return"}
        for site in trace.nodes.values():
            if site["type"] == "sample":
                assert set(site) - {"log_prob", "unscaled_log_prob", "log_prob_sum", "score_parts"} <= site_keys


def test_with_terms_a_guide_whose_sites_come_in_another_order_gets_pyros_mean_field_warning():
    def model(x):
        with pyro.plate("data", len(x)):
            a = pyro.sample("a", pyro.distributions.Normal(0.0, 1.0))
            b = pyro.sample("b", pyro.distributions.Normal(0.0, 1.0))
            pyro.sample("x", pyro.distributions.Normal(a + b, 1.0), obs=x)

    def guide(x):
        with pyro.plate("data", len(x)):
            pyro.sample("b", pyro.distributions.Normal(0.0, 1.0))
            pyro.sample("a", pyro.distributions.Normal(0.0, 1.0))

    elbo = MeanFieldELBO(terms=[Capacity("a", gamma=1.0, capacity=LinearCapacity(0.0, 1.0, 10))])
    with pytest.warns(UserWarning, match="Failed to verify mean field restriction on the guide"):
        elbo.differentiable_loss(model, guide, torch.zeros(4), step=0)
