"""Renderings (byte stability, prefix sharing, folding) and token budgets."""

from __future__ import annotations

import pytest
from memloop.eval.llm import ScriptedLLM
from memloop.eval.memory import (
    Amendments,
    BudgetError,
    Revision,
    RevisionError,
    apply_revisions,
    cl100k_count,
    fit_to_budget,
    fold_amendments,
    memory_tokens,
    parse_amendments,
    render_amendments,
    render_in_place,
    shared_prefix_chars,
    shared_prefix_tokens,
    trim_to_budget,
)
from memloop.eval.memory.errors import RevisionParseError
from memloop.eval.memory.schemas import SUMIE_SUMMARY

STEPS = [  # a HOTEL0-like run: mostly adds, some updates of early keys
    [Revision("$.attributes.Amenities", "add", ["There are two pools"])],
    [Revision("$.attributes['Food & Beverage']", "add", ["limited breakfast options"])],
    [
        Revision("$.attributes.Amenities", "update", ["There are two pools", "pub opens till midnight"]),
        Revision("$.attributes['Room Quality']", "add", ["Spacious and comfortable rooms"]),
    ],
    [Revision("$.attributes['Noise Level']", "add", ["Notable street noise at night"])],
    [Revision("$.attributes['Food & Beverage']", "update", ["limited breakfast options", "exceptional dining"])],
]


def test_in_place_rendering_is_canonical():
    m = {"attributes": {"Zeta": ["é"], "Alpha": ["x"]}}
    assert (
        render_in_place(m)
        == '{\n  "attributes": {\n    "Zeta": [\n      "é"\n    ],\n    "Alpha": [\n      "x"\n    ]\n  }\n}'
    )
    assert render_in_place(m, indent=None) == '{"attributes": {"Zeta": ["é"], "Alpha": ["x"]}}'


def test_amendments_grow_by_appending_and_in_place_reports_its_shared_prefix(capsys):
    am = Amendments(SUMIE_SUMMARY)
    memory: dict = {}
    prev_am, prev_ip = am.text(), render_in_place(memory)
    total = {"am_chars": 0, "ip_chars": 0, "am_tokens": 0, "ip_tokens": 0, "am_len": 0, "ip_len": 0}
    for step in STEPS:
        assert am.revise(step) == []
        memory = apply_revisions(memory, step, SUMIE_SUMMARY).memory
        assert am.fold() == memory
        nxt_am, nxt_ip = am.text(), render_in_place(memory)
        assert nxt_am.startswith(prev_am)  # byte-identical prefix, every step
        total["am_chars"] += shared_prefix_chars(prev_am, nxt_am)
        total["ip_chars"] += shared_prefix_chars(prev_ip, nxt_ip)
        total["am_tokens"] += shared_prefix_tokens(prev_am, nxt_am)
        total["ip_tokens"] += shared_prefix_tokens(prev_ip, nxt_ip)
        total["am_len"] += cl100k_count(prev_am)
        total["ip_len"] += cl100k_count(prev_ip)
        prev_am, prev_ip = nxt_am, nxt_ip
    assert total["am_tokens"] >= total["am_len"] - len(STEPS)  # at most a boundary token re-encoded per step
    assert total["ip_tokens"] < total["am_tokens"]
    with capsys.disabled():
        print(
            f"\n[memory] shared prefix over {len(STEPS)} steps: amendments {total['am_tokens']}/{total['am_len']} "
            f"tokens ({total['am_chars']} chars); in-place {total['ip_tokens']}/{total['ip_len']} tokens "
            f"({total['ip_chars']} chars)"
        )
    assert fold_amendments(prev_am, SUMIE_SUMMARY) == memory


def test_amendments_keep_only_accepted_revisions():
    am = Amendments(SUMIE_SUMMARY, {"attributes": {"A": ["a"]}})
    before = am.text()
    rejected = am.revise(
        [
            Revision("$.attributes.A", "add", ["again"]),
            Revision("$.attributes.B", "update", ["b"]),
            Revision("$.attributes.C", "add", [1]),
        ]
    )
    assert len(rejected) == 3 and am.text() == before


def test_later_amendments_override_earlier_ones():
    text = render_amendments(
        {"attributes": {"A": ["a"]}},
        [Revision("$.attributes.A", "update", ["a2"]), Revision("$.attributes.A", "update", ["a3"])],
    )
    assert fold_amendments(text, SUMIE_SUMMARY) == {"attributes": {"A": ["a3"]}}


def test_malformed_amendments_text_is_reported():
    with pytest.raises(RevisionParseError, match="does not start with a JSON memory"):
        parse_amendments("not json")
    with pytest.raises(RevisionParseError, match="one {path: {op: value}} object"):
        parse_amendments('{}\n{"a": 1, "b": 2}\n')
    with pytest.raises(RevisionError, match="does not apply"):
        fold_amendments('{}\n{"$.attributes.A": {"update": ["x"]}}\n', SUMIE_SUMMARY)


def test_shared_prefix_helpers():
    assert shared_prefix_chars("abcd", "abXd") == 2
    assert shared_prefix_chars("x" * 5000, "x" * 5000 + "y") == 5000
    assert shared_prefix_tokens("hello world", "hello there") == 1
    assert shared_prefix_tokens("a b", "a c", encode=lambda s: s.split()) == 1


def test_token_counts_default_to_cl100k_and_accept_any_counter():
    assert cl100k_count("hello world") == 2
    m = {"attributes": {"A": ["one two three"]}}
    assert memory_tokens(m) == cl100k_count(render_in_place(m))
    llm = ScriptedLLM([])
    assert memory_tokens(m, llm.count_tokens) == len(render_in_place(m).split())


def _big_memory(n: int) -> dict:
    return {"attributes": {f"attribute {i}": [f"detail {i}.{j} about the hotel" for j in range(4)] for i in range(n)}}


def test_fit_to_budget_calls_the_compressor_until_the_memory_fits():
    calls = []

    def keep_first_values(memory: dict, k: int) -> dict:  # what the method's compression prompt would do
        calls.append(k)
        return {"attributes": {a: v[:1] for a, v in memory["attributes"].items()}}

    big = _big_memory(6)
    k = memory_tokens(keep_first_values(big, 0)) + 1
    calls.clear()
    out = fit_to_budget(big, k, SUMIE_SUMMARY, keep_first_values)
    assert out.tokens <= k and out.compress_calls == 1 and not out.trimmed and calls == [k]
    small = {"attributes": {"A": ["a"]}}
    assert fit_to_budget(small, 200, SUMIE_SUMMARY, keep_first_values).compress_calls == 0  # under budget


def test_fit_to_budget_refuses_a_compressor_that_breaks_the_schema_and_reports_misses():
    big = _big_memory(6)
    with pytest.raises(BudgetError, match="does not conform"):
        fit_to_budget(big, 20, SUMIE_SUMMARY, lambda m, k: {"summary": "short"})
    with pytest.raises(BudgetError, match="over the budget of 20"):
        fit_to_budget(big, 20, SUMIE_SUMMARY, lambda m, k: m, max_rounds=2)
    with pytest.raises(BudgetError, match="must be positive"):
        fit_to_budget(big, 0, SUMIE_SUMMARY)
    out = fit_to_budget(big, 60, SUMIE_SUMMARY, lambda m, k: m, trim=True)
    assert out.trimmed and out.tokens <= 60 and SUMIE_SUMMARY.errors(out.memory) == []


def test_trim_drops_from_the_end_of_the_largest_containers():
    m = {"attributes": {"A": ["a"], "B": ["b1 long long long", "b2 long long long", "b3 long long long"]}}
    k = memory_tokens({"attributes": {"A": ["a"], "B": ["b1 long long long"]}})
    out = trim_to_budget(m, k)
    assert out == {"attributes": {"A": ["a"], "B": ["b1 long long long"]}}
    assert m["attributes"]["B"][2] == "b3 long long long"  # input untouched


def test_trim_shortens_the_largest_long_list_then_a_map_below_the_root_then_a_one_item_list():
    from memloop.eval.memory.budget import _largest_container

    small, big = ["s1", "s2"], ["a much longer item", "and another long one"]
    assert _largest_container({"b": big, "a": small, "m": {"k": ["v"]}}) is big  # the largest, wherever it is
    inner = {"k1": ["v"], "k2": ["w"]}
    assert _largest_container({"a": ["x"], "m": inner}) is inner  # no long list: a map, never the root itself
    in_list = {"k": "v", "k2": "w"}
    assert _largest_container({"a": [in_list]}) is in_list  # a map inside a one-item list is below the root
    one, longer = ["x"], ["a longer single item"]
    assert _largest_container({"a": one, "b": longer}) is longer  # then the largest one-item list
    root = {"a": "text"}
    assert _largest_container(root) is root and _largest_container({}) is None


def test_trim_of_a_memory_that_cannot_fit_stops_at_the_empty_memory():
    assert trim_to_budget({"a": "a long text that cannot fit", "b": ["x", "y"]}, 1) == {}
    assert trim_to_budget({}, 0) == {}


def test_trim_never_shortens_fixed_length_tuples():
    from memloop.eval.memory.schemas import COMPARISON

    m = {
        "product_names": ["a long product name here", "another long product name"],
        "values": {f"facet {i}": ["value one is long", "value two is long"] for i in range(5)},
    }
    out = fit_to_budget(m, 45, COMPARISON, trim=True)
    assert COMPARISON.errors(out.memory) == [] and out.tokens <= 45
    assert out.memory["product_names"] == m["product_names"]


def test_amendments_rebuild_from_their_text():
    am = Amendments(SUMIE_SUMMARY)
    for step in STEPS:
        am.revise(step)
    again = Amendments.from_text(am.text(), SUMIE_SUMMARY)
    assert again.text() == am.text() and again.fold() == am.fold()
    with pytest.raises(RevisionError):
        Amendments.from_text('{}\n{"$. \'attributes\'. \'A\'": {"update": ["x"]}}\n', SUMIE_SUMMARY)


def test_rendering_refuses_nan():
    with pytest.raises(RevisionError, match="NaN"):
        render_in_place({"attributes": {"A": [float("nan")]}})
