"""A scripted OpenAI-compatible model on 127.0.0.1 for whole-config runs in the default suite.

It answers every chat request deterministically: a request constrained by a JSON Schema gets the
smallest instance of that schema, any other request one fixed sentence. Usage is counted in words.
Methods and judges then run their real prompts, parsing, revisions and scoring; outputs that do not
parse as a method or judge needs are recorded as the failures they are, which a test can count.
"""
from __future__ import annotations

import contextlib
import json
from typing import Any, Callable, Iterator

from fastapi import FastAPI

from tests.http_server import serve_app

SENTENCE = "The keeper tends the light alone, and the ship reaches the harbour safely."


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


Answer = Callable[[dict], "str | None"]


def _app(seen: list[dict], answer: Answer | None = None) -> FastAPI:
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def chat(body: dict):
        seen.append(body)
        fmt = body.get("response_format") or {}
        scripted = answer(body) if answer is not None else None
        if scripted is not None:  # the test's own answer to this request
            text = scripted
        elif fmt.get("type") == "json_schema":
            text = json.dumps(minimal_instance(fmt["json_schema"]["schema"]))
        else:
            text = SENTENCE
        prompt = " ".join(str(m.get("content", "")) for m in body.get("messages", []))
        return {"choices": [{"message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": len(prompt.split()), "completion_tokens": len(text.split())}}

    return app


@contextlib.contextmanager
def scripted_endpoint(answer: Answer | None = None) -> Iterator[tuple[str, list[dict]]]:
    """(base URL, the request bodies it received) of a scripted model served on 127.0.0.1. `answer`
    may script a request's answer (return the text), or leave it to the defaults (return None)."""
    seen: list[dict] = []
    with serve_app(_app(seen, answer)) as url:
        yield url, seen
