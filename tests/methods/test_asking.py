"""The one ask-parse-retry primitive: what methods (reseeded) and judges (resampled) send and record."""

from __future__ import annotations

import pytest
from memloop.eval.asking import RESAMPLE, RETRY_SEED_STRIDE, SAME_REQUEST, ParseFailure, ask, reseed, retry_seed
from memloop.eval.errors import EvalError
from memloop.eval.judges.asking import ask_judgment
from memloop.eval.llm import LLMRequest, LLMResult, ScriptedLLM, Usage
from memloop.eval.methods.base import MethodSettings, Trace
from memloop.eval.templates import load_template

from memloop.sampling import SamplingParams


def _number(text: str) -> int:
    if not text.strip().isdigit():
        raise ParseFailure(f"{text!r} is not a number")
    return int(text)


def test_same_request_policy_resends_the_identical_request() -> None:
    llm = ScriptedLLM(["no", "still no", "42"])
    answer = ask(
        llm, "How many?", SamplingParams(max_tokens=8, temperature=0.3, seed=7), parse=_number, retry=SAME_REQUEST
    )
    assert answer.ok and answer.parsed == 42 and answer.attempts == 3 and answer.text == "42"
    assert llm.requests[0] == llm.requests[1] == llm.requests[2]
    assert llm.requests[0].messages == ({"role": "user", "content": "How many?"},) and llm.requests[0].prompt is None
    assert [(a.number, a.raw, a.reason, a.cut) for a in answer.failures] == [
        (1, "no", "'no' is not a number", False),
        (2, "still no", "'still no' is not a number", False),
    ]
    assert answer.usage == Usage(6, 0, 4)  # ScriptedLLM counts words: 2 prompt words per call, 1+2+1 output


def test_resample_policy_raises_temperature_and_moves_the_seed() -> None:
    llm = ScriptedLLM(["x", "y", "z"])
    answer = ask(llm, "q", SamplingParams(max_tokens=8, temperature=0.0, seed=5), parse=_number, retry=RESAMPLE)
    assert not answer.ok and answer.parsed is None and answer.attempts == 3 and answer.text == "z"
    stride = RETRY_SEED_STRIDE
    assert [(r.sampling.temperature, r.sampling.seed) for r in llm.requests] == [
        (0.0, 5),
        (0.7, 5 + stride),
        (0.7, 5 + 2 * stride),
    ]
    # repeats take consecutive seeds: no retry of repeat r may sample with a later repeat's seed
    retries = {retry_seed(seed, a) for seed in range(100) for a in range(1, 4)}
    assert not retries & set(range(100))


def test_method_retries_change_the_seed_and_keep_the_rejected_usage_apart() -> None:
    llm = ScriptedLLM(["no", "still no", "42"])
    trace = Trace(llm, MethodSettings(max_tokens=8, seed=7, max_attempts=3))
    step = trace.ask_prompt("How many?", load_template("s000-book-final"), kind="final", parse=_number)
    assert step.ok and step.parsed == 42 and step.attempts == 3
    # greedy by default: retries sample at retry_temperature with seeds derived from the attempt
    assert [(r.sampling.temperature, r.sampling.seed) for r in llm.requests] == [
        (0.0, 7),
        (0.7, retry_seed(7, 1)),
        (0.7, retry_seed(7, 2)),
    ]
    assert step.usage == Usage(2, 0, 1) and step.retry_usage == Usage(4, 0, 3)  # kept "42"; "no", "still no"
    constrained = ScriptedLLM(["x", "3"], supports_json_schema=True)  # a schema-valid answer can be rejected too
    assert ask(
        constrained, "q", SamplingParams(seed=1), parse=_number, schema={"type": "integer"}, retry=reseed(0.7)
    ).ok


def test_constrained_output_is_parsed_once_under_same_request_and_retried_otherwise() -> None:
    schema = {"type": "integer"}
    llm = ScriptedLLM(["x", "3"], supports_json_schema=True)
    once = ask(llm, "q", SamplingParams(), parse=_number, schema=schema, retry=SAME_REQUEST)
    assert not once.ok and once.attempts == 1 and once.constrained and llm.requests[0].json_schema == schema
    llm = ScriptedLLM(["x", "3"], supports_json_schema=True)
    assert ask(llm, "q", SamplingParams(), parse=_number, schema=schema, retry=RESAMPLE).parsed == 3
    free = ScriptedLLM(["3"])  # an LLM without schema support gets no schema, only the parser
    assert ask(free, "q", SamplingParams(), parse=_number, schema=schema).ok and free.requests[0].json_schema is None


def test_raw_prompt_and_no_parser_and_bad_bound() -> None:
    llm = ScriptedLLM(["anything"])
    answer = ask(llm, "Q1:", SamplingParams(), raw_prompt=True)
    assert (
        answer.ok
        and answer.parsed == "anything"
        and llm.requests[0].prompt == "Q1:"
        and llm.requests[0].messages is None
    )
    with pytest.raises(EvalError, match="max_attempts must be at least 1"):
        ask(llm, "q", SamplingParams(), max_attempts=0)


class _CutLLM:
    """An LLM whose every answer stops at max_tokens (what a too-small max_tokens produces)."""

    name = "cut"
    supports_json_schema = False

    def __init__(self) -> None:
        self.requests: list[LLMRequest] = []

    def count_tokens(self, text: str) -> int:
        return len(text.split())

    def complete(self, request: LLMRequest) -> LLMResult:
        self.requests.append(request)
        return LLMResult(text="4", usage=Usage(1, 0, request.sampling.max_tokens), finish_reason="length")


def test_both_callers_record_the_max_tokens_note_in_their_own_record_format() -> None:
    def reject(text: str) -> int:
        raise ParseFailure("truncated")

    tpl = load_template("s000-book-final")
    trace = Trace(_CutLLM(), MethodSettings(max_tokens=16, max_attempts=2))
    step = trace.ask_prompt("p", tpl, kind="final", parse=reject)
    assert step.failures == [
        "attempt 1: truncated (output hit max_tokens)",
        "attempt 2: truncated (output hit max_tokens)",
    ]
    assert not step.ok and step.parsed is None and step.attempts == 2
    assert step.usage == Usage(1, 0, 16) and step.retry_usage == Usage(1, 0, 16)  # kept attempt, rejected one
    assert str(step.outcome) == "cut_at_max_tokens"
    llm = _CutLLM()
    j = ask_judgment(
        llm,
        load_template("sumie-match"),
        "p",
        item="i",
        parse=reject,
        max_tokens=64,
        max_attempts=2,
        raise_on_invalid=False,
    )
    assert j.failures == [{"raw": "4", "reason": "truncated (answer cut at max_tokens=64)"}] * 2
    assert not j.valid and j.label is None and j.raw == "4" and j.retries == 1
    assert [r.sampling.seed for r in llm.requests] == [0, RETRY_SEED_STRIDE]
