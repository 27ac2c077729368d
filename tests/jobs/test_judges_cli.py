"""`memloop judges`: the judges, what each needs and its options, as `rescore --help` points to."""

from __future__ import annotations

import json

import pytest
from memloop.eval.errors import JudgeError
from memloop.eval.judges import get_judge, list_judges
from memloop.jobs.commands.cli import app
from typer.testing import CliRunner


def _catalogue() -> list[dict]:
    res = CliRunner().invoke(app, ["judges", "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def test_judges_lists_every_judge_with_what_it_needs_and_its_options() -> None:
    cat = {j["name"]: j for j in _catalogue()}
    assert sorted(cat) == sorted(list_judges())
    for name, j in cat.items():
        info = get_judge(name)
        assert j["needs_llm"] == info.needs_llm
        assert any("judge LLM" in n for n in j["needs"]) == info.needs_llm
        assert j["metrics"] == list(info.metrics)
        # the listed options with their defaults are exactly what the judge accepts
        assert info.check_options({o["name"]: o["default"] for o in j["options"]}).keys() == {
            o["name"] for o in j["options"]
        }
        with pytest.raises(JudgeError):
            info.check_options({"not_an_option_of_any_judge": 1})
    assert {"batch_size", "max_attempts"} <= {o["name"] for o in cat["booookscore-batched"]["options"]}
    assert {o["name"]: o["type"] for o in cat["booookscore-batched"]["options"]}["batch_size"] == "int"
    assert any("reference summary" in n for n in cat["rouge"]["needs"])
    assert cat["rouge"]["tasks"] is None and cat["repoqa-exact"]["tasks"] == ["repoqa"]


def test_judges_text_and_rescore_help_point_there() -> None:
    res = CliRunner().invoke(app, ["judges"])
    assert res.exit_code == 0, res.output
    assert "sumie-exact:" in res.output and "options: batch_size: int = 10" in res.output
    help_text = CliRunner().invoke(app, ["rescore", "--help"], env={"COLUMNS": "200"}).output
    assert "memloop judges" in help_text


def test_rescore_takes_an_inspect_style_judge_model(monkeypatch) -> None:
    from memloop.jobs.commands.rescore import parse_judge_model

    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    jm = parse_judge_model("openai/judge-7b")
    assert (jm.kind, jm.endpoint.base_url, jm.endpoint.model) == ("openai", "http://127.0.0.1:9/v1", "judge-7b")
    assert parse_judge_model("memloop/qwen2.5-coder-1.5b").weights == "qwen2.5-coder-1.5b"
    assert parse_judge_model("engine").kind == "engine"
