"""The OpenAI request and response shapes the server speaks: the request models (pydantic, checked
before anything is queued), the fields refused rather than ignored, and the log-probability and
usage shapes of the responses."""

from __future__ import annotations

from abc import abstractmethod
from typing import Annotated, Any, ClassVar, Literal

from memloop.engine.errors import RequestError
from memloop.engine.sample.sampling import MAX_LOGPROBS
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictBool, StrictInt, field_validator

from memloop.sampling import checker

MAX_N = 64
# An output cap sent under another name (OpenAI's `max_completion_tokens`, the Responses API's
# `max_output_tokens`) is bounded by the one sampling check, as `max_tokens` is, and named as sent.
OutputCap = Annotated[StrictInt, AfterValidator(checker("max_tokens"))]

# OpenAI fields memloop does not implement, and the values that ask for nothing (accepted): a client
# relying on one of them gets a 400 naming it, never an answer that silently ignores it.
UNSUPPORTED_FIELDS: dict[str, tuple[Any, ...]] = {
    "echo": (None, False),
    "best_of": (None, 1),
    "logit_bias": (None, {}),
    "tools": (None, []),
    "tool_choice": (None, "none", "auto"),
    "functions": (None, []),
    "function_call": (None, "none", "auto"),
    "suffix": (None, ""),
    "presence_penalty": (None, 0, 0.0),
    "frequency_penalty": (None, 0, 0.0),
    "parallel_tool_calls": (None, True, False),  # inert: tools are refused above
    "service_tier": (None, "auto", "default"),
    "store": (None, False),  # memloop stores nothing
}
# Labels that change nothing in the answer (OpenAI's end-user id): accepted with any value.
LABEL_FIELDS = frozenset({"user"})
# Why a refused field is refused, where the reason is more than "not implemented".
UNSUPPORTED_WHY = {  # (completions declare `echo` as their own field, so only chat refuses it)
    "echo": "it is a /v1/completions field (the prompt, and with `logprobs` its tokens' log-probabilities, before "
    "the completion); send the text as a completion `prompt` to have it echoed",
}


class FieldError(RequestError):
    """A 400 naming the request field at fault (OpenAI's error `param`)."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


# A log-probability too small for float32 would be -inf, which JSON cannot carry (vLLM's stand-in).
MIN_LOGPROB = -9999.0


def _no_lone_surrogate(value: Any) -> Any:
    """Text must be valid Unicode: JSON can carry a lone UTF-16 surrogate (\\ud800) that no tokenizer
    can encode."""
    texts = [value] if isinstance(value, str) else value if isinstance(value, list) else []
    for text in texts:
        if isinstance(text, str):
            try:
                text.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise ValueError(
                    f"holds a lone UTF-16 surrogate ({text[exc.start]!r} at character {exc.start}); "
                    "send valid Unicode text"
                ) from None
    return value


class StreamOptions(BaseModel):
    """OpenAI's `stream_options`: a final chunk with the usage when `include_usage`."""

    model_config = ConfigDict(extra="forbid")

    include_usage: StrictBool = False


class _Request(BaseModel):
    """A route's request: its declared fields, and for any other field a 400 naming it (`refuse_fields`)."""

    model_config = ConfigDict(extra="allow")  # extra fields are looked at by `refuse_fields`
    route: ClassVar[str]
    unsupported: ClassVar[dict[str, tuple[Any, ...]]] = UNSUPPORTED_FIELDS
    labels: ClassVar[frozenset[str]] = LABEL_FIELDS

    def refuse_fields(self) -> None:
        """A FieldError for the first field memloop would otherwise ignore: one it does not implement,
        asking for something (`unsupported`), or one it does not know at all."""
        for name, value in (self.model_extra or {}).items():
            if name in self.labels:
                continue
            if name not in self.unsupported:
                raise FieldError(
                    f"`{name}` is not a field of {self.route}; leave it out (memloop refuses what it "
                    "would otherwise ignore)",
                    name,
                )
            if not any(value is v or (type(value) is type(v) and value == v) for v in self.unsupported[name]):
                why = f": {UNSUPPORTED_WHY[name]}" if name in UNSUPPORTED_WHY else ""
                raise FieldError(
                    f"`{name}` is not supported by this server{why}; leave it out (or send its "
                    "default) — memloop serves text, JSON-constrained output, the output tokens' "
                    "log-probabilities and usage",
                    name,
                )


class _Sampling(_Request):
    """The OpenAI sampling fields, passed through untouched: the engine's parser checks them."""

    model: str | None = None
    max_tokens: Any = None
    max_completion_tokens: OutputCap | None = None  # the current name of max_tokens
    temperature: Any = None
    top_p: Any = None
    top_k: Any = None
    seed: Any = None
    stop: Any = None
    stop_token_ids: Any = None
    n: int = Field(default=1, ge=1, le=MAX_N)
    stream: StrictBool | None = False
    stream_options: StreamOptions | None = None
    logprobs: Any = None
    top_logprobs: Any = None

    _stop_text = field_validator("stop")(_no_lone_surrogate)

    def refuse_fields(self) -> None:
        super().refuse_fields()
        if self.stream_options is not None and not self.stream:
            raise FieldError("`stream_options` needs `stream: true`", "stream_options")

    def include_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage

    def output_limit(self) -> Any:
        """`max_completion_tokens` (OpenAI's current name) or `max_tokens`; both, differing, is a 400."""
        if self.max_completion_tokens is None:
            return self.max_tokens
        if self.max_tokens is not None and not (
            type(self.max_tokens) is int and self.max_tokens == self.max_completion_tokens
        ):
            raise FieldError(
                f"`max_tokens` ({_shown(self.max_tokens)}) and `max_completion_tokens` "
                f"({self.max_completion_tokens}) disagree; send one of them (max_completion_tokens "
                "is the current name)",
                "max_tokens",
            )
        return self.max_completion_tokens

    @abstractmethod
    def logprob_count(self) -> int | None:
        """Alternatives asked per output token (None: no log-probabilities); each endpoint reads its own fields."""

    def sampling(self, index: int) -> dict[str, Any]:
        seed = self.seed
        if index and isinstance(seed, int) and not isinstance(seed, bool):
            seed += index  # n samples of one seed differ
        temperature = 1.0 if self.temperature is None else self.temperature  # OpenAI's default
        return {
            "max_tokens": self.output_limit(),
            "temperature": temperature,
            "top_k": self.top_k,
            "top_p": self.top_p,
            "seed": seed,
            "stop": self.stop,
            "stop_token_ids": self.stop_token_ids,
            "logprobs": self.logprob_count(),
        }


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_LOGPROBS


class CompletionRequest(_Sampling):
    route: ClassVar[str] = "/v1/completions"

    prompt: str | list[str] | list[StrictInt] | list[list[StrictInt]]  # text, or token ids (used as they are)
    echo: Any = None

    _prompt_text = field_validator("prompt")(_no_lone_surrogate)

    def prompts(self) -> list[str | list[int]]:
        one = isinstance(self.prompt, str) or bool(self.prompt) and isinstance(self.prompt[0], int)
        return [self.prompt] if one else list(self.prompt)  # type: ignore[list-item]

    def echoed(self) -> bool:
        if not isinstance(self.echo, (bool, type(None))):
            raise FieldError(f"`echo` must be true or false, got {_shown(self.echo)}", "echo")
        return bool(self.echo)

    def generates(self) -> bool:
        """False for `max_tokens: 0` with `echo` (score the prompt, generate nothing); 0 without echo is
        the sampling parser's 400."""
        limit = self.output_limit()
        return not (self.echoed() and type(limit) is int and limit == 0)

    def logprob_count(self) -> int | None:
        """OpenAI's completions `logprobs`: an integer N, the alternatives per token (0: the chosen token's only)."""
        if self.top_logprobs not in (None, 0) or isinstance(self.top_logprobs, bool):
            raise FieldError(
                "`top_logprobs` is a chat completions field; on /v1/completions send `logprobs: N` "
                f"(0 to {MAX_LOGPROBS}) for the N most likely tokens at each position",
                "top_logprobs",
            )
        if self.logprobs is None or self.logprobs is False:
            return None
        if not _count(self.logprobs):
            raise FieldError(
                f"`logprobs` on /v1/completions must be an integer from 0 to {MAX_LOGPROBS} (the "
                f"most likely tokens returned per position), got {_shown(self.logprobs)}",
                "logprobs",
            )
        return self.logprobs


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: Literal["system", "user", "assistant", "tool", "developer"]
    content: str

    _content_text = field_validator("content")(_no_lone_surrogate)


class ResponseFormat(BaseModel):
    model_config = ConfigDict(extra="ignore")

    type: Literal["text", "json_object", "json_schema"]
    json_schema: dict[str, Any] | None = None


class ChatRequest(_Sampling):
    route: ClassVar[str] = "/v1/chat/completions"

    messages: list[ChatMessage] = Field(min_length=1)
    response_format: ResponseFormat | None = None

    def logprob_count(self) -> int | None:
        """OpenAI's chat `logprobs: true` with `top_logprobs: N` (0 to MAX_LOGPROBS, default 0)."""
        if not isinstance(self.logprobs, (bool, type(None))):
            raise FieldError(
                f"`logprobs` on /v1/chat/completions must be true or false, got "
                f"{_shown(self.logprobs)}; send `top_logprobs: N` for the N most likely tokens",
                "logprobs",
            )
        if self.top_logprobs is not None and not _count(self.top_logprobs):
            raise FieldError(
                f"`top_logprobs` must be an integer from 0 to {MAX_LOGPROBS}, got {_shown(self.top_logprobs)}",
                "top_logprobs",
            )
        if not self.logprobs:
            if self.top_logprobs:
                raise FieldError(
                    "`top_logprobs` needs `logprobs: true`; send both to get the most likely tokens", "top_logprobs"
                )
            return None
        return self.top_logprobs or 0

    def schema(self) -> dict[str, Any] | None:
        rf = self.response_format
        if rf is None or rf.type == "text":
            return None
        if rf.type == "json_object":
            return {"type": "object"}
        spec = rf.json_schema or {}
        schema = spec.get("schema")
        if not isinstance(schema, dict):
            raise FieldError("response_format.json_schema.schema must be a JSON Schema object", "response_format")
        return schema


def _shown(value: Any, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _lp(value: float | None) -> float | None:
    return None if value is None else max(value, MIN_LOGPROB)


def completion_logprobs(entries: list[dict[str, Any]]) -> dict[str, Any]:
    """OpenAI's completions shape: parallel lists, and per position a {token: logprob} of the asked-for
    most likely tokens plus the chosen one (so up to N + 1 keys). An echoed prompt's first token has
    nothing before it: its logprob and top_logprobs are null."""
    tops: list[dict[str, float] | None] = []
    for e in entries:
        if e["top_logprobs"] is None:
            tops.append(None)
            continue
        top = {t["token"]: _lp(t["logprob"]) for t in reversed(e["top_logprobs"])}  # a shared text keeps the likelier
        top.setdefault(e["token"], _lp(e["logprob"]))
        tops.append(dict(sorted(top.items(), key=lambda kv: -kv[1])))
    return {
        "tokens": [e["token"] for e in entries],
        "token_logprobs": [_lp(e["logprob"]) for e in entries],
        "top_logprobs": tops,
        "text_offset": [e["text_offset"] for e in entries],
    }


def echo_choice(prompt: dict[str, Any], result: dict[str, Any] | None, logprobs: bool) -> dict[str, Any]:
    """A completions choice with the prompt echoed before the completion (`result` None: nothing was
    generated): text = prompt + completion, and with `logprobs` the prompt's scored tokens followed
    by every generated token, whose offsets move past the prompt text. The generated tokens the text
    leaves out (a stop token) are listed too: lm-evaluation-harness reads `token_logprobs[ctxlen:-1]`,
    taking the last entry for the generated token, as OpenAI and vLLM return it."""
    text = prompt["text"] + (result["text"] if result else "")
    entries = None
    if logprobs:
        shift = len(prompt["text"])
        generated = [*result["logprobs"], *result["trailing_logprobs"]] if result else []
        entries = [*prompt["entries"], *({**e, "text_offset": e["text_offset"] + shift} for e in generated)]
    return {
        "text": text,
        "finish_reason": result["finish_reason"] if result else "length",
        "logprobs": completion_logprobs(entries) if entries is not None else None,
    }


def chat_logprobs(entries: list[dict[str, Any]]) -> dict[str, Any]:
    """OpenAI's chat shape: {content: [{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}]}."""

    def one(e: dict[str, Any]) -> dict[str, Any]:
        return {"token": e["token"], "logprob": _lp(e["logprob"]), "bytes": e["bytes"]}

    return {"content": [{**one(e), "top_logprobs": [one(t) for t in e["top_logprobs"]]} for e in entries]}


def _usage(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Engine usage summed over the choices (n samples each count their prompt, most of it cached)."""
    prompt = sum(r["usage"]["prompt_tokens"] for r in results)
    cached = sum(r["usage"]["cached_tokens"] for r in results)
    decoded = sum(r["usage"]["decoded_tokens"] for r in results)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": decoded,
        "total_tokens": prompt + decoded,
        "prompt_tokens_details": {"cached_tokens": cached},
    }
