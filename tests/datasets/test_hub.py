"""Hub datasets: a hub id reaches the loader through the HF cache (no network needed), at a pinned revision
and configuration; a local copy of a dataset repository loads the same way; without network and cache
the error says how to get the data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from memloop.eval.datasets.arxiv import load_arxiv
from memloop.eval.datasets.hub import HubDataUnavailableError, is_hub_id

CARD = """---
configs:
- config_name: document
  data_files:
  - split: validation
    path: document/validation.jsonl
  - split: test
    path: document/test.jsonl
---
A small arXiv-layout dataset.
"""


def _repo(root: Path, n_test: int) -> Path:
    """A dataset repository in the hub's layout: a card declaring the `document` configuration, one file per split."""
    (root / "document").mkdir(parents=True)
    (root / "README.md").write_text(CARD)
    for split, n in (("validation", 2), ("test", n_test)):
        rows = [
            {
                "article": f"Article {i} opens here.\nIt measures lamps.",
                "abstract": f"Lamps {i}.\nMeasured.",
                "article_id": f"{split}-{i}",
            }
            for i in range(n)
        ]
        (root / "document" / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root


def _cache(hub_cache: Path, repo_id: str, commits: dict[str, int], ref: str) -> None:
    """The HF hub cache as `hf download` leaves it: a snapshot per commit, and a ref naming one of them."""
    base = hub_cache / f"datasets--{repo_id.replace('/', '--')}"
    for commit, n in commits.items():
        _repo(base / "snapshots" / commit, n)
    (base / "refs").mkdir(parents=True)
    (base / "refs" / "main").write_text(ref)


@pytest.fixture
def offline_cache(tmp_path, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    return tmp_path / "hub"


def test_a_hub_id_is_read_from_the_hf_cache_at_the_pinned_revision(offline_cache):
    old, new = "a" * 40, "b" * 40
    _cache(offline_cache, "acme/arxiv-mini", {old: 3, new: 5}, ref=new)
    assert is_hub_id("acme/arxiv-mini") and not is_hub_id("../shared/data/books")
    latest = load_arxiv("acme/arxiv-mini", split="test", config_name="document")
    pinned = load_arxiv("acme/arxiv-mini", split="test", config_name="document", revision=old)
    assert len(latest) == 5 and len(pinned) == 3  # two revisions, two split sizes: the pin decides
    assert pinned[0].metadata["source"].startswith(f"acme/arxiv-mini@{old}[test]")
    assert pinned[0].gold["reference"].startswith("Lamps 0.")
    [v] = load_arxiv("acme/arxiv-mini", split="validation", config_name="document", revision=old, limit=1)
    assert v.id == "arxiv/validation-0"


def test_a_local_copy_of_a_dataset_repository_loads_like_the_hub(tmp_path):
    repo = _repo(tmp_path / "arxiv-mini", 4)
    samples = load_arxiv(repo, split="test", config_name="document")
    assert [s.id for s in samples] == [f"arxiv/test-{i}" for i in range(4)]


def test_the_parquet_conversion_layout_reads_a_configuration_folder(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "conv" / "document" / "test").mkdir(parents=True)
    pq.write_table(
        pa.table({"article": ["One.\nTwo."], "abstract": ["Sum."], "article_id": ["p-1"]}),
        tmp_path / "conv" / "document" / "test" / "0000.parquet",
    )
    [s] = load_arxiv(tmp_path / "conv", split="test", config_name="document")
    assert s.id == "arxiv/p-1"


def test_without_network_and_cache_the_error_says_how_to_get_the_data(offline_cache):
    with pytest.raises(HubDataUnavailableError) as err:
        load_arxiv("acme/not-cached", split="validation", revision="refs/convert/parquet", config_name="document")
    msg = str(err.value)
    assert (
        "acme/not-cached" in msg
        and "hf download acme/not-cached --repo-type dataset --revision refs/convert/parquet" in msg
    )
    assert "*validation*" in msg and "HF_HOME" in msg and "local file" in msg
