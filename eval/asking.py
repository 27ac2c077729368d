"""Ask an LLM and parse its answer, with bounded retries: the one loop behind method steps and judge calls.

`ask` builds the request (a chat message, or a raw completion prompt), constrains the output to a
JSON Schema when one is given and the LLM supports it, parses the text and, when the parser raises
`ParseFailure`, asks again up to `max_attempts` times. Every rejected attempt is kept as an
`Attempt` (its raw text, the reason, whether it was cut at max_tokens) so callers can record exactly
how a value was reached. `RetryPolicy` says what a retry changes:

- `SAME_REQUEST` (methods): the identical request again; a constrained output is parsed once,
  because constrained decoding with the same sampling gives the same answer.
- `RESAMPLE` (judges): a raised temperature and a fresh seed (`retry_seed`), because a greedy
  judge would otherwise repeat the same invalid answer; constrained answers are retried too, since
  a schema cannot express every rule.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable

from eval.errors import EvalError
from eval.llm import LLM, LLMRequest, Sampling, Usage


class ParseFailure(Exception):
    """The LLM output could not be turned into the expected value; the message is the reason."""


# Repeats of a run take consecutive seeds (base, base + 1, ...), so a retry's seed is drawn from a stream
# `RETRY_SEED_STRIDE` apart: a retry of repeat r never samples with repeat r + 1's seed. A run has fewer
# repeats than the stride (jobs.config bounds it); seeds stay below 2**31 (the engine's PRNG keys).
RETRY_SEED_STRIDE = 1 << 20


def retry_seed(seed: int | None, attempt: int) -> int:
    """The seed of 0-based retry `attempt` > 0 of a request sampled with `seed`."""
    return ((seed or 0) + attempt * RETRY_SEED_STRIDE) % (1 << 31)


@dataclass(frozen=True)
class RetryPolicy:
    """What a retry changes. `temperature` None: resend the same request; a value: retries sample at
    max(temperature, this) with `retry_seed`. `retry_constrained`: retry schema-constrained outputs."""

    temperature: float | None = None
    retry_constrained: bool = False

    def sampling(self, base: Sampling, attempt: int) -> Sampling:
        """The sampling of 0-based `attempt`; attempt 0 is always `base`."""
        if attempt == 0 or self.temperature is None:
            return base
        return replace(base, temperature=max(base.temperature, self.temperature), seed=retry_seed(base.seed, attempt))


SAME_REQUEST = RetryPolicy()
RESAMPLE = RetryPolicy(temperature=0.7, retry_constrained=True)


@dataclass(frozen=True)
class Attempt:
    """One rejected answer: its text, why the parser rejected it, and whether it hit max_tokens."""

    number: int  # 1-based
    raw: str
    reason: str
    cut: bool  # finish_reason == "length": the reason may just be a truncated answer


@dataclass
class Answer:
    """The outcome of `ask`: the last text, its parsed value (None unless ok) and every failed attempt."""

    text: str
    parsed: Any
    ok: bool
    attempts: int
    usage: Usage
    failures: list[Attempt] = field(default_factory=list)
    constrained: bool = False


def build_request(prompt: str, sampling: Sampling, schema: dict[str, Any] | None = None, *,
                  raw_prompt: bool = False) -> LLMRequest:
    """A chat request with one user message, or a completion request when `raw_prompt`."""
    if raw_prompt:
        return LLMRequest(prompt=prompt, sampling=sampling, json_schema=schema)
    return LLMRequest(messages=({"role": "user", "content": prompt},), sampling=sampling, json_schema=schema)


def ask(llm: LLM, prompt: str, sampling: Sampling, *, parse: Callable[[str], Any] | None = None,
        schema: dict[str, Any] | None = None, max_attempts: int = 3, retry: RetryPolicy = SAME_REQUEST,
        raw_prompt: bool = False) -> Answer:
    """Ask until `parse` accepts the text (no `parse`: the text itself), at most `max_attempts` times.

    The schema is sent only when `llm.supports_json_schema`; otherwise the free text is parsed.
    """
    if max_attempts < 1:
        raise EvalError(f"max_attempts must be at least 1 (got {max_attempts})")
    constrained = schema if (schema is not None and llm.supports_json_schema) else None
    budget = 1 if (constrained is not None and not retry.retry_constrained) else max_attempts
    usage, failures, text = Usage(), [], ""
    request = build_request(prompt, sampling, constrained, raw_prompt=raw_prompt)
    for attempt in range(budget):
        if attempt:
            retry_sampling = retry.sampling(sampling, attempt)
            if retry_sampling is not sampling:
                request = build_request(prompt, retry_sampling, constrained, raw_prompt=raw_prompt)
        result = llm.complete(request)
        usage, text = usage + result.usage, result.text
        if parse is None:
            return Answer(text, text, True, attempt + 1, usage, failures, constrained is not None)
        try:
            parsed = parse(text)
        except ParseFailure as exc:
            failures.append(Attempt(attempt + 1, text, str(exc), result.finish_reason == "length"))
            continue
        return Answer(text, parsed, True, attempt + 1, usage, failures, constrained is not None)
    return Answer(text, None, False, budget, usage, failures, constrained is not None)
