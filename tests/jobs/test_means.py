"""The rule for means (docs/judges.md, "Means and intervals") on hand-made run tables: failed units
score 0, n/a stays out and is counted, infrastructure failures make a cell incomplete, every repeat
counts, every column covers the same samples, and each cell carries a seeded bootstrap interval."""

from __future__ import annotations

import math

import numpy as np
import pytest
from memloop.eval.judges.aggregation import INCOMPLETE, JUDGED, ZERO, Unit, figure, paired_difference
from memloop.jobs.results.report import build_report, headline
from memloop.jobs.results.run_data import RunData
from memloop.jobs.store.run_store import RunStore
from memloop.jobs.store.tables import now

from tests.jobs.unit_rows import manifest_row, samples_row, unit_columns


def _unit(
    rs: RunStore,
    method: str,
    sample: str,
    repeat: int,
    status: str = "ok",
    scores: dict[str, float] | None = None,
    error: str | None = None,
    failure: str | None = None,
) -> None:
    base = unit_columns("book:x", sample, method, repeat)
    row = samples_row(base, status, error, failure=failure)
    rows = [dict(base, judge="rouge", metric=m, turn=None, value=v) for m, v in (scores or {}).items()]
    rs.write_shard({"samples": [row], "steps": [], "scores": rows})


def _fig(d: RunData, method: str, metric: str) -> dict:
    return next(f for f in headline(d)["figures"] if f["method"] == method and f["metric"] == metric)


def test_infrastructure_failures_are_incomplete_not_zero_and_n_a_stays_out(tmp_path) -> None:
    rs = RunStore.open(str(tmp_path), "states")
    _unit(rs, "inc", "b1", 0, scores={"rouge1": 0.6})
    _unit(rs, "inc", "b2", 0, "failed", error="MethodError: no JSON dict found", failure="method")
    _unit(rs, "inc", "b3", 0, "failed", error="ActorDiedError: the engine actor died", failure="infrastructure")
    _unit(rs, "inc", "b4", 0, "n/a", error="input longer than the context")
    # a run written before `samples.failure` existed: the error's type says it was the infrastructure
    _unit(rs, "inc", "b5", 0, "failed", error="ConnectionError: endpoint refused the connection")
    d = RunData.load(rs)
    f = _fig(d, "inc", "rouge1")
    assert f["mean"] == pytest.approx(0.3)  # (0.6 + 0) / 2: the method failure is a zero, the others are not
    assert (f["judged"], f["zeroed"], f["n/a"], f["incomplete_units"], f["total"]) == (1, 1, 1, 2, 4)
    assert f["incomplete"] is True and headline(d)["incomplete"] is True
    row = next(
        line
        for line in build_report(d).markdown.splitlines()
        if line.startswith("| inc | book:x |") and "0.300" in line
    )
    assert "incomplete: 2 unknown" in row and "1 failed = 0" in row and "1 n/a" in row


def test_a_judge_that_left_an_ok_unit_unscored_makes_the_cell_incomplete(tmp_path) -> None:
    rs = RunStore.open(str(tmp_path), "unjudged")
    _unit(rs, "inc", "b1", 0, scores={"rouge1": 0.6})
    _unit(rs, "inc", "b2", 0)  # ok, but its judge failed: no score row
    f = _fig(RunData.load(rs), "inc", "rouge1")
    assert f["mean"] == pytest.approx(0.6) and f["incomplete_units"] == 1 and f["incomplete"]


def test_a_repeat_whose_units_all_failed_counts_as_zero_not_dropped(tmp_path) -> None:
    """Repeat 1 failed everywhere: its mean is 0 and the ± is over both repeats (it used to be NaN,
    and the figure read 0.5 with no ±)."""
    rs = RunStore.open(str(tmp_path), "repeats")
    for s, v in (("b1", 0.4), ("b2", 0.6)):
        _unit(rs, "inc", s, 0, scores={"rouge1": v})
        _unit(rs, "inc", s, 1, "failed", error="MethodError: nothing parsed", failure="method")
    f = _fig(RunData.load(rs), "inc", "rouge1")
    assert f["repeats"] == 2 and f["mean"] == pytest.approx(0.25) and f["se"] == pytest.approx(0.25)
    assert f["repeats_without_result"] == 0 and not f["incomplete"]


def test_every_column_and_method_covers_the_same_samples_and_left_out_ones_are_named(tmp_path) -> None:
    rs = RunStore.open(str(tmp_path), "common")
    _unit(rs, "inc", "b1", 0, scores={"rouge1": 0.2, "rouge2": 0.1})
    _unit(rs, "inc", "b2", 0, scores={"rouge1": 0.4, "rouge2": 0.3})
    _unit(rs, "prism", "b1", 0, scores={"rouge1": 0.6})  # its rouge2 was never scored
    d = RunData.load(rs)
    h = headline(d)
    assert h["score_excluded"] == [{"dataset": "book:x", "sample_id": "b2", "methods": ["prism"]}]
    assert _fig(d, "inc", "rouge1")["mean"] == pytest.approx(0.2)  # b2 is out for every method
    p2 = _fig(d, "prism", "rouge2")
    assert p2["total"] == 1 and p2["incomplete_units"] == 1  # the same unit set, its gap shown
    assert "b2: none for prism" in build_report(d).markdown


def test_cells_carry_a_seeded_bootstrap_interval_clustered_by_sample(tmp_path) -> None:
    rng = np.random.default_rng(3)
    values = rng.uniform(0, 1, 12)
    one, two = RunStore.open(str(tmp_path), "one"), RunStore.open(str(tmp_path), "two")
    for i, v in enumerate(values):
        _unit(one, "inc", f"b{i}", 0, scores={"rouge1": float(v)})
        for r in (0, 1):  # the same values in two repeats: clustering by sample gives the same interval
            _unit(two, "inc", f"b{i}", r, scores={"rouge1": float(v)})
    f1, f2 = _fig(RunData.load(one), "inc", "rouge1"), _fig(RunData.load(two), "inc", "rouge1")
    assert f1["lo"] < values.mean() < f1["hi"] and f1["se"] is None
    assert (f2["lo"], f2["hi"]) == (f1["lo"], f1["hi"]) and f2["se"] == pytest.approx(0.0)
    assert _fig(RunData.load(one), "inc", "rouge1")["lo"] == f1["lo"]  # seeded: the same every report
    md = build_report(RunData.load(one)).markdown
    assert f"[{f1['lo']:.3f}, {f1['hi']:.3f}]" in md


def test_figure_and_paired_difference_directly() -> None:
    units = [Unit(0, "a", JUDGED, 1.0), Unit(0, "b", ZERO), Unit(0, "c", INCOMPLETE)]
    f = figure(units)
    assert f["mean"] == 0.5 and f["incomplete"] and f["total"] == 3
    a = [Unit(0, s, JUDGED, 0.5) for s in "abcd"]
    b = [Unit(0, s, JUDGED, 0.7) for s in "abc"] + [Unit(0, "d", ZERO)]
    got = paired_difference(a, b)
    assert got["n"] == 4 and got["delta"] == pytest.approx((0.2 * 3 - 0.5) / 4)
    assert got["lo"] <= got["delta"] <= got["hi"]
    assert math.isnan(figure([])["mean"] or math.nan)


def test_a_paper_table_prints_the_stated_comparison_and_who_judged(tmp_path) -> None:
    """seed001-table1 states KG against No-KG: the Δ row is the paired difference on the common
    samples (a failed unit as 0), by the function `memloop compare` uses; the note names the model
    under test, the judge (self-judged here) and the paper's judge."""
    import json

    from memloop.jobs.results.paper_tables import TABLES

    rs = RunStore.open(str(tmp_path), "kg")
    t = now()
    for i, (a, b) in enumerate(((0.20, 0.25), (0.30, 0.33), (0.10, None), (0.40, 0.46))):
        for method, v in (("no-kg", a), ("kg-retrieval", b)):
            base = unit_columns("arxiv:x", f"s{i}", method, 0)
            status = "ok" if v is not None else "failed"
            error = None if v is not None else "MethodError: no summary"
            failure = None if v is not None else "method"
            row = samples_row(
                base, status, error, failure=failure, at=t, prompt_tokens=10, cached_tokens=0, decoded_tokens=1
            )
            rs.write_shard(
                {
                    "samples": [row],
                    "steps": [],
                    "scores": [] if v is None else [dict(base, judge="rouge", metric="rouge1", turn=None, value=v)],
                }
            )
    cfg = {
        "name": "kg",
        "paper_tables": ["seed001-table1"],
        "model": {"kind": "engine", "weights": "qwen2.5-coder-0.5b"},
        "judge_model": {"kind": "engine"},
    }
    rs.write_manifest(
        manifest_row(
            rs.store.uri,
            "i1",
            samples=8,
            computed=8,
            failed=1,
            config_json=json.dumps(cfg),
            started_at=t,
            finished_at=t,
        )
    )
    d = RunData.load(rs)
    (laid,) = headline(d)["paper_tables"]
    (diff,) = laid["differences"]
    got = diff["cells"]["ROUGE-1"]
    want = 100 * np.mean([0.05, 0.03, -0.10, 0.06])  # s2 failed for KG: 0 − 0.10
    assert got["delta"] == pytest.approx(want) and got["n"] == 4 and got["lo"] <= want <= got["hi"]
    md = build_report(d).markdown
    assert "Δ KG − No-KG (paired)" in md and f"{want:+.2f} [" in md
    assert "Model under test: qwen2.5-coder-0.5b; judge: qwen2.5-coder-0.5b (self-judged" in laid["note"]
    assert "the paper's judge: Mixtral 8x7B" in laid["note"]
    assert "Gemini-Pro" in TABLES["seed000-table1"].note and "Gemini-Ultra" not in TABLES["seed000-table1"].note


def test_the_report_header_counts_each_state_apart(tmp_path) -> None:
    """One ok and one n/a unit are "1 ok, 1 n/a", not "1 failed"; a method failure and an
    infrastructure failure are told apart as the cells tell them (0 vs unknown)."""
    rs = RunStore.open(str(tmp_path), "header")
    _unit(rs, "inc", "b1", 0, scores={"rouge1": 0.6})
    _unit(rs, "inc", "b2", 0, "n/a", error="input longer than the context")
    assert "2 units (1 ok, 1 n/a), one repeat" in build_report(RunData.load(rs)).markdown
    _unit(rs, "inc", "b3", 0, "failed", error="MethodError: nothing parsed", failure="method")
    _unit(rs, "inc", "b4", 0, "failed", error="LLMHTTPError: answered 401", failure="infrastructure")
    assert "4 units (1 ok, 1 failed, 1 incomplete, 1 n/a), one repeat" in build_report(RunData.load(rs)).markdown


def test_unit_values_keep_whole_sample_metrics_and_recompute_sumies_turn_summaries() -> None:
    """One value per unit and metric: whole-sample metrics as scored, SUMIE's per-turn metrics as
    start / last / avg of their turns (in the order the samples first appear), the judge's own stored
    summaries left out (they are recomputed), whatever order the rows came in."""
    import pandas as pd
    from memloop.jobs.results.cells import unit_values

    base = {"method": "m", "dataset": "d", "judge": "sumie-exact", "repeat": 0}
    rows = [
        dict(base, sample_id="b", metric="f1", turn=1.0, value=0.6),
        dict(base, sample_id="b", metric="f1", turn=0.0, value=0.2),
        dict(base, sample_id="a", metric="f1", turn=0.0, value=1.0),
        dict(base, sample_id="b", metric="avg:f1", turn=None, value=0.99),  # a stored summary: recomputed
        dict(base, sample_id="a", metric="turns", turn=None, value=1.0),  # a whole-sample metric
        dict(base, judge="rouge", sample_id="a", metric="rouge1", turn=None, value=0.25),
        dict(base, sample_id="a", metric="recall", turn=None, value=0.3),
    ]  # a per-turn metric without its turn
    rows = rows[-1:] + rows[:-1]
    got = unit_values(pd.DataFrame(rows))
    assert list(got.index) == list(range(len(got)))
    assert list(zip(got["sample_id"], got["judge"], got["metric"], got["value"])) == [
        ("a", "sumie-exact", "turns", 1.0),
        ("a", "rouge", "rouge1", 0.25),
        ("b", "sumie-exact", "f1:start", 0.2),
        ("b", "sumie-exact", "f1:last", 0.6),
        ("b", "sumie-exact", "f1:avg", pytest.approx(0.4)),
        ("a", "sumie-exact", "f1:start", 1.0),
        ("a", "sumie-exact", "f1:last", 1.0),
        ("a", "sumie-exact", "f1:avg", 1.0),
    ]
    assert unit_values(pd.DataFrame(rows[5:])).shape == (2, 7)  # no per-turn rows: the whole-sample ones only


def test_a_cost_cell_with_an_unknown_unit_value_is_undefined_not_biased() -> None:
    import pandas as pd
    from memloop.jobs.results.cells import cost_figure

    units = pd.DataFrame(
        {
            "repeat": [0, 0],
            "sample_id": ["a", "b"],
            "tokens": [10.0, float("nan")],
            "hits": [2.0, 4.0],
            "prompts": [10.0, 20.0],
        }
    )
    assert cost_figure(units, "tokens") == figure([])  # no weight: the NaN value alone decides
    assert cost_figure(units, "hits", "prompts")["mean"] == pytest.approx(6 / 30)  # a ratio of sums
    assert cost_figure(units.assign(prompts=[10.0, float("nan")]), "hits", "prompts") == figure([])
