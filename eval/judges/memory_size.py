"""Seed 000 appendix A: the tokens of existing information each turn's prompt receives.

Turn t (chunk t, t >= 1) is prompted with the memory carried out of the turns before it: the memory
at the end of turn t-1, after any compression or trim to K, which is what the GU update and the CoK
revise prompts receive. Memories a turn holds before it is compressed reach no prompt and are not
counted; turn 0 has no existing information. A method that never carries a memory into a later
turn (GO: one call) has no such turns.
"""

from __future__ import annotations

from typing import Any, Iterable


def carried_memories(steps: Iterable[tuple[int | None, Any]]) -> list[Any]:
    """The memory each turn t >= 1 receives, from a sample's steps in order as (chunk index, memory
    after the step); steps without a chunk (a final summary) or without a memory are skipped."""
    last: dict[int, Any] = {}
    for chunk, memory in steps:
        if chunk is not None and memory is not None:
            last[int(chunk)] = memory
    out: list[Any] = []
    carried = None
    for t in range(1, max(last, default=0) + 1):
        carried = last.get(t - 1, carried)
        if carried is not None:
            out.append(carried)
    return out
