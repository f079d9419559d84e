"""Stock Schemathesis once more (issue 30): docs/contract-suite.md's `--tokens-file` command, with `--checks all`, against a
fresh emulator, with a fixed seed and case count, so that the figure repeats (the run in `make test`,
tests/test_stock_schemathesis.py, takes a random seed and the default case count). Records the exit
status, how many cases Schemathesis generated, passed, skipped and failed, and the wall time.

    python -m bench.stock [--seed 11] [--examples 25]     # standalone: one BENCH_JSON line
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import procs
from bench.stats import MARK

ROOT = Path(__file__).resolve().parent.parent
SEED = 11
EXAMPLES = 25
TOKEN = "alice-key"  # of the shipped fixtures/tokens/team.yaml, as in docs/contract-suite.md
_COUNTS = {"generated": r"(\d+) generated", "passed": r"(\d+) passed", "skipped": r"(\d+) skipped",
           "failures": r"(\d+) unique failures"}


def counts(output: str) -> dict[str, int]:
    """The numbers of Schemathesis' "Test cases:" line, e.g. `2402 generated, 2402 passed, 60 skipped`."""
    at = output.rfind("Test cases:")
    line = output[at:].splitlines()[1] if at >= 0 and len(output[at:].splitlines()) > 1 else ""
    return {name: int(m.group(1)) if (m := re.search(pattern, line)) else 0 for name, pattern in _COUNTS.items()}


def run(work: Path, seed: int = SEED, examples: int = EXAMPLES, timeout: float = 900) -> dict[str, Any]:
    out: dict[str, Any] = {"stock_seed": seed, "stock_examples": examples}
    cmd = ["run", "openapi.yaml", "--checks", "all", "-n", str(examples), "--seed", str(seed)]
    with procs.Server("stock-emulator", ["-m", "emulator", "serve", "--host", "127.0.0.1", "--port", "0",
                                         "--tokens-file", "team"], work) as emu:
        t0 = time.perf_counter()
        try:
            done = subprocess.run([str(Path(sys.executable).parent / "st"), "--no-color", *cmd, "--url", emu.url,
                                   "-H", f"Authorization: Bearer {TOKEN}"], cwd=str(ROOT), capture_output=True,
                                  text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            out["stock_s"] = None
            out["stock_note"] = f"did not finish within {timeout:.0f} s"
            return out
    out["stock_s"] = time.perf_counter() - t0
    out["stock_exit_code"] = done.returncode
    out.update({f"stock_cases_{name}": n for name, n in counts(done.stdout).items()})
    if done.returncode != 0:
        tail = done.stdout[done.stdout.rfind("SUMMARY"):] if "SUMMARY" in done.stdout else done.stderr
        (work / "stock.out").write_text(done.stdout + done.stderr)
        out["stock_note"] = " ".join(tail.split())[:300]
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.stock", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seed", type=int, default=SEED)
    p.add_argument("--examples", type=int, default=EXAMPLES, help="cases per operation (st -n)")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-stock-") as work:
        try:
            result = run(Path(work), args.seed, args.examples)
        finally:
            procs.stop_all()
    print(MARK + json.dumps(result))
    return 0 if result.get("stock_exit_code") == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
