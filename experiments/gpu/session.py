"""One GPU session in one command: install what the machine lacks, measure throughput, run the
campaign on the GPU for a fixed budget, and leave everything to bring back in one folder.

    experiments/gpu/prepare_wheels.sh            # beforehand, where PyPI is reachable: .whl/
    python3 experiments/gpu/session.py --wheels .whl --out OUT --budget-minutes 7

Steps, each logged to ``OUT/session.log`` and summarised in ``OUT/session.json`` (date, device,
versions, the seconds of each step and its exit status):

1. ``--wheels DIR``: the wheels in DIR are installed with pip (no index, no dependencies) into
   a folder outside OUT that every later step finds on ``PYTHONPATH``; the repository itself is
   used in place.
2. ``benchmarks/gpu_throughput.py`` (batch 64 and 512, float32 and bf16) writes
   ``OUT/throughput.json``.
3. ``experiments/campaign.py run`` trains the manifest's unfinished runs as ``--workers``
   parallel processes on the one device until ``--budget-minutes`` (checkpoints outside OUT,
   in ``--checkpoints``), writing the records to ``OUT/results/<experiment>/seed<k>.json``.

Only the standard library is imported here, so the script runs before anything is installed.
``--device cpu`` rehearses the whole session on a CPU (the figures are then not GPU figures).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def step(name: str, command: list[str], environment: dict[str, str], log: Path, timeout: float) -> dict:
    """Run ``command``, appending its output to ``log``; returns its name, seconds and status."""
    start = time.time()
    with open(log, "a", encoding="utf-8") as output:
        output.write(f"\n=== {name}: {' '.join(command)}\n")
        output.flush()
        try:
            status = subprocess.run(command, stdout=output, stderr=subprocess.STDOUT, env=environment,
                                    cwd=ROOT, timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            status = "timeout"
    summary = {"step": name, "seconds": round(time.time() - start, 1), "status": status}
    print(json.dumps(summary), flush=True)
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="the folder to bring back")
    parser.add_argument("--wheels", type=Path, default=None, help="folder of wheels to install first")
    parser.add_argument("--site", type=Path, default=Path("/tmp/ppl_vae_site"), help="where the wheels go")
    parser.add_argument("--checkpoints", type=Path, default=Path("/tmp/ppl_vae_campaign"))
    parser.add_argument("--budget-minutes", type=float, default=7.0, help="the campaign's training budget")
    parser.add_argument("--workers", type=int, default=4, help="campaign runs in parallel on the device")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--manifest", type=Path, default=ROOT / "experiments" / "campaign.json")
    parser.add_argument("--only", nargs="+", default=None, help="campaign experiments (default: all)")
    parser.add_argument("--throughput-arguments", default="",
                        help="extra arguments of benchmarks/gpu_throughput.py, e.g. --throughput-arguments='--pool 2048'")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    log = args.out / "session.log"
    environment = {**os.environ, "PYTHONUNBUFFERED": "1"}
    path = [str(ROOT)]
    steps = []
    if args.wheels is not None:
        wheels = sorted(str(wheel) for wheel in args.wheels.glob("*.whl"))
        if not wheels:
            parser.error(f"--wheels {args.wheels}: no .whl files there (run experiments/gpu/prepare_wheels.sh)")
        steps.append(step("install", [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                                      "--no-compile", "--upgrade", "--target", str(args.site), *wheels],
                          environment, log, timeout=300))
        path.insert(0, str(args.site))
    environment["PYTHONPATH"] = os.pathsep.join([*path, environment.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    steps.append(step("versions", [sys.executable, "-c", (
        "import json, platform, torch, pyro, lightning, ppl_vae; print(json.dumps({'python': platform.python_version(), "
        "'torch': torch.__version__, 'pyro': pyro.__version__, 'lightning': lightning.__version__, "
        "'ppl_vae': ppl_vae.__version__, 'cuda': torch.cuda.is_available(), "
        "'gpu': torch.cuda.get_device_name() if torch.cuda.is_available() else None}))")],
        environment, log, timeout=120))
    steps.append(step("throughput", [sys.executable, str(ROOT / "benchmarks" / "gpu_throughput.py"),
                                     "--device", args.device, "--json", str(args.out / "throughput.json"),
                                     *args.throughput_arguments.split()], environment, log, timeout=1800))
    campaign = [sys.executable, str(ROOT / "experiments" / "campaign.py"), "--manifest", str(args.manifest),
                "--checkpoints", str(args.checkpoints), "--results", str(args.out / "results"), "run",
                "--budget-minutes", str(args.budget_minutes), "--workers", str(args.workers), "--device", args.device,
                "--min-start-minutes", str(min(2.0, args.budget_minutes / 2))]
    if args.only:
        campaign += ["--only", *args.only]
    steps.append(step("campaign", campaign, environment, log, timeout=60 * args.budget_minutes + 1800))
    summary = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
               "device": args.device, "budget_minutes": args.budget_minutes, "workers": args.workers, "steps": steps}
    (args.out / "session.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    return 0 if all(entry["status"] == 0 for entry in steps) else 1


if __name__ == "__main__":
    sys.exit(main())
