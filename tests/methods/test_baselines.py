"""Seed 002's baselines and ablations on the query tasks, scored by the tasks' own judges.

Incremental updating on RepoQA/Spider and the long-context ceiling answer by the same contract as
PRISM (eval/methods/answers.py), so `repoqa-exact` and `loft-exec` score their replies; the ceiling
is "not applicable" (no call, no score) where the whole input exceeds the model's context.
"""

from __future__ import annotations

import pytest
from memloop.eval.datasets.sample import Sample
from memloop.eval.judges import run_judge
from memloop.eval.llm import ScriptedLLM
from memloop.eval.methods import get_method
from memloop.eval.methods.long_context import DEFAULT_CONTEXT_TOKENS

REPO = Sample(
    id="r",
    task="repoqa",
    chunks=("def add(a, b):\n    return a + b", "def sub(a, b):\n    return a - b"),
    query="Find the function that sums two numbers.",
    gold="add",
)
SPIDER = Sample(
    id="s",
    task="spider",
    chunks=("Table: singer\nid | name\n1 | Ann", "Table: concert\nid | year\n1 | 2014"),
    query="How many singers are there?",
    gold=[[1]],
)


def content(llm: ScriptedLLM, i: int) -> str:
    return llm.requests[i].messages[0]["content"]


def test_inc_update_answers_repoqa_from_its_notes_and_repoqa_exact_scores_it() -> None:
    # notes need not end in punctuation (they may end in a name); the answer's first line is the name
    llm = ScriptedLLM(
        ["candidate: add(a, b) returns a + b", "candidate: add; sub subtracts, ruled out", "`add`\nit sums two numbers"]
    )
    out = get_method("inc-update").run(REPO, llm)
    assert [s.kind for s in out.steps] == ["initial", "update", "final"] and all(s.ok for s in out.steps)
    assert REPO.query in content(llm, 0) and "def add(a, b)" in content(llm, 0)
    assert "candidate: add(a, b) returns a + b" in content(llm, 1) and "def sub" in content(llm, 1)
    final = content(llm, 2)
    assert "candidate: add; sub subtracts, ruled out" in final and "exact name of the function" in final
    assert out.answer == "add" and out.memory == "candidate: add; sub subtracts, ruled out"
    assert {"s003-inc-init-query", "s003-inc-answer", "s002-answer-repoqa"} <= set(out.templates)
    assert run_judge("repoqa-exact", out.answer, REPO.gold).scores[0].value == 1.0


def test_inc_update_answers_spider_in_the_loft_format_and_loft_exec_scores_it() -> None:
    llm = ScriptedLLM(
        [
            "singer rows: Ann (id 1)",
            "singer rows: Ann (id 1); concert table has no singers",
            "There is one singer.\nFinal Answer: [[1]]",
        ]
    )
    out = get_method("inc-update").run(SPIDER, llm)
    assert 'Final Answer: [["' in content(llm, 2)  # the LOFT answer instruction PRISM uses
    assert run_judge("loft-exec", out.answer, SPIDER.gold).scores[0].value == 1.0


def test_inc_update_compresses_query_notes_with_the_question() -> None:
    # the update overruns the limit: the previous notes are compressed to int(4 x 1 / 2) = 2 words and the
    # update is redone on them (the official incremental-updating recovery)
    llm = ScriptedLLM(["add sums", "add sums; sub subtracts two numbers", "add: sums", "add; sub ruled out", "add"])
    out = get_method("inc-update", max_summary_tokens=5, word_limit=4, context_window=20, max_attempts=1).run(REPO, llm)
    assert [s.kind for s in out.steps] == ["initial", "update", "compress", "update", "final"]
    assert REPO.query in content(llm, 2) and "Shorten them to fewer than 2 words" in content(llm, 2)
    assert "add: sums" in content(llm, 3) and out.answer == "add"


def test_long_context_puts_the_whole_input_in_one_prompt_and_is_scored() -> None:
    llm = ScriptedLLM(["add"])
    out = get_method("long-context", context_tokens=4000).run(REPO, llm)
    prompt = content(llm, 0)
    assert len(llm.requests) == 1 and all(c in prompt for c in REPO.chunks) and REPO.query in prompt
    assert "exact name of the function" in prompt and out.not_applicable is None
    assert out.memory["context_tokens"] == 4000 and out.memory["context_source"] == "settings"
    assert run_judge("repoqa-exact", out.answer, REPO.gold).scores[0].value == 1.0
    llm = ScriptedLLM(["Final Answer: [[1]]"])
    out = get_method("long-context", context_tokens=4000).run(SPIDER, llm)
    assert run_judge("loft-exec", out.answer, SPIDER.gold).scores[0].value == 1.0


def test_long_context_is_not_applicable_where_the_input_exceeds_the_context() -> None:
    llm = ScriptedLLM([])  # any call would fail the test: an n/a sample costs nothing
    out = get_method("long-context", context_tokens=60, max_tokens=16).run(REPO, llm)
    assert llm.requests == [] and out.steps == [] and out.answer == ""
    assert out.not_applicable and "context_tokens=60 (settings)" in out.not_applicable
    assert out.memory["needed_tokens"] > 60


class _Windowed(ScriptedLLM):
    context_tokens = 50


@pytest.mark.parametrize(
    "llm,expected", [(_Windowed([]), (50, "llm")), (ScriptedLLM(["add"]), (DEFAULT_CONTEXT_TOKENS, "default"))]
)
def test_long_context_window_comes_from_settings_then_the_llm_then_the_default(llm, expected) -> None:
    out = get_method("long-context").run(REPO, llm)
    assert (out.memory["context_tokens"], out.memory["context_source"]) == expected
    # the default max_tokens (512) alone exceeds the LLM's 50-token window; the default window fits
    assert (out.not_applicable is not None) == (expected[1] == "llm")
    if out.steps:
        assert out.memory["needed_tokens"] == llm.count_tokens(out.steps[0].prompt) + 512


class _Checking(ScriptedLLM):
    """An LLM that answers whether a request fits, as the engine does (its count of the text says nothing
    of the chat template around it)."""

    def __init__(self, outputs: list[str], refuse: bool) -> None:
        super().__init__(outputs)
        self.refuse, self.checked = refuse, []

    def misfit(self, request):
        self.checked.append(request)
        return (
            "prompt (9000 tokens) + max_tokens (512) = 9512 exceeds the model context of 8192" if self.refuse else None
        )


def test_long_context_asks_the_llm_whether_the_request_fits_one_check_not_a_guess() -> None:
    """The ceiling's fit is the engine's own check of the request it would send (chat template and
    max_tokens included), not a token count plus a guessed framing allowance."""
    refusing = _Checking([], refuse=True)
    out = get_method("long-context").run(REPO, refusing)
    assert refusing.requests == [] and out.not_applicable and "exceeds the model context of 8192" in out.not_applicable
    assert out.memory["fit_check"] == "llm" and refusing.checked[0].sampling.max_tokens == 512
    taking = _Checking(["add"], refuse=False)
    out = get_method("long-context").run(REPO, taking)
    assert out.not_applicable is None and taking.checked[0].messages == taking.requests[0].messages


def test_prism_inplace_without_updates_is_the_add_only_ablation_on_repoqa() -> None:
    llm = ScriptedLLM(
        [
            '[OBJECTS FOR ADD]\n{"$.candidate_functions.add": {"add": {"purpose": "sums"}}}',
            '[OBJECTS FOR UPDATE]\n{"$.candidate_functions.add": {"update": {"purpose": "x"}}}',
            "add",
        ]
    )
    out = get_method("prism-inplace", updates=False).run(REPO, llm)
    assert all(r.messages[0]["content"].count("[OBJECTS FOR UPDATE]") == 0 for r in llm.requests[:2])
    assert out.settings["updates"] is False and out.answer == "add"
    assert run_judge("repoqa-exact", out.answer, REPO.gold).scores[0].value == 1.0


def test_an_na_unit_is_recorded_as_na_and_never_judged(tmp_path) -> None:
    """The jobs layer's record of "not applicable": status "n/a" with the reason, no judge run, so no
    score row that could enter a mean as a zero."""
    from memloop.jobs.run.config import parse_config
    from memloop.jobs.run.judge_fanout import Judging
    from memloop.jobs.run.shards import ShardWriter
    from memloop.jobs.run.workload import build_units
    from memloop.jobs.store.run_store import RunStore
    from memloop.jobs.store.tables import now, sample_row, step_rows

    cfg = parse_config(
        {
            "datasets": [{"task": "spider", "limit": 1}],
            "methods": [{"name": "long-context", "options": {"context_tokens": 64}}],
            "judges": [{"name": "loft-exec"}],
        }
    )
    [unit] = build_units(cfg)
    out = get_method(unit.method.name, **unit.settings).run(unit.sample, ScriptedLLM([]))
    row = sample_row(unit, "ok", None, 1, out, now(), "engine-0")
    assert row["status"] == "n/a" and "does not fit the model's context" in row["error"] and row["n_steps"] == 0
    rows = {"samples": [row], "steps": step_rows(unit, out)}
    # committed at once by the process that ran the loop: no judge task, no commit task
    committed = ShardWriter(str(tmp_path), "r", "driver", Judging.of(cfg)).write(unit, rows, out, None)
    assert committed.error is None and committed.units == ((unit.key, "n/a"),)
    assert committed.tables() == {"samples"}
    rs = RunStore.open(str(tmp_path), "r")
    assert rs.table("samples").column("status").to_pylist() == ["n/a"]
    assert rs.table("judgments").num_rows == rs.table("scores").num_rows == 0
    fits = get_method("long-context", context_tokens=100_000).run(unit.sample, ScriptedLLM(["Final Answer: [[1]]"]))
    assert sample_row(unit, "ok", None, 1, fits, now(), "engine-0")["status"] == "ok"


def test_inc_update_query_prompts_put_the_part_first_and_carry_no_word_limit() -> None:
    """Issue 46 point 9: Chang et al.'s update prompt (which seed 002 adapts) shows the new part first
    and asks for no word count; memloop put the question and notes first and capped them near 40 words."""
    llm = ScriptedLLM(["candidate: add", "candidate: add; sub ruled out", "`add`"])
    get_method("inc-update").run(REPO, llm)
    for i, chunk in ((0, "def add(a, b)"), (1, "def sub(a, b)")):
        text = content(llm, i)
        assert text.index(chunk) < text.index(REPO.query)
        assert "words" not in text
    update = content(llm, 1)
    assert update.index("def sub(a, b)") < update.index("candidate: add") < update.index("Updated notes:")


def test_inc_update_compresses_query_notes_cut_at_the_output_cap_instead_of_keeping_them() -> None:
    """Notes that reach the output cap lost their tail: the official code compresses a response that reaches
    the limit and redoes the update; a cut update under the token limit is not accepted as it stands."""
    llm = ScriptedLLM(["add sums", "add sums; sub subtracts", "add: sums", "add; sub ruled out", "add"], cut=[1])
    out = get_method("inc-update", max_summary_tokens=50, word_limit=4, context_window=200).run(REPO, llm)
    assert [s.kind for s in out.steps] == ["initial", "update", "compress", "update", "final"]
    cut = out.steps[1]
    assert not cut.ok and str(cut.outcome) == "cut_at_max_tokens" and "output cap" in cut.failures[-1]
    assert out.steps[3].ok and out.memory == "add; sub ruled out"
    assert get_method("inc-update").procedure("repoqa").cut_output.startswith("not ok: compressed")


def test_inc_update_asks_the_first_summary_once_and_compresses_an_update_reaching_the_limit() -> None:
    """The official incremental code sends the first chunk's prompt once and never checks it, and
    compresses an update whose length reaches max_summary_len (`>=`), where hierarchical merging's
    check is `>`."""
    book = Sample(id="b", task="book", chunks=("Anna keeps the light.", "A storm comes."))
    first = ScriptedLLM(["cut off", "Anna keeps the light. A storm comes."])
    out = get_method("inc-update", max_summary_tokens=50).run(book, first)
    assert not out.steps[0].ok and out.steps[0].attempts == 1
    assert first.requests[1].messages[0]["content"].count("cut off") == 1  # the kept output is carried on
    llm = ScriptedLLM(["Anna keeps the light."])
    limit = llm.count_tokens("Anna keeps the light.")
    from memloop.eval.methods.base import Trace
    from memloop.eval.methods.booookscore import validity_parser

    trace = Trace(llm=llm, settings=get_method("inc-update").settings)
    assert validity_parser(trace, limit)("Anna keeps the light.") == "Anna keeps the light."
    with pytest.raises(Exception, match="reaching the limit"):
        validity_parser(trace, limit, at_limit_ok=False)("Anna keeps the light.")
