"""`memloop methods` and `memloop judges`: what a run config (and `memloop rescore`) can name."""

from __future__ import annotations

import json
import re
from typing import Any

import typer


def methods(as_json: bool = typer.Option(False, "--json", help="Print one JSON object as the last line.")) -> None:
    """List the methods a run config can name, with their prompt template hashes."""
    from memloop.eval.methods import template_manifest

    manifest = template_manifest()
    if as_json:
        print(json.dumps(manifest, sort_keys=True))
        return
    for name, templates in manifest.items():
        print(name)
        for tid, sha in templates.items():
            print(f"  {tid:32s} {sha[:16]}")


def _type_name(hint: Any) -> str:
    """`int`, `int | None`, `Sequence[str] | None`: a type hint as a reader writes it."""
    text = hint.__name__ if isinstance(hint, type) else str(hint)
    text = re.sub(r"\b(typing|collections\.abc|numpy)\.", "", text)
    return re.sub(r"Optional\[(.*)\]$", r"\1 | None", text)


def judge_catalogue() -> list[dict[str, Any]]:
    """Every registered judge: what it scores, which tasks, what it needs, its metrics and options."""
    import inspect

    from memloop.eval.judges import get_judge, list_judges
    from memloop.eval.options import options_model

    out = []
    for name in list_judges():
        info = get_judge(name)
        fn = info.load()
        given = tuple(inspect.signature(fn).parameters)[:3] + ("metadata",)  # output, gold, llm: the run's
        options = [
            {"name": k, "type": _type_name(f.annotation), "default": f.default}
            for k, f in options_model(fn, given).model_fields.items()
        ]
        needs = (
            (["a judge LLM (`judge_model`, or `--judge-model` on run and rescore)"] if info.needs_llm else [])
            + ([f"every sample's gold to carry {info.gold.what}"] if info.gold else [])
            + (["a method with a JSON memory"] if info.needs_json_memory else [])
        )
        out.append(
            {
                "name": name,
                "description": info.description,
                "tasks": list(info.tasks) if info.tasks is not None else None,
                "needs_llm": info.needs_llm,
                "needs": needs,
                "metrics": list(info.metrics),
                "per_turn": info.per_turn,
                "options": options,
            }
        )
    return out


def judges(as_json: bool = typer.Option(False, "--json", help="Print one JSON object (a list of judges).")) -> None:
    """List the judges a run config's `judges:` and `memloop rescore --judge` can name: their tasks, what
    each needs, its metrics and its options (set them with `options:` in the config or `-o key=value`)."""
    cat = judge_catalogue()
    if as_json:
        print(json.dumps(cat, default=str))
        return
    for j in cat:
        tasks = ", ".join(j["tasks"]) if j["tasks"] is not None else "any task whose gold has what it needs"
        print(f"{j['name']}: {j['description']}")
        print(f"  tasks:   {tasks}")
        print(f"  needs:   {'; '.join(j['needs']) or 'nothing beyond the outputs and gold'}")
        print(f"  metrics: {', '.join(j['metrics'])}" + (" (per turn)" if j["per_turn"] else ""))
        if j["options"]:
            print("  options: " + ", ".join(f"{o['name']}: {o['type']} = {o['default']!r}" for o in j["options"]))
        else:
            print("  options: none")


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    app.command("methods")(methods)
    app.command("judges")(judges)
