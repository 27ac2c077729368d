"""A method's validity retry on the real engine: the retry is a different request, so it can succeed."""

from __future__ import annotations

from memloop.eval.asking import ParseFailure, retry_seed
from memloop.eval.methods.base import MethodSettings, Trace
from memloop.eval.templates import load_template


def test_a_validity_retry_of_a_seeded_greedy_request_decodes_a_different_output(engine_llm) -> None:
    """The engine answers an identical seeded request with identical tokens, so a retry that resent it
    (the old `SAME_REQUEST`) could never pass a check the first answer failed; the reseeded retry can."""
    outputs: list[str] = []

    def first_is_invalid(text: str) -> str:  # a validity rule the first answer breaks, whatever it says
        outputs.append(text)
        if len(outputs) == 1:
            raise ParseFailure("rejected for the test")
        return text

    trace = Trace(engine_llm, MethodSettings(max_tokens=12, seed=11, max_attempts=2))
    prompt = "Write one short sentence about a lighthouse keeper."
    step = trace.ask_prompt(prompt, load_template("s000-book-final"), kind="final", parse=first_is_invalid)
    assert step.ok and step.attempts == 2 and len(outputs) == 2
    assert outputs[0] != outputs[1], outputs
    assert step.output == outputs[1] and step.failures[0].startswith("attempt 1: rejected for the test")
    # the rejected attempt's tokens are kept apart from the kept one's
    assert step.retry_usage.prompt_tokens > 0 and step.retry_usage.decoded_tokens > 0
    assert step.usage.prompt_tokens == step.retry_usage.prompt_tokens  # the same prompt, sent twice
    # reproducible: the same seeded step asks the same two requests and gets the same two answers
    again: list[str] = []

    def record(text: str) -> str:
        again.append(text)
        if len(again) == 1:
            raise ParseFailure("rejected for the test")
        return text

    Trace(engine_llm, MethodSettings(max_tokens=12, seed=11, max_attempts=2)).ask_prompt(
        prompt, load_template("s000-book-final"), kind="final", parse=record
    )
    assert again == outputs
    assert retry_seed(11, 1) != 12  # not the next repeat's seed
