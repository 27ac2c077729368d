"""What happened at a method step: one closed set of outcomes, defined here once for every method.

Every `Step` (`memloop.eval.methods.step`) carries one `StepOutcome` (the `steps.outcome` column) and, for
revision steps, how many revisions it proposed, how many were applied and how many rejected.
`Trace.ask` sets the outcome from the call (ok, parse_failed, cut_at_max_tokens, empty); a method then
refines it where it knows more (a compression, a trim to K, a rejected revision list
(`memloop.eval.methods.step.record_revisions`), a tool call the harness could not run).

Three groups, which the report reads:
- succeeded (`SUCCEEDED`): the step did what it was asked;
- produced (`PRODUCED`): it did not succeed, but its output still went into the memory or the answer
  (a memory trimmed to K, an answer the harness had to ask for, a summary kept despite failing its check);
- nothing: every other outcome; the step added nothing.

A unit none of whose steps succeeded or produced anything has failed (`memloop.eval.methods.step.unit_failure`),
with the outcomes of its steps as the cause. This module knows outcomes only, never a step, so a step
can carry one.
"""

from __future__ import annotations

from enum import Enum
from typing import Any


class StepOutcome(str, Enum):
    OK = "ok"  # the step's output parsed and carries something
    COMPRESSED = "compressed"  # a compression call that returned a usable, smaller memory
    PARSE_FAILED = "parse_failed"  # no attempt's output parsed
    CUT_AT_MAX_TOKENS = "cut_at_max_tokens"  # no attempt parsed and the last one hit max_tokens
    EMPTY = "empty"  # parsed, but empty: {} / "" / no revisions / no edges / no note
    REJECTED = "rejected"  # revisions proposed, every one rejected (nothing applied)
    TRIMMED_TO_K = "trimmed_to_k"  # compression left the memory above K: cut deterministically
    EXTRACTION_FAILED = "extraction_failed"  # a KG extraction that did not parse: the chunk is not in the graph
    KEPT_INVALID = "kept_invalid"  # no attempt passed the method's check; the last output is used anyway
    TOOL_ERROR = "tool_error"  # a tool call that could not run (missing key, [ans]/[EOQ] misplaced)
    TOOL_CALL_CAP = "tool_call_cap"  # the chunk used all its tool calls
    FORCED_BY_HARNESS = "forced_by_harness"  # the harness asked for the answer itself ([ans] appended)

    def __str__(self) -> str:
        return self.value


OUTCOMES: tuple[str, ...] = tuple(o.value for o in StepOutcome)
SUCCEEDED: frozenset[str] = frozenset({StepOutcome.OK.value, StepOutcome.COMPRESSED.value})
PRODUCED: frozenset[str] = frozenset(
    {StepOutcome.TRIMMED_TO_K.value, StepOutcome.FORCED_BY_HARNESS.value, StepOutcome.KEPT_INVALID.value}
)


def succeeded(outcome: str) -> bool:
    return str(outcome) in SUCCEEDED


def is_empty(value: Any) -> bool:
    """A parsed value that carries nothing: None, blank text, an empty dict or list."""
    if value is None:
        return True
    if isinstance(value, str):
        return not value.strip()
    if isinstance(value, (dict, list, tuple)):
        return len(value) == 0
    return False


def call_outcome(ok: bool, cut: bool, parsed: Any) -> StepOutcome:
    """The outcome of a call as `Trace.ask` sees it: parsed or not, cut at max_tokens, empty."""
    if not ok:
        return StepOutcome.CUT_AT_MAX_TOKENS if cut else StepOutcome.PARSE_FAILED
    return StepOutcome.EMPTY if is_empty(parsed) else StepOutcome.OK
