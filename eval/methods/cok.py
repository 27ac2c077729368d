"""Seed 000 Chain-of-Key: structure the new paragraph, then update/add by JSONPath, applied in code.

Per chunk: (1) the LLM writes a structured summary of the new paragraph alone (the initial-summary
prompt); the first one becomes the memory. The memory is the bare table, as GU's and GM's (so K, the
compression, the memory-size figure and the judge see one form); only the CoK prompt shows it inside
figure 5's class ({"attributes": ...} for entities). (2) For later chunks the CoK prompt shows that summary,
the schema class and the memory, and the LLM answers in figure 5's shape, with any model: thoughts
for update, [UPDATED_OBJECTS], thoughts for add, [ADDED_OBJECTS] (no JSON schema is imposed, since
one would force an order, a path syntax and a reasoning form the prompt never describes). The
prompt's worked example is the sample's kind: the hotel example for entities, a story example with
the book schema's paths for books (appendix G swaps the instructions and the example for books).
memloop.eval.memory validates the revisions against the schema and applies them. Figure 5's rules, applied
in code (`cumulative`): an `update` appends the new information to the stored value once and never
removes anything (its example updates a list with only the new item): lists gain the items they do
not hold yet (compared case- and space-insensitively), objects merge key by key, a text keeps the
old words when the new text lacks them; an `add` at a key that already exists is merged the same
way instead of being refused (its values would otherwise be lost). Optional limit K compresses.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from memloop.eval.datasets.sample import Sample
from memloop.eval.errors import MethodError
from memloop.eval.memory import Revision, Schema, parse_cok
from memloop.eval.memory.schemas import STORY_ELEMENTS, SUMIE_SUMMARY
from memloop.eval.methods import free_json
from memloop.eval.methods.base import Method, Trace
from memloop.eval.methods.common import (
    BOOK_FIELDS,
    MemorySettings,
    enforce_limit,
    entity_name,
    final_summary,
    is_entity,
    memory_cap_text,
    memory_parser,
    memory_step,
    paragraphs,
    schema_for,
    sent_schema,
    subject,
)
from memloop.eval.methods.outcomes import StepOutcome
from memloop.eval.methods.parsing import as_text
from memloop.eval.methods.procedure import Procedure, StepRule, from_settings
from memloop.eval.methods.registry import method
from memloop.eval.methods.structured import apply_step, revision_parser
from memloop.eval.methods.summaries import _format_instruction
from memloop.eval.templates import load_template


@dataclass(frozen=True)
class CokSettings(MemorySettings):
    """The settings every seed 000 method shares (`MemorySettings`); under `decoding: constrained` the
    structure and compress steps are held to the schema, and the revise step is figure 5's sections."""


@method("cok")
class ChainOfKey(Method):
    Settings = CokSettings
    tasks = ("sumie", "book", "arxiv")
    template_ids = (
        "s000-entity-initial-json",
        "s000-book-generate",
        "s000-book-format-json",
        "s000-cok-update",
        "s000-cok-guidelines-entity",
        "s000-cok-guidelines-book",
        "s000-cok-example-entity",
        "s000-cok-example-book",
        "s000-compress-json",
        "s000-book-final",
    )

    def _validate(self) -> None:
        if self.settings.memory_limit is not None and self.settings.memory_limit <= 0:
            raise MethodError("cok: memory_limit must be a positive token count or null")

    def _sent(self, trace: Trace, schema: dict[str, Any]) -> dict[str, Any] | None:
        return sent_schema(trace, self.name, self.settings.decoding, schema)

    def procedure(self, task: str) -> Procedure:
        """The memory steps as `_structure` and `_run` apply them (both through `memory_step`'s cap)."""
        s = self.settings
        rule = StepRule(
            "structure (the new chunk) + revise (JSONPath revisions of the memory)",
            f"structure: {free_json.VALIDITY}, and within the memory schema; revise: no "
            "[UPDATED_OBJECTS] / [ADDED_OBJECTS] section parses (a revision off the schema is "
            "rejected alone)",
            "structure: fails to parse unless a whole JSON object came before the cut: retried; "
            "revise: the sections read before the cut are applied, the cut one is rejected",
            "the memory stays as it was; over K it is compressed "
            f"(up to {s.compress_rounds} compressions of up to {s.max_attempts} attempts), then trimmed to K",
        )
        return from_settings(s, rule, output_cap=memory_cap_text(s))

    @staticmethod
    def _schema(sample: Sample) -> Schema:
        return SUMIE_SUMMARY if is_entity(sample) else STORY_ELEMENTS

    @staticmethod
    def _wrap(sample: Sample, memory: dict[str, Any]) -> dict[str, Any]:
        """The memory as figure 5's class holds it: an entity's table under `attributes`. The memory
        itself stays the bare table, as GU's and GM's, so K, the compression prompt, the memory-size
        figure and the judge see one form for every method; only the revise step shows the class."""
        return {"attributes": memory} if is_entity(sample) else memory

    @staticmethod
    def _unwrap(sample: Sample, memory: dict[str, Any]) -> dict[str, Any]:
        return memory.get("attributes", {}) if is_entity(sample) else memory

    def _structure(
        self, trace: Trace, sample: Sample, chunk: str, i: int, memory: dict[str, Any] | None
    ) -> dict[str, Any] | None:
        """Step 1: a structured summary of the new paragraph only, shaped like the memory (bare table)."""
        flat = schema_for(sample)
        ask = {"kind": "structure", "parse": memory_parser(sample), "schema": self._sent(trace, flat), "chunk_index": i}
        if is_entity(sample):
            step = memory_step(
                trace,
                "s000-entity-initial-json",
                {"entity_name": entity_name(sample), "paragraph": paragraphs([chunk], i + 1)},
                memory,
                **ask,
            )
            value = step.parsed if step.ok else None
        else:
            step = memory_step(
                trace,
                "s000-book-generate",
                {
                    "special_instruction": _format_instruction(trace, "json"),
                    "book_chunk": chunk,
                    "output_format": "JSON",
                },
                memory,
                **ask,
            )
            value = {f: step.parsed.get(f, {}) for f in BOOK_FIELDS} if step.ok else None
        if value is not None:
            errs = self._schema(sample).errors(self._wrap(sample, value))
            if errs:
                step.failures.append(f"structured summary breaks the memory schema: {errs[0]}")
                step.outcome = StepOutcome.PARSE_FAILED
                value = None
        step.parsed = value
        return value

    def _run(self, sample: Sample, trace: Trace) -> tuple[str, Any]:
        schema = self._schema(sample)
        kind = "entity" if is_entity(sample) else "book"
        guidelines, example = load_template(f"s000-cok-guidelines-{kind}"), load_template(f"s000-cok-example-{kind}")
        trace.templates[guidelines.id] = guidelines.sha256
        trace.templates[example.id] = example.sha256
        question = (
            f"Merge the new summary and the existing summary of {entity_name(sample)}."
            if is_entity(sample)
            else "Merge the summary of the new story segment into the existing summary of the story."
        )
        ops = ("add", "update")
        parse = revision_parser(False, parse_cok, ops)
        memory: dict[str, Any] | None = None
        for i, chunk in enumerate(sample.chunks):
            new = self._structure(trace, sample, chunk, i, memory)
            trace.steps[-1].memory = memory
            if new is None:
                continue
            if memory is None:
                memory = new
                trace.steps[-1].memory = memory
            else:
                step = memory_step(
                    trace,
                    "s000-cok-update",
                    {
                        "guidelines": guidelines.text.strip(),
                        "question": question,
                        "example": example.text.strip(),
                        "new_summary": json.dumps(self._wrap(sample, new), ensure_ascii=False),
                        "class_def": schema.class_text(),
                        "partial_summary": as_text(self._wrap(sample, memory)),
                    },
                    memory,
                    kind="revise",
                    parse=parse,
                    schema=None,
                    chunk_index=i,
                )
                revised, _ = apply_step(step, self._wrap(sample, memory), schema, prepare=cumulative)
                memory = self._unwrap(sample, revised)
                step.memory = memory
            memory = enforce_limit(
                trace,
                memory,
                fmt="json",
                limit=self.settings.memory_limit,
                subj=subject(sample),
                sample=sample,
                chunk_index=i,
                rounds=self.settings.compress_rounds,
                constrained=self._sent(trace, schema_for(sample)),
            )
        if memory is None:
            return "", None
        if is_entity(sample):
            return as_text(memory), memory
        return final_summary(trace, memory), memory


def cumulative(memory: dict[str, Any], rev: Revision) -> Revision:
    """Figure 5's rules for CoK: an `update`, or an `add` at a path that already exists, becomes an
    update to the stored value with the new information added once and nothing removed. An `add` at a
    new path, or an update of a path that does not exist, is returned as is and checked by memloop.eval.memory."""
    cur: Any = memory
    for seg in rev.path.segments:
        try:
            cur = cur[seg]
        except (KeyError, IndexError, TypeError):
            return rev
    if rev.op == "add" and isinstance(cur, list) and not isinstance(rev.value, list):
        items = cur + [rev.value] if _norm(rev.value) not in {_norm(v) for v in cur} else cur
        return Revision(rev.path, "update", items)  # one item added to a list: appended once
    return Revision(rev.path, "update", _added(cur, rev.value))


def _norm(value: Any) -> Any:
    """The comparison key of a value: texts casefolded with runs of spaces collapsed, so a restated
    value that differs only in case or spacing is not appended again."""
    if isinstance(value, str):
        return " ".join(value.split()).casefold()
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def _added(old: Any, new: Any) -> Any:
    if isinstance(old, dict) and isinstance(new, dict):
        out = dict(old)
        for k, v in new.items():
            out[k] = _added(out[k], v) if k in out else v
        return out
    if isinstance(old, list):
        seen, out = {_norm(v) for v in old}, list(old)
        for v in new if isinstance(new, list) else [new]:
            if _norm(v) not in seen:
                seen.add(_norm(v))
                out.append(v)
        return out
    if isinstance(old, str) and isinstance(new, str):
        o, n = _norm(old), _norm(new)
        if n in o:
            return old  # nothing new: the stored text already says it
        return new if o in n else f"{old}; {new}"
    return new
