"""Who judges: `judge_model.weights` (or `memloop run --judge-model NAME`) runs the LLM judges on an
engine of their own, not on the model under test. Through a real run: the method on the scripted
endpoint (127.0.0.1), BooookScore's judge on a SmolLM2 engine actor; no judge prompt reaches the
scripted model, the judgments exist, and the report names the judge as a different model."""

from __future__ import annotations

from pathlib import Path

import pytest
from memloop.jobs.errors import ConfigError
from memloop.jobs.results.run_data import RunData
from memloop.jobs.results.run_models import models_of
from memloop.jobs.run.config import JudgeModelSpec, parse_config, with_overrides
from memloop.jobs.run.driver import execute
from memloop.jobs.run.plan import make_plan, run_id
from memloop.jobs.store.run_store import RunStore

from tests.jobs.scripted_endpoint import scripted_endpoint

BOOK = Path(__file__).resolve().parents[2] / "jobs/configs/data/lighthouse-keeper.txt"


def _config(url: str, tmp_path: Path, **extra) -> dict:
    return {
        "name": "judge-engine",
        "output": str(tmp_path / "runs"),
        "datasets": [{"task": "book", "path": str(BOOK), "options": {"chunk_tokens": 256, "max_chunks": 1}}],
        "methods": [{"name": "inc-update", "options": {"max_attempts": 1, "max_tokens": 48}}],
        "judges": [{"name": "booookscore-batched", "options": {"batch_size": 4}}],
        "model": {"kind": "openai", "endpoint": {"base_url": url, "model": "scripted", "max_concurrency": 2}},
        "judge_cpus": 0.25,
        "engine": {"cpus_per_actor": 1},
        **extra,
    }


def test_judge_model_flag_names_a_judge_engine_and_changes_the_run_id(smollm2_gguf, tmp_path) -> None:
    base = parse_config(_config("http://127.0.0.1:1/v1", tmp_path))
    judged = with_overrides(base, judge_model=str(smollm2_gguf))
    assert judged.judge_model == JudgeModelSpec(weights=str(smollm2_gguf))
    assert with_overrides(judged, judge_model="self").judge_model == JudgeModelSpec()
    assert run_id(judged) != run_id(base)
    assert Path(make_plan(judged).judge_engine_config.model).resolve() == smollm2_gguf.resolve()
    assert make_plan(base).judge_engine_config is None
    with pytest.raises(ConfigError, match=r"judge_model.weights.*does not exist"):
        make_plan(with_overrides(base, judge_model=str(tmp_path / "missing.gguf")))


def test_the_judges_run_on_their_own_engine_not_the_model_under_test(ray_local, smollm2_gguf, tmp_path) -> None:
    with scripted_endpoint() as (url, seen):
        cfg = parse_config(_config(url, tmp_path, judge_model={"kind": "engine", "weights": str(smollm2_gguf)}))
        summary = execute(make_plan(cfg), log=lambda m: None)
    assert summary.computed == 1 and summary.failed == 0, summary.errors
    prompts = [" ".join(str(m.get("content", "")) for m in b.get("messages", [])) for b in seen]
    assert prompts and not any("confusing" in p.lower() for p in prompts)  # no judge prompt at the model under test
    rs = RunStore.at(summary.output)
    judgments = rs.table("judgments").to_pandas()
    assert len(judgments) > 0 and judgments["judge"].eq("booookscore").all()
    who = models_of(RunData.load(rs))
    assert who["judge"] != who["model"] and not who["self_judged"] and smollm2_gguf.name in who["judge"]


def _kg_config(model_url: str, judge_url: str, tmp_path: Path, booksum: Path, **kg_options) -> dict:
    return {
        "name": "kg-extraction",
        "output": str(tmp_path / "runs"),
        "datasets": [
            {
                "task": "booksum",
                "path": str(booksum),
                "options": {"samples": 1, "seed": 0, "max_chapter_tokens": 2000, "chunk_tokens": 4096},
            }
        ],
        "methods": [{"name": "kg-retrieval", "options": {"max_attempts": 1, "max_tokens": 48, **kg_options}}],
        "judges": [{"name": "rouge"}],
        "model": {"kind": "openai", "endpoint": {"base_url": model_url, "model": "scripted", "max_concurrency": 2}},
        "judge_model": {
            "kind": "openai",
            "endpoint": {"base_url": judge_url, "model": "stronger", "max_concurrency": 2},
        },
        "judge_cpus": 0.25,
    }


def test_the_knowledge_graph_is_extracted_by_the_judge_model_and_the_table_note_names_it(ray_local, tmp_path) -> None:
    """Seed 001 section 3.3: the graph is extracted by a model of its own (gpt-3.5-turbo), the summaries
    written by another. `extraction_model: judge` (the default) sends every extraction to the run's
    judge model; `self` keeps it on the model under test; the run records which and the note names it."""
    from memloop.jobs.results.paper_tables import TABLES, judged_note

    from tests.datasets.test_booksum import booksum_file

    booksum = booksum_file(tmp_path)
    for option, extracts_on_judge in (({}, True), ({"extraction_model": "self"}, False)):
        with scripted_endpoint() as (model_url, model_seen), scripted_endpoint() as (judge_url, judge_seen):
            cfg = parse_config(_kg_config(model_url, judge_url, tmp_path / str(bool(option)), booksum, **option))
            summary = execute(make_plan(cfg), log=lambda m: None)
        assert summary.computed + summary.failed == 1 and summary.skipped == 0
        texts = lambda seen: [" ".join(str(m.get("content", "")) for m in b.get("messages", [])) for b in seen]  # noqa: E731
        extractions = [
            p for p in texts(judge_seen if extracts_on_judge else model_seen) if "[Begin story excerpt]" in p
        ]
        assert extractions and not any(
            "[Begin story excerpt]" in p for p in texts(model_seen if extracts_on_judge else judge_seen)
        )
        assert any("Summary:" in p for p in texts(model_seen))  # the summaries stay on the model under test
        who = models_of(RunData.load(RunStore.at(summary.output)))
        assert who["graph_extraction"].startswith("stronger at" if extracts_on_judge else "scripted at")
        assert f"knowledge graph extracted by: {who['graph_extraction']}" in judged_note(TABLES["seed001-table1"], who)


def test_a_judge_engine_starts_for_the_graph_extraction_alone(smollm2_gguf, tmp_path) -> None:
    """With judges that need no LLM (ROUGE), a kg-retrieval run still gets its judge engine to extract with."""
    from tests.datasets.test_booksum import booksum_file

    data = _kg_config("http://127.0.0.1:1/v1", "http://127.0.0.1:1/v1", tmp_path, booksum_file(tmp_path))
    data["judge_model"] = {"kind": "engine", "weights": str(smollm2_gguf)}
    assert make_plan(parse_config(data)).judge_engine_config is not None
    data["methods"][0]["options"]["extraction_model"] = "self"
    assert make_plan(parse_config(data)).judge_engine_config is None
    data["methods"][0]["options"]["extraction_model"] = "gpt"
    with pytest.raises(ConfigError, match=r"extraction_model must be 'judge' .* or 'self'"):
        make_plan(parse_config(data))


def test_the_graph_model_and_the_kgscore_model_may_differ_and_the_run_records_both(ray_local, tmp_path) -> None:
    """Seed 001: gpt-3.5-turbo extracted the book graph (section 3.3) and Mixtral 8x7B extracted KGScore's edges
    (section 3.5). `graph_model` names the extraction model apart from the judge model: the graph's extraction
    prompts reach it alone, KGScore's reach the judge model alone, and the run records and names both."""
    from memloop.jobs.results.run_data import run_config

    from tests.datasets.test_booksum import booksum_file

    booksum = booksum_file(tmp_path)
    with (
        scripted_endpoint() as (model_url, model_seen),
        scripted_endpoint() as (judge_url, judge_seen),
        scripted_endpoint() as (graph_url, graph_seen),
    ):
        data = _kg_config(model_url, judge_url, tmp_path, booksum)
        data["judges"] = [{"name": "kgscore", "options": {"on_invalid": "record"}}]
        data["graph_model"] = {
            "kind": "openai",
            "endpoint": {"base_url": graph_url, "model": "graph-extractor", "max_concurrency": 2},
        }
        cfg = parse_config(data)
        summary = execute(make_plan(cfg), log=lambda m: None)
    assert summary.computed + summary.failed == 1 and summary.skipped == 0
    texts = lambda seen: [" ".join(str(m.get("content", "")) for m in b.get("messages", [])) for b in seen]  # noqa: E731
    graph, judge, model = texts(graph_seen), texts(judge_seen), texts(model_seen)
    assert graph and all("[Begin story excerpt]" in p for p in graph)  # the book graph, on the graph model only
    assert not any("[Begin story excerpt]" in p for p in judge + model)
    assert any("knowledge graph edges" in p.lower() and "[Begin story excerpt]" not in p for p in judge)  # KGScore
    assert not any("Turn a chapter summary into a list of knowledge graph edges" in p for p in graph + model)
    d = RunData.load(RunStore.at(summary.output))
    assert run_config(d)["graph_model"]["endpoint"]["model"] == "graph-extractor"
    who = models_of(d)
    assert who["graph_extraction"].startswith("graph-extractor at") and who["judge"].startswith("stronger at")
    # part of the run id; left out, the judge model extracts (the paper configs: one judge model does both)
    assert run_id(cfg) != run_id(parse_config(_kg_config(model_url, judge_url, tmp_path, booksum)))


def test_a_graph_model_on_weights_of_its_own_is_refused_with_what_to_do(tmp_path) -> None:
    data = _kg_config("http://127.0.0.1:1/v1", "http://127.0.0.1:1/v1", tmp_path, tmp_path / "b.jsonl")
    data["graph_model"] = {"kind": "engine", "weights": "qwen2.5-coder-1.5b"}
    with pytest.raises(ConfigError, match=r"graph_model: an engine on weights of its own .*kind: openai"):
        parse_config(data)
    data["judge_model"] = {"kind": "engine", "weights": "qwen2.5-coder-1.5b"}  # the judge engine's weights: served
    assert parse_config(data).graph_model.weights == "qwen2.5-coder-1.5b"
