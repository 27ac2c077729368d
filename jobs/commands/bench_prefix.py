"""`memloop bench prefix`: the PRISM-style prefix-cache benchmark (bench/prefix.py)."""

from __future__ import annotations

import json

import typer


def bench_prefix(
    as_json: bool = typer.Option(False, "--json", help="End with one JSON line of the results."),
    workload: str = typer.Option(
        "papers",
        "--workload",
        help="papers: 1024-token chunks of one book, growing memories, 256 tokens out, "
        "32 loops x 8 steps; short: the quick 40-word, 16-token one.",
    ),
    samples: int = typer.Option(None, "--samples", min=1, help="K memory loops run concurrently."),
    steps: int = typer.Option(None, "--steps", min=1, help="N steps per loop."),
    peer: str = typer.Option(
        None,
        "--peer",
        help="Also run a peer on the same workload: llama-server (llama.cpp's "
        "server, 32 slots; `make peers` builds it) or llama-cpp (llama-cpp-python, one "
        "request at a time).",
    ),
    max_tokens: int = typer.Option(None, "--max-tokens", min=1, help="Tokens decoded per step (at most)."),
    chunk_words: int = typer.Option(None, "--chunk-words", min=1, help="Words of story per new chunk."),
    revisions: int = typer.Option(
        None, "--revisions", min=0, help="Amendments appended to each loop's memory per step."
    ),
    cache_off: bool = typer.Option(
        True, "--cache-off/--no-cache-off", help="Also run memloop with the prefix cache off (the slowest pass)."
    ),
    kv_dtype: str = typer.Option(
        None,
        "--kv-dtype",
        help="memloop's KV-cache type: float16 (llama-server's "
        "default type) or int8; default the compute dtype (f32 on CPU).",
    ),
    warmup: bool = typer.Option(
        True,
        "--warmup/--no-warmup",
        help="One untimed pass first, so the timed one compiles nothing; without it "
        "compile time counts against memloop (engine_time_split.compile_s).",
    ),
) -> None:
    """K memory loops of N steps: cached fraction and tokens/s with the prefix cache on, off, and a peer."""
    from memloop.bench.prefix import PEERS, WORKLOADS, main

    if workload not in WORKLOADS:
        raise typer.BadParameter(f"choose one of {sorted(WORKLOADS)}", param_hint="--workload")
    if peer not in PEERS:
        raise typer.BadParameter(f"choose one of {sorted(p for p in PEERS if p)}", param_hint="--peer")
    from memloop.engine.engine_config import KV_DTYPES

    if kv_dtype is not None and kv_dtype not in KV_DTYPES:
        raise typer.BadParameter(f"choose one of {list(KV_DTYPES)}", param_hint="--kv-dtype")
    res = main(
        workload,
        peer=peer,
        samples=samples,
        steps=steps,
        max_tokens=max_tokens,
        chunk_words=chunk_words,
        revisions=revisions,
        cache_off=cache_off,
        warmup=warmup,
        kv_dtype=kv_dtype,
    )
    for k, v in res.items():
        print(f"{k:32} {v:.3f}" if isinstance(v, float) else f"{k:32} {v}")
    if as_json:
        print(json.dumps(res))


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    bench_app.command("prefix")(bench_prefix)
