"""`memloop rescore`: a finished run on the scripted model judged again with another judge, into a
re-judging beside the run's own judgments; the run's files untouched, the report showing both, and an
interrupted rescore resumed with only what is missing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from memloop.jobs.errors import ConfigError, RescoreError
from memloop.jobs.results.report import headline, report_of
from memloop.jobs.run.config import JudgeModelSpec, JudgeSpec, parse_config
from memloop.jobs.run.driver import execute
from memloop.jobs.run.plan import make_plan
from memloop.jobs.run.rescore import rescore
from memloop.jobs.store.run_store import RunStore

from tests.jobs.scripted_endpoint import attribute_table_answer, scripted_endpoint

ROOT = Path(__file__).resolve().parents[2]
BOOK = ROOT / "jobs/configs/data/lighthouse-keeper.txt"
CHUNK_SIZES = (48, 64, 80, 96)  # four book datasets x two methods: eight book units


def endpoint_model(url: str, concurrency: int = 4) -> dict:
    return {"kind": "openai", "endpoint": {"base_url": url, "model": "scripted", "max_concurrency": concurrency}}


def _rescore_booookscore(run: str, judge_model: str) -> list[str]:
    """The command line of `memloop rescore RUN --judge booookscore --judge-model JUDGE_MODEL --json`, run by a
    fresh interpreter (so that a signal or an exit code reaches it as it would a user's)."""
    cli = [sys.executable, "-m", "memloop.jobs.commands.cli"]
    return [*cli, "rescore", run, "--judge", "booookscore", "--judge-model", judge_model, "--json"]


@pytest.fixture(scope="module")
def endpoint():
    with scripted_endpoint(attribute_table_answer) as (url, seen):
        yield url, seen


@pytest.fixture(scope="module")
def finished_run(ray_local, endpoint, tmp_path_factory) -> str:
    """A run judged by sumie-exact only: its book units carry no judgment until a rescore adds one."""
    url, _ = endpoint
    out = tmp_path_factory.mktemp("rescore") / "runs"
    cfg = parse_config(
        {
            "name": "rescore",
            "output": str(out),
            "model": endpoint_model(url),
            "judge_model": endpoint_model(url),
            "judge_cpus": 0.25,
            "flush_units": 1,
            "datasets": [{"task": "sumie", "synthetic": {"entities": 2, "seed": 0}, "options": {"max_chunks": 2}}]
            + [
                {"task": "book", "path": str(BOOK), "options": {"chunk_tokens": n, "max_chunks": 2}}
                for n in CHUNK_SIZES
            ],
            "methods": [
                {"name": "gu-json", "tasks": ["sumie"], "options": {"max_attempts": 1}},
                {"name": "inc-update", "options": {"word_limit": 50, "max_attempts": 1}},
                {"name": "hier-merge", "options": {"word_limit": 50, "max_attempts": 1}},
            ],
            "judges": [{"name": "sumie-exact"}],
        }
    )
    summary = execute(make_plan(cfg), log=lambda m: None)
    assert summary.failed == summary.method_failed == 0 and summary.computed == 2 + 2 * len(CHUNK_SIZES)
    return summary.output


def _run_files(uri: str) -> dict[str, bytes]:
    """Every file of the run but its re-judgings and the report (which `memloop report` rewrites)."""
    root = Path(uri)
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and "judgings" not in p.relative_to(root).parts and p.name != "report.md" and p.suffix != ".png"
    }


def test_rescore_adds_judgings_beside_the_runs_own_which_stay_byte_identical(finished_run, endpoint) -> None:
    url, seen = endpoint
    before = _run_files(finished_run)
    n = len(seen)
    book = rescore(finished_run, JudgeSpec(name="booookscore"), log=lambda m: None)
    assert (book.computed, book.failed, book.skipped) == (2 * len(CHUNK_SIZES), 0, 0)
    assert len(seen) > n  # the judge asked the judge model (the run's judge_model endpoint)
    same = rescore(finished_run, JudgeSpec(name="sumie-exact"), log=lambda m: None)
    assert (same.computed, same.failed) == (2, 0) and same.judging_id != book.judging_id
    assert _run_files(finished_run) == before  # the run's own tables, index and manifests: byte for byte

    rs = RunStore.at(finished_run)
    assert sorted(rs.judging_ids()) == sorted([book.judging_id, same.judging_id])
    own = rs.table("scores").to_pandas()
    assert own["judging_id"].isna().all() and set(own["judge"]) == {"sumie-exact"}
    js = rs.judging(book.judging_id)
    scores, judgments = js.table("scores").to_pandas(), js.table("judgments").to_pandas()
    assert set(scores["judging_id"]) == set(judgments["judging_id"]) == {book.judging_id}
    assert set(scores["judge"]) == {"booookscore"} and "booookscore" in set(scores["metric"])
    assert scores["unit"].nunique() == 2 * len(CHUNK_SIZES) and len(judgments) >= 2 * len(CHUNK_SIZES)
    # the stored outputs read back are what the run's judge scored: the same judge gives the same scores
    again = rs.judging(same.judging_id).table("scores").to_pandas()
    key = ["unit", "judge", "metric", "turn", "value"]
    assert again[key].sort_values(key[:4]).values.tolist() == own[key].sort_values(key[:4]).values.tolist()

    _, d, rep = report_of(finished_run)
    assert "## SUMIE: precision / recall / F1 per turn (seed 000, table 1) (the run's own judging)" in rep.markdown
    assert f"### Re-judging `{book.judging_id}`: judge booookscore, judged by endpoint 'scripted'" in rep.markdown
    assert f"### Re-judging `{same.judging_id}`: judge sumie-exact" in rep.markdown
    laid = {j["judging_id"]: j for j in headline(d)["judgings"]}
    assert laid[book.judging_id]["ok"] == 2 * len(CHUNK_SIZES)
    figs = {(f["method"], f["metric"]) for f in laid[book.judging_id]["figures"]}
    assert ("inc-update", "booookscore") in figs and ("hier-merge", "booookscore") in figs
    assert {f["judge"] for f in headline(d)["figures"] if f["judge"]} == {"sumie-exact"}  # the run's own, alone

    resumed = rescore(finished_run, JudgeSpec(name="booookscore"), log=lambda m: None)
    assert (resumed.judging_id, resumed.skipped, resumed.computed) == (book.judging_id, 2 * len(CHUNK_SIZES), 0)


def test_an_interrupted_rescore_resumes_with_only_the_missing_units(finished_run, tmp_path) -> None:
    with scripted_endpoint(attribute_table_answer, delay_s=0.8) as (slow, seen):
        judge_model = endpoint_model(slow, concurrency=1)
        jm = "{kind: openai, endpoint: {base_url: %s, model: scripted, max_concurrency: 1}}" % slow
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        earlier = set(RunStore.at(finished_run).judging_ids())
        proc = subprocess.Popen(
            _rescore_booookscore(finished_run, jm),
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            deadline = time.time() + 120
            while not [p for p in Path(finished_run).glob("judgings/*/judged/*.parquet") if p.parts[-3] not in earlier]:
                assert proc.poll() is None and time.time() < deadline, proc.communicate()
                time.sleep(0.1)
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 130, err
        rs = RunStore.at(finished_run)
        (jid,) = set(rs.judging_ids()) - earlier
        first = set(rs.judging(jid).samples().column("unit").to_pylist())
        assert 0 < len(first) < 2 * len(CHUNK_SIZES)
        asked = len(seen)
        summary = rescore(
            finished_run, JudgeSpec(name="booookscore"), JudgeModelSpec.model_validate(judge_model), log=lambda m: None
        )
        assert summary.judging_id == jid
        assert (summary.skipped, summary.computed, summary.failed) == (len(first), 2 * len(CHUNK_SIZES) - len(first), 0)
        assert len(seen) - asked == summary.computed  # one sentence per summary: one request per unit left
    js = rs.judging(jid)
    raw = js._read_all("judged").to_pandas()  # every committed row, not only the final ones
    assert raw["unit"].is_unique and len(raw) == 2 * len(CHUNK_SIZES)
    assert js.table("scores").to_pandas()["unit"].nunique() == 2 * len(CHUNK_SIZES)


def test_bad_rescores_fail_before_any_judging_with_what_to_do(finished_run, tmp_path) -> None:
    with pytest.raises(ConfigError, match="unknown judge 'bookscore'"):
        rescore(finished_run, JudgeSpec(name="bookscore"), log=lambda m: None)
    with pytest.raises(ConfigError, match="batch_size"):
        rescore(finished_run, JudgeSpec(name="booookscore-batched", options={"batch_size": "four"}), log=lambda m: None)
    with pytest.raises(RescoreError, match="applies to none of the run's tasks"):
        rescore(finished_run, JudgeSpec(name="loft-exec"), log=lambda m: None)
    from memloop.jobs.commands.rescore import parse_judge_model, parse_options

    assert parse_options(["batch_size=4", "on_invalid=record", "x=0.5"]) == {
        "batch_size": 4,
        "on_invalid": "record",
        "x": 0.5,
    }
    with pytest.raises(ConfigError, match="key=value"):
        parse_options(["batch_size"])
    with pytest.raises(ConfigError, match="--judge-model"):
        parse_judge_model("{kind: openai}")
    assert parse_judge_model("engine").kind == "engine"
    with pytest.raises(Exception, match="holds no run"):
        rescore(str(tmp_path / "nothing" / "run-x"), JudgeSpec(name="rouge"), log=lambda m: None)


def test_a_run_on_gcs_is_rejudged_in_place_and_resumed(finished_run, gcs_emulator) -> None:
    """The re-judging's shards, index, manifest and lock go through the GCS store's preconditions too."""
    from memloop.jobs.store.outputs import open_store

    rid = Path(finished_run).name
    store = open_store(f"{gcs_emulator}/rejudge")
    for p in sorted(Path(finished_run).rglob("*.parquet")):
        if "judgings" not in p.parts:
            store.put(f"{rid}/{p.relative_to(finished_run).as_posix()}", p.read_bytes())
    uri = f"{gcs_emulator}/rejudge/{rid}"
    first = rescore(uri, JudgeSpec(name="sumie-exact"), log=lambda m: None)
    assert (first.computed, first.failed) == (2, 0) and first.output.startswith("gs://")
    again = rescore(uri, JudgeSpec(name="sumie-exact"), log=lambda m: None)
    assert (again.skipped, again.computed) == (2, 0)
    rs = RunStore.at(uri)
    assert rs.judging_ids() == [first.judging_id]
    assert len(rs.judging(first.judging_id).table("scores")) == len(rs.table("scores"))
    assert not store.list(f"{rid}/judgings/{first.judging_id}/.lock")  # released


def test_a_judge_that_fails_during_rescore_is_recorded_with_its_cause_and_exits_3(finished_run) -> None:
    """A judge model that refuses every request (HTTP 400): each unit's failure is a `judged` row and a
    `judgments` row with the cause, and the CLI exits 3 in seconds (it used to wait forever)."""
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse

    from tests.http_server import serve_app

    refusing = FastAPI()

    @refusing.post("/v1/chat/completions")
    async def chat(body: dict):
        return JSONResponse({"error": {"message": "model 'nope' does not exist"}}, status_code=400)

    with serve_app(refusing) as url:
        jm = "{kind: openai, endpoint: {base_url: %s, model: nope, max_concurrency: 2}}" % url
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        res = subprocess.run(
            _rescore_booookscore(finished_run, jm),
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert res.returncode == 3, res.stderr[-2000:]
    import json

    summary = json.loads(res.stdout.strip().splitlines()[-1])
    assert summary["failed"] == 2 * len(CHUNK_SIZES) and summary["computed"] == 0, summary
    assert "answered 400" in summary["errors"][0]
    js = RunStore.at(finished_run).judging(summary["judging_id"])
    judged = js.samples().to_pandas()
    assert set(judged["status"]) == {"failed"} and len(judged) == 2 * len(CHUNK_SIZES)
    judgments = js.table("judgments").to_pandas()
    assert len(judgments) == 2 * len(CHUNK_SIZES) and (judgments["index"] == -1).all()
    assert judgments["error"].str.contains("answered 400").all()
    assert set(judgments["judging_id"]) == {summary["judging_id"]}
