"""Seed 000 Chain-of-Key: structure the new paragraph, then update/add by JSONPath, applied in code.

Per chunk: (1) the LLM writes a structured summary of the new paragraph alone (the initial-summary
prompt); the first one becomes the memory. (2) For later chunks the CoK prompt shows that summary,
the schema class and the memory, and the LLM reasons (thoughts for update / add) and proposes
revisions, which eval.memory validates against the schema and applies. Optional limit K compresses.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from eval.datasets.sample import Sample
from eval.errors import MethodError
from eval.memory import Schema, parse_cok
from eval.memory.schemas import STORY_ELEMENTS, SUMIE_SUMMARY
from eval.methods.base import Method, MethodSettings, Trace
from eval.methods.common import enforce_limit, entity_name, is_entity, json_parser, paragraphs, schema_for, subject
from eval.methods.parsing import as_text
from eval.methods.structured import apply_step, constrained_schema, revision_parser
from eval.methods.summaries import _format_instruction
from eval.templates import load_template
from eval.options import PositiveInt


@dataclass(frozen=True)
class CokSettings(MethodSettings):
    memory_limit: PositiveInt | None = None
    compress_rounds: PositiveInt = 2  # compression calls per step before trimming to K
    max_tokens: PositiveInt = 1024


class ChainOfKey(Method):
    name = "cok"
    Settings = CokSettings
    tasks = ("sumie", "book", "arxiv")
    template_ids = ("s000-entity-initial-json", "s000-book-generate", "s000-book-format-json", "s000-cok-update",
                    "s000-cok-guidelines-entity", "s000-cok-guidelines-book", "s000-compress-json", "s000-book-final")

    def _validate(self) -> None:
        if self.settings.memory_limit is not None and self.settings.memory_limit <= 0:
            raise MethodError("cok: memory_limit must be a positive token count or null")

    @staticmethod
    def _schema(sample: Sample) -> Schema:
        return SUMIE_SUMMARY if is_entity(sample) else STORY_ELEMENTS

    def _structure(self, trace: Trace, sample: Sample, chunk: str, i: int) -> dict[str, Any] | None:
        """Step 1: a structured summary of the new paragraph only, shaped like the memory schema."""
        flat = schema_for(sample)
        if is_entity(sample):
            step = trace.ask("s000-entity-initial-json", {"entity_name": entity_name(sample),
                                                          "paragraph": paragraphs([chunk], i + 1)},
                             kind="structure", parse=json_parser(flat), schema=flat, chunk_index=i)
            value = {"attributes": step.parsed} if step.ok else None
        else:
            step = trace.ask("s000-book-generate", {"special_instruction": _format_instruction(trace, "json"),
                                                    "book_chunk": chunk, "output_format": "JSON"},
                             kind="structure", parse=json_parser(flat), schema=flat, chunk_index=i)
            value = ({f: step.parsed.get(f, {}) for f in ("characters", "events", "background", "motivations",
                                                          "objectives", "other")} if step.ok else None)
        if value is not None:
            errs = self._schema(sample).errors(value)
            if errs:
                step.failures.append(f"structured summary breaks the memory schema: {errs[0]}")
                value = None
        step.parsed = value
        return value

    def _run(self, sample: Sample, trace: Trace) -> tuple[str, Any]:
        schema = self._schema(sample)
        guidelines = load_template("s000-cok-guidelines-" + ("entity" if is_entity(sample) else "book"))
        trace.templates[guidelines.id] = guidelines.sha256
        question = (f"Merge the new summary and the existing summary of {entity_name(sample)}." if is_entity(sample)
                    else "Merge the summary of the new story segment into the existing summary of the story.")
        constrained = trace.llm.supports_json_schema
        ops = ("add", "update")
        parse = revision_parser(constrained, parse_cok, ops)
        js = constrained_schema(schema, ops, thoughts=True)
        memory: dict[str, Any] | None = None
        for i, chunk in enumerate(sample.chunks):
            new = self._structure(trace, sample, chunk, i)
            trace.steps[-1].memory = memory
            if new is None:
                continue
            if memory is None:
                memory = new
                trace.steps[-1].memory = memory
            else:
                step = trace.ask("s000-cok-update", {"guidelines": guidelines.text.strip(), "question": question,
                                                     "new_summary": json.dumps(new, ensure_ascii=False),
                                                     "class_def": schema.class_text(),
                                                     "partial_summary": as_text(memory)},
                                 kind="revise", parse=parse, schema=js, chunk_index=i)
                memory, _ = apply_step(step, memory, schema)
                step.memory = memory
            memory = enforce_limit(trace, memory, fmt="json", limit=self.settings.memory_limit, subj=subject(sample),
                                   schema=schema.json_schema(), chunk_index=i, rounds=self.settings.compress_rounds)
        if memory is None:
            return "", None
        if is_entity(sample):
            return as_text(memory.get("attributes", {})), memory
        step = trace.ask("s000-book-final", {"memory": as_text(memory)}, kind="final")
        step.memory = memory
        return step.output.strip(), memory
