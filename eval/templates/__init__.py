"""Prompt templates, the one home for methods and judges: plain-text files addressed by id, versioned by sha256.

Files live in `eval/templates/methods/<id>.txt` (the methods' prompts, ids `s000-...` to `s004-...`
by seed paper) and `eval/templates/judges/<id>.txt` (the judges' prompts); an id names one file in
either folder. Placeholders are written `{{name}}`. Single braces are left alone because the
papers' prompts are full of JSON examples; that is also why we do not use str.format. A run records
the id and hash of every template it rendered, and the hashes of every template its methods and
judges may render go into the run id (`template_hashes`), so a changed prompt is always visible.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Iterable

from memloop.eval.errors import TemplateError

TEMPLATE_ROOT = Path(__file__).resolve().parent
METHOD_TEMPLATE_DIR = TEMPLATE_ROOT / "methods"
JUDGE_TEMPLATE_DIR = TEMPLATE_ROOT / "judges"
TEMPLATE_DIRS = (METHOD_TEMPLATE_DIR, JUDGE_TEMPLATE_DIR)
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
            raise TemplateError(f"template {self.id!r} needs values for {sorted(missing)}; pass them when rendering")
        return _PLACEHOLDER.sub(lambda m: str(values[m.group(1)]), self.text)


def template_path(template_id: str) -> Path:
    """The file of `template_id` (in the methods' or the judges' folder)."""
    for directory in TEMPLATE_DIRS:
        path = directory / f"{template_id}.txt"
        if path.is_file():
            return path
    raise TemplateError(
        f"prompt template {template_id!r} not found in {', '.join(str(d) for d in TEMPLATE_DIRS)}; "
        "reinstall memloop or restore the file"
    )


@lru_cache(maxsize=None)
def load_template(template_id: str) -> Template:
    """The template `template_id`, hashed by its bytes (read once per process)."""
    data = template_path(template_id).read_bytes()
    return Template(template_id, data.decode("utf-8"), hashlib.sha256(data).hexdigest())


def render(template_id: str, **values: object) -> tuple[Template, str]:
    """The template and its text with `values` filled in."""
    tpl = load_template(template_id)
    return tpl, tpl.render(**values)


def template_hashes(template_ids: Iterable[str]) -> dict[str, str]:
    """{template id: sha256} of the given templates: what a method or judge hashes into a run id."""
    return {tid: load_template(tid).sha256 for tid in template_ids}


def template_ids() -> list[str]:
    """Every template on disk, sorted."""
    return sorted(p.stem for d in TEMPLATE_DIRS for p in d.glob("*.txt"))


__all__ = [
    "Template",
    "load_template",
    "render",
    "template_hashes",
    "template_ids",
    "template_path",
    "METHOD_TEMPLATE_DIR",
    "JUDGE_TEMPLATE_DIR",
]
