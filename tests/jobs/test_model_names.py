"""Inspect-style model names on the command line, `-S` overrides, and the endpoint check before any unit.

The endpoint is a real OpenAI-compatible HTTP server on 127.0.0.1 that wants a key and serves one
model (`served-1`); the slow test runs the same command line against `memloop serve` and the engine.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi import FastAPI, Header, HTTPException
from memloop.jobs.commands.cli import app
from memloop.jobs.errors import ConfigError
from memloop.jobs.run.config import parse_config, with_overrides
from memloop.jobs.run.plan import run_id
from memloop.jobs.run.preflight import EndpointCheckError, check_endpoint
from typer.testing import CliRunner

import memloop
from tests.http_server import serve_app
from tests.jobs.small_config import small_config, write_config

ROOT = Path(__file__).resolve().parents[2]
BOOK = ROOT / "jobs/configs/data/lighthouse-keeper.txt"
KEY = "sk-test-key"
SEEN: list[dict] = []


def _app() -> FastAPI:
    app = FastAPI()

    def auth(authorization: str | None) -> None:
        if authorization != f"Bearer {KEY}":
            raise HTTPException(401, "invalid api key")

    @app.get("/v1/models")
    async def models(authorization: str | None = Header(None)):
        auth(authorization)
        return {"object": "list", "data": [{"id": "served-1", "object": "model"}]}

    @app.post("/v1/chat/completions")
    async def chat(body: dict, authorization: str | None = Header(None)):
        auth(authorization)
        SEEN.append(body)
        return {
            "choices": [
                {
                    "message": {"role": "assistant", "content": "The keeper tends the light alone."},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 100, "completion_tokens": 7},
        }

    @app.get("/forbidden/v1/models")
    async def forbidden():
        raise HTTPException(403, "not for you")

    return app


@pytest.fixture(scope="module")
def endpoint():
    with serve_app(_app()) as url:
        yield url


def _cfg(tmp_path: Path, **over) -> dict:
    datasets = [{"task": "book", "path": str(BOOK), "options": {"chunk_tokens": 256, "max_chunks": 1}}]
    methods = [{"name": "inc-update", "options": {"max_attempts": 1, "word_limit": 30}}]
    return small_config(tmp_path, "names", datasets, methods) | over


# --------------------------------------------------------------------------- names -> config sections


def test_provider_names_become_model_sections(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    cfg = parse_config(_cfg(tmp_path))
    m = with_overrides(cfg, model="openai/served-1").model
    assert (m.kind, m.endpoint.base_url, m.endpoint.model, m.endpoint.api_key_env) == (
        "openai",
        "http://127.0.0.1:9/v1",
        "served-1",
        None,
    )
    monkeypatch.setenv("OPENAI_API_KEY", KEY)  # a key in the environment is used by name, never copied
    m = with_overrides(cfg, model="vllm/Qwen/Qwen2.5-7B", model_base_url="http://127.0.0.1:8/v1").model
    assert (m.endpoint.base_url, m.endpoint.model, m.endpoint.api_key_env) == (
        "http://127.0.0.1:8/v1",
        "Qwen/Qwen2.5-7B",
        None,
    )
    assert with_overrides(cfg, model="openai/x").model.endpoint.api_key_env == "OPENAI_API_KEY"
    assert with_overrides(cfg, model="memloop/smollm2-135m").model.weights == "smollm2-135m"
    assert with_overrides(cfg, model="smollm2-135m").model.kind == "engine"  # a bare name: as before
    # an endpoint config keeps its transport settings under another endpoint model
    ep = parse_config(
        _cfg(
            tmp_path,
            model={"kind": "openai", "endpoint": {"base_url": "http://h/v1", "model": "a", "max_concurrency": 3}},
        )
    )
    assert with_overrides(ep, model="openai/b").model.endpoint.max_concurrency == 3
    assert with_overrides(ep, model="memloop/smollm2-135m").model.kind == "engine"
    jm = with_overrides(cfg, judge_model="sglang/judge-7b", judge_model_base_url="http://127.0.0.1:7").judge_model
    assert (jm.kind, jm.endpoint.base_url, jm.endpoint.model) == ("openai", "http://127.0.0.1:7", "judge-7b")
    assert with_overrides(cfg, judge_model="memloop/qwen2.5-coder-1.5b").judge_model.weights == "qwen2.5-coder-1.5b"
    # each endpoint model is its own run
    assert len({run_id(with_overrides(cfg, model=f"openai/{n}")) for n in ("a", "b")}) == 2


@pytest.mark.parametrize(
    "kwargs, expected",
    [
        ({"model": "vllm/m"}, "give --model-base-url http://HOST:PORT/v1 or set VLLM_BASE_URL"),
        ({"model": "openai/"}, "names no model after 'openai/'"),
        ({"model": "openai/m", "model_base_url": "ftp://host"}, "is not http(s)"),
        ({"model": "smollm2-135m", "model_base_url": "http://h/v1"}, "runs on memloop's engine"),
        ({"model_base_url": "http://h/v1"}, "goes with --model openai/NAME"),
        ({"model": "hf/nobody/no-such-model-here"}, "not in the local Hugging Face cache"),
    ],
)
def test_bad_model_names_get_one_line_errors(tmp_path, monkeypatch, kwargs, expected) -> None:
    for var in ("VLLM_BASE_URL", "OPENAI_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ConfigError) as info:
        with_overrides(parse_config(_cfg(tmp_path)), **kwargs)
    assert expected in str(info.value) and "\n" not in str(info.value)


def test_openai_without_a_url_needs_a_key(tmp_path, monkeypatch) -> None:
    for var in ("OPENAI_BASE_URL", "OPENAI_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(ConfigError, match="needs an API key: export OPENAI_API_KEY"):
        with_overrides(parse_config(_cfg(tmp_path)), model="openai/gpt-4o-mini")


# --------------------------------------------------------------------------- -S overrides


def test_settings_override_by_dotted_path_and_are_validated_like_the_file(tmp_path) -> None:
    cfg = parse_config(
        _cfg(
            tmp_path,
            methods=[{"name": "inc-update", "options": {"word_limit": 30}}, {"name": "hier-merge", "label": "hm"}],
            judges=[{"name": "rouge"}],
        )
    )
    out = with_overrides(
        cfg,
        settings=[
            "methods.inc-update.options.word_limit=20",
            "methods.*.options.max_attempts=2",
            "judges.rouge.options.lsum_reference=dataset",
            "sampling.top_p=0.5",
        ],
        temperature=0.25,
        max_tokens=40,
        seed=7,
    )
    assert out.methods[0].options == {"word_limit": 20, "max_attempts": 2}
    assert out.methods[1].options == {"max_attempts": 2}
    assert out.judges[0].options == {"lsum_reference": "dataset"}
    assert (out.sampling.temperature, out.sampling.max_tokens, out.sampling.top_p, out.seed) == (0.25, 40, 0.5, 7)
    assert out.overrides == [
        "sampling.temperature=0.25",
        "sampling.max_tokens=40",
        "seed=7",
        "methods.inc-update.options.word_limit=20",
        "methods.*.options.max_attempts=2",
        "judges.rouge.options.lsum_reference=dataset",
        "sampling.top_p=0.5",
    ]
    assert run_id(out) != run_id(cfg)  # what the overrides change is part of the run id
    assert run_id(with_overrides(cfg, temperature=0.25)) != run_id(with_overrides(cfg, temperature=0.5))
    for bad, expected in (
        ("sampling.temprature=1", "`sampling.temprature`: Extra inputs are not permitted"),
        ("sampling.temperature=-1", "`sampling.temperature`: temperature must be a number from 0"),
        ("methods.nope.options.x=1", "no element 'nope' in `methods`; name one by index (0..1)"),
        ("seed", "write a setting as dotted.path=value"),
    ):
        with pytest.raises(ConfigError) as info:
            with_overrides(cfg, settings=[bad])
        assert expected in str(info.value) and "\n" not in str(info.value), str(info.value)


def test_cli_and_api_overrides_are_the_same_run(tmp_path) -> None:
    path = write_config(tmp_path, _cfg(tmp_path))
    res = CliRunner().invoke(
        app,
        [
            "run",
            str(path),
            "--dry-run",
            "--json",
            "-S",
            "methods.0.options.word_limit=25",
            "--temperature",
            "0.5",
            "--seed",
            "3",
        ],
    )
    assert res.exit_code == 0, res.output
    api = memloop.plan(str(path), overrides={"methods.0.options.word_limit": 25}, temperature=0.5, seed=3)
    assert json.loads(res.stdout)["run_id"] == api.run_id != memloop.plan(str(path)).run_id
    res = CliRunner().invoke(app, ["run", str(path), "--dry-run", "-S", "methods.0.options.no_such_setting=1"])
    assert res.exit_code != 0 and "no_such_setting" in str(res.exception)


# --------------------------------------------------------------------------- against a real endpoint


def test_a_run_from_the_command_line_model_on_an_endpoint(ray_local, tmp_path, endpoint, monkeypatch) -> None:
    """`--model openai/NAME` with OPENAI_BASE_URL and OPENAI_API_KEY, overrides on the command line: the
    endpoint gets the key, the model name and the sampling; the manifest records the overrides."""
    monkeypatch.setenv("OPENAI_BASE_URL", endpoint + "/v1")
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    SEEN.clear()
    res = CliRunner().invoke(
        app,
        [
            "run",
            str(write_config(tmp_path, _cfg(tmp_path))),
            "--model",
            "openai/served-1",
            "--temperature",
            "0.5",
            "--max-tokens",
            "33",
            "-S",
            "seed=11",
        ],
    )
    assert res.exit_code == 0, res.output
    last = json.loads(res.stdout.strip().splitlines()[-1])
    assert (last["computed"], last["failed"]) == (1, 0)
    assert SEEN and all(b["model"] == "served-1" and b["max_tokens"] == 33 and b["temperature"] == 0.5 for b in SEEN)
    runs = memloop.load(last["output"]).runs
    config = json.loads(runs.iloc[0]["config_json"])
    assert config["model"]["endpoint"] == dict(
        config["model"]["endpoint"], base_url=endpoint + "/v1", model="served-1", api_key_env="OPENAI_API_KEY"
    )
    assert config["overrides"] == [
        "model=openai/served-1",
        "sampling.temperature=0.5",
        "sampling.max_tokens=33",
        "seed=11",
    ]
    assert KEY not in runs.iloc[0]["config_json"]  # the key's variable is recorded, never the key


def test_the_shipped_endpoint_config_runs_on_an_endpoint(ray_local, tmp_path, endpoint, monkeypatch) -> None:
    """jobs/configs/endpoint.yaml, pointed at this server from the command line (its judge left out: the
    scripted answers are no judge verdicts)."""
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.chdir(ROOT)  # the config's data path is relative to the repository root
    SEEN.clear()
    res = CliRunner().invoke(
        app,
        [
            "run",
            "jobs/configs/endpoint.yaml",
            "--output",
            str(tmp_path / "runs"),
            "--model",
            "openai/served-1",
            "--model-base-url",
            endpoint + "/v1",
            "--max-chunks",
            "1",
            "-S",
            "judges=[]",
        ],
    )
    assert res.exit_code == 0, res.output
    last = json.loads(res.stdout.strip().splitlines()[-1])
    assert (last["computed"], last["failed"]) == (2, 0) and {b["model"] for b in SEEN} == {"served-1"}


@pytest.mark.parametrize(
    "args, env, expected",
    [
        (
            ["--model", "openai/served-1"],
            {"OPENAI_API_KEY": "wrong"},
            "HTTP 401 from GET {url}/v1/models; the API key was refused: check the key in OPENAI_API_KEY",
        ),
        (
            ["--model", "openai/served-2"],
            {"OPENAI_API_KEY": KEY},
            "does not serve model 'served-2'; it serves 'served-1'",
        ),
        (
            ["--model", "openai/served-1", "--model-base-url", "{url}/nothing-here"],
            {"OPENAI_API_KEY": KEY},
            "HTTP 404 from GET {url}/nothing-here/v1/models; no OpenAI-compatible API at this URL",
        ),
        (["--model", "openai/served-1", "--model-base-url", "{url}/forbidden"], {"OPENAI_API_KEY": KEY}, "HTTP 403"),
    ],
)
def test_an_endpoint_that_refuses_stops_the_run_in_one_line(
    tmp_path, endpoint, monkeypatch, args, env, expected
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", endpoint + "/v1")
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    SEEN.clear()
    res = CliRunner().invoke(
        app, ["run", str(write_config(tmp_path, _cfg(tmp_path)))] + [a.format(url=endpoint) for a in args]
    )
    assert res.exit_code != 0 and isinstance(res.exception, EndpointCheckError), res.output
    text = str(res.exception)
    assert expected.format(url=endpoint) in text and "`model.endpoint`" in text and "\n" not in text, text
    assert not SEEN  # no unit ran
    assert not (tmp_path / "runs").exists() or not list((tmp_path / "runs").rglob("*.parquet"))


def test_the_judge_endpoint_is_checked_and_a_silent_one_is_a_warning(tmp_path, endpoint, monkeypatch) -> None:
    from memloop.jobs.run.config import EndpointSpec
    from memloop.jobs.run.preflight import run_endpoints

    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    cfg = with_overrides(
        parse_config(_cfg(tmp_path, judges=[{"name": "booookscore-batched"}])),
        judge_model="openai/served-1",
        judge_model_base_url=endpoint,
    )
    assert [w for w, _ in run_endpoints(cfg)] == ["judge_model.endpoint"]
    check_endpoint("judge_model.endpoint", cfg.judge_model.endpoint)  # answers, lists the model: passes
    assert run_endpoints(with_overrides(cfg, settings=["judges=[]"])) == []  # no LLM judge: nothing to check
    silent = check_endpoint("model.endpoint", EndpointSpec(base_url="http://127.0.0.1:1/v1", model="m"))
    assert silent and "does not answer" in silent and "will retry" in silent


@pytest.mark.slow
def test_the_command_line_model_on_memloop_serve_and_on_the_engine(ray_local, tmp_path, monkeypatch) -> None:
    """The same command line, `--model openai/NAME --model-base-url` against `memloop serve` (SmolLM2) and
    `--model memloop/smollm2-135m` on the run's own engine: the same overrides reach both, and greedy
    decoding gives the same steps."""
    from tests.jobs.test_driver import memloop_serve

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    path = write_config(
        tmp_path, _cfg(tmp_path, methods=[{"name": "inc-update", "options": {"max_attempts": 1, "word_limit": 30}}])
    )
    flags = ["--max-tokens", "24", "--temperature", "0", "-S", "methods.0.options.word_limit=20"]
    steps = {}
    with memloop_serve() as (url, name):
        for kind, model in (
            ("endpoint", ["--model", f"openai/{name}", "--model-base-url", url + "/v1"]),
            ("engine", ["--model", "memloop/smollm2-135m"]),
        ):
            res = CliRunner().invoke(app, ["run", str(path), "--output", str(tmp_path / kind)] + model + flags)
            assert res.exit_code == 0, res.output
            last = json.loads(res.stdout.strip().splitlines()[-1])
            run = memloop.load(last["output"])
            assert json.loads(run.runs.iloc[0]["config_json"])["sampling"]["max_tokens"] == 24
            steps[kind] = list(run.steps.sort_values("step")["output"])
    assert steps["endpoint"] == steps["engine"] and steps["engine"]
