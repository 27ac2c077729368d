"""RepoQA-style code retrieval over real installed Python source."""
from eval.datasets.repoqa.loader import load_repoqa, repository_text
from eval.datasets.repoqa.needles import Needle, choose_needles, describe_from_code, describe_with_llm
from eval.datasets.repoqa.source import dependency_order, pack_lines, read_package

__all__ = ["load_repoqa", "repository_text", "Needle", "choose_needles", "describe_from_code", "describe_with_llm",
           "dependency_order", "pack_lines", "read_package"]
