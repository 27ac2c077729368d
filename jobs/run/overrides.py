"""`-S key=value`: a setting of the run config changed on the command line (or `memloop.run(overrides=)`).

The key is a dotted path into the config as the YAML file writes it: `sampling.temperature=0.2`,
`seed=7`, `judge_model.weights=qwen2.5-coder-1.5b`. A list element is named by its index, its key
(a method's label or name, a judge's name, a dataset's task or key) or `*` for every element:
`methods.gu-json.options.max_tokens=64`, `methods.*.options.max_attempts=1`,
`judges.sumie.options.temperature=0`. The value is read as YAML, so `3`, `0.5`, `true`, `null` and
`[a, b]` keep their types. The result is validated like the file (`parse_config`); method, dataset
and judge options are checked against their own settings by the plan, as the file's are.
"""

from __future__ import annotations

from typing import Any

import yaml
from memloop.jobs.errors import ConfigError


def parse_setting(pair: str) -> tuple[list[str], Any]:
    """`a.b.c=value` -> (["a", "b", "c"], value read as YAML)."""
    key, sep, text = pair.partition("=")
    path = [p.strip() for p in key.split(".")]
    if not sep or not all(path):
        raise ConfigError(f"-S {pair!r}: write a setting as dotted.path=value (e.g. -S sampling.temperature=0.2)")
    try:
        return path, yaml.safe_load(text)
    except yaml.YAMLError:
        raise ConfigError(f"-S {pair!r}: the value is not a YAML scalar, list or mapping; quote it") from None


def _element_keys(item: Any) -> set[str]:
    """The names a list element answers to: its label/name/task, a dataset's task:file key."""
    if not isinstance(item, dict):
        return set()
    names = {str(item[k]) for k in ("label", "name", "task") if item.get(k) is not None}
    if item.get("task") and item.get("path"):
        from pathlib import Path

        names.add(f"{item['task']}:{Path(str(item['path'])).stem}")
    return names


def _children(node: Any, part: str, done: str) -> list[tuple[Any, Any]]:
    """(container, key) pairs that `part` names inside `node`."""
    if isinstance(node, list):
        if part == "*":
            return [(node, i) for i in range(len(node))]
        if part.isdigit() and int(part) < len(node):
            return [(node, int(part))]
        hits = [(node, i) for i, item in enumerate(node) if part in _element_keys(item)]
        if not hits:
            names = sorted({n for item in node for n in _element_keys(item)})
            raise ConfigError(
                f"-S {done}{part}: no element {part!r} in `{done.rstrip('.')}`; name one by index "
                f"(0..{len(node) - 1}), by {', '.join(names) or 'index only'}, or * for all"
            )
        return hits
    if isinstance(node, dict):
        return [(node, part)]
    raise ConfigError(f"-S {done}{part}: `{done.rstrip('.')}` is a value, not a section; set it directly")


def apply_settings(data: dict[str, Any], pairs: list[str]) -> dict[str, Any]:
    """`data` (a config as dumped) with every `-S` setting applied in order; sections a path passes
    through that are unset (`null`) or absent become mappings. Validation is the caller's."""
    for pair in pairs:
        path, value = parse_setting(pair)
        nodes: list[Any] = [data]
        done = ""
        for part in path[:-1]:
            nxt = []
            for node in nodes:
                for container, key in _children(node, part, done):
                    if isinstance(container, dict) and not isinstance(container.get(key), (dict, list)):
                        container[key] = {}
                    nxt.append(container[key])
            nodes, done = nxt, f"{done}{part}."
        for node in nodes:
            for container, key in _children(node, path[-1], done):
                container[key] = value
    return data
