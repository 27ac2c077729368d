"""One driver per run output at a time: the run's lock held, with a heartbeat, while units compute.

A second `memloop run` of the same config into the same output (another terminal, a nightly that
overlaps the previous one, another cluster) is refused at once with a message naming the holder,
instead of computing every unit twice. The holder refreshes the lock every `HEARTBEAT_S`; a lock
whose heartbeat is older than `STALE_AFTER_S` (its driver was killed without releasing it) is taken
over by exactly one newcomer (generation-matched, see `memloop.jobs.store.lock.acquire_lock`); a
holder on this host whose process is gone (kill -9) is taken over at once. A heartbeat that keeps
failing for `HEARTBEAT_GIVE_UP_S` (the storage is down) stops the run as a storage error, and a lock
that cannot be released is reported in one line (another run takes it over once it is stale).
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Callable, Iterator

from memloop.jobs.errors import LockHeldError, StorageError, error_text
from memloop.jobs.store.lock import STALE_AFTER_S
from memloop.jobs.store.run_store import RunStore

HEARTBEAT_S = 60.0
HEARTBEAT_GIVE_UP_S = 180.0  # well before STALE_AFTER_S: no other run may judge this one stale while it computes


@contextmanager
def run_lock(
    rs: RunStore,
    owner: str,
    log: Callable[[str], None],
    on_lost: Callable[[], None],
    heartbeat_s: float = HEARTBEAT_S,
    stale_after_s: float = STALE_AFTER_S,
    give_up_s: float = HEARTBEAT_GIVE_UP_S,
) -> Iterator[dict]:
    """Hold the run's lock for the block; `on_lost` is called (and state["lost"] set) if another
    process takes it over, or (state["storage_error"] set) if the heartbeat fails for `give_up_s`,
    so the caller stops computing."""
    lock = rs.acquire_lock(owner, stale_after_s=stale_after_s)
    if lock.took_over:
        h = lock.took_over
        log(
            f"took over the run lock of {h.get('owner')!r} (host {h.get('host')}, pid {h.get('pid')}, last heartbeat "
            f"{h.get('heartbeat_at')}): {lock.took_over_why}"
        )
    state: dict = {"lost": None, "storage_error": None}
    done = threading.Event()

    def beat() -> None:
        failing_since: float | None = None
        while not done.wait(heartbeat_s):
            try:
                lock.refresh()
                failing_since = None
            except LockHeldError as exc:
                state["lost"] = str(exc)
                log(f"lock lost: {exc}")
                on_lost()
                return
            except Exception as exc:  # a storage hiccup: try again at the next beat, for a while
                failing_since = failing_since or time.monotonic()
                if time.monotonic() - failing_since >= give_up_s:
                    state["storage_error"] = (
                        f"the run lock {lock.uri} could not be refreshed for {give_up_s:g} s ({error_text(exc)[:300]})"
                    )
                    log(f"stopping: {state['storage_error']}")
                    on_lost()
                    return
                log(f"lock heartbeat failed ({type(exc).__name__}: {exc}); retrying")

    t = threading.Thread(target=beat, daemon=True, name="run-lock")
    t.start()
    try:
        yield state
    finally:
        done.set()
        t.join(timeout=5)
        try:
            if not lock.release():
                log(f"the run lock {lock.uri} had been taken over; left it to its new holder")
        except StorageError as exc:  # the storage is failing: never hide the error being handled
            log(
                f"the run lock {lock.uri} was not removed ({error_text(exc)[:300]}); the next run on this host "
                f"takes it over, elsewhere after {stale_after_s:g} s without a heartbeat"
            )
