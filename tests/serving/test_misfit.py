"""The engine answers ahead whether a request fits (`Engine.misfit`): the same check `submit` applies,
on the prompt as it will be encoded (chat template included), so callers need no guess of their own."""

from __future__ import annotations


def test_misfit_counts_the_chat_template_a_text_count_leaves_out(smollm2_engine) -> None:
    eng = smollm2_engine
    max_tokens = 64
    text = "word " * (eng.max_context - max_tokens)
    while eng.count_tokens(text) > eng.max_context - max_tokens:
        text = text[:-5]
    assert eng.count_tokens(text) + max_tokens <= eng.max_context  # a count of the text says it fits
    request = {"messages": [{"role": "user", "content": text}], "sampling": {"max_tokens": max_tokens}}
    why = eng.misfit(request)
    assert why is not None and "exceeds the model context" in why  # the template's tokens push it over
    short = {"messages": [{"role": "user", "content": "word " * 100}], "sampling": {"max_tokens": max_tokens}}
    assert eng.misfit(short) is None
