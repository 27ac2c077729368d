"""One LLM step of a method, as the steps table stores it, and what a unit's steps add up to.

`Step` records a call (all its attempts): the prompt, output, parsed value, memory after it, token
usage and failures, and its outcome (`memloop.eval.methods.outcomes.StepOutcome`). The functions here read
or set a step's outcome where a method knows more than the call did (`record_revisions`), and say
whether a unit whose steps all came to nothing has failed (`unit_failure`).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable

from memloop.eval.llm import Usage
from memloop.eval.methods.outcomes import PRODUCED, SUCCEEDED, StepOutcome


@dataclass
class Step:
    """One LLM call of a method (all its attempts), as stored in the steps table."""

    index: int
    kind: str  # e.g. "initial", "update", "merge", "compress", "revise", "tool", "extract", "final"
    template_id: str
    template_sha256: str
    prompt: str
    output: str
    parsed: Any = None
    memory: Any = None
    usage: Usage = field(default_factory=Usage)
    attempts: int = 1
    failures: list[str] = field(default_factory=list)
    chunk_index: int | None = None
    ok: bool = True  # the output parsed (methods branch on this; `outcome` says more)
    outcome: StepOutcome = StepOutcome.OK
    revisions_proposed: int = 0
    revisions_accepted: int = 0
    revisions_rejected: int = 0
    retry_usage: Usage = field(default_factory=Usage)  # the rejected attempts before the kept one
    cut: bool = False  # the kept (last) attempt reached max_tokens (finish_reason "length")
    # when the call (all its attempts) began and ended, seconds since the epoch (None: not an LLM call of its own)
    started_at: float | None = None
    finished_at: float | None = None
    # the memory as the next prompt carries it, where that text is not the memory's compact JSON (PRISM's
    # indented in-place JSON, or the base plus amendment lines); None: the compact JSON of `memory`
    memory_text: str | None = None


def record_revisions(step: Step, proposed: int, accepted: int, rejected: int) -> None:
    """Counts of a revision step, and its outcome: empty (none proposed), rejected (none applied), or ok."""
    step.revisions_proposed, step.revisions_accepted, step.revisions_rejected = proposed, accepted, rejected
    if proposed == 0:
        step.outcome = StepOutcome.EMPTY
    elif accepted == 0:
        step.outcome = StepOutcome.REJECTED
    else:
        step.outcome = StepOutcome.OK


def outcome_counts(steps: Iterable[Step]) -> Counter[str]:
    return Counter(str(s.outcome) for s in steps)


def unit_failure(steps: list[Step]) -> str | None:
    """Why a unit failed when none of its steps succeeded or produced anything (None: it did not fail)."""
    if not steps or any(str(s.outcome) in SUCCEEDED | PRODUCED for s in steps):
        return None
    counts = ", ".join(f"{n} {o}" for o, n in sorted(outcome_counts(steps).items()))
    first = steps[0]
    why = "; ".join(first.failures)[:300] or str(first.outcome)
    return (
        f"no step produced anything ({len(steps)} step(s): {counts}); "
        f"step {first.index} ({first.kind}) {first.outcome}: {why}"
    )
