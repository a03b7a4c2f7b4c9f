"""The worked example of docs/criticism.md: four fits of the pinwheel, and what the check says.

    python experiments/criticism/pinwheel.py                 # prints the table (Markdown)
    python experiments/criticism/pinwheel.py --steps 1000    # shorter fits

Data: 400 pinwheel points (four fat arms: ``Pinwheel(radial_std=0.3, tangential_std=0.3)``,
seed 0) to fit and check, and 400 more (seed 1) held out. Each fit is a Gaussian VAE (MLP
2-64-64-z encoder, z-64-64-2 decoder) trained by plain Pyro SVI (Adam, full batch):

- **good**: a 2-d latent, likelihood scale 0.1;
- **1-d latent**: too small a latent, scale 0.1;
- **too narrow**: a 2-d latent, likelihood scale 0.01;
- **too wide**: a 2-d latent, likelihood scale 1.0.

Each is checked with :func:`ppl_vae.checks.posterior_predictive_check` on the 400 points it
was fitted on and the 400 held out (default settings, seed 0). One torch thread, about a
minute in all on a CPU.
"""
from __future__ import annotations

import argparse

import pyro
import torch
from pyro.infer import SVI, TraceMeanField_ELBO
from pyro.optim import Adam

from ppl_vae.checks import PPCResult, posterior_predictive_check
from ppl_vae.data import Pinwheel
from ppl_vae.models import VAE
from ppl_vae.nn import MLP, mlp_decoder

DATA = {"radial_std": 0.3, "tangential_std": 0.3}
FITS = {"good": (2, 0.1), "1-d latent": (1, 0.1), "too narrow": (2, 0.01), "too wide": (2, 1.0)}
"""Each fit's latent dimension and likelihood scale."""
STEPS = 3000


def pinwheel(seed: int) -> torch.Tensor:
    """``(400, 2)`` pinwheel points with four fat arms."""
    return Pinwheel(seed=seed, **DATA).tensors()["x"]


def fit_pinwheel(x: torch.Tensor, latent_dim: int, scale: float, steps: int = STEPS, seed: int = 0) -> VAE:
    """A Gaussian VAE with a ``latent_dim``-d latent and likelihood scale ``scale``, fitted to
    ``x`` by ``steps`` full-batch SVI steps (Adam, learning rate 5e-3)."""
    pyro.clear_param_store()
    torch.manual_seed(seed)
    vae = VAE(MLP([2, 64, 64], final_activation=torch.nn.ReLU()), mlp_decoder(latent_dim, [64, 64], (2,)), latent_dim,
              likelihood="gaussian", likelihood_scale=scale)
    svi = SVI(vae.model, vae.guide, Adam({"lr": 5e-3}), TraceMeanField_ELBO())
    for _ in range(steps):
        svi.step(x=x)
    return vae


def check_fits(steps: int = STEPS, seed: int = 0) -> dict[str, PPCResult]:
    """Each fit of :data:`FITS`, checked on its data with the held-out points."""
    x, held_out = pinwheel(0), pinwheel(1)
    return {name: posterior_predictive_check(fit_pinwheel(x, latent, scale, steps, seed), {"x": x},
                                             held_out={"x": held_out}, seed=seed, progress=False, keep_replicates=1)
            for name, (latent, scale) in FITS.items()}


def table(results: dict[str, PPCResult]) -> str:
    """The Markdown table of docs/criticism.md: each fit's verdict, the directions of its
    findings and its strongest finding."""
    rows = ["| fit | misfit | directions found | strongest finding |", "|---|---|---|---|"]
    for name, result in results.items():
        directions = ", ".join(sorted({finding.direction for finding in result.findings})) or "none"
        strongest = str(result.findings[0]).replace("|", "\\|") if result.findings else result.verdict
        rows.append(f"| {name} | {result.misfit} | {directions} | {strongest} |")
    return "\n".join(rows)


def table_rows(markdown: str) -> list[list[str]]:
    """The fit, misfit and directions cells of each row of a :func:`table` (what the check
    decides, without its p-values' last digits)."""
    return [[cell.strip() for cell in line.strip("|").split(" | ")[:3]] for line in markdown.splitlines()[2:]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(table(check_fits(args.steps, args.seed)))


if __name__ == "__main__":
    main()
