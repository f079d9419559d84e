"""ARCHITECTURE.md stays a map (issue 38, item 9): at most 120 lines, no figures, and every rule names a test
that exists; how a part works inside is in its package's README.md."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.pyast import parse as parse_ast

ROOT = Path(__file__).resolve().parent.parent
# A figure: a number with a unit of size, time or rate, or a percentage (a measurement belongs in BENCHMARKS.md).
FIGURE = re.compile(r"\b\d[\d,.]*\s?(?:KB|MB|GB|KiB|MiB|GiB|ms|µs|%|x faster|req/s|seconds|minutes)\b|\d%")
NAMED = re.compile(r"`(tests/[\w/]+\.py)?::(\w+)`|`(tests/[\w/]+\.py)`")


def named_tests(text: str) -> list[tuple[str, str | None]]:
    """(file, test function or None) for each test the text names; `::name` continues the last file named."""
    out: list[tuple[str, str | None]] = []
    last = None
    for m in NAMED.finditer(text):
        if m.group(3):
            last = m.group(3)
            out.append((last, None))
        else:
            last = m.group(1) or last
            assert last, f"`::{m.group(2)}` names no file before it"
            out.append((last, m.group(2)))
    return out


def missing(text: str) -> list[str]:
    gone = []
    for file, name in named_tests(text):
        path = ROOT / file
        if not path.is_file():
            gone.append(file)
            continue
        if name is not None:
            functions = {n.name for n in ast.walk(parse_ast(path.read_text())) if isinstance(n, ast.FunctionDef)}
            if name not in functions:
                gone.append(f"{file}::{name}")
    return gone


def test_architecture_md_is_a_map_whose_tests_exist() -> None:
    text = (ROOT / "ARCHITECTURE.md").read_text()
    assert len(text.splitlines()) <= 120
    assert not FIGURE.findall(text), FIGURE.findall(text)
    rules = text[text.index("## Rules"):text.index("## Reasons")]
    for rule in re.split(r"\n(?=- )", rules)[1:]:
        assert "Held by" in " ".join(rule.split()), f"a rule that names nothing that holds it: {rule[:80]}"
    assert named_tests(text) and not missing(text), missing(text)
    for readme in re.findall(r"`(emulator/\w+/README\.md)`", text):
        assert (ROOT / readme).is_file(), readme


def test_the_checks_see_a_figure_and_a_test_that_is_gone() -> None:
    assert FIGURE.findall("a line costs 86 KB at step 10") and FIGURE.findall("20% of start-up")
    assert missing("Held by `tests/test_structure.py::test_that_never_was` and `::test_every_spec_operation_has_a_handler`") \
        == ["tests/test_structure.py::test_that_never_was"]
    assert missing("`tests/test_gone.py`") == ["tests/test_gone.py"]
