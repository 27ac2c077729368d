"""Methods and judges register beside their code (`@method(name)`, `@judge_info(name, ...)`) while the registries
stay lazy: the index names every method and judge, and a module is imported only when one of its names is asked for."""

from __future__ import annotations

import importlib
import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import memloop.eval.judges as judges_pkg
import memloop.eval.methods as methods_pkg
import pytest
from memloop.eval.errors import MethodError
from memloop.eval.judges import JUDGES, get_judge, judge_info, list_judges
from memloop.eval.methods.registry import METHODS, list_methods, method, method_class

ROOT = Path(__file__).resolve().parents[2]
METHOD_MODULES = {
    f"memloop.eval.methods.{m}"
    for m in ("summaries", "cok", "prism", "booookscore", "kg_retrieval", "fart", "long_context")
}
JUDGE_MODULES = {f"memloop.eval.judges.{m}" for m in ("booookscore", "sumie", "kgscore", "overlap", "mab")}


def _fresh(code: str) -> dict:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_registries_name_everything_and_import_nothing_until_asked() -> None:
    got = _fresh(
        "import json, sys\n"
        "from memloop.eval.methods import list_methods\nfrom memloop.eval.judges import list_judges\n"
        "names = [list_methods(), list_judges()]\n"
        "before = sorted(m for m in sys.modules if m.startswith(('memloop.eval.methods.', 'memloop.eval.judges.')))\n"
        "from memloop.eval.methods import method_class\n"
        "method_class('kg-retrieval')\n"
        "after = sorted(m for m in sys.modules if m.startswith(('memloop.eval.methods.', 'memloop.eval.judges.')))\n"
        "print(json.dumps({'names': names, 'before': before, 'after': after}))\n"
    )
    assert got["names"] == [list_methods(), list_judges()] and len(got["names"][0]) == 17 and len(got["names"][1]) == 10
    assert not set(got["before"]) & (METHOD_MODULES | JUDGE_MODULES)  # the index alone: no method, no judge
    loaded = set(got["after"]) & (METHOD_MODULES | JUDGE_MODULES)
    # kg-retrieval's module and what it imports itself (the long-context window), nothing else
    assert loaded == {"memloop.eval.methods.kg_retrieval", "memloop.eval.methods.long_context"}, loaded


def test_a_judges_metadata_costs_no_heavy_import() -> None:
    """A report asks every judge of a run for its headline metrics and aggregation, which now imports the judge's
    module (its metadata sits on its function): the modules leave nltk, ROUGE, spaCy and the embedder to the
    first judgment."""
    got = _fresh(
        "import json, sys\nfrom memloop.eval.judges import aggregator, get_judge, headline_metrics, list_judges\n"
        "for name in list_judges():\n    get_judge(name).template_hashes(); headline_metrics(name); aggregator(name)\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules} & {'nltk', 'rouge_score', 'spacy', "
        "'sentence_transformers', 'sklearn', 'torch', 'ray', 'jax'})))\n"
    )
    assert got == []


def test_every_name_is_registered_by_its_indexed_module_and_no_decorator_is_left_out() -> None:
    for name in list_methods():
        cls = method_class(name)
        assert cls.name == name and cls.__module__ in METHOD_MODULES, name
    for name in list_judges():
        info = get_judge(name)
        assert info.name == name and info.module in JUDGE_MODULES and callable(info.load()), name
    names = (list_methods(), list_judges())
    for pkg in (methods_pkg, judges_pkg):  # every module imported: a decorator outside the index would add a name
        for m in pkgutil.iter_modules(pkg.__path__, pkg.__name__ + "."):
            importlib.import_module(m.name)
    assert (list_methods(), list_judges()) == names


def test_a_module_that_registers_nothing_under_an_indexed_name_is_a_named_error() -> None:
    METHODS.index("ghost", "memloop.eval.methods.outcomes")
    try:
        with pytest.raises(
            MethodError,
            match="method 'ghost' is indexed to module memloop.eval.methods.outcomes but "
            "that module registers no method of that name",
        ):
            method_class("ghost")
    finally:
        METHODS.unregister("ghost")
    with pytest.raises(MethodError, match="index a module, not 'memloop.eval.methods.cok:ChainOfKey'"):
        METHODS.index("cok-again", "memloop.eval.methods.cok:ChainOfKey")


def test_the_decorators_carry_the_name_and_metadata_and_keep_a_users_own_entry() -> None:
    @method("made-here")
    class MadeHere(method_class("long-context")):  # type: ignore[misc, valid-type]
        pass

    try:
        assert MadeHere.name == "made-here" and method_class("made-here") is MadeHere
    finally:
        METHODS.unregister("made-here")
    got = _fresh(
        "import json\nfrom dataclasses import replace\n"
        "from memloop.eval.judges import JUDGES, JudgeInfo, get_judge, register_judge\n"
        "register_judge(JudgeInfo('rouge', None, False, 'memloop.eval.judges.overlap', 'judge_rouge', 'my own "
        "rouge'))\n"
        "get_judge('repoqa-exact')  # imports overlap.py, whose @judge_info('rouge', ...) runs now\n"
        "print(json.dumps(get_judge('rouge').description))\n"
    )
    assert got == "my own rouge"
    info = JUDGES.get("sumie")
    assert (info.tasks, info.needs_llm, info.function, info.per_turn, info.templates) == (
        ("sumie",),
        True,
        "judge_llm",
        True,
        ("sumie-match", "sumie-extract", "sumie-recall"),
    )
    assert judge_info.__module__ == "memloop.eval.judges"
