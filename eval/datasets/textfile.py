"""Reading user text files safely: missing, empty, binary and undecodable files get named errors;
FIFOs, devices and symlink loops are refused before anything is read (a read would block or never
end), and what is read is bounded: a file whose whole text is one record (a book) by
`MAX_RECORD_BYTES`, a file of many records by `MAX_DATA_FILE_BYTES`."""

from __future__ import annotations

import codecs
import errno
import logging
import os
import re
import stat
from pathlib import Path

from memloop.eval.datasets.errors import (
    BinaryFileError,
    DatasetNotFoundError,
    EmptyDatasetError,
    NotARegularFileError,
    RecordTooLargeError,
)

# One record (a book, one JSONL line, one JSON document): 16 MiB of text is ~4M tokens, far beyond any
# model context; past it the chunker's and tokenizer's time and memory grow for nothing.
MAX_RECORD_BYTES = 16 * 2**20
# A file of many records (JSONL, JSON, a book collection) is read into memory whole.
MAX_DATA_FILE_BYTES = 1 * 2**30

# Bytes no text holds: C0 controls other than tab, newlines, form feed and escape-free line breaks, and DEL.
_CONTROLS = bytes([*range(0, 9), *range(14, 32), 127])
_HIGH = bytes(range(128, 256))
MAX_CONTROL_SHARE = 0.01  # of all bytes
MAX_HIGH_SHARE = 0.3  # of all bytes, in a file that is not UTF-8 (Latin-1 French or German: a few percent)

log = logging.getLogger(__name__)
_STRAY = re.compile("[\udc80-\udcff]")  # a byte that no UTF-8 sequence explains, as surrogateescape decodes it

_KINDS = (
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _share(data: bytes, which: bytes) -> float:
    """The share of `data`'s bytes that are among `which` (counted in C: `translate` deletes them)."""
    return (len(data) - len(data.translate(None, which))) / max(1, len(data))


def check_data_path(path: str | Path, what: str = "file") -> os.stat_result:
    """The path's stat when it is a regular file or a directory; a named error otherwise (missing, a
    symlink loop, a FIFO or device, which a reader would block on or read forever)."""
    p = Path(path)
    try:
        st = p.stat()
    except FileNotFoundError:
        raise DatasetNotFoundError(f"{what} {p} does not exist: check the path") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise NotARegularFileError(f"{what} {p} is a symlink loop: point the path at a real file") from None
        raise DatasetNotFoundError(f"{what} {p} cannot be read ({exc.strerror}): check the path") from None
    if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
        kind = next((name for test, name in _KINDS if test(st.st_mode)), "not a regular file")
        raise NotARegularFileError(
            f"{what} {p} is {kind}, not a regular file: reading it could block or never "
            "end; copy the data into a file and pass that"
        )
    return st


def read_bounded(path: str | Path, limit: int, what: str = "file") -> bytes:
    """A regular file's bytes, refusing one larger than `limit` (read no further than that)."""
    p = Path(path)
    st = check_data_path(p, what)
    if stat.S_ISDIR(st.st_mode):
        raise DatasetNotFoundError(f"{what} {p} is a directory: pass a file")
    with p.open("rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise RecordTooLargeError(
            f"{what} {p} is larger than {limit // 2**20} MiB, more than a loader reads "
            f"for {'one record' if limit == MAX_RECORD_BYTES else 'one file'}; "
            "split it into smaller files or pass a shorter text"
        )
    return data


def _utf8_with_stray_bytes(data: bytes, what: str, p: Path) -> str | None:
    """UTF-8 text that holds a few bytes no UTF-8 sequence explains (a stray byte, a cut copy-paste): the bad
    bytes replaced by U+FFFD, counted and logged. None when the file is not UTF-8 at all: fewer characters
    decode from valid multi-byte sequences than bytes fail (a Latin-1 or Windows-1252 text, whose accented
    letters are single bytes that UTF-8 never accepts)."""
    text = data.decode("utf-8-sig", errors="surrogateescape")  # each bad byte becomes one U+DC80..U+DCFF
    bad = len(_STRAY.findall(text))
    good = len(text) - len(text.encode("ascii", errors="ignore")) - bad  # non-ASCII characters decoded whole
    if good < bad:
        return None
    first = _STRAY.search(text).start()  # type: ignore[union-attr]  # bad > 0: the decode failed
    log.warning(
        "%s %s: decoded as UTF-8 with %d byte(s) that are not UTF-8 replaced by U+FFFD (the first at "
        "character %d); fix or re-save the file as UTF-8 to keep them",
        what,
        p,
        bad,
        first,
    )
    return text.encode("utf-8", errors="surrogateescape").decode("utf-8", errors="replace").lstrip("\ufeff")


def read_text(path: str | Path, what: str = "text file", limit: int = MAX_RECORD_BYTES) -> str:
    """The file's text with LF line ends: UTF-8 (BOM removed; a few bytes that are not UTF-8 replaced by
    U+FFFD, counted and logged), UTF-16 with a BOM, or, only for a text that is not UTF-8 at all,
    Windows-1252 and then Latin-1 (old Gutenberg texts). At most `limit` bytes (the default: the file
    is one record, e.g. a book; files of many records pass MAX_DATA_FILE_BYTES)."""
    p = Path(path)
    data = read_bounded(p, limit, what)
    if not data.strip():
        raise EmptyDatasetError(f"{what} {p} is empty: pass a file with content")
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        try:
            return data.decode("utf-16").lstrip("\ufeff").replace("\r\n", "\n").replace("\r", "\n")
        except UnicodeDecodeError:
            raise BinaryFileError(f"{what} {p} starts like UTF-16 but does not decode: re-save it as UTF-8") from None
    if b"\x00" in data:
        raise BinaryFileError(f"{what} {p} is binary (contains NUL bytes): pass a plain-text file")
    if _share(data, _CONTROLS) > MAX_CONTROL_SHARE:  # anywhere in the file, not only its start
        raise BinaryFileError(
            f"{what} {p} is not text ({_share(data, _CONTROLS):.1%} control bytes): pass a "
            "plain-text file, or cut what follows the text"
        )
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        mended = _utf8_with_stray_bytes(data, what, p)
        if mended is not None:
            return mended.replace("\r\n", "\n").replace("\r", "\n")
        # Old Gutenberg files are ISO-8859-1 or Windows-1252: a few accented letters among ASCII text.
        # Where most bytes are not ASCII the file is not such a text (random bytes after a text decode
        # as Windows-1252 too, and then take the chunker hours).
        if _share(data, _HIGH) > MAX_HIGH_SHARE:
            raise BinaryFileError(
                f"{what} {p} is not text ({_share(data, _HIGH):.0%} of its bytes are neither ASCII "
                "nor UTF-8): pass a UTF-8 or Latin-1 text file"
            ) from None
        try:
            text = data.decode("cp1252")  # curly quotes and dashes of Windows-made files
        except UnicodeDecodeError:
            text = data.decode("latin-1")
    return text.replace("\r\n", "\n").replace("\r", "\n")
