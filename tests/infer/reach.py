"""Which parameter groups of a model a loss term's gradient reaches (a test helper)."""
from collections.abc import Iterable

import torch
from torch import nn


def groups_reached(model: nn.Module, value: torch.Tensor, groups: Iterable[str]) -> set[str]:
    """The names of the submodules ``groups`` of ``model`` with a non-zero gradient of ``value``."""
    reached = set()
    for group in groups:
        params = list(getattr(model, group).parameters())
        grads = torch.autograd.grad(value, params, retain_graph=True, allow_unused=True)
        if any(g is not None and g.abs().sum() > 0 for g in grads):
            reached.add(group)
    return reached
