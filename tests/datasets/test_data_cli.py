"""`memloop data ...` commands (run on an app holding only the data group, as memloop.jobs.commands.cli registers
it)."""

from __future__ import annotations

import json

import pytest
import typer
from memloop.eval.errors import DatasetError
from memloop.jobs.commands import data
from typer.testing import CliRunner


@pytest.fixture(scope="module")
def app():
    app = typer.Typer()
    data.register(app, typer.Typer())
    return app


def test_sumie_synthetic_writes_official_jsonl(app, tmp_path):
    out = tmp_path / "dataset_sumie.jsonl"
    result = CliRunner().invoke(
        app, ["data", "sumie", "--synthetic", "--entities", "25", "--seed", "4", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.output.strip().splitlines()[-1])["entities"] == 25
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 25 and {"entity_name", "entity_category", "paragraph_summaries", "distractor_sentences"} <= set(
        rows[0]
    )
    again = CliRunner().invoke(app, ["data", "sumie", "--input", str(out)])
    assert again.exit_code == 0 and json.loads(again.output.splitlines()[-1])["paragraphs"] == 25 * 7


def test_chunk_json_reports_nothing_lost(app, shared_data):
    book = shared_data / "books" / "news-from-nowhere.txt"
    result = CliRunner().invoke(app, ["data", "chunk", str(book), "--tokens", "1024", "--json"])
    assert result.exit_code == 0, result.output
    stats = json.loads(result.output.strip().splitlines()[-1])
    assert set(stats) == {"chunks", "max_chunk_tokens", "text_tokens", "chunk_tokens"}
    assert stats["text_tokens"] == stats["chunk_tokens"] and stats["max_chunk_tokens"] <= 1024 and stats["chunks"] > 90


def test_errors_are_named(app, tmp_path):
    result = CliRunner().invoke(app, ["data", "sumie", "--synthetic"])
    assert isinstance(result.exception, DatasetError) and "--out" in str(result.exception)
    empty = tmp_path / "e.txt"
    empty.write_text("")
    result = CliRunner().invoke(app, ["data", "chunk", str(empty), "--json"])
    assert isinstance(result.exception, DatasetError) and "empty" in str(result.exception)


def test_show_and_tasks(app):
    result = CliRunner().invoke(
        app, ["data", "show", "sumie", "-o", "synthetic=true", "-o", "entities=2", "--limit", "2"]
    )
    assert result.exit_code == 0 and result.output.startswith("2 samples")
    assert CliRunner().invoke(app, ["data", "tasks"]).output.split() == [
        "arxiv",
        "book",
        "booksum",
        "memoryagentbench",
        "repoqa",
        "spider",
        "sumie",
    ]
    bad = CliRunner().invoke(app, ["data", "show", "sumie", "-o", "entitees=2"])
    assert isinstance(bad.exception, DatasetError) and "entitees" in str(bad.exception)


def test_export_writes_parquet(app, tmp_path):
    import pyarrow.parquet as pq

    out = tmp_path / "spider.parquet"
    result = CliRunner().invoke(app, ["data", "export", "spider", "--out", str(out), "-o", "chunk_tokens=4096"])
    assert result.exit_code == 0, result.output
    rows = pq.read_table(out).to_pylist()
    assert len(rows) == 50 and json.loads(result.output.splitlines()[-1])["samples"] == 50
    assert (
        rows[0]["task"] == "spider" and json.loads(rows[0]["gold_json"]) and rows[0]["chunks"][0].startswith("Table: ")
    )


def test_repoqa_describe_caches_a_models_descriptions_for_configs_that_name_it(app, tmp_path):
    """`memloop data repoqa-describe` has a served model describe each needle; a config's loader options
    `describer_model` (and `description_cache`) then read those descriptions, checked for leaks."""
    from memloop.eval.datasets import load_dataset

    from tests.jobs.scripted_endpoint import scripted_endpoint

    reply = json.dumps(
        {
            "purpose": "Turns a value into text for a data format",
            "input": "one value",
            "output": "a string",
            "procedure": "looks at the value's kind and writes it out",
        }
    )
    options = ["-o", 'packages=["json"]', "-o", "needles=2", "-o", f"description_cache={tmp_path}"]
    with scripted_endpoint(lambda body: reply if "code search test" in body["messages"][0]["content"] else None) as (
        url,
        seen,
    ):
        result = CliRunner().invoke(
            app, ["data", "repoqa-describe", "--base-url", url, "--model", "writer-1", *options]
        )
    assert result.exit_code == 0, result.output
    assert json.loads(result.output.strip().splitlines()[-1]) == {"samples": 2, "describers": {"llm": 2}}
    assert len(seen) == 2 and len(list(tmp_path.glob("*.json"))) == 2
    samples = load_dataset(
        "repoqa", packages=["json"], needles=2, describer_model="writer-1", description_cache=str(tmp_path)
    )
    assert [s.metadata["describer"] for s in samples] == ["llm", "llm"] and "2. Input: one value" in samples[0].query
    other = load_dataset(
        "repoqa", packages=["json"], needles=2, describer_model="someone-else", description_cache=str(tmp_path)
    )
    assert all(s.metadata["describer"].startswith("code fallback (no description by someone-else") for s in other)
