"""What every benchmark script writes beside its printed table: where it ran, and one JSON file."""
from __future__ import annotations

import json
import os
import platform
from pathlib import Path
from typing import Any

import pyro
import torch


def machine_description(**extra: Any) -> dict[str, Any]:
    """The platform, core count, torch and Pyro versions and load average the figures were
    measured under, plus ``extra`` entries (e.g. ``cpu_bf16_flags``, ``gpu``)."""
    return {
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "torch": torch.__version__,
        "pyro": pyro.__version__,
        "load_average": os.getloadavg(),
        **extra,
    }


REPOSITORY = Path(__file__).resolve().parents[1]


def recorded_path(path: str | os.PathLike) -> str:
    """``path`` as a record stores it: relative to the repository when it lies inside it
    (``benchmarks/records/overhead.json``), else its file name alone, so that a committed
    record names no folder of the machine that wrote it."""
    resolved = Path(path).resolve()
    return str(resolved.relative_to(REPOSITORY)) if resolved.is_relative_to(REPOSITORY) else resolved.name


def write_results(path: str | os.PathLike, payload: dict[str, Any]) -> None:
    """``payload`` as indented JSON at ``path`` (folders created), then ``wrote PATH``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"wrote {path}")
