"""Configs and inputs that would exhaust the machine: alias bombs anywhere in the YAML, nesting too
deep to parse. Each is refused in one line before anything is built."""
from __future__ import annotations

from pathlib import Path

import pytest

from jobs.config import MAX_CONFIG_NODES, load_config
from jobs.errors import ConfigError

LAUGHS = """
      a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
      b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
      c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
      d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
      e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
      f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
      g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
      h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
      i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]"""


def _write(tmp_path: Path, where: str) -> Path:
    """A config whose free-form option dict `where` holds the bomb (validation never looks inside)."""
    parts = {"synthetic": "", "engine": "", "model": ""}
    parts[where] = LAUGHS
    text = (f"name: x\noutput: {tmp_path / 'runs'}\n"
            f"datasets:\n  - task: sumie\n    synthetic:\n      entities: 1{parts['synthetic']}\n"
            "methods: [{name: gu-json}]\n"
            f"engine:\n  options:\n    {'bomb:' if where == 'engine' else 'tp: 1'}{parts['engine']}\n"
            f"model:\n  options:\n    {'bomb:' if where == 'model' else 'quiet: 1'}{parts['model']}\n")
    path = tmp_path / "bomb.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("where", ["synthetic", "engine", "model"])
def test_an_alias_bomb_in_a_free_form_dict_is_refused(tmp_path, where) -> None:
    path = _write(tmp_path, where)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value) == (f"{path}: expands to over {MAX_CONFIG_NODES} YAML nodes through aliases (*name) or "
                              "a recursive alias; a run config is small: write the repeated parts out")


def test_a_few_aliases_are_fine(tmp_path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(f"name: x\noutput: {tmp_path}\n"
                    "datasets: [{task: sumie, synthetic: &s {entities: 1, seed: 3}}, {task: sumie, synthetic: *s}]\n"
                    "methods: [{name: gu-json}]\n")
    cfg = load_config(path)
    assert cfg.datasets[0].synthetic == cfg.datasets[1].synthetic == {"entities": 1, "seed": 3}


def test_a_recursive_alias_and_deep_nesting_are_refused(tmp_path) -> None:
    rec = tmp_path / "rec.yaml"
    rec.write_text(f"name: x\noutput: {tmp_path}\ndatasets: &d [{{task: sumie, synthetic: {{x: *d}}}}]\n"
                   "methods: [{name: gu-json}]\n")
    with pytest.raises(ConfigError, match="recursive alias"):
        load_config(rec)
    deep = tmp_path / "deep.yaml"
    deep.write_text(f"name: x\noutput: {tmp_path}\nengine: {{options: {{x: {'[' * 20000}{']' * 20000}}}}}\n"
                    "datasets: [{task: sumie}]\nmethods: [{name: gu-json}]\n")
    with pytest.raises(ConfigError, match="nests lists or mappings too deeply to read"):
        load_config(deep)
