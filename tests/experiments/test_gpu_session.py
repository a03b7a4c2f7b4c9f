"""The GPU session's entry point rehearsed end to end on the CPU with a tiny budget: the
throughput benchmark and the campaign run, and one folder holds what comes back."""
from __future__ import annotations

import json
import subprocess
import sys

from test_campaign import ROOT, TINY, record

SESSION = ROOT / "experiments" / "gpu" / "session.py"


def test_the_gpu_session_runs_end_to_end_on_the_cpu_and_leaves_records_and_throughput_in_one_folder(tmp_path):
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"experiments": [TINY]}))
    out = tmp_path / "out"

    done = subprocess.run(
        [sys.executable, str(SESSION), "--device", "cpu", "--out", str(out), "--manifest", str(manifest),
         "--checkpoints", str(tmp_path / "checkpoints"), "--budget-minutes", "5", "--workers", "1",
         "--throughput-arguments=--quick"],
        capture_output=True, text=True, timeout=900,
    )

    assert done.returncode == 0, done.stdout + (out / "session.log").read_text()
    summary = json.loads((out / "session.json").read_text())
    assert [entry["step"] for entry in summary["steps"]] == ["versions", "throughput", "campaign"]
    assert all(entry["status"] == 0 for entry in summary["steps"])
    assert json.loads((out / "throughput.json").read_text())["rows"]
    assert record(out)["complete"] and record(out)["machine"]["device"] == "cpu"
    assert not (out / "checkpoints").exists(), "checkpoints stay outside the folder that comes back"
