"""Fig. 4 of Mathieu et al. (2019): sparsity from a sparse prior and the MMD term.

gamma in {0, 0.8} x alpha in {0, ...} with beta = 1, D = 50 (20 in the reduced runs), Laplace likelihood (scale
0.1), dimension-wise Cauchy-kernel MMD; Hoyer sparsity of the posterior means,
reconstruction log-likelihood and MMD(q(z), p(z)) per setting, over several seeds.
Fashion-MNIST when it can be read or downloaded, MNIST (the offline subset, or
``--mnist-dir``) otherwise.

    python experiments/decomposition/sparsity.py                  # reduced CPU settings
    python experiments/decomposition/sparsity.py --full --device cuda
"""
from __future__ import annotations

import numpy as np
import torch
from _common import RESULTS, parser, print_table, train_and_evaluate, write_json

from ppl_vae.data import FashionMNIST
from ppl_vae.recipes.decomposition import DecompositionConfig, authors_settings
from ppl_vae.train import TrainConfig


def dataset_name() -> str:
    """"fashion-mnist" when the data can be loaded, else "mnist"."""
    try:
        FashionMNIST(split="train")
    except (FileNotFoundError, OSError, RuntimeError) as error:
        print(f"Fashion-MNIST unavailable ({type(error).__name__}); using MNIST", flush=True)
        return "mnist"
    return "fashion-mnist"


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--mnist-dir", default=None, help="folder of MNIST IDX files (default: offline subset)")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    out = args.out or RESULTS / "sparsity"
    if args.full:  # the paper: DCGAN-like convolutions, D = 50, batch 500, 80 epochs of 60,000 images
        alphas, seeds, steps, batch, num_train, latent_dim, flatten = (0.0, 100.0, 300.0, 600.0, 1000.0), 8, 9600, 500, None, 50, False
    else:  # a few minutes on a CPU: MLPs on flattened images, D = 20
        alphas, seeds, steps, batch, num_train, latent_dim, flatten = (0.0, 100.0, 1000.0), 2, 600, 100, 5000, 20, True
    seeds = args.seeds or seeds
    dataset = dataset_name()
    rows = []
    for gamma in (0.0, 0.8):
        for alpha in alphas:
            for seed in range(seeds):
                config = DecompositionConfig(
                    dataset=dataset,
                    num_train=num_train,
                    image_size=32,
                    latent_dim=latent_dim,
                    flatten=flatten,
                    prior="sparse",
                    gamma=gamma,
                    alpha=alpha,
                    beta=1.0,
                    divergence="mmd",
                    likelihood="laplace",
                    likelihood_scale=0.1,
                    hidden=256,
                    mnist_dir=args.mnist_dir,
                    evaluation_points=2000,
                    train=TrainConfig(steps=steps, batch_size=batch, lr=5e-4, betas=(0.5, 0.999), seed=seed,
                                      device=args.device, progress_bar=False, log_every_n_steps=100),
                )
                config = authors_settings(config) if args.full else config  # AMSGrad
                _, figures = train_and_evaluate(config, out / f"gamma{gamma:g}_alpha{alpha:g}_seed{seed}")
                rows.append({"gamma": gamma, "alpha": alpha, "seed": seed, "hoyer": figures["hoyer_sparsity"],
                             "recon_ll": figures["reconstruction_log_likelihood"],
                             "mmd": figures["aggregate_mismatch"]["mmd"], "seconds": figures["seconds"]})
                print(rows[-1], flush=True)
    summary = []
    for gamma in (0.0, 0.8):
        for alpha in alphas:
            mine = [r for r in rows if r["gamma"] == gamma and r["alpha"] == alpha]
            entry = {"gamma": gamma, "alpha": alpha, "n": len(mine)}
            for key in ("hoyer", "recon_ll", "mmd"):
                values = np.array([r[key] for r in mine])
                entry[key] = float(values.mean())
                entry[f"{key}_se"] = float(values.std(ddof=1) / np.sqrt(len(values))) if len(values) > 1 else 0.0
            summary.append(entry)
    write_json(out / "results.json", {"dataset": dataset, "runs": rows, "summary": summary})
    print(f"dataset: {dataset}")
    print_table(summary, ["gamma", "alpha", "n", "hoyer", "hoyer_se", "recon_ll", "mmd"])


if __name__ == "__main__":
    main()
