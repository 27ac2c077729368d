"""BooookScore from recorded judgments: the official release's annotation files instead of an LLM.

Format: `{book: {sentence: {"questions": str, "types": [labels]}}}` next to a summaries file
`{book: summary}`. Only sentences judged confusing are listed; every other sentence of the summary is
error-free, and a book that is missing or null has no confusing sentence. A listed sentence is
matched to the summary's sentences by exact text, else by where it occurs in the summary (our
splitter may cut a sentence differently from the one that produced the file: every sentence it
overlaps is marked); a listed sentence that occurs nowhere in the summary (the release annotated
another version of a few summaries) is reported in `details["unmatched"]`, never dropped silently.
By default it is left out of the score, since it belongs to a summary other than the one scored;
`unmatched="count"` adds each as one more confusing sentence of its book instead (the release's
ChatGPT rows then read 84.5 and 68.2 instead of 84.8 and 68.9).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memloop.eval.asking import ParseFailure
from memloop.eval.errors import JudgeError
from memloop.eval.judges.aggregation import mean_over_samples
from memloop.eval.judges.booookscore import NAME, _label, _result
from memloop.eval.judges.records import JudgeResult, Judgment
from memloop.eval.judges.sentences import sentence_spans

if TYPE_CHECKING:
    from memloop.eval.llm import LLMRequest, LLMResult

RELEASE_NAME = re.compile(r"^(?P<model>[a-z0-9]+)-(?P<chunk>\d+)-(?P<method>inc|hier)(?:-cleaned)?\.json$")


def _ws(s: str) -> str:
    return " ".join(s.split())


UNMATCHED = ("drop", "count")


def replay_book(
    summary: str, annotations: dict[str, Any] | None, *, dedupe: bool = True, unmatched: str = "drop"
) -> JudgeResult:
    """Score one summary with its recorded sentence judgments; `unmatched` says what becomes of a
    confusing sentence the summary does not contain ("drop": reported only; "count": one more
    confusing sentence)."""
    if unmatched not in UNMATCHED:
        raise JudgeError(f"unmatched must be one of {UNMATCHED}, got {unmatched!r}")
    if not isinstance(summary, str) or not summary.strip():
        raise JudgeError("the summary is empty; nothing to score")
    annotations = annotations or {}
    if not isinstance(annotations, dict):
        raise JudgeError(
            f"a book's annotations must be a {{sentence: judgment}} object, got {type(annotations).__name__}"
        )
    spans = sentence_spans(summary)
    texts = [summary[a:b].strip() for a, b in spans]
    index: dict[str, list[int]] = {}
    for i, t in enumerate(texts):
        index.setdefault(_ws(t), []).append(i)
    flagged: dict[int, dict[str, Any]] = {}
    missing: list[tuple[str, dict[str, Any]]] = []
    for sentence, ann in annotations.items():
        try:
            label = _label(ann.get("questions"), ann.get("types")) if isinstance(ann, dict) else None
        except ParseFailure as exc:
            raise JudgeError(f"annotation of {sentence[:60]!r} is malformed ({exc}); fix the annotation file") from None
        if label is None:
            raise JudgeError(f"annotation of {sentence[:60]!r} must be an object with `questions` and `types`")
        if not label["types"]:
            continue  # recorded as not confusing
        hits = index.get(_ws(sentence))
        if hits is None:
            pos = summary.find(sentence.strip())
            if pos < 0:
                missing.append((sentence, label))
                continue
            end = pos + len(sentence.strip())
            hits = [i for i, (a, b) in enumerate(spans) if a < end and b > pos]
        for i in hits:
            flagged[i] = label
    order = list(range(len(texts)))
    if dedupe:  # one unit per distinct sentence text, confusing if any occurrence is
        first: dict[str, int] = {}
        for i in order:
            k = _ws(texts[i])
            if k in first:
                if i in flagged and first[k] not in flagged:
                    flagged[first[k]] = flagged[i]
            else:
                first[k] = i
        order = sorted(first.values())
    no_error = {"questions": None, "types": []}
    judgments = [Judgment(item=texts[i], label=flagged.get(i, no_error), source="replay") for i in order]
    if unmatched == "count":
        judgments += [Judgment(item=t, label=label, source="replay") for t, label in missing]
    return _result(judgments, len(judgments), {"unmatched": [t for t, _ in missing]})


@dataclass
class ReleaseScore:
    booookscore: float
    books: int
    sentences: int
    unmatched: int
    per_book: dict[str, float]


def _load_json(path: Path, what: str) -> dict[str, Any]:
    if not path.is_file():
        raise JudgeError(f"{what} file {path} does not exist; pass the path of a JSON file")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise JudgeError(f"{what} file {path} is not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise JudgeError(f"{what} file {path} must hold a JSON object keyed by book")
    return data


def score_release(
    summaries_path: str | Path, annotations_path: str | Path, *, dedupe: bool = True, unmatched: str = "drop"
) -> ReleaseScore:
    """BooookScore of an official summaries file judged by its annotation file (mean over books)."""
    summaries = _load_json(Path(summaries_path), "summaries")
    annotations = _load_json(Path(annotations_path), "annotations")
    extra = sorted(set(annotations) - set(summaries))
    if extra:
        raise JudgeError(
            f"annotations name {len(extra)} book(s) absent from the summaries file (e.g. {extra[0]!r}); "
            "pair each annotation file with the summaries it was made from"
        )
    per_book: dict[str, float] = {}
    sentences = lost = 0
    for book in sorted(summaries):
        if not isinstance(summaries[book], str):
            raise JudgeError(f"summary of {book!r} is not a string")
        r = replay_book(summaries[book], annotations.get(book), dedupe=dedupe, unmatched=unmatched)
        per_book[book] = r.score(NAME)
        sentences += int(r.score("sentences"))
        lost += len(r.details["unmatched"])
    if not per_book:
        raise JudgeError(f"summaries file {summaries_path} holds no books")
    return ReleaseScore(mean_over_samples(per_book.values()), len(per_book), sentences, lost, per_book)


def release_table(release_dir: str | Path, unmatched: str = "drop") -> list[dict[str, Any]]:
    """Score every (model, chunk size, method) pair of an official release directory
    (`summaries/{model}-{chunk}-{method}-cleaned.json` with `annotations/{model}-{chunk}-{method}.json`)."""
    root = Path(release_dir)
    ann_dir, summ_dir = root / "annotations", root / "summaries"
    if not ann_dir.is_dir() or not summ_dir.is_dir():
        raise JudgeError(
            f"{root} must contain `annotations/` and `summaries/` (the official BooookScore release layout)"
        )
    rows = []
    for ann in sorted(ann_dir.glob("*.json")):
        m = RELEASE_NAME.match(ann.name)
        if not m:
            continue
        summ = summ_dir / f"{ann.stem}-cleaned.json"
        if not summ.is_file():
            raise JudgeError(f"no summaries file {summ.name} for annotations {ann.name}")
        s = score_release(summ, ann, unmatched=unmatched)
        rows.append(
            {
                "model": m["model"],
                "chunk": int(m["chunk"]),
                "method": m["method"],
                "booookscore": s.booookscore,
                "books": s.books,
                "sentences": s.sentences,
                "unmatched": s.unmatched,
            }
        )
    if not rows:
        raise JudgeError(f"no annotation files named like gpt4-2048-hier.json in {ann_dir}")
    return rows


class ReplayLLM:
    """An `memloop.eval.llm.LLM` that answers the per-sentence BooookScore prompt from recorded judgments.

    Running the ordinary LLM judge (`booookscore.judge`) with it exercises the whole judge path on
    real summaries (prompt rendering, answer parsing, de-duplication, arithmetic) with the release's
    verdicts; its score must equal `replay_book`'s. A prompt whose sentence has no recorded verdict
    is answered "no confusion", as the release format implies.
    """

    supports_json_schema = False

    def __init__(self, verdicts: dict[str, dict[str, Any]], name: str = "replay") -> None:
        self.name = name
        self.verdicts = {_ws(k): v for k, v in verdicts.items()}

    @classmethod
    def for_book(cls, summary: str, annotations: dict[str, Any] | None) -> "ReplayLLM":
        r = replay_book(summary, annotations, dedupe=False)
        return cls({j.item: j.label for j in r.judgments if j.label and j.label["types"]})

    def complete(self, request: "LLMRequest") -> "LLMResult":
        from memloop.eval.llm import LLMResult

        text = request.prompt if request.prompt is not None else (request.messages or ({"content": ""},))[-1]["content"]
        m = re.search(r"\nSentence: (.*)\nAnswer:\s*$", text, re.DOTALL)
        if m is None:
            raise JudgeError("ReplayLLM only answers the per-sentence BooookScore prompt")
        label = self.verdicts.get(_ws(m.group(1)))
        if label is None:
            return LLMResult(text=json.dumps({"questions": "no confusion", "types": []}))
        return LLMResult(text=json.dumps({"questions": label["questions"] or "?", "types": label["types"]}))

    def count_tokens(self, text: str) -> int:
        return len(text.split())
