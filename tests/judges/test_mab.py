"""MemoryAgentBench scoring: each source's metric as the benchmark computes it, on replies to the small
files' questions, and the per-source / per-competency aggregation of its tables."""

from __future__ import annotations

import json
import math

import pytest
from memloop.eval.errors import JudgeError
from memloop.eval.judges import run_judge
from memloop.eval.judges.mab import (
    OVERALL,
    QuestionScore,
    competency_figures,
    normalize,
    parse_output,
    primary_metric,
    question_metrics,
    source_figures,
)


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
    # the yes/no/noanswer rule itself: plain token F1 of "yes it is" against "yes" is 0.5; the rule makes it 0
    from memloop.eval.judges.mab import f1_score

    assert f1_score("yes it is", "yes") == 0.0 and f1_score("it is no", "no") == 0.0
    assert question_metrics("ruler_qa1_197K", "yes it is", ["yes"])["f1"] == 0.0
    assert f1_score("yes", "yes") == 1.0 and f1_score("Yes.", "yes") == 1.0  # equal after normalising: not zeroed


def test_icl_scores_the_parsed_reply_strictly_and_eventqa_adds_its_recall():
    assert question_metrics("icl_banking77_5900shot_balance", "3", ["3"])["exact_match"] == 1.0
    # the benchmark's note: "label: 3" against "3" is wrong under exact match
    assert question_metrics("icl_banking77_5900shot_balance", "label: 3", ["3"])["exact_match"] == 0.0
    ev = question_metrics("eventqa_full", "Then Anna called it back.", ["Anna called it back"])
    assert ev["eventqa_recall"] == 1.0 and ev["substring_exact_match"] == 1.0
    assert primary_metric("detective_qa") == "exact_match" and primary_metric("recsys_redial_full") == "recsys_recall@5"


def test_recsys_recall_at_k_matches_items_to_the_nearest_movie_name(tmp_path):
    entities = tmp_path / "entity2id.json"
    entities.write_text(
        json.dumps(
            {"<http://dbpedia.org/resource/Ronin_(1998)>": 1, "The_Town_(2010)": 2, "Heat_(1995)": 3, "Thief_(1981)": 4}
        )
    )
    reply = "Here you go:\n1. Heat\n2. Thief\n3. Ronin\n4. The Towne"
    m = question_metrics("recsys_redial_full", reply, ["1", "2"], entity2id=str(entities))
    assert m == {"recsys_recall@1": 0.0, "recsys_recall@5": 1.0, "recsys_recall@10": 1.0}
    with pytest.raises(JudgeError, match="entity2id"):
        question_metrics("recsys_redial_full", reply, ["1"])


def test_the_judge_scores_every_question_of_a_context_and_marks_llm_judged_sources():
    gold = {
        "questions": ["capital?", "occupation?"],
        "answers": [["Orsk"], ["lighthouse keeper"]],
        "qa_pair_ids": ["a", "b"],
    }
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

    scores = [
        q("ruler_qa1_197K", "AR", "r0", 1.0),
        q("ruler_qa1_197K", "AR", "r0", 1.0),
        q("ruler_qa1_197K", "AR", "r1", 0.0),  # 2 of 3 questions: 66.7, not the mean of contexts (50)
        q("eventqa_full", "AR", "e0", 0.0),
        q("eventqa_full", "AR", "e1", 1.0),
        q("longmemeval_s_-1_500", "AR", "l0", None),
        q("factconsolidation_sh_6k", "CR", "f0", 1.0),
    ]
    src = source_figures(scores)
    assert src["ruler_qa1_197K"].value == pytest.approx(200 / 3) and src["ruler_qa1_197K"].questions == 3
    assert src["ruler_qa1_197K"].low <= src["ruler_qa1_197K"].value <= src["ruler_qa1_197K"].high
    assert math.isnan(src["longmemeval_s_-1_500"].value) and src["longmemeval_s_-1_500"].unscored == 1
    comp = competency_figures(scores)
    # unweighted over the scored sources, and keyed by the source it lacks: not the paper's AR
    ar = comp["AR (without longmemeval_s_-1_500)"]
    assert ar.value == pytest.approx((200 / 3 + 50) / 2) and "AR" not in comp
    assert ar.sources == ["eventqa_full", "ruler_qa1_197K"] and ar.unscored == 1
    assert ar.contexts == 5 and comp["CR"].value == 100.0 and "TTL" not in comp


def test_overall_needs_every_competency_with_every_source_scored():
    """A competency missing a source it holds (LLM-judged, unscored under `mab`) is not the paper's, so the
    Overall over it would not be the paper's Overall either."""

    def q(source: str, comp: str, v: float | None) -> QuestionScore:
        return QuestionScore(source, comp, source, v)

    full = [
        q("ruler_qa1_197K", "AR", 1.0),
        q("icl_banking77", "TTL", 1.0),
        q("recsys_redial_full", "TTL", 0.0),
        q("detective_qa", "LRU", 1.0),
        q("factconsolidation_sh_6k", "CR", 0.0),
    ]
    assert competency_figures(full)[OVERALL].value == pytest.approx((100 + 50 + 100 + 0) / 4)
    lacking = competency_figures(full + [q("infbench_sum_eng_shots2", "LRU", None)])
    assert OVERALL not in lacking and "LRU" not in lacking
    assert lacking["LRU (without infbench_sum_eng_shots2)"].value == pytest.approx(100.0)
    ttl = competency_figures([q("icl_banking77", "TTL", 1.0), q("recsys_x", "TTL", None)])
    assert list(ttl) == ["TTL (MCC only; without recsys_x)"]


LME_GOLD = {
    "questions": ["How many days between adopting Pip and the vet?", "Where do I live now?", "What is my dog's name?"],
    "answers": [["17 days"], ["Lisbon"], ["No dog was mentioned; the cat is Pip."]],
    "qa_pair_ids": ["lme-1", "lme-2", "lme-3_abs"],
    "question_ids": ["lme-1", "lme-2", "lme-3_abs"],
    "question_types": ["temporal-reasoning", "knowledge-update", "single-session-user"],
}


def test_mab_llm_judges_longmemeval_with_the_check_of_each_question_type():
    from memloop.eval.llm import ScriptedLLM

    llm = ScriptedLLM(["Yes.", "no", "YES"])
    replies = ["18 days", "Porto, then Lisbon", "You never told me about a dog."]
    res = run_judge("mab-llm", json.dumps(replies), LME_GOLD, llm, metadata={"source": "longmemeval_s*"})
    prompts = [r.messages[0]["content"] for r in llm.requests]
    assert "off by one" in prompts[0] and "18 days" in prompts[0] and "17 days" in prompts[0]
    assert "updated answer" in prompts[1]
    assert "unanswerable" in prompts[2]  # the "_abs" id picks the abstention check, whatever the type
    assert all(r.sampling.max_tokens == 10 and r.sampling.temperature == 0.0 for r in llm.requests)
    questions = [j for j in res.judgments if "primary" in j.label]
    assert [j.label["metrics"]["llm_judge"] for j in questions] == [1.0, 0.0, 1.0]
    assert res.score("accuracy") == pytest.approx(2 / 3)
    calls = [j for j in res.judgments if "part" in j.label]
    assert [c.label["part"] for c in calls] == ["mab-lme-temporal", "mab-lme-update", "mab-lme-abstention"]
    assert calls[0].prompt == prompts[0] and calls[0].template_sha256
    with pytest.raises(JudgeError, match="needs a judge LLM"):
        run_judge("mab-llm", json.dumps(replies), LME_GOLD, metadata={"source": "longmemeval_s*"})
    bad = dict(LME_GOLD, question_types=["chit-chat", "knowledge-update", "x"], question_ids=["a", "b", "c"])
    with pytest.raises(JudgeError, match="question type 'chit-chat' has no answer check"):
        run_judge("mab-llm", json.dumps(replies), bad, ScriptedLLM(["yes"] * 3), metadata={"source": "longmemeval_s*"})


def test_longmemeval_abstention_is_read_from_question_ids_when_a_row_carries_both_ids(tmp_path):
    """The benchmark's answer check reads `metadata.question_ids` ("_abs": abstention); a hub row carries
    `qa_pair_ids` too, which must not decide the check."""
    from memloop.eval.datasets.memoryagentbench import load_memoryagentbench
    from memloop.eval.llm import ScriptedLLM

    row = {
        "context": "Session 1 (2023/05/01): I adopted a cat called Pip. I moved to Lisbon.",
        "questions": ["Where do I live?", "What is my dog's name?"],
        "answers": [["Lisbon"], ["You did not mention a dog."]],
        "metadata": {
            "source": "longmemeval_s*",
            "qa_pair_ids": ["longmemeval_s*_0_0", "longmemeval_s*_0_1"],
            "question_ids": ["7a1c2e", "5b9d0f_abs"],
            "question_types": ["single-session-user", "single-session-user"],
        },
    }
    path = tmp_path / "lme.jsonl"
    path.write_text(json.dumps(row) + "\n")
    sample = load_memoryagentbench(path, splits=["Accurate_Retrieval"])[0]
    llm = ScriptedLLM(["yes", "yes"])
    res = run_judge(
        "mab-llm", json.dumps(["Lisbon", "I do not know of a dog."]), sample.gold, llm, metadata=sample.metadata
    )
    calls = [j.label["part"] for j in res.judgments if "part" in j.label]
    assert calls == ["mab-lme-standard", "mab-lme-abstention"]
    assert "cannot be answered" in llm.requests[1].messages[0]["content"]
    assert sample.gold["question_ids"] == ["7a1c2e", "5b9d0f_abs"]
    assert sample.gold["qa_pair_ids"] == ["longmemeval_s*_0_0", "longmemeval_s*_0_1"]  # the judgments' labels
    with pytest.raises(JudgeError, match="question_ids"):  # without the field the check cannot be chosen
        run_judge(
            "mab-llm",
            json.dumps(["Lisbon", "x"]),
            dict(sample.gold, question_ids=[None, None]),
            ScriptedLLM(["yes"] * 2),
            metadata=sample.metadata,
        )


def test_mab_llm_scores_infbench_sum_as_fluency_times_f1_of_keypoint_recall_and_sentence_precision():
    from memloop.eval.llm import ScriptedLLM

    gold = {
        "questions": ["Summarize the book."],
        "answers": [["Wren leaves, crosses a desert and comes home."]],
        "keypoints": [
            "Wren leaves her valley.",
            "Wren crosses a desert.",
            "Wren meets a trader.",
            "Wren comes home changed.",
        ],
    }
    llm = ScriptedLLM(
        [
            '{"fluency": 1}',
            'Points 1 and 2 are there. Output: {"supported_key_points": [1, 2], "recall": 2}',
            "not JSON at all",  # asked again
            'Sentence one is supported, two is not. {"precision": 1, "sentence_count": 2}',
        ]
    )
    res = run_judge(
        "mab-llm",
        json.dumps(["Wren leaves. She crosses the sea."]),
        gold,
        llm,
        metadata={"source": "infbench_sum_eng_shots2"},
    )
    [question] = [j for j in res.judgments if "primary" in j.label]
    m = question.label["metrics"]
    assert m["llm_recall"] == 0.5 and m["llm_precision"] == 0.5 and m["llm_fluency"] == 1.0
    assert m["llm_judge_f1"] == pytest.approx(0.5) and res.score("accuracy") == pytest.approx(0.5)
    assert "1. Wren leaves her valley.\n2. Wren crosses a desert." in llm.requests[1].messages[0]["content"]
    precision_call = [j for j in res.judgments if j.label.get("part") == "mab-sum-precision"][0]
    assert precision_call.failures and "no JSON object" in precision_call.failures[0]["reason"]
    # an incoherent summary scores 0 whatever its overlap (fluency multiplies)
    zero = run_judge(
        "mab-llm",
        json.dumps(["x"]),
        gold,
        ScriptedLLM(['{"fluency": 0}', '{"recall": 4}', '{"precision": 2, "sentence_count": 2}']),
        metadata={"source": "infbench_sum_eng_shots2"},
    )
    assert zero.score("accuracy") == 0.0
    with pytest.raises(JudgeError, match="key points"):
        run_judge(
            "mab-llm",
            json.dumps(["x"]),
            {k: v for k, v in gold.items() if k != "keypoints"},
            ScriptedLLM([]),
            metadata={"source": "infbench_sum_eng_shots2"},
        )


def test_the_infbench_sum_judge_follows_the_official_book_rubric_and_settings():
    """summarization_evaluate.py's book prompts: recall counts the key points the summary mostly supports (one
    of several facts need not all be there), recall and precision each give two worked examples, and every
    question is asked at temperature 0.1 with 4,096 tokens."""
    from memloop.eval.llm import ScriptedLLM

    gold = {
        "questions": ["Summarize the book."],
        "answers": [["Wren leaves, crosses a desert and comes home."]],
        "keypoints": ["Wren leaves her valley.", "Wren crosses a desert."],
    }
    llm = ScriptedLLM(
        ['{"fluency": 1}', '{"supported_key_points": [1], "recall": 1}', '{"precision": 1, "sentence_count": 1}']
    )
    run_judge("mab-llm", json.dumps(["Wren leaves."]), gold, llm, metadata={"source": "infbench_sum_eng_shots2"})
    fluency, recall, precision = (r.messages[0]["content"] for r in llm.requests)
    assert [(r.sampling.temperature, r.sampling.max_tokens) for r in llm.requests] == [(0.1, 4096)] * 3
    assert "mostly supports" in recall and "most of those facts" in recall
    for prompt in (recall, precision):
        assert prompt.count("Example 1:") == 1 and prompt.count("Example 2:") == 1
        assert prompt.count("Reasoning:") == 2 and prompt.count("Output: {") == 2  # two worked examples
    assert recall.count("Key points:\n1.") == 3  # two examples' lists, then the summary's own
    assert precision.count("Expert summary: <start of summary>") == 3
    assert "commentary" in precision  # a sentence adding analysis is not supported
    assert "Score 0" in fluency and "Score 1" in fluency


def test_mab_llm_scores_the_other_sources_by_rule_without_asking_the_judge():
    from memloop.eval.llm import ScriptedLLM

    llm = ScriptedLLM([])
    res = run_judge(
        "mab-llm", json.dumps(["Orsk"]), {"answers": [["Orsk"]]}, llm, metadata={"source": "factconsolidation_sh_6k"}
    )
    assert res.score("accuracy") == 1.0 and not llm.requests


def test_the_mab_llm_prompts_are_the_judges_declared_templates():
    from memloop.eval.judges import get_judge, mab_llm

    assert tuple(mab_llm.TEMPLATES) == get_judge("mab-llm").templates
    assert len(get_judge("mab-llm").template_hashes()) == len(mab_llm.TEMPLATES)


def test_the_icl_sets_are_one_column_of_test_time_learning_and_overall_averages_the_competencies():
    q = QuestionScore
    scores = [
        q("icl_banking77_5900shot_balance", "TTL", "b0", 1.0),
        q("icl_clinic150_7050shot_balance", "TTL", "c0", 0.0),
        q("icl_nlu_8296shot_balance", "TTL", "n0", 1.0),
        q("recsys_redial_full", "TTL", "r0", 0.2),
    ]
    comp = competency_figures(scores)
    # the paper's TTL: mean(MCC, Recom.) with MCC the mean of the ICL sets: (2/3 + 0.2) / 2, not 2.2 / 4
    assert comp["TTL"].value == pytest.approx(100 * (2 / 3 + 0.2) / 2)
    assert "overall" not in comp  # only with all four competencies
    full = scores + [
        q("ruler_qa1_197K", "AR", "a", 1.0),
        q("detective_qa", "LRU", "d", 0.0),
        q("factconsolidation_sh_262k", "CR", "f", 1.0),
    ]
    comp = competency_figures(full)
    assert comp["overall"].value == pytest.approx((100 + comp["TTL"].value + 0 + 100) / 4)
    # with two contexts per source the interval is there, around the point
    twice = full + [q(x.source, x.competency, x.context + "-2", 1.0 - x.value) for x in full]
    comp = competency_figures(twice)
    assert comp["overall"].low <= comp["overall"].value <= comp["overall"].high


def test_without_the_recommendation_set_ttl_is_labelled_mcc_only_and_there_is_no_overall():
    """The paper's TTL is mean(MCC, Recom.) and its Overall averages that TTL: a run without Recom. must not
    print either under the paper's name (GPT-4o: MCC 87.6, Recom. 12.3, TTL 50.0)."""
    q = QuestionScore
    others = [
        q("ruler_qa1_197K", "AR", "a", 1.0),
        q("detective_qa", "LRU", "d", 0.0),
        q("factconsolidation_sh_262k", "CR", "f", 1.0),
    ]
    mcc = [q("icl_banking77_5900shot_balance", "TTL", "b0", 1.0), q("icl_nlu_8296shot_balance", "TTL", "n0", 0.0)]
    comp = competency_figures(others + mcc)
    assert "TTL" not in comp and "overall" not in comp
    assert comp["TTL (MCC only)"].value == 50.0
    with_recom = competency_figures(others + mcc + [q("recsys_redial_full", "TTL", "r0", 0.2)])
    assert with_recom["TTL"].value == pytest.approx((50 + 20) / 2) and "TTL (MCC only)" not in with_recom
    assert with_recom["overall"].value == pytest.approx((100 + 35 + 0 + 100) / 4)


def test_a_source_of_one_context_has_no_interval_rather_than_a_degenerate_one():
    q = QuestionScore
    one = source_figures([q("ruler_qa1_197K", "AR", "r0", 1.0), q("ruler_qa1_197K", "AR", "r0", 0.0)])
    assert one["ruler_qa1_197K"].value == 50.0 and math.isnan(one["ruler_qa1_197K"].low)
    comp = competency_figures(
        [q("ruler_qa1_197K", "AR", "r0", 1.0), q("eventqa_full", "AR", "e0", 0.0), q("eventqa_full", "AR", "e1", 1.0)]
    )
    assert comp["AR"].value == 75.0 and math.isnan(comp["AR"].high)  # one of its sources has one context


def test_f1_and_substring_recall_by_hand():
    from memloop.eval.judges.mab import _recall_in, f1_score

    assert f1_score("cat sat", "dog ran") == 0.0  # nothing in common
    assert f1_score("the cat sat down", "cat sat") == pytest.approx(2 * (2 / 3) * 1.0 / (2 / 3 + 1.0))
    assert _recall_in("Paris is large", ["Paris", "Rome"]) == 0.5
    assert _recall_in("paris and rome", ["Paris", "Rome", "Oslo", "Bern"]) == 0.5


def test_a_source_figure_is_the_question_mean_with_a_percentile_interval_over_resampled_contexts():
    """The point is x100 the mean over questions; the interval is the 2.5th and 97.5th percentiles of
    that mean over RESAMPLES resamples of whole contexts (seeded)."""
    import numpy as np
    from memloop.eval.judges.mab import RESAMPLES, _draws, _interval

    point, draws = _draws([[1.0, 1.0, 0.0]], 1)  # one context: no spread, no interval
    assert point == pytest.approx(200 / 3) and np.isnan(draws).all()
    contexts = [[1.0, 1.0, 0.0], [0.0], [1.0, 0.5], [0.0, 0.0, 1.0, 1.0, 1.0], [1.0], [0.0, 0.25], [1.0, 1.0, 1.0, 0.0]]
    point, draws = _draws(contexts, 7)
    sums, counts = np.array([sum(c) for c in contexts]), np.array([len(c) for c in contexts], float)
    assert point == pytest.approx(100 * sums.sum() / counts.sum())
    idx = np.random.default_rng(7).integers(0, len(contexts), size=(RESAMPLES, len(contexts)))
    np.testing.assert_allclose(draws, 100 * sums[idx].sum(1) / counts[idx].sum(1))
    assert _interval(draws) == tuple(np.percentile(draws, [2.5, 97.5]))  # many distinct draws: exact percentiles
    assert 0.0 <= _interval(draws)[0] < point < _interval(draws)[1] <= 100.0
