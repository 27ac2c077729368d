"""Streamed answers (`stream: true`) through the `openai` SDK against the real server on 127.0.0.1:
chat and completions stream the same text, finish reason, log-probabilities and usage as the answer
not streamed; n choices interleave by index; a stop string's text is never sent; a client that
disconnects mid-stream frees its sequence at once; what can be refused is a 400 before the stream."""

from __future__ import annotations

import json
import time

import httpx
import jsonschema
import openai
import pytest

from tests.http_server import serve_app

pytestmark = pytest.mark.timeout(300)

MESSAGES = [{"role": "user", "content": "Name three colours."}]


def _stats(base_url: str) -> dict:
    return httpx.get(f"{base_url}/v1/stats").json()


def test_streamed_chat_is_the_answer_not_streamed(client):
    kw = dict(model="smollm2", messages=MESSAGES, max_tokens=30, temperature=0, logprobs=True, top_logprobs=2)
    whole = client.chat.completions.create(**kw)
    chunks = list(client.chat.completions.create(**kw, stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant" and chunks[0].object == "chat.completion.chunk"
    assert len({c.id for c in chunks}) == 1
    *body, last = chunks
    assert last.choices == [] and last.usage.completion_tokens == whole.usage.completion_tokens == 30
    assert last.usage.prompt_tokens == whole.usage.prompt_tokens and last.usage.total_tokens == whole.usage.total_tokens
    assert all(c.usage is None for c in body)
    assert [c.choices[0].finish_reason for c in body].count(None) == len(body) - 1
    assert body[-1].choices[0].finish_reason == whole.choices[0].finish_reason == "length"
    assert "".join(c.choices[0].delta.content or "" for c in body) == whole.choices[0].message.content
    streamed = [e for c in body if c.choices[0].logprobs for e in c.choices[0].logprobs.content]
    want = whole.choices[0].logprobs.content
    assert [(e.token, e.bytes, [t.token for t in e.top_logprobs]) for e in streamed] == [
        (e.token, e.bytes, [t.token for t in e.top_logprobs]) for e in want
    ]
    # the second request's prompt comes from the prefix cache: the same numbers up to float rounding
    assert max(abs(a.logprob - b.logprob) for a, b in zip(streamed, want)) < 1e-4


def test_streamed_completions_interleave_choices_and_keep_stop_strings_out(client):
    kw = dict(
        model="smollm2",
        prompt="One, two, three,",
        max_tokens=12,
        temperature=0.8,
        seed=7,
        n=2,
        logprobs=1,
        stop=[" six"],
    )
    whole = client.completions.create(**kw)
    chunks = list(client.completions.create(**kw, stream=True))
    order = [c.choices[0].index for c in chunks]
    assert set(order) == {0, 1} and order != sorted(order)  # both choices, interleaved as they are sampled
    for choice in whole.choices:
        mine = [c.choices[0] for c in chunks if c.choices[0].index == choice.index]
        assert "".join(c.text for c in mine) == choice.text
        assert [c.finish_reason for c in mine][-1] == choice.finish_reason and mine[-1].finish_reason
        tokens = [t for c in mine for t in c.logprobs.tokens]
        offsets = [o for c in mine for o in c.logprobs.text_offset]
        assert tokens == choice.logprobs.tokens and offsets == choice.logprobs.text_offset
        assert [v for c in mine for v in c.logprobs.token_logprobs] == choice.logprobs.token_logprobs
    # greedy, stopped by the string: no chunk ever held it
    stopped = list(
        client.completions.create(
            model="smollm2", prompt="One, two, three, four,", max_tokens=12, temperature=0, stop=[" six"], stream=True
        )
    )
    text = "".join(c.choices[0].text for c in stopped)
    assert text == " five," and stopped[-1].choices[0].finish_reason == "stop"


def test_a_streamed_json_schema_answer_is_valid(client):
    schema = {
        "type": "object",
        "properties": {"colour": {"type": "string", "maxLength": 12}},
        "required": ["colour"],
        "additionalProperties": False,
    }
    chunks = client.chat.completions.create(
        model="smollm2",
        messages=MESSAGES,
        max_tokens=40,
        temperature=0,
        stream=True,
        response_format={"type": "json_schema", "json_schema": {"name": "c", "schema": schema}},
    )
    jsonschema.validate(json.loads("".join(c.choices[0].delta.content or "" for c in chunks)), schema)


def test_the_wire_format_is_server_sent_events(base_url):
    with httpx.stream(
        "POST",
        f"{base_url}/v1/chat/completions",
        timeout=120,
        json={"messages": MESSAGES, "max_tokens": 3, "stream": True},
    ) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        events = [line for line in r.iter_lines() if line]
    assert all(e.startswith("data: ") for e in events) and events[-1] == "data: [DONE]"
    assert json.loads(events[-2][6:])["choices"][0]["finish_reason"] == "length"


def test_a_disconnect_mid_stream_frees_the_sequence_at_once(client, base_url):
    before = _stats(base_url)["cancelled_requests"]
    stream = client.chat.completions.create(
        model="smollm2",
        messages=[{"role": "user", "content": "Count to 5000."}],
        max_tokens=4000,
        temperature=0,
        stream=True,
    )
    got = [c for _, c in zip(range(5), stream)]
    assert len(got) == 5 and _stats(base_url)["running"] == 1
    decoded = _stats(base_url)["decoded_tokens"]
    stream.close()
    # bounded by work, not time: a sequence left running decodes on to its 4,000 tokens and finishes uncancelled
    while (s := _stats(base_url))["cancelled_requests"] == before and s["running"]:
        time.sleep(0.02)
    stats = _stats(base_url)
    assert stats["cancelled_requests"] == before + 1 and stats["running"] == 0 and stats["server_in_flight"] == 0
    print(f"sequence freed {stats['decoded_tokens'] - decoded} tokens after the client closed the stream")


def test_refusals_come_before_the_stream(client):
    for kw, param in (
        (dict(temperature=-1), None),
        (dict(stream_options={"include_usage": "yes"}), None),
        (dict(logprobs=5), "logprobs"),
        (dict(extra_body={"frobnicate": 1}), "frobnicate"),
    ):
        with pytest.raises(openai.BadRequestError) as err:
            client.chat.completions.create(model="smollm2", messages=MESSAGES, max_tokens=2, stream=True, **kw)
        assert param is None or err.value.param == param, err.value.message
    with pytest.raises(openai.BadRequestError) as err:
        client.completions.create(model="smollm2", prompt="Hi", max_tokens=2, stream=True, echo=True)
    assert err.value.param == "stream" and "`echo`" in err.value.message
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="gpt-17", prompt="Hi", max_tokens=2, stream=True)


def test_past_the_deadline_a_stream_ends_with_an_error_event(engine):
    from memloop.engine.serve.server import create_app

    with serve_app(create_app(engine, "smollm2", request_timeout=1.0)) as url:
        before = _stats(url)["cancelled_requests"]
        # greedy: this prompt decodes to its 4,000-token cap (sampled at OpenAI's default temperature 1, it could
        # end with an end-of-text token inside the second, and the stream would finish before its deadline)
        with httpx.stream(
            "POST",
            f"{url}/v1/completions",
            timeout=120,
            json={"prompt": "Count to 5000:", "max_tokens": 4000, "temperature": 0, "stream": True},
        ) as r:
            events = [line for line in r.iter_lines() if line]
        assert events[-1] == "data: [DONE]"
        error = json.loads(events[-2][6:])["error"]
        assert error["code"] == 504 and "--request-timeout" in error["message"]
        assert _stats(url)["server_in_flight"] == 0
        while (s := _stats(url))["cancelled_requests"] == before and s["running"]:  # at the next step, or never
            time.sleep(0.02)
        assert _stats(url)["cancelled_requests"] == before + 1


@pytest.mark.parametrize(
    "text, stop",
    [
        ("Hello 🎉 wörld, café! STOP and more", ("STOP",)),
        ("Ünïcödé ✓✓ 日本語のテキスト", ()),
        ("a b c d e f", ("d e", "zz")),
    ],
)
def test_streamed_text_adds_up_to_the_decoding(loaded_model, text, stop):
    """The incremental text of the real tokenizer's tokens (characters split across tokens included)
    adds up to the whole decoding cut at the stop string; nothing of the stop string is sent early."""
    from memloop.engine.serve.streaming import ChoiceStream

    tok = loaded_model.tokenizer
    ids = tok.encode(text)
    # the engine stops at the token that completes a stop string; that last one comes with the result
    ids = ids[: next((k + 1 for k in range(len(ids)) if any(s in tok.decode(ids[: k + 1]) for s in stop)), len(ids))]
    full = tok.decode(ids)
    cut = min([full.find(s) for s in stop if s in full], default=len(full))
    stream = ChoiceStream(tok.decode, None, stop)
    sent = "".join(stream.add(t, None)[0] for t in ids[:-1])
    assert sent and full[:cut].startswith(sent) and not any(s in sent for s in stop)
    rest, _ = stream.finish({"text": full[:cut], "logprobs": []})
    assert sent + rest == full[:cut]
