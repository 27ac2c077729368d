"""The Responses API (`POST /v1/responses`) for text in and text out, as OpenAI and vLLM serve it: the
request (`input` as a string or a list of messages, `instructions`, `max_output_tokens`,
`temperature`, `top_p`, `text.format` for JSON output, log-probabilities through `include`), the
response object (one assistant message; `status` "incomplete" with `incomplete_details.reason`
"max_output_tokens" when the limit cut it) and its streamed events (`response.created` ...
`response.output_text.delta` ... `response.completed`). Inspect's `openai/NAME` provider and the
`openai` SDK's `client.responses` speak it. memloop stores nothing, runs no tools and no reasoning:
fields asking for those are 400s naming them."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any, ClassVar, Literal

from memloop.engine.sample.sampling import MAX_LOGPROBS
from memloop.engine.serve.protocol import FieldError, OutputCap, _no_lone_surrogate, _Request, chat_logprobs
from memloop.engine.serve.streaming import StreamShape
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt

# Fields memloop does not implement on this route, and the values that ask for nothing (what Inspect
# and the SDK send by default): tools, stored responses, reasoning, background runs.
RESPONSES_UNSUPPORTED: dict[str, tuple[Any, ...]] = {
    "tools": (None, []),
    "tool_choice": (None, "none", "auto"),
    "parallel_tool_calls": (None, True, False),
    "store": (None, False),
    "background": (None, False),
    "service_tier": (None, "auto", "default"),
    "reasoning": (None, {}),
    "truncation": (None, "disabled"),
    "previous_response_id": (None,),
    "conversation": (None,),
    "max_tool_calls": (None,),
    "prompt": (None,),
    "stream_options": (None, {}),
}
# Labels that change nothing in the answer: accepted with any value (`metadata` is echoed back).
RESPONSES_LABELS = frozenset({"user", "metadata", "safety_identifier", "prompt_cache_key"})
INCLUDE_LOGPROBS = "message.output_text.logprobs"
INERT_INCLUDES = frozenset({"reasoning.encrypted_content"})  # no reasoning items: nothing to include
TEXT_PARTS = ("input_text", "output_text", "text")
ROLES = ("user", "system", "developer", "assistant")


class TextFormat(BaseModel):
    """`text.format`: plain text, any JSON object, or JSON following `schema`."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    type: Literal["text", "json_object", "json_schema"]
    json_schema: dict[str, Any] | None = Field(default=None, alias="schema")
    name: str | None = None


class TextConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    format: TextFormat | None = None
    verbosity: Literal["medium"] | None = None  # the only verbosity a model without the setting has


class ResponsesRequest(_Request):
    route: ClassVar[str] = "/v1/responses"
    unsupported: ClassVar[dict[str, tuple[Any, ...]]] = RESPONSES_UNSUPPORTED
    labels: ClassVar[frozenset[str]] = RESPONSES_LABELS

    model: str | None = None
    input: str | list[Any]
    instructions: str | None = None
    max_output_tokens: OutputCap | None = None
    temperature: Any = None
    top_p: Any = None
    text: TextConfig | None = None
    stream: StrictBool | None = False
    include: list[str] | None = None
    top_logprobs: StrictInt | None = Field(default=None, ge=0, le=MAX_LOGPROBS)
    metadata: dict[str, Any] | None = None

    def messages(self) -> list[dict[str, str]]:
        """`instructions` as the system message, then `input` (a string is one user message)."""
        out = (
            []
            if self.instructions is None
            else [{"role": "system", "content": _text(self.instructions, "instructions")}]
        )
        if isinstance(self.input, str):
            return [*out, {"role": "user", "content": _text(self.input, "input")}]
        if not self.input:
            raise FieldError("`input` is an empty list; send a string or at least one message", "input")
        return [*out, *(_message(item, f"input[{i}]") for i, item in enumerate(self.input))]

    def schema(self) -> dict[str, Any] | None:
        fmt = self.text.format if self.text is not None else None
        if fmt is None or fmt.type == "text":
            return None
        if fmt.type == "json_object":
            return {"type": "object"}
        if not isinstance(fmt.json_schema, dict):
            raise FieldError("`text.format.schema` must be a JSON Schema object (type json_schema)", "text.format")
        return fmt.json_schema

    def logprob_count(self) -> int | None:
        """Alternatives per output token when `include` asks for the output text's log-probabilities
        (or `top_logprobs` is above 0), else None."""
        for name in self.include or []:
            if name != INCLUDE_LOGPROBS and name not in INERT_INCLUDES:
                raise FieldError(
                    f"`include` value {name!r} is not served here; memloop can include {INCLUDE_LOGPROBS!r}", "include"
                )
        asked = INCLUDE_LOGPROBS in (self.include or []) or bool(self.top_logprobs)
        return (self.top_logprobs or 0) if asked else None

    def sampling(self) -> dict[str, Any]:
        return {
            "max_tokens": self.max_output_tokens,
            "temperature": 1.0 if self.temperature is None else self.temperature,
            "top_p": self.top_p,
            "logprobs": self.logprob_count(),
        }


def _text(value: Any, where: str) -> str:
    try:
        return _no_lone_surrogate(value)
    except ValueError as exc:
        raise FieldError(f"`{where}` {exc}", where.split("[")[0]) from None


def _message(item: Any, where: str) -> dict[str, str]:
    """One input item: a message whose content is a string or a list of text parts."""
    if not isinstance(item, dict) or item.get("type", "message") != "message":
        kind = item.get("type") if isinstance(item, dict) else type(item).__name__
        raise FieldError(
            f"`{where}` is a {kind!r} item; memloop serves text: send messages ({{role, content}}) "
            "only, no tool calls or their outputs",
            "input",
        )
    role, content = item.get("role"), item.get("content")
    if role not in ROLES:
        raise FieldError(f"`{where}.role` must be one of {', '.join(ROLES)}, got {str(role)[:40]!r}", "input")
    if isinstance(content, str):
        return {"role": role, "content": _text(content, where)}
    if not isinstance(content, list):
        raise FieldError(f"`{where}.content` must be a string or a list of text parts", "input")
    texts = []
    for j, part in enumerate(content):
        if not isinstance(part, dict) or part.get("type") not in TEXT_PARTS or not isinstance(part.get("text"), str):
            kind = part.get("type") if isinstance(part, dict) else type(part).__name__
            raise FieldError(
                f"`{where}.content[{j}]` is a {kind!r} part; memloop serves text parts ({', '.join(TEXT_PARTS)}) only",
                "input",
            )
        texts.append(_text(part["text"], where))
    return {"role": role, "content": "".join(texts)}


class ResponseBuilder:
    """The response object of one request, as it starts and as it ends."""

    def __init__(self, req: ResponsesRequest, model: str) -> None:
        self.req = req
        self.model = model
        self.id = f"resp_{uuid.uuid4().hex}"
        self.message_id = f"msg_{uuid.uuid4().hex}"
        self.created = int(time.time())

    def message(self, text: str, entries: list[dict[str, Any]] | None, status: str) -> dict[str, Any]:
        part = {
            "type": "output_text",
            "text": text,
            "annotations": [],
            "logprobs": chat_logprobs(entries)["content"] if entries is not None else [],
        }
        return {"type": "message", "id": self.message_id, "status": status, "role": "assistant", "content": [part]}

    def response(
        self, status: str, output: list[dict[str, Any]], result: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        req = self.req
        fmt = req.text.format if req.text is not None and req.text.format is not None else None
        out: dict[str, Any] = {
            "id": self.id,
            "object": "response",
            "created_at": self.created,
            "status": status,
            "error": None,
            "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
            "instructions": req.instructions,
            "max_output_tokens": req.max_output_tokens,
            "model": self.model,
            "output": output,
            "parallel_tool_calls": True,
            "previous_response_id": None,
            "reasoning": None,
            "store": False,
            "temperature": 1.0 if req.temperature is None else req.temperature,
            "text": {"format": fmt.model_dump(by_alias=True, exclude_none=True) if fmt else {"type": "text"}},
            "tool_choice": "auto",
            "tools": [],
            "top_p": 1.0 if req.top_p is None else req.top_p,
            "truncation": "disabled",
            "metadata": req.metadata or {},
            "usage": None,
        }
        if result is not None:
            u = result["usage"]
            out["completed_at"] = int(time.time())
            out["usage"] = {
                "input_tokens": u["prompt_tokens"],
                "input_tokens_details": {"cached_tokens": u["cached_tokens"], "cache_write_tokens": 0},
                "output_tokens": u["decoded_tokens"],
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": u["prompt_tokens"] + u["decoded_tokens"],
            }
        return out

    def finished(self, result: dict[str, Any]) -> dict[str, Any]:
        """The whole response of an engine result."""
        status = "incomplete" if result["finish_reason"] == "length" else "completed"
        entries = result.get("logprobs") if self.req.logprob_count() is not None else None
        return self.response(status, [self.message(result["text"], entries, status)], result)


class ResponseEvents(StreamShape):
    """The Responses API's streamed events (`event: TYPE` and `data: {type, sequence_number, ...}`):
    response.created, .in_progress, .output_item.added, .content_part.added, .output_text.delta per
    step, then .output_text.done, .content_part.done, .output_item.done and .completed (or
    .incomplete); a failure after the 200 is an `error` event."""

    def __init__(self, builder: ResponseBuilder) -> None:
        self.builder = builder
        self.logprobs = builder.req.logprob_count() is not None
        self.sequence = 0

    def event(self, kind: str, **fields: Any) -> bytes:
        payload = {"type": kind, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return (
            f"event: {kind}\ndata: ".encode()
            + json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode()
            + b"\n\n"
        )

    def _where(self) -> dict[str, Any]:
        return {"item_id": self.builder.message_id, "output_index": 0, "content_index": 0}

    def opening(self, count: int) -> list[bytes]:
        b = self.builder
        started = b.response("in_progress", [])
        item = b.message("", None, "in_progress")
        item["content"] = []
        return [
            self.event("response.created", response=started),
            self.event("response.in_progress", response=started),
            self.event("response.output_item.added", output_index=0, item=item),
            self.event(
                "response.content_part.added",
                **self._where(),
                part={"type": "output_text", "text": "", "annotations": [], "logprobs": []},
            ),
        ]

    def delta(self, index: int, text: str, entries: list[dict[str, Any]]) -> list[bytes]:
        logprobs = chat_logprobs(entries)["content"] if self.logprobs else []
        return [self.event("response.output_text.delta", **self._where(), delta=text, logprobs=logprobs)]

    def finish(self, index: int, text: str, entries: list[dict[str, Any]], result: dict[str, Any]) -> list[bytes]:
        out = self.delta(index, text, entries) if text or entries else []
        whole = self.builder.finished(result)
        item = whole["output"][0]
        part = item["content"][0]
        return [
            *out,
            self.event("response.output_text.done", **self._where(), text=part["text"], logprobs=part["logprobs"]),
            self.event("response.content_part.done", **self._where(), part=part),
            self.event("response.output_item.done", output_index=0, item=item),
            self.event(f"response.{whole['status']}", response=whole),
        ]

    def closing(self, results: list[dict[str, Any]]) -> list[bytes]:
        return []

    def failed(self, error: dict[str, Any]) -> list[bytes]:
        return [self.event("error", code=str(error["code"]), message=error["message"], param=error["param"])]
