"""The docs site (issue 42): `mkdocs build --strict` passes, so a broken link or anchor, or a page missing from
the nav, fails `make test`; and the reference pages, generated from the specs at build time, name every
operation, parameter and schema of both. (That every code block of the site runs: tests/test_readme.py.)
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import yaml

ROOT = Path(__file__).resolve().parent.parent
MKDOCS = Path(sys.executable).with_name("mkdocs")


def hook() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_reference_hook", ROOT / "docs" / "hooks" / "reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build(tmp_path: Path, config: Path) -> subprocess.CompletedProcess[str]:
    assert MKDOCS.exists(), "mkdocs is missing: the dev venv installs the `docs` extra (pip install -e '.[docs]')"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run([str(MKDOCS), "build", "--strict", "-f", str(config), "-d", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True, timeout=300, env=env, check=False)


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    proc = build(tmp_path, ROOT / "mkdocs.yml")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    site = tmp_path / "site"
    for page in ("getting-started", "new-user-path", "control-plane", "reference/api", "reference/admin"):
        assert (site / page / "index.html").is_file(), page
    api = (site / "reference" / "api" / "index.html").read_text()
    assert 'id="op-createmodelresources"' in api and 'id="schema-errordata"' in api


def test_a_broken_link_fails_the_build(tmp_path: Path) -> None:
    """--strict is what catches it: the same site with one link to an anchor that is not there fails."""
    docs = tmp_path / "docs"
    subprocess.run(["cp", "-r", str(ROOT / "docs"), str(docs)], check=True)
    page = docs / "server-options.md"
    page.write_text(page.read_text().replace("(fidelity.md)", "(fidelity.md#no-such-heading)", 1))
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    config.update(docs_dir=str(docs), hooks=[str(ROOT / "docs" / "hooks" / "reference.py")])
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(config))
    proc = build(tmp_path, tmp_path / "mkdocs.yml")
    assert proc.returncode != 0 and "no-such-heading" in proc.stdout + proc.stderr, proc.stdout + proc.stderr


def test_the_reference_names_every_operation_parameter_and_schema() -> None:
    reference = hook()
    for _name, source, title, intro in reference.SPECS:
        doc = yaml.safe_load((ROOT / source).read_text())
        page = reference.render(doc, title, intro, source)
        server = doc.get("servers", [{}])[0].get("url", "")
        for path, item in doc["paths"].items():
            path = server.rstrip("/") + path if server.startswith("/") else path
            for method in reference.METHODS:
                if method in item:
                    op = item[method]
                    assert f"### {op['operationId']} {{#op-{op['operationId'].lower()}}}" in page
                    assert f"`{method.upper()} {path}`" in page, (method, path)
                    for param in item.get("parameters", []) + op.get("parameters", []):
                        param = reference.Spec(doc).resolve(param)
                        assert f"| `{param['name']}` | {param['in']} |" in page, (op["operationId"], param["name"])
        for schema in doc.get("components", {}).get("schemas", {}):
            assert f"### {schema} {{#schema-{schema.lower()}}}" in page, schema


def test_the_reference_shows_defaults_bounds_and_enums() -> None:
    """Taken from the spec, not typed in: a default, a bound and an enum of openapi.yaml as the page shows them."""
    reference = hook()
    doc = yaml.safe_load((ROOT / "openapi.yaml").read_text())
    page = reference.render(doc, "t", "i", "openapi.yaml")
    limit = next(p for p in doc["components"]["parameters"].values() if p["name"] == "limit")
    row = next(line for line in page.splitlines() if line.startswith("| `limit` | query |"))
    assert f"| `{limit['schema']['default']}` |" in row and f">= {limit['schema']['minimum']}" in row, row
    status = doc["components"]["schemas"]["ModelResourcesStatus"]["enum"]
    assert "one of " + ", ".join(f"`{v}`" for v in status) in page
