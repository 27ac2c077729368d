"""MemoryAgentBench's LLM-judged sources, judged as its `llm_based_eval/` scripts judge them (with
memloop's judge model in place of GPT-4o).

- LongMemEval (`longmemeval_*`, metric `llm_judge`): one yes/no question to the judge per reply, from
  LongMemEval's answer check: the prompt by question type (single-session-user/-assistant and
  multi-session share the standard check; temporal-reasoning forgives off-by-one counts of days;
  knowledge-update accepts earlier information beside the updated answer; single-session-preference
  checks against a rubric) and the abstention check for questions whose id contains "_abs". The
  verdict is correct when the answer contains "yes" (case-insensitive), as the script reads it; the
  judge decodes at most 10 tokens at temperature 0.
- ∞Bench summarisation (`infbench_sum*`, metric `llm_judge_f1`): three questions per summary — fluency
  (0 or 1), recall (how many of the expert's key points the summary mostly supports: a key point of
  several facts counts when most are there) and precision (how many of the summary's sentences the
  expert summary supports, of how many) — each answered as JSON after the judge's reasoning, with the
  book prompts' structure (recall and precision two worked examples each, fluency examples of each
  score), at the script's temperature 0.1 and 4,096 tokens; the score is fluency x F1(recall / key
  points, precision / sentences), as the script computes it. Where the script drops a summary whose
  answers do not parse, memloop asks again (`max_attempts`) and then fails the judge on that unit, so
  the context is incomplete, never silently left out.

The prompts are in `eval/templates/judges/mab-lme-*.txt` and `mab-sum-*.txt`.
"""

from __future__ import annotations

import json
import re
from typing import Any, Sequence

from memloop.eval.asking import ParseFailure
from memloop.eval.errors import JudgeError
from memloop.eval.judges.asking import ask_judgment
from memloop.eval.judges.records import Judgment
from memloop.eval.llm import LLM
from memloop.eval.templates import load_template

LME_TEMPLATES = {
    "single-session-user": "mab-lme-standard",
    "single-session-assistant": "mab-lme-standard",
    "multi-session": "mab-lme-standard",
    "temporal-reasoning": "mab-lme-temporal",
    "knowledge-update": "mab-lme-update",
    "single-session-preference": "mab-lme-preference",
}
ABSTENTION_TEMPLATE = "mab-lme-abstention"
SUMMARY_TEMPLATES = ("mab-sum-fluency", "mab-sum-recall", "mab-sum-precision")
TEMPLATES = (*sorted(set(LME_TEMPLATES.values())), ABSTENTION_TEMPLATE, *SUMMARY_TEMPLATES)
VERDICT_TOKENS = 10  # the script's max_tokens for the yes/no check
# summarization_evaluate.py's judge model settings for all three summary questions (its `OpenAIModel(...,
# temperature=0.1, generation_max_length=4096)`): room for the reasoning before each score's JSON
SUMMARY_TEMPERATURE = 0.1
SUMMARY_TOKENS = 4096


def lme_template(question_type: str | None, question_id: str | None) -> str:
    """The answer-check prompt of a LongMemEval question (by its type; abstention by its id)."""
    if question_id is not None and "_abs" in question_id:
        return ABSTENTION_TEMPLATE
    if question_type not in LME_TEMPLATES:
        raise JudgeError(
            f"LongMemEval question type {question_type!r} has no answer check (known: "
            f"{', '.join(sorted(LME_TEMPLATES))}); the hub row's metadata.question_types must name one"
        )
    return LME_TEMPLATES[question_type]


def _verdict(text: str) -> dict[str, Any]:
    if not text.strip():
        raise ParseFailure("empty answer: expected yes or no")
    return {"correct": "yes" in text.lower()}


def lme_check(
    llm: LLM,
    question: str,
    answer: str,
    response: str,
    question_type: str | None,
    question_id: str | None,
    *,
    max_attempts: int = 3,
) -> tuple[float, Judgment]:
    """1.0 when the judge says the response answers the LongMemEval question, else 0.0; and the judgment."""
    template = load_template(lme_template(question_type, question_id))
    prompt = template.render(question=question, answer=answer, response=response)
    j = ask_judgment(
        llm,
        template,
        prompt,
        item=f"{question_id or question[:60]}: {response[:160]}",
        parse=_verdict,
        max_tokens=VERDICT_TOKENS,
        max_attempts=max_attempts,
    )
    return float(j.label["correct"]), j


def last_json_object(text: str, keys: Sequence[str]) -> dict[str, Any]:
    """The last `{...}` of a reasoned answer (the script's `parse_json`), with integer `keys`."""
    for found in reversed(re.findall(r"\{.*?\}", text, re.DOTALL)):
        try:
            obj = json.loads(found)
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict):
            bad = [k for k in keys if not isinstance(obj.get(k), int) or isinstance(obj.get(k), bool)]
            if bad:
                raise ParseFailure(f"the answer's JSON needs integer {', '.join(bad)}")
            return obj
    raise ParseFailure(f"no JSON object with {', '.join(keys)} in the answer")


def _ask(llm: LLM, template_id: str, item: str, keys: Sequence[str], max_attempts: int, **values: str) -> Judgment:
    """One summary question at the script's settings (`SUMMARY_TEMPERATURE`, `SUMMARY_TOKENS`)."""
    template = load_template(template_id)
    return ask_judgment(
        llm,
        template,
        template.render(**values),
        item=item,
        parse=lambda t: last_json_object(t, keys),
        max_tokens=SUMMARY_TOKENS,
        temperature=SUMMARY_TEMPERATURE,
        max_attempts=max_attempts,
    )


def summary_scores(
    llm: LLM, summary: str, keypoints: Sequence[str], expert: str, *, max_attempts: int = 3
) -> tuple[dict[str, float], list[Judgment]]:
    """∞Bench-Sum's judged figures of one summary: {"llm_judge_f1", "llm_fluency", "llm_recall",
    "llm_precision"} and the three judgments."""
    if not keypoints:
        raise JudgeError(
            "∞Bench summarisation needs the expert's key points (the hub row's metadata.keypoints); "
            "load the data with the memoryagentbench loader"
        )
    text = summary.strip()
    listed = "\n".join(f"{i + 1}. {kp}" for i, kp in enumerate(keypoints))
    f = _ask(llm, "mab-sum-fluency", "fluency of the summary", ["fluency"], max_attempts, text=text)
    r = _ask(
        llm, "mab-sum-recall", "key points in the summary", ["recall"], max_attempts, keypoints=listed, summary=text
    )
    p = _ask(
        llm,
        "mab-sum-precision",
        "supported sentences of the summary",
        ["precision", "sentence_count"],
        max_attempts,
        expert_summary=expert,
        summary=text,
    )
    recall = r.label["recall"] / len(keypoints)
    precision = p.label["precision"] / p.label["sentence_count"] if p.label["sentence_count"] > 0 else 0.0
    f1 = f.label["fluency"] * 2 * recall * precision / (recall + precision) if recall + precision > 0 else 0.0
    return (
        {
            "llm_judge_f1": float(f1),
            "llm_fluency": float(f.label["fluency"]),
            "llm_recall": float(recall),
            "llm_precision": float(precision),
        },
        [f, r, p],
    )
