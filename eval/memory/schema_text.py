"""Schema text -> typed hierarchy, for schemas an LLM writes (seed 002 section 3.4 and appendix C).

The text is parsed with `ast.parse` and walked; it is never executed. The accepted language is the
one the papers' schemas use: classes (optionally decorated with `dataclass`, with any named bases such
as `TypedDict` or `pg.Object`), docstrings, annotated fields with trailing `# comments` as field docs,
nested classes, type aliases (`Facet = str`), imports (ignored), and annotations built from str, int,
float, bool, Any, None, list/List/Sequence[...], dict/Dict/Mapping[str, ...], tuple[...], Optional[...],
Union[...], `X | None` and the classes defined in the text. Fields written at module level after the
classes (as in seed 002 listings 2 and 3) belong to the root class. The root is the first class no
other class refers to. Anything else is a SchemaError naming the line.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
import warnings

from memloop.eval.memory.errors import SchemaError
from memloop.eval.memory.types import (
    PRIMITIVES,
    DictOf,
    EnumOf,
    Field,
    ListOf,
    Node,
    ObjectType,
    Prim,
    TupleOf,
    UnionOf,
)

_FENCED = re.compile(r"```[A-Za-z]*[ \t]*\n(.*?)```", re.DOTALL)
_LIST_NAMES = {"list", "List", "Sequence", "set", "Set", "frozenset"}
_DICT_NAMES = {"dict", "Dict", "Mapping", "MutableMapping"}
_STR_ALIASES = {"String": "str", "string": "str", "Text": "str", "integer": "int", "number": "float"}


def extract_code(text: str) -> str:
    """The schema code inside an LLM answer: a fenced block if any, else from the first class/decorator."""
    m = _FENCED.search(text)
    if m:
        return m.group(1)
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if re.match(r"\s*(class\s|@)", line):
            return "\n".join(lines[i:])
    raise SchemaError(
        "no schema found: the text has neither a ```python block nor a `class` line; "
        "ask the model for a Python class definition"
    )


def parse_schema_text(text: str) -> ObjectType:
    import textwrap

    code = textwrap.dedent(extract_code(text)).strip("\n") + "\n"
    try:
        with warnings.catch_warnings():  # model text is not our source: no SyntaxWarnings on stderr
            warnings.simplefilter("ignore")
            tree = ast.parse(code)
    except SyntaxError as e:
        raise SchemaError(
            f"schema text is not valid Python syntax at line {e.lineno}: {e.msg}; "
            "a schema is a Python class with annotated fields"
        ) from None
    except (ValueError, RecursionError, MemoryError) as e:  # null bytes, absurd nesting
        raise SchemaError(
            f"schema text cannot be parsed ({type(e).__name__}: {e}); a schema is a Python class with annotated fields"
        ) from None
    try:
        return _Builder(code, tree).build()
    except RecursionError:
        raise SchemaError("schema types are nested too deeply; a typed hierarchy has a few levels") from None


def _comments(code: str) -> tuple[dict[int, str], set[int]]:
    """{line: comment text} and the lines that hold only a comment (no code before it)."""
    out: dict[int, str] = {}
    alone: set[int] = set()
    lines = code.splitlines()
    try:
        for tok in tokenize.generate_tokens(io.StringIO(code).readline):
            if tok.type == tokenize.COMMENT:
                row, col = tok.start
                if not lines[row - 1][:col].strip():
                    alone.add(row)
                text = tok.string.lstrip("#").strip()
                if text and "pylint" not in text:
                    out[row] = text
    except (tokenize.TokenError, IndentationError):
        pass
    return out, alone


class _Builder:
    def __init__(self, code: str, tree: ast.Module) -> None:
        self.tree = tree
        self.comments, self.comment_lines = _comments(code)
        self.classes: dict[str, ast.ClassDef] = {}
        self.aliases: dict[str, ast.expr] = {}
        self.order: list[str] = []
        self.module_fields: list[ast.AnnAssign] = []
        self.built: dict[str, ObjectType | None] = {}
        self.root_name = ""

    def fail(self, node: ast.AST, what: str) -> SchemaError:
        return SchemaError(
            f"schema line {getattr(node, 'lineno', '?')}: {what}; the schema language allows "
            "classes, docstrings, annotated fields, nested classes and type aliases only"
        )

    def build(self) -> ObjectType:
        for stmt in self.tree.body:
            if isinstance(stmt, ast.ClassDef):
                self.register(stmt, top=True)
            elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                self.module_fields.append(stmt)
            elif isinstance(stmt, ast.Assign):
                self.alias(stmt)
            elif isinstance(stmt, (ast.Import, ast.ImportFrom, ast.Pass)):
                continue
            elif (
                isinstance(stmt, ast.Expr)
                and isinstance(stmt.value, ast.Constant)
                and isinstance(stmt.value.value, str)
            ):
                continue  # a module docstring
            else:
                raise self.fail(stmt, f"{type(stmt).__name__} statements are not allowed")
        tops = [n for n in self.order if self.classes[n].col_offset == 0 and getattr(self.classes[n], "_top", False)]
        if not tops:
            raise SchemaError("the schema text defines no class; write `class Name:` with annotated fields")
        referenced = self.referenced_names()
        roots = [n for n in tops if n not in referenced]
        self.root_name = (roots or tops)[0]
        return self.obj(self.root_name, self.module_fields)

    def register(self, cls: ast.ClassDef, top: bool) -> None:
        if cls.name in self.classes:
            raise self.fail(cls, f"class {cls.name} is defined twice")
        cls._top = top  # type: ignore[attr-defined]
        for d in cls.decorator_list:
            target = d.func if isinstance(d, ast.Call) else d
            name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
            if name != "dataclass":
                raise self.fail(d, "only the @dataclass decorator is allowed")
        for b in cls.bases:
            if not isinstance(b, (ast.Name, ast.Attribute)):
                raise self.fail(b, "base classes must be plain names such as TypedDict or pg.Object")
        if cls.keywords:
            raise self.fail(cls, "class keywords (e.g. total=False, metaclass=) are not allowed")
        self.classes[cls.name] = cls
        self.order.append(cls.name)
        for stmt in cls.body:
            if isinstance(stmt, ast.ClassDef):
                self.register(stmt, top=False)
            elif isinstance(stmt, ast.Assign):
                self.alias(stmt)

    def alias(self, stmt: ast.Assign) -> None:
        if len(stmt.targets) != 1 or not isinstance(stmt.targets[0], ast.Name):
            raise self.fail(stmt, "only simple type aliases (`Facet = str`) may be assigned")
        self.aliases[stmt.targets[0].id] = stmt.value
        self.type_of(stmt.value, set())  # check it now

    def referenced_names(self) -> set[str]:
        names: set[str] = set()
        for cls in self.classes.values():
            for stmt in cls.body:
                if isinstance(stmt, ast.AnnAssign):
                    names |= {n.id for n in ast.walk(stmt.annotation) if isinstance(n, ast.Name)}
                    names |= {
                        n.value
                        for n in ast.walk(stmt.annotation)
                        if isinstance(n, ast.Constant) and isinstance(n.value, str)
                    }
        for stmt in self.module_fields:
            names |= {n.id for n in ast.walk(stmt.annotation) if isinstance(n, ast.Name)}
        return names

    def obj(self, name: str, extra: list[ast.AnnAssign] = ()) -> ObjectType:  # type: ignore[assignment]
        if name in self.built:
            got = self.built[name]
            if got is None:
                raise SchemaError(f"class {name} contains itself; a typed hierarchy must be finite")
            return got
        self.built[name] = None
        cls = self.classes[name]
        doc = ast.get_docstring(cls) or ""
        fields: list[Field] = []
        body = list(cls.body) + list(extra)
        for i, stmt in enumerate(body):
            if isinstance(stmt, ast.AnnAssign):
                if not isinstance(stmt.target, ast.Name):
                    raise self.fail(stmt, "a field must be a plain name")
                fname = stmt.target.id
                call_doc = self.default_doc(stmt, fname)
                if any(f.name == fname for f in fields):
                    raise self.fail(stmt, f"field {fname} is declared twice")
                node = self.type_of(stmt.annotation, set())
                end = getattr(stmt, "end_lineno", stmt.lineno) or stmt.lineno
                fdoc = call_doc or self.comments.get(end) or self.comments.get(stmt.lineno, "")
                fields.append(Field(fname, node, fdoc, self.comments_above(stmt.lineno), self.docstring_after(body, i)))
            elif isinstance(stmt, (ast.ClassDef, ast.Assign, ast.Pass)):
                continue
            elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
                continue  # docstring or a stray string
            else:
                raise self.fail(stmt, f"{type(stmt).__name__} is not allowed inside a class (no methods or code)")
        bases = tuple(ast.unparse(b) for b in cls.bases)
        out = ObjectType(name, tuple(fields), doc, bases)
        self.built[name] = out
        return out

    def comments_above(self, line: int) -> tuple[str, ...]:
        """The comment-only lines right above `line` (a field's leading comments), top to bottom."""
        out: list[str] = []
        row = line - 1
        while row in self.comment_lines:
            if row in self.comments:  # pylint pragmas and bare `#` lines are skipped, not kept
                out.append(self.comments[row])
            row -= 1
        return tuple(reversed(out))

    @staticmethod
    def docstring_after(body: list[ast.stmt], i: int) -> str:
        """A string statement right after field `i` (the attribute-docstring convention), else ''."""
        nxt = body[i + 1] if i + 1 < len(body) else None
        if isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant) and isinstance(nxt.value.value, str):
            import inspect

            return inspect.cleandoc(nxt.value.value)
        return ""

    def default_doc(self, stmt: ast.AnnAssign, fname: str) -> str:
        """Check a field's default: a literal, or field(...)/Field(...) with literal arguments (read for
        `description=` / `metadata={"doc": ...}`, never called). Returns the doc it carries."""
        v = stmt.value
        if v is None or isinstance(v, ast.Constant) or ast.unparse(v) in ("[]", "{}", "()"):
            return ""
        fname_call = (
            v.func.attr
            if isinstance(v, ast.Call) and isinstance(v.func, ast.Attribute)
            else getattr(getattr(v, "func", None), "id", "")
        )
        if not isinstance(v, ast.Call) or fname_call not in ("field", "Field"):
            raise self.fail(stmt, f"field {fname} has a default that is not a literal or field(...)")
        doc = ""
        for kw in v.keywords:
            if kw.arg in ("default_factory",) and isinstance(kw.value, ast.Name) and kw.value.id in ("list", "dict"):
                continue
            try:
                val = ast.literal_eval(kw.value)
            except ValueError:
                raise self.fail(stmt, f"field {fname}: argument {kw.arg}= must be a literal") from None
            if kw.arg == "description" and isinstance(val, str):
                doc = val
            elif kw.arg == "metadata" and isinstance(val, dict) and isinstance(val.get("doc"), str):
                doc = val["doc"]
        for a in v.args:
            try:
                ast.literal_eval(a)
            except ValueError:
                raise self.fail(stmt, f"field {fname}: {fname_call}() arguments must be literals") from None
        return doc

    def type_of(self, ann: ast.expr, seen: set[str]) -> Node:
        if isinstance(ann, ast.Constant):
            if ann.value is None:
                return Prim("None")
            if isinstance(ann.value, str):  # a forward reference "Name" or "list[Name]"
                try:
                    inner = ast.parse(ann.value, mode="eval").body
                except SyntaxError:
                    raise self.fail(ann, f"string annotation {ann.value!r} is not a type") from None
                return self.type_of(inner, seen)
            raise self.fail(ann, f"{ann.value!r} is not a type")
        if isinstance(ann, ast.Attribute):  # typing.List, t.Any ...
            return self.type_of(ast.Name(id=ann.attr, lineno=ann.lineno, col_offset=ann.col_offset), seen)
        if isinstance(ann, ast.Name):
            n = _STR_ALIASES.get(ann.id, ann.id)
            if n in PRIMITIVES:
                return Prim(n)
            if n in _LIST_NAMES or n == "tuple" or n == "Tuple":
                return ListOf(Prim("Any"))
            if n in _DICT_NAMES:
                return DictOf(Prim("Any"))
            if n in self.aliases:
                if n in seen:
                    raise self.fail(ann, f"type alias {n} refers to itself")
                return self.type_of(self.aliases[n], seen | {n})
            if n in self.classes:
                return self.obj(n)
            if n == "Optional":
                raise self.fail(ann, "Optional needs a type: Optional[str]")
            raise self.fail(
                ann,
                f"unknown type {ann.id!r} (define the class in the schema, or use str, int, "
                "float, bool, Any, list[...], dict[str, ...], tuple[...])",
            )
        if isinstance(ann, ast.BinOp) and isinstance(ann.op, ast.BitOr):
            return _union(self.type_of(ann.left, seen), self.type_of(ann.right, seen))
        if isinstance(ann, ast.Subscript):
            base = ann.value.attr if isinstance(ann.value, ast.Attribute) else getattr(ann.value, "id", None)
            args = list(ann.slice.elts) if isinstance(ann.slice, ast.Tuple) else [ann.slice]
            if base in _LIST_NAMES and len(args) == 1:
                return ListOf(self.type_of(args[0], seen))
            if base in ("tuple", "Tuple"):
                if len(args) == 2 and isinstance(args[1], ast.Constant) and args[1].value is Ellipsis:
                    return ListOf(self.type_of(args[0], seen))
                return TupleOf(tuple(self.type_of(a, seen) for a in args))
            if base in _DICT_NAMES and len(args) == 2:
                key = self.type_of(args[0], seen)
                if key != Prim("str"):
                    raise self.fail(ann, "dict keys must be str (or an alias of str): JSON object keys are strings")
                label = args[0].id if isinstance(args[0], ast.Name) else "str"
                return DictOf(self.type_of(args[1], seen), label)
            if base == "Literal" and args:
                vals = []
                for a in args:
                    if not (
                        isinstance(a, ast.Constant)
                        and (a.value is None or isinstance(a.value, (str, int, float, bool)))
                    ):
                        raise self.fail(ann, "Literal[...] takes JSON scalars only (strings, numbers, booleans, None)")
                    vals.append(a.value)
                return EnumOf(tuple(vals))
            if base == "Optional" and len(args) == 1:
                return _union(self.type_of(args[0], seen), Prim("None"))
            if base == "Union" and args:
                return _union(*(self.type_of(a, seen) for a in args))
            if base in ("Annotated",) and args:
                return self.type_of(args[0], seen)
            raise self.fail(ann, f"{ast.unparse(ann)} is not a supported type")
        raise self.fail(ann, f"{ast.unparse(ann)} is not a type annotation")


def _union(*nodes: Node) -> Node:
    opts: list[Node] = []
    for n in nodes:
        for o in n.options if isinstance(n, UnionOf) else (n,):
            if o not in opts:
                opts.append(o)
    return opts[0] if len(opts) == 1 else UnionOf(tuple(opts))
