"""`memloop serve --port P`: the engine behind an OpenAI-compatible HTTP API on 127.0.0.1:P."""
from __future__ import annotations

from pathlib import Path

import typer


def serve(
    port: int = typer.Option(8000, "--port", help="Port to listen on (1-65535)."),
    host: str = typer.Option("127.0.0.1", "--host", help="Interface to bind (default: loopback only; "
                             "any other needs --api-key)."),
    model: Path = typer.Option(None, "--model", help="GGUF file or Hugging Face directory (default: bundled SmolLM2)."),
    dtype: str = typer.Option("auto", "--dtype", help="auto (f32 on CPU, bf16 on accelerators), float32, bfloat16."),
    kv_budget: float = typer.Option(1 << 30, "--kv-budget", help="KV-cache bytes (> 1) or fraction of device memory (<= 1)."),
    max_batch: int = typer.Option(32, "--max-batch", help="Sequences decoded together."),
    no_prefix_cache: bool = typer.Option(False, "--no-prefix-cache", help="Turn the radix prefix cache off."),
    name: str = typer.Option(None, "--name", help="Model id reported by /v1/models (default: the file's stem)."),
    api_key: str = typer.Option(None, "--api-key", envvar="MEMLOOP_API_KEY", show_default=False,
                                help="Require `Authorization: Bearer KEY` on every route but /health."),
    max_queue: int = typer.Option(None, "--max-queue", show_default=False, help="Requests (n choices each count) "
                                  "in flight at once; more get 429 with Retry-After (default: 256)."),
    request_timeout: float = typer.Option(None, "--request-timeout", help="Seconds a request may run before it is "
                                          "cancelled with 504 (default: no limit)."),
) -> None:
    """Serve /v1/completions, /v1/chat/completions (response_format json_schema) and /v1/models."""
    from engine.server import serve as run_server

    config = {"model": str(model) if model else None, "dtype": None if dtype == "auto" else dtype, "kv_budget": kv_budget,
              "max_batch": max_batch, "prefix_cache": not no_prefix_cache}
    queue = {} if max_queue is None else {"max_queue": max_queue}  # the server's own default otherwise
    run_server(config, host=host, port=port, model_name=name, api_key=api_key, request_timeout=request_timeout,
               **queue)


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    app.command("serve")(serve)
