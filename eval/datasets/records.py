"""Reading record files (JSONL, JSON, Parquet) or a Hugging Face hub dataset as plain dicts.

Local JSON(L) is parsed here rather than through `datasets.load_dataset("json")` so that a malformed
line is reported by file and line number (and nothing is cached); Parquet goes through pyarrow;
a hub id (`owner/name`, at a pinned `revision` and `config_name`), a directory written by
`Dataset.save_to_disk` and a local copy of a dataset repository go through Hugging Face `datasets`
(a hub id needs network or the local HF cache: `memloop.eval.datasets.hub`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Iterator

from memloop.eval.datasets.errors import (
    DatasetNotFoundError,
    EmptyDatasetError,
    MissingFieldError,
    RecordTooLargeError,
    UnknownFormatError,
)
from memloop.eval.datasets.hub import hub_records, is_hub_id, load_local_dataset
from memloop.eval.datasets.textfile import MAX_DATA_FILE_BYTES, MAX_RECORD_BYTES, check_data_path, read_text

Record = dict[str, Any]


def parse_json(text: str, error: Callable[[json.JSONDecodeError], str]) -> Any:
    """`json.loads(text)`; malformed text is an UnknownFormatError whose message `error` writes from the
    decoder's (each reader names its file, line and what the text must be)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UnknownFormatError(error(exc)) from None


def read_records(
    source: str | Path,
    what: str = "dataset",
    split: str = "test",
    revision: str | None = None,
    config_name: str | None = None,
) -> Iterator[tuple[str, Record]]:
    """(location, record) pairs; the location ("file:line", or "owner/name@commit[split][i]") goes into
    error messages. `split`, `revision` and `config_name` apply to hub ids and dataset directories."""
    if is_hub_id(source):
        yield from hub_records(str(source), split, revision, config_name)
        return
    p = Path(source)
    if not p.exists() and not p.is_symlink():
        raise DatasetNotFoundError(f"{what} {p} does not exist: check the path (or give a hub id owner/name)")
    check_data_path(p, what)
    if p.is_dir():
        if not (p / "state.json").is_file() and not (p / "dataset_dict.json").is_file():
            for i, row in enumerate(load_local_dataset(p, split, config_name)):  # a copy of a dataset repository
                yield f"{p}[{split}][{i}]", dict(row)
            return
        import datasets

        ds = datasets.load_from_disk(str(p))
        if isinstance(ds, datasets.DatasetDict):
            if split not in ds:
                raise DatasetNotFoundError(f"{p} has splits {sorted(ds)}, not {split!r}: pass split=...")
            ds = ds[split]
        for i, row in enumerate(ds):
            yield f"{p}#{i}", dict(row)
        return
    suffix = p.suffix.lower()
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        try:
            rows = pq.read_table(p).to_pylist()
        except Exception as exc:  # pyarrow raises ArrowInvalid & co. for non-Parquet bytes
            raise UnknownFormatError(f"{what} {p} is not a readable Parquet file ({exc}): re-export it") from None
        if not rows:
            raise EmptyDatasetError(f"{what} {p} has no rows")
        for i, row in enumerate(rows):
            yield f"{p}#{i}", row
        return
    if suffix not in (".jsonl", ".json", ".txt"):
        raise UnknownFormatError(
            f"{what} {p}: unknown format {suffix or '(no suffix)'!r}: use .jsonl, .json or .parquet"
        )
    text = read_text(p, what, limit=MAX_DATA_FILE_BYTES)
    if suffix == ".txt":  # e.g. the arXiv release's train/val/test.txt hold JSON lines
        if not text.lstrip().startswith("{"):
            raise UnknownFormatError(f"{what} {p} is plain text, not JSON lines: pass a .jsonl, .json or .parquet file")
        suffix = ".jsonl"
    if suffix == ".json":
        data = parse_json(
            text, lambda exc: f"{p} is not valid JSON ({exc.msg} at line {exc.lineno}): fix or re-export it"
        )
        rows = data if isinstance(data, list) else [data]
        for i, row in enumerate(rows):
            yield f"{p}[{i}]", _as_record(row, f"{p}[{i}]")
        return
    seen = False
    for n, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        if len(line) > MAX_RECORD_BYTES:  # characters: at least as many bytes
            raise RecordTooLargeError(
                f"{p}:{n} is a record of over {MAX_RECORD_BYTES // 2**20} MiB, more than a "
                "loader reads for one record; drop or shorten that line"
            )
        row = parse_json(
            line,
            lambda exc: f"{p}:{n} is not valid JSON ({exc.msg}): each line of a .jsonl file must be one JSON object",
        )
        seen = True
        yield f"{p}:{n}", _as_record(row, f"{p}:{n}")
    if not seen:
        raise EmptyDatasetError(f"{what} {p} has no records")


def _as_record(row: Any, where: str) -> Record:
    if not isinstance(row, dict):
        raise MissingFieldError(f"{where}: expected a JSON object, got {type(row).__name__}")
    return row


def require(record: Record, field: str, kind: type | tuple[type, ...], where: str) -> Any:
    """record[field], checked for presence and type, or a MissingFieldError naming both."""
    if field not in record:
        raise MissingFieldError(f"{where}: missing field {field!r}")
    value = record[field]
    if not isinstance(value, kind):
        names = "/".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
        raise MissingFieldError(f"{where}: field {field!r} must be {names}, got {type(value).__name__}")
    return value
