"""A scripted OpenAI-compatible model on 127.0.0.1 for whole-config runs in the default suite.

It answers every chat request deterministically: a request constrained by a JSON Schema gets the
smallest instance of that schema, a prompt ending in PRISM's `[OBJECTS FOR ...]` header empty
sections, any other request one fixed sentence. Usage is counted in words.
Methods and judges then run their real prompts, parsing, revisions and scoring; outputs that do not
parse as a method or judge needs are recorded as the failures they are, which a test can count.
Raw completions (F-ART's transcripts) get the same sentence unless the test scripts them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any, Callable, Iterator

from fastapi import FastAPI

from tests.http_server import serve_app

SENTENCE = "The keeper tends the light alone, and the ship reaches the harbour safely."
# a prompt that ends in a sectioned-revision header (PRISM's free-text format) gets its smallest answer:
# every section it opens, each with no revision
SECTIONED = {"[OBJECTS FOR UPDATE]": "{}\n\n[OBJECTS FOR ADD]\n{}", "[OBJECTS FOR ADD]": "{}"}


def minimal_instance(schema: dict[str, Any], defs: dict[str, Any] | None = None) -> Any:
    """The smallest value a JSON Schema accepts (required properties only, empty arrays, first choices)."""
    defs = defs if defs is not None else schema.get("$defs", schema.get("definitions", {}))
    if "$ref" in schema:
        return minimal_instance(defs[schema["$ref"].rsplit("/", 1)[-1]], defs)
    for key in ("anyOf", "oneOf", "allOf"):
        if key in schema:
            return minimal_instance(schema[key][0], defs)
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return schema["enum"][0]
    kind = schema.get("type", "object")
    kind = kind[0] if isinstance(kind, list) else kind
    if kind == "object":
        return {k: minimal_instance(schema["properties"][k], defs) for k in schema.get("required", ())}
    if kind == "array":
        n = schema.get("minItems", 0)
        return [minimal_instance(schema.get("items", {}), defs) for _ in range(n)]
    if kind == "string":
        return "x" * max(1, schema.get("minLength", 1))
    if kind in ("integer", "number"):
        return schema.get("minimum", 0)
    if kind == "boolean":
        return False
    return None


Answer = Callable[[dict], "str | tuple[str, str] | None"]


def _scripted(answer: "Answer | None", body: dict) -> tuple[str, str] | None:
    """The test's own answer to a request as (text, finish reason), or None for the defaults."""
    got = answer(body) if answer is not None else None
    return (got, "stop") if isinstance(got, str) else got


def _app(seen: list[dict], answer: Answer | None = None, delay_s: float = 0.0) -> FastAPI:
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def chat(body: dict):
        seen.append(body)
        if delay_s:  # a slow model: lets a test interrupt a client between its requests
            await asyncio.sleep(delay_s)
        fmt = body.get("response_format") or {}
        prompt = " ".join(str(m.get("content", "")) for m in body.get("messages", []))
        scripted = _scripted(answer, body)
        if scripted is not None:  # the test's own answer to this request
            text, finish = scripted
        elif fmt.get("type") == "json_schema":
            text, finish = json.dumps(minimal_instance(fmt["json_schema"]["schema"])), "stop"
        else:
            text, finish = SECTIONED.get(prompt.rstrip().rsplit("\n", 1)[-1], SENTENCE), "stop"
        return {
            "choices": [{"message": {"role": "assistant", "content": text}, "finish_reason": finish}],
            "usage": {"prompt_tokens": len(prompt.split()), "completion_tokens": len(text.split())},
        }

    @app.post("/v1/completions")
    async def complete(body: dict):  # raw prompts (F-ART's tool transcripts)
        seen.append(body)
        text, finish = _scripted(answer, body) or (SENTENCE, "stop")
        return {
            "choices": [{"text": text, "finish_reason": finish}],
            "usage": {
                "prompt_tokens": len(str(body.get("prompt", "")).split()),
                "completion_tokens": len(text.split()),
            },
        }

    @app.get("/v1/models")
    async def models():  # the run's check before any unit: this server answers any model name, so it lists none
        return {"object": "list", "data": []}

    return app


@contextlib.contextmanager
def scripted_endpoint(answer: Answer | None = None, delay_s: float = 0.0) -> Iterator[tuple[str, list[dict]]]:
    """(base URL, the request bodies it received) of a scripted model served on 127.0.0.1. `answer`
    may script a request's answer (return the text, or (text, finish reason): "length" says it was cut
    at max_tokens), or leave it to the defaults (return None); each chat request is answered after
    `delay_s` seconds."""
    seen: list[dict] = []
    with serve_app(_app(seen, answer, delay_s)) as url:
        yield url, seen


# the last line of SUMIE's GU/GO JSON prompts, which (under the papers' free decoding) carry no schema
JSON_MEMORY_ASKS = ("Now write the summary JSON.", "Now write the updated summary JSON.")


def attribute_table_answer(body: dict) -> str | None:
    """One attribute for a request for an open attribute table (SUMIE's GU/GO JSON memories: `{attribute:
    [values]}`), held by a JSON Schema or asked for in free text, so those methods keep a memory; the
    defaults for the rest."""
    fmt = body.get("response_format") or {}
    schema = (fmt.get("json_schema") or {}).get("schema") or {} if fmt.get("type") == "json_schema" else {}
    extra = schema.get("additionalProperties")
    if schema.get("type") == "object" and isinstance(extra, dict) and not schema.get("properties"):
        return json.dumps({"name": minimal_instance(extra) or ["x"]})
    prompt = " ".join(str(m.get("content", "")) for m in body.get("messages", []))
    if not schema and prompt.rstrip().endswith(JSON_MEMORY_ASKS):
        return json.dumps({"name": ["x"]})
    return None
