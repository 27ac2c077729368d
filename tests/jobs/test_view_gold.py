"""The gold beside the answer on a unit page, and the samples page's step-outcome and cause filters."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient
from memloop.jobs.results.view.app import create_app
from memloop.jobs.results.view.errors import ViewError
from memloop.jobs.results.view.gold import gold_view
from memloop.jobs.results.view.runs import Query, ViewRun, cause_choices, select, step_choices


@pytest.fixture(scope="module")
def run(view_run) -> ViewRun:
    return ViewRun.load(view_run)


@pytest.fixture(scope="module")
def client(run) -> TestClient:
    return TestClient(create_app([run]), base_url="http://127.0.0.1:8765")


def _units(run: ViewRun, task: str) -> list[int]:
    return [int(i) for i in run.index.index if run.data.samples.iloc[int(i)]["task"] == task]


def test_sumie_gold_facts_are_marked_matched_or_missed_as_the_judge_scored_them(run, client) -> None:
    from memloop.eval.judges.sumie import gold_turns

    checked = 0
    for i in _units(run, "sumie"):
        row = dict(run.unit_row(i))
        g = gold_view(run, row)
        sample = run.sample_data().get(row["dataset"], row["sample_id"])
        assert g["kind"] == "facts" and [len(t["facts"]) for t in g["turns"]] == [
            len(p) for p in gold_turns(sample.gold)
        ]
        sc = run.scores_of(row["unit"])
        recall = sc[(sc["judge"] == "sumie-exact") & (sc["metric"] == "recall")]
        if not g["judged"]:
            assert recall.empty and all(f["matched"] is None for t in g["turns"] for f in t["facts"])
            continue
        for t in g["turns"]:  # the marks are the judge's: matched / gold facts is its recall at that turn
            r = float(recall[recall["turn"] == t["turn"]]["value"].iloc[0])
            assert t["matched"] / len(t["facts"]) == pytest.approx(r)
            assert t["matched"] + t["missed"] == len(t["facts"])
        page = client.get(f"/run/{run.run_id}/unit/{i}").text
        facts = re.findall(r'<tr class="fact"><td>(.*?)</td><td class="(ok|bad|muted)">(\w[\w ]*)</td>', page)
        assert [f[0] for f in facts] == [
            f["text"].replace("'", "&#39;").replace('"', "&#34;") for t in g["turns"] for f in t["facts"]
        ]
        assert {f[2] for f in facts} <= {"matched", "missed"} and "supported by gold" in page
        assert client.get(f"/run/{run.run_id}/unit/{i}.json").json()["gold"]["turns"][0]["facts"][0]["text"]
        checked += 1
    assert checked >= 1  # at least one SUMIE unit was judged and checked


def test_a_unit_without_gold_says_so_and_missing_data_is_explained(run, client, tmp_path) -> None:
    i = _units(run, "book")[0]
    g = gold_view(run, dict(run.unit_row(i)))
    assert g == {"kind": "none", "note": "book samples carry no gold (their judges need none)"}
    assert "book samples carry no gold" in client.get(f"/run/{run.run_id}/unit/{i}").text
    from memloop.jobs.results.sample_data import SampleData

    moved = ViewRun.load(run.uri)
    moved._sample_data = SampleData(note="the run's data is not reachable here (x); run from the directory")
    assert gold_view(moved, dict(moved.unit_row(i)))["note"].startswith("the run's data is not reachable here")


def test_samples_filter_by_step_outcome_and_failure_cause(run, client) -> None:
    choices = step_choices(run)
    assert choices[:2] == ["any failed step", "no failed step"] and len(choices) > 2
    for outcome in choices[2:]:  # every unit shown has a step of that outcome, and every such unit is shown
        rows, n = select(run, Query(steps=outcome, size=500))
        want = {u for u, o in zip(run.index["unit"], run.index["outcomes"]) if outcome in o.split(",")}
        assert set(rows["unit"]) == want and n == len(want) > 0
        assert (
            set(run.data.steps[run.data.steps["unit"].isin(want) & (run.data.steps["outcome"] == outcome)]["unit"])
            == want
        )
    page = client.get(f"/run/{run.run_id}/samples").text
    assert all(f'<option value="{o}"' in page for o in choices)
    for cause in cause_choices(run):
        rows, n = select(run, Query(cause=cause, size=500))
        assert n >= 1 and set(rows["error"]) == {cause}
    with pytest.raises(ViewError, match="no unit of this run failed with it"):
        select(run, Query(cause="not a cause"))
    with pytest.raises(ViewError, match="choose one of any failed step, no failed step"):
        select(run, Query(steps="exploded"))


@pytest.mark.parametrize(
    "query, expected",
    [
        ("method=cok&stauts=failed", "the samples page has no parameter stauts; use cause, dataset, desc"),
        ("outcome=ok", "no parameter outcome"),
    ],
)
def test_unknown_samples_parameters_are_answered_not_ignored(run, client, query, expected) -> None:
    res = client.get(f"/run/{run.run_id}/samples?{query}")
    assert res.status_code == 400 and expected in res.text
    assert client.get(f"/run/{run.run_id}/samples.json?{query}").status_code == 400


def test_matched_gold_facts_follow_the_judges_records(run, monkeypatch) -> None:
    """The marks read sumie-exact's `supported_by` (0-based gold indices per turn) and sumie's recall
    checks ("turn t: reference i: ..." stated by some prediction), as those judges write them."""
    import json

    import pandas as pd

    i = _units(run, "sumie")[0]
    row = dict(run.unit_row(i))
    records = [
        {"item": "turn 1: name: x", "label": {"turn": 1, "supported_by": [0, 2]}, "source": "rule"},
        {"item": "turn 0: reference 2: language: Finnish", "label": [0], "source": "llm"},
        {"item": "turn 0: reference 1: residence: Wellington", "label": [], "source": "llm"},
    ]
    fake = pd.DataFrame(
        {
            "judge": ["sumie-exact", "sumie", "sumie"],
            "index": [0, 0, 1],
            "record_json": [json.dumps(r) for r in records],
        }
    )
    monkeypatch.setattr(run, "judgments_of", lambda unit: fake)
    g = gold_view(run, row)
    marks = [[f["matched"] for f in t["facts"]] for t in g["turns"]]
    assert marks[0][:2] == [False, True] and not any(marks[0][2:])
    assert marks[1][0] is True and marks[1][1] is False and marks[1][2] is True
    assert g["turns"][1]["matched"] == 2
