"""The papers' tables: one config per table under jobs/configs/papers/, each laid out by `memloop report`
with the paper's rows and columns and the paper's printed numbers beside memloop's."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from jobs.run.config import load_config, parse_config, with_overrides
from jobs.run.driver import execute
from jobs.errors import ConfigError
from jobs.results.paper_tables import TABLES, layout
from jobs.run.plan import run_id
from jobs.results.report import headline, report_of
from tests.datasets.test_booksum import booksum_file
from tests.jobs.scripted_endpoint import scripted_endpoint

ROOT = Path(__file__).resolve().parents[2]
PAPER_CONFIGS = sorted((ROOT / "jobs/configs/papers").glob("*.yaml"))
BOOK = ROOT / "jobs/configs/data/lighthouse-keeper.txt"


def test_every_paper_table_has_a_config_whose_methods_tasks_and_judges_it_reads() -> None:
    named = {}
    for path in PAPER_CONFIGS:
        cfg = load_config(path)
        assert cfg.paper_tables, f"{path.name} names no paper table"
        named.update({t: cfg for t in cfg.paper_tables})
    assert set(named) == set(TABLES)
    for tid, cfg in named.items():
        table, keys = TABLES[tid], {m.key for m in cfg.methods}
        tasks, judges = {d.task for d in cfg.datasets}, {j.name for j in cfg.judges}
        for col in table.columns:
            assert col.task is None or col.task in tasks, (tid, col.label)
            assert col.judge in (None, "") or col.judge in judges, (tid, col.label)
        for row in table.rows:
            for col in table.columns:
                if col.judge is not None:
                    assert row.method_for(col.task) in keys, (tid, row.label, col.label)
            assert row.dataset is None or any(d.key.endswith(row.dataset) for d in cfg.datasets), (tid, row.label)


def test_an_unknown_paper_table_is_a_config_error_naming_the_known_ones() -> None:
    with pytest.raises(ConfigError, match="seed000-table1"):
        parse_config({"datasets": [{"task": "sumie", "synthetic": {"entities": 1}}], "methods": [{"name": "cok"}],
                      "paper_tables": ["seed000-table9"]})


def test_a_paper_config_runs_reduced_with_limit_max_chunks_and_repeats() -> None:
    cfg = load_config(ROOT / "jobs/configs/papers/seed000-table1.yaml")
    small = with_overrides(cfg, limit=2, max_chunks=2, repeats=1)
    assert small.repeats == 1 and all(d.limit == 2 and d.options["max_chunks"] == 2 for d in small.datasets)
    assert run_id(small) != run_id(cfg)  # a reduced run never resumes (or is taken for) the full one
    with pytest.raises(ConfigError, match="--max-chunks"):
        with_overrides(cfg, max_chunks=0)


def test_cells_carry_the_papers_unit_the_counts_and_why_a_figure_is_missing() -> None:
    table = TABLES["seed004-table1"]
    figures = [{"method": "fart-base", "dataset": "arxiv:x", "judge": "rouge", "metric": "rouge1",
                "mean": 0.2, "se": 0.01, "judged": 9, "total": 10},
               {"method": "fart-rolling", "dataset": "arxiv:x", "judge": "rouge", "metric": "rouge1",
                "mean": 0.3, "se": None, "judged": 10, "total": 10}]
    rows = {r["label"]: r["cells"] for r in layout(table, figures, {})["rows"]}
    assert rows["Base"]["ROUGE-1"] == dict(memloop=pytest.approx(20.0), se=pytest.approx(1.0), n=9, total=10,
                                          text="20.0 ± 1.0 (9 / 10)", paper="11.7")
    assert rows["Rolling summary"]["ROUGE-1"]["text"] == "30.0"  # all judged: no counts shown
    assert rows["Compressed intermediates"]["ROUGE-1"]["text"] == "–"
    long = TABLES["seed002-table2"]
    cells = {r["label"]: r["cells"] for r in layout(long, [], {"long-context": {"n/a": 3}})["rows"]}
    assert cells["Long context"]["BooookScore"]["text"] == "n/a"
    assert cells["Long context"]["BooookScore"]["paper"] == ".67 ± .004"
    failed = {r["label"]: r["cells"] for r in layout(long, [], {"inc-update": {"failed": 2}})["rows"]}
    assert failed["Incremental"]["RepoQA acc."]["text"] == "failed (2 / 2)"  # a failure is never a blank
    kg = {r["label"]: r["cells"] for r in layout(TABLES["seed001-table1"], [], {})["rows"]}
    assert kg["KG"]["BERTScore F1"]["text"] == "not measured" and kg["KG"]["BERTScore F1"]["paper"] == "54.58 / 55.96"


def test_seed003_release_column_is_the_official_release_replayed(shared_data) -> None:
    from eval.judges.booookscore_replay import release_table

    release = release_table(shared_data / "booookscore")
    scores = {(r["model"], r["method"]): r["booookscore"] for r in release if r["chunk"] == 2048}
    rows = {r.method: r.paper["BooookScore"] for r in TABLES["seed003-hier-inc"].rows}
    for method, key in (("hier-merge", "hier"), ("inc-update", "inc")):
        assert rows[method] == " / ".join(f"{100 * scores[(m, key)]:.1f}" for m in ("gpt4", "claude", "chatgpt"))


@pytest.fixture(scope="module")
def endpoint():
    with scripted_endpoint() as (url, seen):
        yield url, seen


def _arxiv_file(tmp_path: Path) -> Path:
    article = " ".join(f"Sentence {i} of the study reports a measured result about lighthouse lamps." for i in range(40))
    path = tmp_path / "arxiv.jsonl"
    path.write_text(json.dumps({"article": article.replace(". ", ".\n"),
                                "abstract": "The study measures lighthouse lamps.\nIt reports results."}) + "\n")
    return path


@pytest.mark.parametrize("config", PAPER_CONFIGS, ids=lambda p: p.stem)
def test_a_reduced_paper_config_runs_end_to_end_and_reports_the_papers_table(config, ray_local, endpoint,
                                                                             tmp_path) -> None:
    url, _ = endpoint
    data = yaml.safe_load(config.read_text())
    model = {"kind": "openai", "endpoint": {"base_url": url, "model": "scripted", "max_concurrency": 8}}
    data.update(output=str(tmp_path / "runs"), model=model, judge_model=model, judge_cpus=0.25)
    for d in data["datasets"]:
        if d["task"] == "book":
            d["path"] = str(BOOK)
        elif d["task"] == "arxiv":
            d["path"] = str(_arxiv_file(tmp_path))
        elif d["task"] == "booksum":
            d["path"] = str(booksum_file(tmp_path))
        d.setdefault("options", {})
        if "chunk_tokens" in d["options"]:
            d["options"]["chunk_tokens"] //= 16  # small chunks; a sweep stays a sweep
    cfg = with_overrides(parse_config(data), limit=1, max_chunks=2, repeats=1)
    summary = execute(cfg, log=lambda m: None)
    assert summary.computed + summary.failed > 0 and summary.skipped == 0
    _, d, rep = report_of(summary.output)
    assert "## The papers' tables: memloop beside the paper" in rep.markdown
    laid = {t["id"]: t for t in headline(d)["paper_tables"]}
    assert list(laid) == cfg.paper_tables
    for tid in cfg.paper_tables:
        table = TABLES[tid]
        assert table.title in rep.markdown
        for row, got in zip(table.rows, laid[tid]["rows"]):
            assert got["label"] == row.label and row.label in rep.markdown
            for col in table.columns:
                cell = got["cells"][col.label]
                assert cell["paper"] == (row.paper.get(col.label) or None)
                # a memloop figure, or the reason there is none: never an empty cell for a method the run has
                assert cell["text"], (tid, row.label, col.label)


@pytest.mark.slow
@pytest.mark.parametrize("config", PAPER_CONFIGS, ids=lambda p: p.stem)
def test_a_reduced_paper_config_runs_on_the_bundled_model(config, ray_local, tmp_path) -> None:
    """Each paper config reduced (2 samples, 2 chunks, 1 repeat, 64-token outputs) on the engine with the
    bundled model: every unit computed or failed with its cause, and the report lays out the table."""
    data = yaml.safe_load(config.read_text())
    data.update(output=str(tmp_path / "runs"), engine={"actors": 1, "cpus_per_actor": 1, "max_in_flight": 16},
                sampling=dict(data.get("sampling") or {}, max_tokens=64), judge_cpus=0.25)
    for d in data["datasets"]:
        if d["task"] == "book":
            d["path"] = str(BOOK)
        elif d["task"] == "arxiv":
            d["path"] = str(_arxiv_file(tmp_path))
        elif d["task"] == "booksum":
            d["path"] = str(booksum_file(tmp_path))
        if "chunk_tokens" in d.get("options", {}):
            d["options"]["chunk_tokens"] //= 8
    for m in data["methods"]:
        m.setdefault("options", {})["max_attempts"] = 1
    cfg = with_overrides(parse_config(data), limit=2, max_chunks=2, repeats=1)
    summary = execute(cfg, log=lambda m: None)
    assert summary.computed + summary.failed > 0 and summary.skipped == 0
    _, d, rep = report_of(summary.output)
    laid = {t["id"]: t for t in headline(d)["paper_tables"]}
    assert list(laid) == cfg.paper_tables
    for tid in cfg.paper_tables:
        assert TABLES[tid].title in rep.markdown
        assert all(c["text"] for r in laid[tid]["rows"] for c in r["cells"].values())
