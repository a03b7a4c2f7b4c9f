"""PartedELBO: each term of Eq. 6 is active and reaches the right parameters, loss() and the
gradient path agree, the scaling convention, the classifier step, and bad input."""
import math

import pyro
import pytest
import torch
from pyro.infer import SVI
from reach import groups_reached as reach_groups

import ppl_vae
from ppl_vae.distributions import StudentTPrior
from ppl_vae.infer.parted import PartedELBO, classification_loss
from ppl_vae.models.parted import PartedVAE
from ppl_vae.schedules import LinearCapacity

EVENT = (12,)
GROUPS = ("encoder", "z_head", "class_heads", "attention", "u_heads", "class_priors", "decoder")


def small_model(num_classes=3, u_dims=2, **kwargs) -> PartedVAE:
    torch.manual_seed(0)
    return PartedVAE.mlp(EVENT, z_dim=2, num_classes=num_classes, u_dims=u_dims, hidden=(16,), **kwargs)


def binary_data(n=32) -> torch.Tensor:
    return (torch.rand(n, *EVENT, generator=torch.Generator().manual_seed(1)) > 0.5).float()


def elbo(**kwargs) -> PartedELBO:
    settings = dict(z_capacity=LinearCapacity(0, 10, 100), u_capacity=LinearCapacity(0, 10, 100))
    return PartedELBO(**{**settings, **kwargs})


def groups_reached(model: PartedVAE, value: torch.Tensor) -> set[str]:
    return reach_groups(model, value, GROUPS)


@pytest.mark.parametrize(
    "term, expected",
    [
        ("reconstruction", set(GROUPS) - {"class_priors"}),
        ("capacity_z/kl", {"encoder", "z_head"}),
        ("capacity_u/kl", {"encoder", "class_heads", "attention", "u_heads", "class_priors"}),
        ("entropy", {"encoder", "class_heads"}),
        ("aggregate_kl", {"encoder", "class_heads"}),
        ("bhattacharyya", {"class_priors"}),
    ],
)
def test_each_term_reaches_exactly_its_parameters(term, expected):
    model = small_model()
    with torch.no_grad():  # overlapping class priors, so that BC > delta
        for prior in model.class_priors:
            prior.loc.mul_(0.01)
    terms = elbo().differentiable_terms(model.model, model.guide, binary_data(), step=0)
    assert terms[term] > 0
    assert groups_reached(model, terms[term]) == expected


def test_distant_class_priors_leave_the_bhattacharyya_term_inactive():
    model = small_model()
    with torch.no_grad():
        model.class_priors[0].loc.copy_(torch.tensor([[0.0, 0.0], [20.0, 0.0], [0.0, 20.0]]))
    terms = elbo().differentiable_terms(model.model, model.guide, binary_data(), step=0)
    assert terms["bhattacharyya"].item() == 0.0
    assert groups_reached(model, terms["bhattacharyya"]) == set()


@torch.no_grad()
def test_entropy_and_aggregate_kl_are_the_closed_forms_of_the_logits():
    model = small_model()
    x = binary_data()
    terms = elbo().differentiable_terms(model.model, model.guide, x, step=0)
    (q,) = model.classify(x)
    entropy = -(q * q.log()).sum(-1).mean()
    q_hat = q.mean(0)
    aggregate = (q_hat * (q_hat.log() - math.log(1 / 3))).sum()
    assert terms["entropy"].item() == pytest.approx(float(entropy), rel=1e-5)
    assert terms["aggregate_kl"].item() == pytest.approx(float(aggregate), rel=1e-4)


@torch.no_grad()
def test_kl_u_weights_the_kl_to_every_class_prior_by_q_c():
    model = small_model()
    x = binary_data(8)
    pyro.set_rng_seed(3)
    terms = elbo().differentiable_terms(model.model, model.guide, x, step=0)
    pyro.set_rng_seed(3)
    trace = pyro.poutine.trace(model.guide).get_trace(x, step=0)
    q_u = trace.nodes["u0"]["fn"]
    (q_c,) = model.classify(x)
    table = model.class_priors[0]()
    expected = 0.0
    for k in range(3):
        prior_k = pyro.distributions.Normal(table.base_dist.loc[k], table.base_dist.scale[k]).to_event(1)
        expected = expected + q_c[:, k] * torch.distributions.kl_divergence(q_u, prior_k)
    assert terms["capacity_u/kl"].item() == pytest.approx(float(expected.mean()), rel=1e-5)


@torch.no_grad()
def test_labelled_batches_use_the_labels_class_and_drop_the_c_terms():
    model = small_model()
    x, y = binary_data(8), torch.tensor([0, 1, 2, 0, 1, 2, 0, 1])
    terms = elbo().differentiable_terms(model.model, model.guide, x, y, step=0)
    assert terms["entropy"].item() == 0.0 and terms["aggregate_kl"].item() == 0.0
    trace = pyro.poutine.trace(model.guide).get_trace(x, y, step=0)
    assert "c0" not in trace.nodes
    table = model.class_priors[0]()
    loc, scale = table.base_dist.loc[y], table.base_dist.scale[y]
    expected = torch.distributions.kl_divergence(
        trace.nodes["u0"]["fn"], pyro.distributions.Normal(loc, scale).to_event(1)
    ).mean()
    assert terms["capacity_u/kl"].item() == pytest.approx(float(expected), rel=1e-3)


def test_loss_is_the_weighted_sum_of_the_logged_terms_times_the_batch_size():
    model = small_model()
    objective = elbo(gamma_z=2.0, gamma_u=3.0, gamma_c=5.0, gamma_h=7.0, gamma_bc=11.0, delta=0.0)
    x = binary_data(16)
    loss = objective.loss(model.model, model.guide, x, step=40)
    t = objective.logged
    assert float(t["capacity_z/target"]) == pytest.approx(4.0) and float(t["capacity_u/target"]) == pytest.approx(4.0)
    assert float(t["capacity_z"]) == pytest.approx(float((t["capacity_z/kl"] - 4.0).abs()))
    per_point = (
        t["reconstruction"]
        + 2.0 * t["capacity_z"]
        + 3.0 * t["capacity_u"]
        + 5.0 * t["aggregate_kl"]
        + 7.0 * t["entropy"]
        + 11.0 * t["bhattacharyya"]
    )
    assert loss == pytest.approx(16 * float(per_point), rel=1e-5)


def test_loss_reports_the_objective_the_gradient_path_optimises():
    model = small_model()
    objective = elbo()
    x = binary_data()
    pyro.set_rng_seed(7)
    differentiable = objective.differentiable_loss(model.model, model.guide, x, step=0)
    pyro.set_rng_seed(7)
    assert objective.loss(model.model, model.guide, x, step=0) == pytest.approx(differentiable.item(), rel=1e-6)


def test_data_size_scales_the_whole_objective_to_the_data_set():
    x = binary_data(16)
    losses = []
    for data_size in (None, 160):
        model = small_model(data_size=data_size)
        pyro.set_rng_seed(5)
        losses.append(elbo().loss(model.model, model.guide, x, step=0))
    assert losses[1] == pytest.approx(10 * losses[0], rel=1e-5)


def test_a_student_t_prior_on_z_uses_the_monte_carlo_kl():
    model = small_model(prior=StudentTPrior(2, df=5.0))
    terms = elbo().differentiable_terms(model.model, model.guide, binary_data(), step=0)
    assert torch.isfinite(terms["capacity_z/kl"])
    assert groups_reached(model, terms["capacity_z/kl"]) == {"encoder", "z_head"}


def test_low_temperature_with_many_classes_stays_finite():
    model = small_model(num_classes=10, temperature=0.05)
    objective = elbo()
    loss = objective.differentiable_loss(model.model, model.guide, binary_data(), step=0)
    loss.backward()
    assert torch.isfinite(loss)
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_classifier_step_updates_only_the_encoders_c_path():
    model = small_model()
    (step,) = elbo().auxiliary_steps(model)
    assert step.name == "classifier" and step.data_group == "labelled" and step.when == "before"
    expected = {id(p) for p in [*model.encoder.parameters(), *model.class_heads.parameters()]}
    assert {id(p) for p in step.parameters} == expected
    x, y = binary_data(16), torch.randint(0, 3, (16,))
    assert groups_reached(model, step.loss(x=x, y=y)) == {"encoder", "class_heads"}
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    optimiser = torch.optim.Adam(step.parameters, lr=1e-2)
    losses = []
    for _ in range(30):
        optimiser.zero_grad()
        loss = step.loss(x=x, y=y)
        loss.backward()
        optimiser.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]
    changed = {name.split(".")[0] for name, p in model.named_parameters() if not torch.equal(p, before[name])}
    assert changed == {"encoder", "class_heads"}


def test_unsupervised_objective_declares_no_auxiliary_step():
    assert elbo(labelled_group=None).auxiliary_steps(small_model()) == []


def test_plain_svi_with_the_classifier_step_trains():
    model = small_model()
    objective = elbo(gamma_z=1.0, gamma_u=1.0, gamma_c=1.0, gamma_h=1.0, gamma_bc=1.0)
    (step,) = objective.auxiliary_steps(model)
    classifier = torch.optim.Adam(step.parameters, lr=1e-2)
    svi = SVI(model.model, model.guide, pyro.optim.Adam({"lr": 1e-2}), objective)
    x, y = binary_data(64), torch.randint(0, 3, (64,))
    losses = []
    for t in range(60):
        classifier.zero_grad()
        step.loss(x=x[:16], y=y[:16]).backward()
        classifier.step()
        losses.append(svi.step(x, step=t))
    assert all(math.isfinite(v) for v in losses)
    assert sum(losses[-10:]) < sum(losses[:10])


def test_the_engine_logs_every_term_and_the_classifier_loss():
    model = small_model()
    x, y = binary_data(64), torch.randint(0, 3, (64,))
    result = ppl_vae.fit(
        model, elbo(), {"x": x, "labelled": {"x": x[:16], "y": y[:16]}},
        steps=6, batch_size=16, log_every_n_steps=3, progress_bar=False,
    )
    record = result.history[-1]
    terms = {"reconstruction", "capacity_z", "capacity_z/kl", "capacity_z/target", "capacity_u", "capacity_u/kl",
             "capacity_u/target", "entropy", "aggregate_kl", "bhattacharyya"}
    assert {"classifier_loss", "elbo_loss", *terms} <= set(record)
    assert all(math.isfinite(v) for v in record.values())


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"gamma_z": -1.0}, "gamma_z"),
        ({"gamma_u": -0.1}, "gamma_u"),
        ({"gamma_c": float("nan")}, "gamma_c"),
        ({"gamma_h": -2}, "gamma_h"),
        ({"gamma_bc": -1}, "gamma_bc"),
        ({"delta": 1.5}, "delta"),
        ({"delta": -0.1}, "delta"),
        ({"classifier_lr": 0.0}, "classifier_lr"),
        ({"z_capacity": (0, 5, 10)}, "z_capacity"),
    ],
)
def test_bad_objective_settings_raise_naming_the_argument(kwargs, name):
    with pytest.raises(ValueError, match=name):
        PartedELBO(**kwargs)


@pytest.mark.parametrize(
    "y, match",
    [
        (torch.tensor([0, 1, 3, 0]), r"y\[:, 0\].*\[0, 3\)"),
        (torch.tensor([0, -1, 2, 0]), r"y\[:, 0\]"),
        (torch.tensor([[0, 1], [1, 2], [2, 0], [0, 0]]), "shape"),
        (torch.tensor([0.0, 1.0, 2.0, 0.0]), "integer"),
        (torch.tensor([0, 1, 2]), "shape"),
    ],
)
def test_bad_labels_in_the_classifier_step_raise(y, match):
    with pytest.raises(ValueError, match=match):
        classification_loss(small_model(), binary_data(4), y)


def test_engine_checks_the_whole_labelled_set_once_before_training():
    x = binary_data(32)
    bad = torch.zeros(16, dtype=torch.long)
    bad[11] = 7
    with pytest.raises(ValueError, match=r"y\[:, 0\] must hold class indices in \[0, 3\), got values in \[0, 7\]"):
        ppl_vae.fit(small_model(), elbo(), {"x": x, "labelled": {"x": x[:16], "y": bad}}, steps=2, batch_size=4,
                    progress_bar=False)
    with pytest.raises(ValueError, match="data group 'labelled' needs labels 'y'"):
        ppl_vae.fit(small_model(), elbo(), {"x": x, "labelled": {"x": x[:16]}}, steps=2, batch_size=4,
                    progress_bar=False)


def test_labels_on_a_device_are_not_read_back_per_batch_without_validation():
    """On a GPU the range check would stall every step; the engine checks the set once instead.
    A meta tensor stands for a device tensor: reading its values back raises."""
    model = small_model()
    y = torch.zeros(4, dtype=torch.long, device="meta")
    with pyro.validation_enabled(False):
        assert model.check_labels(y, 4).shape == (4, 1)
    with pyro.validation_enabled(True), pytest.raises(RuntimeError):
        model.check_labels(y, 4)
