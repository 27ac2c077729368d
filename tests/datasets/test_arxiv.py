"""arXiv summarisation records in both layouts; F-ART's 15-sentence chunks; malformed records."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from memloop.eval.datasets import load_dataset, token_counter
from memloop.eval.datasets.arxiv import load_arxiv
from memloop.eval.datasets.errors import MissingFieldError, UnknownFormatError

SECTIONS = [
    [f"Sentence {i} of the introduction discusses regular and chaotic motions ." for i in range(20)],
    [f"Method sentence {i} describes smooth curves in phase space ." for i in range(12)],
]


def _release_record(i: int) -> dict:
    return {
        "article_id": f"1501.0000{i}",
        "article_text": [s for sec in SECTIONS for s in sec],
        "abstract_text": ["<S> we study chaotic motions . </S>", "<S> smooth curves appear . </S>"],
        "labels": None,
        "section_names": ["introduction", "method"],
        "sections": SECTIONS,
    }


def test_release_format_chunks_of_fifteen_sentences(tmp_path):
    p = tmp_path / "test.txt"  # the release names its JSON-lines files train/val/test.txt
    p.write_text("\n".join(json.dumps(_release_record(i)) for i in range(3)) + "\n")
    samples = load_arxiv(p)
    assert [s.id for s in samples] == ["arxiv/1501-00000", "arxiv/1501-00001", "arxiv/1501-00002"]
    s = samples[0]
    assert s.gold == {
        "reference": "we study chaotic motions . smooth curves appear .",
        "sentences": ["we study chaotic motions .", "smooth curves appear ."],
    }
    assert [c.count(" .") for c in s.chunks] == [15, 15, 2]  # 32 sentences, crossing the section divider like F-ART
    assert s.chunks[1].startswith("Sentence 15") and "Method sentence 0" in s.chunks[1]
    assert s.metadata["section_names"] == ["introduction", "method"] and s.metadata["sentences"] == 32
    by_section = load_arxiv(p, by_section=True, limit=1)[0]
    assert [c.count(" .") for c in by_section.chunks] == [15, 5, 12]
    tokens = load_dataset("arxiv", path=str(p), chunk_tokens=64, limit=1)[0]
    count = token_counter()
    assert all(count(c) <= 64 for c in tokens.chunks) and "".join(tokens.chunks).replace("\n", "") == "".join(
        s for sec in SECTIONS for s in sec
    )


def test_hub_layout_from_parquet(tmp_path):
    article = "\n".join(s for sec in SECTIONS for s in sec)
    pq.write_table(
        pa.table({"article": [article], "abstract": ["we study chaotic motions .\nsmooth curves appear ."]}),
        tmp_path / "a.parquet",
    )
    [s] = load_arxiv(tmp_path / "a.parquet", chunk_sentences=10)
    assert len(s.chunks) == 4 and s.gold["reference"] == "we study chaotic motions . smooth curves appear ."
    assert s.gold["sentences"] == ["we study chaotic motions .", "smooth curves appear ."]  # the hub's lines kept
    assert s.id.startswith("arxiv/") and len(s.id) == len("arxiv/") + 12


def test_malformed(tmp_path):
    p = tmp_path / "x.jsonl"
    p.write_text(json.dumps({"title": "no article here"}) + "\n")
    with pytest.raises(MissingFieldError, match="article_text"):
        load_arxiv(p)
    rec = _release_record(0)
    rec["abstract_text"] = []
    p.write_text(json.dumps(rec) + "\n")
    with pytest.raises(MissingFieldError, match="abstract"):
        load_arxiv(p)
    (tmp_path / "notes.txt").write_text("just some prose\n")
    with pytest.raises(UnknownFormatError, match="not JSON lines"):
        load_arxiv(tmp_path / "notes.txt")
    (tmp_path / "x.parquet").write_bytes(b"PAR1 not really")
    with pytest.raises(UnknownFormatError):
        load_arxiv(tmp_path / "x.parquet")


def test_saved_hugging_face_dataset(tmp_path):
    import datasets

    ds = datasets.Dataset.from_list(
        [{"article": "First sentence here.\nSecond one.", "abstract": "A summary.", "article_id": "hf-1"}]
    )
    datasets.DatasetDict({"validation": ds}).save_to_disk(str(tmp_path / "saved"))
    [s] = load_arxiv(tmp_path / "saved", split="validation")
    assert (
        s.id == "arxiv/hf-1"
        and s.chunks == ("First sentence here. Second one.",)
        and s.gold == {"reference": "A summary.", "sentences": ["A summary."]}
    )


def test_rouge_lsum_reads_the_abstracts_own_sentence_lines(tmp_path):
    """Lowercased arXiv text: a sentence splitter cuts at "et al ." and "fig ."; the dataset's lines do not."""
    from memloop.eval.judges import run_judge
    from memloop.eval.judges.overlap import _lines
    from rouge_score import rouge_scorer

    lines = ["we follow smith et al . in the analysis of the lamps .", "the results appear in fig . 3 of the paper ."]
    rec = _release_record(0)
    rec["abstract_text"] = [f"<S> {x} </S>" for x in lines]
    p = tmp_path / "test.txt"
    p.write_text(json.dumps(rec) + "\n")
    [s] = load_arxiv(p)
    assert s.gold["sentences"] == lines
    assert len(_lines(s.gold["reference"]).split("\n")) > 2  # what re-splitting did to it
    prediction = (
        "We follow Smith. The results appear in fig. 3 of the paper; the analysis of the lamps follows Smith et al."
    )
    got = {x.metric: x.value for x in run_judge("rouge", prediction, s.gold).scores}
    direct = rouge_scorer.RougeScorer(["rougeLsum"], use_stemmer=True).score("\n".join(lines), _lines(prediction))
    assert got["rougeLsum"] == pytest.approx(direct["rougeLsum"].fmeasure)
    split = {x.metric: x.value for x in run_judge("rouge", prediction, s.gold, lsum_reference="split").scores}
    assert split["rougeLsum"] != pytest.approx(got["rougeLsum"]) and split["rouge1"] == pytest.approx(got["rouge1"])


def _arxiv_sentences(n: int) -> list[str]:
    """n sentences of lowercased, tokenised arXiv prose, with the shapes that trip naive splitters:
    "fig . ( [ f1 ] )", "et al . ( 2004 )", "eq . ( [ eq1 ] )", a number before the period."""
    shapes = [
        "the rotation curve of the halo is shown in fig . ( [ f{i} ] ) for @xmath{i} .",
        "as found by smith et al . ( 2004 ) the profile flattens beyond @xmath{i} kpc .",
        "this agrees with eq . ( [ eq{i} ] ) and with ref . [ {i} ] within the errors .",
        "we set the cutoff radius to {i} .",
        "is the disk stable at step {i} ?",
        "in sec . [ s{i} ] , i.e. the next part , we fit the model ( see tab . [ t{i} ] ) .",
    ]
    return [shapes[i % len(shapes)].format(i=i) for i in range(n)]


def test_lowercased_arxiv_text_gives_fifteen_sentence_chunks_in_every_hub_layout(tmp_path):
    """A 200-sentence article is 200 sentences and 14 chunks whether the hub serves it as one line
    (`document`), one sentence per line (`section`) or the release's sentence list; the metadata says
    which split was used."""
    sentences = _arxiv_sentences(200)
    abstract = "we measure the halo .\nthe disk is stable ."
    rows = {
        "document": {"article": " ".join(sentences), "abstract": abstract},
        "section": {"article": " \n ".join(sentences), "abstract": abstract},
        "release": {"article_id": "a1", "article_text": sentences, "abstract_text": ["<S> we measure . </S>"]},
    }
    expected_split = {"document": "punkt", "section": "lines", "release": "release list"}
    for layout, row in rows.items():
        p = tmp_path / f"{layout}.jsonl"
        p.write_text(json.dumps(row) + "\n")
        (s,) = load_arxiv(p)
        assert s.metadata["sentences"] == 200, layout
        assert s.metadata["sentence_split"] == expected_split[layout]
        assert len(s.chunks) == 14, layout
        assert s.chunks[0] == " ".join(sentences[:15]) and s.chunks[-1] == " ".join(sentences[195:])
