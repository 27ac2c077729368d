"""One driver per run output at a time: the run's lock held, with a heartbeat, while units compute.

A second `memloop run` of the same config into the same output (another terminal, a nightly that
overlaps the previous one, another cluster) is refused at once with a message naming the holder,
instead of computing every unit twice. The holder refreshes the lock every `HEARTBEAT_S`; a lock
whose heartbeat is older than `STALE_AFTER_S` (its driver was killed without releasing it) is taken
over by exactly one newcomer (generation-matched, see `jobs.store.storage.RunStore.acquire_lock`).
"""
from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Callable, Iterator

from jobs.errors import LockHeldError
from jobs.store.storage import RunStore

HEARTBEAT_S = 60.0
STALE_AFTER_S = 600.0


@contextmanager
def run_lock(rs: RunStore, owner: str, log: Callable[[str], None], on_lost: Callable[[], None],
             heartbeat_s: float = HEARTBEAT_S, stale_after_s: float = STALE_AFTER_S) -> Iterator[dict]:
    """Hold the run's lock for the block; `on_lost` is called (and state["lost"] set) if another
    process takes it over, so the caller stops computing."""
    lock = rs.acquire_lock(owner, stale_after_s=stale_after_s)
    state: dict = {"lost": None}
    done = threading.Event()

    def beat() -> None:
        while not done.wait(heartbeat_s):
            try:
                lock.refresh()
            except LockHeldError as exc:
                state["lost"] = str(exc)
                log(f"lock lost: {exc}")
                on_lost()
                return
            except Exception as exc:  # a storage hiccup: try again at the next beat
                log(f"lock heartbeat failed ({type(exc).__name__}: {exc}); retrying")

    t = threading.Thread(target=beat, daemon=True, name="run-lock")
    t.start()
    try:
        yield state
    finally:
        done.set()
        t.join(timeout=5)
        if not lock.release():
            log(f"the run lock {lock.uri} had been taken over; left it to its new holder")
