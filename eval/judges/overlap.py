"""Reference-based scorers without an LLM: ROUGE, RepoQA function-name accuracy, LOFT execution match.

- ROUGE-1/2/L/Lsum F-measures from the `rouge-score` package (the version seed 001 used). Porter
  stemming and the sentence splitting below are memloop's choices: neither F-ART nor seed 001 names
  its ROUGE settings. For ROUGE-Lsum the texts get one sentence per line (the package's
  convention): the reference's own sentence lines where the dataset gives them (arXiv's abstract,
  gold `"sentences"`; `lsum_reference: split` re-splits instead), else split with the same
  splitter as BooookScore, which the prediction always goes through.
- RepoQA (seed 002): correct when the answer names the described function exactly.
- LOFT-Spider (seed 002, LOFT's SQL evaluation): every cell is normalised (numbers rounded to two
  decimals, text stripped and lowercased, empty cells dropped), each row is compared as a set of
  cells, the row counts must be equal and every answered row must be one of the gold rows; row order
  is never enforced (LOFT filtered order-dependent questions out of its data and its scorer ignores
  order; a sample's `metadata["ordered"]` only says its gold SQL sorts). A boolean cell is a number
  to LOFT (`float(True)` = 1.00).
  Answers are read in LOFT's format: the list of lists on the reply's "Final Answer: [[...]]" line
  (PRISM's Spider answer prompt asks for exactly that line), or a reply that is only the list.
"""

from __future__ import annotations

import ast
import json
import re
from functools import lru_cache
from typing import Any

from memloop.eval.errors import JudgeError
from memloop.eval.judges import judge_info
from memloop.eval.judges.gold import REFERENCE_SUMMARY, reference_of
from memloop.eval.judges.records import JudgeResult, Judgment, Score
from memloop.eval.judges.sentences import split_sentences
from memloop.eval.llm import LLM

ROUGE_TYPES = ("rouge1", "rouge2", "rougeL", "rougeLsum")


@lru_cache(maxsize=1)
def _scorer():
    from rouge_score import rouge_scorer

    return rouge_scorer.RougeScorer(list(ROUGE_TYPES), use_stemmer=True)


def _lines(text: str) -> str:
    return "\n".join(split_sentences(text))


LSUM_REFERENCE = ("dataset", "split")


def rouge_scores(prediction: str, reference: str, reference_sentences: list[str] | None = None) -> dict[str, float]:
    """F-measures; ROUGE-Lsum reads `reference_sentences` as the reference's lines when given."""
    if not isinstance(prediction, str) or not isinstance(reference, str):
        raise JudgeError("ROUGE needs the prediction and the reference as strings")
    s = _scorer()
    plain = s.score(reference, prediction)
    ref_lines = "\n".join(reference_sentences) if reference_sentences else _lines(reference)
    lsum = s.score(ref_lines, _lines(prediction))["rougeLsum"]
    out = {k: plain[k].fmeasure for k in ("rouge1", "rouge2", "rougeL")}
    out["rougeLsum"] = lsum.fmeasure
    return out


@judge_info(
    "rouge",
    None,
    False,
    "ROUGE-1/2/L/Lsum F-measures (rouge-score package)",
    gold=REFERENCE_SUMMARY,
    metrics=("rouge1", "rouge2", "rougeL", "rougeLsum"),
)
def judge_rouge(
    output: Any,
    gold: Any,
    llm: LLM | None = None,
    *,
    metadata: dict[str, Any] | None = None,
    lsum_reference: str = "dataset",
) -> JudgeResult:
    """`lsum_reference`: "dataset" (the gold's own sentence lines where it has them) or "split"."""
    if lsum_reference not in LSUM_REFERENCE:
        raise JudgeError(f"rouge: lsum_reference must be one of {', '.join(LSUM_REFERENCE)}, got {lsum_reference!r}")
    reference = reference_of(gold)
    if reference is None:
        raise JudgeError("ROUGE needs a non-empty reference summary as gold ({'reference': text}, or the text)")
    if not isinstance(output, str):
        raise JudgeError("ROUGE needs the method's answer as a string")
    sentences = gold.get("sentences") if isinstance(gold, dict) and lsum_reference == "dataset" else None
    if sentences is not None and not (isinstance(sentences, list) and all(isinstance(x, str) for x in sentences)):
        raise JudgeError("ROUGE: gold 'sentences' must be the reference's sentences as a list of strings")
    vals = rouge_scores(output, reference, sentences or None)
    return JudgeResult(
        "rouge", [Score(k, v) for k, v in vals.items()], [Judgment(item="rouge", label=vals, source="rule")]
    )


# ---------------------------------------------------------------- RepoQA

_FENCE = re.compile(r"```[a-zA-Z]*\n?|```")


def function_name_of(answer: str) -> str:
    """The function an answer names: the first non-empty line, without code fences, quotes,
    a leading `def`, a call/signature suffix, or a JSON wrapper {"function_name"|"name": ...};
    in a sentence, the name written in backticks."""
    text = answer.strip()
    if text.startswith("{"):
        try:
            obj = json.loads(text)
            if isinstance(obj, dict):
                for key in ("function_name", "function", "name"):
                    if isinstance(obj.get(key), str):
                        text = obj[key]
                        break
        except json.JSONDecodeError:
            pass
    text = _FENCE.sub("", text)
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    quoted = re.search(r"`([A-Za-z_][\w.]*)(?:\(.*?\))?`", line)
    if quoted and " " in line.strip("`"):  # "The function is `name`."
        return quoted.group(1)
    line = re.sub(r"^(async\s+)?def\s+", "", line).strip("`'\" ")
    return re.split(r"[\s(:]", line, maxsplit=1)[0] if line else ""


@judge_info(
    "repoqa-exact", ("repoqa",), False, "1 if the answer names the described function exactly", metrics=("accuracy",)
)
def judge_function_name(
    output: Any, gold: Any, llm: LLM | None = None, *, metadata: dict[str, Any] | None = None
) -> JudgeResult:
    if not isinstance(gold, str) or not gold.strip():
        raise JudgeError("RepoQA gold must be the function name (a non-empty string)")
    if not isinstance(output, str):
        raise JudgeError("RepoQA needs the method's answer as a string")
    name = function_name_of(output)
    gold = gold.strip()
    # "Class.method" also names the bare gold "method"; otherwise names must match character for character.
    ok = name == gold or (("." not in gold) and name.rsplit(".", 1)[-1] == gold and "." in name)
    return JudgeResult(
        "repoqa-exact",
        [Score("accuracy", float(ok))],
        [Judgment(item=output[:200], label={"named": name, "correct": ok}, source="rule")],
    )


# ---------------------------------------------------------------- LOFT execution match


def normalise_cell(cell: Any) -> str:
    try:  # as LOFT: anything float() reads (booleans included) is a number to two decimals
        return f"{float(cell):.2f}"
    except (TypeError, ValueError):
        return str(cell).strip().lower()


def normalise_rows(rows: Any) -> list[list[str]]:
    if not isinstance(rows, list):
        raise ValueError(f"rows must be a list of lists, got {type(rows).__name__}")
    if rows and not isinstance(rows[0], list):
        rows = [rows]  # a single row given flat, as LOFT accepts
    out = []
    for r in rows:
        if not isinstance(r, list):
            raise ValueError("every row must be a list of cells")
        out.append([c for c in (normalise_cell(x) for x in r) if c])
    return out


def exec_match(pred_rows: Any, gold_rows: Any, ordered: bool = False) -> float:
    """1.0 when the answered rows equal the gold rows after normalisation, else 0.0."""
    gold = [set(r) for r in normalise_rows(gold_rows)]
    pred = [set(r) for r in normalise_rows(pred_rows)]
    if len(gold) != len(pred):
        return 0.0
    if ordered:
        return float(pred == gold)
    return float(all(p in gold for p in pred))


_FINAL_ANSWER = re.compile(r"final answer", re.I)
_INNER_QUOTE = re.compile(r"([A-Za-z0-9])'([A-Za-z0-9])")  # "the devil's" inside a '...' literal


def _literal_list(text: str) -> Any:
    """A list written as JSON or as a Python literal (LOFT parses answers with `ast.literal_eval`)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        try:
            return ast.literal_eval(_INNER_QUOTE.sub(r"\1\\'\2", text))
        except (ValueError, SyntaxError) as exc:
            raise ValueError(f"the answer's list is neither JSON nor a Python literal: {exc}") from None


def answer_rows_text(text: str) -> str:
    """The rows of a LOFT answer text: the bracketed part of the first line naming the "Final Answer"
    (markdown `*` and backticks removed, as LOFT does); a reply that is only a list also counts."""
    plain = text.replace("*", "").replace("`", "")
    for line in plain.splitlines():
        if _FINAL_ANSWER.search(line) and "[" in line and "]" in line:
            return line[line.find("[") : line.rfind("]") + 1]
    whole = _FENCE.sub("", text).strip()
    if whole.startswith("[") and whole.endswith("]"):
        return whole
    raise ValueError('the answer holds no "Final Answer: [[...]]" line (LOFT\'s answer format)')


def parse_rows(output: Any) -> Any:
    """Rows from a list, a LOFT answer text, or LOFT's `model_outputs` (one answer per turn: the first)."""
    if isinstance(output, dict) and "model_outputs" in output:
        output = output["model_outputs"][0]
    if isinstance(output, str):
        output = _literal_list(answer_rows_text(output))
    return output


@judge_info(
    "loft-exec",
    ("spider",),
    False,
    "1 if the answered rows equal the gold rows (LOFT normalisation)",
    metrics=("accuracy",),
)
def judge_exec_match(
    output: Any,
    gold: Any,
    llm: LLM | None = None,
    *,
    metadata: dict[str, Any] | None = None,
    ordered: bool | None = None,
) -> JudgeResult:
    try:
        normalise_rows(gold)
    except ValueError as exc:
        raise JudgeError(f"LOFT gold must be a list of rows (lists of cells): {exc}") from None
    ordered = bool(ordered)  # LOFT's scorer: order is not enforced, whatever the gold SQL sorts
    try:
        rows = parse_rows(output)
        value = exec_match(rows, gold, ordered)
        j = Judgment(item=str(output)[:200], label={"rows": normalise_rows(rows), "match": value}, source="rule")
    except (ValueError, json.JSONDecodeError) as exc:
        # An unreadable answer is a wrong answer; the reason is kept with the judgment.
        value = 0.0
        j = Judgment(
            item=str(output)[:200],
            label=None,
            valid=False,
            source="rule",
            failures=[{"raw": str(output)[:2000], "reason": str(exc)}],
        )
    return JudgeResult("loft-exec", [Score("accuracy", value)], [j], {"ordered": ordered})
