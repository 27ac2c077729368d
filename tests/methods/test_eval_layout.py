"""One home per concept in `eval`: token counter, embedder, templates, registries, ask loop; no engine import."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import memloop.eval as eval_pkg
import pytest

EVAL_DIR = Path(eval_pkg.__file__).resolve().parent


def _top(name: str) -> str:
    """A module's package for these checks: the top-level name, or memloop's subpackage (memloop.engine)."""
    parts = name.split(".")
    return ".".join(parts[:2]) if parts[0] == "memloop" and len(parts) > 1 else parts[0]


def _imports(path: Path) -> set[str]:
    """Package names (`_top`) imported anywhere in a module (function-local imports included)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {_top(a.name) for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(_top(node.module))
    return names


def _modules_importing(package: str) -> list[str]:
    return sorted(str(p.relative_to(EVAL_DIR)) for p in EVAL_DIR.rglob("*.py") if package in _imports(p))


def test_one_module_loads_each_tokenizer_and_the_embedder() -> None:
    assert _modules_importing("tiktoken") == ["tokens.py"]
    assert _modules_importing("sentence_transformers") == ["embedding.py"]


def test_only_the_ask_primitive_loops_over_llm_calls() -> None:
    callers = sorted(str(p.relative_to(EVAL_DIR)) for p in EVAL_DIR.rglob("*.py") if ".complete(" in p.read_text())
    # llm.py: `complete_many` and ScriptedLLM; llm_cache.py: a pass-through wrapper; neither retries
    assert callers == ["asking.py", "llm.py", "llm_cache.py"]


def test_eval_never_imports_engine_or_ray() -> None:
    assert _modules_importing("memloop.engine") == [] and _modules_importing("ray") == []
    # and at run time: every eval module imported in a fresh interpreter pulls in neither
    code = (
        "import importlib, pkgutil, sys, memloop.eval\n"
        "for m in pkgutil.walk_packages(memloop.eval.__path__, 'memloop.eval.'):\n"
        "    importlib.import_module(m.name)\n"
        "bad = sorted(n for n in sys.modules if n.startswith(('memloop.engine', 'memloop.jobs', 'ray', 'jax')))\n"
        "print(len([n for n in sys.modules if n.startswith('memloop.eval.')]), bad)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=EVAL_DIR.parent)
    assert out.returncode == 0, out.stderr
    count, bad = out.stdout.split(" ", 1)
    assert int(count) > 60 and bad.strip() == "[]"


def test_eval_cache_root_is_the_engines(monkeypatch, tmp_path) -> None:
    from memloop.engine.assets import cache_root as engine_cache_root
    from memloop.eval.assets import cache_root

    monkeypatch.delenv("MEMLOOP_CACHE", raising=False)
    assert cache_root() == engine_cache_root() == Path.home() / ".cache" / "memloop"
    monkeypatch.setenv("MEMLOOP_CACHE", str(tmp_path))
    assert cache_root() == engine_cache_root() == tmp_path


def test_token_counter_is_one_cached_encoder() -> None:
    from memloop.eval import tokens
    from memloop.eval.datasets import token_counter
    from memloop.eval.llm_http import OpenAICompatibleLLM
    from memloop.eval.memory import cl100k_count

    text = "A memory of <|endoftext|> forty tokens, more or less."
    assert tokens.encoding("cl100k_base") is tokens.encoding() is tokens.cl100k_base()
    n = token_counter()(text)
    assert n == cl100k_count(text) == OpenAICompatibleLLM("http://127.0.0.1:9", "m").count_tokens(text) > 10
    from memloop.eval.errors import TokenizerError

    with pytest.raises(TokenizerError, match="unknown tiktoken encoding"):
        tokens.encoding("no-such-encoding")


# Hashes recorded in run ids and Parquet tables before the templates moved to eval/templates/.
KNOWN_HASHES = {
    # changed on purpose: the worked example is per sample kind, a book example for books (seed 000 appendix G, issue 46
    # point 2)
    "s000-cok-update": "5a657614e8b7822670f5a4945224b2d137c5d4e9a7a9d31d8a8f1f5198bfa198",
    # changed on purpose: the paper's four worked examples and what add does to lists (seed 002 appendix C)
    "s002-prism-revise": "13014cbdfb6171fd2f7e93b0377c4ca45cf68338a03f259e1b51ccd7048528de",
    # changed on purpose: notes under meaningfully-named keys, then examples at appendix A's size (seed 004, issue 47)
    "s004-fart-base": "1328c68c461f14abaa2192a4cb13f0c3ee01b01c7b2098ceb332ff70bd1c3a92",
    # changed on purpose: a merged predicted value states every gold fact it carries (seed 000 / SUMIE matching, issue
    # 30 point 9)
    "sumie-match": "13d33d83e4df20f042c7070a1835ef54101584656959c187bd2d7cb1208d1088",
    # changed on purpose: two examples per error type and a worked summary of ten annotated sentences, mostly without
    # confusion (seed 003)
    "booookscore-sentence": "ca7e4c72b8400db7d6cb42f3752defb877080971e20b5c7a2946e1d1982fbdcd",
    "kgscore-edges": "c30209a58f1c5dd85aaff6199e631f5c1dc78c66cc0a0f237b7e642fad623d87",
}


def test_template_hashes_are_unchanged_and_have_one_home() -> None:
    from memloop.eval.judges import get_judge, judge_template_hashes
    from memloop.eval.methods import method_class
    from memloop.eval.templates import JUDGE_TEMPLATE_DIR, METHOD_TEMPLATE_DIR, template_hashes, template_ids

    assert template_hashes(KNOWN_HASHES) == KNOWN_HASHES
    assert method_class("prism-inplace").template_hashes()["s002-prism-revise"] == KNOWN_HASHES["s002-prism-revise"]
    assert get_judge("sumie").template_hashes()["sumie-match"] == KNOWN_HASHES["sumie-match"]
    assert judge_template_hashes("kgscore")["kgscore-edges"] == KNOWN_HASHES["kgscore-edges"]
    methods = {p.stem for p in METHOD_TEMPLATE_DIR.glob("*.txt")}
    judges = {p.stem for p in JUDGE_TEMPLATE_DIR.glob("*.txt")}
    assert not methods & judges and template_ids() == sorted(methods | judges)  # an id names one file
    assert [p for p in EVAL_DIR.rglob("*.txt") if p.parent not in (METHOD_TEMPLATE_DIR, JUDGE_TEMPLATE_DIR)] == []


def test_registries_are_the_names_jobs_sees() -> None:
    from memloop.eval.datasets import get_loader, list_tasks, tasks
    from memloop.eval.errors import DatasetError, JudgeError, MethodError
    from memloop.eval.judges import get_judge, list_judges
    from memloop.eval.methods import list_methods, method_class
    from memloop.jobs.errors import ConfigError
    from memloop.jobs.run.config import parse_config
    from memloop.jobs.run.plan import check_config

    base = {"datasets": [{"task": "sumie", "synthetic": {"entities": 1}}], "methods": [{"name": "cok"}]}
    for over, names in (
        ({"methods": [{"name": "nope"}]}, list_methods()),
        ({"judges": [{"name": "nope"}]}, list_judges()),
        ({"methods": [{"name": "cok", "tasks": ["nope"]}]}, list_tasks()),
    ):
        with pytest.raises(ConfigError, match="registered: " + ", ".join(names) + "|use one of " + ", ".join(names)):
            check_config(parse_config(dict(base, **over)))
    assert list_tasks() == tasks() == ["arxiv", "book", "booksum", "memoryagentbench", "repoqa", "spider", "sumie"]
    for kind, get, error in (
        ("method", method_class, MethodError),
        ("judge", get_judge, JudgeError),
        ("dataset task", get_loader, DatasetError),
    ):
        with pytest.raises(error, match=f"unknown {kind} 'nope': choose one of "):
            get("nope")
