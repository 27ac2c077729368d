"""The movie map of MemoryAgentBench's recommendation source (`recsys_redial_full`): `entity2id.json`.

The source's gold answers are movie ids; its score (recall@k) matches each recommended title to the nearest
movie name and needs every name, which `entity2id.json` ({"<dbpedia path or name>": id}) holds. The hub
keeps it at the repository's root, beside `data/`; the benchmark's code reads it from
`./processed_data/Recsys_Redial/entity2id.json`. memloop reads it where the rows come from, as it reads the
rows: the hub snapshot (network, else the HF cache), a local copy of the repository, or the folder of a
local file; `entity2id` names another file. The loader puts the map into the source's gold, so the judge
needs no file of its own wherever it runs.
"""

from __future__ import annotations

import json
from pathlib import Path

from memloop.eval.datasets.errors import DatasetNotFoundError, UnknownFormatError
from memloop.eval.datasets.hub import hub_snapshot, is_hub_id

FILE = "entity2id.json"
RECSYS_SPLIT = "Test_Time_Learning"


class EntityMapMissingError(DatasetNotFoundError):
    """The recommendation source's entity2id.json is not where its rows are."""


def entity_map_path(data: str | Path, revision: str | None = None) -> Path:
    """Where `entity2id.json` is for rows read from `data` (a hub id, a repository copy, or a file)."""
    if is_hub_id(data):
        return hub_snapshot(str(data), revision, RECSYS_SPLIT).path / FILE
    p = Path(data)
    return p / FILE if p.is_dir() else p.parent / FILE


def read_entity_map(
    data: str | Path, revision: str | None = None, entity2id: str | Path | None = None
) -> dict[str, int]:
    """The {name: movie id} map for rows read from `data` (or the file `entity2id` names)."""
    path = Path(entity2id) if entity2id is not None else entity_map_path(data, revision)
    if not path.is_file():
        hint = (
            f"`hf download {data} {FILE} --repo-type dataset` where there is network, then copy the HF cache here"
            if is_hub_id(data)
            else f"put the hub dataset's {FILE} beside the data ({path.parent})"
        )
        raise EntityMapMissingError(
            f"the recommendation source needs the movie names in {path}, which does not "
            f"exist: {hint}, or name the file with the loader option `entity2id`"
        )
    try:
        data_map = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UnknownFormatError(f"{path} is not valid JSON ({exc}): re-download the hub dataset's {FILE}") from None
    if not isinstance(data_map, dict) or not all(
        isinstance(v, int) and not isinstance(v, bool) for v in data_map.values()
    ):
        raise UnknownFormatError(f"{path} must map names to integer movie ids, as the hub dataset's {FILE} does")
    return data_map
