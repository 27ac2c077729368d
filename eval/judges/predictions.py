"""What a judge scores of a method's output: each judge names one of these as its `prediction`.

Judges receive a `MethodOutput` (the final answer, the steps, the final memory) and the number of
chunks the sample had; most score the final answer, SUMIE scores one memory per turn.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from memloop.eval.methods.base import MethodOutput


def final_answer(output: "MethodOutput", n_chunks: int) -> Any:
    """The method's final answer."""
    return output.answer


def memory_per_turn(output: "MethodOutput", n_chunks: int) -> Any:
    """One prediction per turn: the memory after each chunk (a method sets `step.memory` to the memory
    after that step, also when the step failed; the last step of a chunk holds the memory after it).
    Methods that do not keep a memory per chunk (GO) give their final memory as the last turn. A
    memory that never parsed is an empty prediction ({}): it scores zero rather than hiding the unit."""
    per_chunk: dict[int, Any] = {}
    for s in output.steps:
        if s.chunk_index is not None:
            per_chunk[s.chunk_index] = s.memory
    if n_chunks > 1 and set(per_chunk) == set(range(n_chunks)):
        return [m if m is not None else {} for _, m in sorted(per_chunk.items())]
    return output.memory if output.memory is not None else {}
