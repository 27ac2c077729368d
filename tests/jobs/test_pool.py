"""The worker pool on plain unit functions: retries, failure rows, deferred outcomes, lost lanes."""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor

from memloop.jobs.run.pool import Attempt, Outcome, WorkerPool


def _pool(items, run, **kw):
    flushed: list[dict] = []
    pool = WorkerPool(
        items,
        lanes=kw.pop("lanes", 2),
        per_lane=2,
        retries=kw.pop("retries", 2),
        run=run,
        failed_rows=lambda a, err, infra: {
            "samples": [{"item": a.item, "status": "failed", "error": err, "infrastructure": infra}]
        },
        flush=flushed.append,
        log=lambda m: None,
        flush_units=1,
        flush_s=0.1,
        **kw,
    )
    return pool, flushed


def _rows(flushed: list[dict]) -> list[dict]:
    return [r for batch in flushed for r in batch.get("samples", [])]


def test_every_item_is_recorded_once_and_retries_are_bounded() -> None:
    calls: dict[int, int] = {}

    def run(a: Attempt[int], lane: int) -> Outcome:
        calls[a.item] = calls.get(a.item, 0) + 1
        if a.item == 3:
            raise TimeoutError("always times out")
        if a.item == 4:
            raise ValueError("a deterministic error")
        if a.item == 5 and a.number == 0:
            raise ConnectionError("flaky once")
        return Outcome({"samples": [{"item": a.item, "status": "ok", "attempt": a.number}]})

    pool, flushed = _pool(list(range(8)), run)
    ok, failed = pool.run()
    rows = _rows(flushed)
    assert (ok, failed) == (6, 2) and sorted(r["item"] for r in rows) == list(range(8))
    assert calls[3] == 3 and calls[5] == 2  # 1 + retries, and a flaky item succeeds on its retry
    assert calls[4] == 1  # a deterministic error is not retried
    assert sorted(pool.errors) == ["TimeoutError: always times out", "ValueError: a deterministic error"]
    assert next(r for r in rows if r["item"] == 3)["error"] == "TimeoutError: always times out"
    # whatever an item raised is the infrastructure's, retried or not: a method's own failure is a row, never raised
    assert {r["item"]: r["infrastructure"] for r in rows if r["status"] == "failed"} == {3: True, 4: True}
    assert pool.infrastructure == 2


def test_an_incomplete_outcome_is_counted_apart_from_failures() -> None:
    """A judge that failed leaves the unit ok but incomplete: not a failed unit, yet counted."""
    pool, flushed = _pool(
        [0, 1],
        lambda a, lane: Outcome(
            {"samples": [{"item": a.item, "status": "ok"}]}, incomplete="judge kgscore: down" if a.item else None
        ),
    )
    assert pool.run() == (2, 0) and pool.infrastructure == 1 and pool.errors == ["judge kgscore: down"]


def test_deferred_outcomes_and_their_failures_count() -> None:
    ex = ThreadPoolExecutor(2)

    def run(a: Attempt[int], lane: int) -> Future:
        def later() -> Outcome:
            if a.item == 1:
                return Outcome({"samples": [{"item": 1, "status": "failed"}]}, error="judge x: refused")
            if a.item == 2:
                raise OSError("connection refused")
            return Outcome({"samples": [{"item": a.item, "status": "ok"}]})

        return ex.submit(later)

    pool, flushed = _pool([0, 1, 2, 3], run)
    assert pool.run() == (2, 2)
    assert sorted(pool.errors) == ["OSError: connection refused", "judge x: refused"]
    assert sorted(r["item"] for r in _rows(flushed)) == [0, 1, 2, 3]


def test_a_lost_lane_hands_its_items_to_the_others_and_all_lost_fails_the_rest() -> None:
    def run(a: Attempt[int], lane: int) -> Outcome:
        if lane == 0:
            raise ConnectionError("actor died")
        return Outcome({"samples": [{"item": a.item, "status": "ok", "lane": lane}]})

    pool, flushed = _pool(list(range(6)), run, lane_lost=lambda exc, lane: isinstance(exc, ConnectionError))
    assert pool.run() == (6, 0)
    assert {r["lane"] for r in _rows(flushed)} == {1}

    pool, flushed = _pool(list(range(3)), run, lanes=1, lane_lost=lambda exc, lane: True)
    assert pool.run() == (0, 3)
    assert all("every engine actor died" in r["error"] and r["infrastructure"] for r in _rows(flushed))


def test_progress_lines_off_a_terminal_and_a_bar_on_one(capsys) -> None:
    from memloop.jobs.run.progress import Progress

    lines: list[str] = []
    p = Progress(4, "/out/run", lines.append, interactive=False)
    p.update(2, 1, prompt=1000, cached=400, decoded=50)
    assert lines[0].startswith("progress: 2/4 units (1 failed)") and "cache hit 40.0%" in lines[0]
    bar = Progress(4, "/out/run", lines.append, interactive=True)
    bar.update(3, 0, prompt=100, cached=0, decoded=10)
    bar.close()
    err = capsys.readouterr().err
    assert "3/4" in err and "0 failed" in err and lines[-1] == "results -> /out/run"


def test_a_failure_that_cannot_be_recorded_never_leaves_the_pool_waiting() -> None:
    """`failed_rows` raising (a signature mismatch once hung `memloop rescore` at 0% CPU) counts the item
    failed, for a failure in the worker and for one a deferred outcome raised."""
    import threading

    def broken(a, err):  # two arguments where the pool passes three: a TypeError on every failure
        raise AssertionError("never called")

    def run(a: Attempt[int], lane: int) -> "Outcome | Future":
        if a.item == 0:
            raise ValueError("the judge failed")
        if a.item == 1:
            f: Future = Future()
            f.set_exception(ValueError("the deferred judge failed"))
            return f
        return Outcome({"samples": [{"item": a.item}]})

    pool = WorkerPool(
        list(range(4)),
        lanes=1,
        per_lane=2,
        retries=0,
        run=run,
        failed_rows=broken,
        flush=lambda rows: None,
        log=lambda m: None,
        flush_units=1,
        flush_s=0.1,
    )
    result: list = []
    t = threading.Thread(target=lambda: result.append(pool.run()), daemon=True)
    t.start()
    t.join(20)
    assert not t.is_alive(), "the pool waits forever on an item whose failure could not be recorded"
    assert result == [(2, 2)]
    assert all("could not be recorded" in e and "TypeError" in e for e in pool.errors), pool.errors
