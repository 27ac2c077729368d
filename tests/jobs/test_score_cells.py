"""The results' score cells (jobs/results/cells.py: `unit_states`, `common_units`, `score_columns`, `score_cells`,
`score_figures`) on a run written through the run store: which units each (method, dataset, judge, metric) cell
counts and in which state, the samples left out, the columns a failed judge keeps, and each cell's mean, s.e. and
counts, every number worked out by hand below (scripts/mutation.py's `cells-scores` target runs this file).

The run: two datasets, two methods written in reverse name order (zeta first), two repeats of alpha on the book.

    book:b        s1            s2                   s3                          s4       s5
      zeta r0     0.6           0.5                  ok, rouge failed            n/a      -
      alpha r0    0.4           failed (method)      failed (infrastructure,     0.3      0.9
                                                     recorded; its text a 401)
      alpha r1    0.8           failed, old row:     failed, old row:            0.1      -
                                a MethodError        a ConnectionError
    arxiv:a       a2 (written first)   a1            a3
      zeta r0     0.9                  0.7           0.2
      alpha r0    failed (method)      failed        -

rouge1 as above; rougeL NaN wherever rouge scored (a metric undefined for the output); kgscore failed on
every arxiv unit it judged.
"""

from __future__ import annotations

import math

import pytest
from memloop.eval.judges.aggregation import INCOMPLETE, JUDGED, NOT_APPLICABLE, ZERO, Unit
from memloop.jobs.results.cells import common_units, score_cells, score_figures, unit_states
from memloop.jobs.results.run_data import RunData
from memloop.jobs.store.run_store import RunStore
from memloop.jobs.store.tables import judge_failure_row
from memloop.jobs.store.units import unit_key

from tests.jobs.unit_rows import samples_row, unit_columns

NAN = math.nan
BOOK, ARXIV = "book:b", "arxiv:a"


def _unit(
    rs: RunStore,
    dataset: str,
    method: str,
    sample: str,
    repeat: int = 0,
    status: str = "ok",
    rouge1: float | None = None,
    failed_judges: tuple[str, ...] = (),
    error: str | None = None,
    failure: str | None = None,
) -> None:
    """One unit's shard as the run writes it: its samples row, its judges' scores and its judges' failure rows."""
    base = unit_columns(dataset, sample, method, repeat)
    row = samples_row(base, status, error, failure=failure)
    scores = (
        []
        if rouge1 is None
        else [dict(base, judge="rouge", metric=m, turn=None, value=v) for m, v in (("rouge1", rouge1), ("rougeL", NAN))]
    )
    judgments = [
        dict(base, **judge_failure_row(j, "JudgeError: the gold is not a reference summary")) for j in failed_judges
    ]
    rs.write_shard({"samples": [row], "steps": [], "scores": scores, "judgments": judgments})


def _method_failure(rs: RunStore, dataset: str, method: str, sample: str, repeat: int = 0) -> None:
    _unit(rs, dataset, method, sample, repeat, "failed", error="MethodError: no JSON dict found", failure="method")


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> RunData:
    rs = RunStore.open(str(tmp_path_factory.mktemp("cells")), "cells")
    _unit(rs, BOOK, "zeta", "s1", rouge1=0.6)
    _unit(rs, BOOK, "alpha", "s1", rouge1=0.4)
    _unit(rs, BOOK, "alpha", "s1", 1, rouge1=0.8)
    _unit(rs, BOOK, "zeta", "s2", rouge1=0.5)
    _method_failure(rs, BOOK, "alpha", "s2")
    # written before `samples.failure`: its error text says what failed
    _unit(rs, BOOK, "alpha", "s2", 1, "failed", error="MethodError: nothing parsed")
    _unit(rs, BOOK, "zeta", "s3", failed_judges=("rouge",))  # ok, but its judge failed: unknown, not zero
    # the recorded failure decides, whatever the text reads like (an endpoint's 401 is not the method's doing)
    _unit(rs, BOOK, "alpha", "s3", 0, "failed", error="EndpointError: HTTP 401 Unauthorized", failure="infrastructure")
    _unit(rs, BOOK, "alpha", "s3", 1, "failed", error="ConnectionError: endpoint refused the connection")
    _unit(rs, BOOK, "zeta", "s4", status="n/a", error="input longer than the context")
    _unit(rs, BOOK, "alpha", "s4", rouge1=0.3)
    _unit(rs, BOOK, "alpha", "s4", 1, rouge1=0.1)
    _unit(rs, BOOK, "alpha", "s5", rouge1=0.9)  # zeta wrote no s5: out for both
    _unit(rs, ARXIV, "zeta", "a2", rouge1=0.9, failed_judges=("kgscore",))
    _method_failure(rs, ARXIV, "alpha", "a2")
    _unit(rs, ARXIV, "zeta", "a1", rouge1=0.7, failed_judges=("kgscore",))
    _method_failure(rs, ARXIV, "alpha", "a1")
    _unit(rs, ARXIV, "zeta", "a3", rouge1=0.2, failed_judges=("kgscore",))  # alpha wrote no a3
    return RunData.load(rs)


EXCLUDED = [
    {"dataset": ARXIV, "sample_id": "a3", "methods": ["alpha"]},
    {"dataset": BOOK, "sample_id": "s5", "methods": ["zeta"]},
]


def test_each_unit_is_in_the_state_its_recorded_failure_or_its_error_text_says(run: RunData) -> None:
    states = unit_states(run.samples).set_index("unit")["base"]
    key = lambda m, s, r=0: unit_key(BOOK, s, m, r)  # noqa: E731
    assert states[key("alpha", "s2")] == ZERO and states[key("alpha", "s2", 1)] == ZERO
    assert states[key("alpha", "s3")] == INCOMPLETE and states[key("alpha", "s3", 1)] == INCOMPLETE
    assert states[key("zeta", "s4")] == "n/a" and states[key("zeta", "s3")] == "ok"
    # a samples table without the `failure` column (the rows only): the error text alone decides, so the
    # recorded infrastructure failure whose text names no transient error reads as the method's
    old = unit_states(run.samples.drop(columns=["failure"])).set_index("unit")["base"]
    assert old[key("alpha", "s3")] == ZERO and old[key("alpha", "s3", 1)] == INCOMPLETE
    assert old[key("alpha", "s2", 1)] == ZERO


def test_the_common_samples_are_kept_for_every_method_and_the_rest_named_in_order(run: RunData) -> None:
    units, excluded = common_units(run.samples)
    assert excluded == EXCLUDED  # by dataset, then sample: arxiv first though written last
    assert sorted(set(zip(units["dataset"], units["sample_id"]))) == [
        (ARXIV, "a1"),
        (ARXIV, "a2"),
        (BOOK, "s1"),
        (BOOK, "s2"),
        (BOOK, "s3"),
        (BOOK, "s4"),
    ]
    assert len(units) == 2 * 2 + 4 + 4 * 2  # arxiv 2 x 2 methods; book zeta 4, alpha 4 x 2 repeats
    # the run store gives the rows sorted by unit; in any other order the same units come out, in the same order
    again, excluded_again = common_units(run.samples.iloc[::-1])
    assert excluded_again == EXCLUDED
    assert list(zip(again["dataset"], again["sample_id"])) == list(zip(units["dataset"], units["sample_id"]))
    # two methods with no sample in common: nothing is compared, every sample is named
    s = run.samples
    disjoint = s[(s["sample_id"] == "s5") | ((s["sample_id"] == "s4") & (s["method"] == "zeta"))]
    none, named = common_units(disjoint)
    assert none.empty and list(none.columns) == [*s.columns, "base"]
    assert named == [
        {"dataset": BOOK, "sample_id": "s4", "methods": ["alpha"]},
        {"dataset": BOOK, "sample_id": "s5", "methods": ["zeta"]},
    ]
    assert score_cells(disjoint, run.scores) == ({}, {}, named)


def test_each_cell_holds_its_units_in_their_states(run: RunData) -> None:
    cells, repeats, excluded = score_cells(run.samples, run.scores, run.judge_failures)
    assert excluded == EXCLUDED
    assert repeats == {("alpha", ARXIV): [0], ("alpha", BOOK): [0, 1], ("zeta", ARXIV): [0], ("zeta", BOOK): [0]}
    # every column of the dataset for every method; kgscore failed on every arxiv unit and keeps its headline
    # columns there; rouge failed on one book unit only and keeps just what it scored
    arxiv_cols = [
        ("kgscore", "f1"),
        ("kgscore", "precision"),
        ("kgscore", "recall"),
        ("rouge", "rouge1"),
        ("rouge", "rougeL"),
    ]
    book_cols = [("rouge", "rouge1"), ("rouge", "rougeL")]
    assert list(cells) == [
        (m, ds, j, c)
        for m in ("alpha", "zeta")
        for ds, cols in ((ARXIV, arxiv_cols), (BOOK, book_cols))
        for j, c in cols
    ]
    J, Z, I, NA = JUDGED, ZERO, INCOMPLETE, NOT_APPLICABLE  # noqa: E741
    assert cells[("alpha", BOOK, "rouge", "rouge1")] == [
        Unit(0, "s1", J, 0.4),
        Unit(1, "s1", J, 0.8),
        Unit(0, "s2", Z),
        Unit(1, "s2", Z),
        Unit(0, "s3", I),
        Unit(1, "s3", I),
        Unit(0, "s4", J, 0.3),
        Unit(1, "s4", J, 0.1),
    ]
    assert cells[("zeta", BOOK, "rouge", "rouge1")] == [
        Unit(0, "s1", J, 0.6),
        Unit(0, "s2", J, 0.5),
        Unit(0, "s3", I),
        Unit(0, "s4", NA),
    ]
    assert cells[("zeta", ARXIV, "rouge", "rouge1")] == [Unit(0, "a1", J, 0.7), Unit(0, "a2", J, 0.9)]
    for metric in ("f1", "precision", "recall"):
        assert cells[("zeta", ARXIV, "kgscore", metric)] == [Unit(0, "a1", I), Unit(0, "a2", I)]
        assert cells[("alpha", ARXIV, "kgscore", metric)] == [Unit(0, "a1", Z), Unit(0, "a2", Z)]
    undefined = cells[("zeta", BOOK, "rouge", "rougeL")]
    assert [(u.sample, u.state) for u in undefined] == [("s1", J), ("s2", J), ("s3", I), ("s4", NA)]
    assert all(math.isnan(u.value) for u in undefined[:2])
    # without the judges' failure rows (none passed) kgscore has no column at all
    bare, _, _ = score_cells(run.samples, run.scores)
    assert list(bare) == [k for k in cells if k[2] != "kgscore"]
    # a run with units but no score and no judge failure: no cell, and no repeats either
    assert score_cells(run.samples, run.scores.iloc[0:0]) == ({}, {}, EXCLUDED)


def _fig(figs: list[dict], method: str, ds: str, judge: str, metric: str) -> dict:
    [f] = [f for f in figs if (f["method"], f["dataset"], f["judge"], f["metric"]) == (method, ds, judge, metric)]
    return f


def test_each_cells_figure_by_hand(run: RunData) -> None:
    figs, excluded = score_figures(run.samples, run.scores, run.judge_failures)
    assert excluded == EXCLUDED and len(figs) == 14
    # alpha on the book: per repeat the mean over the counted samples (judged, or 0 for a method failure),
    # then the mean of the repeats and its s.e. (sd over the 2 repeats, n - 1, over sqrt 2)
    r0, r1 = (0.4 + 0.0 + 0.3) / 3, (0.8 + 0.0 + 0.1) / 3
    f = _fig(figs, "alpha", BOOK, "rouge", "rouge1")
    assert f["mean"] == pytest.approx((r0 + r1) / 2)
    m = (r0 + r1) / 2
    assert f["se"] == pytest.approx(math.sqrt(((r0 - m) ** 2 + (r1 - m) ** 2) / (2 - 1) / 2))
    assert (f["judged"], f["zeroed"], f["incomplete_units"], f["n/a"], f["total"], f["repeats"]) == (4, 2, 2, 0, 8, 2)
    assert f["incomplete"] is True and f["samples"] == 3
    f = _fig(figs, "zeta", BOOK, "rouge", "rouge1")
    assert f["mean"] == pytest.approx((0.6 + 0.5) / 2) and f["se"] is None
    assert (f["judged"], f["zeroed"], f["incomplete_units"], f["n/a"], f["total"]) == (2, 0, 1, 1, 3)
    f = _fig(figs, "zeta", ARXIV, "rouge", "rouge1")
    assert f["mean"] == pytest.approx(0.8) and 0.7 <= f["lo"] < f["hi"] <= 0.9 and not f["incomplete"]
    # a method that failed on every unit: its zeros are its figure (not "undefined")
    f = _fig(figs, "alpha", ARXIV, "rouge", "rouge1")
    assert f["mean"] == 0.0 and (f["judged"], f["zeroed"]) == (0, 2)
    assert _fig(figs, "alpha", ARXIV, "kgscore", "f1")["mean"] == 0.0
    # the judge failed everywhere: nothing known
    f = _fig(figs, "zeta", ARXIV, "kgscore", "recall")
    assert f["mean"] is None and (f["incomplete_units"], f["total"]) == (2, 2) and f["incomplete"]
    # a metric undefined wherever it was judged has no figure, rather than the zeros of the failed units
    for method, ds in (("alpha", BOOK), ("zeta", BOOK), ("zeta", ARXIV)):
        f = _fig(figs, method, ds, "rouge", "rougeL")
        assert (f["mean"], f["se"], f["lo"], f["hi"]) == (None, None, None, None)
    assert _fig(figs, "alpha", ARXIV, "rouge", "rougeL")["mean"] == 0.0  # nothing judged: only its zeros
    assert _fig(figs, "alpha", BOOK, "rouge", "rougeL")["zeroed"] == 2
