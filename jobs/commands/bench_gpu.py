"""`memloop bench gpu`: everything a device run measures, in one command (bench/gpu.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Optional

import typer


def bench_gpu(
    out: Path = typer.Option(..., "--out", help="Folder for gpu-bench.json (rewritten as each step finishes)."),
    tiny: bool = typer.Option(
        False,
        "--tiny",
        help="Toy shapes of every step (CPU: the Pallas GPU kernel in the interpreter); what the test suite runs.",
    ),
    budget_s: float = typer.Option(
        480.0,
        "--budget-s",
        min=1,
        help="Seconds the whole run may take: steps whose "
        "expected time does not fit what is left are skipped, most valuable first.",
    ),
    tokenizer: Optional[Path] = typer.Option(
        None,
        "--tokenizer",
        help="A Hugging Face tokenizer folder (default: the bundled SmolLM2's; `make device-kit` saves one to carry).",
    ),
    models: str = typer.Option(
        "", "--models", help="Comma-separated shapes (default: qwen2.5-1.5b,llama-3.1-8b; tiny: tiny-qwen2,tiny-llama)."
    ),
    as_json: bool = typer.Option(False, "--json", help="End with one JSON line of the summary."),
) -> None:
    """Correctness against transformers, decode/prefill against the HBM and FLOP bounds, the peer, a profile."""
    # JAX must not take the GPU's memory before transformers loads the same checkpoint beside it.
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    from memloop.bench.gpu import main

    result = main(
        out,
        tiny,
        budget_s,
        tokenizer,
        tuple(m for m in models.split(",") if m) or None,
        log=lambda line: typer.echo(line, err=as_json),
    )
    typer.echo(f"wrote {out / 'gpu-bench.json'}", err=as_json)
    if as_json:
        typer.echo(json.dumps(result["summary"]))
    if result["failed_steps"]:
        typer.echo(
            f"error: {len(result['failed_steps'])} step(s) failed: {', '.join(result['failed_steps'])} "
            f"(their errors are in {out / 'gpu-bench.json'})",
            err=True,
        )
        raise typer.Exit(1)


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    bench_app.command("gpu")(bench_gpu)
