"""Shards written by the process that produced the rows, and what a fault between the writes leaves.

The engines are `ReplayEngine` actors answering a scripted recording (real Ray, real method loops,
real Parquet); the judge is `sumie-exact`, run as Ray tasks. Every file names its writer in its
Parquet metadata, which is how the tests see which process wrote what.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import threading
import time
from pathlib import Path

import pytest
from memloop.jobs.run.config import parse_config
from memloop.jobs.run.driver import execute
from memloop.jobs.run.plan import make_plan
from memloop.jobs.sim.replay import LatencyModel, tokenizer_json
from memloop.jobs.store.run_files import new_shard_name
from memloop.jobs.store.run_store import RunStore

from tests.jobs import test_scale
from tests.jobs.test_scale import _config, _scripted_recording

FAST = LatencyModel(prefill_s_per_token=1e-5, decode_s_base=1e-4, decode_s_per_seq=1e-5)


def _cfg(out: Path, loops: str, **over) -> dict:
    cfg = _config(
        out,
        loops,
        datasets=[{"task": "sumie", "synthetic": {"entities": 3, "seed": 5}, "options": {"max_chunks": 2}}],
        shard_rows=1,
        **over,
    )
    cfg["engine"].update(actors=2, cpus_per_actor=0.01)
    return cfg


@pytest.fixture(scope="module")
def sim(ray_local):
    import ray
    from memloop.jobs.sim.scale_sim import simulated_hosts

    rec = _scripted_recording(_cfg(Path("/tmp/x"), "driver"))
    return simulated_hosts(ray.put(rec), FAST, ray.put(tokenizer_json()), per_process=2)


def _assert_same_tables(a: RunStore, b: RunStore) -> None:
    """test_scale's comparison, less the lane a unit happened to run on."""
    old = list(test_scale.TRANSPORT)
    test_scale.TRANSPORT.append("actor")
    try:
        test_scale._assert_same_tables(a, b)
    finally:
        test_scale.TRANSPORT[:] = old


def _writers(rs: RunStore) -> dict[str, set[tuple[str, int]]]:
    """{table: {(role, pid)}} over every file of the run's committed shards."""
    out: dict[str, set[tuple[str, int]]] = {}
    for c in rs.table("samples").column("shard").unique().to_pylist():
        for table in ("samples", "steps", "judgments", "scores"):
            for name in rs.store.list(rs.name(table)):
                if name.rsplit("/", 1)[-1].startswith(c):
                    w = rs.writer_of(name[len(rs.run_id) + 1 :])
                    out.setdefault(table, set()).add((w["role"], w["pid"]))
    return out


@pytest.mark.parametrize("judged", [False, True])
def test_the_method_worker_writes_its_units_shards(sim, tmp_path, judged) -> None:
    """With the loops beside the engines the driver writes no row of a finished unit: the worker
    writes the steps (and, without judges, the samples file that commits the shard), each judge
    task its judgments and scores, and a commit task the samples file after them."""
    cfg = _cfg(tmp_path, "engine", **({} if judged else {"judges": []}))
    summary = execute(make_plan(parse_config(cfg)), sim=sim, log=lambda m: None)
    assert (summary.computed, summary.failed) == (3, 0), summary.errors
    assert summary.stats["driver_cpu_s"]["write"] == 0.0  # the driver encoded and wrote nothing
    rs = RunStore.open(cfg["output"], summary.run_id)
    writers = _writers(rs)
    me = os.getpid()
    assert {r for r, _ in writers["steps"]} == {"method-worker"} and me not in {p for _, p in writers["steps"]}
    if judged:
        assert {r for r, _ in writers["samples"]} == {"commit-task"}
        assert {r for r, _ in writers["judgments"] | writers["scores"]} == {"judge-task"}
    else:
        assert {r for r, _ in writers["samples"]} == {"method-worker"}
    assert me not in {p for ws in writers.values() for _, p in ws}
    # the driver still knows every shard: its unit index lists them, and the resume reads it
    assert len(rs.store.list(rs.name("index"))) == 1 and len(rs.done_units()) == 3
    assert execute(make_plan(parse_config(cfg)), sim=sim, log=lambda m: None).skipped == 3


def test_loops_in_the_driver_have_the_driver_write_and_give_the_same_tables(sim, tmp_path) -> None:
    stores = []
    for loops in ("driver", "engine"):
        cfg = _cfg(tmp_path / loops, loops)
        summary = execute(make_plan(parse_config(cfg)), sim=sim, log=lambda m: None)
        assert (summary.computed, summary.failed) == (3, 0), summary.errors
        stores.append(RunStore.open(cfg["output"], summary.run_id))
    _assert_same_tables(*stores)
    writers = _writers(stores[0])
    assert writers["steps"] == {("driver", os.getpid())}  # the loops ran here, so their rows were written here
    assert {r for r, _ in writers["samples"]} == {"commit-task"}  # judged units: after their judges


@pytest.mark.parametrize(
    "loops,blocked", [("engine", "steps"), ("engine", "scores"), ("engine", "samples"), ("driver", "samples")]
)
def test_a_fault_between_a_units_writes_leaves_nothing_half_recorded(sim, tmp_path, loops, blocked) -> None:
    """A file where the `blocked` table's directory should be makes every write to it fail (a real
    I/O error, whichever process writes). A failed steps or judge write fails its unit; a failed
    samples write (the commit) stops the run like a crash, after the steps and judge parts landed.
    Either way no reader sees a unit's partial rows, and a resume computes exactly the units that
    were not committed ok, giving the tables of a run without the fault."""
    clean_cfg = _cfg(tmp_path / "clean", loops)
    clean = execute(make_plan(parse_config(clean_cfg)), sim=sim, log=lambda m: None)
    assert (clean.computed, clean.failed) == (3, 0), clean.errors
    cfg = _cfg(tmp_path / "faulty", loops)
    first = execute(make_plan(parse_config(cfg)), sim=sim, units=lambda us: us[:1], log=lambda m: None)
    assert first.computed == 1  # one unit committed before the fault
    run = Path(cfg["output"]) / first.run_id
    moved = run / f"{blocked}.kept"

    def block(run_id: str, uri: str) -> None:  # once the run has checked its output: a fault mid-run
        (run / blocked).mkdir(exist_ok=True)
        (run / blocked).rename(moved)
        (run / blocked).write_text("in the way")

    if blocked == "samples":  # the commit fails: the run stops cleanly (exit 4) with what it had written
        faulty = execute(make_plan(parse_config(cfg)), sim=sim, log=lambda m: None, on_ready=block)
        assert faulty.storage_error and "cannot write" in faulty.storage_error and faulty.exit_code() == 4
    else:  # the committed unit's own steps or judge file is out of reach too when the resume checks
        # its shard (the hook runs before that check): it is not trusted as done and fails with the others
        faulty = execute(make_plan(parse_config(cfg)), sim=sim, log=lambda m: None, on_ready=block)
        assert (faulty.computed, faulty.failed) == (0, 3)
    (run / blocked).unlink()
    moved.rename(run / blocked)
    rs = RunStore.open(cfg["output"], first.run_id)
    ok = {u for u, s in zip(*(rs.samples().column(c).to_pylist() for c in ("unit", "status"))) if s == "ok"}
    assert len(ok) == 1 and rs.done_units() == ok
    if blocked != "steps":  # the parts written before the fault are there, and invisible
        assert len(list((run / "steps").glob("*.parquet"))) > len(list((run / "samples").glob("*.parquet")))
    resumed = execute(make_plan(parse_config(cfg)), sim=sim, log=lambda m: None)
    assert (resumed.skipped, resumed.computed, resumed.failed) == (1, 2, 0), resumed.errors
    _assert_same_tables(RunStore.open(clean_cfg["output"], clean.run_id), RunStore.open(cfg["output"], first.run_id))


def _stalls(folder: str, driver: int) -> "_StallOnce":
    return _StallOnce(folder, driver)


class _StallOnce:
    """Sent to a judge task inside its unit's metadata. Where it is unpickled (the task's process, never the
    driver) it writes that process's pid and waits there while `folder/armed` exists: the test kills the
    process at that point, as Ray's memory monitor kills task processes on a host short of memory."""

    def __init__(self, folder: str, driver: int) -> None:
        self.folder, self.driver = folder, driver

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (_arrived, (self.folder, self.driver))


def _arrived(folder: str, driver: int) -> _StallOnce:
    if os.getpid() != driver and (Path(folder) / "armed").exists():
        (Path(folder) / "pid").write_text(str(os.getpid()))
        while (Path(folder) / "armed").exists():
            time.sleep(0.02)
    return _StallOnce(folder, driver)


def test_a_judge_task_whose_process_is_killed_runs_again_and_its_unit_is_committed_ok(sim, tmp_path) -> None:
    """A loaded host's Ray kills task processes when memory runs short (its memory monitor); with
    `retries: 0` a killed judge task used to fail its unit in a run with no fault of its own (the
    reference run of the test above, now and then). The task runs again: the unit is ok and scored."""
    folder = tmp_path / "stall"
    folder.mkdir()
    (folder / "armed").touch()
    probe = _stalls(str(folder), os.getpid())

    def with_probe(units: list) -> list:
        u = units[0]
        return [
            dataclasses.replace(u, sample=dataclasses.replace(u.sample, metadata={**u.sample.metadata, "probe": probe}))
        ]

    killed: list[int] = []

    def kill_it() -> None:  # the task's process, while it waits in the probe
        while not (folder / "pid").exists():
            time.sleep(0.02)
        pid = int((folder / "pid").read_text())
        (folder / "armed").unlink()
        os.kill(pid, signal.SIGKILL)
        killed.append(pid)

    killer = threading.Thread(target=kill_it, daemon=True)
    killer.start()
    cfg = _cfg(tmp_path, "driver")
    assert cfg["retries"] == 0
    summary = execute(make_plan(parse_config(cfg)), sim=sim, units=with_probe, log=lambda m: None)
    killer.join(timeout=60)
    assert killed, "the judge task never reached the probe"
    assert (summary.computed, summary.failed, summary.incomplete) == (1, 0, 0), summary.errors
    rs = RunStore.open(cfg["output"], summary.run_id)
    assert rs.samples().column("status").to_pylist() == ["ok"]
    assert rs.table("scores").num_rows > 0


def test_a_commit_run_again_after_it_wrote_finds_its_own_file_and_is_committed(tmp_path) -> None:
    """Ray runs a commit task again when its process died, also after the samples file was written: that
    run finds its own file (create-only) and reports the same commit instead of failing the unit; a
    different commit under the same shard name is still refused."""
    from memloop.jobs.store.objects import ConflictError

    rs = RunStore.open(str(tmp_path / "runs"), "commit-twice", role="commit-task")
    shard = new_shard_name()
    row = {
        "unit": "d|s1|m|0",
        "dataset": "d",
        "task": "sumie",
        "sample_id": "s1",
        "method": "m",
        "repeat": 0,
        "status": "ok",
        "attempts": 1,
    }
    first = rs.commit(shard, [row], [], keep=False)
    again = rs.commit(shard, [row], [], keep=False)
    assert again == first
    with pytest.raises(ConflictError):
        rs.commit(shard, [dict(row, unit="u2")], [], keep=False)
