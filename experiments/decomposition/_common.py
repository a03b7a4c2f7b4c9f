"""Shared by the Decomposition VAE experiment scripts: arguments, one run, tables."""
from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lightning as L
import torch

import ppl_vae
from ppl_vae.recipes.decomposition import DecompositionConfig, build

RESULTS = Path(__file__).resolve().parents[1] / "results" / "decomposition"


def parser(description: str) -> argparse.ArgumentParser:
    """``--full`` (paper settings), ``--device``, ``--seeds``, ``--out``."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--full", action="store_true", help="the paper's settings (long; meant for a GPU)")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda", "auto"))
    p.add_argument("--seeds", type=int, default=None, help="number of seeds (default: per script)")
    p.add_argument("--threads", type=int, default=int(os.environ.get("PPL_VAE_THREADS", "1")))
    p.add_argument("--out", type=Path, default=None, help="results folder")
    return p


def train_and_evaluate(config: DecompositionConfig, pictures: Path,
                       callbacks: Sequence[L.Callback] = ()) -> tuple[torch.nn.Module, dict[str, Any]]:
    """Train ``config`` with :func:`ppl_vae.fit` (in memory, with ``callbacks``), evaluate it
    into ``pictures``; returns the trained model and its figures."""
    start = time.time()
    experiment = build(config)
    result = ppl_vae.fit(experiment.model, experiment.objective, experiment.train_data, config.train,
                         callbacks=list(callbacks))
    model = result.model.eval()
    with torch.no_grad():
        figures = experiment.evaluate(model, pictures)
    figures["final_losses"] = result.history[-1] if result.history else {}
    figures["seconds"] = round(time.time() - start, 1)
    return model, figures


def write_json(path: Path, payload: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=1, default=float))


def print_table(rows: list[dict[str, Any]], columns: list[str]) -> None:
    """A Markdown table of ``rows`` restricted to ``columns``."""
    print("| " + " | ".join(columns) + " |")
    print("|" + "|".join("---" for _ in columns) + "|")
    for row in rows:
        cells = [f"{row[c]:.3f}" if isinstance(row[c], float) else str(row[c]) for c in columns]
        print("| " + " | ".join(cells) + " |")
