"""`engine.method_loops: auto` (the default) picks where the method loops run from hosts x loops, by
the crossover `memloop bench scale` measured; the placement is transport, never part of the run id."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from memloop.jobs.run.config import AUTO_ENGINE_ABOVE_LOOPS, parse_config
from memloop.jobs.run.plan import identity, run_id_of

ROOT = Path(__file__).resolve().parents[2]


def _demo(**engine) -> dict:
    demo = yaml.safe_load((ROOT / "jobs/configs/demo.yaml").read_text())
    demo["engine"] = dict(demo["engine"], **engine)
    return demo


@pytest.mark.parametrize(
    "actors,loops,want",
    [
        (1, 8, "driver"),
        (16, 32, "driver"),
        (2, AUTO_ENGINE_ABOVE_LOOPS // 2, "driver"),
        (2, AUTO_ENGINE_ABOVE_LOOPS // 2 + 1, "engine"),
        (17, 32, "engine"),
        (64, 64, "engine"),
        (1, 4096, "driver"),  # one host: a process of its own buys nothing
    ],
)
def test_auto_picks_the_placement_by_hosts_times_loops(actors, loops, want) -> None:
    assert AUTO_ENGINE_ABOVE_LOOPS == 16 * 32  # the largest measured size the driver's threads kept >= 90% busy
    explicit = parse_config(_demo(actors=actors, max_in_flight=loops, method_loops="auto"))
    left_out = _demo(actors=actors, max_in_flight=loops)
    left_out["engine"].pop("method_loops", None)
    assert explicit.engine.method_loops == parse_config(left_out).engine.method_loops == want


def test_auto_keeps_the_loops_in_the_driver_for_an_endpoint_and_a_set_placement_stays() -> None:
    cfg = _demo(actors=64, max_in_flight=64)
    cfg["model"] = {"kind": "openai", "endpoint": {"base_url": "http://127.0.0.1:1/v1", "model": "m"}}
    assert parse_config(cfg).engine.method_loops == "driver"
    assert parse_config(_demo(actors=64, max_in_flight=64, method_loops="driver")).engine.method_loops == "driver"
    assert parse_config(_demo(actors=1, max_in_flight=8, method_loops="engine")).engine.method_loops == "engine"
    # a parsed config dumped and read again keeps its placement
    c = parse_config(_demo(actors=64, max_in_flight=64))
    assert parse_config(c.model_dump()).engine.method_loops == "engine"


def test_the_placement_is_not_part_of_the_run_id() -> None:
    ids = set()
    for engine in (
        {},
        {"method_loops": "auto"},
        {"method_loops": "driver"},
        {"method_loops": "engine"},
        {"actors": 64, "max_in_flight": 64},
        {"actors": 64, "max_in_flight": 64, "method_loops": "driver"},
    ):
        cfg = parse_config(_demo(**engine))
        ids.add(run_id_of(cfg.name, identity(cfg, "weights-digest")))
    old_style = copy.deepcopy(_demo())  # a config from before `auto`: no method_loops at all
    ids.add(run_id_of("demo", identity(parse_config(old_style), "weights-digest")))
    assert len(ids) == 1
