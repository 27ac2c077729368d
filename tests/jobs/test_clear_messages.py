"""Messages that named the wrong thing or left out what to do (issue 45, "Messages"): each is now one
line naming the real cause and the fix."""

from __future__ import annotations

import pytest
from memloop.eval.datasets.sumie.generator import write_sumie_jsonl
from memloop.jobs.errors import ConfigError
from memloop.jobs.run.config import parse_config
from memloop.jobs.run.plan import make_plan
from memloop.jobs.store.run_store import RunStore


def _cfg(tmp_path, **over) -> dict:
    cfg = {
        "name": "msg",
        "output": str(tmp_path / "runs"),
        "methods": [{"name": "gu-json"}],
        "datasets": [{"task": "sumie", "synthetic": {"entities": 1, "seed": 5}}],
    }
    cfg.update(over)
    return cfg


def test_a_huge_top_level_seed_is_reported_as_the_runs_seed(tmp_path) -> None:
    """It used to read as the error of a method option (`methods.0.options`: ... `seed`)."""
    with pytest.raises(ConfigError) as err:
        parse_config(_cfg(tmp_path, seed=2**80))
    msg = str(err.value)
    assert "`seed`: Value error, at most 9,223,372,036,854,775,707 as the run's seed" in msg and "methods" not in msg
    assert make_plan(parse_config(_cfg(tmp_path, seed=2**63 - 101, repeats=100))).units  # the largest that fits


def test_a_sample_twice_in_one_dataset_is_not_called_two_datasets(tmp_path) -> None:
    path = write_sumie_jsonl(tmp_path / "s.jsonl", 1, seed=1)
    line = path.read_text()
    (tmp_path / "dup.jsonl").write_text(line + line)
    with pytest.raises(
        ConfigError,
        match=r"^`datasets\.0`: 'sumie:dup' holds sample '[^']+' twice \(two records with "
        r"the same id\); remove the duplicate record",
    ):
        make_plan(parse_config(_cfg(tmp_path, datasets=[{"task": "sumie", "path": str(tmp_path / "dup.jsonl")}])))
    same = {"task": "sumie", "path": str(path)}
    with pytest.raises(ConfigError, match=r"^`datasets\.0` and `datasets\.1` both produce sample"):
        make_plan(parse_config(_cfg(tmp_path, datasets=[same, same])))


def test_too_many_synthetic_entities_names_the_maximum(tmp_path) -> None:
    with pytest.raises(
        ConfigError,
        match=r"entities: at most 2,563 can be generated \(got 10,000\): the hotel "
        r"category has 512 distinct names; lower `entities` to 2,563 or less",
    ):
        make_plan(parse_config(_cfg(tmp_path, datasets=[{"task": "sumie", "synthetic": {"entities": 10_000}}])))


def test_the_maximum_number_of_entities_can_be_generated() -> None:
    """Up to the maximum every name is found, also the last few, which random draws keep missing."""
    from memloop.eval.datasets.sumie.generator import generate_sumie, max_entities
    from memloop.eval.datasets.sumie.vocab import CATEGORIES

    most = max_entities(CATEGORIES)
    names = [(r["entity_category"], r["entity_name"]) for r in generate_sumie(most, seed=3)]
    assert len(names) == len(set(names)) == most


def test_an_unreadable_lock_is_taken_over_for_what_it_is(tmp_path) -> None:
    """It used to be taken over "because its last heartbeat is over 600 s old", a heartbeat it never had."""
    rs = RunStore.open(str(tmp_path), "locked")
    rs.store.put(rs.name(".lock"), b"\x00garbage", mode="create")
    lock = rs.acquire_lock("me", stale_after_s=600)
    assert (
        lock.took_over_why.startswith("it is unreadable (not JSON: ")
        and "names no holder and no heartbeat" in lock.took_over_why
    )
    lock.release()
    rs.store.put(rs.name(".lock"), b'{"owner": "old", "host": "elsewhere"}', mode="create")
    lock = rs.acquire_lock("me", stale_after_s=600)
    assert lock.took_over_why == "it records no heartbeat"
    lock.release()
