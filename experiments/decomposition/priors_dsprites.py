"""Fig. 2 of Mathieu et al. (2019): the prior's shape and disentanglement on dSprites.

A beta-VAE (alpha = 0) with an isotropic, a PCA-initialised anisotropic (fixed, learned)
and a factored Student-t prior, all trace-normalised; per prior: the Factor score (Kim & Mnih
2018) under the standard protocol (the paper's figure) and the PartedVAE authors' variant,
MIG, SAP, DCI (random-forest importances), the beta-VAE metric (all sized by the number of
Factor-score votes: ``ppl_vae.metrics.disentanglement_scores``) and the reconstruction
log-likelihood; and the curve of both Factor scores against training steps
(``--curve-every``, ``--curve-votes``).

    python experiments/decomposition/priors_dsprites.py                  # reduced CPU settings
    python experiments/decomposition/priors_dsprites.py --full --device cuda   # + AMSGrad, the authors' networks
    python experiments/decomposition/priors_dsprites.py --seeds 1 --steps 5 --num-train 500 --votes 20 --curve-votes 20  # smoke test
"""
from __future__ import annotations

import dataclasses

import numpy as np
import torch
from _common import RESULTS, parser, print_table, train_and_evaluate, write_json

from ppl_vae.data.dsprites import DSprites
from ppl_vae.metrics import disentanglement_scores, factor_scores
from ppl_vae.recipes.decomposition import DecompositionConfig, authors_settings
from ppl_vae.train import PeriodicEvaluation, TrainConfig

PRIORS = ("isotropic", "pca", "learned-pca", "student-t")


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--beta", type=float, default=1.0)
    p.add_argument("--df", type=float, default=None,
                   help="Student-t degrees of freedom (default 3; with --full 9, the authors' script)")
    p.add_argument("--steps", type=int, default=None, help="training steps (default: per mode)")
    p.add_argument("--num-train", type=int, default=None, help="training images (default: per mode)")
    p.add_argument("--votes", type=int, default=None, help="Factor-score votes, sizing every metric")
    p.add_argument("--curve-every", type=int, default=None,
                   help="steps between points of the curve of Factor score against steps (default: 5 points)")
    p.add_argument("--curve-votes", type=int, default=300, help="votes of each point of the curve")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    out = args.out or RESULTS / "priors_dsprites"
    if args.full:  # the paper: convolutions, all 737,280 images, batch 64, 20 epochs, lr 1e-4
        seeds, num_train, steps, lr, flatten, votes, df = 5, None, 20 * 737280 // 64, 1e-4, False, 10000, 9.0
    else:  # minutes on a CPU: MLPs on 20,000 flattened images
        seeds, num_train, steps, lr, flatten, votes, df = 1, 20000, 1000, 5e-4, True, 800, 3.0
    seeds = args.seeds or seeds
    steps, num_train, votes = args.steps or steps, args.num_train or num_train, args.votes or votes
    args.df = args.df or df
    rows, source = [], DSprites()
    for prior in PRIORS:
        for seed in range(seeds):
            config = DecompositionConfig(
                dataset="dsprites",
                num_train=num_train,
                latent_dim=10,
                prior=prior,
                df=args.df,
                alpha=0.0,
                beta=args.beta,
                flatten=flatten,
                hidden=256,
                evaluation_points=2000,
                factor_score_votes=votes,
                train=TrainConfig(steps=steps, batch_size=64, lr=lr, seed=seed, device=args.device,
                                  progress_bar=False, log_every_n_steps=100),
            )
            if args.full:  # AMSGrad, the authors' dSprites networks; Student-t: batch 256, 40 epochs (the paper)
                config = authors_settings(config)
                if prior == "student-t":
                    config.train = dataclasses.replace(config.train, batch_size=256, steps=args.steps or 40 * 737280 // 256)
            curve = PeriodicEvaluation(
                lambda model, seed=seed: factor_scores(_image_encoder(model, flatten), source,
                                                       votes=args.curve_votes, seed=seed, progress=False),
                args.curve_every or max(config.train.steps // 5, 1),
            )
            model, figures = train_and_evaluate(config, out / f"{prior}_seed{seed}", callbacks=[curve])
            variances = model.prior().variance.detach().numpy().round(3).tolist()
            scores = disentanglement_scores(_image_encoder(model, flatten), source, votes=votes, seed=seed)
            rows.append({"prior": prior, "seed": seed, "factor_score": figures["factor_score"], **scores,
                         "recon_ll": figures["reconstruction_log_likelihood"], "prior_variances": variances,
                         "seconds": figures["seconds"], "curve": curve.history})
            print(rows[-1], flush=True)
    columns = ["factor_score", *scores, "recon_ll"]
    summary = []
    for prior in PRIORS:
        mine = [r for r in rows if r["prior"] == prior]
        summary.append({"prior": prior, "n": len(mine),
                        **{key: float(np.mean([r[key] for r in mine])) for key in columns}})
    write_json(out / "results.json", {"runs": rows, "summary": summary, "beta": args.beta, "df": args.df})
    print_table(summary, ["prior", "n", *columns])


def _image_encoder(model: torch.nn.Module, flatten: bool):
    """``encode`` of images (n, 1, 64, 64) for a model trained on flattened or whole images."""
    if flatten:
        return lambda images: model.encode(images.reshape(images.shape[0], -1))
    return model.encode


if __name__ == "__main__":
    main()
