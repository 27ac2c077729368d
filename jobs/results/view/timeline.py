"""One unit's memory timeline: per step what was read, asked, answered, revised and kept, and the
judges' verdicts in their own shape.

Diffs: a structured memory (a JSON object or list) changes by an RFC 6902 patch (`jsonpatch`); a text
memory by a word diff (`difflib`). A prompt is split into the prefix it shares with the previous
prompt of the unit (what a prefix cache can reuse) and the new part.
"""

from __future__ import annotations

import difflib
import json
import math
import os
import re
from dataclasses import dataclass, field
from typing import Any

import jsonpatch
import pandas as pd
from memloop.jobs.results.view.runs import ViewRun

_MISSING = object()
# how a method records a rejected revision in the step's failures (memloop.eval.methods.structured / prism)
_REJECTED = re.compile(r"^revision rejected \((?P<where>.*)\): (?P<reason>.*)$", re.S)


def _load(text: Any) -> Any:
    if text is None or (isinstance(text, float) and math.isnan(text)):
        return _MISSING
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return text


def word_diff(before: str, after: str) -> list[tuple[str, str]]:
    """[(op, text)] with op "=", "-" or "+": `after` against `before`, word by word (whitespace kept)."""
    a, b = re.split(r"(\s+)", before), re.split(r"(\s+)", after)
    out: list[tuple[str, str]] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag == "equal":
            out.append(("=", "".join(a[i1:i2])))
            continue
        if i2 > i1:
            out.append(("-", "".join(a[i1:i2])))
        if j2 > j1:
            out.append(("+", "".join(b[j1:j2])))
    return out


@dataclass
class MemoryDiff:
    kind: str  # "patch" (RFC 6902), "words", "first" (no memory before), "same", "none" (no memory recorded)
    patch: list[dict[str, Any]] = field(default_factory=list)
    words: list[tuple[str, str]] = field(default_factory=list)


def memory_diff(before: Any, after: Any) -> MemoryDiff:
    if after is _MISSING:
        return MemoryDiff("none")
    if before is _MISSING:
        return MemoryDiff("first")
    if before == after:
        return MemoryDiff("same")
    if isinstance(before, (dict, list)) and isinstance(after, (dict, list)):
        return MemoryDiff("patch", patch=jsonpatch.make_patch(before, after).patch)
    text = lambda v: v if isinstance(v, str) else json.dumps(v, indent=1, sort_keys=True, ensure_ascii=False)
    return MemoryDiff("words", words=word_diff(text(before), text(after)))


def revisions(parsed: Any, failures: list[str]) -> list[dict[str, Any]] | None:
    """The step's proposed revisions, each accepted (applied) or rejected with the recorded reason;
    None when the step's parsed value is not a revision list."""
    if not isinstance(parsed, dict) or "revisions" not in parsed:
        return None
    applied = [json.dumps(r, sort_keys=True) for r in parsed.get("applied") or []]
    reasons: dict[str, list[str]] = {}
    for f in failures:
        m = _REJECTED.match(f)
        if m:
            reasons.setdefault(m["where"], []).append(m["reason"])
    out = []
    for r in parsed.get("revisions") or []:
        key = json.dumps(r, sort_keys=True)
        accepted = key in applied
        if accepted:
            applied.remove(key)  # the same revision proposed twice may be applied once
        path = next(iter(r), "") if isinstance(r, dict) else ""
        op, value = (
            next(iter(r[path].items()), ("", None))
            if isinstance(r, dict) and isinstance(r.get(path), dict)
            else ("", r)
        )
        why = reasons.get(path, [])
        out.append(
            {
                "path": path,
                "op": op,
                "value": value,
                "accepted": accepted,
                "reason": None if accepted else (why.pop(0) if why else None),
            }
        )
    # rejections recorded with no revision behind them (raw text that never parsed into one)
    out += [
        {"path": where, "op": "", "value": None, "accepted": False, "reason": reason}
        for where, rs in reasons.items()
        for reason in rs
        if not any(o["path"] == where for o in out)
    ]
    return out


def timeline(run: ViewRun, unit: str) -> list[dict[str, Any]]:
    """One entry per step of `unit`, in step order."""
    prev_prompt, prev_memory = None, _MISSING
    out = []
    for _, s in run.steps_of(unit).iterrows():
        extra = _load(s["extra_json"])
        extra = extra if isinstance(extra, dict) else {}
        failures = [str(f) for f in extra.get("failures") or []]
        parsed, memory = _load(s["parsed_json"]), _load(s["memory_json"])
        prompt = s["prompt"] if isinstance(s["prompt"], str) else ""
        shared = len(os.path.commonprefix([prev_prompt, prompt])) if prev_prompt is not None else 0
        out.append(
            {
                "step": int(s["step"]),
                "kind": s["kind"],
                "template_id": s["template_id"],
                "chunk_index": extra.get("chunk_index"),
                "attempts": extra.get("attempts"),
                "ok": extra.get("ok", True),
                "prompt_shared": prompt[:shared],
                "prompt_new": prompt[shared:],
                "output": s["output"] if isinstance(s["output"], str) else "",
                "parsed": None if parsed is _MISSING else parsed,
                "revisions": revisions(None if parsed is _MISSING else parsed, failures),
                "failures": [f for f in failures if not _REJECTED.match(f)],
                "error": s["error"] if isinstance(s["error"], str) else None,
                "memory": None if memory is _MISSING else memory,
                "memory_text": _pretty(memory),
                "diff": memory_diff(prev_memory, memory),
                "prompt_tokens": _int(s["prompt_tokens"]),
                "cached_tokens": _int(s["cached_tokens"]),
                "decoded_tokens": _int(s["decoded_tokens"]),
            }
        )
        prev_prompt = prompt
        if memory is not _MISSING:
            prev_memory = memory
    return out


def _int(v: Any) -> int | None:
    return None if v is None or pd.isna(v) else int(v)


def _pretty(v: Any) -> str:
    if v is _MISSING or v is None:
        return ""
    return v if isinstance(v, str) else json.dumps(v, indent=1, sort_keys=True, ensure_ascii=False)


# ---------------------------------------------------------------------------------------------
# the judges' verdicts


def verdicts(run: ViewRun, unit: str) -> list[dict[str, Any]]:
    """Per judge: its scores (per turn when it has turns) and its judgments, each shaped by what the
    judge's label holds (BooookScore: questions and error types per sentence; SUMIE: per turn, the pairs
    supported by the gold and the extra ones; KGScore: extracted edges; rule judges: their figures)."""
    scores = run.scores_of(unit)
    js = run.judgments_of(unit)
    out = []
    for judge in sorted(set(scores["judge"]) | set(js["judge"])):
        sc = scores[scores["judge"] == judge]
        whole = [
            {"metric": m, "value": _num(v)}
            for m, t, v in zip(sc["metric"], sc["turn"], sc["value"])
            if t is None or pd.isna(t)
        ]
        turns: dict[int, dict[str, float | None]] = {}
        for m, t, v in zip(sc["metric"], sc["turn"], sc["value"]):
            if t is not None and not pd.isna(t):
                turns.setdefault(int(t), {})[m] = _num(v)
        items = [_shape(judge, json.loads(r)) for r in js[js["judge"] == judge]["record_json"]]
        out.append(
            {
                "judge": judge,
                "shape": _judge_shape(judge, items),
                "scores": whole,
                "turns": [{"turn": t, **v} for t, v in sorted(turns.items())],
                "judgments": items,
            }
        )
    return out


def _num(v: Any) -> float | None:
    return None if v is None or pd.isna(v) else float(v)


def _judge_shape(judge: str, items: list[dict[str, Any]]) -> str:
    kinds = {i["shape"] for i in items}
    return kinds.pop() if len(kinds) == 1 else "generic"


def _shape(judge: str, rec: dict[str, Any]) -> dict[str, Any]:
    """A judgment record (`Judgment.to_record`) with its verdict read by the judge's label shape."""
    label = rec.get("label")
    base = {
        "item": rec.get("item"),
        "valid": rec.get("valid", True),
        "source": rec.get("source"),
        "raw": rec.get("raw"),
        "prompt": rec.get("prompt"),
        "failures": rec.get("failures") or [],
        "label": label,
        "shape": "generic",
    }
    if isinstance(label, dict) and "types" in label and "questions" in label:  # BooookScore
        return base | {
            "shape": "sentence",
            "confusing": bool(label.get("types")),
            "types": label.get("types") or [],
            "questions": label.get("questions"),
        }
    if isinstance(label, dict) and "supported_by" in label or judge.startswith("sumie") and isinstance(label, list):
        support = label.get("supported_by") if isinstance(label, dict) else label
        turn = label.get("turn") if isinstance(label, dict) else _turn_of(rec.get("item"))
        return base | {"shape": "pair", "turn": turn, "matched": bool(support), "supported_by": support}
    if isinstance(label, dict) and "edges" in label:  # KGScore
        return base | {"shape": "edges", "edges": label.get("edges") or []}
    return base


def _turn_of(item: Any) -> int | None:
    m = re.match(r"turn (\d+):", str(item or ""))
    return int(m[1]) if m else None
