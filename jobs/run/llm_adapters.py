"""`memloop.eval.llm.LLM` implementations the jobs layer hands to methods and judges.

- `ActorLLM`: the local engine, through a handle of `memloop.engine.serve.actor.EngineActor` (a Ray actor whose
  async `complete(request) -> result_dict` batches concurrent calls). The request goes as it is typed (an
  `LLMRequest` with its checked `memloop.sampling.SamplingParams`; Ray pickles it), never as a dict to parse
  again. Many threads call `complete` at once; each call blocks only its own thread, so the engine sees
  them all together.
- `EngineLLM`: an in-process `memloop.engine.core.engine.Engine` (no Ray), for notebooks, scripts and tests.
- `endpoint_llm`: any OpenAI-compatible endpoint, through `memloop.eval.llm_http`.

Token counts are asked from the actor once per distinct text and memoised (methods count the
same memory and chunks repeatedly).
"""

from __future__ import annotations

import functools
import threading
from typing import Any

from memloop.eval.llm import LLM, LLMRequest, LLMResult, Usage


class ActorLLM:
    """An LLM over an engine actor handle; safe to call from many threads and picklable into Ray tasks."""

    supports_json_schema = True

    def __init__(self, actor: Any, name: str = "engine", timeout_s: float | None = None) -> None:
        self.actor = actor
        self.name = name
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self.usage = Usage()  # totals of this adapter (the driver's progress line reads them)
        self.requests = 0

    def __reduce__(self):  # locks do not pickle; the handle does
        return (ActorLLM, (self.actor, self.name, self.timeout_s))

    def complete(self, request: LLMRequest) -> LLMResult:
        # The ref's future, not ray.get: a thread blocked in ray.get wakes every second to check for
        # signals under the GIL, which thousands of loop threads turn into the process's main work
        # (`memloop bench scale`). A timeout raises TimeoutError, transient like Ray's own.
        out = self.actor.complete.remote(request).future().result(timeout=self.timeout_s)
        result = LLMResult.from_dict(out)
        with self._lock:
            self.usage = self.usage + result.usage
            self.requests += 1
        return result

    def count_tokens(self, text: str) -> int:
        return self._count(text)

    @functools.cached_property
    def context_tokens(self) -> int:
        """The engine's window per request (the long-context ceiling asks whether an input fits)."""
        import ray

        return int(ray.get(self.actor.context_tokens.remote(), timeout=self.timeout_s))

    def misfit(self, request: LLMRequest) -> str | None:
        """The engine's own answer to whether `request` fits (chat template included), asked before sending."""
        return self.actor.misfit.remote(request).future().result(timeout=self.timeout_s)

    @functools.lru_cache(maxsize=4096)  # noqa: B019 - one adapter per actor, lives for the run
    def _count(self, text: str) -> int:
        return int(self.actor.count_tokens.remote(text).future().result(timeout=self.timeout_s))


class EngineLLM:
    """An LLM over an in-process `memloop.engine.core.engine.Engine`: the typed request goes in as the actor
    hands it on (`memloop.engine.serve.actor.request_fields`), the result dict comes back."""

    def __init__(self, engine: Any, name: str = "engine", supports_json_schema: bool = True) -> None:
        self.engine = engine
        self.name = name
        self.supports_json_schema = supports_json_schema
        self.context_tokens: int | None = getattr(engine, "max_context", None)  # the window a request may use

    def complete(self, request: LLMRequest) -> LLMResult:
        from memloop.engine.serve.actor import request_fields

        return LLMResult.from_dict(self.engine.complete(request_fields(request)))

    def count_tokens(self, text: str) -> int:
        return self.engine.count_tokens(text)

    def misfit(self, request: LLMRequest) -> str | None:
        from memloop.engine.serve.actor import request_fields

        return self.engine.misfit(request_fields(request))


def endpoint_llm(spec: Any) -> LLM:
    """An OpenAI-compatible endpoint (`memloop.jobs.run.config.EndpointSpec`) as an LLM; the API key is read from
    the environment variable the spec names, never from the config."""
    from memloop.eval.llm_http import OpenAICompatibleLLM

    return OpenAICompatibleLLM(
        base_url=spec.base_url,
        model=spec.model,
        api_key_env=spec.api_key_env,
        timeout_s=spec.timeout_s,
        max_retries=spec.max_retries,
        supports_json_schema=spec.json_schema,
        max_concurrency=spec.max_concurrency,
    )
