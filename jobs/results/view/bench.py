"""`memloop bench view`: server time of the viewer's pages on a large run (a benchmark, not a test).

It writes a synthetic run of `units` units through the store (`RunStore.write_shard`, the tables'
own schemas): per unit `steps` steps with a growing JSON memory and a prompt that repeats the
previous one, BooookScore-shaped judgments and scores. It then loads it as `memloop view` does and
times, in this process, the samples page (first page, a filtered and sorted page, a late page) and
unit pages, each rendered to HTML: the server's work for one request, without the network.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Any, Callable

from memloop.jobs.results.view.pages import Pages
from memloop.jobs.results.view.runs import Query, ViewRun
from memloop.jobs.store.run_store import RunStore
from memloop.jobs.store.tables import now

METHODS = ("cok", "inc-update", "hier-merge", "prism-inplace")


def write_run(output: Path, units: int, steps: int = 4, shard_units: int = 2000) -> str:
    rs = RunStore.open(str(output), f"bench-view-{units}")
    t = now()
    batch: dict[str, list[dict[str, Any]]] = {"samples": [], "steps": [], "judgments": [], "scores": []}
    for k in range(units):
        method, sid = METHODS[k % len(METHODS)], f"book/sample-{k // len(METHODS):06d}"
        unit = {
            "unit": f"book:bench|{sid}|{method}|0",
            "dataset": "book:bench",
            "task": "book",
            "sample_id": sid,
            "method": method,
            "repeat": 0,
        }
        failed = k % 97 == 0
        batch["samples"].append(
            dict(
                unit,
                seed=k,
                status="failed" if failed else "ok",
                error="JudgeAnswerError: no valid answer" if failed else None,
                attempts=1,
                output_json=json.dumps({"answer": f"summary {k}"}),
                n_steps=steps,
                prompt_tokens=400 * steps,
                cached_tokens=300 * (steps - 1),
                decoded_tokens=50 * steps,
                chunk_tokens=512,
                input_tokens=512 * steps * (1 + k % 8),
                actor="a",
                started_at=t,
                finished_at=t,
            )
        )
        memory: dict[str, Any] = {"characters": {}, "events": {}}
        prompt = f"Summarise the book {sid}.\n"
        for s in range(steps):
            memory = json.loads(json.dumps(memory))
            memory["characters"][f"person {s}"] = [f"fact {s} of unit {k}"]
            prompt += f"Chunk {s}: " + "words of the book " * 40 + "\n"
            batch["steps"].append(
                dict(
                    unit,
                    step=s,
                    kind="revise",
                    template_id="s000-cok-update",
                    template_hash="0",
                    prompt=prompt,
                    output=json.dumps({"revisions": []}),
                    parsed_json=json.dumps(
                        {
                            "revisions": [{f"$. 'characters'. 'person {s}'": {"add": [f"fact {s}"]}}],
                            "applied": [{f"$. 'characters'. 'person {s}'": {"add": [f"fact {s}"]}}],
                        }
                    ),
                    memory_json=json.dumps(memory),
                    prompt_tokens=400,
                    cached_tokens=300 if s else 0,
                    decoded_tokens=50,
                    error=None,
                    extra_json=json.dumps({"attempts": 1, "failures": [], "chunk_index": s, "ok": True}),
                )
            )
        if not failed:
            for i in range(3):
                batch["judgments"].append(
                    dict(
                        unit,
                        judge="booookscore",
                        index=i,
                        record_json=json.dumps(
                            {
                                "item": f"Sentence {i}.",
                                "label": {"questions": None, "types": []},
                                "valid": True,
                                "source": "llm",
                            }
                        ),
                    )
                )
            for metric, value in (("booookscore", (k % 10) / 10), ("confusing", 0.0), ("sentences", 3.0)):
                batch["scores"].append(dict(unit, judge="booookscore", metric=metric, turn=None, value=value))
        if len(batch["samples"]) == shard_units or k == units - 1:
            rs.write_shard(batch)
            batch = {key: [] for key in batch}
    rs.write_manifest(
        {
            "invocation": "bench",
            "output": str(output),
            "config_json": json.dumps({"name": "bench-view"}),
            "started_at": t,
            "finished_at": t,
            "samples": units,
            "computed": units,
            "skipped": 0,
            "failed": sum(k % 97 == 0 for k in range(units)),
        }
    )
    return rs.uri


def _time(fn: Callable[[], str], repeat: int) -> dict[str, float]:
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return {"median_s": statistics.median(ts), "max_s": max(ts)}


def bench(output: Path, units: int = 20000, repeat: int = 5) -> dict[str, Any]:
    t0 = time.perf_counter()
    uri = write_run(output, units)
    written = time.perf_counter() - t0
    t0 = time.perf_counter()
    run = ViewRun.load(uri)
    loaded = time.perf_counter() - t0
    pages = Pages.of([run])
    n = len(run.index)
    return {
        "units": n,
        "write_s": written,
        "load_s": loaded,
        "samples_first_page": _time(lambda: pages.samples(0, Query()), repeat),
        "samples_filtered_sorted": _time(
            lambda: pages.samples(
                0, Query(method="cok", score="booookscore", min=0.5, sort="booookscore", desc=True, q="sample-00")
            ),
            repeat,
        ),
        "samples_last_page_500": _time(lambda: pages.samples(0, Query(page=n // 500, size=500)), repeat),
        "unit_page": _time(lambda: pages.unit(0, n // 2), repeat),
        "unit_page_last": _time(lambda: pages.unit(0, n - 1), repeat),
    }
