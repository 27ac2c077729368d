"""Datasets: every task becomes a list of `Sample`s (id, task, ordered chunks, query, gold, metadata).

Entry point: `load_dataset(task, **options)` (see `registry.py`); `list_tasks()` lists the names (the
registry is their single source). `truncate(sample, n_chunks)` keeps the first chunks and cuts the
gold to match where the task's loader module defines `truncate_gold` (SUMIE: `turns` and `facts`).

Gold format per task (what judges consume; all JSON-serialisable):

- **sumie** (`sumie.loader`): one Sample per entity, `chunks` = the 7 paragraphs in order,
  `query` = "Summarize the information about <entity>." and
  `gold = {"entity_name": str, "entity_category": str,
           "turns": [{attribute: [value, ...]}, ...],          # one dict per paragraph, AGGREGATED over
                                                                 # paragraphs 1..t (turn t's reference)
           "facts": [[{"attribute", "value", "sentence_ids", "evidences"}, ...], ...]}`  # same, itemised
  Per-turn P/R/F1 compares the summary after chunk t with `gold["turns"][t]`; the last turn is the final summary's.
  metadata: `entity`, `entity_category` (inputs of the task), `sentences` (per paragraph, `[[id, text], ...]`),
  `distractor_sentence_ids`, `paragraph_sentiments`, `paragraph_writing_styles`.
- **book** (`books`): `gold = None` (BooookScore is reference-free); metadata `title`, `chunk_tokens`.
- **booksum** (`booksum`, seed 001): one Sample per drawn (chapter k, reference summary) of BookSum;
  `chunks` = the whole book rebuilt from BookSum's rows, chapter k's own text in its place, cut to
  `chunk_tokens`; `gold = {"reference": <chapter k's summary>}`; metadata: `book`, `title`,
  `target_chapter` (k), `chunk_chapters` (each chunk's chapter), `book_units`, `summary_source`,
  `source` (the row read), `draw_seed`, `eligibility_tokenizer`.
- **repoqa** (`repoqa`): one Sample per needle function; `chunks` = the package's source in dependency
  order, chunked to `chunk_tokens`; `query` = the natural-language description (purpose, input,
  output, procedure); `gold = "<exact function name>"` (accuracy = exact name match);
  metadata: `package`, `file`, `qualname`, `lineno`, `description` (the four fields).
- **spider** (`spider`): one Sample per question; `chunks` = the database's tables rendered as
  `Table: <name>` + CSV rows, chunked to `chunk_tokens`; `query` = the question;
  `gold = [[cell, ...], ...]` the rows the paired SQL returns (LOFT's `answers` when read from LOFT
  files; tables from SQLite or LOFT's corpus.jsonl); metadata: `db_id`, `sql`, `ordered` (whether row
  order matters: the SQL has ORDER BY), `chunk_tokens`.
- **arxiv** (`arxiv`): one Sample per article; `chunks` = the article (section headings kept) in
  groups of `chunk_sentences` sentences (F-ART uses 15) or `chunk_tokens` tokens;
  `gold = "<abstract>"` (the ROUGE reference); metadata: `article_id`, `section_names`.

Malformed inputs raise subclasses of `memloop.eval.errors.DatasetError` (see `errors.py`).
"""

from memloop.eval.datasets.chunker import ChunkStats, chunk_paragraphs, chunk_stats, chunk_text, split_paragraphs
from memloop.eval.datasets.registry import get_loader, list_tasks, load_dataset, register_loader, tasks, truncate
from memloop.eval.datasets.sample import Sample
from memloop.eval.tokens import token_counter

__all__ = [
    "Sample",
    "load_dataset",
    "register_loader",
    "get_loader",
    "list_tasks",
    "tasks",
    "truncate",
    "chunk_paragraphs",
    "chunk_text",
    "chunk_stats",
    "ChunkStats",
    "split_paragraphs",
    "token_counter",
]
