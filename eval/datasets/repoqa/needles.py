"""Needle functions and their natural-language descriptions (purpose, input, output, procedure).

Descriptions come from the docstring, the signature and the function's syntax tree, or from an LLM
when one is given. Either way the function's own name never appears in them.
"""
from __future__ import annotations

import ast
import json
import random
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

from eval.datasets.errors import DatasetError
from eval.datasets.repoqa.source import SourceFile

FIELDS = ("purpose", "input", "output", "procedure")


@dataclass(frozen=True)
class Needle:
    name: str
    qualname: str
    file: SourceFile
    node: ast.FunctionDef | ast.AsyncFunctionDef
    is_method: bool

    @property
    def source(self) -> str:
        return ast.get_source_segment(self.file.text, self.node) or ""


def _functions(sf: SourceFile):
    """(qualname, node, is_method) for every def in the file, methods included."""

    def visit(node: ast.AST, prefix: str, in_class: bool):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                q = f"{prefix}{child.name}"
                yield q, child, in_class
                yield from visit(child, q + ".", False)
            elif isinstance(child, ast.ClassDef):
                yield from visit(child, f"{prefix}{child.name}.", True)

    yield from visit(sf.tree, "", False)


def choose_needles(files: list[SourceFile], count: int, seed: int, require_docstring: bool = True,
                   min_lines: int = 6, max_lines: int = 120) -> list[Needle]:
    """`count` functions with names unique in the repository (so the gold is unambiguous), seeded."""
    all_defs = [(sf, q, n, m) for sf in files for q, n, m in _functions(sf)]
    names = Counter(n.name for _, _, n, _ in all_defs)
    everything = "\n".join(sf.text for sf in files)
    textual = Counter(re.findall(r"\bdef\s+(\w+)\s*\(", everything))  # docstring examples count too
    eligible = []
    for sf, q, node, is_method in all_defs:
        span = (node.end_lineno or node.lineno) - node.lineno + 1
        if names[node.name] != 1 or textual[node.name] != 1 or node.name.startswith("__") or len(node.name) < 4:
            continue
        if not (min_lines <= span <= max_lines) or (require_docstring and not _prose_docstring(node)):
            continue
        eligible.append(Needle(node.name, q, sf, node, is_method))
    if len(eligible) < count:
        raise DatasetError(f"only {len(eligible)} functions qualify as needles (unique name, {min_lines}-{max_lines} lines"
                           f"{', docstring' if require_docstring else ''}); ask for fewer needles or add packages")
    return random.Random(seed).sample(eligible, count)


def _prose_docstring(node: ast.AST) -> bool:
    """A docstring whose first sentence reads as English (not a grammar rule or a bare signature)."""
    doc = ast.get_docstring(node) or ""
    first = _sentences(doc, 1)
    return bool(re.match(r"^[A-Z][a-z]+\b", first)) and len(first.split()) >= 4 and "=" not in first


_RETURN_KINDS = {"Name": "a local variable", "Call": "the result of a call", "Tuple": "a tuple", "Constant": "a constant",
                 "Attribute": "an attribute", "BinOp": "a computed expression", "Compare": "a boolean", "BoolOp": "a boolean",
                 "UnaryOp": "a computed expression", "List": "a list", "ListComp": "a list", "Dict": "a dict",
                 "DictComp": "a dict", "Set": "a set", "SetComp": "a set", "JoinedStr": "a formatted string",
                 "Subscript": "an indexed item", "IfExp": "a conditional expression", "GeneratorExp": "a generator"}


def _scrub(text: str, name: str) -> str:
    return re.sub(rf"\b{re.escape(name)}\b", "this function", text)


def _sentences(doc: str, n: int) -> str:
    para = " ".join(doc.strip().split("\n\n")[0].split())
    parts = re.split(r"(?<=[.!?])\s+", para)
    return " ".join(parts[:n])


def _callee(call: ast.Call) -> str | None:
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None


def describe_from_code(needle: Needle) -> dict[str, str]:
    """Purpose from the docstring; input from the signature; output from the annotation, docstring or
    return statements; procedure from the control flow and calls in the body."""
    node, name = needle.node, needle.name
    doc = ast.get_docstring(node) or ""
    purpose = _sentences(doc, 2) if doc else "Undocumented; the procedure below says what it does."

    args = node.args
    params = []
    positional = args.posonlyargs + args.args
    defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    for a, d in zip(positional, defaults):
        if needle.is_method and a is positional[0] and a.arg in ("self", "cls"):
            continue
        desc = f"`{a.arg}`" + (f" ({ast.unparse(a.annotation)})" if a.annotation else "")
        params.append(desc + (f", default {ast.unparse(d)}" if d is not None else ""))
    if args.vararg:
        params.append(f"any number of extra positional arguments (`*{args.vararg.arg}`)")
    for a, d in zip(args.kwonlyargs, args.kw_defaults):
        params.append(f"keyword-only `{a.arg}`" + (f", default {ast.unparse(d)}" if d is not None else ""))
    if args.kwarg:
        params.append(f"arbitrary keyword arguments (`**{args.kwarg.arg}`)")
    owner = needle.qualname.rsplit(".", 1)[0] if needle.is_method else None
    decorators = {d.id if isinstance(d, ast.Name) else d.attr if isinstance(d, ast.Attribute) else "" for d in node.decorator_list}
    kind = ("property" if "property" in decorators else "class method" if "classmethod" in decorators
            else "static method" if "staticmethod" in decorators else "method")
    where = f"A {kind} of `{owner}`" if owner else "A function"
    if kind == "property":
        where += ", read as an attribute,"
    inputs = f"{where} taking " + ("; ".join(params) if params else "no arguments") + "."

    body_nodes = [n for n in ast.walk(node) if n is not node]
    own = [n for n in body_nodes if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))]
    returns = [n for n in own if isinstance(n, ast.Return) and n.value is not None]
    doc_return = next((s for s in re.split(r"(?<=[.!?])\s+", " ".join(doc.split()))
                       if re.match(r"(?i)returns?\b", s) and s not in purpose), "")
    if any(isinstance(n, (ast.Yield, ast.YieldFrom)) for n in own):
        output = "Yields values one at a time (it is a generator)."
    elif node.returns is not None:
        output = f"Returns {ast.unparse(node.returns)}." + (f" {doc_return}" if doc_return else "")
    elif doc_return:
        output = doc_return
    elif returns:
        kinds = sorted({_RETURN_KINDS.get(type(r.value).__name__, "a computed value") for r in returns})
        output = "Returns " + " or ".join(kinds) + (f" ({len(returns)} return points)." if len(returns) > 1 else ".")
    else:
        output = "Returns nothing; it works by side effect."

    steps = []
    if any(isinstance(n, (ast.For, ast.AsyncFor, ast.comprehension)) for n in own):
        steps.append("iterates over a sequence")
    if any(isinstance(n, ast.While) for n in own):
        steps.append("loops until a condition changes")
    ifs = sum(isinstance(n, ast.If) for n in own)
    if ifs:
        steps.append(f"branches on {ifs} condition{'s' if ifs > 1 else ''}")
    if any(isinstance(n, ast.Try) for n in own):
        steps.append("handles exceptions")
    raised = sorted({_callee(n.exc) or ast.unparse(n.exc) for n in own if isinstance(n, ast.Raise) and n.exc is not None
                     and isinstance(n.exc, ast.Call)})
    if raised:
        steps.append("raises " + ", ".join(f"`{r}`" for r in raised[:3]))
    calls = [c for c in (_callee(n) for n in own if isinstance(n, ast.Call)) if c and c != name]
    common = [c for c, _ in Counter(calls).most_common(6)]
    if common:
        steps.append("calls " + ", ".join(f"`{c}`" for c in common))
    if any(isinstance(n, (ast.Assign, ast.AugAssign)) and any(isinstance(t, ast.Attribute) for t in getattr(n, "targets", [getattr(n, "target", None)])) for n in own):
        steps.append("updates attributes of an object")
    span = (node.end_lineno or node.lineno) - node.lineno + 1
    procedure = f"In about {span} lines it " + (", ".join(steps) if steps else "evaluates a single expression") + "."
    return {k: _scrub(v, name) for k, v in zip(FIELDS, (purpose, inputs, output, procedure))}


DESCRIBE_PROMPT = """You are helping build a code search test. Read the Python function below and describe it so that \
someone could pick it out of a large repository without being told its name.

Reply with one JSON object with exactly these string fields:
- "purpose": what the function is for,
- "input": what its parameters are,
- "output": what it returns,
- "procedure": how it works, step by step, in one or two sentences.
Never write the function's name.

Function:
```python
{source}
```"""

DESCRIBE_SCHEMA = {"type": "object", "properties": {k: {"type": "string"} for k in FIELDS},
                   "required": list(FIELDS), "additionalProperties": False}


def describe_with_llm(needle: Needle, llm) -> dict[str, str]:
    """The four fields written by an LLM (eval.llm protocol), with the name scrubbed if it slipped in."""
    from eval.asking import ParseFailure, ask
    from eval.llm import Sampling

    def parse(text: str) -> dict[str, Any]:
        match = re.search(r"\{.*\}", text, re.DOTALL)
        try:
            data = json.loads(match.group(0) if match else text)
        except json.JSONDecodeError:
            data = None
        if not isinstance(data, dict) or not all(isinstance(data.get(k), str) and data[k].strip() for k in FIELDS):
            raise ParseFailure(f"not a JSON object with {', '.join(FIELDS)}")
        return data

    answer = ask(llm, DESCRIBE_PROMPT.format(source=needle.source), Sampling(max_tokens=400), parse=parse,
                 schema=DESCRIBE_SCHEMA, max_attempts=1)
    if not answer.ok:
        raise DatasetError(f"the LLM's description of {needle.qualname} is not a JSON object with {', '.join(FIELDS)}: "
                           f"{answer.text[:200]!r}; use a model that follows JSON instructions or describe from code")
    data = answer.parsed
    return {k: _scrub(data[k].strip(), needle.name) for k in FIELDS}
