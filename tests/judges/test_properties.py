"""Invariants of the scorers over generated inputs."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from memloop.eval.judges.kgscore import Edge, kg_prf
from memloop.eval.judges.overlap import exec_match
from memloop.eval.judges.sumie import prf

cells = st.one_of(st.integers(-1000, 1000), st.floats(-1e4, 1e4, allow_nan=False), st.text("abcXY ", max_size=4))
rows = st.lists(st.lists(cells, min_size=1, max_size=3), min_size=1, max_size=5)
names = st.sampled_from(["A", "B", "C"])
preds = st.sampled_from(["helps", "fights", "loves", "meets"])
edges = st.lists(st.builds(Edge, names, st.one_of(st.none(), names), preds), max_size=8)


@settings(max_examples=150, deadline=None)
@given(rows, st.randoms())
def test_exec_match_ignores_row_and_cell_order(r, rnd):
    shuffled = [rnd.sample(row, len(row)) for row in r]
    rnd.shuffle(shuffled)
    assert exec_match(r, r) == 1.0
    assert exec_match(shuffled, r) == 1.0
    assert exec_match(r + [["__extra__"]], r) == 0.0


def _sim(a: str, b: str) -> float:
    return 1.0 if a == b else 0.5 if {a, b} == {"helps", "loves"} else 0.0


@settings(max_examples=200, deadline=None)
@given(edges, edges)
def test_kgscore_bounds_symmetry_and_identity(g, r):
    a, b = kg_prf(g, r, _sim), kg_prf(r, g, _sim)
    assert 0.0 <= a["precision"] <= 1.0 and 0.0 <= a["recall"] <= 1.0
    assert abs(a["precision"] - b["recall"]) < 1e-12 and abs(a["f1"] - b["f1"]) < 1e-12
    if g:
        same = kg_prf(list(dict.fromkeys(g)), list(dict.fromkeys(g)), _sim)
        assert same["precision"] == same["recall"] == same["f1"] == 1.0


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 6), st.integers(1, 6), st.data())
def test_sumie_prf_bounds(n_pred, n_gold, data):
    support = [set(data.draw(st.lists(st.integers(0, n_gold - 1), max_size=3))) for _ in range(n_pred)]
    v = prf([("a", "b")] * n_pred, [("g", "h")] * n_gold, support)
    assert all(0.0 <= x <= 1.0 for x in v.values())
    assert min(v["precision"], v["recall"]) <= v["f1"] + 1e-12 <= max(v["precision"], v["recall"]) + 2e-12
