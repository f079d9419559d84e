"""The example clients of the repository's top-level ``examples/``, as the package ships them.

Their one source is ``examples/``; the wheel carries it as ``emulator/examples/`` (a package-dir mapping in
``pyproject.toml``), so ``together-rl-emulator examples --copy DIR`` hands a pip user the very files; a checkout
reads the top-level one. They are scripts for the user (they import the SDK), never imported by the emulator.
"""

from __future__ import annotations

import ast
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path


def root() -> Traversable:
    """``examples/``: the packaged copy in a wheel, else the checkout's top-level directory."""
    packaged = resources.files("emulator").joinpath("examples")
    if packaged.joinpath("README.md").is_file():
        return packaged
    return Path(__file__).resolve().parent.parent / "examples"


def names() -> list[str]:
    """The examples' names (their file names without ``.py``), sorted."""
    return sorted(p.name.removesuffix(".py") for p in root().iterdir() if p.name.endswith(".py") and p.is_file())


def summary(name: str) -> str:
    """The first line of an example's docstring."""
    doc = ast.get_docstring(ast.parse(root().joinpath(f"{name}.py").read_text(encoding="utf-8"))) or ""
    return doc.split("\n", 1)[0].replace("``", "`")


def copy_to(target: Path) -> list[Path]:
    """Write every example and the README into ``target`` (created if missing); refuses, before writing
    anything, when a file of the same name is already there."""
    sources = [root().joinpath(f"{n}.py") for n in names()] + [root().joinpath("README.md")]
    clashes = [s.name for s in sources if (target / s.name).exists()]
    if clashes:
        raise FileExistsError(f"not copying into {target}: {', '.join(clashes)} already there (nothing was written)")
    target.mkdir(parents=True, exist_ok=True)
    written = []
    for source in sources:
        path = target / source.name
        path.write_bytes(source.read_bytes())
        written.append(path)
    return written
