"""The figures of the Results pages (docs/results/figures/), drawn from the campaign's records.

    python experiments/figures.py           # redraw every figure
    python experiments/figures.py --check   # exit 1 when a figure was drawn from other records

One figure per experiment of ``experiments/campaign.json`` that has records with a curve
(``results/<experiment>/seed<k>.json``, written by ``experiments/campaign.py``): each metric of
the curve against the training step, one line per seed. The PNG carries the digest of the
curves it was drawn from (its ``Description`` text chunk), so ``--check`` tells a figure that
no longer matches the records without comparing pixels (which move with matplotlib's version).
A Results page shows the figures of the experiments whose names start with PREFIX between
``<!-- campaign-figures: PREFIX -->`` and ``<!-- /campaign-figures -->`` (PREFIX may list
several, comma-separated; written here too, and checked).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from PIL import Image  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results"
FIGURES = ROOT / "docs" / "results" / "figures"
PAGES = (ROOT / "docs" / "results" / "parted.md", ROOT / "docs" / "results" / "decomposition.md")
MARKER = re.compile(r"(<!-- campaign-figures: (?P<prefix>[\w,-]+) -->\n)(?P<body>.*?)(<!-- /campaign-figures -->)", re.DOTALL)

#: How each curve metric is labelled on a figure.
LABELS = {
    "factor_score": "Factor score (standard protocol)",
    "factor_score_parted": "Factor score (parted protocol)",
    "accuracy": "held-out accuracy of q(c|x)",
}


def curve_records(results: Path) -> dict[str, list[dict[str, Any]]]:
    """The records with a non-empty curve, by experiment, in seed order."""
    found: dict[str, list[dict[str, Any]]] = {}
    for path in sorted(results.glob("*/seed*.json")):
        record = json.loads(path.read_text(encoding="utf-8"))
        if record.get("curve"):
            found.setdefault(record["experiment"], []).append(record)
    return {name: sorted(records, key=lambda r: r["seed"]) for name, records in found.items()}


def digest(records: Sequence[Mapping[str, Any]]) -> str:
    """SHA-256 of the seeds, steps and curves of ``records``: what a figure is drawn from."""
    drawn = [{"seed": r["seed"], "steps": r["steps"], "curve": r["curve"]} for r in records]
    return hashlib.sha256(json.dumps(drawn, sort_keys=True).encode()).hexdigest()


def draw(experiment: str, records: Sequence[Mapping[str, Any]], path: Path) -> None:
    """One panel per curve metric, a line per seed (the record's steps and completeness in the
    legend), written to ``path`` with the records' digest."""
    metrics = sorted({name for r in records for point in r["curve"] for name in point["metrics"]})
    fig, axes = plt.subplots(1, len(metrics), figsize=(4.2 * len(metrics), 3.2), squeeze=False, layout="constrained")
    for axis, metric in zip(axes[0], metrics, strict=True):
        for record in records:
            points = [(p["step"], p["metrics"][metric]) for p in record["curve"] if metric in p["metrics"]]
            state = "" if record.get("complete") else f", {record['steps']:,} of {record['target_steps']:,} steps"
            axis.plot(*zip(*points, strict=True), marker="o", label=f"seed {record['seed']}{state}")
        axis.set_title(LABELS.get(metric, metric), fontsize=10)
        axis.set_xlabel("training step")
        axis.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.suptitle(experiment, fontsize=11)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90, metadata={"Description": digest(records), "Software": None})
    plt.close(fig)


def drawn_from(path: Path) -> str | None:
    """The digest a figure carries, ``None`` for a file without one."""
    with Image.open(path) as image:
        return image.text.get("Description") if hasattr(image, "text") else None


def with_figures(text: str, experiments: Sequence[str], figures: str) -> str:
    """``text`` with each figures block listing the figures of its prefix's experiments (a
    comma-separated list of prefixes: those of any), as Markdown images under the folder
    ``figures`` (relative to the page)."""

    def block(match: re.Match) -> str:
        names = [name for name in experiments if name.startswith(tuple(match["prefix"].split(",")))]
        images = "".join(f"![{name}: the curve of each seed]({figures}/{name}.png)\n\n" for name in names)
        return match[1] + (images or "No curve recorded yet.\n\n") + match[4]

    return MARKER.sub(block, text)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=RESULTS, help="records folder (default: results/)")
    parser.add_argument("--figures", type=Path, default=FIGURES, help="figures folder (default: docs/results/figures/)")
    parser.add_argument("--check", action="store_true", help="exit 1 when a figure differs from the records")
    args = parser.parse_args(argv)
    stale = []
    drawn = curve_records(args.results)
    for page in PAGES if args.figures == FIGURES else ():
        text = page.read_text(encoding="utf-8")
        expected = with_figures(text, sorted(drawn), "figures")
        if args.check and expected != text:
            stale.append(str(page))
        elif not args.check:
            page.write_text(expected, encoding="utf-8")
    for experiment, records in drawn.items():
        path = args.figures / f"{experiment}.png"
        if args.check:
            if not path.is_file() or drawn_from(path) != digest(records):
                stale.append(str(path))
        else:
            draw(experiment, records, path)
            print(f"{path}: {len(records)} record(s)")
    for path in stale:
        print(f"{path}: not drawn from the current records (python experiments/figures.py)", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
