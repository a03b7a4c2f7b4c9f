"""Fig. 2 of Mathieu et al. (2019): the prior's shape and disentanglement on dSprites.

A beta-VAE (alpha = 0) with an isotropic, a PCA-initialised anisotropic (fixed, learned)
and a factored Student-t prior, all trace-normalised; Factor score (Kim & Mnih 2018,
standard protocol) and reconstruction log-likelihood per prior.

    python experiments/decomposition/priors_dsprites.py                  # reduced CPU settings
    python experiments/decomposition/priors_dsprites.py --full --device cuda
"""
from __future__ import annotations

import numpy as np
import torch
from _common import RESULTS, parser, print_table, train_and_evaluate, write_json

from ppl_vae.recipes.decomposition import DecompositionConfig
from ppl_vae.train import TrainConfig

PRIORS = ("isotropic", "pca", "learned-pca", "student-t")


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--beta", type=float, default=1.0)
    p.add_argument("--df", type=float, default=3.0, help="Student-t degrees of freedom")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    out = args.out or RESULTS / "priors_dsprites"
    if args.full:  # the paper: convolutions, all 737,280 images, batch 64, 20 epochs, lr 1e-4
        seeds, num_train, steps, lr, flatten, votes = 5, None, 20 * 737280 // 64, 1e-4, False, 10000
    else:  # minutes on a CPU: MLPs on 20,000 flattened images
        seeds, num_train, steps, lr, flatten, votes = 1, 20000, 1000, 5e-4, True, 800
    seeds = args.seeds or seeds
    rows = []
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
            model, figures = train_and_evaluate(config, out / f"{prior}_seed{seed}")
            variances = model.prior().variance.detach().numpy().round(3).tolist()
            rows.append({"prior": prior, "seed": seed, "factor_score": figures["factor_score"],
                         "recon_ll": figures["reconstruction_log_likelihood"], "prior_variances": variances,
                         "seconds": figures["seconds"]})
            print(rows[-1], flush=True)
    summary = []
    for prior in PRIORS:
        mine = [r for r in rows if r["prior"] == prior]
        summary.append({"prior": prior, "n": len(mine),
                        "factor_score": float(np.mean([r["factor_score"] for r in mine])),
                        "recon_ll": float(np.mean([r["recon_ll"] for r in mine]))})
    write_json(out / "results.json", {"runs": rows, "summary": summary, "beta": args.beta, "df": args.df})
    print_table(summary, ["prior", "n", "factor_score", "recon_ll"])


if __name__ == "__main__":
    main()
