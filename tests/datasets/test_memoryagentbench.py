"""MemoryAgentBench: the hub dataset's four splits read from the HF cache (no network), the source filter,
the benchmark's sentence chunking at its chunk size, and the per-question gold."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from memloop.eval.datasets.errors import EmptyDatasetError, MissingFieldError
from memloop.eval.datasets.hub import HubDataUnavailableError
from memloop.eval.datasets.memoryagentbench import HUB_ID, SPLITS, chunk_sentences, load_memoryagentbench, sentences
from memloop.eval.datasets.registry import load_dataset, truncate
from memloop.eval.errors import DatasetError
from memloop.eval.tokens import cl100k_count

DATA = Path(__file__).parent / "mab_data"
CARD = (
    "---\nconfigs:\n- config_name: default\n  data_files:\n"
    + "".join(f"  - split: {s}\n    path: data/{s}-*\n" for s in SPLITS)
    + "---\nMemoryAgentBench (small test copy).\n"
)


# the snapshot's commit follows the files' content, as a hub commit does: `datasets` caches what it
# generated from a snapshot by its commit, so a changed file under an old commit would read stale rows
COMMIT = hashlib.sha1(b"".join((DATA / f"{s}.jsonl").read_bytes() for s in SPLITS)).hexdigest()


def rows(split: str) -> list[dict]:
    return [json.loads(line) for line in (DATA / f"{split}.jsonl").read_text().splitlines() if line.strip()]


def write_repo(root: Path) -> Path:
    """The hub repository's layout: a card declaring the four splits, one Parquet file per split under data/,
    and the recommendation source's movie map at the root."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    (root / "data").mkdir(parents=True)
    (root / "README.md").write_text(CARD)
    (root / "entity2id.json").write_bytes((DATA / "entity2id.json").read_bytes())
    # one metadata struct for every split, as on the hub (a field a row lacks is null)
    schema = pa.Table.from_pylist([r for split in SPLITS for r in rows(split)]).schema
    for split in SPLITS:
        pq.write_table(
            pa.Table.from_pylist(rows(split), schema=schema), root / "data" / f"{split}-00000-of-00001.parquet"
        )
    return root


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    """The HF hub cache holding one snapshot of ai-hyz/MemoryAgentBench, the hub offline."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    base = tmp_path / "hub" / f"datasets--{HUB_ID.replace('/', '--')}"
    write_repo(base / "snapshots" / COMMIT)
    (base / "refs").mkdir(parents=True)
    (base / "refs" / "main").write_text(COMMIT)
    return base


def test_the_hub_dataset_loads_all_four_splits_from_the_cache_with_the_commit_recorded(hub_cache):
    samples = load_dataset("memoryagentbench")  # the registry's name, the default path: the hub id
    by_source = {s.metadata["source"]: s for s in samples}
    assert sorted(by_source) == sorted(r["metadata"]["source"] for s in SPLITS for r in rows(s))
    assert {s.metadata["competency"] for s in samples} == {"AR", "TTL", "LRU", "CR"}
    fc = by_source["factconsolidation_sh_6k"]
    assert fc.id == "mab/factconsolidation-sh-6k/0" and fc.task == "memoryagentbench" and fc.query is None
    assert fc.metadata["where"].startswith(f"{HUB_ID}@{COMMIT}[Conflict_Resolution]")
    assert fc.gold["questions"] == ["What is the capital of Zarnia?", "What is Mira Oskan's occupation?"]
    assert fc.gold["answers"] == [["Orsk"], ["lighthouse keeper"]]
    assert fc.gold["qa_pair_ids"] == ["fc-sh-0-0", "fc-sh-0-1"]
    # several accepted strings per question stay together
    assert by_source["ruler_qa1_197K"].gold["answers"][0] == ["Mount Kel", "Kel"]
    # LongMemEval's ids are its question_ids ("_abs": abstention); ∞Bench-Sum keeps the expert's key points
    lme = by_source["longmemeval_s*"]
    assert lme.gold["qa_pair_ids"] == ["lme-1", "lme-2", "lme-3_abs"] == lme.gold["question_ids"]
    assert lme.gold["question_types"][0] == "temporal-reasoning"
    assert by_source["infbench_sum_eng_shots2"].gold["keypoints"][1] == "Wren crosses a desert."
    # what a context whose method fails counts as: its questions, each a zero in its source
    assert lme.metadata["scored_items"] == {
        "count": 3,
        "source": "longmemeval_s*",
        "competency": "AR",
        "benchmark_contexts": 1,
    }  # the benchmark's 5, of the 1 row there is


def test_the_source_filter_takes_names_and_patterns_and_the_first_contexts_of_each(hub_cache):
    fc = load_memoryagentbench(splits=["Conflict_Resolution"], sources="factconsolidation_sh_6k")
    assert [s.metadata["source"] for s in fc] == ["factconsolidation_sh_6k"]
    ar = load_memoryagentbench(sources=["eventqa_*", "ruler_qa*"])
    assert sorted(s.metadata["source"] for s in ar) == ["eventqa_full", "ruler_qa1_197K"]
    one = load_memoryagentbench(sources="factconsolidation_*", contexts_per_source=1)
    assert len(one) == 2 and all(s.metadata["context_index"] == 0 for s in one)
    with pytest.raises(EmptyDatasetError, match="sources present: .*factconsolidation_sh_6k"):
        load_memoryagentbench(sources="ruler_niah*")
    with pytest.raises(DatasetError, match="unknown MemoryAgentBench split"):
        load_memoryagentbench(splits=["Accurate_Retreival"])


def test_the_recommendation_source_is_scored_with_the_movie_map_read_from_the_hub_snapshot(hub_cache):
    """recsys_redial_full's answers are movie ids; recall@5 matches the reply's titles to the movie names of
    the hub's entity2id.json, which sits at the snapshot's root and reaches the judge in the gold."""
    from memloop.eval.judges import run_judge

    [rec] = load_memoryagentbench(sources="recsys_*")
    assert rec.metadata["competency"] == "TTL" and rec.gold["answers"] == [["1", "2"]]
    reply = json.dumps(["Try these:\n1. Heat\n2. Ronin\n3. Thief\n4. Inception\n5. The Towne"])
    res = run_judge("mab", reply, rec.gold, metadata=rec.metadata)  # no judge option: the gold has the map
    [q] = res.judgments
    assert q.label["metrics"] == {"recsys_recall@1": 0.0, "recsys_recall@5": 1.0, "recsys_recall@10": 1.0}
    assert res.score("accuracy") == 1.0
    assert rec.gold["entity2id"] == json.loads((DATA / "entity2id.json").read_text())


def test_a_snapshot_without_the_movie_map_says_how_to_get_it(hub_cache):
    from memloop.eval.datasets.mab_entities import EntityMapMissingError

    (hub_cache / "snapshots" / COMMIT / "entity2id.json").unlink()
    with pytest.raises(EntityMapMissingError, match=f"hf download {HUB_ID} entity2id.json --repo-type dataset"):
        load_memoryagentbench(sources="recsys_*")
    assert load_memoryagentbench(sources="icl_*")  # only the recommendation source needs it


def test_chunks_pack_whole_sentences_within_the_token_budget_in_order(hub_cache):
    [fc] = load_memoryagentbench(sources="factconsolidation_sh_6k", chunk_tokens=24)
    context = rows("Conflict_Resolution")[0]["context"]
    assert len(fc.chunks) > 2 and " ".join(fc.chunks) == context  # nothing lost, order kept
    assert all(sum(cl100k_count(s) for s in sentences(c)) <= 24 for c in fc.chunks)
    assert fc.metadata["chunk_tokens"] == 24
    assert all(c[0].isdigit() for c in fc.chunks)  # each fact's serial number stays with its fact
    # the later, contradicting fact lands in a later chunk than the earlier one: the order a memory must resolve
    velt = next(i for i, c in enumerate(fc.chunks) if "Velt" in c)
    orsk = next(i for i, c in enumerate(fc.chunks) if "Orsk" in c)
    assert velt < orsk
    [whole] = load_memoryagentbench(sources="factconsolidation_sh_6k")  # the benchmark's 4096: one chunk
    assert whole.chunks == (context,)
    reduced = truncate(fc, 2)
    assert reduced.chunks == fc.chunks[:2] and reduced.gold == fc.gold


def test_the_packing_counts_the_sum_of_sentence_tokens_as_the_benchmark_does():
    count = lambda s: len(s.split())  # noqa: E731 - one token per word, easy to follow
    text = "One two three. Four five. Six seven eight nine. Ten."
    assert chunk_sentences(text, 5, count) == ["One two three. Four five.", "Six seven eight nine. Ten."]
    # a sentence over the budget is a chunk of its own, and no empty chunk comes before it
    assert chunk_sentences("Alpha beta gamma delta epsilon. Theta iota.", 3, count) == [
        "Alpha beta gamma delta epsilon.",
        "Theta iota.",
    ]
    with pytest.raises(DatasetError, match="chunk_tokens must be a positive integer"):
        chunk_sentences(text, 0, count)


def test_malformed_rows_name_the_field(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        json.dumps(
            {
                "context": "Some text. More.",
                "questions": ["q1", "q2"],
                "answers": [["a"]],
                "metadata": {"source": "ruler_qa1_197K"},
            }
        )
        + "\n"
    )
    with pytest.raises(MissingFieldError, match="2 questions but 1 answer lists"):
        load_memoryagentbench(bad, splits=["Accurate_Retrieval"])
    bad.write_text(json.dumps({"context": "Some text.", "questions": ["q"], "answers": [["a"]], "metadata": {}}) + "\n")
    with pytest.raises(MissingFieldError, match="metadata.source"):
        load_memoryagentbench(bad, splits=["Accurate_Retrieval"])


def test_a_local_file_is_read_once_each_context_under_its_sources_competency(tmp_path):
    """A file has no splits: its rows are read once, not once per split, and a row that does not name its
    split gets its source's (FactConsolidation is Conflict Resolution)."""
    fc = rows("Conflict_Resolution")[0]  # one context, two questions
    path = tmp_path / "mixed.jsonl"
    named = dict(rows("Test_Time_Learning")[0], split="Test_Time_Learning")  # a row that says its split
    path.write_text("\n".join(json.dumps(r) for r in (fc, named)) + "\n")
    samples = load_memoryagentbench(path)
    assert [(s.metadata["source"], s.metadata["competency"]) for s in samples] == [
        ("factconsolidation_sh_6k", "CR"),
        ("icl_banking77_5900shot_balance", "TTL"),
    ]
    assert sum(len(s.gold["questions"]) for s in samples) == 4  # 2 + 2, each question once
    assert samples[0].metadata["scored_items"] == {
        "count": 2,
        "source": "factconsolidation_sh_6k",
        "competency": "CR",
        "benchmark_contexts": 1,
    }
    # the splits asked for choose among the file's rows
    assert [s.metadata["competency"] for s in load_memoryagentbench(path, splits=["Conflict_Resolution"])] == ["CR"]


def test_a_local_file_without_sources_or_with_an_unknown_one_is_refused_by_name(tmp_path):
    from memloop.eval.datasets.mab_sources import UnknownSourceError
    from memloop.eval.datasets.memoryagentbench import MissingSourceError

    path = tmp_path / "nosource.jsonl"
    path.write_text(json.dumps({"context": "Some text.", "questions": ["q"], "answers": [["a"]]}) + "\n")
    with pytest.raises(MissingSourceError, match="metadata.source"):
        load_memoryagentbench(path)
    path.write_text(
        json.dumps(
            {"context": "Some text.", "questions": ["q"], "answers": [["a"]], "metadata": {"source": "my_own_set"}}
        )
        + "\n"
    )
    with pytest.raises(UnknownSourceError, match="'split' field"):
        load_memoryagentbench(path)
    path.write_text(
        json.dumps(
            {
                "context": "Some text.",
                "questions": ["q"],
                "answers": [["a"]],
                "split": "Recall",
                "metadata": {"source": "my_own_set"},
            }
        )
        + "\n"
    )
    with pytest.raises(DatasetError, match="'Recall' is not one of"):
        load_memoryagentbench(path)


def detective_file(tmp_path: Path, n: int) -> Path:
    """`n` DetectiveQA contexts (the benchmark runs the first 10) and 3 ∞Bench-Sum ones (it runs up to 100)."""
    base = rows("Long_Range_Understanding")
    lines = [dict(base[0], context=f"Case {i}. {base[0]['context']}") for i in range(n)]
    lines += [dict(base[1], context=f"Book {i}. {base[1]['context']}") for i in range(3)]
    path = tmp_path / "lru.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in lines) + "\n")
    return path


def test_each_source_takes_the_benchmarks_context_count_unless_a_reduced_config_cuts_it(tmp_path):
    def by_source(samples: list) -> dict[str, int]:
        return {
            src: sum(s.metadata["source"] == src for s in samples)
            for src in ("detective_qa", "infbench_sum_eng_shots2")
        }

    path = detective_file(tmp_path, 12)
    full = load_memoryagentbench(path)
    assert by_source(full) == {"detective_qa": 10, "infbench_sum_eng_shots2": 3}  # max_test_samples 10; 3 of 100
    assert [s.metadata["context_index"] for s in full[:10]] == list(range(10))  # the first ten, in order
    detective = [s for s in full if s.metadata["source"] == "detective_qa"]
    assert {s.metadata["scored_items"]["benchmark_contexts"] for s in detective} == {10}
    reduced = load_memoryagentbench(path, contexts_per_source=2)
    assert by_source(reduced) == {"detective_qa": 2, "infbench_sum_eng_shots2": 2}
    assert reduced[0].metadata["contexts_taken"] == 2
    assert reduced[0].metadata["scored_items"]["benchmark_contexts"] == 10
    # a cut never raises the benchmark's count
    assert by_source(load_memoryagentbench(path, contexts_per_source=50))["detective_qa"] == 10


def test_without_network_or_cache_the_error_says_how_to_get_the_data(tmp_path, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty"))
    with pytest.raises(HubDataUnavailableError) as err:
        load_memoryagentbench(splits=["Conflict_Resolution"])
    assert f"hf download {HUB_ID} --repo-type dataset" in str(err.value) and "*Conflict_Resolution*" in str(err.value)


def test_two_copies_named_alike_are_each_read_as_they_are(tmp_path):
    """`datasets` keys its prepared Arrow by a folder's name: a second `mab/` elsewhere with other rows
    must not be read from the first one's cache."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    first = write_repo(tmp_path / "a" / "mab")
    assert len(load_memoryagentbench(first, splits=["Conflict_Resolution"])) == 2
    second = tmp_path / "b" / "mab"
    (second / "data").mkdir(parents=True)
    (second / "README.md").write_text(CARD)
    for split in SPLITS:
        kept = rows(split)[:1]
        pq.write_table(pa.Table.from_pylist(kept), second / "data" / f"{split}-00000-of-00001.parquet")
    assert [s.metadata["source"] for s in load_memoryagentbench(second, splits=["Conflict_Resolution"])] == [
        "factconsolidation_sh_6k"
    ]
