"""Glue between methods and memloop.eval.memory: revision parsing for both output modes, applying, recording."""

from __future__ import annotations

import copy
from typing import Any, Callable, Sequence

from memloop.eval.asking import ParseFailure
from memloop.eval.memory import (
    ParsedRevisions,
    Revision,
    RevisionParseError,
    Schema,
    apply_revisions,
    parse_revision_list,
    revision_list_schema,
)
from memloop.eval.methods.step import Step, record_revisions

THOUGHT_FIELDS = ("thoughts_for_update", "thoughts_for_add")


def constrained_schema(
    schema: Schema, ops: Sequence[str], thoughts: bool, max_items: int | None = None
) -> dict[str, Any]:
    """{"revisions": [...]} of memloop.eval.memory, optionally preceded by the CoK thought lists.

    `max_items` bounds the revisions per step (small models otherwise repeat revisions until
    max_tokens cuts the JSON); None keeps the papers' unbounded list.
    """
    js = copy.deepcopy(revision_list_schema(schema, ops))
    if max_items is not None:
        js["properties"]["revisions"]["maxItems"] = max_items
    if thoughts:
        props = {f: {"type": "array", "items": {"type": "string"}} for f in THOUGHT_FIELDS}
        props.update(js["properties"])
        js["properties"] = props
        js["required"] = list(THOUGHT_FIELDS) + js["required"]
    return js


def revision_parser(
    constrained: bool, text_parser: Callable[[str], ParsedRevisions], ops: Sequence[str], keep_complete: bool = False
) -> Callable[[str], ParsedRevisions]:
    """Parse constrained JSON or the sectioned text format; an output with no revisions section retries.

    `keep_complete`: a constrained output cut at max_tokens keeps its complete revisions (see
    `parse_revision_list`) instead of failing the step.
    """

    def parse(text: str) -> ParsedRevisions:
        try:
            parsed = parse_revision_list(text, keep_complete) if constrained else text_parser(text)
        except RevisionParseError as exc:
            raise ParseFailure(str(exc)) from None
        banned = [r for r in parsed.revisions if r.op not in ops]
        if banned:
            from memloop.eval.memory import Rejection

            parsed.revisions = [r for r in parsed.revisions if r.op in ops]
            parsed.rejected += [
                Rejection(f"{r.op} is not allowed in this variant (ops: {list(ops)})", revision=r) for r in banned
            ]
        return parsed

    return parse


def apply_step(
    step: Step,
    memory: dict[str, Any],
    schema: Schema,
    prepare: Callable[[dict[str, Any], Revision], Revision] | None = None,
) -> tuple[dict[str, Any], list]:
    """Apply a parsed step's revisions; rejections become the step's failures and its counts (outcome
    empty, rejected or ok: `memloop.eval.methods.step.record_revisions`). Returns (memory, applied).

    `prepare(memory so far, proposed) -> revision to apply` lets a method give an op its own meaning
    (CoK's `update` adds to the stored value); the step records the proposals and what was applied."""
    if not step.ok:
        return memory, []
    parsed: ParsedRevisions = step.parsed
    if prepare is None:
        res = apply_revisions(memory, parsed.revisions, schema)
    else:
        res = apply_revisions(memory, [], schema)
        for rev in parsed.revisions:
            one = apply_revisions(res.memory, [prepare(res.memory, rev)], schema)
            res.memory = one.memory
            res.applied += one.applied
            res.rejected += one.rejected
    rejections = list(parsed.rejected) + list(res.rejected)
    record_failures(step, rejections)
    record_revisions(step, len(parsed.revisions) + len(parsed.rejected), len(res.applied), len(rejections))
    step.parsed = {"revisions": [r.to_dict() for r in parsed.revisions], "applied": [r.to_dict() for r in res.applied]}
    return res.memory, list(res.applied)


def record_failures(step: Step, rejections: list) -> None:
    """Each rejected revision as one of the step's failures, with where it pointed and why."""
    for rej in rejections:
        where = rej.revision.path.text if getattr(rej, "revision", None) is not None else (rej.raw or "")[:80]
        step.failures.append(f"revision rejected ({where}): {rej.reason}")
