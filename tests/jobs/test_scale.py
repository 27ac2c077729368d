"""Method loops next to the engines, and the replaying engine of `memloop bench scale`.

Default suite: the two placements of the method loops give the same tables on `ReplayEngine`
actors (answers scripted per prompt); the replaying engine's batching counters and tokenizer; the
config and CLI checks. Slow (the real engine): both placements give the same tables on a small run
and on the demo config, and a real run replayed with its units replicated reproduces its steps
exactly under both placements.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pandas as pd
import pytest
import yaml
from memloop.eval.llm import LLMRequest
from memloop.jobs.errors import ConfigError
from memloop.jobs.run.config import parse_config
from memloop.jobs.run.driver import execute
from memloop.jobs.run.plan import make_plan
from memloop.jobs.sim.replay import Answer, LatencyModel, ReplayEngine, ReplayMiss, tokenizer_json
from memloop.jobs.store.run_store import RunStore

ROOT = Path(__file__).resolve().parents[2]
# what differs between two computations of the same units: when and in which shard they were written,
# and how much of each prompt the prefix cache served (it depends on which requests ran first; two
# runs in the same placement differ there too). Outputs, prompts and token counts must not.
TRANSPORT = ["shard", "started_at", "finished_at", "run_id", "cached_tokens"]


def _config(output: Path, loops: str, **over) -> dict:
    cfg = {
        "name": "place",
        "output": str(output),
        "datasets": [{"task": "sumie", "synthetic": {"entities": 2, "seed": 5}, "options": {"max_chunks": 2}}],
        "methods": [{"name": "gu-json", "options": {"max_attempts": 1, "max_tokens": 24}}],
        "judges": [{"name": "sumie-exact"}],
        "engine": {
            "actors": 1,
            "cpus_per_actor": 0.5,
            "max_in_flight": 2,
            "start_timeout_s": 300,
            "method_loops": loops,
        },
        "judge_cpus": 0.25,
        "retries": 0,
    }
    cfg.update(over)
    return cfg


def _tables(rs: RunStore) -> dict[str, pd.DataFrame]:
    out = {}
    for t in ("samples", "steps", "judgments", "scores"):
        df = rs.table(t).to_pandas().drop(columns=TRANSPORT, errors="ignore")
        out[t] = df.sort_values(
            [c for c in ("unit", "step", "judge", "index", "metric", "turn") if c in df]
        ).reset_index(drop=True)
    return out


def _assert_same_tables(a: RunStore, b: RunStore) -> None:
    ta, tb = _tables(a), _tables(b)
    assert len(ta["samples"]) and len(ta["steps"]) and len(ta["scores"])  # (judgments: only judges that keep records)
    for t in ta:
        pd.testing.assert_frame_equal(ta[t], tb[t], check_like=True, obj=t)


def _scripted_recording(cfg: dict) -> dict[str, Answer]:
    """{prompt: answer} for every request the plan's units make when each step's answer is a fixed
    JSON table: the method loops run here, in process, against a scripted LLM."""
    from memloop.eval.llm import ScriptedLLM
    from memloop.jobs.run.loops import run_loop
    from memloop.jobs.run.plan import make_plan
    from memloop.jobs.sim.replay import prompt_of

    rec = {}
    for u in make_plan(parse_config(cfg)).units:
        outs = [json.dumps({"name": [u.sample.id], "fact": [f"step {k}"]}) for k in range(16)]
        llm = ScriptedLLM(outs, name="engine-0")
        run_loop(u, 0, llm)
        for req, out in zip(llm.requests, outs):
            rec[prompt_of(req)] = Answer(out, 40, 10, 12, "stop")
    return rec


def test_both_placements_give_the_same_tables_on_replaying_engines(ray_local, tmp_path) -> None:
    import ray

    base = _config(tmp_path / "x", "driver", judges=[{"name": "sumie-exact"}])
    latency = LatencyModel(prefill_s_per_token=1e-5, decode_s_base=1e-4, decode_s_per_seq=1e-5)
    from memloop.jobs.sim.scale_sim import simulated_hosts

    sim = simulated_hosts(ray.put(_scripted_recording(base)), latency, ray.put(tokenizer_json()), per_process=2)
    stores = []
    for loops in ("driver", "engine"):
        cfg = _config(tmp_path / loops, loops)
        cfg["engine"].update(cpus_per_actor=0.01, actors=3)  # 3 hosts in 2 processes (2 + 1)
        summary = execute(make_plan(parse_config(cfg)), sim=sim, log=lambda m: None)
        assert summary.failed == 0 and summary.computed == 2, summary.errors
        engines = summary.stats["engine"]
        assert summary.stats["method_loops"] == loops and sum(e["misses"] for e in engines) == 0
        assert [e["hosts_in_process"] for e in engines] == [2, 2, 1]
        assert sum(e["requests"] for e in engines) == 4
        stores.append(RunStore.open(cfg["output"], summary.run_id))
    _assert_same_tables(*stores)
    assert len(stores[0].table("steps")) == 4  # 2 entities x 2 turns, each its own step


def test_a_failing_loop_is_recorded_alike_in_both_placements(ray_local, tmp_path) -> None:
    """A request the recording lacks fails its unit with the root cause, wherever the loop ran."""
    import ray
    from memloop.jobs.sim.scale_sim import simulated_hosts

    latency = LatencyModel(prefill_s_per_token=1e-5, decode_s_base=1e-4, decode_s_per_seq=1e-5)
    sim = simulated_hosts(ray.put({}), latency, ray.put(tokenizer_json()))
    errors = {}
    for loops in ("driver", "engine"):
        cfg = _config(tmp_path / loops, loops, judges=[])
        cfg["engine"].update(cpus_per_actor=0.01)
        summary = execute(make_plan(parse_config(cfg)), sim=sim, log=lambda m: None)
        assert (summary.computed, summary.failed) == (0, 2)
        samples = RunStore.open(cfg["output"], summary.run_id).table("samples").to_pandas()
        errors[loops] = sorted(samples["error"].str.split(" \\(").str[0])
    assert errors["driver"] == errors["engine"] == ["ReplayMiss: the recording has no answer for this prompt"] * 2


@pytest.fixture(scope="module")
def recorded(ray_local, tmp_path_factory) -> RunStore:
    """A real run on the real engine, method loops in the driver (the default placement)."""
    out = tmp_path_factory.mktemp("recorded")
    summary = execute(make_plan(parse_config(_config(out, "driver"))), log=lambda m: None)
    assert summary.failed == 0 and summary.computed == 2, summary.errors
    assert summary.stats["method_loops"] == "driver"
    return RunStore.open(str(out), summary.run_id)


def test_default_placement_is_the_driver() -> None:
    cfg = parse_config(_config(Path("/tmp/x"), "driver"))
    del_loops = json.loads(json.dumps(_config(Path("/tmp/x"), "driver")))
    del del_loops["engine"]["method_loops"]
    assert cfg.engine.method_loops == parse_config(del_loops).engine.method_loops == "driver"


@pytest.mark.slow
def test_method_loops_next_to_the_engine_give_the_same_tables(recorded, tmp_path) -> None:
    out = tmp_path / "engine-side"
    summary = execute(make_plan(parse_config(_config(out, "engine"))), log=lambda m: None)
    assert summary.failed == 0 and summary.computed == 2, summary.errors
    assert summary.stats["method_loops"] == "engine"
    assert summary.run_id == recorded.run_id  # placement is transport, not part of the run id
    _assert_same_tables(recorded, RunStore.open(str(out), summary.run_id))


def _replayed(recorded: RunStore, out: Path, loops: str, copies: int) -> tuple[RunStore, dict]:
    import ray
    from memloop.jobs.sim.scale_sim import load_recording, replicate, simulated_hosts

    rec = load_recording(recorded.uri)
    cfg = _config(out, loops, judges=[])
    cfg["engine"].update(actors=2, cpus_per_actor=0.01)
    latency = LatencyModel(prefill_s_per_token=1e-5, decode_s_base=1e-4, decode_s_per_seq=1e-5)
    sim = simulated_hosts(ray.put(rec.answers), latency, ray.put(tokenizer_json()))
    summary = execute(make_plan(parse_config(cfg)), sim=sim, units=lambda us: replicate(us, copies), log=lambda m: None)
    assert summary.failed == 0 and summary.computed == 2 * copies, summary.errors
    return RunStore.open(str(out), summary.run_id), summary.stats


@pytest.mark.slow
@pytest.mark.parametrize("loops", ["driver", "engine"])
def test_a_replayed_run_reproduces_the_recorded_steps(recorded, tmp_path, loops) -> None:
    rs, stats = _replayed(recorded, tmp_path / loops, loops, copies=3)
    engines = stats["engine"]
    assert sum(e["misses"] for e in engines) == 0 and all(e["simulated"] for e in engines)
    assert sum(e["requests"] for e in engines) == 3 * len(recorded.table("steps"))
    want = recorded.table("steps").to_pandas()
    got = rs.table("steps").to_pandas()
    got["sample_id"] = got["sample_id"].str.rsplit("~", n=1).str[0]  # the copies' ids name their original
    cols = ["sample_id", "step", "prompt", "output", "parsed_json", "memory_json", "prompt_tokens", "decoded_tokens"]
    for _, g in got.groupby(got["unit"].str.rsplit("~", n=1).str[1]):
        assert len(g) == len(want)
        pd.testing.assert_frame_equal(
            g[cols].sort_values(["sample_id", "step"]).reset_index(drop=True),
            want[cols].sort_values(["sample_id", "step"]).reset_index(drop=True),
            check_dtype=False,
        )  # (the copies' ids were cut with pandas string methods)
    # the resume reads the unit index; it agrees with reading every shard
    assert rs.done_units() == set(rs.samples().column("unit").to_pylist())


def test_replay_engine_batches_steps_and_refuses_unknown_prompts() -> None:
    rec = {"hello": Answer("world", 10, 4, 5, "stop"), "again": Answer("x", 8, 0, 3, "stop")}
    model = LatencyModel(prefill_s_per_token=1e-6, decode_s_base=1e-4, decode_s_per_seq=1e-5, max_batch=4)
    eng = ReplayEngine(rec, model.to_dict(), tokenizer_json())

    async def go():
        req = lambda p: LLMRequest(messages=({"role": "user", "content": p},))  # noqa: E731
        a, b = await asyncio.gather(eng.complete(req("hello")), eng.complete(req("again")))
        with pytest.raises(ReplayMiss, match="record a run of the current code"):
            await eng.complete(req("never recorded"))
        return a, b

    a, b = asyncio.run(go())
    assert a == {
        "text": "world",
        "usage": {"prompt_tokens": 10, "cached_tokens": 4, "decoded_tokens": 5},
        "finish_reason": "stop",
    }
    assert b["text"] == "x"
    s = eng.stats()
    # both joined one prefill step, then decoded together: 1 + max(5, 3) steps
    assert (s["requests"], s["misses"], s["steps"], s["decoded_tokens"]) == (2, 1, 6, 8)
    assert 0 < s["busy_fraction"] <= 1 and s["simulated"] is True
    assert eng.count_tokens("The lighthouse keeper") == __import__(
        "memloop.engine.model.tokenizer", fromlist=["x"]
    ).load_tokenizer(__import__("memloop.engine.assets", fromlist=["x"]).default_model_path()).count_tokens(
        "The lighthouse keeper"
    )


def test_engine_placement_needs_engine_actors(tmp_path) -> None:
    cfg = _config(tmp_path, "engine", model={"kind": "openai", "endpoint": {"base_url": "http://x", "model": "m"}})
    with pytest.raises(ConfigError, match="method_loops: driver"):
        parse_config(cfg)
    with pytest.raises(ConfigError, match="method_loops"):
        parse_config(_config(tmp_path, "threads"))


def test_scale_points_are_checked() -> None:
    from memloop.jobs.sim.scale_sim import parse_points

    assert parse_points("1x8, 64X64") == [(1, 8), (64, 64)]
    for bad in ("8", "0x4", "ax2"):
        with pytest.raises(ConfigError, match="--points"):
            parse_points(bad)


@pytest.mark.slow
def test_both_placements_give_identical_tables_on_the_demo_config(ray_local, tmp_path) -> None:
    demo = yaml.safe_load((ROOT / "jobs/configs/demo.yaml").read_text())
    demo["datasets"][1]["path"] = str(ROOT / demo["datasets"][1]["path"])
    stores = []
    for loops in ("driver", "engine"):
        cfg = dict(demo, output=str(tmp_path / loops), engine=dict(demo["engine"], method_loops=loops))
        summary = execute(make_plan(parse_config(cfg)), log=lambda m: None)
        assert summary.failed == 0 and summary.computed == 4, summary.errors
        stores.append(RunStore.open(cfg["output"], summary.run_id))
    _assert_same_tables(*stores)
