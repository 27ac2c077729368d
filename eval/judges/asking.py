"""Ask a judge LLM one question with strict answer validation: `memloop.eval.asking.ask` with the judges' retry policy.

Every attempt is kept: a rejected answer goes into `Judgment.failures` with the reason, so an
audit sees exactly how the final verdict was reached. Retries resample at a raised temperature
with a fresh seed (`memloop.eval.asking.RESAMPLE`), because a greedy judge would otherwise repeat the same
invalid answer. Answer parsers raise `memloop.eval.asking.ParseFailure`, as the methods' parsers do.
"""

from __future__ import annotations

import json
from typing import Any, Callable

from memloop.eval.asking import RESAMPLE, ParseFailure, ask
from memloop.eval.errors import JudgeError
from memloop.eval.judges.records import Judgment
from memloop.eval.llm import LLM
from memloop.eval.templates import Template

from memloop.sampling import SamplingParams


def answer_list(text: str, key: str, shape: str) -> list[Any]:
    """The list under `key` of the JSON object in a judge's answer (text around the braces is ignored).

    `shape` is the expected answer, shown in the error so a retry's failure record says what was wanted.
    """
    start, end = text.find("{"), text.rfind("}")
    try:
        obj = json.loads(text[start : end + 1]) if start >= 0 and end > start else None
    except json.JSONDecodeError as exc:
        raise ParseFailure(f"answer is not valid JSON: {exc}") from None
    if not isinstance(obj, dict) or not isinstance(obj.get(key), list):
        raise ParseFailure(f"the answer must be {shape}")
    return obj[key]


class JudgeAnswerError(JudgeError):
    """A judge LLM kept giving invalid answers for one item; carries the judgment with every attempt."""

    def __init__(self, message: str, judgment: Judgment) -> None:
        super().__init__(message)
        self.judgment = judgment


def ask_judgment(
    llm: LLM,
    template: Template,
    prompt: str,
    *,
    item: str,
    parse: Callable[[str], Any],
    schema: dict[str, Any] | None = None,
    max_tokens: int = 256,
    max_attempts: int = 3,
    temperature: float = 0.0,
    seed: int = 0,
    raise_on_invalid: bool = True,
) -> Judgment:
    """One judged item. `parse` maps the answer text to the label or raises ParseFailure.

    The answer is schema-constrained when the LLM supports it, and validated in every case (a
    schema cannot express every rule, e.g. "no questions exactly when no error types").
    """
    if max_attempts < 1:
        raise JudgeError(f"max_attempts must be at least 1 (got {max_attempts})")
    answer = ask(
        llm,
        prompt,
        SamplingParams(max_tokens=max_tokens, temperature=temperature, seed=seed),
        parse=parse,
        schema=schema,
        max_attempts=max_attempts,
        retry=RESAMPLE,
    )
    failures = [
        {"raw": a.raw, "reason": f"{a.reason} (answer cut at max_tokens={max_tokens})" if a.cut else a.reason}
        for a in answer.failures
    ]
    j = Judgment(
        item=item,
        label=answer.parsed if answer.ok else None,
        valid=answer.ok,
        prompt=prompt,
        template_id=template.id,
        template_sha256=template.sha256,
        constrained=answer.constrained,
        raw=answer.text,
        failures=failures,
        usage=answer.usage,
    )
    if not j.valid and raise_on_invalid:
        last = j.failures[-1]["reason"] if j.failures else "no answer"
        raise JudgeAnswerError(
            f"judge model {llm.name!r} gave no valid answer for {item[:80]!r} in {max_attempts} attempts "
            f"(last reason: {last}); use a stronger judge model, raise max_attempts, or pass "
            "on_invalid='record' to keep invalid items out of the score",
            j,
        )
    return j
