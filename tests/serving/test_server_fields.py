"""What the server does with the fields a client sends, through the `openai` SDK against the real server
on 127.0.0.1: `max_completion_tokens` (what current SDKs and Inspect send) is honoured, a conflict with
`max_tokens` and any field memloop would otherwise ignore are 400s naming the field (the SDK's
`param`), and an unknown model is OpenAI's 404 `model_not_found`."""

from __future__ import annotations

import httpx
import openai
import pytest

pytestmark = pytest.mark.timeout(300)

MESSAGES = [{"role": "user", "content": "Write a long story about a dragon."}]


def test_max_completion_tokens_is_honoured(client):
    chat = client.chat.completions.create(model="smollm2", messages=MESSAGES, max_completion_tokens=5, temperature=0)
    assert chat.usage.completion_tokens == 5 and chat.choices[0].finish_reason == "length"
    both = client.chat.completions.create(
        model="smollm2", messages=MESSAGES, max_completion_tokens=3, max_tokens=3, temperature=0
    )
    assert both.usage.completion_tokens == 3
    text = client.completions.create(
        model="smollm2", prompt="Once upon a time", temperature=0, extra_body={"max_completion_tokens": 4}
    )
    assert text.usage.completion_tokens == 4


def test_a_conflict_is_a_400_naming_the_field(client):
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model="smollm2", messages=MESSAGES, max_completion_tokens=5, max_tokens=55)
    assert err.value.status_code == 400 and err.value.param == "max_tokens"
    assert "`max_tokens` (55) and `max_completion_tokens` (5) disagree" in err.value.message
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model="smollm2", messages=MESSAGES, max_completion_tokens=0)
    assert "max_completion_tokens" in err.value.message


@pytest.mark.parametrize(
    "route, field, value",
    [
        ("chat", "frobnicate", 1),
        ("text", "frobnicate", "x"),
        ("chat", "ignore_eos", True),
        ("chat", "prompt", "Hi"),
        ("text", "response_format", {"type": "json_object"}),
        ("chat", "store", True),
        ("chat", "service_tier", "flex"),
        ("chat", "stream_options", {"include_usage": True}),
    ],
)
def test_a_field_memloop_would_ignore_is_a_400_naming_it(client, route, field, value):
    with pytest.raises(openai.BadRequestError) as err:
        if route == "chat":
            client.chat.completions.create(model="smollm2", messages=MESSAGES, max_tokens=2, extra_body={field: value})
        else:
            client.completions.create(model="smollm2", prompt="Hi", max_tokens=2, extra_body={field: value})
    assert err.value.status_code == 400 and err.value.param == field, err.value.message
    assert f"`{field}`" in err.value.message


def test_defaults_and_labels_are_accepted(client):
    """What SDKs and Inspect send whose default memloop honours (store false, service tier auto, no
    tools), and the end-user label, which changes nothing in the answer."""
    plain = client.chat.completions.create(model="smollm2", messages=MESSAGES, max_tokens=4, temperature=0)
    same = client.chat.completions.create(
        model="smollm2",
        messages=MESSAGES,
        max_tokens=4,
        temperature=0,
        user="u-1",
        store=False,
        service_tier="auto",
        parallel_tool_calls=False,
    )
    assert same.choices[0].message.content == plain.choices[0].message.content


def test_an_unknown_model_is_a_404_model_not_found(client, base_url):
    with pytest.raises(openai.NotFoundError) as err:
        client.chat.completions.create(model="gpt-17", messages=MESSAGES, max_tokens=2)
    assert err.value.status_code == 404 and err.value.code == "model_not_found" and err.value.param == "model"
    assert "'gpt-17'" in err.value.message and "'smollm2'" in err.value.message
    r = httpx.post(f"{base_url}/v1/completions", json={"model": "gpt-17", "prompt": "Hi", "max_tokens": 1})
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
