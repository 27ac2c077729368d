"""What MemoryAgentBench says per source (sub-dataset): the split (competency) it belongs to
(HUST-AI-HYZ/MemoryAgentBench at 455306d, `configs/data_conf/<split>/**`).

The hub dataset files every source under one split; a local file (JSONL, JSON, Parquet) has no splits,
so a row that does not name its split is placed by its source's prefix here.
"""
from __future__ import annotations

from memloop.eval.errors import DatasetError

# source prefix -> the hub split it is filed under (first matching prefix wins)
SPLIT_OF_PREFIX: tuple[tuple[str, str], ...] = (
    ("ruler_qa", "Accurate_Retrieval"), ("ruler_niah", "Accurate_Retrieval"), ("eventqa_", "Accurate_Retrieval"),
    ("longmemeval_", "Accurate_Retrieval"), ("icl_", "Test_Time_Learning"), ("recsys_", "Test_Time_Learning"),
    ("infbench_sum", "Long_Range_Understanding"), ("detective_qa", "Long_Range_Understanding"),
    ("factconsolidation_", "Conflict_Resolution"),
)


class UnknownSourceError(DatasetError):
    """A row's source belongs to no known competency and the row does not name its split."""


def split_of_source(source: str, where: str, splits: tuple[str, ...]) -> str:
    """The hub split a source is filed under, from its name (FactConsolidation: Conflict_Resolution)."""
    for prefix, split in SPLIT_OF_PREFIX:
        if source.startswith(prefix):
            return split
    raise UnknownSourceError(f"{where}: source {source!r} is not one of MemoryAgentBench's sub-datasets, so its "
                             f"competency is unknown: give the row a 'split' field naming one of {list(splits)}")
