"""Judge prompt templates: files in `eval/judges/templates/`, `{{name}}` placeholders, sha256-versioned.

Same conventions as the method templates (`eval.methods.templates`), whose `Template` type is reused
so that a run records judge and method template hashes alike.
"""
from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path

from eval.errors import JudgeError
from eval.methods.templates import Template

TEMPLATE_DIR = Path(__file__).resolve().parent / "templates"


@lru_cache(maxsize=None)
def load_judge_template(template_id: str) -> Template:
    path = TEMPLATE_DIR / f"{template_id}.txt"
    if not path.is_file():
        raise JudgeError(f"judge prompt template {template_id!r} not found at {path}; reinstall memloop or restore the file")
    data = path.read_bytes()
    return Template(template_id, data.decode("utf-8"), hashlib.sha256(data).hexdigest())


def render(template_id: str, **values: object) -> tuple[Template, str]:
    tpl = load_judge_template(template_id)
    missing = tpl.fields - values.keys()
    if missing:
        raise JudgeError(f"judge template {template_id!r} needs values for {sorted(missing)}")
    return tpl, tpl.render(**values)
