"""The fenced code blocks of the docs site (docs/*.md) and of README.md, found by page and heading.

Tests read a documented snippet as ``block("getting-started.md", "Quick start", 0)``: the first block under
the heading "Quick start" of that page (any heading level), never by line number, so a page can grow
without moving its tests. A block that no test can run says so on the line before its fence, with a reason:
``<!-- not run: a diagram -->``; tests/test_readme.py fails on any other block that no test claims.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
NOT_RUN = re.compile(r"<!-- not run: (?P<reason>\S.*?) -->\n\Z")


@dataclass(frozen=True)
class Block:
    page: str  # "README.md", or a path under docs/ ("getting-started.md")
    heading: str
    index: int  # among the blocks under the heading
    lang: str
    body: str
    not_run: str | None  # the reason given by a `<!-- not run: ... -->` line right before the fence


def path_of(page: str) -> Path:
    return ROOT / page if page == "README.md" else DOCS / page


def pages() -> list[str]:
    """README.md and every Markdown page of docs/ (the site's sources; hooks/ holds code, not pages)."""
    found = sorted(str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md") if "hooks" not in p.parts)
    return ["README.md", *found]


_PATTERN = re.compile(r"^(?P<h>#+ [^\n]*)$|^(?P<ind> *)```(?P<lang>\w*)[^\n]*\n(?P<body>.*?)^(?P=ind)```$",
                      re.M | re.S)


def blocks(page: str) -> list[Block]:
    text = path_of(page).read_text()
    found: list[Block] = []
    heading, seen = "", dict[str, int]()
    for m in _PATTERN.finditer(text):
        if m.group("h"):
            heading = m.group("h").lstrip("# ")
            continue
        n = seen.get(heading, 0)
        seen[heading] = n + 1
        body = "\n".join(line[len(m.group("ind")):] for line in m.group("body").splitlines()) + "\n"
        before = NOT_RUN.search(text[:m.start()])
        found.append(Block(page, heading, n, m.group("lang"), body, before.group("reason") if before else None))
    return found


def block(page: str, heading: str, index: int = 0) -> Block:
    found = [b for b in blocks(page) if b.heading == heading and b.index == index]
    assert len(found) == 1, f"{page} has no block {index} under the heading {heading!r}"
    return found[0]


def section(page: str, heading: str) -> str:
    """The text under ``heading`` of ``page``, up to the next heading of the same or a higher level."""
    text = path_of(page).read_text()
    m = re.search(rf"^(#+) {re.escape(heading)}\n", text, re.M)
    assert m is not None, f"{page} has no heading {heading!r}"
    rest = text[m.end():]
    end = re.search(rf"^#{{1,{len(m.group(1))}}} ", _unfenced(rest), re.M)
    return rest[:end.start()] if end else rest


def _unfenced(text: str) -> str:
    """``text`` with the lines inside fences blanked (same length), so a ``# comment`` there is no heading."""
    return re.sub(r"^( *)```.*?^\1```$", lambda m: re.sub(r"[^\n]", " ", m.group(0)), text, flags=re.M | re.S)
