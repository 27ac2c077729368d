"""Stopping a run cleanly: Ctrl-C and SIGTERM (`ray job stop`, a pod's termination) both interrupt
the run once; while finished units are saved, the manifest written and Ray shut down, a second
signal only prints a notice, so an impatient Ctrl-C cannot cut a shard or leave Ray processes
behind. A third one exits at once (status 130): a close that hangs (a storage that stopped
answering) never keeps the process alive against the user's will; every object is written whole,
so what is lost is only what was not yet saved."""

from __future__ import annotations

import os
import signal
import sys
import threading
from contextlib import contextmanager
from typing import Iterator

SIGNALS = (signal.SIGINT, signal.SIGTERM)
FORCE_AFTER = 3  # the signal that exits at once
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
    state = {"signals": 0}

    def handler(signum: int, frame) -> None:
        state["signals"] += 1
        name = signal.Signals(signum).name
        if state["signals"] >= FORCE_AFTER:
            print(
                f"{name}: stopping at once; units not yet saved are lost, run the same config again to resume",
                file=sys.stderr,
                flush=True,
            )
            os._exit(130)
        if state["signals"] > 1:
            print(
                f"{name}: still saving finished units and stopping Ray; one moment (signal once more to stop at once)",
                file=sys.stderr,
                flush=True,
            )
            return
        raise KeyboardInterrupt

    _active.append(handler)
    reassert()
    try:
        yield
    finally:
        _active.remove(handler)
        for s, h in previous.items():
            signal.signal(s, h)
