"""`memloop export --format inspect`: a real run on the scripted model written as Inspect AI eval logs
and read back with inspect_ai's own reader and dataframe tools."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

inspect_log = pytest.importorskip("inspect_ai.log", reason="inspect_ai (a test dependency: pip install 'memloop[inspect]') "
                                                            "is not installed")

from jobs.commands.cli import app  # noqa: E402
from jobs.results.inspect_log import ExportError, export_inspect  # noqa: E402
from jobs.run.config import JudgeSpec, parse_config  # noqa: E402
from jobs.run.driver import execute  # noqa: E402
from jobs.run.rescore import rescore  # noqa: E402
from jobs.store.storage import RunStore  # noqa: E402
from tests.jobs.scripted_endpoint import attribute_table_answer, scripted_endpoint  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
BOOK = ROOT / "jobs/configs/data/lighthouse-keeper.txt"


@pytest.fixture(scope="module")
def judged_run(ray_local, tmp_path_factory) -> tuple[str, str]:
    """Two repeats of SUMIE and book units, judged by sumie-exact, the book units re-judged by booookscore."""
    with scripted_endpoint(attribute_table_answer) as (url, _):
        model = {"kind": "openai", "endpoint": {"base_url": url, "model": "scripted", "max_concurrency": 4}}
        cfg = parse_config({
            "name": "inspect", "output": str(tmp_path_factory.mktemp("inspect") / "runs"), "model": model,
            "judge_model": model, "judge_cpus": 0.25, "repeats": 2,
            "datasets": [{"task": "sumie", "synthetic": {"entities": 2, "seed": 0}, "options": {"max_chunks": 2}},
                         {"task": "book", "path": str(BOOK), "options": {"chunk_tokens": 64, "max_chunks": 2}}],
            "methods": [{"name": "gu-json", "tasks": ["sumie"], "options": {"max_attempts": 1}},
                        {"name": "inc-update", "options": {"word_limit": 50, "max_attempts": 1}}],
            "judges": [{"name": "sumie-exact"}]})
        summary = execute(cfg, log=lambda m: None)
        assert summary.failed == summary.method_failed == 0 and summary.computed == 6
        again = rescore(summary.output, JudgeSpec(name="booookscore"), log=lambda m: None)
        assert again.computed == 2
    return summary.output, again.judging_id


def _memory_changes(steps) -> int:
    before, n = None, 0
    for m in steps.sort_values("step")["memory_json"]:
        after = json.loads(m)
        n += after != before
        before = after
    return n


def test_the_inspect_logs_read_back_with_inspects_reader_sample_epoch_event_and_score_counts(judged_run, tmp_path) -> None:
    uri, jid = judged_run
    res = CliRunner().invoke(app, ["export", uri, "--format", "inspect", "--to", str(tmp_path / "logs")])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["samples"] == 6 and len(out["logs"]) == 2  # one log per (dataset, method)

    rs = RunStore.at(uri)
    samples, steps = rs.table("samples").to_pandas(), rs.table("steps").to_pandas()
    scores = rs.table("scores").to_pandas()
    seen = set()
    for name in out["logs"]:
        log = inspect_log.read_eval_log(str(tmp_path / "logs" / name))
        units = samples[(samples["method"] == log.eval.task) & (samples["dataset"] == log.eval.dataset.name)]
        assert log.status == "success" and log.eval.run_id == rs.run_id and log.eval.config.epochs == 2
        assert len(log.samples) == len(units) and {s.epoch for s in log.samples} == {1, 2}
        for s in log.samples:
            s = inspect_log.resolve_sample_attachments(s)  # inspect's writer keeps long prompts as attachments
            unit = s.metadata["unit"]
            seen.add(unit)
            u = units[units["unit"] == unit].iloc[0]
            assert (str(u["sample_id"]), int(u["repeat"]) + 1) == (s.id, s.epoch)
            st = steps[steps["unit"] == unit]
            kinds = [e.event for e in s.events]
            chunks = {json.loads(x)["chunk_index"] for x in st["extra_json"]}
            assert kinds.count("model") == len(st) and kinds.count("span_begin") == kinds.count("span_end") == len(chunks)
            assert kinds.count("store") == _memory_changes(st)
            judges = set(scores.loc[scores["unit"] == unit, "judge"])
            expected = judges | ({f"booookscore@{jid}"} if log.eval.task == "inc-update" else set())
            assert set(s.scores or {}) == expected and kinds.count("score") == len(expected)
            model = [e for e in s.events if e.event == "model"]
            assert [e.input[0].text for e in model] == st.sort_values("step")["prompt"].tolist()
            assert [e.output.completion for e in model] == st.sort_values("step")["output"].tolist()
            assert sum(e.output.usage.input_tokens for e in model) == u["prompt_tokens"]
        if log.eval.task == "gu-json":
            s = log.samples[0]
            assert {"f1:last", "f1:avg", "f1:start"} <= set(s.scores["sumie-exact"].value)
            assert len(s.scores["sumie-exact"].metadata["per_turn"]["f1"]) == 2  # two chunks: two turns
            assert {(x.scorer, x.name) for x in log.results.scores} >= {("sumie-exact", "f1:avg")}
    assert seen == set(samples["unit"])

    from inspect_ai.analysis import evals_df, samples_df

    assert len(evals_df(str(tmp_path / "logs"))) == 2 and len(samples_df(str(tmp_path / "logs"))) == 6


def test_export_inspect_without_inspect_ai_says_how_to_install_it(judged_run, monkeypatch, tmp_path) -> None:
    monkeypatch.setitem(sys.modules, "inspect_ai", None)  # what an environment without the package imports
    with pytest.raises(ExportError, match="pip install"):
        export_inspect(judged_run[0], str(tmp_path))
    res = CliRunner().invoke(app, ["export", judged_run[0], "--format", "html"])
    assert res.exit_code != 0 and "--format 'html'" in str(res.exception)
