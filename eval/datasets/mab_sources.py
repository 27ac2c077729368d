"""What MemoryAgentBench says per source (sub-dataset): the split (competency) it belongs to, and how many of
its contexts a run takes (`max_test_samples`), from HUST-AI-HYZ/MemoryAgentBench at 455306d,
`configs/data_conf/<split>/**`.

The hub dataset files every source under one split; a local file (JSONL, JSON, Parquet) has no splits,
so a row that does not name its split is placed by its source's prefix here.
"""

from __future__ import annotations

from memloop.eval.errors import DatasetError

# source prefix -> the hub split it is filed under (first matching prefix wins)
SPLIT_OF_PREFIX: tuple[tuple[str, str], ...] = (
    ("ruler_qa", "Accurate_Retrieval"),
    ("ruler_niah", "Accurate_Retrieval"),
    ("eventqa_", "Accurate_Retrieval"),
    ("longmemeval_", "Accurate_Retrieval"),
    ("icl_", "Test_Time_Learning"),
    ("recsys_", "Test_Time_Learning"),
    ("infbench_sum", "Long_Range_Understanding"),
    ("detective_qa", "Long_Range_Understanding"),
    ("factconsolidation_", "Conflict_Resolution"),
)


# `max_test_samples` of each data config: the benchmark keeps a source's first N rows (DetectiveQA 10,
# ∞Bench-Sum 100, ...); where the hub has fewer rows, all of them
MAX_TEST_SAMPLES: dict[str, int] = {
    "eventqa_full": 5,
    "eventqa_65536": 5,
    "eventqa_131072": 5,
    "longmemeval_s*": 5,
    "longmemeval_s_-1_500": 500,
    "ruler_qa1_197K": 100,
    "ruler_qa2_421K": 100,
    **{f"factconsolidation_{hop}_{size}": 1 for hop in ("sh", "mh") for size in ("6k", "32k", "64k", "262k")},
    "detective_qa": 10,
    "infbench_sum_eng_shots2": 100,
    "icl_banking77_5900shot_balance": 100,
    "icl_clinic150_7050shot_balance": 100,
    "icl_nlu_8296shot_balance": 100,
    "icl_trec_coarse_6600shot_balance": 100,
    "icl_trec_fine_6400shot_balance": 100,
    "recsys_redial_full": 1,
}


class UnknownSourceError(DatasetError):
    """A row's source belongs to no known competency and the row does not name its split."""


def split_of_source(source: str, where: str, splits: tuple[str, ...]) -> str:
    """The hub split a source is filed under, from its name (FactConsolidation: Conflict_Resolution)."""
    for prefix, split in SPLIT_OF_PREFIX:
        if source.startswith(prefix):
            return split
    raise UnknownSourceError(
        f"{where}: source {source!r} is not one of MemoryAgentBench's sub-datasets, so its "
        f"competency is unknown: give the row a 'split' field naming one of {list(splits)}"
    )


def benchmark_contexts(source: str, rows: int) -> int:
    """How many of a source's `rows` contexts the benchmark runs: its first `max_test_samples` (all rows of
    a source its configs do not name)."""
    cap = MAX_TEST_SAMPLES.get(source)
    return rows if cap is None else min(cap, rows)
