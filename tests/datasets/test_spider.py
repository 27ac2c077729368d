"""Spider-style QA: realistic built-in databases, Spider and LOFT files, gold by execution."""

from __future__ import annotations

import csv
import json
import sqlite3

import pytest
from memloop.eval.datasets import load_dataset, token_counter
from memloop.eval.datasets.errors import (
    DatasetNotFoundError,
    InconsistentGoldError,
    MissingFieldError,
    UnknownFormatError,
)
from memloop.eval.datasets.spider import load_loft_predictions, load_loft_queries, load_spider, same_rows
from memloop.eval.datasets.spider.databases import BUILTIN, build


@pytest.fixture(scope="module")
def builtin():
    return load_dataset("spider", chunk_tokens=1024)


def _rows_in_chunks(chunks):
    """table -> rows, parsed back from the rendered chunks."""
    tables: dict[str, list[list[str]]] = {}
    for chunk in chunks:
        for block in chunk.split("\n\n"):
            lines = block.split("\n")
            assert lines[0].startswith("Table: ")
            rows = list(csv.reader(lines[1:]))
            tables.setdefault(lines[0][7:], []).extend(rows[1:])
    return tables


def test_builtin_questions_have_gold_and_chunks_hold_every_row_once(builtin):
    count = token_counter()
    assert len(builtin) == sum(len(db.questions) for db in BUILTIN) and len({s.id for s in builtin}) == len(builtin)
    for s in builtin:
        assert s.task == "spider" and s.gold and s.gold[0][0] is not None and all(isinstance(r, list) for r in s.gold)
        assert all(count(c) <= 1024 for c in s.chunks)
    for db in BUILTIN:
        con = build(db)
        sample = next(s for s in builtin if s.metadata["db_id"] == db.db_id)
        parsed = _rows_in_chunks(sample.chunks)
        for table in parsed:
            expected = [["" if v is None else str(v) for v in row] for row in con.execute(f'SELECT * FROM "{table}"')]
            assert parsed[table] == expected
        assert set(parsed) == {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    first = builtin[0]
    assert first.query.startswith("Find the buildings") and first.metadata["ordered"]
    text = "\n".join(first.chunks)
    assert all(
        f"\n{row[0]}," in text or f",{row[0]}," in text for row in first.gold
    )  # answers are readable from the tables
    assert [s.id for s in load_spider(chunk_tokens=1024)] == [s.id for s in builtin]  # stable ids


def test_user_sqlite_with_spider_and_loft_files(tmp_path):
    uni = next(db for db in BUILTIN if db.db_id == "university")
    (tmp_path / "university").mkdir()
    target = sqlite3.connect(tmp_path / "university" / "university.sqlite")
    build(uni).backup(target)
    target.close()
    dev = [
        {"db_id": "university", "question": "How many classrooms are there?", "query": "SELECT count(*) FROM classroom"}
    ]
    (tmp_path / "dev.json").write_text(json.dumps(dev))
    [s] = load_spider(databases=tmp_path, queries=tmp_path / "dev.json", chunk_tokens=4096)
    assert s.gold == [[len(s.chunks[0].split("Table: classroom\n")[1].split("\n\n")[0].split("\n")) - 1]]
    loft = {
        "qid": "q1",
        "query_text": "Which buildings have rooms above 50 seats?",
        "answers": [[b] for b in ["Lamberton", "Gates", "Lambeau"]],
        "metadata": {
            "db_id": "university",
            "sql_query": "SELECT DISTINCT building FROM classroom WHERE capacity > 50 AND building IN "
            "('Gates','Lambeau','Lamberton')",
        },
    }
    (tmp_path / "q.jsonl").write_text(json.dumps(loft) + "\n")
    [q] = load_spider(databases=tmp_path, queries=tmp_path / "q.jsonl", verify=True)
    assert q.id == "spider/university/q1" and q.gold == loft["answers"] and not q.metadata["ordered"]
    loft["answers"] = [["Gates"]]
    (tmp_path / "q.jsonl").write_text(json.dumps(loft) + "\n")
    with pytest.raises(InconsistentGoldError):
        load_spider(databases=tmp_path, queries=tmp_path / "q.jsonl", verify=True)
    (tmp_path / "bad.sqlite").write_text("not a database")
    with pytest.raises(UnknownFormatError):
        load_spider(databases=tmp_path / "bad.sqlite", queries=tmp_path / "dev.json")


def test_shared_loft_example(shared_data):
    folder = shared_data / "loft-spider-example"
    queries = load_loft_queries(folder / "queries.jsonl")
    assert (
        len(queries) == 10 and queries[0].db_id == "college_2" and queries[0].sql.startswith("SELECT DISTINCT building")
    )
    assert queries[1].answers == [[28]]
    preds = load_loft_predictions(folder / "preds.jsonl")
    assert set(preds) == {q.qid for q in queries} and preds[queries[1].qid] == [[[24]]]
    assert same_rows(preds[queries[0].qid][0][:1], [["Nassau"]], ordered=False)
    with pytest.raises(DatasetNotFoundError, match="college_2"):  # Spider's tables are not shipped with the example
        load_spider(queries=folder / "queries.jsonl")


def test_malformed_loft(tmp_path):
    (tmp_path / "q.jsonl").write_text(json.dumps({"qid": "1", "query_text": "x", "answers": [[1]]}) + "\n")
    with pytest.raises(MissingFieldError, match="metadata"):
        load_loft_queries(tmp_path / "q.jsonl")
    (tmp_path / "q.jsonl").write_text(
        json.dumps({"qid": "1", "query_text": "x", "answers": 3, "metadata": {"db_id": "d"}}) + "\n"
    )
    with pytest.raises(MissingFieldError, match="answers"):
        load_loft_queries(tmp_path / "q.jsonl")


def test_loft_corpus_gives_the_same_chunks_as_the_database(tmp_path):
    from memloop.eval.datasets.spider.render import table_lines, table_names

    uni = next(db for db in BUILTIN if db.db_id == "university")
    con = build(uni)
    corpus = []
    for i, name in enumerate(table_names(con)):
        header, rows = table_lines(con, name)
        corpus.append({"pid": f"p{i}", "title_text": name, "passage_text": "\n".join([header] + rows), "metadata": {}})
    (tmp_path / "corpus.jsonl").write_text("\n".join(json.dumps(r) for r in corpus) + "\n")
    query = {
        "qid": "q7",
        "query_text": "How many classrooms are there?",
        "answers": [[con.execute("SELECT count(*) FROM classroom").fetchone()[0]]],
        "metadata": {
            "db_id": "university",
            "sql_query": "SELECT count(*) FROM classroom",
            "candidate_pids": [r["pid"] for r in corpus],
        },
    }
    (tmp_path / "queries.jsonl").write_text(json.dumps(query) + "\n")
    [s] = load_spider(queries=tmp_path / "queries.jsonl", corpus=tmp_path / "corpus.jsonl", chunk_tokens=2048)
    [ref] = [
        x
        for x in load_spider(chunk_tokens=2048, db_ids=["university"])
        if x.query.startswith("Count the number of rooms")
    ]
    assert s.chunks == ref.chunks and s.gold == query["answers"]
    query["metadata"]["candidate_pids"] = ["p0", "nope"]
    (tmp_path / "queries.jsonl").write_text(json.dumps(query) + "\n")
    with pytest.raises(DatasetNotFoundError, match="nope"):
        load_spider(queries=tmp_path / "queries.jsonl", corpus=tmp_path / "corpus.jsonl")


def test_a_loft_folder_is_read_when_present_and_the_paper_configs_name_one(tmp_path):
    """`loft:` names LOFT's Spider folder: its queries over its own tables when the files are there,
    memloop's built-in databases (said in each sample's metadata) when they are not."""
    from pathlib import Path

    import yaml

    (tmp_path / "corpus.jsonl").write_text(
        json.dumps({"pid": "t1", "title_text": "singer", "passage_text": "singer_id,name\n1,Joe Sharp\n2,Rose White"})
        + "\n"
    )
    (tmp_path / "test_queries.jsonl").write_text(
        json.dumps(
            {
                "qid": "q1",
                "query_text": "How many singers are there?",
                "answers": [[2]],
                "metadata": {
                    "db_id": "concert_singer",
                    "sql_query": "SELECT count(*) FROM singer",
                    "candidate_pids": ["t1"],
                },
            }
        )
        + "\n"
    )
    [s] = load_dataset("spider", loft=str(tmp_path), chunk_tokens=2048)
    assert s.metadata["source"] == "loft:test_queries.jsonl" and s.gold == [[2]]
    assert s.chunks == ("Table: singer\nsinger_id,name\n1,Joe Sharp\n2,Rose White",)
    absent = load_dataset("spider", loft=str(tmp_path / "missing"), chunk_tokens=2048)
    assert len(absent) == 50 and absent[0].metadata["source"] == f"builtin (no LOFT files in {tmp_path / 'missing'})"
    with pytest.raises(DatasetNotFoundError, match="no LOFT Spider files"):
        load_spider(loft=tmp_path / "missing", loft_required=True)
    root = Path(__file__).resolve().parents[2] / "jobs/configs/papers"
    for name in ("seed002-table2.yaml", "seed002-table4.yaml"):
        [spider] = [d for d in yaml.safe_load((root / name).read_text())["datasets"] if d["task"] == "spider"]
        assert spider["options"]["loft"].endswith("spider/32k"), name
