"""The benchmark scripts run end to end at tiny sizes and write the JSON they promise.

These check the harness (arguments, loops, tables, result files), not speed: every script
runs in a subprocess with ``--quick`` (and smaller settings where it has them) on one thread,
with CUDA hidden.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def run_benchmark(script: str, json_path: Path, *arguments: str, timeout: float = 120) -> dict:
    """Run ``benchmarks/<script> --json json_path *arguments`` (within ``timeout`` seconds); the JSON it wrote."""
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    completed = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), "--json", str(json_path), *arguments],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=environment,
        cwd=BENCHMARKS.parent,
    )
    assert completed.returncode == 0, completed.stdout[-2000:] + completed.stderr[-4000:]
    assert f"wrote {json_path}" in completed.stdout
    return json.loads(json_path.read_text())


def assert_timing_row(row: dict) -> None:
    assert row["min_seconds"] <= row["median_seconds"] <= row["max_seconds"]
    assert row["min_seconds"] > 0
    assert len(row["rounds"]) >= 1


def test_overhead_times_every_loop_of_every_model(tmp_path):
    result = run_benchmark("overhead.py", tmp_path / "overhead.json", "--quick")
    assert set(result["models"]) == {"decomposition", "parted", "contrastive"}
    for name, model in result["models"].items():
        expected = {"torch", "svi", "plain", "engine"} | ({"authors"} if name == "parted" else set())
        assert set(model["loops"]) == expected
        for row in model["loops"].values():
            assert_timing_row(row)
            assert row["paired_ratio_to_torch"] > 0
        assert model["loops"]["torch"]["ratio_to_torch"] == pytest.approx(1.0)
        assert model["loops"]["torch"]["paired_ratio_to_torch"] == pytest.approx(1.0)
    parted = result["models"]["parted"]["loops"]
    assert parted["authors"]["ratio_to_authors"] == pytest.approx(1.0)
    assert parted["authors"]["paired_ratio_to_authors"] == pytest.approx(1.0)
    assert parted["engine"]["ratio_to_authors"] == pytest.approx(
        parted["engine"]["median_seconds"] / parted["authors"]["median_seconds"]
    )
    assert result["settings"]["threads"] == 1


def test_overhead_runs_one_model_alone(tmp_path):
    result = run_benchmark("overhead.py", tmp_path / "contrastive.json", "--quick", "--models", "contrastive")
    assert list(result["models"]) == ["contrastive"]
    assert result["models"]["contrastive"]["batch_sizes"] == {"target": 16, "background": 16}


def test_overhead_times_the_engine_in_blocks_of_iterations(tmp_path):
    result = run_benchmark("overhead.py", tmp_path / "blocks.json", "--quick", "--models", "contrastive",
                           "--iterations-per-training-step", "3")
    assert (result["settings"]["steps"], result["settings"]["warmup"]) == (3, 3)
    for row in result["models"]["contrastive"]["loops"].values():
        assert_timing_row(row)


def test_gpu_throughput_says_so_and_exits_cleanly_without_a_gpu(tmp_path):
    result = run_benchmark("gpu_throughput.py", tmp_path / "gpu.json", "--quick")
    assert result["cuda_available"] is False
    assert result["rows"] == []


def test_gpu_throughput_harness_measures_both_models_on_the_cpu(tmp_path):
    result = run_benchmark("gpu_throughput.py", tmp_path / "gpu_cpu.json", "--quick", "--device", "cpu")
    assert {(row["model"], row["batch_size"]) for row in result["rows"]} == {("parted", 8), ("decomposition", 8)}
    for row in result["rows"]:
        assert set(row["loops"]) == {"engine", "engine_bf16", "engine_blocks", "torch"}
        for loop in row["loops"].values():
            assert_timing_row(loop)
            assert loop["epoch_seconds"] == pytest.approx(737_280 / loop["images_per_second"])


def test_whole_data_passes_report_memory_and_time_per_size(tmp_path):
    result = run_benchmark("whole_data_passes.py", tmp_path / "passes.json", "--quick")
    assert [row["options"]["protocol"] for row in result["factor_score"]] == ["parted", "parted", "standard"]
    passes = {(row["pass"], row["num_encodings"], row["chunk_size"]) for row in result["inclusive_kl"]}
    assert ("aggregate", 1024, 512) in passes and ("aggregate", 1024, 1024) in passes
    assert {row["pass"] for row in result["inclusive_kl"]} == {"aggregate", "elbo_step"}
    for row in result["inclusive_kl"]:
        assert row["seconds"] >= 0 and row["rss_delta_mib"] >= 0


def test_engine_throughput_compares_four_loops(tmp_path):
    result = run_benchmark(
        "engine_throughput.py", tmp_path / "engine.json", "--quick", "--threads", "1", "--batch-size", "8"
    )
    assert set(result["throughput"]) == {"torch", "svi", "plain", "engine"}
    assert result["throughput"]["torch"]["ratio_to_torch"] == pytest.approx(1.0)
    assert result["throughput"]["torch"]["paired_ratio_to_torch"] == pytest.approx(1.0)
    assert result["render"]["images"] > 0


def test_dsprites_render_reports_images_per_second(tmp_path):
    result = run_benchmark("dsprites_render.py", tmp_path / "render.json", "--quick")
    assert result["images"] > 0 and result["images_per_second"] > 0


def test_factor_score_memory_reports_every_configuration(tmp_path):
    result = run_benchmark("factor_score_memory.py", tmp_path / "factor.json", "--quick")
    assert len(result["rows"]) == 3
    for row in result["rows"]:
        assert row["images_encoded"] > 0 and 0.0 <= row["score"] <= 1.0


def test_precision_times_both_precisions_against_the_floor_and_the_authors(tmp_path):
    result = run_benchmark("precision.py", tmp_path / "precision.json", "--quick", "--quality-steps", "2")
    assert set(result["models"]) == {"decomposition", "parted"}
    assert set(result["models"]["decomposition"]["loops"]) == {"torch", "engine", "engine_bf16"}
    assert set(result["models"]["parted"]["loops"]) == {"torch", "engine", "engine_bf16", "authors"}
    for model in result["models"].values():
        for row in model["loops"].values():
            assert_timing_row(row)
    assert isinstance(result["machine"]["cpu_bf16_flags"], list)
    for name in ("decomposition_held_out_loss_per_image", "parted_held_out_shape_accuracy"):
        assert set(result["quality"][name]) == {"32-true", "bf16-mixed"}
    assert all(0 <= a <= 1 for a in result["quality"]["parted_held_out_shape_accuracy"].values())


def test_conv_networks_pairs_each_variant_with_the_library_networks_and_parted_with_the_authors(tmp_path):
    result = run_benchmark("conv_networks.py", tmp_path / "networks.json", "--quick", timeout=600)
    assert set(result["models"]) == {"decomposition", "parted"}
    for name, model in result["models"].items():
        variants = {"contiguous", "channels_last", "compiled"}
        assert set(model["median_cpu_seconds"]) == variants | ({"authors"} if name == "parted" else set())
        assert set(model["paired_ratio_to_contiguous"]) == {"channels_last", "compiled"}
        assert all(ratio["median"] > 0 for ratio in model["paired_ratio_to_contiguous"].values())
    assert set(result["models"]["parted"]["paired_ratio_to_authors"]) == {"contiguous", "channels_last", "compiled"}
    assert "paired_ratio_to_authors" not in result["models"]["decomposition"]


def test_input_check_times_the_models_data_check_against_the_elementwise_one_per_call_and_per_iteration(tmp_path):
    result = run_benchmark("input_check.py", tmp_path / "check.json", "--quick")
    assert sorted(result["results"]) == [
        "contrastive training iteration, 128 + 128", "one call, 128 images 1x28x28", "one call, 64 images 1x64x64"]
    for rows in result["results"].values():
        assert list(rows) == ["elementwise", "all_finite"]
        assert rows["elementwise"]["paired_ratio"] == 1.0
        assert all(row["median_ms"] >= 0 for row in rows.values())


def test_scoring_encode_times_every_chunk_size_of_every_campaign_encoder_and_checks_the_bits(tmp_path):
    result = run_benchmark("scoring_encode.py", tmp_path / "encode.json", "--quick")
    assert sorted(result["results"]) == ["decomposition", "parted", "vae"]
    for rows in result["results"].values():
        assert {"whole", "chunks of 64"} <= set(rows)
        assert all(row["median_ms_per_image"] > 0 and row["same_bits_as_whole"] for row in rows.values())
