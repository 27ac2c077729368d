"""The driver on the real engine (SmolLM2 through memloop.engine.serve.actor.EngineActor) and local Ray.

Default suite: one small run end to end, then the same config again (everything skipped, no
engine started). Slow suite: an engine actor killed mid-run, and a driver interrupted and resumed.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from memloop.engine.serve.actor import EngineActor
from memloop.eval.llm import LLMRequest
from memloop.jobs.run.config import parse_config
from memloop.jobs.run.driver import execute
from memloop.jobs.run.plan import make_plan, run_id
from memloop.jobs.store.run_store import RunStore

ROOT = Path(__file__).resolve().parents[2]


JSON_METHODS = ("go-json", "gu-json", "gm-json", "cok")


def _config(output: Path, entities: int = 2, methods=("gu-json",), max_tokens: int = 24, **over) -> dict:
    cfg = {
        "name": "drv",
        "output": str(output),
        "datasets": [{"task": "sumie", "synthetic": {"entities": entities, "seed": 3}, "options": {"max_chunks": 2}}],
        # the JSON methods under the engine's schema (the driver's mechanics are tested, not free JSON)
        "methods": [
            {"name": m, "options": {"max_attempts": 1, **({"decoding": "constrained"} if m in JSON_METHODS else {})}}
            for m in methods
        ],
        "sampling": {"max_tokens": max_tokens},
        "judges": [{"name": "sumie-exact"}],
        "engine": {"actors": 1, "cpus_per_actor": 0.5, "max_in_flight": 4, "start_timeout_s": 300},
        "judge_cpus": 0.25,  # small shares: the suite shares one local Ray with other areas
        "retries": 2,
    }
    cfg.update(over)
    return cfg


def _exactly_once(rs: RunStore, n: int) -> None:
    samples = rs.table("samples").to_pandas()
    assert len(samples) == n and samples["unit"].is_unique
    raw = rs._read_all("samples").to_pandas()
    assert set(raw["unit"]) == set(samples["unit"])
    steps = rs.table("steps").to_pandas()
    assert not steps.duplicated(["unit", "step"]).any()


def test_run_end_to_end_then_resume_skips_everything(ray_local, tmp_path, gcs_emulator) -> None:
    cfg = parse_config(_config(tmp_path / "runs"))
    logs: list[str] = []
    first = execute(make_plan(cfg), log=logs.append)
    assert first.samples == 2 and first.computed + first.failed == 2 and first.skipped == 0
    rs = RunStore.open(str(tmp_path / "runs"), run_id(cfg))
    _exactly_once(rs, 2)
    samples = rs.table("samples").to_pandas()
    ok = samples[samples["status"] == "ok"]
    assert (ok["prompt_tokens"] > 0).all() and (ok["decoded_tokens"] > 0).all()
    steps = rs.table("steps").to_pandas()
    # the unit's token totals are the sum of its steps' usage, as the engine reported it
    for unit, g in steps.groupby("unit"):
        row = samples[samples["unit"] == unit].iloc[0]
        assert row["prompt_tokens"] == g["prompt_tokens"].sum() and row["decoded_tokens"] == g["decoded_tokens"].sum()
    scores = rs.table("scores").to_pandas()
    assert set(scores[scores["turn"].notna()]["metric"]) >= {"precision", "recall", "f1"}
    assert set(scores["unit"]) == set(ok["unit"])
    engine = json.loads(rs.table("runs").to_pandas().iloc[0]["stats_json"])["engine"][0]
    assert engine["requests"] == sum(json.loads(e)["attempts"] for e in steps["extra_json"])
    # the same config again: nothing ok recomputed; a unit whose method produced nothing at any step
    # (24 tokens cut this model's JSON) is failed, so it is tried again, like every failed unit
    assert first.method_failed == (samples["status"] == "failed").sum() == 1
    second = execute(make_plan(cfg), log=logs.append)
    assert (second.computed, second.skipped, second.failed) == (1, first.computed - 1, first.failed)
    assert second.method_failed == 1 and second.method_errors == first.method_errors  # seeded: the same answer
    runs = rs.table("runs").to_pandas()
    assert len(runs) == 2
    assert any("results ->" in line for line in logs)
    # the same run's objects copied to GCS (emulator) read back identically, and report from there
    gcs = RunStore.open(f"{gcs_emulator}/e2e", rs.run_id)
    for name in rs.store.list(rs.run_id):
        gcs.store.put(name, rs.store.get(name))
    for table in ("samples", "steps", "judgments", "scores", "runs"):
        assert rs.table(table).equals(gcs.table(table)), table
        assert rs.table(table).to_pandas().equals(gcs.table(table).to_pandas()), table
    from memloop.jobs.results.report import write_report

    uri, rep = write_report(gcs.uri)
    assert uri.startswith("gs://") and "SUMIE" in rep.markdown
    assert gcs.store.get(gcs.name("report.md")).decode() == rep.markdown


class RecordingActor(EngineActor):
    """The real engine actor, recording the `max_tokens` each request arrives with. It then caps the
    request at 8 tokens so the test stays fast: what is checked is what reached the engine."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.seen: list[int] = []

    async def complete(self, request: LLMRequest) -> dict:
        self.seen.append(request.sampling.max_tokens)
        capped = replace(request, sampling=request.sampling.merge({"max_tokens": 8}))
        return await super().complete(capped)

    def stats(self) -> dict:
        return dict(super().stats(), seen_max_tokens=sorted(set(self.seen)))


def test_a_methods_own_default_reaches_the_engine_unless_the_run_overrides_it(ray_local, tmp_path) -> None:
    """CoK's own max_tokens (1024) reaches the engine through a run whose `sampling` section sets
    other fields only; a method option wins over it, and a run-wide max_tokens replaces both."""
    base = _config(tmp_path / "runs", entities=1, methods=("cok",), judges=[])
    base["methods"] = [
        {"name": "cok", "options": {"max_attempts": 1}},
        {"name": "gu-json", "options": {"max_attempts": 1, "max_tokens": 40}},
    ]
    base["datasets"][0]["options"] = {"max_chunks": 1}

    def seen(sampling: dict) -> list[int]:
        cfg = parse_config(dict(base, sampling=sampling))
        summary = execute(make_plan(cfg), actor_cls=RecordingActor, log=lambda m: None)
        assert summary.failed == 0, summary.errors
        return summary.stats["engine"][0]["seen_max_tokens"]

    assert seen({"temperature": 0.0}) == [40, 1024]
    assert seen({"max_tokens": 64}) == [40, 64]


@pytest.mark.slow
def test_killed_engine_actor_is_restarted_and_its_samples_retried(ray_local, tmp_path) -> None:
    import ray

    cfg = parse_config(_config(tmp_path / "runs", entities=4, methods=("gu-json", "go-json"), max_tokens=32))
    rid = run_id(cfg)
    killed = threading.Event()

    def killer() -> None:
        deadline = time.time() + 900
        while time.time() < deadline and not killed.is_set():
            try:
                actor = ray.get_actor(f"memloop:{rid}:engine-0")
                if ray.get(actor.stats.remote(), timeout=10)["requests"] >= 3:
                    ray.kill(actor, no_restart=False)  # a crash: Ray restarts it (max_restarts)
                    killed.set()
                    return
            except Exception:
                pass
            time.sleep(0.5)

    t = threading.Thread(target=killer, daemon=True)
    t.start()
    logs: list[str] = []
    summary = execute(make_plan(cfg), log=logs.append)
    t.join(timeout=5)
    assert killed.is_set()
    assert any("waiting for its restart" in line for line in logs), logs
    rs = RunStore.open(str(tmp_path / "runs"), rid)
    _exactly_once(rs, 8)
    assert (summary.computed, summary.failed) == (8, 0), "\n".join(logs)
    samples = rs.table("samples").to_pandas()
    assert (samples["attempts"] > 1).any(), "\n".join(logs)  # the in-flight units were retried
    print(f"\nkill test: {summary.to_json()}")


@pytest.mark.slow
def test_interrupted_driver_resumes_without_recomputing(tmp_path) -> None:
    cfg_dict = _config(tmp_path / "runs", entities=6, max_tokens=24, flush_units=1, flush_s=1)
    cfg_dict["engine"]["max_in_flight"] = 2
    cfg_path = tmp_path / "cfg.yaml"
    cfg_path.write_text(yaml.safe_dump(cfg_dict))
    rid = run_id(parse_config(cfg_dict))
    rs = RunStore.open(str(tmp_path / "runs"), rid)
    cmd = [sys.executable, "-c", "from memloop.jobs.commands.cli import main; main()", "run", str(cfg_path)]
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.time() + 900
    while time.time() < deadline and proc.poll() is None:
        if len(rs.done_units()) >= 2:
            break
        time.sleep(1)
    assert proc.poll() is None, proc.communicate()[1][-3000:]
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=300)
    done_before = rs.done_units()
    assert 2 <= len(done_before) < 6
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env, timeout=1200)
    assert out.returncode == 0, out.stderr[-3000:]
    last = json.loads(out.stdout.strip().splitlines()[-1])
    assert last["samples"] == 6 and last["skipped"] == len(done_before)
    assert last["computed"] + last["failed"] == 6 - len(done_before)
    _exactly_once(rs, 6)
    # the engine of the second invocation served exactly the requests of the units it computed
    runs = rs.table("runs").to_pandas().sort_values("started_at")
    engine = json.loads(runs.iloc[-1]["stats_json"])["engine"][0]
    steps = rs.table("steps").to_pandas()
    recomputed = steps[~steps["unit"].isin(done_before)]
    assert engine["requests"] == sum(json.loads(e)["attempts"] for e in recomputed["extra_json"])
    print(
        f"\nresume test: first invocation finished {len(done_before)}, second: {last}, "
        f"engine requests {engine['requests']}"
    )


@contextlib.contextmanager
def memloop_serve():
    """`memloop serve` on a free loopback port in a subprocess: yields (base_url, model id)."""
    import socket

    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-c", "from memloop.jobs.commands.cli import main; main()", "serve", "--port", str(port)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline, model = time.time() + 600, None
        while time.time() < deadline and server.poll() is None and model is None:
            try:
                model = httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=5).json()["data"][0]["id"]
            except Exception:
                time.sleep(2)
        assert model, server.stderr.read()[-3000:] if server.poll() is not None else "server did not come up"
        yield f"http://127.0.0.1:{port}", model
    finally:
        server.terminate()
        server.wait(timeout=60)


@pytest.mark.slow
def test_a_method_on_memloop_serve_as_an_endpoint_matches_the_in_process_engine(ray_local, tmp_path) -> None:
    """`model: {kind: openai}` against `memloop serve`: the same greedy steps as the run's own engine."""
    base = {
        "name": "ep-vs-engine",
        "datasets": [
            {
                "task": "book",
                "path": str(ROOT / "jobs/configs/data/lighthouse-keeper.txt"),
                "options": {"chunk_tokens": 256, "max_chunks": 2},
            }
        ],
        "methods": [{"name": "inc-update", "options": {"max_attempts": 1, "max_tokens": 40, "word_limit": 30}}],
        "engine": {"actors": 1, "cpus_per_actor": 0.5, "max_in_flight": 2, "start_timeout_s": 300},
        "judge_cpus": 0.25,
    }
    outputs = {}
    with memloop_serve() as (url, model):
        for kind, model_spec in (
            ("endpoint", {"kind": "openai", "endpoint": {"base_url": url, "model": model}}),
            ("engine", {}),
        ):
            summary = execute(
                make_plan(parse_config(dict(base, output=str(tmp_path / kind), model=model_spec))), log=lambda m: None
            )
            assert (summary.computed, summary.failed) == (1, 0), summary.errors
            steps = RunStore.at(summary.output).table("steps").to_pandas().sort_values("step")
            outputs[kind] = list(steps["output"])
    assert outputs["endpoint"] == outputs["engine"] and len(outputs["engine"]) >= 2
    print(f"\nendpoint vs engine: {len(outputs['engine'])} identical greedy steps")


@pytest.mark.slow
def test_judges_on_an_openai_compatible_endpoint(ray_local, tmp_path) -> None:
    """judge_model kind openai: the judge calls go over HTTP to `memloop serve`, not to the run's engine."""
    with memloop_serve() as (url, model):
        port = url.rsplit(":", 1)[1]
        cfg = parse_config(
            {
                "name": "http-judge",
                "output": str(tmp_path / "runs"),
                "datasets": [
                    {
                        "task": "book",
                        "path": str(ROOT / "jobs/configs/data/lighthouse-keeper.txt"),
                        "options": {"chunk_tokens": 256, "max_chunks": 1},
                    }
                ],
                "methods": [{"name": "inc-update", "options": {"max_attempts": 1, "max_tokens": 48, "word_limit": 30}}],
                "judges": [{"name": "booookscore-batched", "options": {"batch_size": 8}}],
                "judge_model": {"kind": "openai", "endpoint": {"base_url": f"http://127.0.0.1:{port}", "model": model}},
                "engine": {"actors": 1, "cpus_per_actor": 0.5, "max_in_flight": 2, "start_timeout_s": 300},
                "judge_cpus": 0.25,
            }
        )
        summary = execute(make_plan(cfg), log=lambda m: None)
        assert (summary.computed, summary.failed) == (1, 0)
        rs = RunStore.open(str(tmp_path / "runs"), run_id(cfg))
        records = [json.loads(r) for r in rs.table("judgments").to_pandas()["record_json"]]
        assert records and sum(r["usage"]["prompt_tokens"] for r in records) > 0
        steps = rs.table("steps").to_pandas()
        engine = json.loads(rs.table("runs").to_pandas().iloc[0]["stats_json"])["engine"][0]
        # the run's engine served the method's steps only; the judge's calls went to the endpoint
        assert engine["requests"] == sum(json.loads(e)["attempts"] for e in steps["extra_json"])
        assert "booookscore" in set(rs.table("scores").to_pandas()["metric"])


@pytest.mark.slow
def test_sigterm_then_ctrl_c_stops_cleanly_and_records_nothing_false(tmp_path) -> None:
    """`ray job stop` sends SIGTERM; an impatient user adds Ctrl-C during the clean-up. The run stops
    with 130, no traceback, no unit recorded failed because of the stop, and resumes."""
    cfg_dict = _config(tmp_path / "runs", entities=6, max_tokens=24, flush_units=1, flush_s=1)
    cfg_dict["engine"]["max_in_flight"] = 2
    cfg_path = tmp_path / "cfg.yaml"
    cfg_path.write_text(yaml.safe_dump(cfg_dict))
    rs = RunStore.open(str(tmp_path / "runs"), run_id(parse_config(cfg_dict)))
    cmd = [sys.executable, "-c", "from memloop.jobs.commands.cli import main; main()", "run", str(cfg_path)]
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.time() + 900
    while time.time() < deadline and proc.poll() is None and len(rs.done_units()) < 2:
        time.sleep(1)
    assert proc.poll() is None, proc.communicate()[1][-3000:]
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, err[-3000:]
    assert "Traceback" not in err and "restarts exhausted" not in err, err[-3000:]
    samples = rs.table("samples").to_pandas()
    assert (samples["status"] == "ok").all() and 2 <= len(samples) < 6, samples[["unit", "status", "error"]]
