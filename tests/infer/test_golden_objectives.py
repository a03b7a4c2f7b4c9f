"""Every objective keeps the loss and gradients it had before it was rebuilt from composable
terms: fixed parameters, batches, seeds and training steps (``golden_cases.py``), values in
``golden_objectives.pt``."""
from pathlib import Path

import pytest
import torch
from golden_cases import CASES, evaluate

GOLDEN = torch.load(Path(__file__).with_name("golden_objectives.pt"), weights_only=True)


@pytest.mark.parametrize("case", sorted(CASES))
def test_objective_keeps_its_golden_loss_and_gradients(case):
    model, objective, batch, step = CASES[case]()
    expected = GOLDEN[case]
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            parameter.copy_(expected["params"][name])
    result = evaluate(model, objective, batch, step)
    assert result["params"].keys() == expected["params"].keys()
    torch.testing.assert_close(result["loss"], expected["loss"], rtol=1e-5, atol=1e-4)
    for name, grad in expected["grads"].items():
        torch.testing.assert_close(result["grads"][name], grad, rtol=1e-4, atol=1e-5, msg=f"gradient of {name}")
