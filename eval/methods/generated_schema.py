"""LLM-generated memory schemas (seed 002 section 3.4): one schema per task and model, made once.

The paper prompts the LLM with a description of the task's query domain and an example query of
the task (never the test sample's own query), and uses the resulting schema for every sample.
Methods run in threads, one method object per sample, so the schema is kept in a process-wide,
thread-safe cache: the first sample of a (task, model, prompt, sampling) key generates it while
the others wait, and every later sample reuses the same result, a failure included.

A schema that does not parse is asked again with `memloop.eval.asking.RESAMPLE` (a raised temperature and
a fresh seed, since a greedy model would repeat the same answer), at most `max_attempts` times; the
attempts and reasons are kept so each sample can record them.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field
from typing import Callable, Hashable

from memloop.eval.asking import RESAMPLE, ParseFailure, ask
from memloop.eval.llm import LLM, Usage
from memloop.eval.memory import Schema, SchemaError
from memloop.eval.templates import Template, load_template

from memloop.sampling import SamplingParams

TEMPLATE = "s002-schema-gen"
_FENCED = re.compile(r"```(?:python)?\s*\n(.*?)```", re.S)


@dataclass(frozen=True)
class GeneratedSchema:
    """The outcome of one schema generation: the schema (None when no attempt parsed) and its record."""

    schema: Schema | None
    template: Template
    prompt: str
    output: str
    attempts: int
    usage: Usage
    failures: tuple[str, ...] = ()
    retry_usage: Usage = field(default_factory=Usage)  # the rejected attempts' part of `usage`
    cut: bool = False  # the last attempt hit max_tokens

    @property
    def ok(self) -> bool:
        return self.schema is not None


def parse_schema(text: str) -> Schema:
    """The typed hierarchy of an answer (the first fenced python block, or the whole text)."""
    m = _FENCED.search(text)
    try:
        return Schema.from_text(m.group(1) if m else text)
    except SchemaError as exc:
        raise ParseFailure(f"generated schema is not a typed hierarchy: {exc}") from None


def generate_schema(
    llm: LLM, domain: str, example_query: str, sampling: SamplingParams, max_attempts: int
) -> GeneratedSchema:
    """Ask `llm` for a schema of `domain` shown `example_query`; bounded resampling on parse failures."""
    tpl = load_template(TEMPLATE)
    prompt = tpl.render(domain=domain, example_query=example_query)
    answer = ask(llm, prompt, sampling, parse=parse_schema, max_attempts=max(1, max_attempts), retry=RESAMPLE)
    failures = tuple(
        f"attempt {a.number}: {a.reason}" + (" (output hit max_tokens)" if a.cut else "") for a in answer.failures
    )
    return GeneratedSchema(
        answer.parsed if answer.ok else None,
        tpl,
        prompt,
        answer.text,
        answer.attempts,
        answer.usage,
        failures,
        answer.retry_usage,
        answer.cut,
    )


@dataclass
class _Entry:
    lock: threading.Lock = field(default_factory=threading.Lock)
    result: GeneratedSchema | None = None


class SchemaCache:
    """Generate-once cache: `get(key, make)` runs `make` for the first caller of a key only.

    Returns (result, made_here). Concurrent callers of the same key wait for the first one; an
    exception in `make` (e.g. the LLM is unreachable) leaves the key empty so a later caller retries.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[Hashable, _Entry] = {}

    def get(self, key: Hashable, make: Callable[[], GeneratedSchema]) -> tuple[GeneratedSchema, bool]:
        with self._lock:
            entry = self._entries.setdefault(key, _Entry())
        with entry.lock:
            if entry.result is not None:
                return entry.result, False
            entry.result = make()
            return entry.result, True

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


SCHEMAS = SchemaCache()
