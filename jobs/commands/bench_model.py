"""`memloop bench model`: the engine's model against transformers (agreement and speed)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer


def bench_model(
    model: Optional[Path] = typer.Option(None, help="GGUF file or Hugging Face directory (default: bundled SmolLM2)."),
    greedy_tokens: int = typer.Option(200, min=1, help="Greedy tokens compared per prompt."),
    decode_tokens: int = typer.Option(64, min=1, help="Decode steps timed (rounded to the decode chunk)."),
    prefill_tokens: int = typer.Option(512, min=16, help="Prompt length for the prefill measurement."),
    batch: int = typer.Option(32, min=2, help="Batch size of the aggregate decode measurement."),
    hf_batch: bool = typer.Option(False, help="Also time transformers at the large batch (slow on CPU)."),
    packed: bool = typer.Option(False, help="Keep Q4_0/Q4_1/Q8_0 layer matrices packed in memloop's model."),
    dense: bool = typer.Option(False, help="Dense f32 weights only (no GGUF block weights and CPU kernel)."),
    dense_peer: bool = typer.Option(True, help="Also time memloop with dense f32 weights in the same run."),
    quantize: Optional[str] = typer.Option(None, help="Weight-only quantisation of memloop's model: int8."),
    long_contexts: bool = typer.Option(True, help="Time served batch-1 decode after cached 1k and 4k prompts."),
    gather_peer: bool = typer.Option(True, help="Also time 4k-context decode with the pre-kernel gather path."),
    kv_types: str = typer.Option(
        "float16,int8",
        "--kv-types",
        help="Also time served decode with these KV-cache "
        "types (comma-separated: float16, int8; empty for none), each against the f32 cache.",
    ),
    peer: Optional[str] = typer.Option(
        None,
        "--peer",
        help="Also run llama.cpp's llama-batched-bench on the same "
        "GGUF and threads (llama-cpp; `make peers` builds it): decode at batch 1 "
        "and the large batch, at the long contexts, and its prompt processing at the "
        "prefill length, at llama.cpp's defaults (the ratios' denominators).",
    ),
    peer_variants: str = typer.Option(
        "",
        "--peer-variants",
        help="Also time the peer with these settings, as "
        "extra labelled fields without ratios (comma-separated: passive = "
        "OMP_WAIT_POLICY=PASSIVE).",
    ),
    f64_reference: bool = typer.Option(
        True,
        help="Also measure memloop and transformers (both f32) against "
        "transformers in float64 (the exact logits; 8 bytes a weight in RAM).",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object as the last line."),
) -> None:
    """Compare memloop's Flax model with transformers on the same weights: logits, greedy tokens, tokens/s."""
    from memloop.bench.model import BenchSettings, run_model_bench

    if peer not in (None, "llama-cpp"):
        raise typer.BadParameter("the peer of bench model is llama-cpp", param_hint="--peer")
    settings = BenchSettings(
        greedy_tokens=greedy_tokens,
        decode_tokens=decode_tokens,
        prefill_tokens=prefill_tokens,
        batch=batch,
        hf_batch=hf_batch,
        packed=packed,
        dense=dense,
        dense_peer=dense_peer,
        quantize=quantize,
        f64_reference=f64_reference,
        contexts=(1024, 4096) if long_contexts else (),
        gather_peer=gather_peer,
        kv_types=_kv_types(kv_types),
    )
    variants = _peer_variants(peer_variants)
    log = lambda line: typer.echo(line, err=as_json)
    peer_failed = None
    if peer is not None:  # build (or find) the peer and check it runs the model before the long memloop part
        from memloop.bench.llama_cpp import (
            BATCHED_BENCH,
            PeerError,
            cannot_run_line,
            gguf_path,
            peer_binary,
            peer_cannot_run,
        )

        gguf_path(model)  # a model the peer cannot read is the user's error: refused before any work
        try:
            peer_binary(BATCHED_BENCH)
            peer_failed = peer_cannot_run(BATCHED_BENCH, model)
        except PeerError as exc:
            peer_failed = str(exc)
        if peer_failed is not None:  # said first, so a reader of the output knows no ratio follows
            log(cannot_run_line(BATCHED_BENCH, peer_failed))
    from memloop.bench.llama_cpp import sigterm_unwinds

    with sigterm_unwinds():  # `kill` of the bench also stops the peer binary it runs (subprocess.run's cleanup)
        result = run_model_bench(model, settings, log=log)
        if peer is not None:  # a peer that fails leaves memloop's figures printed, its own null with the reason
            from memloop.bench.llama_cpp import PeerError, model_bench_peer, peer_failed_fields

            if peer_failed is None:
                try:
                    result.update(
                        model_bench_peer(
                            result,
                            model,
                            decode_tokens,
                            batch,
                            settings.contexts,
                            variants=variants,
                            log=log,
                            prefill_tokens=prefill_tokens,
                        )
                    )
                except PeerError as exc:
                    peer_failed = str(exc)
            if peer_failed is not None:
                result.update(peer_failed_fields(peer_failed, settings.contexts))
    if as_json:
        typer.echo(json.dumps(result))
    else:
        for key, value in result.items():
            typer.echo(f"{key:28s} {value}")
    if peer_failed is not None:
        typer.echo(f"error: the llama.cpp peer failed: {peer_failed}", err=True)
        raise typer.Exit(1)


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    bench_app.command("model")(bench_model)


def _kv_types(text: str) -> tuple[str, ...]:
    from memloop.engine.engine_config import KV_DTYPES

    names = tuple(x.strip() for x in text.split(",") if x.strip())
    bad = [x for x in names if x not in KV_DTYPES or x == "float32"]
    if bad:
        raise typer.BadParameter(
            f"{', '.join(bad)}: the KV-cache types to compare with float32 are "
            f"{', '.join(x for x in KV_DTYPES if x != 'float32')}",
            param_hint="--kv-types",
        )
    return names


def _peer_variants(text: str) -> tuple[str, ...]:
    from memloop.bench.llama_cpp import PEER_VARIANTS

    names = tuple(x.strip() for x in text.split(",") if x.strip())
    bad = [x for x in names if x not in PEER_VARIANTS]
    if bad:
        raise typer.BadParameter(
            f"{', '.join(bad)}: the peer variants are {', '.join(sorted(PEER_VARIANTS))}", param_hint="--peer-variants"
        )
    return names
