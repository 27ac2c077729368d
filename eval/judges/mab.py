"""MemoryAgentBench's scoring, as its code scores (HUST-AI-HYZ/MemoryAgentBench, utils/eval_other_utils.py).

Per question (`question_metrics`), from the model's reply and the question's accepted answers:

- `normalize`: lower case, punctuation removed, the articles a/an/the removed, whitespace collapsed
  (DrQA's normalisation, which the benchmark adopts).
- `exact_match`: normalised reply == a normalised accepted answer; `substring_exact_match`: a
  normalised accepted answer is a substring of the normalised reply; `f1`: token-overlap F1 (0 when
  either side is yes/no/noanswer and they differ); `rougeL_f1`, `rougeL_recall`, `rougeLsum_f1`,
  `rougeLsum_recall` (rouge-score, stemmed). Each is the maximum over the accepted answers.
- The reply is scored as given and as parsed (`parse_output`: the text after "Answer:", else the
  first line) and each metric keeps the better of the two — except for the in-context-learning
  sources (`icl_*`) and EventQA (`eventqa_*`), which score the parsed reply only, EventQA adding
  `eventqa_recall` (1 when every accepted answer occurs in the reply, case-insensitively);
  `ruler_niah*` scores only `ruler_recall` (the share of answers occurring in the reply); the
  recommendation source (`recsys_*`) scores `recsys_recall@1/5/10`: the reply's numbered list, each
  item matched to its nearest movie name by edit distance, against the gold movie ids' names
  (the hub's `entity2id.json`, which the loader puts into the source's gold).
- LongMemEval (`longmemeval_*`) and ∞Bench summarisation (`infbench_sum*`) are scored by an LLM judge
  (GPT-4o in the benchmark): the `mab-llm` judge scores them with the run's judge model
  (`memloop.eval.judges.mab_llm`) and every other source as `mab` does; under `mab` (no judge model) their
  questions are marked `llm_judged` and left unscored, never counted as zero (`PRIMARY` names what the
  paper's table reports).

Per source the benchmark's figure is the mean over all its questions x 100 (main.py averages every
question's metric); per competency memloop reports the unweighted mean of its columns, the paper's
tables' layout (one column per source grouped by competency, the five ICL sets averaged into one
"MCC" column), and the mean of the four competencies as the paper's "Overall". `source_figures` adds a 95%
bootstrap interval over contexts (questions of one context resampled together: they share a memory).
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import string
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np
from memloop.eval.errors import JudgeError
from memloop.eval.judges import judge_info
from memloop.eval.judges.aggregation import LEVEL, RESAMPLES, SEED
from memloop.eval.judges.mab_llm import TEMPLATES as LLM_TEMPLATES
from memloop.eval.judges.records import JudgeResult, Judgment, Score
from memloop.eval.llm import LLM

# the metric each source family's table column reports (the benchmark's README, "Clarification on
# Evaluation Metrics"); first matching prefix wins
PRIMARY: tuple[tuple[str, str], ...] = (
    ("eventqa_", "substring_exact_match"),
    ("ruler_qa", "substring_exact_match"),
    ("ruler_niah", "ruler_recall"),
    ("factconsolidation_", "substring_exact_match"),
    ("detective_qa", "exact_match"),
    ("icl_", "exact_match"),
    ("recsys_", "recsys_recall@5"),
    ("longmemeval_", "llm_judge"),
    ("infbench_sum", "llm_judge_f1"),
)
LLM_JUDGED = ("llm_judge", "llm_judge_f1")
COMPETENCIES = ("AR", "TTL", "LRU", "CR")
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = set(string.punctuation)


def primary_metric(source: str) -> str:
    for prefix, metric in PRIMARY:
        if source.startswith(prefix):
            return metric
    return "substring_exact_match"  # the benchmark's accuracy for any other QA source


def normalize(text: str) -> str:
    text = "".join(ch for ch in text.lower() if ch not in _PUNCT)
    return " ".join(_ARTICLES.sub(" ", text).split())


def f1_score(prediction: str, truth: str) -> float:
    p, t = normalize(prediction), normalize(truth)
    if (p in ("yes", "no", "noanswer") or t in ("yes", "no", "noanswer")) and p != t:
        return 0.0
    common = sum((Counter(p.split()) & Counter(t.split())).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(p.split()), common / len(t.split())
    return 2 * precision * recall / (precision + recall)


def parse_output(text: str, prefix: str = "Answer:") -> str:
    """The text after `prefix` on its line, else the reply's first line (the benchmark's `parse_output`)."""
    m = re.search(f"(?:{re.escape(prefix)})(.*)(?:\n|$)", text, flags=re.IGNORECASE) or re.search(
        r"^(.*)(?:\n|$)", text
    )
    found = m[1].strip() if m else ""
    return re.sub(f"^{re.escape(prefix)}", "", found, flags=re.IGNORECASE).strip()


@lru_cache(maxsize=1)
def _rouge():
    from rouge_score import rouge_scorer

    return rouge_scorer.RougeScorer(["rougeL", "rougeLsum"], use_stemmer=True)


def text_metrics(prediction: str, answers: Sequence[str]) -> dict[str, float]:
    """exact_match, f1, substring_exact_match and ROUGE-L/Lsum, each the best over the accepted answers."""
    out = {
        "exact_match": float(max(normalize(prediction) == normalize(a) for a in answers)),
        "f1": max(f1_score(prediction, a) for a in answers),
        "substring_exact_match": float(max(normalize(a) in normalize(prediction) for a in answers)),
    }
    scores = [_rouge().score(target=a, prediction=prediction) for a in answers]
    for kind in ("rougeL", "rougeLsum"):
        out[f"{kind}_f1"] = max(s[kind].fmeasure for s in scores)
        out[f"{kind}_recall"] = max(s[kind].recall for s in scores)
    return out


def _recall_in(reply: str, answers: Sequence[str]) -> float:
    return sum(a.lower() in reply.lower() for a in answers) / len(answers)


def movie_name(text: str) -> str:
    """A movie name as the benchmark compares them: path and separators dropped, parentheses removed."""
    name = text.split("/")[-1].replace("_", " ").replace("-", " ").replace(">", " ")
    return re.sub(r"\s+", " ", re.sub(r"\([^()]*\)", "", name)).strip()


def recommendations(reply: str) -> list[str]:
    """The reply's recommended items: the list from its first "1." on (else comma-separated), cleaned."""
    _, sep, rest = reply.partition("1.")
    items = rest.split("\n") if sep else reply.replace(",", "\n").split("\n")
    cleaned = [re.sub(r"\([^()]*\)", "", item.strip()) for item in items]
    cleaned = [re.sub(r"^(?:\d+[\.\)、]?\s*[\-\—\–]?\s*)?", "", c) for c in cleaned]
    return [re.sub(r"\s+", " ", c).strip() for c in cleaned]


def nearest(name: str, candidates: Sequence[str]) -> str:
    from nltk.metrics.distance import edit_distance

    return min(candidates, key=lambda c: edit_distance(name.lower(), c.lower()))


def recsys_metrics(reply: str, answers: Sequence[str], names: dict[int, str]) -> dict[str, float]:
    try:
        truth = [names[int(a.strip())] for a in answers]
    except (ValueError, KeyError) as exc:
        raise JudgeError(
            f"recsys gold answers must be movie ids found in entity2id.json ({exc}); check "
            "the `entity2id` option points at the hub dataset's entity2id.json"
        ) from None
    candidates = sorted(set(names.values()))
    predicted = [nearest(item, candidates) for item in recommendations(reply)]
    return {f"recsys_recall@{k}": sum(m in predicted[:k] for m in truth) / len(truth) for k in (1, 5, 10)}


def entity_names(entity2id: dict[str, int]) -> dict[int, str]:
    """The hub's entity2id map ({"<path or name>": id}) as {id: movie name}, as the benchmark builds it."""
    return {int(i): movie_name(name) for name, i in entity2id.items()}


@lru_cache(maxsize=2)
def load_entity_names(path: str) -> dict[int, str]:
    """The hub's entity2id.json file as {id: movie name}."""
    p = Path(path)
    if not p.is_file():
        raise JudgeError(f"entity2id file {p} does not exist: pass the hub dataset's entity2id.json as `entity2id`")
    try:
        data = json.loads(p.read_text())
    except json.JSONDecodeError as exc:
        raise JudgeError(f"{p} is not valid JSON ({exc.msg}); re-download the hub dataset's entity2id.json") from None
    return entity_names(data)


def movie_names(gold: dict[str, Any], entity2id: str | None) -> dict[int, str]:
    """The recommendation source's movie names: the judge option's file where given, else the map the
    loader put into the gold (read beside the data, as the rows are)."""
    if entity2id is not None:
        return load_entity_names(entity2id)
    if isinstance(gold.get("entity2id"), dict):
        return entity_names(gold["entity2id"])
    raise JudgeError(
        "recsys sources need the movie names: load the data with the memoryagentbench loader, which "
        "reads the hub dataset's entity2id.json beside the rows, or set the judge option `entity2id`"
    )


def llm_judged(source: str) -> bool:
    return primary_metric(source) in LLM_JUDGED


def question_metrics(
    source: str, reply: str, answers: Sequence[str], entity2id: str | None = None, names: dict[int, str] | None = None
) -> dict[str, float]:
    """The benchmark's rule-scored metrics of one reply to one question of `source` (see the module
    docstring); {} for the LLM-judged sources (`llm_question_metrics` scores those). The recommendation
    source needs the movie `names` (or the `entity2id` file they are read from)."""
    if not answers:
        raise JudgeError(f"{source}: a question without accepted answers cannot be scored")
    if llm_judged(source):
        return {}
    if source.startswith("recsys_"):
        return recsys_metrics(reply, answers, names if names is not None else movie_names({}, entity2id))
    if source.startswith("ruler_niah"):
        return {"ruler_recall": _recall_in(reply, answers)}
    parsed = parse_output(reply)
    if source.startswith("icl_"):
        return text_metrics(parsed, answers)
    if source.startswith("eventqa_"):
        return dict(text_metrics(parsed, answers), eventqa_recall=float(_recall_in(reply, answers) == 1))
    raw = text_metrics(reply, answers)
    return {k: max(v, w) for (k, v), w in zip(raw.items(), text_metrics(parsed, answers).values())}


def lme_question_id(gold: dict[str, Any], i: int) -> str:
    """LongMemEval question `i`'s id from `question_ids`, the field the benchmark's answer check reads
    (`_abs` there marks an abstention question); `qa_pair_ids` is another id and is never read for it."""
    ids = gold.get("question_ids") or []
    if i >= len(ids) or not isinstance(ids[i], str) or not ids[i]:
        raise JudgeError(
            f"LongMemEval question {i} has no id in the gold's question_ids: the answer check reads "
            'it ("_abs" marks an abstention question); load the data with the memoryagentbench '
            "loader from rows whose metadata.question_ids has one id per question"
        )
    return ids[i]


def llm_question_metrics(
    llm: LLM, source: str, gold: dict[str, Any], i: int, reply: str, max_attempts: int
) -> tuple[dict[str, float], list[Judgment]]:
    """An LLM-judged source's metrics of reply `i` (`memloop.eval.judges.mab_llm`) and the judge's judgments."""
    from memloop.eval.judges import mab_llm

    accepted = gold["answers"][i]
    answer = accepted[0] if len(accepted) == 1 else " / ".join(accepted)
    if source.startswith("longmemeval_"):
        types = gold.get("question_types") or [None] * len(gold["answers"])
        value, j = mab_llm.lme_check(
            llm, gold["questions"][i], answer, reply, types[i], lme_question_id(gold, i), max_attempts=max_attempts
        )
        return {"llm_judge": value}, [j]
    return mab_llm.summary_scores(llm, reply, gold.get("keypoints") or [], accepted[0], max_attempts=max_attempts)


def answers_of(output: Any, n: int) -> list[str]:
    """The replies of an ask-many output: a list of strings, or its JSON text, one per question."""
    if output == "":  # the method produced no memory to ask (e.g. no usable schema): nothing right
        return [""] * n
    if isinstance(output, str):
        try:
            output = json.loads(output)
        except json.JSONDecodeError:
            raise JudgeError(
                "MemoryAgentBench needs one reply per question (a JSON list of strings); the method "
                "returned plain text: run a method through the ask-many protocol"
            ) from None
    if not isinstance(output, list) or len(output) != n or not all(isinstance(a, str) for a in output):
        raise JudgeError(
            f"MemoryAgentBench needs a list of {n} replies, one per question (got "
            f"{type(output).__name__}{'' if not isinstance(output, list) else f' of {len(output)}'})"
        )
    return output


@judge_info(
    "mab",
    ("memoryagentbench",),
    False,
    "MemoryAgentBench's per-source metrics of every question's reply (SubEM, EM, F1, ROUGE, recall@k)",
    metrics=("accuracy",),
)
def judge(
    output: Any,
    gold: Any,
    llm: LLM | None = None,
    *,
    metadata: dict[str, Any] | None = None,
    entity2id: str | None = None,
    max_attempts: int = 3,
) -> JudgeResult:
    """One context's replies scored: a judgment per question (its metrics), and per metric the mean over
    the context's questions with `questions` (their count) so that sources average over questions.
    With `llm` (the `mab-llm` judge) the LLM-judged sources are scored too; each question's judge
    calls follow its judgment, labelled {"question", "part"}."""
    meta = metadata or {}
    source = meta.get("source")
    if not isinstance(source, str) or not isinstance(gold, dict) or "answers" not in gold:
        raise JudgeError(
            "MemoryAgentBench scoring needs the loader's gold ({'questions', 'answers'}) and "
            "metadata['source']: load the data with the memoryagentbench loader"
        )
    accepted = gold["answers"]
    replies = answers_of(output, len(accepted))
    primary = primary_metric(source)
    names = movie_names(gold, entity2id) if source.startswith("recsys_") else None  # once per context
    judgments, per_metric = [], {}
    for i, (reply, answers) in enumerate(zip(replies, accepted)):
        m = question_metrics(source, reply, answers, names=names)
        calls: list[Judgment] = []
        if llm is not None and llm_judged(source):
            m, calls = llm_question_metrics(llm, source, gold, i, reply, max_attempts)
        qid = (gold.get("qa_pair_ids") or [None] * len(accepted))[i]
        label = {
            "question": i,
            "qa_pair_id": qid,
            "source": source,
            "competency": meta.get("competency"),
            "metrics": m,
            "primary": primary,
            "llm_judged": primary in LLM_JUDGED,
        }
        judgments.append(
            Judgment(item=f"q{i}: {reply[:200]}", label=label, source="llm" if calls else "rule", valid=bool(m))
        )
        judgments += [
            dataclasses.replace(c, label={"question": i, "part": c.template_id, "verdict": c.label}) for c in calls
        ]
        for k, v in m.items():
            per_metric.setdefault(k, []).append(v)
    scores = [Score(k, float(np.mean(v))) for k, v in sorted(per_metric.items())]
    scores.append(Score("questions", float(len(accepted))))
    if primary in per_metric:
        scores.append(Score("accuracy", float(np.mean(per_metric[primary]))))
    return JudgeResult("mab", scores, judgments, details={"source": source, "primary": primary})


@judge_info(
    "mab-llm",
    ("memoryagentbench",),
    True,
    "MemoryAgentBench as `mab`, with LongMemEval and ∞Bench-Sum judged by the judge model as the benchmark's "
    "LLM judges do",
    LLM_TEMPLATES,
    metrics=("accuracy",),
)
def judge_with_llm(
    output: Any,
    gold: Any,
    llm: LLM | None = None,
    *,
    metadata: dict[str, Any] | None = None,
    entity2id: str | None = None,
    max_attempts: int = 3,
) -> JudgeResult:
    """The `mab-llm` judge: `judge` with the judge model scoring LongMemEval and ∞Bench-Sum."""
    if llm is None:
        raise JudgeError("mab-llm judges LongMemEval and ∞Bench-Sum with a judge model: configure `judge_model`")
    result = judge(output, gold, llm, metadata=metadata, entity2id=entity2id, max_attempts=max_attempts)
    return dataclasses.replace(result, judge="mab-llm")


# ---------------------------------------------------------------- tables


@dataclass(frozen=True)
class QuestionScore:
    """One question's primary-metric value (None: LLM-judged, not scored) within its context and source."""

    source: str
    competency: str
    context: str
    value: float | None


@dataclass
class Figure:
    value: float  # x 100, as the paper prints
    low: float
    high: float
    questions: int  # scored questions
    contexts: int
    unscored: int = 0  # LLM-judged questions not scored (never zero)
    sources: list[str] = field(default_factory=list)


def _draws(values_by_context: list[list[float]], seed: int) -> tuple[float, np.ndarray]:
    """x 100 mean over questions, and its values under RESAMPLES resamples of whole contexts (NaN for
    one context: it has no spread to resample, so no interval rather than a degenerate [x, x])."""
    sums = np.array([sum(v) for v in values_by_context], float)
    counts = np.array([len(v) for v in values_by_context], float)
    if len(sums) < 2:
        return 100 * sums.sum() / counts.sum(), np.full(RESAMPLES, np.nan)
    idx = np.random.default_rng(seed).integers(0, len(sums), size=(RESAMPLES, len(sums)))
    return 100 * sums.sum() / counts.sum(), 100 * sums[idx].sum(1) / counts[idx].sum(1)


def _interval(draws: np.ndarray) -> tuple[float, float]:
    if np.isnan(draws).any():  # a part had a single context: no interval for what it enters
        return math.nan, math.nan
    tail = 100 * (1 - LEVEL) / 2
    lo, hi = np.percentile(draws, [tail, 100 - tail])
    return float(lo), float(hi)


def _by_source(scores: Iterable[QuestionScore]) -> dict[str, tuple[str, list[list[float]], int, int]]:
    """source -> (competency, scored values per context, contexts, unscored questions)."""
    grouped: dict[str, dict[str, list[float | None]]] = {}
    comp: dict[str, str] = {}
    for s in scores:
        grouped.setdefault(s.source, {}).setdefault(s.context, []).append(s.value)
        comp[s.source] = s.competency
    out = {}
    for source, contexts in sorted(grouped.items()):
        scored = [[v for v in vals if v is not None] for vals in contexts.values()]
        out[source] = (
            comp[source],
            [v for v in scored if v],
            len(contexts),
            sum(v is None for vals in contexts.values() for v in vals),
        )
    return out


def source_figures(scores: Iterable[QuestionScore]) -> dict[str, Figure]:
    """Per source: the mean over its questions x 100 with a 95% bootstrap interval over its contexts."""
    out = {}
    for n, (source, (_, scored, contexts, unscored)) in enumerate(_by_source(scores).items()):
        if not scored:
            out[source] = Figure(math.nan, math.nan, math.nan, 0, contexts, unscored, [source])
            continue
        point, draws = _draws(scored, SEED + n)
        out[source] = Figure(point, *_interval(draws), sum(map(len, scored)), contexts, unscored, [source])
    return out


# sources the paper's tables average into one column before the competency's mean: the five ICL
# classification sets are its one "MCC" column of Test-Time Learning, the recommendation set its "Recom."
FAMILIES: tuple[tuple[str, str], ...] = (("icl_", "icl_*"), ("recsys_", "recsys_*"))
OVERALL = "overall"
# the columns a competency's figure must average to be the paper's (Table 2's TTL is mean(MCC, Recom.)),
# by their names in the paper; with some missing the figure is labelled with what it holds, and no Overall
PAPER_COLUMNS: dict[str, tuple[tuple[str, str], ...]] = {"TTL": (("icl_*", "MCC"), ("recsys_*", "Recom"))}


def family(source: str) -> str:
    return next((name for prefix, name in FAMILIES if source.startswith(prefix)), source)


def competency_label(comp: str, families: Iterable[str]) -> str:
    """`comp` when its columns are the paper's, else e.g. "TTL (MCC only)": a figure that is not the
    paper's competency average must not be read as it."""
    parts = PAPER_COLUMNS.get(comp)
    held = set(families)
    if parts is None or all(f in held for f, _ in parts):
        return comp
    return f"{comp} ({' + '.join(name for f, name in parts if f in held)} only)"


def base_competency(label: str) -> str:
    """The competency a column label names ("TTL (MCC only)" -> "TTL")."""
    return label.split(" (", 1)[0]


def competency_figures(scores: Iterable[QuestionScore]) -> dict[str, Figure]:
    """Per competency: the unweighted mean of its columns' figures as the paper's tables lay them out (a
    source is a column, except the ICL sets, averaged into one column first: `FAMILIES`); a source
    without any scored question is left out, its questions counted as unscored, and the competency is keyed
    by what it lacks ("AR (without longmemeval_s)"), as it is not the paper's average. The interval comes
    from resampling each source's contexts and averaging draw by draw as the point is averaged. A
    competency missing one of the paper's columns (`PAPER_COLUMNS`) is keyed by what it holds ("TTL (MCC
    only)"). With all four competencies scored as the paper averages them, `OVERALL` is their mean (the
    paper's "Overall Scores"); otherwise there is no Overall rather than one that means something else."""
    grouped = _by_source(scores)
    out: dict[str, Figure] = {}
    drawn_by_comp: dict[str, tuple[float, np.ndarray]] = {}
    for comp in COMPETENCIES:
        sources = [s for s, g in grouped.items() if g[0] == comp]
        if not sources:
            continue
        counted = [s for s in sources if grouped[s][1]]
        unscored = sum(grouped[s][3] for s in sources)
        contexts = sum(grouped[s][2] for s in sources)
        if not counted:
            out[comp] = Figure(math.nan, math.nan, math.nan, 0, contexts, unscored, [])
            continue
        drawn = {s: _draws(grouped[s][1], SEED + list(grouped).index(s)) for s in counted}
        families: dict[str, list[tuple[float, np.ndarray]]] = {}
        for s in counted:
            families.setdefault(family(s), []).append(drawn[s])
        columns = [
            (float(np.mean([p for p, _ in fam])), np.mean(np.stack([d for _, d in fam]), axis=0))
            for fam in families.values()
        ]
        point = float(np.mean([p for p, _ in columns]))
        draws = np.mean(np.stack([d for _, d in columns]), axis=0)
        label = competency_label(comp, families)
        missing = sorted(set(sources) - set(counted))
        if missing:  # a source the run did not score (LLM-judged under `mab`): not the paper's average
            without = f"without {', '.join(missing)}"
            label = f"{comp} ({without})" if label == comp else f"{label[:-1]}; {without})"
        if label == comp:
            drawn_by_comp[comp] = (point, draws)
        out[label] = Figure(
            point, *_interval(draws), sum(len(v) for s in counted for v in grouped[s][1]), contexts, unscored, counted
        )
    if len(drawn_by_comp) == len(COMPETENCIES):
        draws = np.mean(np.stack([d for _, d in drawn_by_comp.values()]), axis=0)
        parts = [out[c] for c in COMPETENCIES]
        out[OVERALL] = Figure(
            float(np.mean([p for p, _ in drawn_by_comp.values()])),
            *_interval(draws),
            sum(f.questions for f in parts),
            sum(f.contexts for f in parts),
            sum(f.unscored for f in parts),
            [s for f in parts for s in f.sources],
        )
    return out
