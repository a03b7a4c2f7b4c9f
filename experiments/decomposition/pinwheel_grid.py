"""Fig. 3 of Mathieu et al. (2019): pinwheel clustering with the 4-component mixture prior.

Top row: alpha = 0, beta in {0.01, 0.5, 1.0, 1.2}; bottom row: beta = 0, alpha in
{1, 3, 5, 8}; D = inclusive KL over the whole data set (batch = n = 400). Each setting
gets a density picture of q(z) and the q(z)-vs-p(z) mismatch (MMD, inclusive KL).

    python experiments/decomposition/pinwheel_grid.py            # 1 seed, paper's 500 epochs
    python experiments/decomposition/pinwheel_grid.py --full     # 5 seeds, AMSGrad (the authors')
"""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import torch
from _common import RESULTS, parser, print_table, train_and_evaluate, write_json

from ppl_vae.recipes.decomposition import DecompositionConfig, authors_settings, build
from ppl_vae.train import TrainConfig
from ppl_vae.viz import save_figure

GRID = [(0.0, b) for b in (0.01, 0.5, 1.0, 1.2)] + [(a, 0.0) for a in (1.0, 3.0, 5.0, 8.0)]


def main() -> None:
    args = parser(__doc__.splitlines()[0]).parse_args()
    torch.set_num_threads(args.threads)
    out = args.out or RESULTS / "pinwheel_grid"
    seeds = args.seeds or (5 if args.full else 1)
    rows, densities = [], {}
    model_input = build(DecompositionConfig()).train_data["x"]
    for alpha, beta in GRID:
        for seed in range(seeds):
            config = DecompositionConfig(
                alpha=alpha,
                beta=beta,
                train=TrainConfig(steps=500, batch_size=400, lr=1e-3, seed=seed, device=args.device, progress_bar=False),
            )
            config = authors_settings(config) if args.full else config  # AMSGrad
            model, figures = train_and_evaluate(config, out / f"alpha{alpha:g}_beta{beta:g}_seed{seed}")
            mismatch = figures["aggregate_mismatch"]
            rows.append({"alpha": alpha, "beta": beta, "seed": seed, **mismatch,
                         "recon_ll": figures["reconstruction_log_likelihood"], "seconds": figures["seconds"]})
            if seed == 0:
                with torch.no_grad():
                    densities[(alpha, beta)] = model.aggregate_posterior_sample(model_input).numpy()
            print(rows[-1], flush=True)
    _grid_figure(densities, out / "fig3_grid.png")
    summary = []
    for alpha, beta in GRID:
        mine = [r for r in rows if r["alpha"] == alpha and r["beta"] == beta]
        summary.append({"alpha": alpha, "beta": beta,
                        **{k: float(np.mean([r[k] for r in mine])) for k in ("mmd", "inclusive_kl", "recon_ll")}})
    write_json(out / "results.json", {"runs": rows, "summary": summary, "seeds": seeds})
    print_table(summary, ["alpha", "beta", "mmd", "inclusive_kl", "recon_ll"])


def _grid_figure(densities: dict, path) -> None:
    fig, axes = plt.subplots(2, 4, figsize=(12, 6))
    for ax, ((alpha, beta), z) in zip(axes.ravel(), densities.items(), strict=True):
        ax.hist2d(z[:, 0], z[:, 1], bins=50, range=[[-2, 2], [-2, 2]], cmap="viridis")
        ax.set_title(f"alpha={alpha:g}, beta={beta:g}", fontsize=9)
        ax.set_xticks([]), ax.set_yticks([])
    fig.suptitle("q(z) on pinwheel, mixture-of-4 prior (cf. Mathieu et al. 2019, Fig. 3)")
    save_figure(fig, path)


if __name__ == "__main__":
    main()
