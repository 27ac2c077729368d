"""MemoryAgentBench scoring: each source's metric as the benchmark computes it, on replies to the small
files' questions, and the per-source / per-competency aggregation of its tables."""
from __future__ import annotations

import json
import math

import pytest

from eval.errors import JudgeError
from eval.judges import run_judge
from eval.judges.mab import (QuestionScore, competency_figures, normalize, parse_output, primary_metric,
                             question_metrics, source_figures)


def test_normalisation_and_the_answer_parser_follow_the_benchmark():
    assert normalize("The  Capital, of Zarnia!") == "capital of zarnia"
    assert parse_output("I think so.\nAnswer: Orsk\nbecause") == "Orsk"
    assert parse_output("label: 43\nmore") == "label: 43"  # no "Answer:": the first line


def test_factconsolidation_scores_the_later_fact_by_substring_match():
    answers = ["Orsk"]  # the file's later fact; the earlier one said Velt
    assert primary_metric("factconsolidation_sh_6k") == "substring_exact_match"
    later = question_metrics("factconsolidation_sh_6k", "The capital of Zarnia is Orsk.", answers)
    earlier = question_metrics("factconsolidation_sh_6k", "The capital of Zarnia is Velt.", answers)
    assert later["substring_exact_match"] == 1.0 and later["exact_match"] == 0.0
    assert earlier["substring_exact_match"] == 0.0
    # the parsed reply can only raise a metric: "Answer: Orsk" is an exact match once parsed
    assert question_metrics("factconsolidation_sh_6k", "Answer: Orsk", answers)["exact_match"] == 1.0


def test_a_question_with_several_accepted_answers_takes_the_best():
    m = question_metrics("ruler_qa1_197K", "kel", ["Mount Kel", "Kel"])
    assert m["exact_match"] == 1.0 and m["substring_exact_match"] == 1.0 and m["f1"] == 1.0
    m = question_metrics("ruler_qa1_197K", "on mount kel in the north", ["Mount Kel", "Kel"])
    assert m["exact_match"] == 0.0 and m["substring_exact_match"] == 1.0
    assert m["f1"] == pytest.approx(2 * (2 / 5) * 1 / (2 / 5 + 1))  # "mount kel" against 5 reply tokens
    assert question_metrics("ruler_qa1_197K", "no", ["yes"])["f1"] == 0.0


def test_icl_scores_the_parsed_reply_strictly_and_eventqa_adds_its_recall():
    assert question_metrics("icl_banking77_5900shot_balance", "3", ["3"])["exact_match"] == 1.0
    # the benchmark's note: "label: 3" against "3" is wrong under exact match
    assert question_metrics("icl_banking77_5900shot_balance", "label: 3", ["3"])["exact_match"] == 0.0
    ev = question_metrics("eventqa_full", "Then Anna called it back.", ["Anna called it back"])
    assert ev["eventqa_recall"] == 1.0 and ev["substring_exact_match"] == 1.0
    assert primary_metric("detective_qa") == "exact_match" and primary_metric("recsys_redial_full") == "recsys_recall@5"


def test_recsys_recall_at_k_matches_items_to_the_nearest_movie_name(tmp_path):
    entities = tmp_path / "entity2id.json"
    entities.write_text(json.dumps({"<http://dbpedia.org/resource/Ronin_(1998)>": 1, "The_Town_(2010)": 2,
                                    "Heat_(1995)": 3, "Thief_(1981)": 4}))
    reply = "Here you go:\n1. Heat\n2. Thief\n3. Ronin\n4. The Towne"
    m = question_metrics("recsys_redial_full", reply, ["1", "2"], entity2id=str(entities))
    assert m == {"recsys_recall@1": 0.0, "recsys_recall@5": 1.0, "recsys_recall@10": 1.0}
    with pytest.raises(JudgeError, match="entity2id"):
        question_metrics("recsys_redial_full", reply, ["1"])


def test_the_judge_scores_every_question_of_a_context_and_marks_llm_judged_sources():
    gold = {"questions": ["capital?", "occupation?"], "answers": [["Orsk"], ["lighthouse keeper"]],
            "qa_pair_ids": ["a", "b"]}
    meta = {"source": "factconsolidation_sh_6k"}
    res = run_judge("mab", json.dumps(["Orsk", "glassblower"]), gold, metadata=meta)
    assert res.score("accuracy") == 0.5 and res.score("questions") == 2.0
    assert [j.label["metrics"]["substring_exact_match"] for j in res.judgments] == [1.0, 0.0]
    assert res.judgments[1].label["qa_pair_id"] == "b"
    with pytest.raises(JudgeError, match="list of 2 replies"):
        run_judge("mab", json.dumps(["Orsk"]), gold, metadata=meta)
    with pytest.raises(JudgeError, match="ask-many"):
        run_judge("mab", "Orsk", gold, metadata=meta)
    # a method that produced nothing to ask (no usable memory) got nothing right: zero, not an error
    assert run_judge("mab", "", gold, metadata=meta).score("accuracy") == 0.0
    lme = run_judge("mab", json.dumps(["x"]), {"answers": [["y"]]}, metadata={"source": "longmemeval_s_-1_500"})
    assert lme.judgments[0].label["llm_judged"] and not lme.judgments[0].valid
    with pytest.raises(KeyError):
        lme.score("accuracy")  # no number where the benchmark asks an LLM judge


def test_sources_average_over_questions_and_competencies_over_sources():
    def q(source: str, comp: str, ctx: str, v: float | None) -> QuestionScore:
        return QuestionScore(source, comp, ctx, v)

    scores = [q("ruler_qa1_197K", "AR", "r0", 1.0), q("ruler_qa1_197K", "AR", "r0", 1.0),
              q("ruler_qa1_197K", "AR", "r1", 0.0),  # 2 of 3 questions: 66.7, not the mean of contexts (50)
              q("eventqa_full", "AR", "e0", 0.0), q("eventqa_full", "AR", "e1", 1.0),
              q("longmemeval_s_-1_500", "AR", "l0", None),
              q("factconsolidation_sh_6k", "CR", "f0", 1.0)]
    src = source_figures(scores)
    assert src["ruler_qa1_197K"].value == pytest.approx(200 / 3) and src["ruler_qa1_197K"].questions == 3
    assert src["ruler_qa1_197K"].low <= src["ruler_qa1_197K"].value <= src["ruler_qa1_197K"].high
    assert math.isnan(src["longmemeval_s_-1_500"].value) and src["longmemeval_s_-1_500"].unscored == 1
    comp = competency_figures(scores)
    assert comp["AR"].value == pytest.approx((200 / 3 + 50) / 2)  # unweighted over the scored sources
    assert comp["AR"].sources == ["eventqa_full", "ruler_qa1_197K"] and comp["AR"].unscored == 1
    assert comp["AR"].contexts == 5 and comp["CR"].value == 100.0 and "TTL" not in comp
