"""Step outcomes through a real `memloop run`: a scripted model on 127.0.0.1 forces each outcome, and the
steps table, the samples table, the method-health table, the cell markers and `report --json` say so."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml
from memloop.eval.asking import retry_seed
from memloop.jobs.commands.cli import app
from typer.testing import CliRunner

import memloop
from tests.jobs.scripted_endpoint import SENTENCE, scripted_endpoint

BOOK = Path(__file__).resolve().parents[2] / "jobs/configs/data/lighthouse-keeper.txt"
# each method gets its own max_tokens, so the scripted model knows whose request it answers
GU_JSON, GU_TEXT, COK, FART = 101, 102, 103, 104
BAD_REVISION = {"thoughts_for_update": [], "thoughts_for_add": [], "revisions": [{"path": "$.pool", "op": "update"}]}


def respond(body: dict) -> tuple[str, str] | None:
    n = body.get("max_tokens")
    schema = json.dumps((body.get("response_format") or {}).get("json_schema", {}))
    if n == GU_JSON:  # every answer runs into max_tokens inside the JSON: nothing parses
        return '{"pool": ["two large pools", "two large pools", "two lar', "length"
    if n == GU_TEXT:  # the first attempt is empty (invalid); a retry, with its own seed, answers
        return ("", "stop") if body.get("seed") == 0 else (SENTENCE, "stop")
    if n == COK:  # structured summaries parse; the one revision proposed is at a path the memory lacks: rejected
        prompt = "".join(str(m.get("content") or "") for m in body.get("messages") or [])
        if prompt.rstrip().endswith("[THOUGHTS FOR UPDATE]"):  # CoK's sectioned answer (figure 5)
            return (
                "1. The pool is new.\n\n[UPDATED_OBJECTS]\n"
                + json.dumps({"$. 'nobody'[3]": {"update": "x"}})
                + "\n\n[THOUGHTS FOR ADD]\n1. Nothing to add.\n\n[ADDED_OBJECTS]\n{}\n"
            ), "stop"
        if "thoughts_for_update" in schema:
            return json.dumps(BAD_REVISION), "stop"
        return json.dumps({"pool": ["two large pools"]}), "stop"
    if n == FART:  # reads of a key never written until the tool calls run out; then the harness asks for [ans]
        prompt = str(body.get("prompt", ""))
        return ("The keeper tends the light.", "stop") if prompt.endswith("[ans]") else ("[read] (logbook)", "stop")
    return None  # the judge: the endpoint's default answers


@pytest.fixture(scope="module")
def run(ray_local, tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("outcomes")
    with scripted_endpoint(respond) as (url, seen):
        model = {"kind": "openai", "endpoint": {"base_url": url, "model": "scripted", "max_concurrency": 4}}
        sumie_only = ["sumie"]
        cfg = {
            "name": "outcomes",
            "output": str(tmp / "runs"),
            "model": model,
            "judge_model": model,
            "paper_tables": ["seed000-table1"],
            "datasets": [
                {"task": "sumie", "synthetic": {"entities": 1, "seed": 5}, "options": {"max_chunks": 2}},
                {"task": "book", "path": str(BOOK), "options": {"chunk_tokens": 256, "max_chunks": 2}},
            ],
            "methods": [
                {"name": "gu-json", "tasks": sumie_only, "options": {"max_tokens": GU_JSON, "max_attempts": 1}},
                {"name": "gu-text", "tasks": sumie_only, "options": {"max_tokens": GU_TEXT, "max_attempts": 2}},
                {"name": "cok", "tasks": sumie_only, "options": {"max_tokens": COK, "max_attempts": 1}},
                {"name": "fart-base", "options": {"max_tokens": FART, "max_attempts": 1, "max_tool_calls": 2}},
            ],
            "judges": [{"name": "sumie"}],
            "judge_cpus": 0.25,
            "retries": 0,
        }
        path = tmp / "cfg.yaml"
        path.write_text(yaml.safe_dump(cfg))
        res = CliRunner().invoke(app, ["run", str(path), "--json"])
        summary = json.loads(res.stdout)
        report = CliRunner().invoke(app, ["report", summary["output"], "--json"])
        markdown = CliRunner().invoke(app, ["report", summary["output"]])
        return {
            "exit_code": res.exit_code,
            "summary": summary,
            "tables": memloop.load(summary["output"]),
            "report": json.loads(report.stdout),
            "markdown": markdown.stdout,
            "seen": list(seen),
        }


def _steps(run: dict, method: str):
    st = run["tables"].steps
    return st[st["method"] == method].sort_values(["dataset", "sample_id", "step"])


def test_a_unit_none_of_whose_steps_produced_anything_is_failed_with_the_step_outcome(run) -> None:
    # a result of the method (scored as such), not a failure of the run: counted apart, exit code 0
    assert run["exit_code"] == 0 and run["summary"]["failed"] == 0
    assert run["summary"]["method_failed"] == 1 and "no step produced anything" in run["summary"]["method_errors"][0]
    samples = run["tables"].samples.set_index("method")
    assert samples.loc["gu-json", "status"] == "failed"
    error = samples.loc["gu-json", "error"]
    assert "2 cut_at_max_tokens" in error and "output hit max_tokens" in error
    assert (samples.drop(index="gu-json")["status"] == "ok").all()
    assert list(_steps(run, "gu-json")["outcome"]) == ["cut_at_max_tokens", "cut_at_max_tokens"]
    # nothing to judge: a failed unit gets no judgment
    assert "gu-json" not in set(run["tables"].scores["method"])


def test_each_forced_outcome_is_a_column_of_the_steps_table(run) -> None:
    cok = _steps(run, "cok")
    assert list(cok["outcome"]) == ["ok", "ok", "rejected"]
    revise = cok.iloc[-1]
    assert (revise["revisions_proposed"], revise["revisions_accepted"], revise["revisions_rejected"]) == (1, 0, 1)
    fart = _steps(run, "fart-base")
    assert list(fart["outcome"]) == ["tool_error", "tool_call_cap", "tool_error", "tool_call_cap", "forced_by_harness"]
    assert "[read] of missing key 'logbook'" in fart.iloc[0]["error"]
    assert "safety bound of 2 tool calls" in fart.iloc[1]["error"] and "requested directly" in fart.iloc[-1]["error"]
    assert pd.isna(cok.iloc[0]["error"]) and "revision rejected" in revise["error"]


def test_a_retry_has_its_own_seed_and_its_tokens_are_counted_apart(run) -> None:
    gu = _steps(run, "gu-text")
    assert list(gu["outcome"]) == ["ok", "ok"] and list(gu["attempts"]) == [2, 2]
    seeds = [b.get("seed") for b in run["seen"] if b.get("max_tokens") == GU_TEXT]
    assert sorted(set(seeds), key=str) == sorted({0, retry_seed(0, 1)}, key=str)
    # the kept attempt's tokens in the token columns, the rejected one's (same prompt, empty answer) apart
    assert (gu["retry_prompt_tokens"] == gu["prompt_tokens"]).all() and (gu["retry_decoded_tokens"] == 0).all()
    sample = run["tables"].samples.set_index("method").loc["gu-text"]
    assert sample["prompt_tokens"] == gu["prompt_tokens"].sum()  # tables count the kept calls
    health = {r["method"]: r for r in run["report"]["health"]}
    assert health["gu-text"]["retried_steps"] == 2
    assert health["gu-text"]["retry_prompt_tokens"] == int(gu["retry_prompt_tokens"].sum())
    assert health["gu-text"]["retry_overhead_prompt"] == pytest.approx(1.0)


def test_the_health_table_and_the_cell_markers_show_the_partly_failing_run(run) -> None:
    report = run["report"]
    health = {r["method"]: r for r in report["health"]}
    assert health["gu-json"]["outcomes"] == {"cut_at_max_tokens": 2} and health["gu-json"]["failed_units"] == 1
    assert health["cok"]["outcomes"] == {"ok": 2, "rejected": 1}
    assert health["cok"]["steps_not_ok_share"] == pytest.approx(1 / 3)
    assert health["cok"]["units_with_failed_step"] == 1 and health["cok"]["revisions_rejected"] == 1
    assert health["gu-text"]["steps_not_ok_share"] == 0
    assert health["fart-base"]["steps_not_ok"] == 5
    # every figure of a method whose steps mostly did not succeed carries the share; the others do not
    cok_figures = [f for f in report["figures"] if f["method"] == "cok"]
    assert cok_figures and all(f["flagged"] and f["steps_not_ok"] == pytest.approx(1 / 3) for f in cok_figures)
    assert not any(f["flagged"] for f in report["figures"] if f["method"] == "gu-text")
    table = {r["label"]: r["cells"] for r in report["paper_tables"][0]["rows"]}
    assert table["CoK json last"]["F1"]["text"].endswith("⚠ 33% steps not ok")
    assert table["CoK json last"]["F1"]["steps_not_ok"] == pytest.approx(1 / 3)
    assert "⚠" not in table["GU text last"]["F1"]["text"]
    # the method produced nothing: its unit scores 0 by the rule for means, counted and marked
    gu = table["GU json last"]["F1"]["text"]
    assert gu.startswith("0.0") and "1 failed = 0" in gu and gu.endswith("⚠ 100% steps not ok")
    md = run["markdown"]
    assert "## Method health: step outcomes and retries" in md
    assert "| cok | sumie:synthetic | 3 | 2 |" in md and "cok ⚠ 33% steps not ok" in md
