"""ppl_vae: PartedVAE, Contrastive VAE and Decomposition VAE as Pyro model/guide pairs.

Subpackages: :mod:`ppl_vae.data`, :mod:`ppl_vae.nn`, :mod:`ppl_vae.distributions`,
:mod:`ppl_vae.models`, :mod:`ppl_vae.infer`, :mod:`ppl_vae.metrics`, :mod:`ppl_vae.train`
(the only one that imports Lightning; ``ppl_vae.fit`` loads it on first use).
"""
from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = ["FitResult", "TrainConfig", "__version__", "fit"]


def __getattr__(name: str) -> Any:
    if name in ("fit", "FitResult", "TrainConfig"):
        from ppl_vae import train

        return getattr(train, name)
    raise AttributeError(f"module 'ppl_vae' has no attribute {name!r}")
