"""SUMIE (incremental entity summarisation): official-format loader and a deterministic generator."""

from memloop.eval.datasets.sumie.generator import generate_sumie, write_sumie_jsonl
from memloop.eval.datasets.sumie.loader import load_sumie, load_sumie_dataset, sumie_sample, verify_sumie_record

__all__ = [
    "generate_sumie",
    "write_sumie_jsonl",
    "load_sumie",
    "load_sumie_dataset",
    "sumie_sample",
    "verify_sumie_record",
]
