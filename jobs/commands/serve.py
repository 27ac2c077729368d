"""`memloop serve --port P`: the engine behind an OpenAI-compatible HTTP API on 127.0.0.1:P."""

from __future__ import annotations

from pathlib import Path

import typer


def serve(
    port: int = typer.Option(8000, "--port", help="Port to listen on (1-65535)."),
    host: str = typer.Option(
        "127.0.0.1", "--host", help="Interface to bind (default: loopback only; any other needs --api-key)."
    ),
    model: Path = typer.Option(None, "--model", help="GGUF file or Hugging Face directory (default: bundled SmolLM2)."),
    dtype: str = typer.Option("auto", "--dtype", help="auto (f32 on CPU, bf16 on accelerators), float32, bfloat16."),
    kv_budget: float = typer.Option(
        1 << 30, "--kv-budget", help="KV-cache bytes (> 1) or fraction of device memory (<= 1)."
    ),
    max_batch: int = typer.Option(32, "--max-batch", help="Sequences decoded together."),
    no_prefix_cache: bool = typer.Option(False, "--no-prefix-cache", help="Turn the radix prefix cache off."),
    name: str = typer.Option(None, "--name", help="Model id reported by /v1/models (default: the file's stem)."),
    api_key_file: Path = typer.Option(
        None,
        "--api-key-file",
        show_default=False,
        help="A file holding the API key (first line): every route but /health then "
        "needs `Authorization: Bearer KEY`. Or set the key in MEMLOOP_API_KEY. "
        "Never on the command line, where `ps` shows it to every user.",
    ),
    api_key: str = typer.Option(None, "--api-key", hidden=True, show_default=False),
    allow_host: list[str] = typer.Option(
        [],
        "--allow-host",
        help="A further Host name to answer on loopback "
        "(default: localhost, 127.0.0.1, ::1 only, against DNS rebinding).",
    ),
    max_queue: int = typer.Option(
        None,
        "--max-queue",
        show_default=False,
        help="Requests (n choices each count) in flight at once; more get 429 with Retry-After (default: 256).",
    ),
    request_timeout: float = typer.Option(
        None, "--request-timeout", help="Seconds a request may run before it is cancelled with 504 (default: no limit)."
    ),
    stall_timeout: float = typer.Option(
        None,
        "--stall-timeout",
        show_default=False,
        help="Seconds the engine may have work and make no progress before /health answers 503 (default: 300).",
    ),
) -> None:
    """Serve /v1/completions, /v1/chat/completions (response_format json_schema), /v1/responses and /v1/models
    (streamed with stream: true).

    At start the engine compiles the programs of small requests first: until then /health answers 503
    "warming up" and requests get 503 with Retry-After. The API key comes from MEMLOOP_API_KEY or
    --api-key-file, never from the command line."""
    from memloop.engine.serve.server import serve as run_server

    key = read_api_key(api_key, api_key_file)

    config = {
        "model": str(model) if model else None,
        "dtype": None if dtype == "auto" else dtype,
        "kv_budget": kv_budget,
        "max_batch": max_batch,
        "prefix_cache": not no_prefix_cache,
    }
    given = {k: v for k, v in (("max_queue", max_queue), ("stall_s", stall_timeout)) if v is not None}
    run_server(
        config,
        host=host,
        port=port,
        model_name=name,
        api_key=key,
        request_timeout=request_timeout,
        allow_hosts=tuple(allow_host),
        **given,
    )  # the server's own defaults for what is not given


def read_api_key(on_argv: str | None, path: Path | None) -> str | None:
    """The key from --api-key-file, else MEMLOOP_API_KEY; a key given on the command line is refused."""
    import os

    from memloop.engine.errors import ServerConfigError

    if on_argv is not None:
        raise ServerConfigError(
            "--api-key puts the key on the command line, where `ps` shows it to every user of "
            "this machine: set MEMLOOP_API_KEY or pass --api-key-file FILE instead"
        )
    if path is not None:
        try:
            key = path.read_text(encoding="utf-8").splitlines()[0].strip() if path.stat().st_size else ""
        except (OSError, UnicodeDecodeError, IndexError) as exc:
            raise ServerConfigError(
                f"--api-key-file {path}: cannot read it ({exc}); give a file whose first line is the key"
            ) from None
        if not key:
            raise ServerConfigError(f"--api-key-file {path} is empty; write the key on its first line")
        return key
    return os.environ.get("MEMLOOP_API_KEY") or None


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    app.command("serve")(serve)
