"""A rule is stated once (issue 38, item 3): the numeric limits of ``openapi.yaml`` the emulator enforces again
in Python are read from the spec (``emulator/rules.py``), and no other module states one of them."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from emulator import rules, spec

ROOT = Path(__file__).resolve().parent.parent
EMULATOR = ROOT / "emulator"
# Where a request or an import is checked (the domain, the simulated model, the import check, the handlers): a
# limit stated there again would be a second statement of the rule. (The server's options and tools have fields
# of the same names that are other things: a body timeout's "seconds".)
CHECKERS = ("domain", "compute", "api", "integrity.py")
KEYWORDS = ("maxLength", "minLength", "minimum", "maximum", "maxItems", "minItems")


def _limits(node: Any, field: str = "") -> list[tuple[str, str, float]]:
    """Every numeric limit of the spec: (the field it bounds, keyword, value)."""
    out: list[tuple[str, str, float]] = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key in KEYWORDS and isinstance(value, (int, float)) and not isinstance(value, bool):
                out.append((field, key, value))
            elif key == "properties" and isinstance(value, dict):
                for name, sub in value.items():
                    out += _limits(sub, name)
            else:
                out += _limits(value, field)
    elif isinstance(node, list):
        for item in node:
            out += _limits(item, field)
    return out


def test_the_enforced_limits_are_the_spec_s() -> None:
    schemas = spec.load_spec(spec.VENDOR)["components"]["schemas"]
    assert len(rules.ENFORCED) >= 10
    for schema, field, keyword, value in rules.ENFORCED:
        assert schemas[schema]["properties"][field][keyword] == value, (schema, field, keyword)


def _statements(value: float, field: str, root: Path, parts: tuple[str, ...] = ("",)) -> list[str]:
    """Lines of ``root``'s modules (under ``parts``) that state ``value`` for ``field``: both on one line (a
    check, a message)."""
    number = re.compile(rf"(?<![\w.-]){re.escape(str(int(value)) if float(value).is_integer() else str(value))}"
                        rf"(?![\w.])")
    name = re.compile(rf"\b{re.escape(field)}\b")
    out = []
    paths = sorted({p for part in parts for p in ((root / part).rglob("*.py") if (root / part).is_dir()
                                                   else [root / part] if part else root.rglob("*.py"))})
    for path in paths:
        for lineno, line in enumerate(path.read_text().splitlines(), 1):
            if name.search(line) and number.search(line.replace("_", "")):
                out.append(f"{path.relative_to(root.parent).as_posix()}:{lineno}: {line.strip()}")
    return out


def test_no_module_but_the_spec_states_a_limit_of_the_spec() -> None:
    """Each limit of openapi.yaml that Python could state again (not an int32/int64 bound of the format, not a 0
    or 1, which every module writes for other reasons): no line of the modules that check requests and imports
    names its field with its value."""
    limits = {(field, value) for field, _keyword, value in _limits(spec.load_spec(spec.VENDOR))
              if field and abs(value) < 2**31 - 1 and value not in (0, 1)}
    assert ("display_name", 128) in limits and ("inactive_timeout", 86400) in limits
    offenders = [line for field, value in sorted(limits)
                 for line in _statements(value, field, EMULATOR, CHECKERS)]
    assert offenders == []


def test_the_statement_finder_sees_a_stated_limit(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text('if len(display_name) > 128:\n    raise Invalid("display_name: at most 128")\n')
    (tmp_path / "b.py").write_text("if not 300 <= inactive_timeout <= 86_400:\n    pass\n")
    (tmp_path / "c.py").write_text("display_name = x[:1280]\n")
    assert len(_statements(128, "display_name", tmp_path)) == 2
    assert len(_statements(86400, "inactive_timeout", tmp_path)) == 1
