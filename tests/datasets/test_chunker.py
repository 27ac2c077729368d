"""The BooookScore chunker: official boundaries, nothing lost, every chunk within the limit."""
from __future__ import annotations

import re

import pytest

from eval.datasets import chunk_paragraphs, chunk_stats, split_paragraphs, token_counter
from eval.datasets.books import clean_book
from eval.datasets.errors import DatasetError
from eval.errors import TokenizerError
from eval.datasets.textfile import read_text

from tests.datasets.booookscore_reference import reference_chunks

BOOKS = ("pride-and-prejudice.txt", "news-from-nowhere.txt", "katrine.txt", "pioneer-days-in-st-paul.txt")


@pytest.fixture(scope="module")
def count():
    return token_counter()


@pytest.fixture(scope="module")
def book_paragraphs(shared_data):
    books_dir = shared_data / "books"
    if not books_dir.is_dir():
        pytest.skip(f"{books_dir} not found")
    return {name: split_paragraphs(clean_book(read_text(books_dir / name))) for name in BOOKS}


@pytest.mark.parametrize("name", BOOKS)
def test_shared_books_match_official_boundaries_and_lose_nothing(book_paragraphs, count, name):
    paragraphs = book_paragraphs[name]
    chunks = chunk_paragraphs(paragraphs, 2048)
    assert chunks == reference_chunks(paragraphs, 2048, count)
    assert "".join(chunks).replace("\n", "") == "".join(paragraphs)
    stats = chunk_stats(paragraphs, chunks)
    assert stats.text_tokens == stats.chunk_tokens
    assert stats.max_chunk_tokens <= 2048 and stats.chunks > 20


def test_small_chunks_cut_long_paragraphs_like_official(book_paragraphs, count):
    paragraphs = book_paragraphs["pride-and-prejudice.txt"][:400]
    chunks = chunk_paragraphs(paragraphs, 120)
    assert chunks == reference_chunks(paragraphs, 120, count)
    assert max(count(c) for c in chunks) <= 120
    # some chunk boundaries fall inside paragraphs, right after a sentence end
    inner = [c for c in chunks if c.split("\n")[-1] not in paragraphs]
    assert inner
    for c in inner:  # a cut head ends at punctuation; otherwise it is the carried tail of a paragraph
        last = c.split("\n")[-1]
        assert re.search(r"""[.?!,]["']?$""", c) or any(p.endswith(last) for p in paragraphs)


def test_cut_at_second_to_last_sentence_end_and_quotes(count):
    sentences = [f'"Sentence number {i} is here," she said. "It goes on!"' for i in range(60)]
    para = " ".join(sentences)
    chunks = chunk_paragraphs(["Short opening line.", para, "Closing line."], 64)
    assert chunks == reference_chunks(["Short opening line.", para, "Closing line."], 64, count)
    assert "".join(chunks).replace("\n", "") == "Short opening line." + para + "Closing line."
    assert all(count(c) <= 64 for c in chunks)


def test_comma_fallback(count):
    para = ", ".join(f"item {i} of a very long list without any full stop" for i in range(80))
    chunks = chunk_paragraphs([para], 50)
    assert chunks == reference_chunks([para], 50, count)
    assert all(c.endswith(",") for c in chunks[:-1])


def test_text_without_cut_points_is_hard_cut_without_loss(count):
    para = " ".join(["word"] * 3000)  # no sentence end, no comma: the official code would drop text here
    chunks = chunk_paragraphs(["Intro.", para], 100)
    assert "".join(chunks).replace("\n", "") == "Intro." + para
    assert all(count(c) <= 100 for c in chunks)


def test_whole_text_within_limit_is_one_chunk():
    assert chunk_paragraphs(["a b c.", "d e f."], 2048) == ["a b c.\nd e f."]


def test_other_tokenizers_and_bad_sizes():
    chars = chunk_paragraphs(["x" * 50, "y" * 49, "z" * 30], 100, tokenizer=len)  # count characters
    assert chars == ["x" * 50 + "\n" + "y" * 49, "z" * 30]
    with pytest.raises(DatasetError, match="too small"):
        chunk_paragraphs(["abc"], 2)
    with pytest.raises(DatasetError, match="newlines"):
        chunk_paragraphs(["a\nb"], 100)


def test_hugging_face_tokenizer_counts_without_special_tokens():
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    vocab = {"[UNK]": 0, "[BOS]": 1, "one": 2, "sentence": 3, "here": 4, ".": 5, "another": 6, "there": 7}
    hf = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    hf.pre_tokenizer = pre_tokenizers.Whitespace()
    hf.post_processor = processors.TemplateProcessing(single="[BOS] $A", special_tokens=[("[BOS]", 1)])
    count = token_counter(hf)
    assert len(hf.encode("one sentence here.").ids) == 5 and count("one sentence here.") == 4  # no [BOS]
    chunks = chunk_paragraphs(["One sentence here. Another one there."] * 20, 12, tokenizer=hf)
    assert all(count(c) <= 12 for c in chunks) and len(chunks) == 20


@pytest.mark.slow
def test_bundled_model_tokenizer_counts(tmp_path):
    from transformers import AutoTokenizer

    from engine.assets import default_model_path

    gguf = default_model_path()
    hf = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    count = token_counter(hf)
    assert count("hello world") == len(hf.encode("hello world", add_special_tokens=False))
    assert token_counter(str(gguf))("hello world") == count("hello world")  # the model file's path works too
    chunks = chunk_paragraphs(["One sentence here. Another one there."] * 20, 40, tokenizer=hf)
    assert all(count(c) <= 40 for c in chunks)
    hf.save_pretrained(str(tmp_path / "tok"))  # a tokenizer folder given by path
    assert token_counter(str(tmp_path / "tok"))("hello world") == count("hello world")
    with pytest.raises(TokenizerError, match="cannot load a tokenizer"):
        token_counter(str(tmp_path / "tok" / ".."))


@pytest.mark.parametrize("name", ["pioneer-days-in-st-paul.txt"])  # the official example book
def test_wrapped_lines_as_paragraphs_match_official_boundaries(shared_data, count, name):
    """With `unwrap=False` every hard-wrapped line is a paragraph, as the official code sees a raw file."""
    lines = split_paragraphs(clean_book(read_text(shared_data / "books" / name), unwrap=False))
    chunks = chunk_paragraphs(lines, 1024)
    assert chunks == reference_chunks(lines, 1024, count)
    assert "".join(chunks).replace("\n", "") == "".join(lines) and max(count(c) for c in chunks) <= 1024
