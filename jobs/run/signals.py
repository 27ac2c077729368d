"""Stopping a run cleanly: Ctrl-C and SIGTERM (`ray job stop`, a pod's termination) both interrupt
the run once; while finished units are saved, the manifest written and Ray shut down, further
signals only print a notice, so a second Ctrl-C cannot cut a shard or leave Ray processes behind."""
from __future__ import annotations

import signal
import sys
import threading
from contextlib import contextmanager
from typing import Iterator

SIGNALS = (signal.SIGINT, signal.SIGTERM)
_active: list = []  # the handler of the guard in force, if any


def reassert() -> None:
    """Install the guard's handler again: `ray.init` replaces the SIGTERM handler with a plain exit."""
    if _active and threading.current_thread() is threading.main_thread():
        for s in SIGNALS:
            signal.signal(s, _active[-1])


@contextmanager
def graceful_interrupts() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():  # only the main thread may set handlers
        yield
        return
    previous = {s: signal.getsignal(s) for s in SIGNALS}
    state = {"interrupted": False}

    def handler(signum: int, frame) -> None:
        if state["interrupted"]:
            print(f"{signal.Signals(signum).name}: still saving finished units and stopping Ray; one moment",
                  file=sys.stderr, flush=True)
            return
        state["interrupted"] = True
        raise KeyboardInterrupt

    _active.append(handler)
    reassert()
    try:
        yield
    finally:
        _active.remove(handler)
        for s, h in previous.items():
            signal.signal(s, h)
