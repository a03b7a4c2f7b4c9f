"""The training engine: Lightning, checkpoints, run directories. Nothing else imports Lightning.

:class:`TrainConfig` and :class:`LRPlateau` import nothing heavy; the other names load the engine (torch,
Pyro, Lightning) on first use, so that ``ppl-vae --help`` and a recipe's settings stay fast.
"""
from __future__ import annotations

import sys
from typing import Any

from ppl_vae.train.config import LRPlateau, TrainConfig

_ENGINE = {
    "AtomicCheckpointIO": "checkpoint",
    "BatchBlocks": "batches",
    "CSVMetricsLogger": "metrics",
    "CheckpointError": "checkpoint",
    "FitResult": "fitting",
    "NonFiniteLossError": "module",
    "PeriodicEvaluation": "evaluation",
    "RunDirectory": "run_dir",
    "RunDirectoryExistsError": "run_dir",
    "SVIModule": "module",
    "TensorBatches": "batches",
    "TensorGroups": "batches",
    "as_groups": "batches",
    "fit": "fitting",
    "plan_sweep": "sweep",
    "run_sweep": "sweep",
    "read_checkpoint": "checkpoint",
    "read_training_metrics": "metrics",
    "write_json_atomic": "run_dir",
}


def __getattr__(name: str) -> Any:
    if name not in _ENGINE:
        raise AttributeError(f"module 'ppl_vae.train' has no attribute {name!r}")
    _load_engine()
    return globals()[name]


def _load_engine() -> None:
    """Import every engine module and bind its public names here."""
    import ppl_vae.train.batches  # noqa: F401 (read from sys.modules below)
    import ppl_vae.train.checkpoint  # noqa: F401 (read from sys.modules below)
    import ppl_vae.train.evaluation  # noqa: F401 (read from sys.modules below)
    import ppl_vae.train.fitting  # noqa: F401 (read from sys.modules below)
    import ppl_vae.train.metrics  # noqa: F401 (read from sys.modules below)
    import ppl_vae.train.module  # noqa: F401 (read from sys.modules below)
    import ppl_vae.train.run_dir  # noqa: F401 (read from sys.modules below)
    import ppl_vae.train.sweep  # noqa: F401 (read from sys.modules below)

    for attribute, module in _ENGINE.items():
        globals()[attribute] = getattr(sys.modules[f"ppl_vae.train.{module}"], attribute)


__all__ = ["LRPlateau", "TrainConfig", *sorted(_ENGINE)]
