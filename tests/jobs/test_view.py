"""`memloop view`: the pages of a real run (scripted model), its queries, diffs, guards and bundle."""

from __future__ import annotations

import base64
import json

import pytest
from fastapi.testclient import TestClient
from memloop.jobs.results.report import build_report
from memloop.jobs.results.run_data import RunData
from memloop.jobs.results.view.app import create_app
from memloop.jobs.results.view.bundle import write_bundle
from memloop.jobs.results.view.errors import ViewError
from memloop.jobs.results.view.pages import markdown
from memloop.jobs.results.view.runs import Query, ViewRun, bucket_of, select
from memloop.jobs.results.view.timeline import memory_diff, revisions, word_diff
from memloop.jobs.store.run_store import RunStore

from tests.web_hosts import LOOPBACK_HOST_HEADERS


@pytest.fixture(scope="module")
def run(view_run) -> ViewRun:
    return ViewRun.load(view_run)


@pytest.fixture(scope="module")
def client(run) -> TestClient:
    return TestClient(create_app([run, run]), base_url="http://127.0.0.1:8765")


def test_samples_record_the_inputs_length_in_cl100k_tokens(run) -> None:
    from memloop.eval.tokens import cl100k_count
    from memloop.jobs.run.config import parse_config
    from memloop.jobs.run.plan import make_plan

    assert run.index["input_tokens"].notna().all() and (run.index["input_tokens"] > 0).all()
    plan = make_plan(parse_config(json.loads(run.data.runs.iloc[-1]["config_json"])))
    want = {u.key: sum(cl100k_count(c) for c in u.sample.chunks) for u in plan.units}
    assert dict(zip(run.index["unit"], run.index["input_tokens"])) == want


def test_filters_sort_search_and_pages_are_computed_on_the_server(run) -> None:
    every, n = select(run, Query(size=20))
    assert n == len(run.index) == 3
    cok, n = select(run, Query(method="cok"))
    assert n == 2 and set(cok["method"]) == {"cok"}
    book, n = select(run, Query(dataset="book:lighthouse-keeper@128", q="LIGHTHOUSE"))
    assert n == 2
    scored, n = select(run, Query(score="booookscore", min=0.0, max=0.0))
    assert n == 2 and set(scored["dataset"]) == {"book:lighthouse-keeper@128"}  # unscored units are out of any range
    by_tokens, _ = select(run, Query(sort="prompt_tokens", desc=True))
    assert list(by_tokens["prompt_tokens"]) == sorted(run.index["prompt_tokens"], reverse=True)
    page2, n = select(run, Query(sort="prompt_tokens", page=2, size=20))
    assert n == 3 and page2.empty
    with pytest.raises(ViewError, match="sort by one of"):
        select(run, Query(sort="nonsense"))
    with pytest.raises(ViewError, match="score range needs a score column"):
        select(run, Query(min=0.5))
    with pytest.raises(ViewError, match="not a number"):
        Query.parse({"min": "abc"})


def test_input_length_buckets_are_powers_of_two() -> None:
    assert bucket_of(267) == (512, "256–512")
    assert bucket_of(3000) == (4096, "2k–4k")
    assert bucket_of(100) == (256, "0–256")
    assert bucket_of(None)[1] == "not recorded"


def test_scores_by_input_length_are_the_reports_figures_over_each_bucket(run) -> None:
    lengths = run.length_buckets()
    assert [b for b, _ in lengths["buckets"]] == ["0–256", "256–512"]
    row = next(r for r in lengths["rows"] if r["method"] == "cok" and r["metric"] == "booookscore")
    assert row["cells"]["256–512"]["mean"] == pytest.approx(0.0)
    assert row["cells"]["256–512"]["judged"] == 1 and row["cells"]["256–512"]["total"] == 1


def test_memory_diffs_json_patch_for_structures_words_for_text() -> None:
    d = memory_diff({"a": [1]}, {"a": [1, 2], "b": "x"})
    assert d.kind == "patch" and {"op": "add", "path": "/b", "value": "x"} in d.patch
    w = memory_diff("the keeper lit the lamp", "the keeper lit the old lamp")
    assert w.kind == "words" and ("+", "old ") in w.words
    assert word_diff("a b", "a c") == [("=", "a "), ("-", "b"), ("+", "c")]
    assert memory_diff({"a": 1}, {"a": 1}).kind == "same"


def test_revisions_are_accepted_or_rejected_with_the_recorded_reason() -> None:
    parsed = {"revisions": [{"$. 'a'": {"add": 1}}, {"$. 'b'": {"update": 2}}], "applied": [{"$. 'a'": {"add": 1}}]}
    out = revisions(parsed, ["revision rejected ($. 'b'): no such path"])
    assert [(r["path"], r["accepted"], r["reason"]) for r in out] == [
        ("$. 'a'", True, None),
        ("$. 'b'", False, "no such path"),
    ]
    assert revisions({"answer": 1}, []) is None


def test_the_unit_page_shows_the_timeline_revisions_diff_and_verdicts_as_text(run, client) -> None:
    i = run.find_unit("book:lighthouse-keeper@128", run.index.iloc[0]["sample_id"], "cok", 0)
    html = client.get(f"/run/{run.run_id}/unit/{i}").text
    assert "<script>alert" not in html and "<img src=x" not in html  # model output never becomes markup
    assert "&lt;script&gt;alert(&#34;memloop-xss&#34;)&lt;/script&gt;" in html
    # a rejected revision and why (figure 5 merges an add at an existing key, so the update of a path the
    # memory lacks is the one refused)
    assert 'class="revisions"' in html and "does not exist in the memory" in html
    assert "/characters/&lt;b&gt;keeper&lt;~1b&gt;" in html  # the RFC 6902 path of the memory change
    assert "booookscore" in html and "confusing" in html and "Who is &lt;i&gt;she&lt;/i&gt;?" in html
    data = client.get(f"/run/{run.run_id}/unit/{i}.json").json()
    assert [s["kind"] for s in data["steps"]].count("revise") == 2
    assert {v["judge"] for v in data["verdicts"]} == {"booookscore"}


def test_the_run_page_holds_the_reports_markdown_rendered_and_the_plots(run, client) -> None:
    html = client.get(f"/run/{run.run_id}/").text
    rep = build_report(RunData.load(RunStore.at(run.uri)))
    assert markdown(rep.markdown) in html  # the report's own tables, one source
    for name in rep.plots:
        assert (
            f'src="{name}"' in html and client.get(f"/run/{run.run_id}/{name}").headers["content-type"] == "image/png"
        )
    assert "Scores by input length" in html and "256–512" in html
    assert client.get(f"/run/{run.run_id}/samples?method=cok&sort=prompt_tokens&desc=1").status_code == 200
    bad = client.get(f"/run/{run.run_id}/samples?sort=nonsense")
    assert bad.status_code == 400 and "sort by one of" in bad.text


def test_compare_and_side_by_side_pages(run, client) -> None:
    html = client.get(f"/compare?a={run.run_id}&b={run.run_id}").text
    assert "Deltas (B − A)" in html and "Config diff" in html
    book = run.index[run.index["dataset"].str.startswith("book")]
    a, b = (int(x) for x in book.index[:2])
    side = client.get(f"/side?a={run.run_id}:{a}&b={run.run_id}:{b}").text
    assert "chunk 1" in side and "chunk 2" in side and "<script>alert" not in side


def test_a_request_naming_another_host_is_refused(client) -> None:
    assert client.get("/", headers={"Host": "attacker.example"}).status_code == 400  # DNS rebinding
    assert client.get("/", headers={"Host": "127.0.0.1:8765"}).status_code == 200


@pytest.mark.parametrize("host", sorted(LOOPBACK_HOST_HEADERS))
def test_ipv6_host_headers_are_answered_as_the_engine_server_answers_them(client, host) -> None:
    """The table tests/serving/test_server_hostile.py runs against the engine's server: the two must agree."""
    r = client.get("/", headers={"Host": host})
    assert r.status_code == (200 if LOOPBACK_HOST_HEADERS[host] else 400), (host, r.text[:200])
    if r.status_code == 400:
        assert "is not a name this viewer answers to" in r.text and "--allow-host NAME" in r.text


def test_a_viewer_bound_to_an_ipv6_address_answers_its_bracketed_host(run) -> None:
    """The bound address and --allow-host names went to the Host check as given, so `--host fd00::5` refused
    every request to http://[fd00::5]:8765/ (a Host header brackets an IPv6 literal)."""
    key = {"Authorization": "Bearer s3cret"}
    c = TestClient(create_app([run], host="fd00::5", api_key="s3cret", allow_hosts=("fd00::7",)))
    for host in ("[fd00::5]:8765", "[fd00::7]", "[::1]:8765"):
        assert c.get("/", headers={**key, "Host": host}).status_code == 200, host
    assert c.get("/", headers={**key, "Host": "[fd00::6]:8765"}).status_code == 400


def test_off_loopback_the_viewer_needs_a_key_and_checks_it(run) -> None:
    with pytest.raises(ViewError, match="MEMLOOP_API_KEY"):
        create_app([run], host="0.0.0.0")
    c = TestClient(create_app([run], host="10.1.2.3", api_key="s3cret"), base_url="http://10.1.2.3:8765")
    assert c.get("/").status_code == 401 and "Basic" in c.get("/").headers["www-authenticate"]
    assert c.get("/", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert c.get("/", headers={"Authorization": "Bearer s3cret"}).status_code == 200
    basic = base64.b64encode(b"me:s3cret").decode()
    assert c.get("/", headers={"Authorization": f"Basic {basic}"}).status_code == 200
    wrong = base64.b64encode(b"me:wrong").decode()
    for auth in (f"Basic {wrong}", "Basic %%%", "s3cret", "Bearer"):  # a wrong, undecodable or schemeless key
        assert c.get("/", headers={"Authorization": auth}).status_code == 401, auth


def test_the_key_comes_from_a_file_or_the_environment_never_argv(tmp_path, monkeypatch) -> None:
    from memloop.jobs.commands.view import _api_key

    monkeypatch.setenv("MEMLOOP_API_KEY", "from-env")
    assert _api_key(None) == "from-env"
    (tmp_path / "key").write_text("from-file\n")
    assert _api_key(tmp_path / "key") == "from-file"
    with pytest.raises(ViewError, match="readable file"):
        _api_key(tmp_path / "missing")


def test_the_bundle_writes_every_page_and_its_json(run, tmp_path) -> None:
    index = write_bundle(run, tmp_path / "site")
    site = index.parent
    assert "Report" in index.read_text() and (site / "samples.html").exists()
    assert len(json.loads((site / "samples.json").read_text())) == len(run.index)
    for i in range(len(run.index)):
        html = (site / "unit" / f"{i}.html").read_text()
        assert "<script>alert" not in html and 'href="../index.html"' in html
        assert json.loads((site / "unit" / f"{i}.json").read_text())["unit"] == run.index.iloc[i]["unit"]
    assert any((site / "side").iterdir())


def test_a_bundle_folder_that_cannot_be_written_is_one_line(run, tmp_path, capsys, monkeypatch) -> None:
    """Once a 49-line traceback. (As root a read-only folder is still writable: a file in the way fails for
    every user.)"""
    from memloop.jobs.results.view.errors import ViewError

    blocker = tmp_path / "a-file"
    blocker.write_text("mine\n")
    with pytest.raises(ViewError, match=r"--bundle .*a-file/site: cannot write .*a-file.*give a directory this user"):
        write_bundle(run, blocker / "site")
    assert blocker.read_text() == "mine\n"
