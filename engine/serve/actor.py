"""`EngineActor`: one engine on one host, as a Ray actor.

The class is plain so that the driver chooses the placement when it wraps it::

    Actor = ray.remote(num_cpus=2)(EngineActor)            # CPU host
    Actor = ray.remote(num_gpus=1)(EngineActor)            # one GPU
    Actor = ray.remote(resources={"TPU": 4})(EngineActor)  # a TPU v5e host with 4 chips
    handle = Actor.remote({"model": None, "kv_budget": 0.5, "max_batch": 64, "prefix_cache": True})

(`actor_class(...)` does the same from keyword options.) `complete` is async: Ray runs the actor on
an event loop, so hundreds of concurrent calls are in flight at once and the engine's step loop
batches them continuously; each call awaits only its own future.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol, Sequence

from memloop.engine.core.engine import Engine
from memloop.engine.engine_config import EngineConfig
from memloop.engine.errors import EngineError, RequestError

from memloop.sampling import SamplingParams


class TypedRequest(Protocol):
    """What a run sends the actor (`memloop.eval.llm.LLMRequest` is one; the engine does not import it): a
    chat (`messages`) or a raw `prompt`, its checked `SamplingParams`, and an optional JSON Schema."""

    messages: Sequence[dict[str, str]] | None
    prompt: str | None
    sampling: SamplingParams
    json_schema: dict[str, Any] | None


def request_fields(request: TypedRequest) -> dict[str, Any]:
    """A typed request as the fields the engine's intake reads; its SamplingParams is taken as it is
    (`memloop.engine.sample.sampling.request_params`), not parsed again from a dict."""
    try:
        return {
            "messages": request.messages,
            "prompt": request.prompt,
            "sampling": request.sampling,
            "json_schema": request.json_schema,
        }
    except AttributeError:
        raise RequestError(
            f"the engine actor takes a typed request (memloop.eval.llm.LLMRequest), got a {type(request).__name__}"
        ) from None


class EngineActor:
    """Owns one `Engine`; every method is cheap except `complete`, which awaits the engine."""

    def __init__(self, config: EngineConfig | dict[str, Any] | None = None) -> None:
        """`config`: an EngineConfig, or a dict of its fields (`EngineConfig.from_dict`: unknown names are
        an EngineError listing the valid ones; callers translate their own vocabularies first)."""
        self.engine = Engine(EngineConfig.of(config))

    async def complete(self, request: TypedRequest) -> dict[str, Any]:
        """A typed request (`memloop.eval.llm.LLMRequest`, pickled by Ray) in, `memloop.eval.llm.LLMResult.to_dict()`
        out. Tokenising (in `submit`) runs on a worker thread, so a long prompt does not hold the actor's
        other calls."""
        fields = request_fields(request)
        return await asyncio.wrap_future(await asyncio.to_thread(self.engine.submit, fields))

    async def complete_many(self, requests: list[TypedRequest]) -> list[dict[str, Any]]:
        return list(await asyncio.gather(*(self.complete(r) for r in requests)))

    def stats(self) -> dict[str, Any]:
        return self.engine.stats()

    def health(self) -> bool:
        return self.engine.health()

    def count_tokens(self, text: str) -> int:
        if not isinstance(text, str):
            raise EngineError("count_tokens takes a string")
        return self.engine.count_tokens(text)

    def config(self) -> dict[str, Any]:
        return self.engine.config.to_dict()

    def context_tokens(self) -> int:
        """The window one request may use (prompt + output), as the engine enforces it."""
        return int(self.engine.max_context)

    async def misfit(self, request: TypedRequest) -> str | None:
        """Why a request could never be served, or None: the engine's own length check, asked ahead
        (tokenising a whole book runs on a worker thread, as in `complete`)."""
        return await asyncio.to_thread(self.engine.misfit, request_fields(request))

    def shutdown(self) -> None:
        self.engine.shutdown()


def actor_class(
    num_cpus: float | None = None, num_gpus: float | None = None, tpu_chips: int | None = None, **ray_options: Any
) -> Any:
    """`EngineActor` wrapped by `ray.remote` for a CPU, GPU, or TPU host."""
    import ray

    opts: dict[str, Any] = dict(ray_options)
    if num_cpus is not None:
        opts["num_cpus"] = num_cpus
    if num_gpus is not None:
        opts["num_gpus"] = num_gpus
    if tpu_chips:
        opts["resources"] = {**opts.get("resources", {}), "TPU": tpu_chips}
    return ray.remote(**opts)(EngineActor) if opts else ray.remote(EngineActor)
