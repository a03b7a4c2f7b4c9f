"""Every output of every objective stays what ``golden_exact.pt`` pins (``golden_exact.py``):
losses, gradients, logged values and step arguments of ``differentiable_loss``,
``training_loss``, ``loss`` and ``loss_and_grads``. Bit for bit where torch, its CPU kernels and
the processor are those of the recording (``numerics``); elsewhere the same float32 operations
round differently, and the outputs must agree to float32 rounding (2e-5 relative, 1e-6 of the
tensor's largest value absolute), far inside any change of a term or its scaling."""
from pathlib import Path

import pytest
import torch
from golden_exact import EXACT_CASES, numerics, outputs

RECORDED = torch.load(Path(__file__).with_name("golden_exact.pt"), weights_only=True)
GOLDEN = RECORDED["cases"]
EXACT = RECORDED["numerics"] == numerics()


def assert_identical(actual, expected, where: str) -> None:
    if isinstance(expected, dict):
        assert actual.keys() == expected.keys(), where
        for key in expected:
            assert_identical(actual[key], expected[key], f"{where}/{key}")
    elif torch.is_tensor(expected):
        assert actual.dtype == expected.dtype and actual.shape == expected.shape, where
        if EXACT:
            assert torch.equal(actual, expected), f"{where}: {actual} != {expected}"
        else:
            scale = float(expected.abs().max()) if expected.numel() else 0.0
            torch.testing.assert_close(actual, expected, rtol=2e-5, atol=1e-6 * scale, msg=lambda m: f"{where}: {m}")
    else:
        assert actual == expected, where


def test_every_case_is_recorded():
    assert sorted(GOLDEN) == sorted(EXACT_CASES)


@pytest.mark.parametrize("case", sorted(EXACT_CASES))
def test_objective_keeps_every_output(case):
    model, guide, objective, kwargs, params = EXACT_CASES[case]()
    expected = GOLDEN[case]
    assert params.keys() == expected["params"].keys()
    with torch.no_grad():
        for name, parameter in params.items():
            parameter.copy_(expected["params"][name])
    assert_identical(outputs(model, guide, objective, kwargs, params), expected, case)
