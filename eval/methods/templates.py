"""Prompt templates: plain-text files next to the methods, addressed by id, versioned by sha256.

Placeholders are written `{{name}}`. Single braces are left alone because the papers' prompts are
full of JSON examples; that is also why we do not use str.format. A run records the id and hash of
every template it rendered, so a changed prompt is always visible in the results.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from eval.errors import MethodError

TEMPLATE_DIR = Path(__file__).resolve().parent / "templates"
_PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


@dataclass(frozen=True)
class Template:
    id: str
    text: str
    sha256: str

    @property
    def fields(self) -> frozenset[str]:
        return frozenset(_PLACEHOLDER.findall(self.text))

    def render(self, **values: object) -> str:
        missing = self.fields - values.keys()
        if missing:
            raise MethodError(f"template {self.id!r} needs values for {sorted(missing)}; pass them when rendering")
        return _PLACEHOLDER.sub(lambda m: str(values[m.group(1)]), self.text)


def read_template(directory: Path, template_id: str, error: type[Exception] = MethodError) -> Template:
    """Read `<directory>/<template_id>.txt`, hashed by its bytes; `error` names the owner's failure."""
    path = directory / f"{template_id}.txt"
    if not path.is_file():
        raise error(f"prompt template {template_id!r} not found at {path}; reinstall memloop or restore the file")
    data = path.read_bytes()
    return Template(template_id, data.decode("utf-8"), hashlib.sha256(data).hexdigest())


@lru_cache(maxsize=None)
def load_template(template_id: str) -> Template:
    return read_template(TEMPLATE_DIR, template_id)


def template_hashes(template_ids: tuple[str, ...] | list[str]) -> dict[str, str]:
    return {tid: load_template(tid).sha256 for tid in template_ids}
