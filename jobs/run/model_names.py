"""Model names as Inspect AI writes them on the command line: `PROVIDER/NAME`.

`openai/NAME`, `vllm/NAME` and `sglang/NAME` are an OpenAI-compatible endpoint (the OpenAI API, a vLLM or
SGLang server, `memloop serve`), found by `--model-base-url` or the provider's environment variable
(`OPENAI_BASE_URL`, `VLLM_BASE_URL`, `SGLANG_BASE_URL`) and keyed by its API key variable when set
(`OPENAI_API_KEY`, ...). `memloop/NAME` is memloop's own engine on NAME (a model name such as
`qwen2.5-coder-0.5b`, or a GGUF file or Hugging Face directory); `hf/OWNER/NAME` the engine on a
Hugging Face model already in the local Hugging Face cache (nothing is downloaded). A name without a
provider is the engine's weights, as before.

`model_section` turns a name into the run config's `model:` section, `judge_section` into its
`judge_model:` section; both are validated again with the rest of the config.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memloop.jobs.errors import ConfigError


@dataclass(frozen=True)
class Provider:
    """An OpenAI-compatible provider: where its base URL and API key come from by default."""

    base_url_env: str
    api_key_env: str
    default_base_url: str | None = None  # None: the server's URL must be given


ENDPOINT_PROVIDERS = {
    "openai": Provider("OPENAI_BASE_URL", "OPENAI_API_KEY", "https://api.openai.com/v1"),
    "vllm": Provider("VLLM_BASE_URL", "VLLM_API_KEY"),
    "sglang": Provider("SGLANG_BASE_URL", "SGLANG_API_KEY"),
}
ENGINE_PROVIDERS = ("memloop", "hf")
PROVIDERS = (*ENDPOINT_PROVIDERS, *ENGINE_PROVIDERS)
# the endpoint settings a `PROVIDER/NAME` on the command line keeps from the config's own endpoint
_TRANSPORT = ("max_concurrency", "timeout_s", "max_retries", "json_schema")


def provider_of(name: str) -> tuple[str, str] | None:
    """(provider, rest) when `name` is `PROVIDER/REST` with a known provider and is not a path that exists."""
    head, sep, rest = name.partition("/")
    if not sep or head not in PROVIDERS or Path(name).expanduser().exists():
        return None
    if not rest.strip():
        raise ConfigError(f"model {name!r} names no model after {head + '/'!r}; write e.g. {head}/MODEL-NAME")
    return head, rest


def _endpoint(
    provider: str, model: str, base_url: str | None, flag: str, keep: dict[str, Any] | None
) -> dict[str, Any]:
    p = ENDPOINT_PROVIDERS[provider]
    url = base_url or os.environ.get(p.base_url_env) or p.default_base_url
    if not url:
        raise ConfigError(
            f"{provider}/{model}: where is the server? give {flag} http://HOST:PORT/v1 or set {p.base_url_env}"
        )
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"{provider}/{model}: base URL {url!r} is not http(s); give e.g. http://127.0.0.1:8000/v1")
    key_env = p.api_key_env if os.environ.get(p.api_key_env) else None
    if key_env is None and url == p.default_base_url:
        raise ConfigError(
            f"{provider}/{model} at {url} needs an API key: export {p.api_key_env} (or give a server's URL with {flag})"
        )
    out = {k: v for k, v in (keep or {}).items() if k in _TRANSPORT}
    return dict(out, base_url=url, model=model, api_key_env=key_env)


def _engine_weights(provider: str, rest: str) -> str:
    if provider == "memloop" or Path(rest).expanduser().exists():
        return rest
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:  # the local cache only: a run never downloads weights
        return snapshot_download(rest, local_files_only=True)
    except (LocalEntryNotFoundError, ValueError, OSError):
        raise ConfigError(
            f"hf/{rest}: not in the local Hugging Face cache; download it first "
            f"(`hf download {rest}`) or give its directory as memloop/PATH"
        ) from None


def model_section(name: str, base_url: str | None = None, current: dict[str, Any] | None = None) -> dict[str, Any]:
    """The `model:` section that `--model NAME` stands for. `current` is the config's own section:
    an endpoint keeps its transport settings (concurrency, timeouts), the engine its dtype and options."""
    current = current or {}
    parsed = provider_of(name)
    if parsed is None or parsed[0] in ENGINE_PROVIDERS:
        if base_url is not None:
            raise ConfigError(
                f"--model-base-url is for an endpoint model (openai/NAME, vllm/NAME, sglang/NAME); "
                f"{name!r} runs on memloop's engine"
            )
        weights = name if parsed is None else _engine_weights(*parsed)
        if parsed is None and current.get("kind") == "openai":
            raise ConfigError(
                f"--model {name!r} sets the engine's weights, but this config's model is kind 'openai' "
                "(an endpoint serves its own model): change the endpoint's `model` in the config, "
                "give --model openai/NAME for another model of an endpoint, or --model memloop/NAME "
                "to run it on memloop's engine"
            )
        if current.get("kind", "engine") == "engine":
            return dict(current, kind="engine", weights=weights, endpoint=None)
        return {"kind": "engine", "weights": weights}
    provider, model = parsed
    keep = current.get("endpoint") if current.get("kind") == "openai" else None
    return {"kind": "openai", "endpoint": _endpoint(provider, model, base_url, "--model-base-url", keep)}


def judge_section(name: str, base_url: str | None = None) -> dict[str, Any]:
    """The `judge_model:` section that `--judge-model NAME` stands for: `self` (the model under test),
    an endpoint (`openai/NAME` ...) or a judge engine of its own (`memloop/NAME`, `hf/...`, a bare name)."""
    parsed = provider_of(name)
    if parsed is not None and parsed[0] in ENDPOINT_PROVIDERS:
        return {"kind": "openai", "endpoint": _endpoint(parsed[0], parsed[1], base_url, "--judge-model-base-url", None)}
    if base_url is not None:
        raise ConfigError("--judge-model-base-url is for an endpoint judge (openai/NAME, vllm/NAME, sglang/NAME)")
    if name == "self":
        return {"kind": "engine"}
    return {"kind": "engine", "weights": name if parsed is None else _engine_weights(*parsed)}
