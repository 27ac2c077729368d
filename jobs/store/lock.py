"""The run lock as an object in the store (`{run}/.lock`): taken create-only, refreshed and released
only while its generation is still the one this process wrote, and taken over when its holder is gone
from this host or its heartbeat is stale. Holding it for a run, with the heartbeat, is `run_lock`.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import socket
from dataclasses import dataclass, field
from typing import Any

from memloop.jobs.errors import LockHeldError
from memloop.jobs.store.objects import ConflictError, NotFoundError, Store
from memloop.jobs.store.tables import now

LOCK_NAME = ".lock"
# A lock whose heartbeat is older than this belongs to a driver that is gone (`run_lock` refreshes every minute).
STALE_AFTER_S = 600.0
_LIVE_LOCKS: set[str] = set()  # the URIs of the locks this process holds now


def _iso(t: dt.datetime) -> str:
    return t.isoformat(timespec="seconds")


@dataclass
class Lock:
    """A held run lock: an object created create-only, refreshed and released only while its
    generation is still the one this process wrote (so a broken-and-retaken lock is never touched)."""

    store: Store
    name: str
    uri: str
    holder: dict[str, Any]
    generation: str
    released: bool = field(default=False)
    took_over: dict[str, Any] | None = None  # the dead or stale holder this lock was taken from
    took_over_why: str = ""

    def refresh(self) -> None:
        """Write a new heartbeat; raises LockHeldError when another process has taken the lock."""
        holder = dict(self.holder, heartbeat_at=_iso(now()))
        try:
            self.generation = self.store.replace(self.name, json.dumps(holder).encode(), self.generation)
        except (ConflictError, NotFoundError):
            raise LockHeldError(
                f"the lock {self.uri} was taken over by another process (it judged this one "
                "stale); stop this run: the other one computes the same units"
            ) from None
        self.holder = holder

    def __post_init__(self) -> None:
        _LIVE_LOCKS.add(self.uri)

    def release(self) -> bool:
        """Delete the lock if it is still ours; False when another process had taken it over."""
        if self.released:
            return True
        self.released = True
        _LIVE_LOCKS.discard(self.uri)  # even if the delete fails: this process no longer computes the run
        try:
            self.store.delete(self.name, self.generation)
            return True
        except ConflictError:
            return False

    def __enter__(self) -> "Lock":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def acquire_lock(
    store: Store, name: str, lock_uri: str, run_uri: str, owner: str, *, stale_after_s: float | None = None
) -> Lock:
    """Take the lock object `name` (created create-only) or raise LockHeldError naming the holder of
    run `run_uri`. A lock whose last heartbeat (`Lock.refresh`) is older than `stale_after_s` seconds is
    taken over with a generation-matched replace, so of two processes breaking the same stale lock
    exactly one wins. With `stale_after_s=None` a lock is never judged stale."""
    t = _iso(now())
    holder = {
        "owner": owner,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "pid_ns": _pid_namespace(),
        "acquired_at": t,
        "heartbeat_at": t,
    }
    data = json.dumps(holder).encode()
    for _ in range(3):  # the lock may be released between our create and our read
        try:
            return Lock(store, name, lock_uri, holder, store.put(name, data, mode="create"))
        except ConflictError:
            pass
        try:
            raw, gen = store.read(name)
        except NotFoundError:
            continue
        unreadable = None  # why the lock object does not say who holds it
        try:
            current = json.loads(raw)
            if not isinstance(current, dict):
                unreadable, current = f"a JSON {type(current).__name__}, not an object", {}
        except ValueError as exc:
            unreadable, current = f"not JSON: {str(exc)[:80]}", {}
        if unreadable:
            current = {"owner": "(unreadable lock object)", "heartbeat_at": None}
        dead = _holder_is_dead(current, lock_uri)
        if dead or (stale_after_s is not None and _age_s(current.get("heartbeat_at")) > stale_after_s):
            why = (
                "its process is gone from this host"
                if dead and current.get("pid") != os.getpid()
                else "its invocation in this process has ended"
                if dead
                else f"it is unreadable ({unreadable}), so it names no holder and no heartbeat"
                if unreadable
                else "it records no heartbeat"
                if not current.get("heartbeat_at")
                else f"its last heartbeat is over {stale_after_s:g} s old"
            )
            try:
                return Lock(
                    store, name, lock_uri, holder, store.replace(name, data, gen), took_over=current, took_over_why=why
                )
            except (ConflictError, NotFoundError):
                continue
        raise LockHeldError(
            f"run {run_uri} is being computed by {describe_holder(current)}; wait for it to "
            f"finish, or if that process is gone delete {lock_uri}",
            holder=current,
        )
    raise LockHeldError(f"the lock {lock_uri} keeps changing hands; another process is taking it", holder={})


def describe_holder(holder: dict[str, Any]) -> str:
    """A lock holder as messages name it: owner, host, pid, since when and its last heartbeat."""
    return (
        f"{holder.get('owner')!r} (host {holder.get('host')}, pid {holder.get('pid')}, since "
        f"{holder.get('acquired_at')}, last heartbeat {holder.get('heartbeat_at')})"
    )


def live_holder(store: Store, name: str, lock_uri: str, stale_after_s: float = STALE_AFTER_S) -> dict[str, Any] | None:
    """Who holds the lock object `name` and is computing now: None when there is no lock, it names no holder,
    its holder is gone from this host, or its heartbeat is older than `stale_after_s` (a lock `acquire_lock`
    would take over)."""
    try:
        raw, _ = store.read(name)
    except NotFoundError:
        return None
    try:
        holder = json.loads(raw)
    except ValueError:
        return None
    if (
        not isinstance(holder, dict)
        or _holder_is_dead(holder, lock_uri)
        or _age_s(holder.get("heartbeat_at")) > stale_after_s
    ):
        return None
    return holder


def _pid_namespace() -> int | None:
    """The inode of this process's PID namespace: two containers may share a host name, not this."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return None


def _holder_is_dead(holder: dict[str, Any], lock_uri: str) -> bool:
    """True when the lock's holder ran on this host (same PID namespace) and its process is gone,
    e.g. a driver killed with kill -9, or it is this process and no longer holds it (its release
    failed during a storage outage): the lock can be taken over at once. A reused PID reads as
    alive, and a holder on another host is judged by its heartbeat only."""
    pid = holder.get("pid")
    if (
        holder.get("host") != socket.gethostname()
        or not isinstance(pid, int)
        or pid <= 0
        or holder.get("pid_ns") is None
        or holder.get("pid_ns") != _pid_namespace()
    ):
        return False
    if pid == os.getpid():
        return lock_uri not in _LIVE_LOCKS
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # exists, owned by another user
        return False
    return False


def _age_s(iso: str | None) -> float:
    if not iso:
        return float("inf")
    try:
        return (now() - dt.datetime.fromisoformat(iso)).total_seconds()
    except ValueError:
        return float("inf")
