"""MemoryAgentBench's table figures (eval/judges/mab.py: per source, per competency, Overall) pinned
number by number: a competency of one source is that source's figure, interval included; Overall
averages the competencies' points and, draw by draw, their resampled values; the counts add up; a
source or competency with nothing scored counts 0 questions and leaves the others alone
(scripts/mutation.py's `mab-figures` target runs these first)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from memloop.eval.judges.mab import (
    OVERALL,
    SEED,
    QuestionScore,
    _draws,
    _interval,
    base_competency,
    competency_figures,
    source_figures,
)

# sorted by source, the order that seeds each source's resampling: SEED + its place in this list
CONTEXTS: dict[str, tuple[str, list[list[float | None]]]] = {
    "detective_qa": ("LRU", [[1.0, 0.0], [0.0], [1.0, 1.0, 0.0]]),
    "factconsolidation_sh_6k": ("CR", [[0.0], [1.0], [1.0, 0.0], [0.0, 0.0]]),
    "icl_banking77_5900shot_balance": ("TTL", [[1.0], [0.0, 1.0], [1.0]]),
    "recsys_redial_full": ("TTL", [[0.2], [0.4, 0.1], [0.0]]),
    "ruler_qa1_197K": ("AR", [[1.0, None], [0.0, 1.0], [1.0], [0.5]]),  # one LLM-judged question unscored
}


def _scores() -> list[QuestionScore]:
    return [
        QuestionScore(source, comp, f"{source}-{i}", v)
        for source, (comp, contexts) in CONTEXTS.items()
        for i, ctx in enumerate(contexts)
        for v in ctx
    ]


def _draws_of(source: str) -> tuple[float, np.ndarray]:
    scored = [[v for v in ctx if v is not None] for ctx in CONTEXTS[source][1]]
    return _draws(scored, SEED + list(CONTEXTS).index(source))


def test_a_competency_of_one_source_is_that_sources_figure_interval_included() -> None:
    src, comp = source_figures(_scores()), competency_figures(_scores())
    for label, source in (("AR", "ruler_qa1_197K"), ("LRU", "detective_qa"), ("CR", "factconsolidation_sh_6k")):
        s, c = src[source], comp[label]
        assert (c.value, c.low, c.high, c.questions, c.contexts) == (s.value, s.low, s.high, s.questions, s.contexts)
        assert s.low < s.value < s.high
        point, draws = _draws_of(source)
        assert (s.value, (s.low, s.high)) == (point, _interval(draws))
    assert (src["ruler_qa1_197K"].questions, src["ruler_qa1_197K"].unscored) == (5, 1)


def test_overall_averages_the_competencies_points_and_their_draws() -> None:
    comp = competency_figures(_scores())
    icl, recsys = _draws_of("icl_banking77_5900shot_balance"), _draws_of("recsys_redial_full")
    ttl = ((icl[0] + recsys[0]) / 2, (icl[1] + recsys[1]) / 2)  # TTL = mean(MCC, Recom.)
    assert comp["TTL"].value == pytest.approx(ttl[0]) and (comp["TTL"].low, comp["TTL"].high) == pytest.approx(
        _interval(ttl[1])
    )
    parts = [_draws_of("ruler_qa1_197K"), ttl, _draws_of("detective_qa"), _draws_of("factconsolidation_sh_6k")]
    overall = comp[OVERALL]
    assert overall.value == pytest.approx(np.mean([p for p, _ in parts]))
    assert (overall.low, overall.high) == pytest.approx(_interval(np.mean([d for _, d in parts], axis=0)))
    assert overall.low < overall.value < overall.high
    assert (overall.questions, overall.contexts, overall.unscored) == (5 + 8 + 6 + 6, 4 + 6 + 3 + 4, 1)  # AR TTL LRU CR
    assert overall.sources == [
        "ruler_qa1_197K",
        "icl_banking77_5900shot_balance",
        "recsys_redial_full",
        "detective_qa",
        "factconsolidation_sh_6k",
    ]


def test_a_source_or_competency_with_nothing_scored_counts_no_questions_and_keeps_the_rest() -> None:
    q = QuestionScore
    scores = [
        q("infbench_sum_eng_shots2", "LRU", "i0", None),
        q("infbench_sum_eng_shots2", "LRU", "i1", None),
        q("factconsolidation_sh_6k", "CR", "f0", 1.0),
        q("factconsolidation_sh_6k", "CR", "f1", 0.0),
        q("recsys_redial_full", "TTL", "r0", None),
        q("ruler_qa1_197K", "AR", "a0", 0.5),
    ]
    src = source_figures(scores)
    unscored = src["infbench_sum_eng_shots2"]
    assert math.isnan(unscored.value) and (unscored.questions, unscored.contexts, unscored.unscored) == (0, 2, 2)
    assert src["ruler_qa1_197K"].value == 50.0 and src["factconsolidation_sh_6k"].value == 50.0
    comp = competency_figures(scores)
    lru, ttl = comp["LRU"], comp["TTL"]
    assert math.isnan(lru.value) and (lru.questions, lru.contexts, lru.unscored, lru.sources) == (0, 2, 2, [])
    assert math.isnan(ttl.value) and ttl.questions == 0
    assert comp["CR"].value == 50.0 and comp["AR"].value == 50.0 and OVERALL not in comp
    # a competency with no source at all is skipped, not the end of the table
    assert sorted(competency_figures(scores[:4])) == ["CR", "LRU"]


def test_a_labelled_competency_names_its_base_competency() -> None:
    assert base_competency("TTL (MCC only)") == "TTL"
    assert base_competency("AR (without longmemeval_s_-1_500)") == "AR" and base_competency("CR") == "CR"
