"""Handles to the processes a run drives: one actor process serving several engine hosts
(`PackedHandle`; a real run packs one host per worker, the scale simulation many), and the
process's own memory (`rss_mb`) that the workers report with their statistics."""

from __future__ import annotations

import os
import resource
from typing import Any


class _Bound:
    __slots__ = ("method", "index")

    def __init__(self, method: Any, index: int) -> None:
        self.method, self.index = method, index

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        return self.method.remote(*args, host=self.index, **kwargs)


class PackedHandle:
    """One of several hosts served by one actor process, used like an actor handle of its own:
    `handle.complete.remote(request)` calls `actor.complete.remote(request, host=index)`."""

    def __init__(self, actor: Any, index: int) -> None:
        self.actor, self.index = actor, index

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            if name == "__ray_call__":  # where the actor runs (node affinity) is the process's
                return self.actor.__ray_call__
            raise AttributeError(name)
        return _Bound(getattr(self.actor, name), self.index)

    def __reduce__(self):
        return (PackedHandle, (self.actor, self.index))


def packed_handles(actors: list[Any], per_actor: int, total: int) -> list[PackedHandle]:
    """`total` handles over `actors`, each serving `per_actor` hosts (host i -> actor i // per_actor)."""
    return [PackedHandle(actors[i // per_actor], i % per_actor) for i in range(total)]


def rss_mb() -> float:
    """This process's resident memory now (Linux /proc), else its peak."""
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
