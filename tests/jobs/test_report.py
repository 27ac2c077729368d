"""Report arithmetic on hand-made tables: per-repeat aggregation, mean ± s.e., cost index, plots."""

from __future__ import annotations

import dataclasses
import datetime as dt
import importlib
import json
import math

import pytest
from memloop.eval.datasets.sample import Sample
from memloop.eval.judges.aggregation import mean_se
from memloop.eval.methods.base import MethodOutput
from memloop.jobs.results.report import build_report, write_report
from memloop.jobs.results.run_data import RunData
from memloop.jobs.store.run_store import RunStore
from memloop.jobs.store.tables import now
from memloop.jobs.store.units import unit_key

from tests.jobs.prefix_tokens import shared_prefix_tokens
from tests.jobs.unit_rows import samples_row, unit_columns


def _shard(
    rs: RunStore,
    method: str,
    sample: str,
    repeat: int,
    f1s: list[float],
    bscore: float | None,
    tokens: tuple[int, int, int],
    status: str = "ok",
    chunk: int | None = None,
) -> None:
    base = unit_columns("sumie:synthetic", sample, method, repeat)
    p, c, dec = tokens
    sample_row = samples_row(
        base,
        status,
        None if status == "ok" else "engine died twice",
        output_json="{}",
        n_steps=2,
        prompt_tokens=p,
        cached_tokens=c,
        decoded_tokens=dec,
        chunk_tokens=chunk,
    )
    steps = [
        dict(base, step=i, kind="update", prompt_tokens=p // 2, cached_tokens=c // 2, decoded_tokens=dec // 2)
        for i in range(2)
    ]
    scores = [dict(base, judge="sumie-match", metric="f1", turn=i, value=v) for i, v in enumerate(f1s)]
    if bscore is not None:
        scores.append(dict(base, judge="booookscore", metric="booookscore", turn=None, value=bscore))
    rs.write_shard(
        {"samples": [sample_row], "steps": steps if status == "ok" else [], "scores": scores if status == "ok" else []}
    )


def test_mean_se() -> None:
    assert mean_se([1.0]) == (1.0, None)
    m, se = mean_se([1.0, 2.0, 3.0])
    assert m == 2.0 and se == pytest.approx(1.0 / math.sqrt(3))


def test_report_tables_are_means_over_repeats(tmp_path) -> None:
    rs = RunStore.open(str(tmp_path), "rep")
    # repeat 0: two samples; repeat 1: two samples. per-repeat mean F1 start: r0 (0.2+0.4)/2=0.3, r1 0.5
    _shard(rs, "cok", "e1", 0, [0.2, 0.6], 0.9, (1000, 600, 100))
    _shard(rs, "cok", "e2", 0, [0.4, 0.8], 0.7, (1000, 400, 100))
    _shard(rs, "cok", "e1", 1, [0.5, 0.5], 0.8, (2000, 1000, 200))
    _shard(rs, "cok", "e2", 1, [0.5, 0.7], 0.8, (2000, 1000, 200))
    _shard(rs, "go-json", "e1", 0, [0.1, 0.1], None, (500, 0, 50))
    _shard(rs, "go-json", "e2", 0, [], None, (0, 0, 0), status="failed")
    d = RunData.load(rs)
    md = build_report(d).markdown
    # F1 start: repeats 0.3 and 0.5 -> 0.400 ± 0.100; last: 0.7 and 0.6 -> 0.650 ± 0.050
    row = next(line for line in md.splitlines() if line.startswith("| cok | sumie:synthetic | sumie-match |"))
    assert "0.400 ± 0.100" in row and "0.650 ± 0.050" in row
    # BooookScore per repeat: 0.8 and 0.8 -> 0.800 ± 0.000
    assert "0.800 ± 0.000" in md
    # cost, per sample over the samples both methods finished: only e1 of repeat 0 (go-json failed e2
    # and has no repeat 1): hit 600/1000 = 60 %, cost (400 + 3 x 100)/1e6 = 0.0007
    cost_row = next(line for line in md.splitlines() if line.startswith("| cok |") and "0.0007" in line)
    assert "60.0" in cost_row and "1 / 4" in cost_row
    assert "engine died twice" in md  # failures are shown, not hidden
    rep = build_report(d)
    assert set(rep.plots) == {"f1_per_turn.png", "tokens_per_step.png"}
    assert all(p.startswith(b"\x89PNG") for p in rep.plots.values())


def test_write_report(tmp_path) -> None:
    a = RunStore.open(str(tmp_path), "a")
    _shard(a, "cok", "e1", 0, [0.2, 0.6], None, (1000, 500, 10), chunk=256)
    _shard(a, "cok", "e2", 0, [0.2, 0.6], None, (1000, 500, 10), chunk=512)
    uri, rep = write_report(a.uri)
    assert (tmp_path / "a" / "report.md").read_text() == rep.markdown
    assert (tmp_path / "a" / "cost_vs_chunk.png").is_file()
    uri, again = write_report(a.uri)  # a second report overwrites the first
    assert (tmp_path / "a" / "report.md").read_text() == again.markdown


def test_report_command(tmp_path) -> None:
    import subprocess
    import sys
    from pathlib import Path

    a = RunStore.open(str(tmp_path), "a")
    _shard(a, "cok", "e1", 0, [0.2, 0.6], 0.5, (1000, 500, 10))
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-c", "from memloop.jobs.commands.cli import main; main()", "report", a.uri],
        capture_output=True,
        text=True,
        cwd=root,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("# Run `a`") and (tmp_path / "a" / "report.md").read_text() in out.stdout
    bad = subprocess.run(
        [sys.executable, "-c", "from memloop.jobs.commands.cli import main; main()", "report", str(tmp_path / "zz")],
        capture_output=True,
        text=True,
        cwd=root,
        timeout=120,
    )
    assert bad.returncode == 2 and "holds no run" in bad.stderr
    as_json = subprocess.run(
        [sys.executable, "-c", "from memloop.jobs.commands.cli import main; main()", "report", a.uri, "--json"],
        capture_output=True,
        text=True,
        cwd=root,
        timeout=120,
    )
    data = json.loads(as_json.stdout)
    figures = {(f["judge"], f["metric"]): f for f in data["figures"]}
    assert data["units"] == [{"method": "cok", "dataset": "sumie:synthetic", "ok": 1, "failed": 0}]
    assert figures[("sumie-match", "f1:start")]["mean"] == 0.2 and figures[("sumie-match", "f1:last")]["mean"] == 0.6
    assert figures[("sumie-match", "f1:avg")]["mean"] == 0.4 and figures[("booookscore", "booookscore")]["mean"] == 0.5
    assert figures[("", "radix_cache_hit")]["mean"] == 50.0 and figures[("", "engine_cost_index")]["repeats"] == 1


def test_report_uses_each_judges_declared_aggregation(tmp_path) -> None:
    """The mean over samples is the judge's own rule (`JudgeInfo.aggregate`), not the report's."""
    import statistics

    from memloop.eval.judges import get_judge, register_judge

    rs = RunStore.open(str(tmp_path), "agg")
    for sample, value in (("e1", 0.1), ("e2", 0.2), ("e3", 0.9)):
        _shard(rs, "cok", sample, 0, [0.5], value, (100, 0, 10))
    d = RunData.load(rs)
    assert "0.400" in build_report(d).markdown  # booookscore: mean of 0.1, 0.2, 0.9
    original = get_judge("booookscore")
    register_judge(dataclasses.replace(original, aggregate_by=statistics.median))
    try:
        md = build_report(RunData.load(rs)).markdown  # figures are computed once per load
    finally:
        register_judge(original)
    row = next(line for line in md.splitlines() if line.startswith("| cok | sumie:synthetic |") and "0.200" in line)
    assert "0.400" not in row


def _units(rs: RunStore, rows: list[tuple[str, str, int, str, tuple[int, int, int], float | None]]) -> None:
    """(method, sample, repeat, status, (prompt, cached, decoded), booookscore or None) per unit; a failed
    unit with a BooookScore failed in judging (the method's output exists, its judgment does not)."""
    t = now()
    for method, sample, repeat, status, (p, c, dec), bscore in rows:
        base = unit_columns("book:x", sample, method, repeat)
        row = samples_row(
            base,
            status,
            None if status == "ok" else "judge booookscore: bad JSON",
            at=t,
            prompt_tokens=p,
            cached_tokens=c,
            decoded_tokens=dec,
        )
        scores = (
            [] if bscore is None else [dict(base, judge="booookscore", metric="booookscore", turn=None, value=bscore)]
        )
        rs.write_shard({"samples": [row], "steps": [], "scores": scores})


def test_cost_is_a_mean_per_sample_over_the_samples_every_method_finished(tmp_path) -> None:
    """Seed 002 table 3 is per book: the cost index is the mean per sample, over the same samples
    for every method compared; a sample one method failed is left out for all and named."""
    from memloop.jobs.results.report import headline

    rs = RunStore.open(str(tmp_path), "cost")
    _units(
        rs,
        [
            ("inc", "b1", 0, "ok", (1000, 0, 100), 0.5),
            ("inc", "b2", 0, "ok", (3000, 0, 300), 0.7),
            ("inc", "b3", 0, "ok", (9000, 0, 900), 0.9),
            ("prism", "b1", 0, "ok", (2000, 1000, 100), 0.6),
            ("prism", "b2", 0, "ok", (2000, 1000, 100), 0.6),
            ("prism", "b3", 0, "failed", (50, 0, 0), None),
        ],
    )
    d = RunData.load(rs)
    md = build_report(d).markdown
    # inc over b1, b2 (b3 failed for prism): per sample (1000+300)/1e6 and (3000+900)/1e6 -> mean 0.0026
    inc = next(line for line in md.splitlines() if line.startswith("| inc | book:x |") and "0.0026" in line)
    assert "2 / 3" in inc  # two of the method's three samples are in the comparison
    prism = next(line for line in md.splitlines() if line.startswith("| prism | book:x |") and "0.0013" in line)
    assert "50.0" in prism and "2 / 3" in prism
    assert "b3" in md and "prism" in md.split("b3", 1)[1].splitlines()[0]  # which sample, which method failed
    h = headline(d)
    cost = {(f["method"], f["metric"]): f for f in h["figures"] if f["judge"] == ""}
    assert cost[("inc", "engine_cost_index")]["mean"] == pytest.approx(0.0026)
    assert cost[("inc", "engine_cost_index")]["samples"] == 2 and cost[("inc", "engine_cost_index")]["total"] == 3
    # an interval over the samples compared (0.0013 and 0.0039 per sample), not only an s.e. over repeats
    ci = cost[("inc", "engine_cost_index")]
    assert 0.0013 <= ci["lo"] < 0.0026 < ci["hi"] <= 0.0039
    assert "[0.0013, 0.0039]" in inc or f"[{ci['lo']:.4f}, {ci['hi']:.4f}]" in inc
    hit = cost[("prism", "radix_cache_hit")]  # a ratio of sums: 2000 of 4000 prompt tokens cached
    assert hit["mean"] == pytest.approx(50.0) and hit["lo"] == pytest.approx(50.0) == hit["hi"]
    assert cost[("inc", "engine_encoded")]["mean"] == pytest.approx(2000.0)
    assert cost[("inc", "cost_index")]["mean"] is None  # no recorded prompts: no paper figure, never the engine's
    assert h["cost_excluded"] == [{"dataset": "book:x", "sample_id": "b3", "repeat": 0, "methods": ["prism"]}]


def test_a_failed_unit_scores_zero_in_the_headline_with_the_counts_beside(tmp_path) -> None:
    """The rule for means: a unit whose method failed scores the metric's zero (it used to leave the
    mean, which then read 0.6), the mean over judged units and the counts stand beside it."""
    from memloop.jobs.results.report import headline

    rs = RunStore.open(str(tmp_path), "judged")
    _units(
        rs,
        [
            ("inc", "b1", 0, "ok", (100, 0, 10), 0.5),
            ("inc", "b2", 0, "failed", (100, 0, 10), None),
            ("inc", "b3", 0, "ok", (100, 0, 10), 0.7),
        ],
    )
    d = RunData.load(rs)
    md = build_report(d).markdown
    header = next(line for line in md.splitlines() if line.startswith("| method | dataset | booookscore"))
    assert "booookscore: judged / total" in header
    row = next(line for line in md.splitlines() if line.startswith("| inc | book:x |") and "0.400" in line)
    assert "2 / 3" in row and "1 failed = 0" in row
    fig = next(f for f in headline(d)["figures"] if f["judge"] == "booookscore")
    assert fig["mean"] == pytest.approx(0.4) and fig["mean_judged"] == pytest.approx(0.6)
    assert (fig["judged"], fig["zeroed"], fig["total"], fig["incomplete"]) == (2, 1, 3, False)


PROMPTS = [
    "[CLASS]\nclass Book: ...\n[MEMORY]\n{}\n[TEXT]\nAnna sails to Crete.",
    "[CLASS]\nclass Book: ...\n[MEMORY]\n{}\n+ Anna sails\n[TEXT]\nAnna becomes a captain.",
    "[CLASS]\nclass Book: ...\n[MEMORY]\n{}\n+ Anna sails\n+ captain\n[TEXT]\nBob joins her.",
]


def _prompt_run(tmp_path, name: str) -> RunData:
    rs = RunStore.open(str(tmp_path), name)
    base = unit_columns("book:x", "b1", "prism", 0)
    rs.write_shard(
        {
            "samples": [samples_row(base, n_steps=3, prompt_tokens=300, cached_tokens=0, decoded_tokens=30)],
            "steps": [
                dict(base, step=i, kind="revise", prompt=p, prompt_tokens=100, cached_tokens=0, decoded_tokens=10)
                for i, p in enumerate(PROMPTS)
            ],
            "scores": [],
        }
    )
    return RunData.load(rs)


def _paper_hit(encode) -> float:
    total, shared = shared_prefix_tokens([list(encode(p)) for p in PROMPTS])
    return 100.0 * shared / total


def test_paper_cache_hit_from_recorded_prompts_next_to_the_radix_hit(tmp_path) -> None:
    """Seed 002 section 4.2: tokens of the longest prefix shared with the previous prompt of the same
    sample over all tokens encoded, computed from the steps' prompts; the engine's radix-cache hit
    (0 here) is a different number and is labelled as such. No recorded model: cl100k, and it says so."""
    from memloop.eval.tokens import cl100k_encode
    from memloop.jobs.results.report import headline

    d = _prompt_run(tmp_path, "hit")
    want = _paper_hit(cl100k_encode)
    assert 30 < want < 70
    md = build_report(d).markdown
    header = next(line for line in md.splitlines() if line.startswith("| method | dataset | samples compared"))
    assert "radix cache hit, engine (%)" in header and "prefix hit, paper (%)" in header
    row = next(line for line in md.splitlines() if line.startswith("| prism | book:x | 1 / 1 |"))
    assert f"| {want:.1f} |" in row and "| 0.0 |" in row
    assert "cl100k_base" in md.split("prefix hit, paper (%)", 1)[1]  # the table says which tokenizer counted
    fig = next(f for f in headline(d)["figures"] if f["metric"] == "prefix_hit_paper")
    assert fig["mean"] == pytest.approx(want) and fig["tokenizer"].startswith("cl100k_base")


def test_paper_cache_hit_in_the_run_models_tokens(tmp_path, smollm2_gguf) -> None:
    import pandas as pd
    from memloop.engine.model.tokenizer import load_tokenizer
    from memloop.jobs.results.report import headline

    d = _prompt_run(tmp_path, "hit-model")
    cfg = {"model": {"kind": "engine", "weights": str(smollm2_gguf)}}
    d = dataclasses.replace(d, runs=pd.DataFrame([{"config_json": json.dumps(cfg), "finished_at": now()}]))
    want = _paper_hit(load_tokenizer(smollm2_gguf).encode)
    fig = next(f for f in headline(d)["figures"] if f["metric"] == "prefix_hit_paper")
    assert fig["mean"] == pytest.approx(want) and smollm2_gguf.name in fig["tokenizer"]
    assert want != pytest.approx(_paper_hit(importlib.import_module("memloop.eval.tokens").cl100k_encode))


def test_go_rows_leave_start_and_avg_empty(tmp_path) -> None:
    """GO keeps no memory per turn: its only score is at the last turn, so "start" and "avg" stay
    empty (as in seed 000 table 1) rather than repeating the last-turn value."""
    from memloop.jobs.results.report import headline

    rs = RunStore.open(str(tmp_path), "go")
    base = unit_columns("sumie:synthetic", "e1", "go-json", 0)
    rs.write_shard(
        {
            "samples": [samples_row(base, output_json="{}", prompt_tokens=10, cached_tokens=0, decoded_tokens=1)],
            "steps": [],
            "scores": [
                dict(base, judge="sumie-exact", metric=m, turn=2, value=0.5) for m in ("precision", "recall", "f1")
            ],
        }
    )
    d = RunData.load(rs)
    row = next(
        line
        for line in build_report(d).markdown.splitlines()
        if line.startswith("| go-json | sumie:synthetic | sumie-exact")
    )
    cells = [c.strip() for c in row.strip("|").split("|")][4:]  # start P R F1, last P R F1, avg P R F1
    assert cells == ["–"] * 3 + ["0.500"] * 3 + ["–"] * 3
    figs = {f["metric"]: f["mean"] for f in headline(d)["figures"] if f["judge"] == "sumie-exact"}
    assert figs["f1:last"] == 0.5 and figs["f1:start"] is None and figs["f1:avg"] is None


def test_a_method_that_does_not_apply_is_n_a_not_a_failure_and_blocks_no_comparison(tmp_path) -> None:
    """The long-context ceiling is n/a on an input longer than the context: counted apart from failures,
    outside every judged / total, and not a reason to leave the sample out of the others' cost."""
    from memloop.jobs.results.report import headline

    rs = RunStore.open(str(tmp_path), "na")
    _units(
        rs,
        [
            ("inc", "b1", 0, "ok", (1000, 0, 100), 0.5),
            ("inc", "b2", 0, "ok", (3000, 0, 300), 0.7),
            ("long", "b1", 0, "ok", (4000, 0, 10), 0.8),
            ("long", "b2", 0, "n/a", (0, 0, 0), None),
        ],
    )
    d = RunData.load(rs)
    md = build_report(d).markdown
    assert "| method | dataset | ok | failed | n/a |" in md
    assert next(line for line in md.splitlines() if line.startswith("| long | book:x |")).startswith(
        "| long | book:x | 1 | 0 | 1 |"
    )
    h = headline(d)
    assert h["cost_excluded"] == []  # b2 is compared for inc although long does not apply to it
    cost = {(f["method"], f["metric"]): f for f in h["figures"] if f["judge"] == ""}
    assert cost[("inc", "engine_cost_index")]["samples"] == 2
    assert cost[("long", "engine_cost_index")]["samples"] == 1 and cost[("long", "engine_cost_index")]["total"] == 1
    judged = {f["method"]: (f["judged"], f["total"]) for f in h["figures"] if f["judge"] == "booookscore"}
    assert judged == {"inc": (2, 2), "long": (1, 1)}
    assert {u["method"]: u.get("n/a", 0) for u in h["units"]} == {"inc": 0, "long": 1}


def test_net_and_cost_index_follow_the_papers_prefix_definition_not_the_radix_cache(tmp_path) -> None:
    """Seed 002 table 3: Net = Total - tokens shared with the previous prompt of the same sample, cost index
    = (Net + 3 x Output) / 10^6, in one token base (the recorded prompts and outputs); the radix cache's
    reuse across samples (here it served all of the second sample's identical prompt) stays in the
    engine's own columns. The long-context row's Net is its Total, as the paper prints it."""
    from memloop.eval.tokens import cl100k_encode
    from memloop.jobs.results.report import headline

    rs = RunStore.open(str(tmp_path), "net")
    t = now()
    prompt, answer = "Whole book: Anna sails to Crete and becomes a captain. Summarize.", "Anna captains."
    for sid, cached in (("b1", 0), ("b2", 40)):
        base = unit_columns("book:x", sid, "long", 0)
        rs.write_shard(
            {
                "samples": [samples_row(base, at=t, prompt_tokens=60, cached_tokens=cached, decoded_tokens=9)],
                "steps": [
                    dict(
                        base,
                        step=0,
                        kind="final",
                        prompt=prompt,
                        output=answer,
                        prompt_tokens=60,
                        cached_tokens=cached,
                        decoded_tokens=9,
                    )
                ],
                "scores": [],
            }
        )
    d = RunData.load(rs)
    cost = {f["metric"]: f["mean"] for f in headline(d)["figures"] if f["judge"] == "" and f["method"] == "long"}
    total, out = len(cl100k_encode(prompt)), len(cl100k_encode(answer))
    assert cost["encoded"] == cost["net_encoded"] == total and cost["prefix_hit_paper"] == 0.0
    assert cost["decoded"] == out and cost["cost_index"] == pytest.approx((total + 3 * out) / 1e6)
    assert cost["engine_net_encoded"] == 40 and cost["radix_cache_hit"] == pytest.approx(100 * 20 / 60)
    d = _prompt_run(tmp_path, "net-prism")
    cost = {f["metric"]: f["mean"] for f in headline(d)["figures"] if f["judge"] == ""}
    assert cost["net_encoded"] < cost["encoded"]
    assert 1 - cost["net_encoded"] / cost["encoded"] == pytest.approx(cost["prefix_hit_paper"] / 100)


def test_printed_hit_cells_satisfy_hit_equals_one_minus_net_over_total_across_repeats() -> None:
    """Issue 46 point 12: hit was the mean of per-repeat ratios while Net and Total were means of their
    own, so repeats of different sizes broke hit = 1 - Net / Total in the printed cells."""
    import pandas as pd
    from memloop.jobs.results.cost_tables import cost_cells

    rows = []
    for rep, total, hit in ((0, 1000.0, 900.0), (1, 100.0, 0.0)):  # repeat 0 reuses 90%, repeat 1 nothing
        for sid in ("a", "b"):
            rows.append(
                dict(
                    method="m",
                    dataset="book:x",
                    repeat=rep,
                    sample_id=sid,
                    paper_total=total,
                    paper_hit=hit,
                    encoded=total,
                    net_encoded=total - hit,
                    decoded=10.0,
                    cost_index=(total - hit + 30) / 1e6,
                    engine_encoded=total,
                    engine_cached=hit,
                    engine_net_encoded=total - hit,
                    engine_decoded=10.0,
                    engine_cost_index=(total - hit + 30) / 1e6,
                )
            )
    figs = cost_cells(pd.DataFrame(rows))
    for hit, net, total in (
        ("prefix_hit_paper", "net_encoded", "encoded"),
        ("radix_cache_hit", "engine_net_encoded", "engine_encoded"),
    ):
        assert figs[hit]["mean"] == pytest.approx(100 * (1 - figs[net]["mean"] / figs[total]["mean"]))
    assert figs["prefix_hit_paper"]["mean"] == pytest.approx(100 * 900 / 1100)  # not (90 + 0) / 2


def _write_method_run(
    rs: RunStore, dataset: str, sample: Sample, method: str, out: MethodOutput, at: dt.datetime
) -> None:
    """One ok unit of `method` on `sample` (repeat 0) whose steps rows are the steps `out` (its method's run)
    recorded, written as the run writes them."""
    from types import SimpleNamespace

    from memloop.jobs.store.tables import step_row
    from memloop.jobs.store.tables import unit_columns as columns_of_unit

    unit = SimpleNamespace(
        key=unit_key(dataset, sample.id, method, 0),
        dataset=SimpleNamespace(key=dataset),
        sample=sample,
        method=SimpleNamespace(key=method),
        repeat=0,
    )
    row = samples_row(
        columns_of_unit(unit), at=at, n_steps=len(out.steps), prompt_tokens=1, cached_tokens=0, decoded_tokens=1
    )
    rs.write_shard({"samples": [row], "steps": [step_row(unit, s) for s in out.steps], "scores": []})


@pytest.mark.parametrize("name", ["prism-inplace", "prism-amendments"])
def test_table4_memory_tokens_count_the_memory_text_the_prompt_carries(tmp_path, name: str) -> None:
    """Issue 46 point 11: table 4's memory tokens counted the folded memory in compact JSON, not the text
    PRISM's prompts carry (indented in-place JSON, or the base plus amendment lines)."""
    from memloop.eval.llm import ScriptedLLM
    from memloop.eval.methods import get_method
    from memloop.eval.tokens import cl100k_count
    from memloop.jobs.results.figures import memory_figures

    from tests.methods.test_prism import BOOK, REVS

    llm = ScriptedLLM(REVS)
    out = get_method(name).run(BOOK, llm)
    carried = [
        llm.requests[i].messages[0]["content"].split("[PARTIAL_SUMMARY]\n")[-1].split("\n\n[TEXT]")[0] for i in (1, 2)
    ]  # what turns 1 and 2 were prompted with
    rs = RunStore.open(str(tmp_path), "mem")
    _write_method_run(rs, "book:x", BOOK, name, out, now())
    fig = next(f for f in memory_figures(RunData.load(rs)) if f["method"] == name)
    want = sum(cl100k_count(c) for c in carried) / 2
    assert fig["mean"] == pytest.approx(want)
    compact = [json.dumps(s.memory, separators=(",", ":"), ensure_ascii=False) for s in out.steps[:2]]
    assert want != pytest.approx(sum(cl100k_count(c) for c in compact) / 2)  # the old count differs


def test_fig3_reports_the_share_of_turns_where_k_bound(tmp_path) -> None:
    """Issue 46 point 4: per cell, the share of turns whose memory went over K and was compressed or
    trimmed, so a figure 3 whose limit never binds says so (0 %)."""
    from memloop.eval.llm import ScriptedLLM
    from memloop.eval.methods import get_method
    from memloop.jobs.results.figures import binding_figures
    from memloop.jobs.results.paper_tables import TABLES

    hotel = Sample(id="h", task="sumie", chunks=("Pool.", "Spa and gym and bar.", "Quiet."), metadata={"entity": "H"})
    rs = RunStore.open(str(tmp_path), "k")
    t = now()
    scripts = {
        "gu-json-k3": [
            '{"A": ["pool"]}',
            '{"A": ["pool deck", "spa room", "gym hall", "bar top"]}',
            '{"A": ["pool spa"]}',
            '{"A": ["pool spa", "quiet"]}',
        ],
        "gu-json-k99": [
            '{"A": ["pool"]}',
            '{"A": ["pool deck", "spa room", "gym hall", "bar top"]}',
            '{"A": ["quiet"]}',
        ],
    }
    for label, outputs in scripts.items():
        out = get_method("gu-json", memory_limit=int(label.rsplit("k", 1)[1])).run(hotel, ScriptedLLM(outputs))
        _write_method_run(rs, "sumie:synthetic", hotel, label, out, t)
    figs = {f["method"]: f["mean"] for f in binding_figures(RunData.load(rs))}
    assert figs == {"gu-json-k3": pytest.approx(1 / 3), "gu-json-k99": 0.0}  # turn 1 of 3 compressed; never
    assert any(c.metric == "k_bound" for c in TABLES["seed000-fig3"].columns)


def test_a_rejudgings_tables_name_the_judge_model_that_judged_them(tmp_path) -> None:
    """The note under a re-judging's tables named the run's own judge endpoint, not the one the re-judging
    asked (`memloop rescore --judge-model`)."""
    import pandas as pd
    from memloop.jobs.results.method_tables import table_note
    from memloop.jobs.results.run_data import Judging

    def endpoint(url: str) -> dict:
        return {"kind": "openai", "endpoint": {"base_url": url, "model": "judge-7b"}}

    cfg = {"model": endpoint("http://under-test:1/v1"), "judge_model": endpoint("http://runs-judge:2/v1")}
    d = dataclasses.replace(
        _prompt_run(tmp_path, "notes"), runs=pd.DataFrame([{"config_json": json.dumps(cfg), "finished_at": now()}])
    )
    assert "judge: judge-7b at http://runs-judge:2/v1." in table_note(d)
    j = Judging(
        "booookscore-abc",
        {"judge": {"name": "booookscore"}, "judge_model": endpoint("http://rescore:3/v1")},
        pd.DataFrame({"status": ["ok"]}),
        d.scores,
    )
    assert "judge: judge-7b at http://rescore:3/v1." in table_note(d.judged_by(j))
    assert "judge: judge-7b at http://runs-judge:2/v1." in table_note(d)  # the run's own tables unchanged
