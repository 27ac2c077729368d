"""One bad sampling value, given on the command line, through the Python API and to the HTTP server, is
refused with the one message `memloop.sampling.check` writes (the single owner of the sampling bounds)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import openai
import pytest
import yaml

import memloop
from memloop.sampling import SamplingError, SamplingParams

ROOT = Path(__file__).resolve().parents[2]
BAD = -5  # a negative max_tokens


def _message(**bad) -> str:
    """What the bounds owner says about `bad`, computed by the class itself."""
    with pytest.raises(SamplingError) as info:
        SamplingParams(**bad)
    return str(info.value)


def _config(tmp_path: Path) -> dict:
    return {
        "name": "bounds",
        "output": str(tmp_path / "runs"),
        "datasets": [{"task": "sumie", "synthetic": {"entities": 1}}],
        "methods": [{"name": "gu-json"}],
    }


def test_the_message_names_the_setting_its_bounds_and_the_value() -> None:
    message = _message(max_tokens=BAD)
    assert message.startswith("max_tokens must be an integer from 1 to ") and message.endswith(f"got {BAD}")
    assert "\n" not in message


def test_cli_api_and_server_report_a_bad_max_tokens_alike(tmp_path, client) -> None:
    expected = _message(max_tokens=BAD)

    # the command line: `memloop run CONFIG -S sampling.max_tokens=-5` stops before any work, exit status 2
    cfg = tmp_path / "run.yaml"
    cfg.write_text(yaml.safe_dump(_config(tmp_path)))
    cli = subprocess.run(
        [
            sys.executable,
            "-c",
            "from memloop.jobs.commands.cli import main; main()",
            "run",
            str(cfg),
            "-S",
            f"sampling.max_tokens={BAD}",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert cli.returncode == 2, cli.stderr
    assert f"`sampling.max_tokens`: {expected}" in cli.stderr, cli.stderr
    assert not (tmp_path / "runs").exists()

    # the Python API: the same keyword as `--max-tokens`, and a method's own option by its path
    with pytest.raises(memloop.MemloopError) as api:
        memloop.run(_config(tmp_path), max_tokens=BAD)
    assert str(api.value).endswith(f"`sampling.max_tokens`: {expected}"), str(api.value)
    with pytest.raises(memloop.MemloopError) as option:
        memloop.plan(_config(tmp_path), overrides={"methods.gu-json.options.max_tokens": BAD})
    assert str(option.value).endswith(f"`max_tokens`: {expected}"), str(option.value)
    assert not (tmp_path / "runs").exists()

    # `memloop serve` on 127.0.0.1, asked by the openai SDK: a 400 whose message is the same, word for word
    with pytest.raises(openai.BadRequestError) as http:
        client.chat.completions.create(model="smollm2", messages=[{"role": "user", "content": "Hi"}], max_tokens=BAD)
    assert http.value.status_code == 400
    assert http.value.body["message"] == expected, http.value.body
    with pytest.raises(openai.BadRequestError) as renamed:  # the cap under its current name, named as sent
        client.chat.completions.create(
            model="smollm2", messages=[{"role": "user", "content": "Hi"}], max_completion_tokens=BAD
        )
    assert renamed.value.body["message"] == f"invalid request at body.max_completion_tokens: {expected}"


def test_the_server_and_a_method_option_bound_the_temperature_alike(tmp_path, client) -> None:
    """A temperature out of range: the server's 400 and a method's option check quote the same bound."""
    expected = _message(temperature=150.0)
    with pytest.raises(openai.BadRequestError) as http:
        client.completions.create(model="smollm2", prompt="Hi", max_tokens=2, temperature=150.0)
    assert http.value.body["message"] == expected, http.value.body
    with pytest.raises(memloop.MemloopError) as option:
        memloop.plan(_config(tmp_path), overrides={"methods.gu-json.options.temperature": 150.0})
    assert str(option.value).endswith(f"`temperature`: {expected}"), str(option.value)
