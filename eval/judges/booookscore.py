"""BooookScore (seed 003; seed 000 appendix D): the share of summary sentences without a coherence error.

The summary is split into sentences; for each sentence the judge sees the whole summary and that
sentence and answers with clarifying questions and the error types it finds, from eight fixed
labels. An answer with an unknown label, or questions without types (or types without questions),
is invalid and asked again (bounded). A book's score is 1 - confusing / sentences; a dataset's score
is the mean over books (`memloop.eval.judges.aggregation.mean_over_samples`, the one mean of every judge).

Like the official code, sentences are judged once per distinct text: the official annotations are
keyed by sentence, so a sentence repeated verbatim counts once in numerator and denominator
(`dedupe=False` judges and counts every occurrence instead).

`judge_batched` is the batched variant (the official "v2"): several numbered sentences per call,
a JSON list back, one object per sentence.
"""

from __future__ import annotations

import json
import re
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Sequence

from memloop.eval.asking import ParseFailure
from memloop.eval.errors import JudgeError
from memloop.eval.judges import judge_info
from memloop.eval.judges.asking import ask_judgment
from memloop.eval.judges.records import JudgeResult, Judgment, Score
from memloop.eval.judges.sentences import split_sentences
from memloop.eval.llm import LLM
from memloop.eval.options import Temperature
from memloop.eval.templates import render

NAME = "booookscore"
ERROR_TYPES = (
    "entity omission",
    "event omission",
    "causal omission",
    "salience",
    "discontinuity",
    "duplication",
    "inconsistency",
    "language",
)
NO_CONFUSION = "no confusion"
SENTENCE_TEMPLATE = "booookscore-sentence"
BATCH_TEMPLATE = "booookscore-batch"

# What the constrained decoder may produce: either the "no confusion" answer or questions plus at
# least one known label. The questions/types agreement rule is still checked by the parser.
SENTENCE_SCHEMA: dict[str, Any] = {
    "anyOf": [
        {
            "type": "object",
            "properties": {"questions": {"const": NO_CONFUSION}, "types": {"type": "array", "maxItems": 0}},
            "required": ["questions", "types"],
            "additionalProperties": False,
        },
        {
            "type": "object",
            "properties": {
                "questions": {"type": "string", "minLength": 1, "maxLength": 400},
                "types": {
                    "type": "array",
                    "items": {"enum": list(ERROR_TYPES)},
                    "minItems": 1,
                    "maxItems": len(ERROR_TYPES),
                },
            },
            "required": ["questions", "types"],
            "additionalProperties": False,
        },
    ]
}


def batch_schema(n: int) -> dict[str, Any]:
    item = {
        "type": "object",
        "properties": {
            "sentence_num": {"type": "integer"},
            "questions": {"anyOf": [{"type": "null"}, {"type": "string", "maxLength": 400}]},
            "types": {"type": "array", "items": {"enum": list(ERROR_TYPES)}, "maxItems": len(ERROR_TYPES)},
        },
        "required": ["sentence_num", "questions", "types"],
        "additionalProperties": False,
    }
    return {"type": "array", "items": item, "minItems": n, "maxItems": n}


def _normalise_types(types: Any) -> list[str]:
    """Label list from a list or a comma-separated string; unknown labels are invalid."""
    if types is None:
        return []
    if isinstance(types, str):
        t = types.strip().lower()
        if t in ("", NO_CONFUSION, "none", "null"):
            return []
        types = [x for x in (p.strip() for p in t.split(",")) if x]
    if not isinstance(types, list):
        raise ParseFailure(f"`types` must be a list of labels, got {type(types).__name__}")
    out: list[str] = []
    for t in types:
        if not isinstance(t, str):
            raise ParseFailure(f"error type {t!r} is not a string")
        label = t.strip().lower()
        if label not in ERROR_TYPES:
            raise ParseFailure(f"unknown error type {t!r}; allowed: {', '.join(ERROR_TYPES)}")
        if label not in out:
            out.append(label)
    return out


def _label(questions: Any, types: Any) -> dict[str, Any]:
    labels = _normalise_types(types)
    q = None if questions is None else str(questions).strip()
    says_none = q is None or q == "" or NO_CONFUSION in q.lower()
    if labels and says_none:
        raise ParseFailure("error types given but the questions say there is no confusion")
    if not labels and not says_none:
        raise ParseFailure("clarifying questions given but no error type")
    return {"questions": None if not labels else q, "types": labels}


def _first_json(text: str, opener: str, closer: str) -> Any:
    start, end = text.find(opener), text.rfind(closer)
    if start < 0 or end < start:
        raise ParseFailure(f"no JSON {'object' if opener == '{' else 'list'} in the answer")
    try:
        return json.loads(text[start : end + 1])
    except json.JSONDecodeError as exc:
        raise ParseFailure(f"answer is not valid JSON: {exc}") from None


_LINE = re.compile(r"^\s*(questions|types)\s*:\s*(.*)$", re.IGNORECASE)


def parse_sentence_answer(text: str) -> dict[str, Any]:
    """Label {"questions": str | None, "types": [labels]} from a JSON answer or the official
    two-line "Questions: ... / Types: ..." answer. Raises ParseFailure."""
    if "{" in text:
        obj = _first_json(text, "{", "}")
        if not isinstance(obj, dict) or "types" not in obj or "questions" not in obj:
            raise ParseFailure("the JSON answer needs the keys `questions` and `types`")
        return _label(obj["questions"], obj["types"])
    fields: dict[str, str] = {}
    for line in text.splitlines():
        m = _LINE.match(line)
        if m and m.group(1).lower() not in fields:
            fields[m.group(1).lower()] = m.group(2)
    if "questions" not in fields or "types" not in fields:
        raise ParseFailure("the answer needs a `questions` and a `types` field")
    return _label(fields["questions"], fields["types"])


def parse_batch_answer(text: str, n: int) -> list[dict[str, Any]]:
    """Labels of n numbered sentences from the batched JSON list answer. Raises ParseFailure."""
    items = _first_json(text, "[", "]")
    if not isinstance(items, list) or len(items) != n:
        raise ParseFailure(
            f"expected a JSON list of {n} answers, got "
            f"{len(items) if isinstance(items, list) else type(items).__name__}"
        )
    out = []
    for i, it in enumerate(items, 1):
        if not isinstance(it, dict) or "types" not in it or "questions" not in it:
            raise ParseFailure(f"answer {i} needs the keys `questions` and `types`")
        if it.get("sentence_num", i) != i:
            raise ParseFailure(f"answer {i} is numbered {it.get('sentence_num')!r}")
        out.append(_label(it["questions"], it["types"]))
    return out


def is_confusing(label: Any) -> bool:
    return bool(label and label.get("types"))


def score_judgments(judgments: Sequence[Judgment]) -> float:
    """1 - confusing / judged, over the valid judgments (recomputes a score from stored judgments)."""
    valid = [j for j in judgments if j.valid]
    if not valid:
        raise JudgeError("no valid sentence judgments to score; the summary is empty or every answer was invalid")
    return 1.0 - sum(is_confusing(j.label) for j in valid) / len(valid)


def _result(judgments: list[Judgment], n_sentences: int, details: dict[str, Any] | None = None) -> JudgeResult:
    invalid = sum(not j.valid for j in judgments)
    scores = [
        Score(NAME, score_judgments(judgments)),
        Score("sentences", float(n_sentences)),
        Score("confusing", float(sum(is_confusing(j.label) for j in judgments if j.valid))),
        Score("invalid", float(invalid)),
    ]
    counts = {t: sum(t in (j.label or {}).get("types", []) for j in judgments if j.valid) for t in ERROR_TYPES}
    return JudgeResult(NAME, scores, judgments, {"error_types": counts, **(details or {})})


def _empty(summary: Any) -> bool:
    return summary is None or (isinstance(summary, str) and not summary.strip())


def _nothing_to_judge() -> JudgeResult:
    """An empty summary scores 0 (the rule for means: a method that produced nothing got nothing
    right), with no sentence and no judge call; the details say why."""
    scores = [Score(NAME, 0.0), Score("sentences", 0.0), Score("confusing", 0.0), Score("invalid", 0.0)]
    return JudgeResult(NAME, scores, [], {"empty_summary": True})


def _units(summary: str, dedupe: bool) -> list[str]:
    if not isinstance(summary, str):
        raise JudgeError(f"BooookScore needs the summary as a string, got {type(summary).__name__}")
    sentences = split_sentences(summary)
    return list(dict.fromkeys(sentences)) if dedupe else sentences


@judge_info(
    "booookscore",
    ("book",),
    True,
    "share of summary sentences without a coherence error, one judge call per sentence",
    ("booookscore-sentence",),
    metrics=("booookscore",),
)
def judge(
    summary: str,
    gold: Any = None,
    llm: LLM | None = None,
    *,
    metadata: dict[str, Any] | None = None,
    dedupe: bool = True,
    max_attempts: int = 3,
    max_tokens: int = 200,
    on_invalid: str = "raise",
    max_workers: int = 16,
    temperature: Temperature = 0.0,
) -> JudgeResult:
    """One call per sentence (issued concurrently; a batching engine serves them together)."""
    if llm is None:
        raise JudgeError("BooookScore needs a judge LLM (set `judge_model` in the run config)")
    if _empty(summary):
        return _nothing_to_judge()
    units = _units(summary, dedupe)

    def one(i_s: tuple[int, str]) -> Judgment:
        i, s = i_s
        tpl, prompt = render(SENTENCE_TEMPLATE, summary=summary, sentence=s)
        return ask_judgment(
            llm,
            tpl,
            prompt,
            item=s,
            parse=parse_sentence_answer,
            schema=SENTENCE_SCHEMA,
            max_tokens=max_tokens,
            max_attempts=max_attempts,
            seed=i,
            raise_on_invalid=on_invalid == "raise",
            temperature=temperature,
        )

    with ThreadPoolExecutor(max_workers=max(1, min(max_workers, len(units)))) as pool:
        judgments = list(pool.map(one, enumerate(units)))
    return _result(judgments, len(units))


@judge_info(
    "booookscore-batched",
    ("book",),
    True,
    "BooookScore with several sentences per judge call (JSON list answers)",
    ("booookscore-batch",),
    metrics=("booookscore",),
    rows_as="booookscore",
)
def judge_batched(
    summary: str,
    gold: Any = None,
    llm: LLM | None = None,
    *,
    metadata: dict[str, Any] | None = None,
    batch_size: int = 10,
    dedupe: bool = True,
    max_attempts: int = 3,
    max_tokens_per_sentence: int = 120,
    on_invalid: str = "raise",
    max_workers: int = 8,
    temperature: Temperature = 0.0,
) -> JudgeResult:
    """Several numbered sentences per call; the JSON list answer is split into one judgment per sentence."""
    if llm is None:
        raise JudgeError("BooookScore needs a judge LLM (set `judge_model` in the run config)")
    if batch_size < 1:
        raise JudgeError(f"batch_size must be at least 1 (got {batch_size})")
    if _empty(summary):
        return _nothing_to_judge()
    units = _units(summary, dedupe)
    batches = [units[i : i + batch_size] for i in range(0, len(units), batch_size)]

    def one(b_batch: tuple[int, list[str]]) -> list[Judgment]:
        b, batch = b_batch
        numbered = "\n".join(f"{n}. {s}" for n, s in enumerate(batch, 1))
        tpl, prompt = render(BATCH_TEMPLATE, summary=summary, sentences=numbered)
        call = ask_judgment(
            llm,
            tpl,
            prompt,
            item=numbered,
            parse=lambda t: parse_batch_answer(t, len(batch)),
            schema=batch_schema(len(batch)),
            max_tokens=max_tokens_per_sentence * len(batch),
            max_attempts=max_attempts,
            seed=b,
            raise_on_invalid=on_invalid == "raise",
            temperature=temperature,
        )
        # One judgment per sentence; the call's prompt, raw answer and usage stay on the first of them.
        out = []
        for k, s in enumerate(batch):
            out.append(
                Judgment(
                    item=s,
                    label=call.label[k] if call.valid else None,
                    valid=call.valid,
                    prompt=call.prompt if k == 0 else None,
                    template_id=call.template_id,
                    template_sha256=call.template_sha256,
                    constrained=call.constrained,
                    raw=call.raw if k == 0 else None,
                    failures=call.failures if k == 0 else [],
                    usage=call.usage if k == 0 else type(call.usage)(),
                )
            )
        return out

    with ThreadPoolExecutor(max_workers=max(1, min(max_workers, len(batches)))) as pool:
        judgments = [j for part in pool.map(one, enumerate(batches)) for j in part]
    return _result(judgments, len(units), {"batch_size": batch_size})
