"""Seed 000 baselines: Generate-Once, Generate-Update and Generate-Merge, in text or JSON.

Entity samples (SUMIE) use the entity prompts (initial table, update, duplicate removal); book
samples use the story prompts (generate with a format instruction, update with memory, duplicate
removal, compression to K tokens) and finish, in text as in JSON, with one neutral final-summary
call over the memory (`common.final_summary`).
The memory after every chunk is in the trace, so per-turn scores (start, last, average) can be read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from memloop.eval.datasets.sample import Sample
from memloop.eval.errors import MethodError
from memloop.eval.methods import free_json
from memloop.eval.methods.base import Method, Trace
from memloop.eval.methods.common import (
    MemorySettings,
    enforce_limit,
    entity_name,
    final_summary,
    is_entity,
    memory_cap_text,
    memory_parser,
    memory_step,
    merge_json,
    paragraphs,
    schema_for,
    sent_schema,
    subject,
    text_parser,
)
from memloop.eval.methods.parsing import as_text
from memloop.eval.methods.procedure import Procedure, StepRule, from_settings
from memloop.eval.methods.registry import method
from memloop.eval.methods.step import Step


@dataclass(frozen=True)
class SummarySettings(MemorySettings):
    """GO, GU and GM: the settings every seed 000 method shares (`MemorySettings`)."""


class _SummaryMethod(Method):
    fmt: ClassVar[str] = "json"
    Settings = SummarySettings
    tasks = ("sumie", "book", "arxiv")

    def _validate(self) -> None:
        k = self.settings.memory_limit
        if k is not None and k <= 0:
            raise MethodError(f"{self.name}: memory_limit must be a positive token count or null, got {k}")
        if self.fmt == "text" and self.settings.decoding == "constrained":
            raise MethodError(
                f"{self.name}: a text summary has no JSON schema to decode under; "
                "use decoding: text or the method's -json form"
            )

    def _sent(self, trace: Trace, schema: dict[str, Any]) -> dict[str, Any] | None:
        return sent_schema(trace, self.name, self.settings.decoding, schema) if self.fmt == "json" else None

    step_kind: ClassVar[str] = "initial"

    def procedure(self, task: str) -> Procedure:
        """The memory step as `_generate` / `memory_step` / `enforce_limit` apply it."""
        s = self.settings
        if self.fmt == "json":
            validity = free_json.VALIDITY
            cut = "fails to parse unless a whole JSON object came before the cut: retried"
        else:
            validity = "an empty summary"
            cut = "accepted (a cut text is still a summary)"
        rule = StepRule(
            self.step_kind,
            validity,
            cut,
            "the memory stays as it was; over K it is compressed "
            f"(up to {s.compress_rounds} compressions of up to {s.max_attempts} attempts), then trimmed to K",
        )
        return from_settings(s, rule, output_cap=memory_cap_text(s))

    # --- one LLM call that produces a whole summary -------------------------------------------------
    def _generate(
        self,
        trace: Trace,
        sample: Sample,
        chunks: list[str],
        *,
        start: int,
        memory: Any | None,
        kind: str,
        chunk_index: int,
    ) -> Step:
        fmt, schema = self.fmt, schema_for(sample)
        parse = memory_parser(sample) if fmt == "json" else text_parser
        ask = {"kind": kind, "parse": parse, "schema": self._sent(trace, schema), "chunk_index": chunk_index}
        if is_entity(sample):
            if memory is None:
                return memory_step(
                    trace,
                    f"s000-entity-initial-{fmt}",
                    {"entity_name": entity_name(sample), "paragraph": paragraphs(chunks, start)},
                    memory,
                    **ask,
                )
            return memory_step(
                trace,
                f"s000-entity-update-{fmt}",
                {
                    "entity_name": entity_name(sample),
                    "paragraph": paragraphs(chunks, start),
                    "existing_summary": as_text(memory),
                },
                memory,
                **ask,
            )
        special = _format_instruction(trace, fmt)
        output_format = "JSON" if fmt == "json" else "text"
        text = "\n\n".join(c.strip() for c in chunks)
        if memory is None:
            return memory_step(
                trace,
                "s000-book-generate",
                {"special_instruction": special, "book_chunk": text, "output_format": output_format},
                memory,
                **ask,
            )
        return memory_step(
            trace,
            "s000-book-update",
            {
                "special_instruction": special,
                "book_chunk": text,
                "memory": as_text(memory),
                "output_format": output_format,
            },
            memory,
            **ask,
        )

    def _dedupe(self, trace: Trace, sample: Sample, memory: Any, chunk_index: int) -> Any:
        fmt, schema = self.fmt, schema_for(sample)
        parse = memory_parser(sample) if fmt == "json" else text_parser
        step = memory_step(
            trace,
            f"s000-dedupe-{fmt}",
            {"subject": subject(sample), "summary": as_text(memory)},
            memory,
            kind="dedupe",
            parse=parse,
            schema=self._sent(trace, schema),
            chunk_index=chunk_index,
        )
        if step.ok:
            memory = step.parsed
        step.memory = memory
        return memory

    def _limit(self, trace: Trace, sample: Sample, memory: Any, chunk_index: int) -> Any:
        return enforce_limit(
            trace,
            memory,
            fmt=self.fmt,
            limit=self.settings.memory_limit,
            subj=subject(sample),
            sample=sample,
            chunk_index=chunk_index,
            rounds=self.settings.compress_rounds,
            constrained=self._sent(trace, schema_for(sample)),
        )

    def _answer(self, trace: Trace, sample: Sample, memory: Any) -> str:
        """SUMIE answers with the attribute table; books with the final summary written from the memory."""
        if memory is None:
            return ""
        if is_entity(sample):
            return as_text(memory)
        return final_summary(trace, memory)


def _format_instruction(trace: Trace, fmt: str) -> str:
    from memloop.eval.templates import load_template

    tpl = load_template(f"s000-book-format-{fmt}")
    trace.templates[tpl.id] = tpl.sha256
    return tpl.text.strip()


class GenerateOnce(_SummaryMethod):
    """GO: one call over all paragraphs at once."""

    step_kind = "initial (one call over every chunk)"

    def _run(self, sample: Sample, trace: Trace) -> tuple[str, Any]:
        step = self._generate(
            trace, sample, list(sample.chunks), start=1, memory=None, kind="initial", chunk_index=len(sample.chunks) - 1
        )
        memory = step.parsed if step.ok else None
        step.memory = memory
        return self._answer(trace, sample, memory), memory


class GenerateUpdate(_SummaryMethod):
    """GU: summarise the first chunk, then rewrite the whole summary with each new chunk."""

    step_kind = "update (rewrites the whole memory)"

    def _run(self, sample: Sample, trace: Trace) -> tuple[str, Any]:
        memory: Any = None
        for i, chunk in enumerate(sample.chunks):
            step = self._generate(
                trace,
                sample,
                [chunk],
                start=i + 1,
                memory=memory,
                kind="initial" if memory is None else "update",
                chunk_index=i,
            )
            if step.ok:
                memory = step.parsed
            step.memory = memory
            memory = self._limit(trace, sample, memory, i)
        return self._answer(trace, sample, memory), memory


class GenerateMerge(_SummaryMethod):
    """GM: summarise each chunk on its own, merge programmatically, then let the LLM remove duplicates."""

    step_kind = "initial per chunk, merged in code, then dedupe"

    def _run(self, sample: Sample, trace: Trace) -> tuple[str, Any]:
        memory: Any = None
        for i, chunk in enumerate(sample.chunks):
            step = self._generate(trace, sample, [chunk], start=i + 1, memory=None, kind="initial", chunk_index=i)
            if step.ok:
                if memory is None:
                    memory = step.parsed
                elif self.fmt == "json":
                    memory = merge_json(memory, step.parsed)
                else:
                    memory = f"{memory}\n\n{step.parsed}"
            step.memory = memory
            if memory is not None and i > 0:
                memory = self._dedupe(trace, sample, memory, i)
            memory = self._limit(trace, sample, memory, i)
        return self._answer(trace, sample, memory), memory


_ENTITY_T = ("s000-entity-initial-{f}", "s000-entity-update-{f}", "s000-dedupe-{f}", "s000-compress-{f}")
_BOOK_T = ("s000-book-generate", "s000-book-update", "s000-book-format-{f}", "s000-book-final")


def _ids(fmt: str, *groups: tuple[str, ...], extra: tuple[str, ...] = ()) -> tuple[str, ...]:
    out: list[str] = []
    for g in groups:
        out += [t.format(f=fmt) for t in g]
    return tuple(dict.fromkeys(out + list(extra)))


def _make(base: type[_SummaryMethod], name: str, fmt: str) -> type[_SummaryMethod]:
    """The method `name`: `base` keeping a `fmt` ("text" or "json") memory, registered as `name`."""
    return method(name)(
        type(base.__name__ + fmt.capitalize(), (base,), {"fmt": fmt, "template_ids": _ids(fmt, _ENTITY_T, _BOOK_T)})
    )


GoText, GoJson = _make(GenerateOnce, "go-text", "text"), _make(GenerateOnce, "go-json", "json")
GuText, GuJson = _make(GenerateUpdate, "gu-text", "text"), _make(GenerateUpdate, "gu-json", "json")
GmText, GmJson = _make(GenerateMerge, "gm-text", "text"), _make(GenerateMerge, "gm-json", "json")
