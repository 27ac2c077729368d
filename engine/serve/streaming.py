"""Streamed answers (`stream: true`) as OpenAI and vLLM send them: Server-Sent Events, one `data:` JSON
chunk per step of one choice (n choices interleaved, each chunk naming its `index`), the
`finish_reason` on a choice's last chunk, with `stream_options.include_usage` a last chunk holding
the usage and no choices, then `data: [DONE]`.

The engine calls back on its own thread with each sampled token but the last (`Engine.submit`'s
`on_token`); `TokenFeed` hands those to the event loop in order, followed by each choice's result.
`ChoiceStream` turns one choice's tokens into text deltas and log-probability entries, holding back
what a stop string could still cut and an incomplete UTF-8 character; the result is the authority on
the rest (its text after what was sent, its entries after those sent). A request that is not
streamed never reaches this module: its only cost is the engine's `on_token is None` test per token.
"""

from __future__ import annotations

import asyncio
import json
import time
from abc import ABC, abstractmethod
from concurrent.futures import Future
from typing import Any, AsyncIterator, Callable

from memloop.engine.runner.token_pieces import EntryStream, TokenPieces

DONE = b"data: [DONE]\n\n"
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def sse(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"


class TextStream:
    """A choice's text one token at a time, as vLLM detokenizes incrementally: each new token's text is
    the decoding of a short window of tokens less the decoding of that window without it, so it
    matches the whole output's decoding (leading-space rules, characters split across tokens).
    `holdback` characters at the end stay unsent (what a stop string might still cut)."""

    def __init__(self, decode: Callable[[list[int]], str], holdback: int) -> None:
        self.decode = decode
        self.holdback = holdback
        self.ids: list[int] = []
        self.prefix = self.read = 0  # the window: ids[prefix:read] is decoded, ids[read:] not yet
        self.text = ""  # decoded so far
        self.sent = 0  # characters of `text` sent

    def add(self, token_id: int) -> str:
        """The text that may be sent now ("" while a character is incomplete or held back)."""
        self.ids.append(token_id)
        before = self.decode(self.ids[self.prefix : self.read])
        after = self.decode(self.ids[self.prefix :])
        if len(after) > len(before) and not after.endswith("\ufffd"):
            self.text += after[len(before) :]
            self.prefix, self.read = self.read, len(self.ids)
        ready = len(self.text) - self.holdback
        if ready <= self.sent:
            return ""
        delta, self.sent = self.text[self.sent : ready], ready
        return delta

    def rest(self, final: str) -> str:
        """What the final text holds after what was sent."""
        sent = self.text[: self.sent]
        return final[len(sent) :] if final.startswith(sent) else ""  # never resend; no tokenizer seen differs


class ChoiceStream:
    """One choice's deltas: (text, log-probability entries) per token, and at the end the rest from the result.

    An entry is sent once its token's text has started to be sent (its `text_offset` is inside the
    sent text), so no entry goes out for a token a stop string cuts away."""

    def __init__(self, decode: Callable[[list[int]], str], pieces: TokenPieces | None, stop: tuple[str, ...]) -> None:
        self.text = TextStream(decode, max((len(s) for s in stop), default=1) - 1)
        self.entries = EntryStream(pieces) if pieces is not None else None
        self.pending: list[dict[str, Any]] = []
        self.sent_entries = 0

    def add(
        self, token_id: int, picked: tuple[float, list[tuple[int, float]]] | None
    ) -> tuple[str, list[dict[str, Any]]]:
        delta = self.text.add(token_id)
        if self.entries is None or picked is None:
            return delta, []
        self.pending.append(self.entries.add(token_id, *picked))
        ready = 0
        while ready < len(self.pending) and self.pending[ready]["text_offset"] < self.text.sent:
            ready += 1
        out, self.pending = self.pending[:ready], self.pending[ready:]
        self.sent_entries += len(out)
        return delta, out

    def finish(self, result: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
        entries = result["logprobs"][self.sent_entries :] if self.entries is not None else []
        return self.text.rest(result["text"]), entries


class TokenFeed:
    """The engine thread's tokens and results for one request's choices, delivered on the event loop in
    the order the engine produced them: (index, token id, log-probability entry, None) per token, then
    (index, None, None, future) when that choice is done."""

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.queue: asyncio.Queue[tuple[int, int | None, Any, Future | None]] = asyncio.Queue()
        self.futures: list[Future] = []

    def _put(self, item: tuple[int, int | None, Any, Future | None]) -> None:
        try:
            self.loop.call_soon_threadsafe(self.queue.put_nowait, item)
        except RuntimeError:  # the server's loop is closed: nobody is listening any more
            pass

    def sink(self, index: int) -> Callable[[int, Any], None]:
        """The engine's `on_token` for choice `index` (runs on the engine thread: only a hand-over)."""
        return lambda token_id, picked: self._put((index, token_id, picked, None))

    def watch(self, futures: list[Future]) -> None:
        self.futures = futures
        for i, fut in enumerate(futures):
            fut.add_done_callback(lambda f, i=i: self._put((i, None, None, f)))

    async def events(
        self, deadline: float | None, timeout_error: Callable[[], Exception]
    ) -> AsyncIterator[tuple[int, int | None, Any, Future | None]]:
        left = len(self.futures)
        while left:
            wait = None if deadline is None else deadline - time.monotonic()
            try:
                item = await asyncio.wait_for(self.queue.get(), wait)
            except asyncio.TimeoutError:
                raise timeout_error() from None
            left -= item[3] is not None
            yield item


class StreamShape(ABC):
    """How one route writes a stream's steps as Server-Sent Events (chat and completions chunks:
    `memloop.engine.serve.chunks`; the Responses API's events: `memloop.engine.serve.responses_api`)."""

    logprobs = False  # whether the stream carries log-probability entries

    def opening(self, count: int) -> list[bytes]:
        """Before any token, for `count` choices."""
        return []

    @abstractmethod
    def delta(self, index: int, text: str, entries: list[dict[str, Any]]) -> list[bytes]:
        """Choice `index` has new text and/or log-probability entries."""

    @abstractmethod
    def finish(self, index: int, text: str, entries: list[dict[str, Any]], result: dict[str, Any]) -> list[bytes]:
        """Choice `index` ended: the rest of its text and entries, and its engine result."""

    @abstractmethod
    def closing(self, results: list[dict[str, Any]]) -> list[bytes]:
        """Every choice ended."""

    @abstractmethod
    def failed(self, error: dict[str, Any]) -> list[bytes]:
        """The engine failed the request or its deadline passed, after the 200 went out."""


async def stream_body(
    feed: TokenFeed,
    shape: StreamShape,
    choices: list[ChoiceStream],
    deadline: float | None,
    timeout_error: Callable[[], Exception],
    error_payload: Callable[[Exception], dict[str, Any]],
) -> AsyncIterator[bytes]:
    """The SSE body: `shape`'s events for the opening, each token that has something to send, each
    choice's end and the close. A failure after the 200 went out (the engine failed the request, the
    deadline passed) ends it with `shape.failed`."""
    results: list[dict[str, Any]] = [{}] * len(choices)
    for event in shape.opening(len(choices)):
        yield event
    try:
        async for index, token_id, picked, fut in feed.events(deadline, timeout_error):
            if fut is None:
                text, entries = choices[index].add(token_id, picked)  # type: ignore[arg-type]
                events = shape.delta(index, text, entries) if text or entries else []
            else:
                results[index] = fut.result()
                events = shape.finish(index, *choices[index].finish(results[index]), results[index])
            for event in events:
                yield event
        events = shape.closing(results)
    except Exception as exc:  # CancelledError (the client left) is not an Exception: nothing more is sent
        events = shape.failed(error_payload(exc))
    for event in events:
        yield event
