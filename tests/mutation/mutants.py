"""Seeded single-point mutants of the emulator's source, found by walking its AST at run time.

Every candidate is one small change a careless edit could make, of one of seven kinds:

- ``comparison``: ``<`` <-> ``<=``, ``>`` <-> ``>=`` (the boundary moves), ``==`` <-> ``!=``, ``in`` <-> ``not in``,
  ``is`` <-> ``is not``;
- ``and/or``: a boolean operator swapped;
- ``drop raise``: a ``raise`` statement replaced by ``pass``;
- ``constant``: a number moved by one, towards zero unless that would cross it (a cap of 5 becomes 4, 3600
  becomes 3599, 0 becomes 1, 0.5 becomes 1.5);
- ``enum swap``: an enum member (``R.READY``) or an enum string of the spec (``"CHECKPOINT_TYPE_TRAINING"``)
  replaced by the next value of the same enum;
- ``delete assignment``: an assignment to a field (``s.step = step``, ``out["x"] = ...``, ``r.n -= 1``) replaced
  by ``pass``;
- ``early return``: ``return`` inserted before a function's first statement.

Docstrings and annotations are never touched. A mutant is named by what it changes, not where
(:attr:`Mutant.key`: file, enclosing function, kind, the code before and after, and which occurrence
of that change in the function it is), so a table of known mutants survives edits elsewhere in the
file. The candidates are enumerated from whatever the code is when the tool runs.
"""

from __future__ import annotations

import ast
import copy
import glob
import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.pyast import parse as parse_ast

KINDS = ("comparison", "and/or", "drop raise", "constant", "enum swap", "delete assignment", "early return")
DEFAULT_TARGETS = ("emulator/domain/*.py", "emulator/domain/kinds/*.py", "emulator/api/render.py", "emulator/wire.py",
                   "emulator/store/records.py")

_COMPARISON_SWAP: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq, ast.NotEq: ast.Eq,
    ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot, ast.IsNot: ast.Is,
}


@dataclass(frozen=True)
class Mutant:
    file: str            # repository-relative path
    scope: str           # enclosing function or class (dotted), "<module>" at module level
    kind: str            # one of KINDS
    before: str          # the code it changes (one line, shortened)
    after: str           # what it becomes
    occurrence: int      # the n-th identical (scope, kind, before, after) change in the file
    line: int            # where it is now (for reading; not part of the identity)
    index: int = field(compare=False)  # position in the file's enumeration (to apply it)
    context: str = field(default="", compare=False)  # the source line it is on, stripped (for the table's rows)

    @property
    def key(self) -> str:
        return f"{self.file}::{self.scope}::{self.kind}::{self.before} -> {self.after}#{self.occurrence}"

    @property
    def id(self) -> str:
        return hashlib.sha256(self.key.encode()).hexdigest()[:10]

    def describe(self) -> str:
        return f"{self.file}:{self.line} {self.scope}: {self.kind}: {self.before} -> {self.after}"

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "key": self.key, "file": self.file, "line": self.line, "scope": self.scope, "kind": self.kind,
                "before": self.before, "after": self.after, "occurrence": self.occurrence}


def _short(node: ast.AST, limit: int = 100) -> str:
    text = " ".join(ast.unparse(node).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass
class Vocabulary:
    """What the enum swaps draw on: enum classes (members in order) and the spec's string enums."""

    classes: dict[str, list[str]]
    strings: dict[str, list[str]]  # a value -> the enum (list of values) it belongs to

    @classmethod
    def load(cls, root: Path, files: Iterable[Path]) -> Vocabulary:
        classes: dict[str, list[str]] = {}
        for path in files:
            for node in ast.walk(parse_ast(path.read_text())):
                if isinstance(node, ast.ClassDef) and any(_base_name(b) in ("StrEnum", "Enum", "IntEnum")
                                                          for b in node.bases):
                    members = [t.id for stmt in node.body if isinstance(stmt, ast.Assign)
                               for t in stmt.targets if isinstance(t, ast.Name) and not t.id.startswith("_")]
                    if len(members) > 1:
                        classes[node.name] = members
        strings: dict[str, list[str]] = {}
        spec = root / "openapi.yaml"
        if spec.exists():
            for values in _spec_enums(yaml.safe_load(spec.read_text())):
                for v in values:
                    strings.setdefault(v, values)  # the first enum (in spec order) that holds it
        return cls(classes, strings)


def _base_name(node: ast.expr) -> str:
    return node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""


def _spec_enums(doc: Any) -> Iterable[list[str]]:
    if isinstance(doc, dict):
        values = doc.get("enum")
        if isinstance(values, list) and len(values) > 1 and all(isinstance(v, str) for v in values):
            yield [v for v in values if isinstance(v, str)]
        for value in doc.values():
            yield from _spec_enums(value)
    elif isinstance(doc, list):
        for value in doc:
            yield from _spec_enums(value)


def _next_value(values: list[str], current: str) -> str | None:
    """The next value of the enum after ``current`` (cyclic), skipping protobuf's UNSPECIFIED."""
    choices = [v for v in values if v != current and not v.endswith("_UNSPECIFIED")]
    if not choices:
        return None
    later = [v for v in values[values.index(current) + 1:] if v in choices]
    return (later or choices)[0]


class _Walker(ast.NodeTransformer):
    """Enumerates candidates in a fixed order; with ``apply`` set, performs the candidate of that index."""

    def __init__(self, vocab: Vocabulary, aliases: dict[str, str], apply: int | None = None) -> None:
        self.vocab = vocab
        self.aliases = aliases
        self.apply = apply
        self.found: list[tuple[str, str, str, str, int]] = []  # (scope, kind, before, after, line)
        self.scope: list[str] = []
        self.applied = False

    # --- bookkeeping -----------------------------------------------------------------------------------

    def _candidate(self, kind: str, node: ast.AST, before: str, after: str) -> bool:
        """Record a candidate; True when it is the one to apply."""
        index = len(self.found)
        self.found.append((".".join(self.scope) or "<module>", kind, before, after, getattr(node, "lineno", 0)))
        if index == self.apply:
            self.applied = True
            return True
        return False

    def _body(self, nodes: list[ast.stmt]) -> list[ast.stmt]:
        """Visit a statement list, skipping a leading docstring."""
        out: list[ast.stmt] = []
        for i, stmt in enumerate(nodes):
            if i == 0 and isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) \
                    and isinstance(stmt.value.value, str):
                out.append(stmt)
                continue
            new = self.visit(stmt)
            if new is None:
                continue
            out.extend(new if isinstance(new, list) else [new])
        return out

    # --- scopes (annotations are never visited) --------------------------------------------------------

    def visit_Module(self, node: ast.Module) -> ast.AST:
        node.body = self._body(node.body)
        return node

    def visit_ClassDef(self, node: ast.ClassDef) -> ast.AST:
        node.decorator_list = [self.visit(d) for d in node.decorator_list]
        self.scope.append(node.name)
        node.body = self._body(node.body)
        self.scope.pop()
        return node

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> ast.AST:
        node.decorator_list = [self.visit(d) for d in node.decorator_list]
        args = node.args
        args.defaults = [self.visit(d) for d in args.defaults]
        args.kw_defaults = [self.visit(d) if d is not None else None for d in args.kw_defaults]
        self.scope.append(node.name)
        body = node.body
        has_doc = bool(body) and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str)
        first = body[1] if has_doc and len(body) > 1 else body[0] if not has_doc else None
        insert_return = first is not None and not isinstance(first, ast.Return) and \
            self._candidate("early return", first, _short(first, 60), "return")
        node.body = self._body(body)
        if insert_return:
            at = 1 if has_doc else 0
            node.body.insert(at, ast.copy_location(ast.Return(value=None), node.body[at]))
        self.scope.pop()
        return node

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_AnnAssign(self, node: ast.AnnAssign) -> ast.AST:
        if node.value is not None:
            name = node.target.id if isinstance(node.target, ast.Name) else None
            node.value = self._named(name, node.value)
        return node

    def visit_keyword(self, node: ast.keyword) -> ast.AST:
        node.value = self._named(node.arg, node.value)
        return node

    def visit_Dict(self, node: ast.Dict) -> ast.AST:
        node.keys = [self.visit(k) if k is not None else None for k in node.keys]
        node.values = [self._named(k.value if isinstance(k, ast.Constant) and isinstance(k.value, str) else None, v)
                       for k, v in zip(node.keys, node.values)]
        return node

    def _named(self, name: str | None, value: ast.expr) -> ast.expr:
        """A number given to a name (a keyword, a field, a dict key) is shown with it: ``max_lora_sessions=5``."""
        if name is None or not isinstance(value, ast.Constant) or isinstance(value.value, bool) \
                or not isinstance(value.value, (int, float)):
            return self.visit(value)  # type: ignore[no-any-return]
        new = value.value - 1 if value.value >= 1 else value.value + 1
        if self._candidate("constant", value, f"{name}={value.value!r}", f"{name}={new!r}"):
            return ast.copy_location(ast.Constant(value=new), value)
        return value

    def visit_Assign(self, node: ast.Assign) -> ast.AST:
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return node
        if all(isinstance(t, (ast.Attribute, ast.Subscript)) for t in node.targets):
            if self._candidate("delete assignment", node, _short(node), "pass"):
                return ast.copy_location(ast.Pass(), node)
        node.value = self.visit(node.value)
        node.targets = [self.visit(t) for t in node.targets]
        return node

    def visit_AugAssign(self, node: ast.AugAssign) -> ast.AST:
        if isinstance(node.target, (ast.Attribute, ast.Subscript)):
            if self._candidate("delete assignment", node, _short(node), "pass"):
                return ast.copy_location(ast.Pass(), node)
        node.value = self.visit(node.value)
        node.target = self.visit(node.target)
        return node

    def visit_Raise(self, node: ast.Raise) -> ast.AST:
        if self._candidate("drop raise", node, _short(node), "pass"):
            return ast.copy_location(ast.Pass(), node)
        return self.generic_visit(node)

    def visit_Expr(self, node: ast.Expr) -> ast.AST:
        if isinstance(node.value, ast.Constant):  # a stray string statement: documentation
            return node
        return self.generic_visit(node)

    def visit_JoinedStr(self, node: ast.JoinedStr) -> ast.AST:
        return node  # message text: its constants are not behaviour

    # --- expressions -------------------------------------------------------------------------------------

    def visit_Compare(self, node: ast.Compare) -> ast.AST:
        node = self.generic_visit(node)  # type: ignore[assignment]
        assert isinstance(node, ast.Compare)
        for i, op in enumerate(node.ops):
            swap = _COMPARISON_SWAP.get(type(op))
            if swap is None:
                continue
            mutated = copy.deepcopy(node)
            mutated.ops[i] = swap()
            if self._candidate("comparison", node, _short(node), _short(mutated)):
                node.ops[i] = swap()
        return node

    def visit_BoolOp(self, node: ast.BoolOp) -> ast.AST:
        node = self.generic_visit(node)  # type: ignore[assignment]
        assert isinstance(node, ast.BoolOp)
        other: ast.boolop = ast.Or() if isinstance(node.op, ast.And) else ast.And()
        mutated = ast.BoolOp(op=other, values=node.values)
        if self._candidate("and/or", node, _short(node), _short(mutated)):
            node.op = other
        return node

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        value = node.value
        if isinstance(value, bool) or value is None:
            return node
        if isinstance(value, (int, float)):
            new = value - 1 if value >= 1 else value + 1  # towards zero, never across it
            if self._candidate("constant", node, repr(value), repr(new)):
                return ast.copy_location(ast.Constant(value=new), node)
        elif isinstance(value, str):
            values = self.vocab.strings.get(value)
            replacement = _next_value(values, value) if values else None
            if replacement is not None and self._candidate("enum swap", node, repr(value), repr(replacement)):
                return ast.copy_location(ast.Constant(value=replacement), node)
        return node

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        if isinstance(node.value, ast.Name):
            enum = self.aliases.get(node.value.id, node.value.id)
            members = self.vocab.classes.get(enum)
            if members and node.attr in members:
                replacement = _next_value(members, node.attr)
                if replacement and self._candidate("enum swap", node, _short(node),
                                                   f"{node.value.id}.{replacement}"):
                    return ast.copy_location(ast.Attribute(value=node.value, attr=replacement, ctx=node.ctx), node)
                return node
        return self.generic_visit(node)


def _aliases(tree: ast.Module, classes: dict[str, list[str]]) -> dict[str, str]:
    """Module-level names bound to an enum class: ``R = ResourceStatus``, ``R, S = ResourceStatus, ...``."""
    out: dict[str, str] = {}
    for stmt in tree.body:
        if not isinstance(stmt, ast.Assign):
            continue
        for target in stmt.targets:
            pairs: list[tuple[ast.expr, ast.expr]] = []
            if isinstance(target, ast.Tuple) and isinstance(stmt.value, ast.Tuple):
                pairs = list(zip(target.elts, stmt.value.elts))
            else:
                pairs = [(target, stmt.value)]
            for name, value in pairs:
                if isinstance(name, ast.Name) and isinstance(value, ast.Name) and value.id in classes:
                    out[name.id] = value.id
    return out


@dataclass
class SourceFile:
    root: Path
    path: Path
    text: str
    tree: ast.Module
    aliases: dict[str, str]

    @property
    def rel(self) -> str:
        return self.path.relative_to(self.root).as_posix()


def target_files(root: Path, patterns: Iterable[str] = DEFAULT_TARGETS) -> list[Path]:
    files: set[Path] = set()
    for pattern in patterns:
        matched = [Path(p) for p in glob.glob(str(root / pattern))]
        if not matched:
            raise FileNotFoundError(f"no file matches {pattern!r} under {root}")
        files.update(p for p in matched if p.name != "__init__.py" or p.stat().st_size > 200)
    return sorted(files)


def enumerate_mutants(root: Path, patterns: Iterable[str] = DEFAULT_TARGETS) -> tuple[list[Mutant], Vocabulary]:
    """Every candidate mutant of the target files, in a fixed order (file, then position)."""
    files = target_files(root, patterns)
    vocab = Vocabulary.load(root, files)
    out: list[Mutant] = []
    for path in files:
        src = _load(root, path, vocab)
        walker = _Walker(vocab, src.aliases)
        walker.visit(copy.deepcopy(src.tree))
        lines = src.text.splitlines()
        seen: dict[tuple[str, str, str, str], int] = {}
        for index, (scope, kind, before, after, line) in enumerate(walker.found):
            ident = (scope, kind, before, after)
            seen[ident] = seen.get(ident, 0) + 1
            context = lines[line - 1].strip() if 0 < line <= len(lines) else ""
            out.append(Mutant(src.rel, scope, kind, before, after, seen[ident], line, index, context))
    return out, vocab


def _load(root: Path, path: Path, vocab: Vocabulary) -> SourceFile:
    text = path.read_text()
    tree = parse_ast(text)
    # The mutated module is written back with ast.unparse: make sure that alone changes nothing.
    if ast.dump(parse_ast(ast.unparse(tree))) != ast.dump(tree):
        raise ValueError(f"{path}: ast.unparse does not round-trip this file; it cannot be mutated safely")
    return SourceFile(root, path, text, tree, _aliases(tree, vocab.classes))


def mutated_source(root: Path, mutant: Mutant, vocab: Vocabulary) -> str:
    """The source of ``mutant.file`` with that one change made (the file on disk is not touched)."""
    src = _load(root, root / mutant.file, vocab)
    walker = _Walker(vocab, src.aliases, apply=mutant.index)
    tree = walker.visit(copy.deepcopy(src.tree))
    if not walker.applied:
        raise ValueError(f"mutant {mutant.id} ({mutant.describe()}) was not found again in {mutant.file}")
    found = walker.found[mutant.index]
    if (found[0], found[1], found[2], found[3]) != (mutant.scope, mutant.kind, mutant.before, mutant.after):
        raise ValueError(f"mutant {mutant.id}: the file changed since it was enumerated")
    ast.fix_missing_locations(tree)
    text = ast.unparse(tree)
    compile(text, mutant.file, "exec")
    return text + "\n"
