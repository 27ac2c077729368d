"""ROUGE and KGScore score any sample whose gold carries a reference summary, decided by the gold
(`JudgeInfo.gold`), and a sample without one stops the run before any work, with the samples named."""

from __future__ import annotations

import json

import pytest
from memloop.eval.judges import get_judge, run_judge
from memloop.eval.judges.gold import carries_reference, reference_of
from memloop.jobs.errors import ConfigError
from memloop.jobs.run.config import parse_config
from memloop.jobs.run.workload import build_units

BOOK = "Chapter 1\n\nAnna sailed to Crete.\n\nChapter 2\n\nBen rowed home."


def _books(tmp_path, with_summary: bool) -> str:
    row = {"title": "Tale", "text": BOOK}
    if with_summary:
        row.update(summary="Ben rows home.", chapter=2)
    (tmp_path / "books.jsonl").write_text(json.dumps(row) + "\n")
    return str(tmp_path / "books.jsonl")


def _config(datasets, judges, methods=("no-kg",)):
    return parse_config({"datasets": datasets, "methods": [{"name": m} for m in methods], "judges": judges})


def test_gold_decides_not_a_task_list() -> None:
    assert get_judge("rouge").tasks is None and get_judge("kgscore").tasks is None
    assert carries_reference({"reference": "A summary."}) and not carries_reference("add")  # RepoQA's gold
    assert not carries_reference(None) and not carries_reference({"reference": "  "}) and not carries_reference([[1]])
    assert reference_of("A text given directly.") == "A text given directly."
    score = run_judge("rouge", "Ben rows home.", {"reference": "Ben rows home."}).scores
    assert {s.metric: s.value for s in score}["rouge1"] == pytest.approx(1.0)


def test_books_with_a_reference_are_judged_by_rouge_and_kgscore(tmp_path) -> None:
    cfg = _config(
        [{"task": "book", "path": _books(tmp_path, True), "options": {"chunk_by": "chapter"}}],
        [{"name": "rouge"}, {"name": "kgscore"}, {"name": "booookscore"}],
    )
    [unit] = build_units(cfg)
    assert [j.name for j in unit.judges] == ["rouge", "kgscore", "booookscore"]
    assert unit.sample.gold == {"reference": "Ben rows home."} and unit.sample.metadata["target_chapter"] == 2


def test_books_without_a_reference_fail_at_config_check_naming_them(tmp_path) -> None:
    cfg = _config([{"task": "book", "path": _books(tmp_path, False)}], [{"name": "booookscore"}, {"name": "kgscore"}])
    with pytest.raises(
        ConfigError,
        match=r"`judges.1`: kgscore scores a reference summary .* 1 of 1 samples of "
        r"dataset 'book:books' carry none \(e.g. \['book/tale-.*summary` field",
    ):
        build_units(cfg)


def test_a_judge_kept_to_its_tasks_skips_datasets_without_references(tmp_path) -> None:
    books = {"task": "book", "path": _books(tmp_path, False)}
    spider = {"task": "spider", "limit": 1}
    with pytest.raises(ConfigError, match="`judges.0`: rouge .* dataset 'spider:builtin'"):
        build_units(_config([spider], [{"name": "rouge"}], methods=("long-context",)))
    units = build_units(
        _config(
            [books, spider], [{"name": "rouge", "tasks": ["arxiv"]}, {"name": "loft-exec"}], methods=("long-context",)
        )
    )
    assert {u.sample.task: [j.name for j in u.judges] for u in units} == {"book": [], "spider": ["loft-exec"]}


def test_a_judges_task_list_is_checked_like_a_methods() -> None:
    from memloop.jobs.run.plan import check_config

    with pytest.raises(ConfigError, match=r"`judges.0.tasks`: unknown task 'arxv'; use one of arxiv, book"):
        check_config(_config([{"task": "spider"}], [{"name": "rouge", "tasks": ["arxv"]}], methods=("long-context",)))
