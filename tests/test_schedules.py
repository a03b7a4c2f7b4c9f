"""Schedules: the capacity ramp C(t) and the generic linear schedule, and the training step
reaching them as an argument of the objective's call (no process-wide step)."""
import pyro
import pytest
import torch
from pyro.infer import SVI
from torch import nn

from ppl_vae import schedules
from ppl_vae.infer.mean_field import MeanFieldELBO
from ppl_vae.infer.parted import ClassCapacity, PartedELBO
from ppl_vae.infer.terms import Capacity
from ppl_vae.models import VAE
from ppl_vae.nn import MLP, mlp_decoder
from ppl_vae.schedules import LinearCapacity, LinearSchedule


def test_capacity_ramps_linearly_then_stays_at_c_max():
    capacity = LinearCapacity(c_min=2.0, c_max=30.0, num_steps=1000)
    assert capacity(0) == 2.0
    assert capacity(250) == pytest.approx(2.0 + 28.0 * 0.25)
    assert capacity(1000) == 30.0
    assert capacity(10**7) == 30.0


def test_capacity_matches_the_formula_min_of_ramp_and_c_max():
    c_min, c_max, steps = 0.0, 7.0, 100_000
    capacity = LinearCapacity(c_min, c_max, steps)
    for t in (0, 1, 99_999, 100_000, 100_001, 3 * steps):
        assert capacity(t) == pytest.approx(min(c_min + (c_max - c_min) * t / steps, c_max))


def test_equal_bounds_give_a_constant_capacity():
    capacity = LinearCapacity(5.0, 5.0, 10)
    assert {capacity(t) for t in (0, 5, 50)} == {5.0}


def test_attention_sharpness_schedule_grows_by_its_rate_up_to_its_end():
    sharpness = LinearSchedule.from_rate(1.0, 2e-4, 8.0)
    assert sharpness(0) == 1.0
    assert sharpness(5000) == pytest.approx(2.0)
    assert sharpness(35_000) == pytest.approx(8.0)
    assert sharpness(10**6) == 8.0


def test_a_schedule_can_fall():
    temperature = LinearSchedule(1.0, 0.5, 100)
    assert temperature(50) == pytest.approx(0.75)
    assert temperature(500) == 0.5


@pytest.mark.parametrize(
    "args, name",
    [
        ((-1.0, 5.0, 10), "c_min"),
        ((3.0, 2.0, 10), "c_max"),
        ((0.0, 5.0, 0), "num_steps"),
        ((0.0, float("inf"), 10), "c_max"),
    ],
)
def test_bad_capacity_arguments_raise_naming_the_argument(args, name):
    with pytest.raises(ValueError, match=name):
        LinearCapacity(*args)


def test_negative_step_and_wrong_rate_raise():
    with pytest.raises(ValueError, match="step"):
        LinearCapacity(0.0, 1.0, 10)(-1)
    with pytest.raises(ValueError, match="rate"):
        LinearSchedule.from_rate(1.0, -2e-4, 8.0)


def test_a_tensor_step_gives_a_tensor_value():
    capacity = LinearCapacity(0.0, 30.0, 300_000)
    value = capacity(torch.tensor(150_000))
    assert torch.is_tensor(value) and float(value) == pytest.approx(15.0)
    assert float(capacity(torch.tensor(10**7))) == 30.0
    with pytest.raises(ValueError, match="0-dim"):
        capacity(torch.tensor([1, 2]))


def small_vae() -> VAE:
    torch.manual_seed(0)
    return VAE(MLP([6, 8], final_activation=nn.ReLU()), mlp_decoder(2, [8], (6,)), 2)


def test_the_step_of_each_svi_call_reaches_the_capacity_and_nothing_is_kept_between_calls():
    assert not [name for name in vars(schedules) if "training_step" in name]  # no process-wide step to set
    x = (torch.rand(16, 6) > 0.5).float()
    model = small_vae()
    elbos = [MeanFieldELBO(terms=[Capacity("z", 1.0, LinearCapacity(0.0, 10.0, 100))]) for _ in range(2)]
    loops = [SVI(model.model, model.guide, pyro.optim.Adam({"lr": 1e-3}), elbo) for elbo in elbos]
    for step in (0, 50, 100, 7):
        loops[0].step(x, step=step)
        loops[1].step(x, step=2 * step)  # another loop at another step in the same process
        assert float(elbos[0].logged["capacity_z/target"]) == pytest.approx(min(step / 10, 10.0))
        assert float(elbos[1].logged["capacity_z/target"]) == pytest.approx(min(2 * step / 10, 10.0))


def test_a_scheduled_term_without_a_step_says_how_to_pass_one():
    model = small_vae()
    elbo = MeanFieldELBO(terms=[Capacity("z", 1.0, LinearCapacity(0.0, 10.0, 100))])
    with pytest.raises(ValueError, match=r"capacity_z.*step=t"):
        elbo.loss(model.model, model.guide, torch.zeros(4, 6))


def test_the_step_goes_to_the_model_and_guide_only_when_they_take_it():
    seen = []

    def model(x, step=None):
        seen.append(("model", step))
        loc = torch.zeros(x.shape[0], 1)
        with pyro.plate("data", x.shape[0]):
            pyro.sample("z", pyro.distributions.Normal(loc, 1.0).to_event(1))

    def guide(x, step=None):
        seen.append(("guide", step))
        with pyro.plate("data", x.shape[0]):
            pyro.sample("z", pyro.distributions.Normal(torch.zeros(x.shape[0], 1), 1.0).to_event(1))

    MeanFieldELBO().loss(model, guide, torch.zeros(3, 1), step=5)
    MeanFieldELBO(model_takes_step=True).loss(model, guide, torch.zeros(3, 1), step=6)
    assert seen == [("guide", None), ("model", None), ("guide", 6), ("model", 6)]


@pytest.mark.parametrize("build", [lambda bad: Capacity("z", 1.0, bad), lambda bad: ClassCapacity(1.0, bad),
                                   lambda bad: PartedELBO(z_capacity=bad)])
def test_every_capacity_argument_is_refused_by_one_rule_unless_a_linear_capacity(build):
    with pytest.raises(ValueError, match=r"capacity must be a LinearCapacity\(c_min, c_max, num_steps\), got "):
        build(LinearSchedule(-1.0, 5.0, 10))
