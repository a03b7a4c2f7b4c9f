"""The held-out protocol of the PartedVAE MNIST experiments (``experiments/parted/run.py``, the
campaign's ``mnist-labels`` scoring and the authors'-code controls): a seeded split of the
held-out images into validation and test, the accuracy of q(c|x) on either, and the paper's
baseline, PartedVAE's encoder and class head trained on the labelled images alone.

Imported as ``experiments.held_out``, with the repository's root on ``sys.path`` (the scripts
put it there).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from ppl_vae._devices import available_device
from ppl_vae.infer.parted import classification_loss
from ppl_vae.metrics import classification_accuracy
from ppl_vae.models.parted import PartedVAE
from ppl_vae.recipes.common import TrainingData
from ppl_vae.recipes.configs import PartedConfig
from ppl_vae.recipes.parted import build_model


def split_held_out(data: TrainingData, n: int, seed: int) -> tuple[TrainingData, TrainingData]:
    """(``n`` random images of ``data`` with their labels, the rest), seeded: validation and test."""
    order = torch.randperm(data.x.shape[0], generator=torch.Generator().manual_seed(seed))
    first, rest = order[:n], order[n:]
    return TrainingData(data.x[first], data.labels[first]), TrainingData(data.x[rest], data.labels[rest])


@torch.no_grad()
def held_out_accuracy(model: PartedVAE, data: TrainingData, chunk: int = 1000) -> float:
    """Accuracy of q(c|x)'s most probable class against ``data.labels``, the model in eval mode."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    probs = torch.cat([model.classify(data.x[i : i + chunk].float().to(device))[0].cpu()
                       for i in range(0, data.x.shape[0], chunk)])
    model.train(was_training)
    return classification_accuracy(probs, data.labels)


def train_classifier_alone(
    config: PartedConfig,
    image_shape: tuple[int, ...],
    num_classes: int,
    labelled: Mapping[str, torch.Tensor],
    validation: TrainingData,
    every_n_steps: int,
    patience: int,
    max_steps: int,
) -> tuple[PartedVAE, dict[str, Any]]:
    """The paper's baseline: PartedVAE's encoder and class head trained by the cross-entropy on
    the labelled images alone (Adam at ``config.train.lr``, batches of at most 64 drawn with
    replacement, on ``config.train.device``), evaluated on ``validation`` every
    ``every_n_steps`` steps and stopped once its accuracy has not improved for ``patience``
    evaluations (or at ``max_steps``).

    :param num_classes: the classes of the class variable c.
    :param labelled: ``{"x": (L, ...), "y": (L,)}``, the labelled images.
    :returns: the model with the weights of its best validation accuracy (on the CPU), and
        ``{"best_step", "steps", "validation_curve"}``.
    """
    seed, device = config.train.seed, available_device(config.train.device)
    torch.manual_seed(seed)
    model = build_model(config, image_shape, num_classes).to(device)
    x, y = labelled["x"].float().to(device), labelled["y"].to(device)
    optimiser = torch.optim.Adam(list(model.classifier_parameters()), lr=config.train.lr)
    generator = torch.Generator().manual_seed(seed)
    best: dict[str, Any] | None = None
    best_state: dict[str, torch.Tensor] = {}
    waited, curve = 0, []
    for step in range(1, max_steps + 1):
        model.train()
        batch = torch.randint(x.shape[0], (min(64, x.shape[0]),), generator=generator).to(device)
        optimiser.zero_grad()
        classification_loss(model, x[batch], y[batch]).backward()
        optimiser.step()
        if step % every_n_steps == 0:
            curve.append({"step": step, "accuracy": held_out_accuracy(model, validation)})
            if best is None or curve[-1]["accuracy"] > best["accuracy"]:
                best, waited = curve[-1], 0
                best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
            else:
                waited += 1
                if waited >= patience:
                    break
    if best_state:
        model.load_state_dict(best_state)
    best_step = best["step"] if best is not None else max_steps
    return model.cpu(), {"best_step": best_step, "steps": curve[-1]["step"] if curve else max_steps,
                         "validation_curve": curve}
