"""ppl_vae: PartedVAE, Contrastive VAE and Decomposition VAE as Pyro model/guide pairs.

Subpackages: :mod:`ppl_vae.data`, :mod:`ppl_vae.nn`, :mod:`ppl_vae.distributions`,
:mod:`ppl_vae.models`, :mod:`ppl_vae.infer`, :mod:`ppl_vae.metrics`, :mod:`ppl_vae.train`
(the only one that imports Lightning; ``ppl_vae.fit`` loads it on first use). Beneath models and
objectives alike: :mod:`ppl_vae.schedules` (quantities that change with the training step) and
:mod:`ppl_vae.variables` (what a model declares about its latent variables).
``ppl_vae.load_run(run_dir)`` reloads a trained run (:mod:`ppl_vae.runs`).
"""
from __future__ import annotations

from typing import Any

from ppl_vae._version import __version__

__all__ = ["FitResult", "LoadedRun", "TrainConfig", "__version__", "fit", "load_run"]


def __getattr__(name: str) -> Any:
    if name in ("fit", "FitResult", "TrainConfig"):
        from ppl_vae import train

        return getattr(train, name)
    if name in ("load_run", "LoadedRun"):
        from ppl_vae import runs

        return getattr(runs, name)
    raise AttributeError(f"module 'ppl_vae' has no attribute {name!r}")
