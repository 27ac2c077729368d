"""The Responses API (`POST /v1/responses`) through the `openai` SDK's `client.responses` against the real
server on 127.0.0.1: the same text as chat completions for the same messages, `instructions`,
`max_output_tokens` (an incomplete response), `text.format` JSON output, log-probabilities, the streamed
events adding up to the response, and the fields memloop does not serve refused by name."""

from __future__ import annotations

import json

import jsonschema
import openai
import pytest

pytestmark = pytest.mark.timeout(300)

QUESTION = "Name three colours."


def test_a_response_is_the_chat_answer_to_the_same_messages(client):
    chat = client.chat.completions.create(
        model="smollm2",
        max_tokens=40,
        temperature=0,
        messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": QUESTION}],
    )
    by_string = client.responses.create(
        model="smollm2", input=QUESTION, instructions="Be brief.", max_output_tokens=40, temperature=0
    )
    by_parts = client.responses.create(
        model="smollm2",
        max_output_tokens=40,
        temperature=0,
        input=[
            {"role": "system", "content": "Be brief."},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": QUESTION}]},
        ],
    )
    for r in (by_string, by_parts):
        assert r.object == "response" and r.model == "smollm2" and r.id.startswith("resp_")
        assert r.output_text == chat.choices[0].message.content
        assert r.status == "completed" and r.incomplete_details is None
        (item,) = r.output
        assert item.type == "message" and item.role == "assistant" and item.status == "completed"
        assert r.usage.input_tokens == chat.usage.prompt_tokens
        assert r.usage.output_tokens == chat.usage.completion_tokens
        assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens


def test_max_output_tokens_makes_an_incomplete_response(client):
    r = client.responses.create(model="smollm2", input=QUESTION, max_output_tokens=3, temperature=0, top_p=0.9)
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert r.usage.output_tokens == 3 and r.output[0].status == "incomplete"
    assert r.max_output_tokens == 3 and r.top_p == 0.9 and r.temperature == 0


def test_text_format_json_schema_and_logprobs(client):
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 12}},
        "required": ["city"],
        "additionalProperties": False,
    }
    r = client.responses.create(
        model="smollm2",
        input="Weather in Paris, as JSON.",
        max_output_tokens=60,
        temperature=0,
        text={"format": {"type": "json_schema", "name": "w", "schema": schema}},
        include=["message.output_text.logprobs"],
        top_logprobs=2,
    )
    jsonschema.validate(json.loads(r.output_text), schema)
    assert r.text.format.type == "json_schema"
    logprobs = r.output[0].content[0].logprobs
    assert "".join(lp.token for lp in logprobs) == r.output_text
    assert all(len(lp.top_logprobs) == 2 and lp.logprob <= 0 for lp in logprobs)
    plain = client.responses.create(model="smollm2", input=QUESTION, max_output_tokens=4)
    assert plain.output[0].content[0].logprobs == []


def test_streamed_events_add_up_to_the_response(client):
    whole = client.responses.create(model="smollm2", input=QUESTION, max_output_tokens=12, temperature=0)
    events = list(
        client.responses.create(model="smollm2", input=QUESTION, max_output_tokens=12, temperature=0, stream=True)
    )
    kinds = [e.type for e in events]
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.incomplete",
    ]  # cut by max_output_tokens, as OpenAI ends it
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    final = events[-1].response
    assert deltas == events[-4].text == final.output_text == whole.output_text
    assert final.usage.output_tokens == whole.usage.output_tokens == 12
    schema = {
        "type": "object",
        "properties": {"ok": {"type": "boolean"}},
        "required": ["ok"],
        "additionalProperties": False,
    }
    done = list(
        client.responses.create(
            model="smollm2",
            input="Is the sky blue? As JSON.",
            max_output_tokens=40,
            temperature=0,
            stream=True,
            text={"format": {"type": "json_schema", "name": "a", "schema": schema}},
        )
    )
    assert done[-1].type == "response.completed" and done[-1].response.status == "completed"
    assert json.loads(done[-1].response.output_text)["ok"] in (True, False)


@pytest.mark.parametrize(
    "extra, param",
    [
        ({"tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}]}, "tools"),
        ({"previous_response_id": "resp_1"}, "previous_response_id"),
        ({"reasoning": {"effort": "low"}}, "reasoning"),
        ({"store": True}, "store"),
        ({"include": ["file_search_call.results"]}, "include"),
        ({"frobnicate": 1}, "frobnicate"),
        ({"input": [{"type": "function_call_output", "call_id": "c", "output": "x"}]}, "input"),
        ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "http://x"}]}]}, "input"),
    ],
)
def test_what_memloop_does_not_serve_is_a_400_naming_it(client, extra, param):
    body = {"model": "smollm2", "input": "Hi", "max_output_tokens": 2, **extra}
    with pytest.raises(openai.BadRequestError) as err:
        client.responses.create(
            **{k: v for k, v in body.items() if k != "frobnicate"},
            extra_body={k: v for k, v in body.items() if k == "frobnicate"},
        )
    assert err.value.param == param, err.value.message


def test_inspects_defaults_are_accepted_and_an_unknown_model_is_a_404(client):
    r = client.responses.create(
        model="smollm2",
        input="Hi",
        max_output_tokens=2,
        store=False,
        include=["reasoning.encrypted_content"],
        metadata={"run": "r1"},
        user="u",
        parallel_tool_calls=True,
        truncation="disabled",
    )
    assert r.metadata == {"run": "r1"} and r.store is False
    with pytest.raises(openai.NotFoundError) as err:
        client.responses.create(model="gpt-17", input="Hi", max_output_tokens=2)
    assert err.value.code == "model_not_found"
