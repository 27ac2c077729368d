"""`memloop data ...`: generate synthetic SUMIE data, chunk a book, inspect any dataset task."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from memloop.eval.errors import DatasetError

data_app = typer.Typer(help="Datasets: generate, chunk and inspect task data.", no_args_is_help=True)


@data_app.command("sumie")
def sumie(
    synthetic: bool = typer.Option(False, "--synthetic", help="Generate entities instead of reading --input."),
    entities: int = typer.Option(200, "--entities", min=1, help="How many entities to generate."),
    seed: int = typer.Option(0, "--seed", help="Generator seed: the same seed gives the same file."),
    conflicts: float = typer.Option(
        0.0,
        "--conflicts",
        min=0.0,
        max=1.0,
        help="Probability per paragraph that a stated value changes (updates, not just additions).",
    ),
    out: Optional[Path] = typer.Option(None, "--out", help="Where to write official-format JSONL."),
    input: Optional[Path] = typer.Option(None, "--input", help="An official dataset_sumie.jsonl to check."),
) -> None:
    """Write synthetic SUMIE data in the official format, or check an official-format file's gold."""
    from memloop.eval.datasets.sumie import load_sumie, write_sumie_jsonl

    if synthetic:
        if out is None:
            raise DatasetError("--synthetic needs --out FILE (where to write the JSONL)")
        write_sumie_jsonl(out, entities, seed, conflicts=conflicts)
        path = out
    elif input is not None:
        path = input
    else:
        raise DatasetError("pass --synthetic --out FILE to generate, or --input FILE to check a file")
    samples = load_sumie(path, verify_gold=True)
    facts = sum(len(s.gold["facts"][-1]) for s in samples)
    print(
        json.dumps(
            {
                "path": str(path),
                "entities": len(samples),
                "paragraphs": sum(len(s.chunks) for s in samples),
                "final_facts": facts,
            }
        )
    )


@data_app.command("chunk")
def chunk(
    book: Path = typer.Argument(..., help="A plain-text or Project Gutenberg book."),
    tokens: int = typer.Option(2048, "--tokens", help="Chunk size in tokens."),
    tokenizer: str = typer.Option(
        "cl100k_base",
        "--tokenizer",
        help="A tiktoken encoding name, a Hugging Face tokenizer folder, or a .gguf model file.",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the statistics as one JSON object (last line)."),
    no_unwrap: bool = typer.Option(False, "--no-unwrap", help="Keep hard-wrapped lines as separate paragraphs."),
) -> None:
    """Chunk a book exactly like BooookScore and report whether any text was lost."""
    from memloop.eval.datasets.books import clean_book
    from memloop.eval.datasets.chunker import chunk_paragraphs, chunk_stats, split_paragraphs
    from memloop.eval.datasets.textfile import read_text

    tok = tokenizer  # an encoding name, a tokenizer folder or a .gguf file (see memloop.eval.tokens)
    paragraphs = split_paragraphs(clean_book(read_text(book, "book"), unwrap=not no_unwrap))
    chunks = chunk_paragraphs(paragraphs, tokens, tok)
    stats = chunk_stats(paragraphs, chunks, tok).as_dict()
    if not as_json:
        print(
            f"{book}: {len(paragraphs)} paragraphs -> {stats['chunks']} chunks of at most {tokens} tokens "
            f"(largest {stats['max_chunk_tokens']}); text {stats['text_tokens']} tokens, chunks {stats['chunk_tokens']}"
        )
    print(json.dumps(stats))
    if stats["text_tokens"] != stats["chunk_tokens"]:
        raise DatasetError(
            f"chunking lost text ({stats['text_tokens']} vs {stats['chunk_tokens']} tokens): please report this book"
        )


@data_app.command("tasks")
def list_tasks() -> None:
    """List the dataset task names a run config may use."""
    from memloop.eval.datasets import tasks

    for name in tasks():
        print(name)


def _options(option: list[str]) -> dict:
    options = {}
    for item in option:
        key, sep, value = item.partition("=")
        if not sep:
            raise DatasetError(f"option {item!r} must look like KEY=VALUE")
        try:
            options[key] = json.loads(value)
        except json.JSONDecodeError:
            options[key] = value
    return options


@data_app.command("export")
def export(
    task: str = typer.Argument(..., help="A task name (see `memloop data tasks`)."),
    out: Path = typer.Option(..., "--out", help="Parquet file to write (one row per sample)."),
    option: list[str] = typer.Option(
        [], "--option", "-o", help="Loader option KEY=VALUE (VALUE parsed as JSON when it can be)."
    ),
) -> None:
    """Write a task's samples to Parquet (id, task, chunks, query, gold_json, metadata_json)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from memloop.eval.datasets import load_dataset

    samples = load_dataset(task, **_options(option))
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    pq.write_table(pa.Table.from_pylist([s.to_record() for s in samples]), tmp)
    tmp.replace(out)  # readers never see half a file
    print(json.dumps({"path": str(out), "samples": len(samples), "chunks": sum(len(s.chunks) for s in samples)}))


@data_app.command("show")
def show(
    task: str = typer.Argument(..., help="A task name (see `memloop data tasks`)."),
    option: list[str] = typer.Option(
        [], "--option", "-o", help="Loader option KEY=VALUE (VALUE parsed as JSON when it can be)."
    ),
    limit: int = typer.Option(3, "--limit", help="How many samples to print."),
) -> None:
    """Load a task with its options and print a one-line summary per sample (JSON)."""
    from memloop.eval.datasets import load_dataset

    samples = load_dataset(task, **_options(option))
    print(f"{len(samples)} samples")
    for s in samples[:limit]:
        print(
            json.dumps(
                {
                    "id": s.id,
                    "chunks": len(s.chunks),
                    "chars": sum(map(len, s.chunks)),
                    "query": (s.query or "")[:160],
                    "gold": json.dumps(s.gold)[:160],
                },
                ensure_ascii=False,
            )
        )


@data_app.command("repoqa-describe")
def repoqa_describe(
    base_url: str = typer.Option(..., "--base-url", help="An OpenAI-compatible endpoint (e.g. `memloop serve`'s)."),
    model: str = typer.Option(
        ...,
        "--model",
        help="The model that writes the descriptions (the name a config's `describer_model` then gives).",
    ),
    api_key_env: Optional[str] = typer.Option(None, "--api-key-env", help="Environment variable holding the API key."),
    option: list[str] = typer.Option(
        [], "--option", "-o", help="RepoQA loader option KEY=VALUE (packages, needles, seed, description_cache ...)."
    ),
) -> None:
    """Have a model describe every RepoQA-style needle (as RepoQA's descriptions are written), caching its
    answers so that a run config with `describer_model: MODEL` reads them; prints who described what."""
    from collections import Counter

    from memloop.eval.datasets.repoqa import load_repoqa
    from memloop.eval.llm_http import OpenAICompatibleLLM

    llm = OpenAICompatibleLLM(base_url, model, api_key_env=api_key_env)
    samples = load_repoqa(llm=llm, **_options(option))
    print(json.dumps({"samples": len(samples), "describers": dict(Counter(s.metadata["describer"] for s in samples))}))


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    app.add_typer(data_app, name="data")
