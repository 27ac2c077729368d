"""Reading user text files safely: missing, empty, binary and undecodable files get named errors."""
from __future__ import annotations

import codecs
from pathlib import Path

from eval.datasets.errors import BinaryFileError, DatasetNotFoundError, EmptyDatasetError

_SNIFF = 8192


def read_text(path: str | Path, what: str = "text file") -> str:
    """The file's text with LF line ends: UTF-8 (BOM removed), UTF-16 with a BOM, or for legacy files
    Windows-1252 and then Latin-1 (old Gutenberg texts)."""
    p = Path(path)
    if not p.exists():
        raise DatasetNotFoundError(f"{what} {p} does not exist: check the path")
    if p.is_dir():
        raise DatasetNotFoundError(f"{what} {p} is a directory: pass a file")
    data = p.read_bytes()
    if not data.strip():
        raise EmptyDatasetError(f"{what} {p} is empty: pass a file with content")
    head = data[:_SNIFF]
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        try:
            return data.decode("utf-16").lstrip("\ufeff").replace("\r\n", "\n").replace("\r", "\n")
        except UnicodeDecodeError:
            raise BinaryFileError(f"{what} {p} starts like UTF-16 but does not decode: re-save it as UTF-8") from None
    if b"\x00" in head:
        raise BinaryFileError(f"{what} {p} is binary (contains NUL bytes): pass a plain-text file")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        # Old Gutenberg files are ISO-8859-1; anything with many control bytes is not text at all.
        controls = sum(1 for b in head if b < 9 or 13 < b < 32)
        if controls > len(head) // 100:
            raise BinaryFileError(f"{what} {p} is not text (undecodable bytes): pass a UTF-8 or Latin-1 text file") from None
        try:
            text = data.decode("cp1252")  # curly quotes and dashes of Windows-made files
        except UnicodeDecodeError:
            text = data.decode("latin-1")
    return text.replace("\r\n", "\n").replace("\r", "\n")
