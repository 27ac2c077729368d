"""Units whose method produced nothing are results (counted 0 in the means), so a run of them exits 0; the last
stderr line names them and their share, the JSON line carries the share, and `--fail-on method` exits 3.

A scripted model on 127.0.0.1 cuts every gu-json answer at max_tokens (nothing parses: the method failed) and
answers gu-text's summaries: one of the two units is a method failure."""

from __future__ import annotations

import json

import pytest
import yaml
from memloop.jobs.commands.cli import app
from typer.testing import CliRunner

from tests.jobs.scripted_endpoint import scripted_endpoint

GU_JSON = 101
pytestmark = pytest.mark.timeout(600)


def respond(body: dict) -> tuple[str, str] | None:
    if body.get("max_tokens") == GU_JSON:
        return '{"pool": ["two large pools", "two lar', "length"
    return None


def test_method_failures_are_named_with_their_share_and_fail_on_method_exits_3(ray_local, tmp_path) -> None:
    with scripted_endpoint(respond) as (url, _):
        model = {"kind": "openai", "endpoint": {"base_url": url, "model": "scripted", "max_concurrency": 4}}
        cfg = {
            "name": "method-fail",
            "output": str(tmp_path / "runs"),
            "model": model,
            "retries": 0,
            "datasets": [{"task": "sumie", "synthetic": {"entities": 1, "seed": 5}, "options": {"max_chunks": 1}}],
            "methods": [
                {"name": "gu-json", "options": {"max_tokens": GU_JSON, "max_attempts": 1}},
                {"name": "gu-text", "options": {"max_attempts": 1}},
            ],
        }
        path = tmp_path / "cfg.yaml"
        path.write_text(yaml.safe_dump(cfg))
        res = CliRunner().invoke(app, ["run", str(path)])
        again = CliRunner().invoke(app, ["run", str(path), "--fail-on", "method"])  # resumes: retries the failed unit
        bad = CliRunner().invoke(app, ["run", str(path), "--fail-on", "judge"])
    assert res.exit_code == 0, res.output
    last = json.loads(res.stdout.strip().splitlines()[-1])
    assert (last["method_failed"], last["method_failed_share"], last["exit_code"]) == (1, 0.5, 0)
    final = res.stderr.strip().splitlines()[-1]
    assert "method failures: 1 of 2 unit(s) (50%" in final and "counted 0 in the means" in final, final
    assert again.exit_code == 3, again.output
    assert json.loads(again.stdout.strip().splitlines()[-1])["exit_code"] == 3
    assert "method failures: 1 of 1 unit(s) (100%" in again.stderr.strip().splitlines()[-1]
    assert bad.exit_code != 0 and "--fail-on 'judge'" in str(bad.exception or bad.output)
