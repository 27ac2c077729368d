"""`memloop score booookscore` on the official release files."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def _memloop(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", "from memloop.jobs.commands.cli import main; main()", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_score_booookscore_json_last_line(shared_data):
    d = shared_data / "booookscore"
    out = _memloop(
        "score",
        "booookscore",
        "--summaries",
        str(d / "summaries/gpt4-2048-hier-cleaned.json"),
        "--replay",
        str(d / "annotations/gpt4-2048-hier.json"),
        "--json",
    )
    assert out.returncode == 0, out.stderr
    last = json.loads(out.stdout.strip().splitlines()[-1])
    assert last["books"] == 100 and last["sentences"] == 2819
    assert last["booookscore"] == pytest.approx(0.8944, abs=1e-4)


def test_score_booookscore_bad_input_is_a_named_error(tmp_path):
    bad = tmp_path / "s.json"
    bad.write_text("[1, 2]")
    out = _memloop("score", "booookscore", "--summaries", str(bad), "--replay", str(bad))
    assert out.returncode == 2
    assert "error: JudgeError:" in out.stderr and "JSON object keyed by book" in out.stderr


def test_registry_and_template_hashes():
    from memloop.eval.errors import JudgeError
    from memloop.eval.judges import get_judge, judge_template_hashes, list_judges

    assert set(list_judges()) >= {
        "booookscore",
        "booookscore-batched",
        "sumie",
        "sumie-exact",
        "kgscore",
        "rouge",
        "repoqa-exact",
        "loft-exec",
    }
    for name in list_judges():
        info = get_judge(name)
        assert callable(info.load()) and (info.tasks or info.gold)  # a task list, or the gold it needs
        for tid, digest in judge_template_hashes(name).items():
            assert len(digest) == 64, tid
    assert set(judge_template_hashes("kgscore")) == {"kgscore-edges", "kgscore-entities"}
    with pytest.raises(JudgeError, match="unknown judge"):
        get_judge("bleu")


def test_score_loft_example(shared_data, tmp_path):
    d = shared_data / "loft-spider-example"
    out = _memloop("score", "loft", "--queries", str(d / "queries.jsonl"), "--preds", str(d / "preds.jsonl"), "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"accuracy": 0.3, "queries": 10}
    partial = tmp_path / "preds.jsonl"
    partial.write_text((d / "preds.jsonl").read_text().splitlines()[0] + "\n")
    out = _memloop("score", "loft", "--queries", str(d / "queries.jsonl"), "--preds", str(partial))
    assert out.returncode == 2 and "9 of 10 queries have no prediction" in out.stderr
