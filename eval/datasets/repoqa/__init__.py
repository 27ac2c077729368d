"""RepoQA-style code retrieval over real installed Python source, or RepoQA's own release file."""

from memloop.eval.datasets.repoqa.loader import DEFAULT_PACKAGES, load_repoqa, repository_text
from memloop.eval.datasets.repoqa.needles import (
    QUERY,
    Needle,
    choose_needles,
    describe_from_cache,
    describe_from_code,
    describe_with_llm,
    leaked_identifiers,
    needle_identifiers,
)
from memloop.eval.datasets.repoqa.release import is_release, load_release
from memloop.eval.datasets.repoqa.source import dependency_order, pack_lines, read_package

__all__ = [
    "load_repoqa",
    "repository_text",
    "Needle",
    "choose_needles",
    "describe_from_cache",
    "describe_from_code",
    "describe_with_llm",
    "leaked_identifiers",
    "needle_identifiers",
    "is_release",
    "load_release",
    "dependency_order",
    "pack_lines",
    "read_package",
    "DEFAULT_PACKAGES",
    "QUERY",
]
