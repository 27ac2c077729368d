"""The one LLM protocol every method and judge talks to.

Both the local engine (adapted by the jobs layer around the engine's Ray actor) and any
OpenAI-compatible HTTP endpoint satisfy it, so `eval` never imports `engine` or `ray`.
The protocol is synchronous and thread-safe: a driver runs many samples concurrently in threads and
the engine batches their requests continuously.
"""

from __future__ import annotations

import hashlib
import json
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Protocol, Sequence, runtime_checkable

from memloop.sampling import SamplingParams


@dataclass(frozen=True)
class Usage:
    """Token accounting of one request: the cache-hit rate and cost index are computed from these."""

    prompt_tokens: int = 0
    cached_tokens: int = 0
    decoded_tokens: int = 0

    def __add__(self, other: "Usage") -> "Usage":
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.cached_tokens + other.cached_tokens,
            self.decoded_tokens + other.decoded_tokens,
        )


def usage_sum(usages: Iterable[Usage]) -> Usage:
    """Several requests' usage together (a method's steps, a judge's calls; `judges.cost.total` checks each first)."""
    total = Usage()
    for u in usages:
        total = total + u
    return total


@dataclass(frozen=True)
class LLMRequest:
    """A chat request (`messages`) or a raw completion (`prompt`); exactly one is set.

    `json_schema`, when set, asks for output constrained to that JSON Schema. `sampling` is the one sampling
    type (`memloop.sampling.SamplingParams`, checked when made). The jobs layer hands this object itself to
    the engine actor (Ray pickles it); `to_dict` is its JSON form for content hashes and caches.
    """

    messages: tuple[dict[str, str], ...] | None = None
    prompt: str | None = None
    sampling: SamplingParams = field(default_factory=SamplingParams)
    json_schema: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if (self.messages is None) == (self.prompt is None):
            raise ValueError("LLMRequest needs exactly one of `messages` (chat) or `prompt` (completion)")

    def to_dict(self) -> dict[str, Any]:
        """The request as JSON-ready data (the form its content hash and the cache keys are made of)."""
        d = asdict(self)
        d["messages"] = list(self.messages) if self.messages is not None else None
        d["sampling"] = self.sampling.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "LLMRequest":
        """The request `to_dict` wrote."""
        msgs = d.get("messages")
        return cls(
            messages=tuple(dict(m) for m in msgs) if msgs is not None else None,
            prompt=d.get("prompt"),
            sampling=SamplingParams.from_request(d.get("sampling")),
            json_schema=d.get("json_schema"),
        )


@dataclass(frozen=True)
class LLMResult:
    """A model's answer to one request: its text, token usage and why it ended ("stop" or "length")."""

    text: str
    usage: Usage = field(default_factory=Usage)
    finish_reason: str = "stop"  # "stop" | "length"

    def to_dict(self) -> dict[str, Any]:
        """The result as JSON-ready data."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "LLMResult":
        """The result `to_dict` wrote (usage and finish reason default when absent)."""
        return cls(text=d["text"], usage=Usage(**d.get("usage", {})), finish_reason=d.get("finish_reason", "stop"))


@runtime_checkable
class LLM(Protocol):
    """What methods and judges need from a model.

    An LLM may also carry `context_tokens: int | None`, the longest prompt + output it serves, when it
    knows it (the in-process engine does); methods read it with `getattr`, so it is not required.
    """

    name: str
    supports_json_schema: bool

    def complete(self, request: LLMRequest) -> LLMResult:
        """Run one request; must be safe to call from many threads at once."""
        ...

    def count_tokens(self, text: str) -> int:
        """Tokens of `text` under this model's tokenizer (memory budgets, validity checks)."""
        ...


def complete_many(llm: LLM, requests: Sequence[LLMRequest], max_workers: int = 32) -> list[LLMResult]:
    """Issue independent requests concurrently (a batching engine serves them together), in order."""
    if len(requests) <= 1:
        return [llm.complete(r) for r in requests]
    with ThreadPoolExecutor(max_workers=min(max_workers, len(requests))) as pool:
        return list(pool.map(llm.complete, requests))


def request_key(request: LLMRequest) -> str:
    """Stable content hash of a request (for replay files and caches)."""
    return hashlib.sha256(json.dumps(request.to_dict(), sort_keys=True).encode()).hexdigest()


class ScriptedLLM:
    """Replays scripted outputs in order and records every request.

    For unit tests that pin exact prompts, parsing and memory transitions step by step, and for
    replaying a recorded run. Raises when the script runs out, so a test never passes on missing calls.
    """

    def __init__(
        self,
        outputs: Sequence[str],
        name: str = "scripted",
        supports_json_schema: bool = False,
        tokens_per_word: float = 1.0,
        cut: Sequence[int] = (),
    ) -> None:
        self.name = name
        self._cut = frozenset(cut)  # 0-based calls whose output reached max_tokens (finish_reason "length")
        self.supports_json_schema = supports_json_schema
        self._outputs = list(outputs)
        self._tokens_per_word = tokens_per_word
        self.requests: list[LLMRequest] = []
        self._lock = threading.Lock()

    def count_tokens(self, text: str) -> int:
        """Words times the configured tokens per word (a scripted model has no tokenizer)."""
        return int(round(len(text.split()) * self._tokens_per_word))

    def complete(self, request: LLMRequest) -> LLMResult:
        """The next scripted output (the request is recorded in `requests`)."""
        with self._lock:
            if len(self.requests) >= len(self._outputs):
                raise AssertionError(f"ScriptedLLM ran out of outputs after {len(self._outputs)} calls")
            call = len(self.requests)
            text = self._outputs[call]
            self.requests.append(request)
        prompt = (
            request.prompt if request.prompt is not None else "\n".join(m["content"] for m in request.messages or ())
        )
        return LLMResult(
            text=text,
            usage=Usage(self.count_tokens(prompt), 0, self.count_tokens(text)),
            finish_reason="length" if call in self._cut else "stop",
        )
