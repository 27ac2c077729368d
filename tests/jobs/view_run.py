"""A real run for the viewer's tests: two methods (CoK's structured memory with revisions, incremental
updating's text memory) on a book and a SUMIE entity, judged by BooookScore and SUMIE, against the
scripted model, whose answers carry markup the pages must show as text."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
BOOK = ROOT / "jobs/configs/data/lighthouse-keeper.txt"
HOSTILE = '<script>alert("memloop-xss")</script> "><img src=x onerror=alert(1)> The keeper lights the lamp.'


def hostile_answer(body: dict) -> str | None:
    """Revisions for CoK in its sectioned answer (one that applies, one at a path the memory has not),
    markup in every free text answer; other structured answers are left to the scripted model's
    minimal instance."""
    fmt = body.get("response_format") or {}
    prompt = "".join(m.get("content") or "" for m in body.get("messages") or [])
    if fmt.get("type") != "json_schema" and prompt.rstrip().endswith("[THOUGHTS FOR UPDATE]"):
        # CoK answers in figure 5's sections: an update at a path the memory lacks, an addition
        # that applies (figure 5 merges the next chunk's same addition into it)
        task_class = prompt.rsplit("[CLASS]", 1)[1]  # the task's own class, after the prompt's example
        name = "attributes" if "class Summary" in task_class else "characters"
        return (
            "1. Nothing to update.\n\n[UPDATED_OBJECTS]\n"
            + json.dumps({f"$. '{name}'. 'nobody'[3]": {"update": "x"}})
            + "\n\n[THOUGHTS FOR ADD]\n1. The keeper is new.\n\n[ADDED_OBJECTS]\n"
            + json.dumps({f"$. '{name}'. '<b>keeper</b>'": {"add": [HOSTILE]}})
            + "\n"
        )
    if fmt.get("type") != "json_schema":
        return HOSTILE
    schema = fmt["json_schema"]["schema"]
    item = schema.get("items") or {}
    if "sentence_num" in (item.get("properties") or {}):  # BooookScore, batched: the first sentence confusing
        types = item["properties"]["types"]["items"]["enum"]
        return json.dumps(
            [
                {
                    "sentence_num": k,
                    "questions": "Who is <i>she</i>?" if k == 1 else None,
                    "types": [types[0]] if k == 1 else [],
                }
                for k in range(1, schema["minItems"] + 1)
            ]
        )
    props = schema.get("properties") or {}
    if "revisions" in props:
        branches = props["revisions"]["items"]["anyOf"]
        first = branches[0]["properties"]["path"]["pattern"]  # ^\$\. 'NAME'$ : the schema's first field
        name = first.split("'")[1]
        return json.dumps(
            {
                "revisions": [
                    {"path": f"$. '{name}'. '<b>keeper</b>'", "op": "add", "value": [HOSTILE]},
                    {"path": f"$. '{name}'. 'nobody'[3]", "op": "update", "value": "x"},
                ]
            }
        )
    return None


def view_config(output: Path, url: str) -> dict[str, Any]:
    model = {"kind": "openai", "endpoint": {"base_url": url, "model": "scripted", "max_concurrency": 4}}
    return {
        "name": "view-test",
        "output": str(output),
        "model": model,
        "judge_model": model,
        "judge_cpus": 0.25,
        "datasets": [
            {"task": "book", "path": str(BOOK), "options": {"chunk_tokens": 128, "max_chunks": 3}},
            {"task": "sumie", "synthetic": {"entities": 1, "seed": 0}, "options": {"max_chunks": 2}},
        ],
        "methods": [
            {"name": "cok", "options": {"max_attempts": 1, "decoding": "constrained"}},
            {"name": "inc-update", "options": {"max_attempts": 1, "word_limit": 50}},
        ],
        "judges": [{"name": "booookscore-batched", "options": {"batch_size": 4}}, {"name": "sumie-exact"}],
        "repeats": 1,
        "retries": 0,
    }


def make_view_run(output: Path) -> str:
    """Run the config against the scripted model; returns the run's URI."""
    from memloop.jobs.run.config import parse_config
    from memloop.jobs.run.driver import execute
    from memloop.jobs.run.plan import make_plan

    from tests.jobs.scripted_endpoint import scripted_endpoint

    with scripted_endpoint(hostile_answer) as (url, _):
        summary = execute(make_plan(parse_config(view_config(output, url))), log=lambda m: None)
    assert summary.computed + summary.failed > 0
    return summary.output


def make_second_run(folder: Path) -> str:
    """A second, smaller run into the same folder: SUMIE only, judged by sumie-exact (a headline score)."""
    from memloop.jobs.run.config import parse_config
    from memloop.jobs.run.driver import execute
    from memloop.jobs.run.plan import make_plan

    from tests.jobs.scripted_endpoint import attribute_table_answer, scripted_endpoint

    with scripted_endpoint(attribute_table_answer) as (url, _):
        model = {"kind": "openai", "endpoint": {"base_url": url, "model": "scripted-two", "max_concurrency": 2}}
        summary = execute(
            make_plan(
                parse_config(
                    {
                        "name": "second",
                        "output": str(folder),
                        "model": model,
                        "judge_cpus": 0.25,
                        "retries": 0,
                        "datasets": [
                            {"task": "sumie", "synthetic": {"entities": 1, "seed": 3}, "options": {"max_chunks": 2}}
                        ],
                        "methods": [{"name": "gu-json", "options": {"max_attempts": 1}}],
                        "judges": [{"name": "sumie-exact"}],
                    }
                )
            ),
            log=lambda m: None,
        )
    assert summary.computed == 1
    return summary.output
