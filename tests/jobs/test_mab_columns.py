"""The MemoryAgentBench report's competency columns: the paper's TTL and Overall only where a row holds them,
else the labelled part ("TTL (MCC only)") and no Overall."""

from __future__ import annotations

from memloop.eval.judges.mab import QuestionScore, competency_figures
from memloop.jobs.results.mab_table import competency_columns

q = QuestionScore
OTHERS = [
    q("ruler_qa1_197K", "AR", "a", 1.0),
    q("detective_qa", "LRU", "d", 0.0),
    q("factconsolidation_sh_262k", "CR", "f", 1.0),
]
MCC = [q("icl_banking77_5900shot_balance", "TTL", "b0", 1.0)]
RECOM = [q("recsys_redial_full", "TTL", "r0", 0.2)]


def test_the_columns_follow_what_the_rows_hold():
    mcc_only, full = competency_figures(OTHERS + MCC), competency_figures(OTHERS + MCC + RECOM)
    assert competency_columns([mcc_only]) == ["AR", "TTL (MCC only)", "LRU", "CR"]
    assert competency_columns([full]) == ["AR", "TTL", "LRU", "CR", "overall"]
    # one method without Recom. (e.g. its recommendation context incomplete) beside one with it
    assert competency_columns([mcc_only, full]) == ["AR", "TTL", "TTL (MCC only)", "LRU", "CR", "overall"]
    assert competency_columns([{}]) == ["AR", "TTL", "LRU", "CR"]  # a method with no figure: its cells "–"
