"""Who failed: an endpoint that refuses a request (401) fails the infrastructure, not the method.

A real config through `memloop run` against a scripted model on 127.0.0.1 that answers 401 for one
of two samples: that unit is incomplete (its cells say so, never 0), the run exits 3 even with
`--max-failed-frac 1`, and the endpoint's cause is named. A `base_url` that is not http(s) fails
when the config is read.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from fastapi import FastAPI
from fastapi.responses import JSONResponse
from memloop.jobs.commands.cli import app
from memloop.jobs.errors import ConfigError
from memloop.jobs.results.report import build_report, headline
from memloop.jobs.results.run_data import RunData
from memloop.jobs.run.config import parse_config
from memloop.jobs.store.run_store import RunStore
from typer.testing import CliRunner

from tests.http_server import serve_app

SENTENCE = "The study measures lighthouse lamps."


def _refusing_app() -> FastAPI:
    """Answers every chat request, except those about the harbour sample: 401 (a key this host lacks). It
    lists its model, so the run's endpoint check (jobs/run/preflight.py) lets the run start."""
    api = FastAPI()

    @api.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": "m", "object": "model"}]}

    @api.post("/v1/chat/completions")
    async def chat(body: dict):
        prompt = " ".join(str(m.get("content", "")) for m in body.get("messages", []))
        if "harbour" in prompt:
            return JSONResponse({"error": {"message": "Incorrect API key provided"}}, status_code=401)
        return {
            "choices": [{"message": {"role": "assistant", "content": SENTENCE}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": len(prompt.split()), "completion_tokens": 5},
        }

    return api


def _articles(tmp_path: Path) -> Path:
    path = tmp_path / "arxiv.jsonl"
    rows = [
        {
            "article": "\n".join(f"Sentence {i} of the study reports a result about {topic}." for i in range(12)),
            "abstract": f"The study measures {topic}.",
        }
        for topic in ("lighthouse lamps", "the harbour")
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_an_endpoints_401_leaves_the_unit_incomplete_and_the_run_exits_3(ray_local, tmp_path) -> None:
    with serve_app(_refusing_app()) as url:
        cfg = {
            "name": "refused",
            "output": str(tmp_path / "runs"),
            "retries": 0,
            "judge_cpus": 0.25,
            "datasets": [{"task": "arxiv", "path": str(_articles(tmp_path)), "limit": 2}],
            "methods": [{"name": "no-kg"}],
            "judges": [{"name": "rouge"}],
            "model": {"kind": "openai", "endpoint": {"base_url": url, "model": "m", "max_retries": 0}},
        }
        path = tmp_path / "cfg.yaml"
        path.write_text(yaml.safe_dump(cfg))
        res = CliRunner().invoke(app, ["run", str(path), "--max-failed-frac", "1"])
    assert res.exit_code == 3, res.output
    last = json.loads(res.stdout.strip().splitlines()[-1])
    assert (last["computed"], last["failed"], last["incomplete"]) == (1, 1, 1)
    assert "answered 401" in last["errors"][0] and "Incorrect API key" in last["errors"][0]
    assert "answered 401" in res.stderr
    rs = RunStore.at(last["output"])
    manifest = rs.table("runs").to_pandas()  # the cause is kept with the invocation (RunStore.at names it)
    assert any("answered 401" in e for e in json.loads(manifest["stats_json"].iloc[-1])["first_errors"])
    samples = rs.table("samples").to_pandas()
    assert sorted(zip(samples["status"], samples["failure"].fillna(""))) == [("failed", "infrastructure"), ("ok", "")]
    figs = {(f["judge"], f["metric"]): f for f in headline(RunData.load(rs))["figures"]}
    rouge = figs[("rouge", "rouge1")]
    # the refused unit is unknown, not the method's zero: the cell says incomplete and counts no zero
    assert rouge["judged"] == 1 and rouge["incomplete_units"] == 1 and not rouge["zeroed"]
    row = next(
        line
        for line in build_report(RunData.load(rs)).markdown.splitlines()
        if line.startswith("| no-kg | arxiv") and "incomplete" in line
    )
    assert "incomplete: 1 unknown" in row and "failed = 0" not in row
    # and the units table reads it the same way: one ok, none failed, one incomplete (it once said "failed")
    md = build_report(RunData.load(rs)).markdown
    assert "| method | dataset | ok | failed | incomplete | repeats | first error |" in md
    units = next(line for line in md.split("## Units")[1].splitlines() if line.startswith("| no-kg | arxiv"))
    assert units.startswith("| no-kg | arxiv:arxiv | 1 | 0 | 1 | 1 | LLMHTTPError"), units


@pytest.mark.parametrize("url", ["ftp://127.0.0.1/v1", "127.0.0.1:8000/v1", "file:///tmp/x", "http://"])
def test_a_base_url_that_is_not_http_fails_when_the_config_is_read(tmp_path, url) -> None:
    cfg = {
        "name": "x",
        "output": str(tmp_path / "runs"),
        "datasets": [{"task": "arxiv", "path": "a.jsonl"}],
        "methods": [{"name": "no-kg"}],
        "model": {"kind": "openai", "endpoint": {"base_url": url, "model": "m"}},
    }
    with pytest.raises(ConfigError, match=r"base_url must be an http:// or https:// URL"):
        parse_config(cfg)
