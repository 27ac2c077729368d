"""Rough edges of the command line a new user meets: the endpoint check of a dry run, a refused check that
leaves nothing behind, and `rescore --judge-model-base-url` as `run` takes it.

The endpoint is a real HTTP server on 127.0.0.1 that refuses every request with 401 (a key it does not accept).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from fastapi import FastAPI
from fastapi.responses import JSONResponse
from memloop.jobs.commands.rescore import parse_judge_model
from memloop.jobs.errors import ConfigError

from tests.http_server import serve_app
from tests.jobs.cli_entry import memloop_cli

pytestmark = pytest.mark.timeout(300)


def _refusing_app() -> FastAPI:
    api = FastAPI()

    @api.get("/v1/models")
    async def models():
        return JSONResponse({"error": {"message": "Incorrect API key provided"}}, status_code=401)

    return api


def _config(tmp_path: Path, url: str) -> Path:
    data = tmp_path / "arxiv.jsonl"
    data.write_text(
        json.dumps({"article": "One sentence of the study.\nAnother sentence.", "abstract": "The study."}) + "\n"
    )
    cfg = {
        "name": "refused",
        "output": str(tmp_path / "runs"),
        "datasets": [{"task": "arxiv", "path": str(data)}],
        "methods": [{"name": "no-kg"}],
        "judges": [{"name": "rouge"}],
        "model": {"kind": "openai", "endpoint": {"base_url": url, "model": "m"}},
    }
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_a_dry_run_checks_the_endpoint(tmp_path, capsys, monkeypatch) -> None:
    with serve_app(_refusing_app()) as url:
        code, out, err = memloop_cli(["run", str(_config(tmp_path, url)), "--dry-run"], capsys, monkeypatch)
    assert code == 2, (out, err)
    assert "EndpointCheckError" in err and "HTTP 401" in err and "API key" in err
    assert "dry run: nothing started" not in out


def test_a_refused_endpoint_check_prints_no_run_id_and_leaves_no_run_folder(tmp_path, capsys, monkeypatch) -> None:
    with serve_app(_refusing_app()) as url:
        code, out, err = memloop_cli(["run", str(_config(tmp_path, url))], capsys, monkeypatch)
    assert code == 2 and "HTTP 401" in err, (out, err)
    assert "run id" not in out and "output:" not in out, out
    runs = tmp_path / "runs"
    assert not runs.exists() or not any(runs.iterdir()), list(runs.iterdir())


def test_rescore_takes_the_judge_endpoints_base_url(tmp_path, capsys, monkeypatch) -> None:
    url = "http://127.0.0.1:9/v1"
    spec = parse_judge_model("openai/judge-m", url)
    assert (spec.kind, spec.endpoint.base_url, spec.endpoint.model) == ("openai", url, "judge-m")
    with pytest.raises(ConfigError, match="endpoint judge"):
        parse_judge_model("engine", url)
    # through the command line: the option is known and reaches the run lookup (no run at this URI)
    code, out, err = memloop_cli(
        [
            "rescore",
            str(tmp_path / "runs" / "none"),
            "--judge",
            "sumie",
            "--judge-model",
            "openai/judge-m",
            "--judge-model-base-url",
            url,
        ],
        capsys,
        monkeypatch,
    )
    assert code == 2 and "No such option" not in err and "holds no run" in err, err
