"""`memloop bench rows`: where the CPU kernel stops and XLA's dot takes over, measured on this host."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer


def bench_rows(
    model: Optional[Path] = typer.Option(
        None, help="GGUF file (default: bundled SmolLM2): its first layer's block matrices are the ones timed."
    ),
    repeat: int = typer.Option(5, min=1, help="Timed calls per path and row count (interleaved; the best counts)."),
    write: bool = typer.Option(
        True,
        "--write/--no-write",
        help="Record the limit for this host (the engine then uses it instead of the instruction set's table).",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the record as one JSON line at the end."),
) -> None:
    """Time the kernel and de-quantisation + XLA's dot at 64-512 rows on this host; record the crossover."""
    from memloop.engine.model.blocks import (
        BlockMatrix,
        dequantize,
        kernel_amx_min_rows,
        kernel_max_rows,
        kernel_max_rows_source,
    )
    from memloop.engine.model.decoder import load_model
    from memloop.engine.model.row_limit import measure_max_rows

    lm = load_model(model, load_tokenizer=False)
    layer = lm.params["layers"][0] if lm.per_layer else None
    ws = [w for w in (layer or {}).values() if isinstance(w, BlockMatrix)]
    if not ws:
        raise typer.BadParameter(
            "this model's layers hold no block-form matrices (dense weights): there is no "
            "kernel path to time; pass a GGUF of Q4_0/Q4_1/Q5_0/Q8_0/Q4_K/Q5_K/Q6_K weights",
            param_hint="--model",
        )
    log = lambda line: typer.echo(line, err=as_json)
    log(f"before: kernel up to {kernel_max_rows()} rows ({kernel_max_rows_source()})")
    record = measure_max_rows(ws, dequantize, kernel_amx_min_rows(), repeat=repeat, write=write, log=log)
    log(
        f"measured: the kernel up to {record['max_rows'] or 'every measured'} rows, XLA's dot above"
        + (f" (recorded for this host; {kernel_max_rows_source()})" if write else " (not recorded: --no-write)")
    )
    if as_json:
        typer.echo(json.dumps(record))


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    bench_app.command("rows")(bench_rows)
