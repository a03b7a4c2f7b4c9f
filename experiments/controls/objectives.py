"""The Decomposition VAE's objective, ours against the authors' code, on the same networks,
batches and draws: whether the controls' differences from our rows can come from the
objective, or only from settings, data and length.

    python experiments/controls/objectives.py --authors-code /tmp/dd \\
        --authors-commit $(git --git-dir=<mirror> rev-parse HEAD)

For each control of the Decomposition VAE (``decomposition-dsprites-isotropic`` and
``decomposition-dsprites-student-t-df9``, :data:`experiments.controls.run.CONTROLS`): their
model (``models.VAE_dsprites`` at the control's settings, imported from the checkout as the
control runner imports it) and ours (the Decomposition recipe at the settings of the campaign
row of the same name under the recipe's ``authors_settings``, which adds their decoder widths,
``decoder_channels=(64, 64, 64, 32)``, so that both networks have the same layers and shapes). Ours takes their weights, and its
posterior scale is computed as theirs (``exp(c2 / 2) + 1e-6`` from their second linear layer,
where the library's head gives ``softplus(raw) + min_scale``: the one parametrisation that
differs). Both see the same dSprites batches (:class:`ppl_vae.data.DSprites`, 64 images each)
and, through the same seed before each call, the same standard-normal draws of z (the records
give the largest difference between the two z). Per batch: their ``decomp_objective`` (summed
over the batch, beta 1, alpha 0) and ours (``DecompositionELBO.differentiable_loss``, the
negative ELBO summed over the batch), each split into the reconstruction log-likelihood and
the KL (in closed form for the isotropic prior, at the sample for the Student-t in both), and
the cosine between the two gradients over the shared weights and their largest difference
(relative to the largest gradient).

The record (``--output``, default
``results/controls/objectives/decomposition-dsprites.json``) holds each batch's figures, the
authors' repository and commit, and the versions.
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from experiments.controls import run as controls  # noqa: E402

OUTPUT = ROOT / "results" / "controls" / "objectives" / "decomposition-dsprites.json"
#: The controls compared, each the campaign row of the same name.
EXPERIMENTS = ("decomposition-dsprites-isotropic", "decomposition-dsprites-student-t-df9")
#: Their posterior scale's offset (``utils.Constants.eta``).
ETA = 1e-6


class AuthorsPosteriorHead(nn.Module):
    """q(z|x)'s parameters from features ``h (B, 128)`` as their ``Enc.forward`` computes them:
    ``(loc(h), exp(log_variance(h) / 2) + 1e-6)``, each ``(B, D)``."""

    def __init__(self, features: int, latent_dim: int) -> None:
        super().__init__()
        self.loc, self.log_variance = nn.Linear(features, latent_dim), nn.Linear(features, latent_dim)

    def forward(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.loc(h), torch.exp(0.5 * self.log_variance(h)) + ETA


def their_model(experiment: str, models: Any, seed: int, weights: dict[str, Any] | None) -> Any:
    """Their ``VAE_dsprites`` at the control's settings, initialised under ``seed``, with the
    networks' ``weights`` (a control checkpoint's model state) when given; the prior stays the
    control's."""
    settings = controls.CONTROLS[experiment].authors_settings
    torch.manual_seed(seed)
    model = getattr(models, f"VAE_{settings['model']}")(argparse.Namespace(**settings))
    if weights is not None:
        networks = {name: value for name, value in weights.items() if name.startswith(("enc.", "dec."))}
        missing = model.load_state_dict(networks, strict=False).missing_keys
        if any(name.startswith(("enc.", "dec.")) for name in missing):
            raise ValueError(f"--checkpoint: expected a Decomposition VAE control checkpoint, it lacks {missing}")
    return model


def our_model(experiment: str, theirs: Any) -> tuple[Any, Any, list[tuple[Any, Any]]]:
    """``(model, objective, pairs)``: the Decomposition recipe at the campaign row's settings
    under its ``authors_settings`` (their decoder widths), holding copies of ``theirs``'s weights and their posterior
    scale; ``pairs`` are ``(our parameter, their parameter)`` for the gradients."""
    from experiments.campaign import MANIFEST, read_manifest, run_config
    from ppl_vae.recipes.decomposition import authors_settings, build_untrained

    run = next(run for run in read_manifest(MANIFEST) if run.experiment == experiment and run.seed == 0)
    config = authors_settings(run_config(run, "cpu"))
    ours, objective = build_untrained(config, {"shape": (1, 64, 64), "image_shape": (1, 64, 64)})
    ours.head = AuthorsPosteriorHead(config.hidden, config.latent_dim)
    theirs_ = [parameter for name, parameter in theirs.named_parameters() if name.startswith(("enc.", "dec."))]
    mine = _in_their_order(ours)
    if [tuple(p.shape) for p in mine] != [tuple(p.shape) for p in theirs_]:
        raise ValueError(f"{experiment}: the networks differ in shape: ours {[tuple(p.shape) for p in mine]}, "
                         f"theirs {[tuple(p.shape) for p in theirs_]}")
    with torch.no_grad():
        for my_parameter, their_parameter in zip(mine, theirs_, strict=True):
            my_parameter.copy_(their_parameter)
    return ours, objective, list(zip(mine, theirs_, strict=True))


def _in_their_order(ours: Any) -> list[Any]:
    """Our network's parameters in the order of theirs: the encoder's convolutions and linear
    layer, the posterior's mean and log-variance layers, then the decoder."""
    encoder = list(ours.encoder.parameters())
    head = [*ours.head.loc.parameters(), *ours.head.log_variance.parameters()]
    return [*encoder, *head, *ours.decoder.parameters()]


def compare_batch(experiment: str, ours: Any, objective: Any, theirs: Any, objectives: Any, pairs: list[tuple[Any, Any]],
                  x: Any, seed: int) -> dict[str, float]:
    """Both objectives on batch ``x`` ``(64, 1, 64, 64)`` under the same draws: their terms and
    ours, the relative difference of the totals and the gradients' cosine."""
    import pyro
    import pyro.distributions
    from pyro import poutine

    settings = controls.CONTROLS[experiment].authors_settings
    for model in (ours, theirs):
        model.zero_grad()
    torch.manual_seed(seed)
    with pyro.distributions.validation_enabled(False):  # their logits go in as RelaxedBernoulli's probs (run.py)
        total, reconstruction, kl, _ = objectives.decomp_objective(theirs, x, K=settings["K"], beta=settings["beta"],
                                                                   alpha=settings["alpha"], regs=None, components=True)
    (-total).backward()
    torch.manual_seed(seed)
    their_z = theirs(x, 1, no_dec=True)[1].detach().squeeze(0)
    torch.manual_seed(seed)
    guide_trace = poutine.trace(ours.guide).get_trace(x)
    our_z = guide_trace.nodes["z"]["value"].detach()
    torch.manual_seed(seed)
    pyro.clear_param_store()
    loss = objective.differentiable_loss(ours.model, ours.guide, x)
    loss.backward()
    logged = objective.logged
    batch = x.shape[0]
    ours_grad = torch.cat([mine.grad.flatten() for mine, _ in pairs]).double()
    their_grad = torch.cat([their.grad.flatten() for _, their in pairs]).double()
    total, reconstruction, kl, loss = (value.item() for value in (total, reconstruction, kl, loss))
    return {
        "their_total": -total, "our_total": loss, "relative_difference": abs(loss + total) / abs(total),
        "their_reconstruction": -reconstruction / batch, "our_reconstruction": float(logged["reconstruction"]),
        "their_kl": kl / batch, "our_kl": float(logged["kl"]),
        "largest_z_difference": float((their_z - our_z).abs().max()),
        "gradient_cosine": float(torch.nn.functional.cosine_similarity(ours_grad, their_grad, dim=0)),
        "largest_gradient_difference": float((ours_grad - their_grad).abs().max() / their_grad.abs().max()),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--authors-code", type=Path, required=True,
                        help=f"a checkout of {controls.REPOSITORIES['disentangling-disentanglement']}")
    parser.add_argument("--authors-commit", required=True, help="its commit (git rev-parse HEAD of the snapshot)")
    parser.add_argument("--batches", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--checkpoint", type=Path, default=None,
                        help="a Decomposition VAE control checkpoint (~/.cache/ppl_vae/controls/<experiment>/seed<k>.pt) "
                             "whose networks both models take; default: their initialisation")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args(argv)
    if args.batches < 1:
        parser.error(f"--batches: expected an integer >= 1, got {args.batches}")
    try:
        controls.check_commit(args.authors_commit)
    except ValueError as error:
        parser.error(str(error))

    from experiments.campaign import versions, write_record
    from ppl_vae.data.dsprites import DSprites

    torch.set_num_threads(1)
    models, objectives = controls.import_decomposition_code(args.authors_code)
    source = DSprites()
    generator = torch.Generator().manual_seed(args.seed)
    batches = [source.tensors(torch.randint(len(source), (64,), generator=generator), dtype=torch.float32)["x"]
               for _ in range(args.batches)]
    state = None if args.checkpoint is None else torch.load(args.checkpoint, map_location="cpu", weights_only=False)
    weights = "their initialisation" if state is None else (
        f"{args.checkpoint.parent.name}/{args.checkpoint.name} at step {state['iteration']:,}")
    record: dict[str, Any] = {"authors_repository": controls.REPOSITORIES["disentangling-disentanglement"],
                              "authors_commit": args.authors_commit, "seed": args.seed, "versions": versions(),
                              "weights": weights, "experiments": {}}
    for experiment in EXPERIMENTS:
        theirs = their_model(experiment, models, args.seed, None if state is None else state["model"])
        ours, objective, pairs = our_model(experiment, theirs)
        rows = [compare_batch(experiment, ours, objective, theirs, objectives, pairs, x, args.seed + i)
                for i, x in enumerate(batches)]
        record["experiments"][experiment] = rows
        for i, row in enumerate(rows):
            print(f"{experiment} batch {i}: " + ", ".join(f"{key} {value:.6g}" for key, value in row.items()), flush=True)
    write_record(args.output, record)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
