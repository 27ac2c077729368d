"""The streamed response shapes of chat and completions, OpenAI's: `chat.completion.chunk` (a first
chunk per choice with the role, then `delta.content`) and `text_completion` chunks (`text`), each
with one choice and its log-probabilities in the route's own shape, the final usage chunk
(`choices: []`), then `data: [DONE]`. A shape turns a stream's steps into Server-Sent Events
(`StreamShape`: `memloop.engine.serve.streaming.stream_body` drives it)."""

from __future__ import annotations

import time
import uuid
from abc import abstractmethod
from typing import Any

from memloop.engine.serve.protocol import _usage, chat_logprobs, completion_logprobs
from memloop.engine.serve.streaming import DONE, StreamShape, sse


class ChunkShape(StreamShape):
    """One streamed request's chunks: its id, model and time, whether usage and log-probabilities come."""

    object_name = ""
    id_prefix = ""

    def __init__(self, model: str, include_usage: bool, logprobs: bool) -> None:
        self.id = f"{self.id_prefix}{uuid.uuid4().hex}"
        self.created = int(time.time())
        self.model = model
        self.include_usage = include_usage
        self.logprobs = logprobs

    def envelope(self, choices: list[dict[str, Any]], usage: dict[str, Any] | None = None) -> dict[str, Any]:
        out = {
            "id": self.id,
            "object": self.object_name,
            "created": self.created,
            "model": self.model,
            "choices": choices,
        }
        if self.include_usage:  # OpenAI: null on every chunk but the last
            out["usage"] = usage
        return out

    @abstractmethod
    def choice(self, index: int, text: str, entries: list[dict[str, Any]], finish: str | None) -> dict[str, Any]:
        """One choice's entry of a chunk (chat: a `delta` message; completions: `text`)."""

    def delta(self, index: int, text: str, entries: list[dict[str, Any]]) -> list[bytes]:
        return [sse(self.envelope([self.choice(index, text, entries, None)]))]

    def finish(self, index: int, text: str, entries: list[dict[str, Any]], result: dict[str, Any]) -> list[bytes]:
        return [sse(self.envelope([self.choice(index, text, entries, result["finish_reason"])]))]

    def closing(self, results: list[dict[str, Any]]) -> list[bytes]:
        return [sse(self.envelope([], _usage(results))), DONE] if self.include_usage else [DONE]

    def failed(self, error: dict[str, Any]) -> list[bytes]:
        return [sse({"error": error}), DONE]  # as vLLM ends a failed stream


class ChatChunks(ChunkShape):
    object_name = "chat.completion.chunk"
    id_prefix = "chatcmpl-"

    def opening(self, count: int) -> list[bytes]:
        return [
            sse(
                self.envelope(
                    [
                        {
                            "index": i,
                            "delta": {"role": "assistant", "content": ""},
                            "logprobs": None,
                            "finish_reason": None,
                        }
                    ]
                )
            )
            for i in range(count)
        ]

    def choice(self, index: int, text: str, entries: list[dict[str, Any]], finish: str | None) -> dict[str, Any]:
        return {
            "index": index,
            "delta": {"content": text} if text else {},
            "logprobs": chat_logprobs(entries) if self.logprobs else None,
            "finish_reason": finish,
        }


class CompletionChunks(ChunkShape):
    object_name = "text_completion"
    id_prefix = "cmpl-"

    def choice(self, index: int, text: str, entries: list[dict[str, Any]], finish: str | None) -> dict[str, Any]:
        return {
            "index": index,
            "text": text,
            "logprobs": completion_logprobs(entries) if self.logprobs else None,
            "finish_reason": finish,
        }
