"""Ask a judge LLM one question with strict answer validation and bounded retries.

Every attempt is kept: a rejected answer goes into `Judgment.failures` with the reason, so an
audit sees exactly how the final verdict was reached. Retries resample at a raised temperature
with a fresh seed, because a greedy judge would otherwise repeat the same invalid answer.
"""
from __future__ import annotations

import json
from typing import Any, Callable

from eval.errors import JudgeError
from eval.llm import LLM, LLMRequest, Sampling, Usage
from eval.methods.templates import Template

from eval.judges.records import Judgment


class InvalidAnswer(Exception):
    """The judge's answer does not follow the required format; the message says why."""


def answer_list(text: str, key: str, shape: str) -> list[Any]:
    """The list under `key` of the JSON object in a judge's answer (text around the braces is ignored).

    `shape` is the expected answer, shown in the error so a retry's failure record says what was wanted.
    """
    start, end = text.find("{"), text.rfind("}")
    try:
        obj = json.loads(text[start:end + 1]) if start >= 0 and end > start else None
    except json.JSONDecodeError as exc:
        raise InvalidAnswer(f"answer is not valid JSON: {exc}") from None
    if not isinstance(obj, dict) or not isinstance(obj.get(key), list):
        raise InvalidAnswer(f"the answer must be {shape}")
    return obj[key]


class JudgeAnswerError(JudgeError):
    """A judge LLM kept giving invalid answers for one item; carries the judgment with every attempt."""

    def __init__(self, message: str, judgment: Judgment) -> None:
        super().__init__(message)
        self.judgment = judgment


RETRY_TEMPERATURE = 0.7


def ask(llm: LLM, template: Template, prompt: str, *, item: str, parse: Callable[[str], Any],
        schema: dict[str, Any] | None = None, max_tokens: int = 256, max_attempts: int = 3,
        temperature: float = 0.0, seed: int = 0, raise_on_invalid: bool = True) -> Judgment:
    """One judged item. `parse` maps the answer text to the label or raises InvalidAnswer.

    The answer is schema-constrained when the LLM supports it, and validated in every case (a
    schema cannot express every rule, e.g. "no questions exactly when no error types").
    """
    if max_attempts < 1:
        raise JudgeError(f"max_attempts must be at least 1 (got {max_attempts})")
    constrained = schema if (schema is not None and llm.supports_json_schema) else None
    j = Judgment(item=item, prompt=prompt, template_id=template.id, template_sha256=template.sha256,
                 constrained=constrained is not None, valid=False)
    usage = Usage()
    for attempt in range(max_attempts):
        t = temperature if attempt == 0 else max(temperature, RETRY_TEMPERATURE)
        request = LLMRequest(messages=({"role": "user", "content": prompt},),
                             sampling=Sampling(max_tokens=max_tokens, temperature=t, seed=seed + attempt),
                             json_schema=constrained)
        result = llm.complete(request)
        usage = usage + result.usage
        j.raw = result.text
        try:
            j.label = parse(result.text)
            j.valid = True
            break
        except InvalidAnswer as exc:
            reason = str(exc) if result.finish_reason != "length" else f"{exc} (answer cut at max_tokens={max_tokens})"
            j.failures.append({"raw": result.text, "reason": reason})
    j.usage = usage
    if not j.valid and raise_on_invalid:
        last = j.failures[-1]["reason"] if j.failures else "no answer"
        raise JudgeAnswerError(
            f"judge model {llm.name!r} gave no valid answer for {item[:80]!r} in {max_attempts} attempts "
            f"(last reason: {last}); use a stronger judge model, raise max_attempts, or pass "
            "on_invalid='record' to keep invalid items out of the score", j)
    return j
