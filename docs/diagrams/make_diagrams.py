"""Draw the plate diagram of each model page's model with ``pyro.render_model`` into docs/diagrams/*.svg.

    python docs/diagrams/make_diagrams.py      # needs the graphviz package and its dot binary

Each model is traced once on a small batch of random data (the diagram shows the sites, their
distributions and plates, not values), with the distribution of every site written beside
its name. The SVG files are committed, so the documentation builds without Graphviz; rerun
this script when a model's sites or plates change.
"""
from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pyro
import torch

from ppl_vae.distributions import MixtureOfGaussiansPrior
from ppl_vae.models import ContrastiveVAE, DecompositionVAE, PartedVAE
from ppl_vae.nn import MLP, mlp_decoder

HERE = Path(__file__).resolve().parent


def decomposition() -> tuple[Callable, tuple]:
    prior = MixtureOfGaussiansPrior(means=[[-1.0, 0.0], [1.0, 0.0]], variances=0.1)
    model = DecompositionVAE(MLP([2, 8]), mlp_decoder(2, [8], (2,)), latent_dim=2, prior=prior,
                             likelihood="gaussian", likelihood_scale=0.1)
    return model.model, (torch.randn(3, 2),)


def parted() -> tuple[Callable, tuple]:
    model = PartedVAE.mlp((1, 4, 4), z_dim=2, num_classes=3, u_dims=1, hidden=(8,))
    return model.model, (torch.rand(3, 1, 4, 4).round(),)


def contrastive() -> tuple[Callable, tuple]:
    model = ContrastiveVAE.mlp((1, 4, 4), salient_dim=2, shared_dim=2, hidden=8)
    return model.model, (torch.rand(3, 1, 4, 4).round(), torch.rand(3, 1, 4, 4).round())


MODELS = {"decomposition": decomposition, "parted": parted, "contrastive": contrastive}


def draw(name: str, directory: Path = HERE) -> Path:
    """Write ``directory/<name>.svg``, the plate diagram of :data:`MODELS` ``[name]``."""
    pyro.set_rng_seed(0)
    pyro.clear_param_store()
    model, args = MODELS[name]()
    graph = pyro.render_model(model, model_args=args, render_distributions=True)
    path = directory / f"{name}.svg"
    path.write_bytes(graph.pipe(format="svg"))
    return path


def main() -> int:
    for name in MODELS:
        print(draw(name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
