"""Schedules: the capacity ramp C(t) and the generic linear schedule."""
import pytest

from ppl_vae.infer.schedules import LinearCapacity, LinearSchedule


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
        ((0.0, float("inf"), 10), "end"),
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
