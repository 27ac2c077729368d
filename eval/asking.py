"""Ask an LLM and parse its answer, with bounded retries: the one loop behind method steps and judge calls.

`ask` builds the request (a chat message, or a raw completion prompt), constrains the output to a
JSON Schema when one is given and the LLM supports it, parses the text and, when the parser raises
`ParseFailure`, asks again up to `max_attempts` times. Every rejected attempt is kept as an
`Attempt` (its raw text, the reason, whether it was cut at max_tokens) so callers can record exactly
how a value was reached. `RetryPolicy` says what a retry changes:

- `reseed(temperature)` (methods): a fresh seed (`retry_seed`) and, for a greedy request, the method's retry
  temperature (`MethodSettings.retry_temperature`), because the engine answers the identical request
  with the identical tokens; constrained answers are retried too (a JSON cut at max_tokens, say).
- `RESAMPLE` (judges): a raised temperature (0.7) and a fresh seed, for the same reason.
- `SAME_REQUEST`: the identical request again (only useful against a model that is not deterministic);
  a constrained output is parsed once.

A retry's seed is `retry_seed(seed, attempt)`, derived from the original seed and the attempt number
(so a run stays reproducible) on a stream apart from the repeats' consecutive seeds (so a retry never
replays another repeat's request). `Answer.retry_usage` keeps the usage of the
rejected attempts apart from the kept (last) attempt's.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable

from memloop.eval.errors import EvalError
from memloop.eval.llm import LLM, LLMRequest, Usage

from memloop.sampling import SamplingParams


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
    """What a retry changes. `reseed`: retries use `retry_seed(seed, attempt)`; `temperature` None keeps
    the request's temperature, a value samples retries at max(temperature, this) (a greedy request
    gives the same answer whatever its seed). `retry_constrained`: retry schema-constrained outputs."""

    temperature: float | None = None
    retry_constrained: bool = False
    reseed: bool = False

    def sampling(self, base: SamplingParams, attempt: int) -> SamplingParams:
        """The sampling of 0-based `attempt`; attempt 0 is always `base`."""
        if attempt == 0 or (self.temperature is None and not self.reseed):
            return base
        temperature = base.temperature if self.temperature is None else max(base.temperature, self.temperature)
        seed = retry_seed(base.seed, attempt) if self.reseed else base.seed
        return replace(base, temperature=temperature, seed=seed)


SAME_REQUEST = RetryPolicy()
RESAMPLE = RetryPolicy(temperature=0.7, retry_constrained=True, reseed=True)


def reseed(temperature: float) -> RetryPolicy:
    """Method retries: a fresh seed per attempt, sampled at `temperature` at least (0: the request's own)."""
    return RetryPolicy(temperature=temperature if temperature > 0 else None, retry_constrained=True, reseed=True)


@dataclass(frozen=True)
class Attempt:
    """One rejected answer: its text, why the parser rejected it, and whether it hit max_tokens."""

    number: int  # 1-based
    raw: str
    reason: str
    cut: bool  # finish_reason == "length": the reason may just be a truncated answer


@dataclass
class Answer:
    """The outcome of `ask`: the last text, its parsed value (None unless ok) and every failed attempt.
    `usage` counts every attempt; `retry_usage` the attempts before the last (the rejected ones kept
    apart: usage minus retry_usage is the kept attempt's). `cut`: the last attempt hit max_tokens."""

    text: str
    parsed: Any
    ok: bool
    attempts: int
    usage: Usage
    failures: list[Attempt] = field(default_factory=list)
    constrained: bool = False
    retry_usage: Usage = field(default_factory=Usage)
    cut: bool = False
    prompt: str = ""  # the last attempt's prompt (a `reprompt` may change it per attempt)


def build_request(
    prompt: str, sampling: SamplingParams, schema: dict[str, Any] | None = None, *, raw_prompt: bool = False
) -> LLMRequest:
    """A chat request with one user message, or a completion request when `raw_prompt`."""
    if raw_prompt:
        return LLMRequest(prompt=prompt, sampling=sampling, json_schema=schema)
    return LLMRequest(messages=({"role": "user", "content": prompt},), sampling=sampling, json_schema=schema)


def ask(
    llm: LLM,
    prompt: str,
    sampling: SamplingParams,
    *,
    parse: Callable[[str], Any] | None = None,
    schema: dict[str, Any] | None = None,
    max_attempts: int = 3,
    retry: RetryPolicy = SAME_REQUEST,
    raw_prompt: bool = False,
    reprompt: Callable[[int], str] | None = None,
) -> Answer:
    """Ask until `parse` accepts the text (no `parse`: the text itself), at most `max_attempts` times.

    The schema is sent only when `llm.supports_json_schema`; otherwise the free text is parsed.
    `reprompt(attempt)` is the prompt of 0-based retry `attempt` > 0 where a retry asks differently
    (the official BooookScore code lowers the word limit it asks for on each retry).
    """
    if max_attempts < 1:
        raise EvalError(f"max_attempts must be at least 1 (got {max_attempts})")
    constrained = schema if (schema is not None and llm.supports_json_schema) else None
    budget = 1 if (constrained is not None and not retry.retry_constrained) else max_attempts
    usage, retry_usage, last, failures, text, cut = Usage(), Usage(), Usage(), [], "", False
    request = build_request(prompt, sampling, constrained, raw_prompt=raw_prompt)
    for attempt in range(budget):
        if attempt:
            retry_usage = retry_usage + last
            retry_sampling = retry.sampling(sampling, attempt)
            asked = reprompt(attempt) if reprompt is not None else prompt
            if retry_sampling is not sampling or asked != prompt:
                prompt = asked
                request = build_request(prompt, retry_sampling, constrained, raw_prompt=raw_prompt)
        result = llm.complete(request)
        last, text, cut = result.usage, result.text, result.finish_reason == "length"
        usage = usage + last
        if parse is None:
            return Answer(
                text, text, True, attempt + 1, usage, failures, constrained is not None, retry_usage, cut, prompt
            )
        try:
            parsed = parse(text)
        except ParseFailure as exc:
            failures.append(Attempt(attempt + 1, text, str(exc), cut))
            continue
        return Answer(
            text, parsed, True, attempt + 1, usage, failures, constrained is not None, retry_usage, cut, prompt
        )
    return Answer(text, None, False, budget, usage, failures, constrained is not None, retry_usage, cut, prompt)
