"""LOFT SQL execution accuracy of a predictions file against its queries file (`memloop score loft`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from memloop.eval.errors import JudgeError


@dataclass(frozen=True)
class LoftScore:
    accuracy: float
    queries: int


def read_jsonl_by_qid(path: Path) -> dict[str, dict]:
    """{qid: record} of a LOFT .jsonl file (queries or predictions)."""
    if not path.is_file():
        raise JudgeError(f"{path} does not exist; pass a LOFT .jsonl file")
    out = {}
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                rec = json.loads(line)
                out[rec["qid"]] = rec
            except (json.JSONDecodeError, KeyError, TypeError):
                raise JudgeError(f"{path}:{n} is not a JSON object with a `qid`") from None
    return out


def score_loft_files(queries: Path, preds: Path) -> LoftScore:
    """Execution accuracy (judge `loft-exec`) over every query; each query must have a prediction."""
    from memloop.eval.judges import run_judge

    q, p = read_jsonl_by_qid(queries), read_jsonl_by_qid(preds)
    missing = sorted(set(q) - set(p))
    if missing or not q:
        raise JudgeError(
            f"{len(missing)} of {len(q)} queries have no prediction (e.g. {missing[:1]}); "
            "score a complete predictions file"
        )
    scores = [run_judge("loft-exec", p[qid], q[qid]["answers"]).score("accuracy") for qid in sorted(q)]
    return LoftScore(sum(scores) / len(scores), len(scores))
