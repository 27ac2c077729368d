"""Judge prompt templates: files in `eval/judges/templates/`, `{{name}}` placeholders, sha256-versioned.

Same conventions as the method templates (`eval.methods.templates`), whose `Template` type is reused
so that a run records judge and method template hashes alike.
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from eval.errors import JudgeError
from eval.methods.templates import Template, read_template

TEMPLATE_DIR = Path(__file__).resolve().parent / "templates"


@lru_cache(maxsize=None)
def load_judge_template(template_id: str) -> Template:
    return read_template(TEMPLATE_DIR, template_id, JudgeError)


def render(template_id: str, **values: object) -> tuple[Template, str]:
    tpl = load_judge_template(template_id)
    missing = tpl.fields - values.keys()
    if missing:
        raise JudgeError(f"judge template {template_id!r} needs values for {sorted(missing)}")
    return tpl, tpl.render(**values)
