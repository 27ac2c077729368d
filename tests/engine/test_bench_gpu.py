"""`memloop bench gpu`: the device run's script runs every step end to end on toy shapes, plans within a
budget, records each step as it finishes, and imports nothing the device image and the kit lack."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from memloop.bench.device_kit import DEVICE_IMAGE, KIT, missing_on_device, normalise
from memloop.bench.gpu_plan import Rates, Record, Runner, Step, Work

ROOT = Path(__file__).resolve().parents[2]
RATES = Rates(flop_rate=1e9, byte_rate=1e9, step_overhead_s=0.01, compile_s=0.1, compile_scale=1.0)


def test_tiny_run_measures_every_step_through_the_device_command(tmp_path):
    """`python -m memloop.bench.gpu --tiny` (the device command's entry) on one toy model: every step ok, the figures
    in the JSON, the kernel path checked against transformers, and no import the device would lack."""
    scratch = tmp_path / "tmp"  # the bench's own work dir (checkpoints, traces) lands here and must be gone after
    scratch.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu", "TMPDIR": str(scratch)}
    env.pop("XLA_FLAGS", None)  # one device, as a GPU host has
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "memloop.bench.gpu",
            "--tiny",
            "--models",
            "tiny-llama",
            "--out",
            str(tmp_path / "out"),
            "--budget-s",
            "900",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert not list(scratch.glob("memloop-bench-gpu-*")), "the bench left its work dir behind"
    data = json.loads((tmp_path / "out" / "gpu-bench.json").read_text())
    assert data["scale"] == "tiny" and data["environment"]["versions"]["jax"]
    assert data["calibration"]["matmul_tflops"] > 0
    planned = [row["step"] for row in data["plan"]["steps"]]
    assert planned[:4] == [
        "tiny-llama:correctness",
        "tiny-llama:decode_b4_short",
        "tiny-llama:decode_b4_4k",
        "tiny-llama:prefill_256",
    ]  # value order: correctness, decode at the key batch, long prefill
    steps = data["steps"]
    assert data["failed_steps"] == [] and all(s["status"] == "ok" for s in steps.values()), steps
    assert set(planned) | {"tiny-llama:checkpoint", "tiny-llama:load", "tiny-llama:transformers"} == set(steps)
    correct = steps["tiny-llama:correctness"]
    assert correct["logits_within_tolerance"] and correct["logits_rel_l2_max"] < correct["logits_tolerance"]
    for path in ("kernel", "gather"):
        assert correct[path]["tokens_compared"] == 4 * 6 and correct[path]["tokens_agreeing"] >= 1
    assert steps["tiny-llama:load"]["backend"] == "pallas-gpu"  # the GPU kernel, in Pallas' interpreter on CPU
    # a rate is the difference of two timed runs: on a loaded CPU it may vanish, and is then null with a note
    rates = [steps[f"tiny-llama:decode_b{b}_{ctx}"] for b in (1, 2, 4, 8) for ctx in ("short", "4k")]
    rates += [steps[f"tiny-llama:transformers_decode_b{b}"] for b in (1, 4)]
    for figures in rates:
        assert (
            figures["tokens_per_s"] is None and "no measurable time" in figures["note"] or figures["tokens_per_s"] > 0
        )
    assert steps["tiny-llama:prefill_256"]["tokens_per_s"] > 0 and steps["tiny-llama:ttft_128"]["ttft_s"] > 0
    assert steps["tiny-llama:prefix_4_loops"]["cached_tokens"] > 0
    for call in ("decode", "prefill"):
        kernels = steps["tiny-llama:profile"][call]
        assert 1 <= len(kernels) <= 10 and all(k["total_us"] > 0 for k in kernels)
    assert set(data["summary"]["tiny-llama"]) >= {
        "decode_b4_hbm_fraction",
        "prefill_256_mfu",
        "ratio_decode_b4_vs_transformers",
    }
    assert "memloop.bench.gpu" in data["modules"]["loaded"] and data["modules"]["missing_on_device"] == {}


def test_missing_on_device_names_an_import_the_image_lacks():
    # the HTTP server imports fastapi and uvicorn, which neither the device image nor the kit holds
    missing = missing_on_device(["memloop.engine.serve.server"])
    assert "fastapi" in missing and "jax" not in missing
    assert {normalise(k) for k in KIT}.isdisjoint(DEVICE_IMAGE)


def _step(name: str, seconds: float, log: list[str], fail: bool = False, needs: tuple[str, ...] = ()) -> Step:
    def run() -> dict:
        log.append(name)
        if fail:
            raise RuntimeError(f"{name} broke")
        return {"value": len(log)}

    return Step(name, lambda: Work(fixed_s=seconds), run, needs)


def test_runner_runs_in_value_order_and_skips_what_does_not_fit(tmp_path):
    log: list[str] = []
    record = Record(tmp_path / "gpu-bench.json")
    setups = {"ckpt": _step("ckpt", 30, log)}
    steps = [
        _step("correctness", 40, log, needs=("ckpt",)),
        _step("decode_b64", 20, log, needs=("ckpt",)),
        _step("too_big", 1000, log),
        _step("cheap", 1, log),
    ]
    Runner(record, RATES, budget_s=100, setups=setups, log=lambda line: None).run(steps)
    assert log == ["ckpt", "correctness", "decode_b64", "cheap"]
    data = json.loads(record.path.read_text())
    plan = {row["step"]: row for row in data["plan"]["steps"]}
    assert plan["correctness"]["expected_s"] == pytest.approx(70)  # its setup counts toward the first step needing it
    assert plan["decode_b64"]["expected_s"] == pytest.approx(20) and not plan["too_big"]["fits"]
    assert data["steps"]["too_big"]["status"] == "skipped" and "budget" in data["steps"]["too_big"]["reason"]
    assert data["steps"]["ckpt"]["status"] == "ok" and data["steps"]["cheap"]["value"] == 4


def test_runner_records_a_failure_and_skips_what_needed_it(tmp_path):
    log: list[str] = []
    record = Record(tmp_path / "gpu-bench.json")
    seen_on_disk: list[dict] = []

    def peek() -> dict:  # the file already holds every earlier step when a later one runs
        seen_on_disk.append(json.loads(record.path.read_text())["steps"])
        return {}

    setups = {"load": _step("load", 1, log, fail=True)}
    steps = [
        _step("correctness", 1, log, needs=("load",)),
        _step("broken", 1, log, fail=True),
        Step("peek", lambda: Work(), peek),
    ]
    runner = Runner(record, RATES, budget_s=100, setups=setups, log=lambda line: None)
    runner.run(steps)
    assert runner.failed == ["load", "broken"]
    steps_on_disk = json.loads(record.path.read_text())["steps"]
    assert steps_on_disk["load"]["status"] == "failed" and "RuntimeError: load broke" in steps_on_disk["load"]["error"]
    assert steps_on_disk["correctness"] == {"status": "skipped", "reason": "a setup step it needs failed: load"}
    assert seen_on_disk[0]["broken"]["status"] == "failed"


def test_runner_rechecks_the_budget_as_time_passes(tmp_path):
    """A step that fitted the plan is skipped when earlier steps ran long and its time no longer fits."""
    log: list[str] = []

    def slow() -> dict:
        time.sleep(0.3)
        log.append("slow")
        return {}

    steps = [Step("slow", lambda: Work(fixed_s=0.01), slow), _step("next", 0.5, log)]
    record = Record(tmp_path / "gpu-bench.json")
    Runner(record, RATES, budget_s=0.7, setups={}, log=lambda line: None).run(steps)
    data = json.loads(record.path.read_text())
    assert data["plan"]["steps"][1]["fits"] and data["steps"]["next"]["status"] == "skipped" and log == ["slow"]
