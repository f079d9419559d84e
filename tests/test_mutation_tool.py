"""The mutation tool of ``make mutation`` (``tests/mutation``): its mutants, its table, and a smoke run.

The full run (a sample of 135 mutants of the vendor API, each against the whole contract suite, and every mutant of
the control plane or ``--control-plane-sample`` of them, each against its unit tests; MUTATION.md says how long the
last one took) is not part of ``make test``; the smoke runs
the tool end to end on four fixed mutants, the suite narrowed to one test: one that test kills, one it cannot
notice (survives), one the table of known equivalents names (not run), and one of the control plane, which a unit
test of the limits file kills. Both figures are reported. They are named by what they change, so they outlive edits
elsewhere; if the code they change goes, the tool says "no mutant matches" and this test names which.
"""

from __future__ import annotations

import ast
import hashlib
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from tests.mutation import equivalent
from tests.mutation.mutants import KINDS, enumerate_mutants, mutated_source
from tests.pyast import parse as parse_ast

ROOT = Path(__file__).resolve().parent.parent

KILLED = "emulator/domain/model_resources.py::<module>::constant::3600 -> 3599"   # the default inactive_timeout
SURVIVES = "emulator/domain/shaping.py::estimate::constant::price_usd=12.5 -> price_usd=11.5"  # a price
EQUIVALENT = "emulator/domain/durations.py::Timing::constant::queue_slot_seconds=0.0"  # an instant-profile duration
SELECT = "test_inactive_timeout_default_and_bounds"
CONTROL = "emulator/domain/limits.py::_count::drop raise::"   # a limits file's count of 0 would be taken
UNIT_SELECT = "bad_limits_file"


@pytest.fixture(scope="module")
def candidates() -> tuple[list, object]:
    return enumerate_mutants(ROOT)


def test_every_kind_is_found_and_each_mutant_changes_its_file(candidates: tuple[list, object]) -> None:
    mutants, vocab = candidates
    assert {m.kind for m in mutants} == set(KINDS)
    assert len({m.key for m in mutants}) == len(mutants), "two candidates share a key"
    rng = random.Random(0)
    for kind in KINDS:
        m = rng.choice([c for c in mutants if c.kind == kind])
        original = ast.dump(parse_ast((ROOT / m.file).read_text()))
        changed = ast.dump(parse_ast(mutated_source(ROOT, m, vocab)))  # type: ignore[arg-type]
        assert changed != original, f"{m.describe()} changes nothing"


def test_a_constant_mutant_changes_exactly_that_constant(candidates: tuple[list, object]) -> None:
    mutants, vocab = candidates
    [m] = [c for c in mutants if KILLED in c.key]
    text = mutated_source(ROOT, m, vocab)  # type: ignore[arg-type]
    assert "DEFAULT_INACTIVE_TIMEOUT = 3599" in text and "DEFAULT_INACTIVE_TIMEOUT = 3600" not in text
    [early] = [c for c in mutants if c.kind == "early return" and c.file.endswith("shaping.py")
               and c.scope == "on_cancelled"]
    tree = parse_ast(mutated_source(ROOT, early, vocab))  # type: ignore[arg-type]
    fn = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "on_cancelled")
    assert isinstance(fn.body[0], ast.Return) and fn.body[0].value is None


def test_sampling_is_seeded(candidates: tuple[list, object]) -> None:
    mutants, _ = candidates
    first = [m.id for m in random.Random(29).sample(mutants, 20)]
    again = [m.id for m in random.Random(29).sample(enumerate_mutants(ROOT)[0], 20)]
    assert first == again


def test_every_equivalent_row_matches_a_candidate(candidates: tuple[list, object]) -> None:
    """A row that matches nothing is stale (the code it excuses moved): fix or drop it."""
    mutants, _ = candidates
    stale = [row for row in equivalent.TABLE if not any(row.matches(m) for m in mutants)]
    assert not stale, f"rows of tests/mutation/equivalent.py that match no mutant: {stale}"
    assert all(row.reason.strip() for row in equivalent.TABLE)


def test_control_plane_rows_match_candidates_that_no_equivalent_row_excuses(candidates: tuple[list, object]) -> None:
    """Control-plane mutants are not equivalents: they are counted, against the unit tests each row names."""
    mutants, _ = candidates
    for row in equivalent.CONTROL_PLANE:
        matched = [m for m in mutants if row.matches(m)]
        assert matched, f"a control-plane row matches no mutant (the code moved): {row}"
        assert not [m for m in matched if equivalent.match(m)], f"{row} overlaps the table of equivalents"
        assert row.tests and all((ROOT / test).is_file() for test in row.tests), row
    areas = {row.area for row in equivalent.CONTROL_PLANE}
    assert areas >= {"fault rules", "state export and import", "limits file"}, areas


def _tree_digest() -> str:
    digest = hashlib.sha256()
    for path in sorted((ROOT / "emulator").rglob("*.py")):
        digest.update(path.read_bytes())
    return digest.hexdigest()


@pytest.mark.slow
def test_smoke_run_of_four_fixed_mutants(tmp_path: Path) -> None:
    before = _tree_digest()
    out = tmp_path / "mutation.json"
    cmd = [sys.executable, "-m", "tests.mutation", "--only", KILLED, "--only", SURVIVES, "--only", EQUIVALENT,
           "--only", CONTROL, "--skip-baseline", "--jobs", "2", "--suite-arg=-k", f"--suite-arg={SELECT}",
           "--unit-arg=-k", f"--unit-arg={UNIT_SELECT}", "--json", str(out), "--markdown", str(tmp_path / "MUTATION.md")]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert _tree_digest() == before, "the mutation tool changed the working tree"
    result = json.loads(out.read_text())
    assert len(result["results"]) == 3
    by_key = {key: next(r for r in result["results"] if key in r["key"]) for key in (KILLED, SURVIVES, EQUIVALENT)}
    killed = by_key[KILLED]
    assert killed["status"] == "killed" and SELECT in killed["test"], killed
    assert by_key[SURVIVES]["status"] == "survived", by_key[SURVIVES]
    assert by_key[EQUIVALENT]["status"] == "equivalent" and by_key[EQUIVALENT]["how"], by_key[EQUIVALENT]
    assert result["summary"]["kill_rate_percent"] == 50.0
    [plane] = result["control_plane"]["results"]
    assert CONTROL in plane["key"] and plane["status"] == "killed" and UNIT_SELECT in plane["test"], plane
    assert result["control_plane"]["summary"]["kill_rate_percent"] == 100.0
    md = (tmp_path / "MUTATION.md").read_text()
    assert "| the contract suite | 1 | 1 | 1 | 0 | **50.0%** of 2 |" in md, md[:3000]
    assert "| its unit tests | 1 | 0 | - | 0 | **100.0%** of 1 |" in md, md[:3000]
    assert "kill rate 50.0%" in proc.stdout and "kill rate 100.0%" in proc.stdout, proc.stdout[-2000:]
