"""Datasets: every task becomes a list of `Sample`s."""
from eval.datasets.sample import Sample

__all__ = ["Sample"]
