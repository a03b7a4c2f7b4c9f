"""Committed benchmark records name no folder of the machine that wrote them: a record stores
its own path relative to the repository (or its file name alone when written elsewhere)."""
import json
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

from reporting import recorded_path  # noqa: E402


def strings(value):
    if isinstance(value, dict):
        for item in value.values():
            yield from strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings(item)
    elif isinstance(value, str):
        yield value


@pytest.mark.parametrize("record", sorted((BENCHMARKS / "records").glob("*.json")), ids=lambda path: path.name)
def test_a_committed_record_holds_no_absolute_path(record):
    absolute = [text for text in strings(json.loads(record.read_text())) if text.startswith(("/", "~")) or ":\\" in text]
    assert absolute == []


def test_a_record_stores_its_path_relative_to_the_repository_or_its_name(tmp_path):
    assert recorded_path(BENCHMARKS / "records" / "conv_networks.json") == "benchmarks/records/conv_networks.json"
    assert recorded_path(tmp_path / "runs" / "out.json") == "out.json"
