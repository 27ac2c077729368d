"""`inspect eval` (Inspect AI's own command, in its own process) against the real server on 127.0.0.1, on
a two-sample task the test writes: `--model openai/NAME` (the Responses API, `/v1/responses`, also
streamed) and `--model openai-api/memloop/NAME` (chat completions). Each run ends with a scored
result, and the requested `--max-tokens` is what the server honoured."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(600)

TASK = """
from inspect_ai import Task, task
from inspect_ai.dataset import Sample
from inspect_ai.scorer import includes
from inspect_ai.solver import generate


@task
def words():
    return Task(dataset=[Sample(input="What is the capital of France? Answer in one word.", target="Paris"),
                         Sample(input="Repeat the word blue.", target="blue")],
                solver=[generate()], scorer=includes())
"""
MAX_TOKENS = 4


def _inspect_eval(tmp_path: Path, model: str, env: dict[str, str], *model_args: str) -> dict:
    """Run `inspect eval` on the task; its JSON log."""
    (tmp_path / "task.py").write_text(TASK)
    inspect = Path(sys.executable).with_name("inspect")
    args = [
        str(inspect),
        "eval",
        "task.py",
        "--model",
        model,
        "--max-tokens",
        str(MAX_TOKENS),
        "--temperature",
        "0",
        "--log-dir",
        "logs",
        "--log-format",
        "json",
        "--display",
        "none",
        "--max-retries",
        "0",
        *model_args,
    ]
    done = subprocess.run(args, cwd=tmp_path, env={**os.environ, **env}, capture_output=True, text=True, timeout=500)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (log,) = (tmp_path / "logs").glob("*.json")
    return json.loads(log.read_text())


def _model_calls(log: dict) -> list[dict]:
    return [e["call"]["request"] for s in log["samples"] for e in s["events"] if e.get("event") == "model"]


def _check_scored_and_limited(log: dict) -> None:
    assert log["status"] == "success", log.get("error")
    accuracy = log["results"]["scores"][0]["metrics"]["accuracy"]["value"]
    assert 0 <= accuracy <= 1 and len(log["samples"]) == 2
    for sample in log["samples"]:
        assert sample["scores"]["includes"]["value"] in ("C", "I")
        assert 1 <= sample["output"]["usage"]["output_tokens"] <= MAX_TOKENS
    # "The capital of France is Paris." does not fit in 4 tokens: cut by the limit, as the server said
    assert "max_tokens" in [s["output"]["choices"][0]["stop_reason"] for s in log["samples"]]


@pytest.mark.parametrize("streaming", [False, True])
def test_inspect_openai_provider_uses_the_responses_api(base_url, tmp_path, streaming):
    env = {"OPENAI_BASE_URL": f"{base_url}/v1", "OPENAI_API_KEY": "unused"}
    log = _inspect_eval(
        tmp_path, "openai/smollm2", env, "-M", "responses_api=true", "-M", f"streaming={str(streaming).lower()}"
    )
    _check_scored_and_limited(log)
    for request in _model_calls(log):
        # the Responses API's limit field (the log keeps the request less its input)
        assert request["max_output_tokens"] == MAX_TOKENS and "max_tokens" not in request
        assert request.get("stream", False) is streaming


def test_inspect_openai_api_provider_uses_chat_completions(base_url, tmp_path):
    env = {"MEMLOOP_BASE_URL": f"{base_url}/v1", "MEMLOOP_API_KEY": "unused"}
    log = _inspect_eval(tmp_path, "openai-api/memloop/smollm2", env)
    _check_scored_and_limited(log)
    for request in _model_calls(log):
        assert request["max_tokens"] == MAX_TOKENS and "max_output_tokens" not in request
