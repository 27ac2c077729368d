"""RepoQA-style retrieval (seed 002): find a function in a real repository from its description."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from eval.datasets.repoqa.needles import FIELDS, choose_needles, describe_from_code, describe_with_llm
from eval.datasets.repoqa.source import dependency_order, pack_lines, read_package
from eval.datasets.sample import Sample, slug
from eval.tokens import TokenizerLike, token_counter

QUERY = ("Somewhere in the code you have read is a function matching the description below. "
         "Name it exactly as it is defined.\n\nPurpose: {purpose}\nInput: {input}\nOutput: {output}\nProcedure: {procedure}")


def repository_text(files) -> str:
    """The files in dependency order, each introduced by a `# file: <path>` line."""
    return "".join(f"# file: {f.path}\n{f.text if f.text.endswith(chr(10)) else f.text + chr(10)}\n" for f in files)


# Five standard-library packages of different shapes: always installed, real code, 20k-110k tokens each.
DEFAULT_PACKAGES = ("email", "http", "logging", "xml", "unittest")


def load_repoqa(packages: Sequence[str | Path] | str = DEFAULT_PACKAGES, needles: int = 10, seed: int = 0,
                chunk_tokens: int = 8192, tokenizer: TokenizerLike = None, llm: Any = None,
                require_docstring: bool = True, limit: int | None = None) -> list[Sample]:
    """`needles` samples per package (an installed package name or a folder of .py files); the default
    gives 50 samples, the size of PRISM's RepoQA evaluation.

    The repository is laid out in dependency order and cut into chunks of whole lines; each sample's
    query describes one needle function, and the gold is its exact name.
    """
    if isinstance(packages, (str, Path)):
        packages = [packages]
    count = token_counter(tokenizer)
    samples: list[Sample] = []
    for package in packages:
        files = dependency_order(read_package(package))
        text = repository_text(files)
        chunks = tuple(pack_lines(text, chunk_tokens, count))
        offsets, pos = [], 0
        for c in chunks:
            offsets.append(pos)
            pos += len(c)
        for needle in choose_needles(files, needles, seed, require_docstring=require_docstring or llm is None):
            description = describe_with_llm(needle, llm) if llm is not None else describe_from_code(needle)
            at = text.index(f"# file: {needle.file.path}\n") + len(f"# file: {needle.file.path}\n")
            at += sum(len(line) for line in needle.file.text.splitlines(keepends=True)[: needle.node.lineno - 1])
            chunk_index = max(i for i, o in enumerate(offsets) if o <= at)
            samples.append(Sample(
                id=f"repoqa/{slug(str(package))}/{needle.qualname}", task="repoqa", chunks=chunks,
                query=QUERY.format(**description), gold=needle.name,
                metadata={"package": str(package), "file": needle.file.path, "qualname": needle.qualname,
                          "lineno": needle.node.lineno, "description": description, "needle_chunk": chunk_index,
                          "describer": "llm" if llm is not None else "code", "chunk_tokens": chunk_tokens}))
    return samples[:limit]


__all__ = ["load_repoqa", "repository_text", "FIELDS"]
