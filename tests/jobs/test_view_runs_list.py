"""`memloop view DIR`: a folder of runs as a runs list that sorts, filters and links to each run;
MEMLOOP_LOG_DIR as the default folder (and the default `output` of a config that names none)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from memloop.jobs.results.view.app import create_app
from memloop.jobs.results.view.errors import ViewError
from memloop.jobs.results.view.log_dir import RunsQuery, expand
from memloop.jobs.results.view.runs import ViewRun


@pytest.fixture(scope="module")
def folder(view_run, second_run) -> tuple[Path, str, str]:
    return Path(view_run).parent, view_run, second_run


@pytest.fixture(scope="module")
def client(folder) -> TestClient:
    runs = [ViewRun.load(u) for u in expand([str(folder[0])])]
    return TestClient(create_app(runs), base_url="http://127.0.0.1:8765")


def test_a_folder_expands_to_its_runs_and_the_log_dir_is_the_default(folder, monkeypatch, tmp_path) -> None:
    path, first, second = folder
    assert sorted(expand([str(path)])) == sorted([first, second])
    assert expand([first]) == [first]  # a run is itself
    monkeypatch.setenv("MEMLOOP_LOG_DIR", str(path))
    assert sorted(expand([])) == sorted([first, second])
    with pytest.raises(ViewError, match="neither a run nor a folder holding runs"):
        expand([str(tmp_path)])
    monkeypatch.delenv("MEMLOOP_LOG_DIR")
    with pytest.raises(ViewError, match="set MEMLOOP_LOG_DIR"):
        expand([])
    from memloop.jobs.run.config import parse_config

    monkeypatch.setenv("MEMLOOP_LOG_DIR", str(tmp_path / "logs"))
    cfg = {"datasets": [{"task": "sumie", "synthetic": {"entities": 1}}], "methods": [{"name": "gu-json"}]}
    assert parse_config(cfg).output == str(tmp_path / "logs")
    assert parse_config(dict(cfg, output="elsewhere")).output == "elsewhere"  # the config's own output wins


def _rows(html: str) -> list[str]:
    return re.findall(r'<tr class="run-row">(.*?)</tr>', html, re.S)


def _status(row: str) -> str:
    return re.search(r'<td class="(?:ok|bad)">([^<]+)</td>', row).group(1)


def test_the_runs_list_shows_sorts_filters_and_links(client, folder) -> None:
    _, first, second = folder
    first_id, second_id = first.rsplit("/", 1)[1], second.rsplit("/", 1)[1]
    page = client.get("/")
    assert page.status_code == 200
    html = page.text
    for text in (
        first_id,
        second_id,
        "scripted-two at http",
        "gu-json",
        "cok, inc-update",
        "sumie-exact f1:last: gu-json",
        "2 of 2 runs",
        f'href="/run/{first_id}/"',
        f'href="/run/{second_id}/"',
    ):
        assert text in html, text
    by_id = _rows(client.get("/?sort=run_id&desc=0").text)
    assert second_id in by_id[0] and first_id in by_id[1]  # "second-…" < "view-test-…"
    assert first_id in _rows(client.get("/?sort=run_id&desc=1").text)[0]
    only = client.get("/?q=scripted-two").text
    assert len(_rows(only)) == 1 and second_id in only and "1 of 2 runs" in only
    assert len(_rows(client.get("/?q=GU-JSON").text)) == 1  # any text column, case-insensitive
    by_score = _rows(client.get("/?sort=headline&desc=1").text)
    assert len(by_score) == 2
    from memloop.jobs.results.view.log_dir import run_row

    want = {run_row(0, ViewRun.load(u))["status"] for u in (first, second)}
    assert {_status(r) for r in _rows(html)} == want
    for st in want:  # the status filter keeps exactly the runs of that status
        kept = _rows(client.get(f"/?status={st}").text)
        assert kept and {_status(r) for r in kept} == {st}


@pytest.mark.parametrize(
    "query, expected",
    [
        ("?bogus=1", "the runs list has no parameter bogus; use desc, q, sort, status"),
        ("?sort=size", "sort by one of run_id, headline, status, model"),
        ("?status=great", "filter by one of running, failed units, incomplete, ok"),
    ],
)
def test_unknown_runs_list_parameters_are_answered(client, query, expected) -> None:
    res = client.get("/" + query)
    assert res.status_code == 400 and expected in res.text


def test_runs_query_round_trips() -> None:
    q = RunsQuery.parse({"q": "x", "status": "ok", "sort": "duration_s", "desc": "1"})
    assert RunsQuery.parse(q.params()) == q


def test_a_run_added_to_the_folder_later_appears_and_links_name_run_ids(folder, tmp_path) -> None:
    """`memloop view DIR` keeps up: a run copied into the folder after the viewer started is listed, and a link
    to it (by its id, shareable) opens even before the list was looked at again."""
    import shutil
    import time

    _, first, second = folder
    first_id, second_id = first.rsplit("/", 1)[1], second.rsplit("/", 1)[1]
    logs = tmp_path / "logs"
    shutil.copytree(first, logs / first_id)
    uris = expand([str(logs)])
    client = TestClient(
        create_app([ViewRun.load(u) for u in uris], sources=[str(logs)]), base_url="http://127.0.0.1:8765"
    )
    assert len(_rows(client.get("/").text)) == 1
    shutil.copytree(second, logs / second_id)
    page = client.get(f"/run/{second_id}/")  # a shared link to the new run: found by a rescan
    assert page.status_code == 200 and second_id in page.text
    time.sleep(2.1)  # the list looks at its folders at most every RESCAN_S seconds
    html = client.get("/").text
    assert len(_rows(html)) == 2 and "2 of 2 runs" in html
    assert f'href="/run/{first_id}/"' in html and f'href="/run/{second_id}/samples"' in html
    assert "/run/0/" not in html and "/run/1/" not in html


def test_sort_takes_the_column_headings_names(client) -> None:
    for label, column in (("duration", "duration_s"), ("score", "headline"), ("run id", "run_id")):
        by_label = client.get("/", params={"sort": label, "desc": "1"})
        assert by_label.status_code == 200, (label, by_label.text[-300:])
        assert _rows(by_label.text) == _rows(client.get("/", params={"sort": column, "desc": "1"}).text)


def test_error_pages_are_titled_by_what_went_wrong(client) -> None:
    bad = client.get("/?sort=size")
    assert bad.status_code == 400 and "<title>bad request</title>" in bad.text
    missing = client.get("/run/no-such-run/")
    assert missing.status_code == 404 and "<title>not found</title>" in missing.text
    assert "holds no run &#39;no-such-run&#39;" in missing.text
