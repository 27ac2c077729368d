"""arXiv long-document summarisation (F-ART): article -> chunks, abstract -> the reference summary
(gold `{"reference": abstract, "sentences": [its sentences as the dataset gives them]}`; ROUGE and
KGScore score against the reference, ROUGE-Lsum uses the sentences).

Two record formats are read:
- the original release (Cohan et al., 2018): `article_id`, `article_text` (list of sentences),
  `abstract_text` (sentences wrapped in `<S> ... </S>`), `section_names`, `sections` (sentence lists);
- the Hugging Face layout (e.g. `ccdv/arxiv-summarization`): `article` and `abstract` strings; its
  `section` configuration keeps one sentence per line (joined with " \n "), its `document`
  configuration joins the sentences with a space into one line, which is segmented again with
  `memloop.eval.datasets.arxiv_sentences` (Punkt made for lowercased, tokenised arXiv text).
Each sample's metadata names the layout its sentences came from (`sentence_split`: "release list",
"lines" or "punkt") and their count (`sentences`).
F-ART feeds articles in chunks of 15 sentences; `chunk_tokens` packs sentences up to a token budget
instead (with the BooookScore chunker). `by_section=True` never lets a chunk cross a section boundary.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

from memloop.eval.datasets.arxiv_sentences import split_arxiv_sentences
from memloop.eval.datasets.chunker import chunk_paragraphs
from memloop.eval.datasets.errors import DatasetError, EmptyDatasetError, MissingFieldError
from memloop.eval.datasets.records import Record, read_records
from memloop.eval.datasets.sample import Sample, slug
from memloop.eval.tokens import TokenizerLike

_TAGS = re.compile(r"</?S>")


def _clean(sentence: str) -> str:
    return " ".join(_TAGS.sub(" ", sentence).split())


def _lines_or_sentences(text: str) -> tuple[list[str], str]:
    """(sentences, how they were found): the lines when the text has several, else Punkt's sentences."""
    lines = [_clean(x) for x in text.split("\n") if x.strip()]
    if len(lines) > 1:
        return lines, "lines"
    return [s for s in (_clean(x) for x in split_arxiv_sentences(text)) if s], "punkt"


def parse_arxiv_record(rec: Record, where: str) -> tuple[str, list[list[str]], list[str], list[str], str]:
    """(article id, sentences grouped by section, section names, the abstract's sentences as the dataset
    gives them: `<S>` tags in the release, one per line on the hub, how the article's sentences were
    found: "release list", "lines" or "punkt")."""
    if isinstance(rec.get("article_text"), list):
        sections = rec.get("sections")
        if isinstance(sections, list) and sections and all(isinstance(s, list) for s in sections):
            groups = [[_clean(x) for x in sec if isinstance(x, str) and _clean(x)] for sec in sections]
        else:
            groups = [[_clean(x) for x in rec["article_text"] if isinstance(x, str) and _clean(x)]]
        abstract_raw = rec.get("abstract_text")
        if not isinstance(abstract_raw, list):
            raise MissingFieldError(f"{where}: 'abstract_text' must be a list of sentences")
        abstract = [_clean(x) for x in abstract_raw if isinstance(x, str) and _clean(x)]
        names = [str(n) for n in rec.get("section_names", [])]
        article_id = str(rec.get("article_id") or "")
        split_by = "release list"
    elif isinstance(rec.get("article"), str):
        sentences, split_by = _lines_or_sentences(rec["article"])
        groups = [sentences]
        abstract = _lines_or_sentences(rec["abstract"])[0] if isinstance(rec.get("abstract"), str) else []
        names, article_id = [], str(rec.get("article_id") or rec.get("id") or "")
    else:
        raise MissingFieldError(
            f"{where}: expected 'article_text' (list of sentences) as in the arXiv release, "
            "or 'article' (string) as on the Hugging Face hub"
        )
    groups = [g for g in groups if g]
    if not groups:
        raise MissingFieldError(f"{where}: the article has no sentences")
    if not abstract:
        raise MissingFieldError(f"{where}: the abstract (the summary reference) is missing or empty")
    if not article_id:
        article_id = hashlib.sha1(" ".join(s for g in groups for s in g).encode()).hexdigest()[:12]
    return article_id, groups, names, abstract, split_by


def _chunks(
    groups: list[list[str]], by_section: bool, chunk_sentences: int, chunk_tokens: int | None, tokenizer: TokenizerLike
) -> list[str]:
    units = groups if by_section else [[s for g in groups for s in g]]
    out: list[str] = []
    for sentences in units:
        if chunk_tokens is not None:
            out.extend(chunk_paragraphs(sentences, chunk_tokens, tokenizer))
        else:
            out.extend(" ".join(sentences[i : i + chunk_sentences]) for i in range(0, len(sentences), chunk_sentences))
    return out


def load_arxiv(
    path: str | Path,
    chunk_sentences: int = 15,
    chunk_tokens: int | None = None,
    tokenizer: TokenizerLike = None,
    by_section: bool = False,
    limit: int | None = None,
    split: str = "test",
    revision: str | None = None,
    config_name: str | None = None,
) -> list[Sample]:
    """Articles from a .jsonl/.json/.parquet file (either layout), a dataset directory, or a hub id at a
    pinned `revision` and `config_name` (needs network or the HF cache; `memloop.eval.datasets.hub`)."""
    if chunk_sentences < 1:
        raise DatasetError(f"chunk_sentences must be at least 1 (got {chunk_sentences})")
    samples = []
    for where, rec in read_records(path, "arXiv file", split=split, revision=revision, config_name=config_name):
        article_id, groups, names, abstract, split_by = parse_arxiv_record(rec, where)
        chunks = _chunks(groups, by_section, chunk_sentences, chunk_tokens, tokenizer)
        meta: dict[str, Any] = {
            "article_id": article_id,
            "section_names": names,
            "sentences": sum(len(g) for g in groups),
            "sentence_split": split_by,
            "source": where,
        }
        if chunk_tokens is not None:
            meta["chunk_tokens"] = chunk_tokens
        # the abstract's own sentence lines go with it: ROUGE-Lsum reads them instead of re-splitting
        # lowercased arXiv text (whose "fig ." and "et al ." a sentence splitter takes for ends)
        gold = {"reference": " ".join(abstract), "sentences": abstract}
        samples.append(
            Sample(
                id=f"arxiv/{slug(article_id)}",
                task="arxiv",
                chunks=tuple(chunks),
                query="Summarize the article.",
                gold=gold,
                metadata=meta,
            )
        )
        if limit is not None and len(samples) >= limit:
            break
    if not samples:
        raise EmptyDatasetError(f"arXiv file {path} has no articles")
    return samples
