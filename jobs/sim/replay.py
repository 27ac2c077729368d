"""A simulated engine host for `memloop bench scale`: a real Ray actor that answers each request with
the output a real run recorded for the same prompt, after the time a continuous-batching engine
would have taken for it (`LatencyModel`, fitted to the real engine's measured step times by
`memloop.bench.engine_latency`).

The methods run for real against it: they render every prompt, parse every recorded output, apply
the revisions and count tokens with the model's own tokenizer, so a prompt the recording lacks
means the method loop no longer reproduces the recorded run (`ReplayMiss`, never a made-up answer).

The actor runs the engine's scheduling in simulated form: requests join a batch of at most
`max_batch`; each step costs `prefill_s_per_token` for the prompt tokens the step prefills (the
recorded uncached tokens of joining requests) plus `decode_step_s(B)` for the B sequences it decodes,
and a request ends after its recorded number of decoded tokens. Its counters say how long the
engine was busy (a step running) and how many requests it held on average.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from memloop.jobs.errors import JobsError
from memloop.jobs.run.handles import rss_mb

if TYPE_CHECKING:
    from memloop.eval.llm import LLMRequest


class ReplayMiss(JobsError):
    """A request whose prompt the recording does not hold."""


@dataclass(frozen=True)
class LatencyModel:
    """Step times of a continuous-batching engine: one step = prefill of the joining prompts' uncached
    tokens + one decode token for each of the B running sequences."""

    prefill_s_per_token: float
    decode_s_base: float  # a decode step's fixed cost (weights read once per step)
    decode_s_per_seq: float  # what each further sequence in the batch adds
    max_batch: int = 32
    speedup: float = 1.0  # every time divided by this (a faster host than the one measured)
    source: str = ""  # where the numbers were measured

    def decode_step_s(self, batch: int) -> float:
        return (self.decode_s_base + self.decode_s_per_seq * batch) / self.speedup

    def prefill_s(self, tokens: int) -> float:
        return self.prefill_s_per_token * tokens / self.speedup

    def faster(self, speedup: float) -> "LatencyModel":
        return LatencyModel(**dict(asdict(self), speedup=speedup))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "LatencyModel":
        """The model's fields of a fit (its other fields, e.g. the weight path it was measured on, are notes)."""
        import dataclasses

        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


def prompt_of(request: LLMRequest) -> str:
    """The prompt text a method rendered: the user message of a chat request, or the raw prompt."""
    if request.prompt is not None:
        return str(request.prompt)
    return "\n".join(str(m.get("content", "")) for m in request.messages or ())


@dataclass(frozen=True)
class Answer:
    text: str
    prompt_tokens: int
    cached_tokens: int
    decoded_tokens: int
    finish_reason: str


def recording_from_steps(steps: Any) -> dict[str, Answer]:
    """{prompt: recorded answer} from a run's `steps` table (pandas). A step that needed several
    attempts recorded only its last output; its usage is spread evenly over the attempts."""
    out: dict[str, Answer] = {}
    for r in steps.itertuples(index=False):
        attempts = max(1, int(json.loads(r.extra_json or "{}").get("attempts", 1)))
        decoded = int(r.decoded_tokens) // attempts
        out[r.prompt] = Answer(
            r.output, int(r.prompt_tokens) // attempts, int(r.cached_tokens) // attempts, decoded, "stop"
        )
    return out


class _Seq:
    __slots__ = ("answer", "future", "prefilled", "decoded")

    def __init__(self, answer: Answer, future: asyncio.Future) -> None:
        self.answer, self.future, self.prefilled, self.decoded = answer, future, False, 0


class _SimHost:
    """One simulated engine: its queue, its batch, its step loop and its counters."""

    def __init__(self, model: LatencyModel) -> None:
        self.model = model
        self.waiting: list[_Seq] = []
        self.running: list[_Seq] = []
        self.wake: asyncio.Event | None = None
        self.loop_task: asyncio.Task | None = None
        self.started = False
        self.t0 = self.last = time.monotonic()
        self.busy_s = 0.0
        self.modeled_s = 0.0  # what the steps should have taken; busy_s / modeled_s > 1: this machine is overloaded
        self.held_s = 0.0  # integral of requests held (running + waiting) over time
        self.slots_s = 0.0  # the same, counting at most `max_batch` (the batch slots in use)
        self.counters = {
            "requests": 0,
            "misses": 0,
            "steps": 0,
            "prompt_tokens": 0,
            "cached_tokens": 0,
            "decoded_tokens": 0,
        }

    def _account(self) -> None:
        t = time.monotonic()
        held = len(self.running) + len(self.waiting)
        self.held_s += held * (t - self.last)
        self.slots_s += min(held, self.model.max_batch) * (t - self.last)
        self.last = t

    async def serve(self, answer: Answer) -> None:
        if not self.started:  # idle before the first request is start-up, not waiting for the driver
            self.started = True
            self.t0 = self.last = time.monotonic()
        if self.wake is None:
            self.wake = asyncio.Event()
            self.loop_task = asyncio.get_running_loop().create_task(self._step_loop())
        self._account()
        seq = _Seq(answer, asyncio.get_running_loop().create_future())
        self.waiting.append(seq)
        self.wake.set()
        await seq.future

    async def _step_loop(self) -> None:
        assert self.wake is not None
        while True:
            if not self.running and not self.waiting:
                self.wake.clear()
                await self.wake.wait()
            room = self.model.max_batch - len(self.running)
            joining, self.waiting = self.waiting[:room], self.waiting[room:]
            self.running += joining
            prefill = sum(s.answer.prompt_tokens - s.answer.cached_tokens for s in joining)
            decoding = [s for s in self.running if s.prefilled]
            dt = self.model.prefill_s(prefill) + (self.model.decode_step_s(len(decoding)) if decoding else 0.0)
            start = time.monotonic()
            await asyncio.sleep(dt)
            self._account()
            self.busy_s += time.monotonic() - start  # what the step took on this machine, oversleep included
            self.modeled_s += dt
            self.counters["steps"] += 1
            for s in joining:
                s.prefilled = True
            for s in decoding:
                s.decoded += 1
                if s.decoded >= max(1, s.answer.decoded_tokens):
                    self._finish(s)

    def _finish(self, s: _Seq) -> None:
        self.running.remove(s)
        c = self.counters
        c["requests"] += 1
        c["prompt_tokens"] += s.answer.prompt_tokens
        c["cached_tokens"] += s.answer.cached_tokens
        c["decoded_tokens"] += s.answer.decoded_tokens
        if not s.future.done():
            s.future.set_result(None)

    def stats(self) -> dict[str, Any]:
        self._account()
        wall = max(1e-9, time.monotonic() - self.t0)
        return dict(
            self.counters,
            wall_s=wall,
            busy_s=self.busy_s,
            busy_fraction=min(1.0, self.busy_s / wall),
            mean_held=self.held_s / wall,
            mean_slots=self.slots_s / wall,
            max_batch=self.model.max_batch,
            dilation=self.busy_s / self.modeled_s if self.modeled_s else 1.0,
            running=len(self.running),
            waiting=len(self.waiting),
            simulated=True,
        )


class ReplayEngine:
    """The engine actor's interface (`complete`, `count_tokens`, `stats`, `health`) over a recording,
    for `hosts` simulated engines in one process (`host` picks one; `packed_handles` addresses each
    like an actor of its own). Packing is what lets 64 hosts fit in one machine's memory: each Ray
    actor process costs some 170 MB before it does anything.

    `recording` maps prompts to `Answer`s; `tokenizer_json` is the recorded model's own tokenizer
    (Hugging Face `tokenizers` JSON, `tokenizer_json()`), so memory budgets cut where the real run cut.
    The `tokenizers` library alone counts exactly as the engine's fast tokenizer does and keeps each
    simulated host small (no transformers, no JAX)."""

    def __init__(
        self, recording: dict[str, Answer], latency: dict[str, Any], tokenizer_json: str, hosts: int = 1
    ) -> None:
        from tokenizers import Tokenizer

        self.recording = recording
        self.model = LatencyModel.from_dict(latency)
        self.tokenizer = Tokenizer.from_str(tokenizer_json)
        self.hosts = [_SimHost(self.model) for _ in range(hosts)]

    async def complete(self, request: LLMRequest, host: int = 0) -> dict[str, Any]:
        prompt = prompt_of(request)
        answer = self.recording.get(prompt)
        sim = self.hosts[host]
        if answer is None:
            sim.counters["misses"] += 1
            raise ReplayMiss(
                f"the recording has no answer for this prompt ({len(prompt)} characters, starting "
                f"{prompt[:80]!r}): the method loop no longer renders what the recorded run rendered; "
                "record a run of the current code"
            )
        await sim.serve(answer)
        a = answer
        return {
            "text": a.text,
            "usage": {
                "prompt_tokens": a.prompt_tokens,
                "cached_tokens": a.cached_tokens,
                "decoded_tokens": a.decoded_tokens,
            },
            "finish_reason": a.finish_reason,
        }

    def count_tokens(self, text: str, host: int = 0) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def stats(self, host: int = 0) -> dict[str, Any]:
        return dict(self.hosts[host].stats(), rss_mb=rss_mb() / len(self.hosts), hosts_in_process=len(self.hosts))

    def health(self, host: int = 0) -> bool:
        return True


def tokenizer_json(model: str | None = None) -> str:
    """The tokenizer of `model` (default the bundled SmolLM2) as `tokenizers` JSON."""
    from memloop.engine.assets import default_model_path
    from memloop.engine.model.tokenizer import load_tokenizer

    return load_tokenizer(model or default_model_path()).hf.backend_tokenizer.to_str()


def unit_time_estimate(model: LatencyModel, answers: list[Answer], batch: int) -> float:
    """Seconds one recorded step takes at a steady batch (for sizing a sweep's units)."""
    if not answers:
        return 0.0
    per = [
        model.prefill_s(a.prompt_tokens - a.cached_tokens) + a.decoded_tokens * model.decode_step_s(batch)
        for a in answers
    ]
    return math.fsum(per) / len(per)
