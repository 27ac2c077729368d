"""`memloop export --format inspect`: a real run on the scripted model written as Inspect AI eval logs
and read back with inspect_ai's own reader and dataframe tools."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

inspect_log = pytest.importorskip(
    "inspect_ai.log", reason="inspect_ai (a test dependency: pip install 'memloop[inspect]') is not installed"
)

from memloop.jobs.commands.cli import app  # noqa: E402
from memloop.jobs.results.inspect_log import ExportError, export_inspect  # noqa: E402
from memloop.jobs.run.config import JudgeSpec, parse_config  # noqa: E402
from memloop.jobs.run.driver import execute  # noqa: E402
from memloop.jobs.run.plan import make_plan  # noqa: E402
from memloop.jobs.run.rescore import rescore  # noqa: E402
from memloop.jobs.store.run_store import RunStore  # noqa: E402

from tests.jobs.scripted_endpoint import attribute_table_answer, scripted_endpoint  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
BOOK = ROOT / "jobs/configs/data/lighthouse-keeper.txt"


@pytest.fixture(scope="module")
def judged_run(ray_local, tmp_path_factory) -> tuple[str, str]:
    """Two repeats of SUMIE and book units, judged by sumie-exact, the book units re-judged by booookscore."""
    with scripted_endpoint(attribute_table_answer) as (url, _):
        model = {"kind": "openai", "endpoint": {"base_url": url, "model": "scripted", "max_concurrency": 4}}
        cfg = parse_config(
            {
                "name": "inspect",
                "output": str(tmp_path_factory.mktemp("inspect") / "runs"),
                "model": model,
                "judge_model": model,
                "judge_cpus": 0.25,
                "repeats": 2,
                "seed": 5,
                "sampling": {"temperature": 0.0, "max_tokens": 300},
                "datasets": [
                    {"task": "sumie", "synthetic": {"entities": 2, "seed": 0}, "options": {"max_chunks": 2}},
                    {"task": "book", "path": str(BOOK), "options": {"chunk_tokens": 64, "max_chunks": 2}},
                ],
                "methods": [
                    {"name": "gu-json", "tasks": ["sumie"], "options": {"max_attempts": 1, "max_tokens": 200}},
                    {"name": "inc-update", "options": {"word_limit": 50, "max_attempts": 1}},
                ],
                "judges": [{"name": "sumie-exact"}],
            }
        )
        summary = execute(make_plan(cfg), log=lambda m: None)
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


def test_the_inspect_logs_read_back_with_inspects_reader_sample_epoch_event_and_score_counts(
    judged_run, tmp_path
) -> None:
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
            assert kinds.count("model") == len(st) and kinds.count("span_begin") == kinds.count("span_end") == len(
                chunks
            )
            assert kinds.count("store") == _memory_changes(st)
            judges = set(scores.loc[scores["unit"] == unit, "judge"])
            expected = judges | ({f"booookscore@{jid}"} if log.eval.task == "inc-update" else set())
            assert {k.split("/")[0] for k in s.scores or {}} == expected and kinds.count("score") == len(s.scores)
            assert all(isinstance(v.value, float) for v in s.scores.values())  # numbers, one per metric
            model = [e for e in s.events if e.event == "model"]
            assert [e.input[0].text for e in model] == st.sort_values("step")["prompt"].tolist()
            assert [e.output.completion for e in model] == st.sort_values("step")["output"].tolist()
            assert sum(e.output.usage.input_tokens for e in model) == u["prompt_tokens"]
        if log.eval.task == "gu-json":
            s = log.samples[0]
            assert {"sumie-exact/f1:last", "sumie-exact/f1:avg", "sumie-exact/f1:start"} <= set(s.scores)
            assert len(s.scores["sumie-exact/f1:avg"].metadata["per_turn"]) == 2  # two chunks: two turns
            assert {(x.scorer, x.name) for x in log.results.scores} >= {("sumie-exact", "sumie-exact/f1:avg")}
        else:  # the re-judging is in the log's results as in the samples' scores
            assert f"booookscore@{jid}/booookscore" in {x.name for x in log.results.scores}
    assert seen == set(samples["unit"])

    from inspect_ai.analysis import evals_df, samples_df

    assert len(evals_df(str(tmp_path / "logs"))) == 2 and len(samples_df(str(tmp_path / "logs"))) == 6


def test_export_inspect_without_inspect_ai_says_how_to_install_it(judged_run, monkeypatch, tmp_path) -> None:
    monkeypatch.setitem(sys.modules, "inspect_ai", None)  # what an environment without the package imports
    with pytest.raises(ExportError, match="pip install"):
        export_inspect(judged_run[0], str(tmp_path))
    res = CliRunner().invoke(app, ["export", judged_run[0], "--format", "html"])
    assert res.exit_code != 0 and "--format 'html'" in str(res.exception)


def test_the_inspect_export_is_faithful_input_target_output_times_config_and_numeric_scores(
    judged_run, tmp_path
) -> None:
    """Each field Inspect users read, checked against the run and its data: the sample's text as input
    (long text kept as attachments), the gold as target, the final answer as output, the unit's duration,
    the run's sampling as model_generate_config, and scores that samples_df reads as numbers."""
    from inspect_ai.analysis import samples_df
    from memloop.jobs.results.sample_data import gold_facts, load_sample_data

    uri, jid = judged_run
    export_inspect(uri, str(tmp_path))
    rs = RunStore.at(uri)
    samples = rs.table("samples").to_pandas()
    read = load_sample_data(rs)
    assert read.note is None and len(read.samples) == 3, read.note
    for name in (p.name for p in tmp_path.glob("*.eval")):
        log = inspect_log.read_eval_log(str(tmp_path / name), resolve_attachments=True)
        g = log.eval.model_generate_config  # the method's own max_tokens where it sets one (gu-json: 200)
        assert (g.temperature, g.max_tokens, g.seed) == (0.0, 200 if log.eval.task == "gu-json" else 300, 5)
        # a model name Inspect runs again: `inspect eval --model openai/scripted --model-base-url URL`
        assert log.eval.model == "openai/scripted" and log.eval.model_base_url.startswith("http://127.0.0.1:")
        assert log.status == "success" and log.error is None
        for s in log.samples:
            u = samples[samples["unit"] == s.metadata["unit"]].iloc[0]
            answer = json.loads(u["output_json"])["answer"]
            assert s.output.completion == (answer if isinstance(answer, str) else json.dumps(answer, sort_keys=True))
            assert s.output.completion  # the final answer, not empty
            assert s.scores and all(v.answer == s.output.completion for v in s.scores.values())  # what was scored
            # the events' real times: each model event when its step's call began, lasting what the call took,
            # inside the unit's attempt (they once all shared one time: a 60 s sample showed 0 s)
            model = [e for e in s.events if e.event == "model"]
            begun = [e.timestamp for e in model]
            assert len(set(begun)) == len(begun) > 1 and begun == sorted(begun)
            assert all(
                u["started_at"] <= pd.Timestamp(e.timestamp) <= pd.Timestamp(e.completed) <= u["finished_at"]
                for e in model
            )
            assert 0 < sum(e.working_time for e in model) <= s.total_time
            took = (u["finished_at"] - u["started_at"]).total_seconds()
            assert s.total_time == pytest.approx(took) and s.working_time == pytest.approx(took) and took > 0
            sample = read.get(u["dataset"], u["sample_id"])
            expected = "\n\n".join(sample.chunks) + (f"\n\nQuestion: {sample.query}" if sample.query else "")
            assert s.input == expected and len(s.input) > 200  # the text itself, not a description of it
            assert s.metadata["gold"] == sample.gold
            if u["task"] == "book":
                assert s.input.startswith("The Lighthouse at Carrow Point") and s.target == ""  # no reference summary
            else:
                assert s.target == gold_facts(sample.gold) and s.target  # the gold facts after the last turn read
                assert "Question: Summarize the information about" in s.input
    df = samples_df(str(tmp_path))
    cols = [c for c in df.columns if c.startswith("score_")]
    assert "score_sumie-exact/f1:avg" in cols and f"score_booookscore@{jid}/booookscore" in cols
    for c in cols:  # numbers (pandas' or pyarrow's float dtype), not JSON text
        assert pd.api.types.is_float_dtype(df[c].dtype), (c, df[c].dtype)
        assert df[c].notna().any()


def test_a_log_with_a_failed_sample_has_status_error(ray_local, tmp_path) -> None:
    """Every gu-json answer is cut at max_tokens (the method produced nothing: a failed unit): its log is `error`."""

    def cut(body: dict) -> tuple[str, str] | None:
        return ('{"pool": ["two lar', "length") if body.get("max_tokens") == 101 else None

    with scripted_endpoint(cut) as (url, _):
        model = {"kind": "openai", "endpoint": {"base_url": url, "model": "scripted", "max_concurrency": 4}}
        cfg = parse_config(
            {
                "name": "inspect-failed",
                "output": str(tmp_path / "runs"),
                "model": model,
                "retries": 0,
                "datasets": [{"task": "sumie", "synthetic": {"entities": 1, "seed": 5}, "options": {"max_chunks": 1}}],
                "methods": [{"name": "gu-json", "options": {"max_tokens": 101, "max_attempts": 1}}],
            }
        )
        summary = execute(make_plan(cfg), log=lambda m: None)
    assert summary.method_failed == 1
    export_inspect(summary.output, str(tmp_path / "logs"))
    (name,) = [p.name for p in (tmp_path / "logs").glob("*.eval")]
    log = inspect_log.read_eval_log(str(tmp_path / "logs" / name))
    assert log.status == "error" and "1 of 1 sample(s) failed" in log.error.message
    assert log.samples[0].error is not None and log.eval.model_generate_config.max_tokens == 101
