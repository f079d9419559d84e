"""Stock Schemathesis against the shipped spec and configuration (issue 30).

A user who already runs Schemathesis runs its CLI on `openapi.yaml`, from the checkout, where it finds the
shipped `schemathesis.toml`. That run must pass against a fresh emulator with every check:

- with `--tokens-file` (unknown tokens are 401) and `--checks all`, every check the CLI has, the auth checks
  included;
- in the any-token default, where a made-up token is a new tenant, `--checks all` fails the auth check (it
  outranks the file, which turns it off for this mode) and the documented command passes.

The file itself is checked against the spec: every relaxation names operations whose descriptions state a
rule the schema cannot, and which declare the status the relaxation accepts; no such operation lacks one.
`python -m bench` runs the whole command again with another seed and more examples, and records how many
cases it generated (bench/stock.py).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from schemathesis.config import SchemathesisConfig
from schemathesis.config._checks import POSITIVE_DATA_ACCEPTANCE_EXPECTED_STATUSES

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "schemathesis.toml"
TOKEN = "stock-token"
BIN = Path(sys.executable).parent
SCHEMA_MARK = "this schema cannot state"


def st(*args: str, cwd: Path = ROOT, timeout: float = 400) -> subprocess.CompletedProcess[str]:
    """The `st` console script of this environment, as a user runs it (colour off for the assertions)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SCHEMATHESIS_", "HYPOTHESIS_"))}
    return subprocess.run([str(BIN / "st"), "--no-color", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=env, check=False)


def serve(*args: str | Path) -> Iterator[str]:
    proc = subprocess.Popen([sys.executable, "-m", "emulator", "serve", "--port", "0", *map(str, args)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "listening on" in line, line + (proc.stderr.read() if proc.stderr else "")
        yield line.rsplit(" ", 1)[1].strip()
    finally:
        proc.terminate()
        proc.wait(timeout=20)


@pytest.fixture
def tokens_url(tmp_path: Path) -> Iterator[str]:
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps({"tokens": {TOKEN: {"user": "user-stock", "project": "proj-stock"}}}))
    yield from serve("--tokens-file", tokens)


@pytest.fixture
def any_token_url() -> Iterator[str]:
    yield from serve()


def summary(out: str) -> str:
    return out[out.rfind("SUMMARY"):] if "SUMMARY" in out else out[-4000:]


@pytest.mark.slow
def test_stock_schemathesis_with_every_check_passes_with_a_tokens_file(tokens_url: str) -> None:
    run = st("run", "openapi.yaml", "--url", tokens_url, "-H", f"Authorization: Bearer {TOKEN}", "--checks", "all",
             "-n", "5", "--seed", "7")
    assert f"Configuration:    {CONFIG}" in run.stdout, run.stdout[:2000]  # found as a user's run finds it
    assert run.returncode == 0, f"stock Schemathesis failed:\n{summary(run.stdout)}\n{run.stderr[-2000:]}"
    generated = re.search(r"(\d+) generated, (\d+) passed", run.stdout)
    assert generated and int(generated.group(1)) > 500 and generated.group(1) == generated.group(2), summary(run.stdout)


def test_any_token_default_passes_as_documented_and_fails_the_auth_check_it_breaks(any_token_url: str) -> None:
    common = ("run", "openapi.yaml", "--url", any_token_url, "-H", "Authorization: Bearer any-key",
              "--include-operation-id", "getSupportedModels", "--phases", "examples,coverage,fuzzing", "-n", "3",
              "--seed", "7")
    documented = st(*common)
    assert documented.returncode == 0, summary(documented.stdout)
    # `--checks all` outranks the file: the check it turns off for this mode runs, and a made-up token passes.
    every = st(*common, "--checks", "all")
    assert every.returncode == 1 and "ST401 API accepts invalid authentication" in every.stdout, summary(every.stdout)


# --- the configuration file against the spec ----------------------------------------------------------------

def load_config() -> dict:
    return tomllib.loads(CONFIG.read_text())


def spec_operations() -> dict[str, dict]:
    spec = yaml.safe_load((ROOT / "openapi.yaml").read_text())
    return {op["operationId"]: op for item in spec["paths"].values() for op in item.values()
            if isinstance(op, dict) and "operationId" in op}


def relaxed_statuses(entry: dict) -> set[str]:
    listed = entry["checks"]["positive_data_acceptance"]["expected-statuses"]
    return set(listed) - set(POSITIVE_DATA_ACCEPTANCE_EXPECTED_STATUSES)


def test_the_configuration_is_valid_for_schemathesis() -> None:
    project = SchemathesisConfig.from_path(str(CONFIG)).projects.get_default()  # validated on load
    assert project.checks.ignored_auth.enabled is False
    assert len(project.operations.operations) == len(load_config()["operations"])


def test_each_relaxation_names_a_rule_the_spec_states_and_only_adds_its_status() -> None:
    ops = spec_operations()
    text = CONFIG.read_text()
    entries = load_config()["operations"]
    assert entries
    for entry in entries:
        names = entry["include-operation-id"]
        assert set(entry) == {"include-operation-id", "checks"}, entry
        # the default list, in Schemathesis' order, plus what the rule answers
        listed = entry["checks"]["positive_data_acceptance"]["expected-statuses"]
        assert set(POSITIVE_DATA_ACCEPTANCE_EXPECTED_STATUSES) <= set(listed)
        assert relaxed_statuses(entry) == {"400"}, entry
        for name in names:
            assert name in ops, f"schemathesis.toml names an unknown operation {name}"
            assert "400" in ops[name]["responses"], f"{name} does not declare the 400 it is relaxed for"
            assert SCHEMA_MARK in ops[name]["description"], f"{name}: its description states no such rule"
        # every entry is preceded by a comment naming its rule
        at = text.index(f"include-operation-id = {json.dumps(names)[:40]}")
        before = text[:at].rstrip().rsplit("[[operations]]", 1)[0].rstrip().splitlines()[-1]
        assert before.startswith("# ") and len(before) > 10, f"no comment names the rule of {names}"
    assert re.findall(r"^# Rule: ", text, re.M).__len__() == len(entries)


def test_every_rule_the_spec_cannot_state_is_relaxed() -> None:
    relaxed = {name for entry in load_config()["operations"] for name in entry["include-operation-id"]}
    stated = {name for name, op in spec_operations().items() if SCHEMA_MARK in op["description"]}
    assert stated == relaxed
