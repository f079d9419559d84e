"""``python -m contract_tests``: run the contract suite against a base URL, or against a fresh emulator.

    python -m contract_tests --base-url URL --token TOKEN [--report DIR] [--max-examples N] [--seed N]
    python -m contract_tests                                    # starts `python -m emulator serve --port 0`
    python -m contract_tests --emulator-arg=--defect=step_decreases -k step   # must fail (self-test)
    python -m contract_tests --path schemathesis.toml           # where the package keeps a file, for stock tools

Exit status 0 only when the target conforms: at least one test ran, none failed, and the run was not
cut short (an unreachable target, a collection error or an interruption never passes). Every other option
is handed to pytest (``-k``, ``-x``, ``-v``, ...); ``pytest contract_tests --base-url ...`` (in a checkout)
and ``pytest --pyargs contract_tests --base-url ...`` (anywhere the package is installed) run the very
same tests.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

PACKAGE_DIR = Path(__file__).resolve().parent
PROG = "together-rl-contract"
# What the suite needs beyond the emulator's own dependencies: the `contract` extra.
NEEDS = ("pytest", "schemathesis", "hypothesis", "requests")
# Files the package carries for tools run without this suite: the contract, and stock Schemathesis' configuration
# (the repository's root files, which the wheel maps into the package: contract_tests.spec.shipped).
SHIPPED = ("openapi.yaml", "schemathesis.toml")


def build_parser() -> argparse.ArgumentParser:
    from contract_tests.environment import ENVIRONMENT

    parser = argparse.ArgumentParser(
        prog=PROG, formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Judge an implementation of Together AI's RL API against openapi.yaml. Other options go to "
                    "pytest (-k EXPR, -x, -v, ...).",
        epilog="environment variables (a flag wins over its variable):\n"
               + "\n".join(f"  {k:<22} {v}" for k, v in ENVIRONMENT.items()))
    parser.add_argument("--version", action="version", version=f"{PROG} {_version()}")
    parser.add_argument("--base-url", help="implementation under test; omitted: start the emulator on a free port")
    parser.add_argument("--token", help="API token of the main tenant (required with --base-url)")
    parser.add_argument("--second-token", help="token of another tenant, for the isolation checks")
    parser.add_argument("--admin-token", help="X-Emulator-Admin-Token of a non-loopback emulator")
    parser.add_argument("--report", default="reports/contract",
                        help="directory for junit.xml, summary.json, summary.md (default reports/contract)")
    parser.add_argument("--max-examples", type=int, help="generated cases per operation (default 10)")
    parser.add_argument("--stateful-examples", type=int, help="state machine scenarios (default: twice --max-examples)")
    parser.add_argument("--seed", type=int, help="seed for reproducible generation")
    parser.add_argument("--emulator-arg", action="append", default=[],
                        help="argument for the emulator the suite starts (repeatable), e.g. --emulator-arg=--defect=X")
    parser.add_argument("--allow-create-resources", action="store_true", default=None,
                        help="also run tests that create billable resources against a target without a control plane")
    parser.add_argument("--no-create-resources", action="store_true", help="skip every test that creates resources")
    parser.add_argument("--op-timeout", type=float, help="seconds an operation may take (default 600)")
    parser.add_argument("--shrink", action="store_true", help="shrink failing generated examples (slower)")
    parser.add_argument("--no-coverage-phase", action="store_true", help="skip Schemathesis' coverage phase")
    parser.add_argument("--keep-state", action="store_true",
                        help="against an emulator, keep what the suite made in its tenants (default: reset them)")
    parser.add_argument("--path", choices=SHIPPED,
                        help="print the path of this file of the installed package and exit, e.g. for stock "
                             "Schemathesis: st --config-file \"$(together-rl-contract --path schemathesis.toml)\" run ...")
    return parser


def pytest_args(args: argparse.Namespace, rest: list[str]) -> list[str]:
    out = [str(PACKAGE_DIR), "-c", str(PACKAGE_DIR / "pytest.ini"), "--rootdir", str(PACKAGE_DIR)]
    for flag in ("base_url", "token", "second_token", "admin_token", "max_examples", "stateful_examples", "seed",
                 "op_timeout"):
        value = getattr(args, flag)
        if value is not None:
            out.append(f"--{flag.replace('_', '-')}={value}")
    for arg in args.emulator_arg:
        out.append(f"--emulator-arg={arg}")
    if args.report:
        report = Path(args.report).resolve()   # (made when written: a run that never starts leaves none)
        out += [f"--report={report}", f"--junitxml={report / 'junit.xml'}"]
    if args.allow_create_resources:
        out.append("--allow-create-resources")
    if args.no_create_resources:
        out.append("--no-create-resources")
    if args.shrink:
        out.append("--shrink")
    if args.no_coverage_phase:
        out.append("--no-coverage-phase")
    if args.keep_state:
        out.append("--keep-state")
    return out + rest


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("together-rl-emulator")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


def missing_dependency() -> str | None:
    """The first module of the `contract` extra that is not installed, if any (found, not imported:
    pytest must import them itself to rewrite their asserts)."""
    for name in NEEDS:
        try:
            if importlib.util.find_spec(name) is None:
                return name
        except (ImportError, ValueError):
            return name
    return None


def install_hint(extra: str) -> str:
    """How to add ``extra``: the package is not on the package index, so name what it was installed from
    (pip records it in ``direct_url.json``: the wheel, or the checkout) rather than a name pip cannot find."""
    import json
    from importlib import metadata
    from urllib.parse import unquote, urlparse

    try:
        origin = json.loads(metadata.distribution("together-rl-emulator").read_text("direct_url.json") or "{}")
        url = urlparse(origin.get("url", ""))
    except (metadata.PackageNotFoundError, ValueError, AttributeError):
        url = urlparse("")
    if url.scheme == "file":
        return f"pip install '{unquote(url.path)}[{extra}]'"
    return f"pip install 'PATH[{extra}]', PATH being the wheel or the checkout you installed from"


def _command_line() -> object:
    """A pytest plugin for this command: an option neither this command nor pytest knows is this command's
    usage error (argparse's usage, one sentence, exit status 2), not pytest's, which names another program
    and the package's directory. (Made here: pytest is imported once the contract extra is known to be there.)"""
    import pytest

    class CommandLine:
        @pytest.hookimpl(wrapper=True)
        def pytest_cmdline_parse(self, pluginmanager: Any, args: list[str]) -> Any:
            try:
                return (yield)
            except pytest.UsageError as exc:
                said = [line.split("error: ", 1)[1] for line in str(exc).splitlines() if "error: " in line]
                build_parser().error(said[0] if said else str(exc).strip().splitlines()[-1])

    return CommandLine()


def main(argv: list[str] | None = None) -> int:
    args, rest = build_parser().parse_known_args(argv)
    if args.path:  # needs nothing of the contract extra
        from contract_tests.spec import shipped

        print(shipped(args.path))
        return 0
    if args.base_url and not (args.token or os.environ.get("CONTRACT_TOKEN") or os.environ.get("TOGETHER_API_KEY")):
        build_parser().error("--token is required with --base-url")
    missing = missing_dependency()
    if missing is not None:
        print(f"{PROG}: the contract suite needs {missing!r}, which the package's contract extra installs: "
              f"{install_hint('contract')}", file=sys.stderr)
        return 2
    import pytest

    from contract_tests.report import RESULTS

    code = int(pytest.main(pytest_args(args, rest), plugins=[_command_line()]))
    if code == 0 and RESULTS.failed:
        code = 1  # a violation recorded outside any failing test still fails the run
    return code


if __name__ == "__main__":
    sys.exit(main())
