"""Needle functions and their natural-language descriptions (purpose, input, output, procedure).

Descriptions are written by an LLM when one is given (as RepoQA's are), cached per needle and checked
for leaked identifiers (the function's name, its owners' names, its code-like parameter names) and
for a run of `COPY_RUN_WORDS` words copied from the needle's docstring or comments (the chunk
carries that text, so a copy would make retrieval string matching). A description that leaks or
copies, or an LLM that gives none, falls back to the rule-based description, labelled "code
fallback (why)", whose purpose then says no model described it. Without any describer (a config
that names none) the rule-based description takes its purpose from the docstring ("code"). The
rule-based parts come from the signature and the syntax tree, which strips every such name and
every code-like token. Either way the description never names the function.
"""

from __future__ import annotations

import ast
import hashlib
import json
import random
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from memloop.eval.datasets.errors import DatasetError
from memloop.eval.datasets.repoqa.source import SourceFile
from pydantic import BaseModel, StrictStr, ValidationError, field_validator

FIELDS = ("purpose", "input", "output", "procedure")
# The paper's query form (seed 002 appendix C): the instruction, then the four numbered fields. Both the
# installed-code loader and RepoQA's release file (which gives one description text) ask with it.
QUERY_HEAD = "Find the exact name of the function described by the following function description."
QUERY = QUERY_HEAD + "\n1. Purpose: {purpose}\n2. Input: {input}\n3. Output: {output}\n4. Procedure: {procedure}"


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


def choose_needles(
    files: list[SourceFile],
    count: int,
    seed: int,
    require_docstring: bool = True,
    min_lines: int = 6,
    max_lines: int = 120,
) -> list[Needle]:
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
        raise DatasetError(
            f"only {len(eligible)} functions qualify as needles (unique name, {min_lines}-{max_lines} lines"
            f"{', docstring' if require_docstring else ''}); ask for fewer needles or add packages"
        )
    return random.Random(seed).sample(eligible, count)


def _prose_docstring(node: ast.AST) -> bool:
    """A docstring whose first sentence reads as English (not a grammar rule or a bare signature)."""
    doc = ast.get_docstring(node) or ""
    first = _sentences(doc, 1)
    return bool(re.match(r"^[A-Z][a-z]+\b", first)) and len(first.split()) >= 4 and "=" not in first


_RETURN_KINDS = {
    "Name": "a local variable",
    "Call": "the result of a call",
    "Tuple": "a tuple",
    "Constant": "a constant",
    "Attribute": "an attribute",
    "BinOp": "a computed expression",
    "Compare": "a boolean",
    "BoolOp": "a boolean",
    "UnaryOp": "a computed expression",
    "List": "a list",
    "ListComp": "a list",
    "Dict": "a dict",
    "DictComp": "a dict",
    "Set": "a set",
    "SetComp": "a set",
    "JoinedStr": "a formatted string",
    "Subscript": "an indexed item",
    "IfExp": "a conditional expression",
    "GeneratorExp": "a generator",
}


def _code_like(word: str) -> bool:
    """An identifier that reads as code, not as an English word: an inner underscore, a digit, a camel hump."""
    return "_" in word.strip("_") or any(ch.isdigit() for ch in word) or bool(re.search(r"[a-z][A-Z]", word))


def _arguments(node: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.arg]:
    a = node.args
    return [*a.posonlyargs, *a.args, *([a.vararg] if a.vararg else []), *a.kwonlyargs, *([a.kwarg] if a.kwarg else [])]


def needle_identifiers(needle: Needle) -> dict[str, str]:
    """{name a description must not contain: what to say instead}: the function's own name, the classes
    or functions it is defined in, and its parameter names that read as code."""
    out = {owner: "its owner" for owner in needle.qualname.split(".")[:-1]}
    out.update(
        {a.arg: "an argument" for a in _arguments(needle.node) if a.arg not in ("self", "cls") and _code_like(a.arg)}
    )
    out[needle.name] = "this function"
    return out


def _mentions(text: str, name: str) -> bool:
    return re.search(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])", text) is not None


def leaked_identifiers(description: dict[str, str], needle: Needle) -> list[str]:
    """The needle's identifiers (`needle_identifiers`) that the description spells out."""
    text = " ".join(description.values())
    return sorted(n for n in needle_identifiers(needle) if _mentions(text, n))


# code-like tokens of a docstring: quoted code, dotted names, calls, snake_case and camelCase words
_CODE_TOKEN = re.compile(
    r"``[^`]+``|`[^`]+`|`[^`'\s]+'|`|\b[A-Za-z_]\w+(?:\.[A-Za-z_]\w+)+(?:\(\))?|\b[A-Za-z_]\w*\(\)"
    r"|\b\w*[a-z0-9]_\w*\b|\b_\w+\b|\b[a-z]+[A-Z]\w*\b|\b[A-Z][a-z0-9]+[A-Z]\w*\b"
)
WITHHELD = "(a name withheld)"


def _scrub(text: str, needle: Needle, prose: bool = True) -> str:
    """`text` with the needle's identifiers replaced by what they are and, in `prose` (docstring sentences),
    any other code-like token withheld."""
    for name, instead in sorted(needle_identifiers(needle).items(), key=lambda kv: -len(kv[0])):
        text = re.sub(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])", instead, text)
    return _CODE_TOKEN.sub(WITHHELD, text).replace(f"{WITHHELD}{WITHHELD}", WITHHELD) if prose else text


_PLAIN_TYPES = {
    "str",
    "int",
    "float",
    "bool",
    "bytes",
    "bytearray",
    "complex",
    "None",
    "list",
    "dict",
    "tuple",
    "set",
    "frozenset",
    "object",
    "type",
    "Any",
    "Optional",
    "Union",
    "Callable",
    "Iterable",
    "Iterator",
    "Sequence",
    "Mapping",
    "Generator",
    "List",
    "Dict",
    "Tuple",
    "Set",
}


def _type_words(annotation: ast.expr | None) -> str:
    """A type annotation when it names only built-in and typing types, else 'an object' (no repository names)."""
    if annotation is None:
        return ""
    names = {n.id for n in ast.walk(annotation) if isinstance(n, ast.Name)} | {
        n.attr for n in ast.walk(annotation) if isinstance(n, ast.Attribute)
    }
    consts = [n for n in ast.walk(annotation) if isinstance(n, ast.Constant) and n.value is not None]
    return ast.unparse(annotation) if names <= _PLAIN_TYPES and not consts else "an object"


def _default_words(default: ast.expr) -> str:
    if isinstance(default, ast.Constant) and (not isinstance(default.value, str) or len(default.value) <= 12):
        return f"default {default.value!r}"
    return "with a default"


_ORDINALS = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth")


def _sentences(doc: str, n: int) -> str:
    para = " ".join(doc.strip().split("\n\n")[0].split())
    parts = re.split(r"(?<=[.!?])\s+", para)
    return " ".join(parts[:n])


def _callee(call: ast.Call) -> str | None:
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None


def describe_from_code(needle: Needle, docstring: bool = True) -> dict[str, str]:
    """Purpose from the docstring; input from the signature; output from the annotation, docstring or
    return statements; procedure from the control flow and calls in the body. No identifier of the
    repository is named: parameters by position and plain type, owners as "a class", calls counted.
    `docstring=False` (the labelled fallback): nothing from the docstring, which the needle's chunk carries."""
    import builtins

    node = needle.node
    doc = (ast.get_docstring(node) or "") if docstring else ""
    purpose = _sentences(doc, 2) if doc else "Undocumented; the procedure below says what it does."

    args = node.args
    params = []
    positional = args.posonlyargs + args.args
    defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    for a, d in zip(positional, defaults):
        if needle.is_method and a is positional[0] and a.arg in ("self", "cls"):
            continue
        kind = _type_words(a.annotation)
        params.append(
            f"the {_ORDINALS[min(len(params), 9)]}"
            + (f", {kind}" if kind else "")
            + (f", {_default_words(d)}" if d is not None else "")
        )
    if args.vararg:
        params.append("any number of extra positional arguments")
    for a, d in zip(args.kwonlyargs, args.kw_defaults):
        params.append("a keyword-only argument" + (f", {_default_words(d)}" if d is not None else ""))
    if args.kwarg:
        params.append("arbitrary keyword arguments")
    decorators = {
        d.id if isinstance(d, ast.Name) else d.attr if isinstance(d, ast.Attribute) else "" for d in node.decorator_list
    }
    kind = (
        "property"
        if "property" in decorators
        else "class method"
        if "classmethod" in decorators
        else "static method"
        if "staticmethod" in decorators
        else "method"
    )
    where = f"A {kind} of a class" if needle.is_method else "A function"
    if kind == "property":
        where += ", read as an attribute,"
    count = len(params)
    inputs = (
        f"{where} taking "
        + (f"{count} argument{'s' if count > 1 else ''}: " + "; ".join(params) if params else "no arguments")
        + "."
    )

    body_nodes = [n for n in ast.walk(node) if n is not node]
    own = [n for n in body_nodes if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))]
    returns = [n for n in own if isinstance(n, ast.Return) and n.value is not None]
    doc_return = next(
        (
            s
            for s in re.split(r"(?<=[.!?])\s+", " ".join(doc.split()))
            if re.match(r"(?i)returns?\b", s) and s not in purpose
        ),
        "",
    )
    if any(isinstance(n, (ast.Yield, ast.YieldFrom)) for n in own):
        output = "Yields values one at a time (it is a generator)."
    elif node.returns is not None:
        output = f"Returns {_type_words(node.returns)}." + (f" {doc_return}" if doc_return else "")
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
    raised = sorted({_callee(n.exc) or "" for n in own if isinstance(n, ast.Raise) and isinstance(n.exc, ast.Call)})
    if raised:
        named = [r for r in raised if hasattr(builtins, r)]  # built-in exceptions are no repository names
        steps.append(
            "raises "
            + ", ".join([*named[:3], *(["an exception of its own package"] if len(named) < len(raised) else [])])
        )
    calls = [c for c in (_callee(n) for n in own if isinstance(n, ast.Call)) if c and c != needle.name]
    plain = [c for c, _ in Counter(c for c in calls if hasattr(builtins, c)).most_common(3)]
    others = len({c for c in calls if not hasattr(builtins, c)})
    if plain or others:
        steps.append(
            "calls "
            + ", ".join(
                [
                    *plain,
                    *(
                        [f"{others} other function{'s' if others > 1 else ''} or method" + ("s" if others > 1 else "")]
                        if others
                        else []
                    ),
                ]
            )
        )
    if any(
        isinstance(n, (ast.Assign, ast.AugAssign))
        and any(isinstance(t, ast.Attribute) for t in getattr(n, "targets", [getattr(n, "target", None)]))
        for n in own
    ):
        steps.append("updates attributes of an object")
    span = (node.end_lineno or node.lineno) - node.lineno + 1
    procedure = f"In about {span} lines it " + (", ".join(steps) if steps else "evaluates a single expression") + "."
    # the docstring's sentences are prose to scrub; the rest is built from the syntax tree without names
    return {
        "purpose": _scrub(purpose, needle),
        "input": _scrub(inputs, needle, prose=False),
        "output": _scrub(output, needle, prose=bool(doc_return)),
        "procedure": _scrub(procedure, needle, prose=False),
    }


DESCRIBE_PROMPT = """You are helping build a code search test. Read the Python function below and describe it so that \
someone could pick it out of a large repository without being told its name.

Reply with one JSON object with exactly these string fields:
- "purpose": what the function is for,
- "input": what its parameters are,
- "output": what it returns,
- "procedure": how it works, step by step, in one or two sentences.
Never write the function's name, the name of its class or the names of its parameters: say what they are.

Function:
```python
{source}
```"""

DESCRIBE_SCHEMA = {
    "type": "object",
    "properties": {k: {"type": "string"} for k in FIELDS},
    "required": list(FIELDS),
    "additionalProperties": False,
}


def _cache_file(needle: Needle, model: str, cache_dir: Path) -> Path:
    """Where the answer of `model` for the needle is kept: one file per model, prompt and function source."""
    prompt = DESCRIBE_PROMPT.format(source=needle.source)
    return cache_dir / f"{hashlib.sha256(json.dumps([model, prompt]).encode()).hexdigest()[:32]}.json"


def _llm_answer(needle: Needle, llm, cache_dir: Path | None) -> str:
    """The LLM's raw answer for the needle, from `cache_dir` when it was asked before; the leak check
    runs on it every time, so a cached answer is judged by today's rules."""
    from memloop.eval.asking import ask

    from memloop.sampling import SamplingParams

    path = _cache_file(needle, llm.name, cache_dir) if cache_dir is not None else None
    if path is not None and path.is_file():
        return json.loads(path.read_text())["answer"]
    answer = ask(
        llm,
        DESCRIBE_PROMPT.format(source=needle.source),
        SamplingParams(max_tokens=400),
        schema=DESCRIBE_SCHEMA,
        max_attempts=1,
    ).text
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{id(answer)}.tmp")
        tmp.write_text(json.dumps({"model": llm.name, "qualname": needle.qualname, "answer": answer}))
        tmp.replace(path)  # atomic: concurrent loaders never read half a file
    return answer


class Description(BaseModel):
    """The four fields of a needle's description, each non-blank text (whitespace runs folded to one space)."""

    purpose: StrictStr
    input: StrictStr
    output: StrictStr
    procedure: StrictStr

    @field_validator(*FIELDS)
    @classmethod
    def _folded(cls, text: str) -> str:
        folded = " ".join(text.split())
        if not folded:
            raise ValueError("is blank")
        return folded


def _parse_description(text: str) -> dict[str, str] | None:
    """The description in an LLM's answer (its outermost JSON object), or None: the caller falls back."""
    match = re.search(r"\{.*\}", text, re.DOTALL)
    try:
        return Description.model_validate_json(match.group(0) if match else text).model_dump()
    except ValidationError:  # not JSON, not an object, or a field missing or blank
        return None


def describe_with_llm(needle: Needle, llm, cache_dir: str | Path | None = None) -> tuple[dict[str, str], str]:
    """(description, describer): the LLM's description (memloop.eval.llm protocol) when it parses and names none of
    the needle's identifiers, else the rule-based one, with the reason in `describer`."""
    return _judged(needle, _llm_answer(needle, llm, Path(cache_dir).expanduser() if cache_dir is not None else None))


def describe_from_cache(needle: Needle, model: str, cache_dir: str | Path) -> tuple[dict[str, str], str]:
    """(description, describer) from the answer `model` gave earlier (`describe_with_llm` with that cache,
    e.g. `memloop data repoqa-describe`), judged like a fresh one; rule-based where none is cached."""
    path = _cache_file(needle, model, Path(cache_dir).expanduser())
    if not path.is_file():
        return fallback_description(
            needle,
            f"no description by {model} cached in {cache_dir}; run `memloop data repoqa-describe --model {model}`",
        )
    return _judged(needle, json.loads(path.read_text())["answer"])


# A description may not share this many consecutive words with the needle's docstring or comments: the
# chunk carries that text, and a copied run turns retrieval into string matching (RepoQA's descriptions
# paraphrase what the function does)
COPY_RUN_WORDS = 5
_WORD = re.compile(r"[a-z0-9]+")


def needle_prose(needle: Needle) -> str:
    """The needle's docstring and comments: the prose the chunk carries beside the code."""
    import io
    import tokenize

    parts = [ast.get_docstring(needle.node) or ""]
    try:
        parts += [
            t.string.lstrip("#")
            for t in tokenize.generate_tokens(io.StringIO(needle.source).readline)
            if t.type == tokenize.COMMENT
        ]
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass  # a source fragment tokenize cannot finish: its docstring still counts
    return "\n".join(parts)


def copied_run(description: dict[str, str], needle: Needle, n: int = COPY_RUN_WORDS) -> str | None:
    """The first run of `n` words the description shares with the needle's docstring or comments
    (compared lower-cased, punctuation ignored), or None."""
    prose = _WORD.findall(needle_prose(needle).lower())
    runs = {tuple(prose[i : i + n]) for i in range(len(prose) - n + 1)}
    for text in description.values():
        words = _WORD.findall(text.lower())
        for i in range(len(words) - n + 1):
            if tuple(words[i : i + n]) in runs:
                return " ".join(words[i : i + n])
    return None


def fallback_description(needle: Needle, why: str) -> tuple[dict[str, str], str]:
    """The rule-based description where a model's is missing or rejected, labelled as such: its purpose
    says no model described the needle instead of quoting the docstring (which the chunk carries)."""
    d = describe_from_code(needle, docstring=False)
    d["purpose"] = "Not described by a model; the input, output and procedure below are read from its code."
    return d, f"code fallback ({why})"


def _judged(needle: Needle, answer: str) -> tuple[dict[str, str], str]:
    data = _parse_description(answer)
    if data is None:
        return fallback_description(needle, f"the LLM gave no JSON object with {', '.join(FIELDS)}")
    leaked = leaked_identifiers(data, needle)
    if leaked:
        return fallback_description(needle, f"the LLM's description named {', '.join(leaked)}")
    copied = copied_run(data, needle)
    if copied:
        return fallback_description(needle, f"the LLM's description copies '{copied}' from the docstring or comments")
    return data, "llm"
