"""The book run (jobs/configs/book-run.yaml): three memory loops over 6 chunks of one public book on
one real CPU engine actor. Checks that the engine's wall split is reported and accounts for its wall
time, and prints wall against compute (the issue's target: within 1.5x; speed is never asserted)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from memloop.jobs.run.config import parse_config
from memloop.jobs.run.driver import execute
from memloop.jobs.run.plan import make_plan
from memloop.jobs.store.run_store import RunStore

ROOT = Path(__file__).resolve().parents[2]
SPLIT = ("compute_s", "compile_s", "host_s", "idle_s")


@pytest.mark.slow
def test_book_run_reports_its_wall_split(ray_local, shared_data, tmp_path) -> None:
    data = yaml.safe_load((ROOT / "jobs" / "configs" / "book-run.yaml").read_text())
    [dataset] = data["datasets"]
    dataset["path"] = str(shared_data / "books" / Path(dataset["path"]).name)
    data["output"] = str(tmp_path / "runs")
    cfg = parse_config(data)
    summary = execute(make_plan(cfg), log=lambda m: None)
    assert (summary.computed, summary.failed) == (3, 0), summary.errors

    [engine] = summary.stats["engine"]
    for key in ("wall_s", *SPLIT):
        assert isinstance(engine[key], float) and engine[key] >= 0.0, (key, engine)
    parts = sum(engine[k] for k in SPLIT)
    # the four parts are the engine thread's wall time, up to the timers' rounding and the moments
    # between the last timer and the stats call
    assert abs(parts - engine["wall_s"]) <= 0.01 * engine["wall_s"] + 0.5, (parts, engine)
    assert engine["compute_s"] > 0 and engine["decoded_tokens"] > 0
    # the same figures are stored with the run
    runs = RunStore.open(str(tmp_path / "runs"), summary.run_id).table("runs").to_pandas()
    stored = json.loads(runs.iloc[-1]["stats_json"])["engine"][0]
    assert {k: stored[k] for k in SPLIT} == {k: engine[k] for k in SPLIT}

    wall = summary.stats["wall_s"]
    print(
        f"\nbook run: wall {wall:.1f} s (engine thread {engine['wall_s']:.1f} s) = compute {engine['compute_s']:.1f} "
        f"+ compile {engine['compile_s']:.1f} + host {engine['host_s']:.1f} + idle {engine['idle_s']:.1f}; "
        f"wall / compute {wall / engine['compute_s']:.2f}, wall / (compute + compile) "
        f"{wall / (engine['compute_s'] + engine['compile_s']):.2f}; steps {engine.get('steps')}, "
        f"decoded {engine['decoded_tokens']}, prompt {engine['prompt_tokens']} (cached {engine['cached_tokens']}), "
        f"compiled shapes {engine['compiled_shapes']}"
    )
