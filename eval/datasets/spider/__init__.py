"""Spider-style table QA (PRISM's LOFT-Spider): built-in SQLite databases, Spider and LOFT files."""

from memloop.eval.datasets.spider.loader import load_spider, open_sqlite, same_rows
from memloop.eval.datasets.spider.loft import (
    LoftQuery,
    LoftTable,
    load_loft_corpus,
    load_loft_predictions,
    load_loft_queries,
)

__all__ = [
    "load_spider",
    "open_sqlite",
    "same_rows",
    "LoftQuery",
    "LoftTable",
    "load_loft_queries",
    "load_loft_corpus",
    "load_loft_predictions",
]
