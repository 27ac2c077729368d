"""MemoryAgentBench (Hu, Wang, McAuley, ICLR 2026): one long context, many questions, four competencies.

The hub dataset `ai-hyz/MemoryAgentBench` has four splits, one per competency — `Accurate_Retrieval`,
`Test_Time_Learning`, `Long_Range_Understanding`, `Conflict_Resolution` — and each row is one context
with its questions: `context` (str), `questions` (list of str), `answers` (one list of accepted
strings per question), `metadata` (a struct: `source` — the sub-dataset, e.g. `factconsolidation_sh_6k`,
`eventqa_full`, `ruler_qa1_197K` —, `qa_pair_ids`, `question_ids`, `question_types`, `question_dates`,
`previous_events`, `demo`, `keypoints`, ...). The benchmark reads a split, keeps the rows whose
`metadata.source` equals the configured sub-dataset and takes the first `max_test_samples`
(utils/eval_data_utils.py); `sources` here takes exact names or shell patterns (`eventqa_*`), and each
source's first `max_test_samples` rows are taken as the benchmark's configs set them (DetectiveQA 10,
∞Bench-Sum 100: `memloop.eval.datasets.mab_sources`); `contexts_per_source` cuts that count for a reduced
run (never raises it), and each sample records both counts (`scored_items.benchmark_contexts`, and
`contexts_taken`) so that a report can say a run was reduced. A local file (JSONL, JSON, Parquet) has no splits:
it is read once, and a row goes under the split it names (`split`) or else its source's
(`memloop.eval.datasets.mab_sources`: FactConsolidation is Conflict_Resolution); a row without a source is
refused (`MissingSourceError`).

Chunking is the benchmark's `chunk_text_into_sentences` (utils/eval_other_utils.py): the context is
split into sentences, sentences are packed greedily in order while the chunk's token count (the sum
of its sentences' counts) stays within `chunk_tokens` (4096 in every data config), and a chunk's
sentences are joined with one space. A sentence longer than `chunk_tokens` is a chunk of its own.
Two departures, both recorded in each sample's metadata (docs/papers/memoryagentbench.md): the
benchmark counts with gpt-4o-mini's tiktoken encoding (o200k_base) and splits with NLTK's trained
English punkt model, and neither ships offline here — tokens are counted with `tokenizer` (default
cl100k_base, the project's offline encoding; pass "o200k_base" where tiktoken has it cached) and
sentences split by NLTK's Punkt algorithm with default (untrained) parameters; and where the
benchmark emits an empty first chunk when the context's first sentence alone exceeds the budget,
that empty chunk is not kept.

A sample is one context: `chunks` as above, `query` None (the questions are many), `gold`
`{"questions": [...], "answers": [[accepted, ...], ...], "qa_pair_ids": [...], "question_ids": [...],
"question_types": [...]}` (`qa_pair_ids` label the judgments, from `question_ids` where a row has no other;
`question_ids` as the row has them: LongMemEval's, whose "_abs" the answer check reads, as the benchmark's
`longmem_qa_evaluate.py` does; plus `keypoints` where the row has them, and for the recommendation source
`entity2id`, the hub's movie map read beside the rows: `memloop.eval.datasets.mab_entities`)
and metadata `source`, `competency` (the split), `context_index` (its position among the source's rows),
`chunk_tokens`, `chunk_counter`, `where` (the file or `repo@commit[split][i]` read).
"""

from __future__ import annotations

import dataclasses
import fnmatch
import re
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from memloop.eval.datasets.errors import EmptyDatasetError, MissingFieldError
from memloop.eval.datasets.hub import is_hub_id
from memloop.eval.datasets.mab_entities import read_entity_map
from memloop.eval.datasets.mab_sources import benchmark_contexts, split_of_source
from memloop.eval.datasets.records import Record, read_records
from memloop.eval.datasets.sample import Sample, slug
from memloop.eval.errors import DatasetError
from memloop.eval.tokens import TokenizerLike, token_counter

HUB_ID = "ai-hyz/MemoryAgentBench"
SPLITS = ("Accurate_Retrieval", "Test_Time_Learning", "Long_Range_Understanding", "Conflict_Resolution")
COMPETENCY = {
    "Accurate_Retrieval": "AR",
    "Test_Time_Learning": "TTL",
    "Long_Range_Understanding": "LRU",
    "Conflict_Resolution": "CR",
}
CHUNK_TOKENS = 4096  # `chunk_size` of every data config in configs/data_conf/
TASK = "memoryagentbench"


_MARKER = re.compile(r"^\(?\d{1,6}[.)]$")


def sentences(text: str) -> list[str]:
    """The context's sentences (NLTK's Punkt algorithm, default parameters: no trained model to download).

    Untrained Punkt takes a bare enumeration marker ("4." of "4. The capital of Zarnia is Orsk.") for a
    sentence; it is kept with the sentence it numbers, because FactConsolidation's serial numbers say
    which fact is newer and must not end up in the previous chunk."""
    from nltk.tokenize.punkt import PunktSentenceTokenizer

    out: list[str] = []
    pending = ""
    for sentence in PunktSentenceTokenizer().tokenize(text):
        if _MARKER.match(sentence):
            pending = f"{pending} {sentence}".strip()
            continue
        out.append(f"{pending} {sentence}" if pending else sentence)
        pending = ""
    if pending:
        out.append(pending)
    return out


def chunk_sentences(
    text: str, chunk_tokens: int = CHUNK_TOKENS, count: Callable[[str], int] | None = None
) -> list[str]:
    """The benchmark's greedy sentence packing: a chunk grows while the sum of its sentences' token
    counts stays within `chunk_tokens`; sentences joined with one space (empty chunks not kept)."""
    if isinstance(chunk_tokens, bool) or not isinstance(chunk_tokens, int) or chunk_tokens < 1:
        raise DatasetError(f"chunk_tokens must be a positive integer (got {chunk_tokens!r})")
    count = count or token_counter(None)
    chunks: list[str] = []
    current: list[str] = []
    used = 0
    for sentence in sentences(text):
        n = count(sentence)
        if used + n > chunk_tokens:
            if current:
                chunks.append(" ".join(current))
            current, used = [sentence], n
        else:
            current.append(sentence)
            used += n
    if current:
        chunks.append(" ".join(current))
    return chunks


def _as_list(value: Any) -> list[Any]:
    """The benchmark's `_ensure_field_is_list`: a list stays, a single value is wrapped, empty is []."""
    if isinstance(value, list):
        return value
    if isinstance(value, tuple):
        return list(value)
    return [value] if value else []


def _accepted(answer: Any, where: str, i: int) -> list[str]:
    """One question's accepted answers as strings (a bare string is one accepted answer)."""
    values = _as_list(answer)
    flat = [v for sub in values for v in (sub if isinstance(sub, list) else [sub])]
    out = [str(v) for v in flat if v is not None and str(v).strip()]
    if not out:
        raise MissingFieldError(
            f"{where}: question {i} has no accepted answer in 'answers'; every question needs "
            "at least one (a list of accepted strings per question)"
        )
    return out


class MissingSourceError(MissingFieldError):
    """A row does not name its source (sub-dataset): the source filter, the competency and the scoring need it."""


@dataclasses.dataclass(frozen=True)
class Row:
    source: str
    context: str
    questions: list[str]
    answers: list[list[str]]
    metadata: dict[str, Any]
    where: str


def parse_row(record: Record, where: str) -> Row:
    """One hub row checked: a non-empty context, as many answer lists as questions, a source."""
    context = record.get("context")
    if not isinstance(context, str) or not context.strip():
        raise MissingFieldError(
            f"{where}: 'context' is missing or empty: MemoryAgentBench rows carry context, "
            "questions, answers and metadata"
        )
    meta = record.get("metadata")
    meta = dict(meta) if isinstance(meta, dict) else {}
    source = meta.get("source") or record.get("source")
    if not isinstance(source, str) or not source:
        raise MissingSourceError(
            f"{where}: no 'metadata.source' (the sub-dataset, e.g. 'factconsolidation_sh_6k'), "
            "which the source filter, the competency and the scoring need: give every row its "
            "source, as the hub dataset's rows have"
        )
    questions = [str(q) for q in _as_list(record.get("questions"))]
    if not questions:
        raise MissingFieldError(f"{where}: 'questions' is missing or empty")
    raw_answers = _as_list(record.get("answers"))
    if len(raw_answers) != len(questions):
        raise MissingFieldError(
            f"{where}: {len(questions)} questions but {len(raw_answers)} answer lists; "
            "'answers' needs one list of accepted strings per question"
        )
    answers = [_accepted(a, where, i) for i, a in enumerate(raw_answers)]
    return Row(source, context, questions, answers, meta, where)


def _source_matches(source: str, patterns: Sequence[str] | None) -> bool:
    return patterns is None or any(fnmatch.fnmatchcase(source, p) for p in patterns)


def _indexed(meta: dict[str, Any], field: str, n: int) -> list[Any]:
    """A per-question metadata list (qa_pair_ids, question_types), or Nones where the row has none."""
    values = _as_list(meta.get(field))
    return values if len(values) == n else [None] * n


def _ids(values: list[Any]) -> list[str | None]:
    return [str(v) if v is not None else None for v in values]


def _pair_ids(meta: dict[str, Any], n: int) -> list[Any]:
    """Each question's label in judgments: `qa_pair_ids`, else `question_ids` where a row has only those."""
    ids = _indexed(meta, "qa_pair_ids", n)
    return ids if any(i is not None for i in ids) else _indexed(meta, "question_ids", n)


def load_memoryagentbench(
    path: str | Path = HUB_ID,
    splits: Sequence[str] = SPLITS,
    revision: str | None = None,
    sources: str | list[str] | None = None,
    contexts_per_source: int | None = None,
    chunk_tokens: int = CHUNK_TOKENS,
    tokenizer: TokenizerLike = None,
    limit: int | None = None,
    entity2id: str | None = None,
) -> list[Sample]:
    """One sample per context of the chosen `splits` whose source matches `sources` (names or patterns).
    The recommendation source's gold carries the movie map read beside the data (`entity2id` names
    another file: `memloop.eval.datasets.mab_entities`)."""
    splits = [splits] if isinstance(splits, str) else list(splits)
    unknown = [s for s in splits if s not in SPLITS]
    if unknown or not splits:
        raise DatasetError(f"unknown MemoryAgentBench split(s) {unknown}: choose among {list(SPLITS)}")
    patterns = [sources] if isinstance(sources, str) else (list(sources) if sources is not None else None)
    if contexts_per_source is not None and contexts_per_source < 1:
        raise DatasetError(
            f"contexts_per_source must be at least 1, or null for the benchmark's counts (got {contexts_per_source})"
        )
    count = token_counter(tokenizer)
    counter = (
        str(tokenizer)
        if isinstance(tokenizer, (str, Path))
        else ("cl100k_base" if tokenizer is None else type(tokenizer).__name__)
    )
    seen: dict[str, int] = {}
    kept: list[tuple[str, Row, int]] = []
    for split, row in _rows(path, splits, revision):
        index = seen.get(row.source, 0)
        seen[row.source] = index + 1
        # the benchmark's count needs the source's row total, known at the end: keep only rows it may take
        if _source_matches(row.source, patterns) and index < benchmark_contexts(
            row.source, contexts_per_source or index + 1
        ):
            kept.append((split, row, index))
    out: list[Sample] = []
    for split, row, index in kept:
        bench = benchmark_contexts(row.source, seen[row.source])
        taken = bench if contexts_per_source is None else min(bench, contexts_per_source)
        if index < taken:
            out.append(_sample(row, split, index, chunk_tokens, count, counter, bench, taken))
    if not out:
        raise EmptyDatasetError(
            f"MemoryAgentBench {path}: no context of splits {splits} matches sources {patterns}; "
            f"sources present: {sorted(seen)}"
        )
    out = out[:limit] if limit is not None else out
    recsys = [s for s in out if s.metadata["source"].startswith("recsys_")]
    if recsys:  # read once, shared by the source's contexts
        movies = read_entity_map(path, revision, entity2id)
        for s in recsys:
            s.gold["entity2id"] = movies
    return out


def _has_splits(path: str | Path) -> bool:
    """Whether `path` is read split by split: a hub id, a copy of the dataset's repository, or a saved
    DatasetDict. A file, or one saved Dataset, holds its rows once, whatever split is asked for."""
    if is_hub_id(path):
        return True
    p = Path(path)
    return p.is_dir() and not ((p / "state.json").is_file() and not (p / "dataset_dict.json").is_file())


def _row_split(record: Record, row: Row, splits: tuple[str, ...]) -> str:
    """A file row's split: the one it names (`split`, top level or in its metadata), else its source's."""
    named = record.get("split") or row.metadata.get("split")
    if named is None:
        return split_of_source(row.source, row.where, splits)
    if named not in splits:
        raise DatasetError(f"{row.where}: split {named!r} is not one of MemoryAgentBench's {list(splits)}")
    return str(named)


def _rows(path: str | Path, splits: Sequence[str], revision: str | None) -> Iterator[tuple[str, Row]]:
    """(split, row) of the chosen splits. A hub id or a repository copy is read split by split; a local file
    once, each row placed by the split it names or its source, so no context is counted twice."""
    if _has_splits(path):
        for split in splits:
            for where, record in read_records(path, "MemoryAgentBench file", split=split, revision=revision):
                yield split, parse_row(record, where)
        return
    for where, record in read_records(path, "MemoryAgentBench file"):
        row = parse_row(record, where)
        split = _row_split(record, row, SPLITS)
        if split in splits:
            yield split, row


def _sample(
    row: Row,
    split: str,
    index: int,
    chunk_tokens: int,
    count: Callable[[str], int],
    counter: str,
    bench: int,
    taken: int,
) -> Sample:
    n = len(row.questions)
    gold = {
        "questions": row.questions,
        "answers": row.answers,
        "qa_pair_ids": _ids(_pair_ids(row.metadata, n)),
        # LongMemEval's own ids, kept apart: the benchmark's answer check reads "_abs" (abstention) here
        "question_ids": _ids(_indexed(row.metadata, "question_ids", n)),
        "question_types": _indexed(row.metadata, "question_types", n),
    }
    if row.metadata.get("keypoints"):  # ∞Bench-Sum's expert key points, for its LLM-judged recall
        gold["keypoints"] = [str(k) for k in _as_list(row.metadata["keypoints"])]
    meta = {
        "source": row.source,
        "competency": COMPETENCY[split],
        "split": split,
        "context_index": index,
        "questions": n,
        "chunk_tokens": chunk_tokens,
        "chunk_counter": counter,
        "sentence_splitter": "nltk-punkt-untrained",
        "where": row.where,
        "contexts_taken": taken,
        # what a context whose method produced nothing counts as: its questions, each a zero in its source;
        # and how many contexts of the source the benchmark runs, so a report can say a run was reduced
        "scored_items": {
            "count": n,
            "source": row.source,
            "competency": COMPETENCY[split],
            "benchmark_contexts": bench,
        },
    }
    return Sample(
        id=f"mab/{slug(row.source)}/{index}",
        task=TASK,
        chunks=tuple(chunk_sentences(row.context, chunk_tokens, count)),
        query=None,
        gold=gold,
        metadata=meta,
    )
