"""One emulator for a team: N shard processes behind HAProxy (``together-rl-emulator cluster``).

Emulates nothing of the real API. Tenants never share state, so a cluster is N emulators started with
``serve --shard I/N``, each holding the tenants whose project hashes to it (:mod:`emulator.sharding`), and
HAProxy in front routing every request of a tenant to its shard with the same function. This module
renders HAProxy's configuration from the shipped template (``haproxy.cfg.tmpl``, next to it), writes the
map of API keys to projects that a ``--tokens-file`` needs, and runs a cluster on one machine: it starts the
shards (each with its own state file under ``--state-dir``), then HAProxy from ``PATH``, and restarts a
shard that dies, on the same port and state file; it holds ``--state-dir`` for its life (an advisory lock,
like each shard's on its file), so a second cluster on the same directory is refused. ``--print-config`` prints the configuration for shards
started anywhere else (other machines: docs/cluster.md).
"""

from __future__ import annotations

import argparse
import errno
import fcntl
import hashlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Callable, TextIO

import httpx

from emulator import fixture_files
from emulator.config import ConfigError, port_argument
from emulator.http.site import WILDCARD_BINDS
from emulator.sharding import MAX_SHARDS
from emulator.tenancy import load_tokens

TEMPLATE = "haproxy.cfg.tmpl"
ADDRESS = re.compile(r"(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9_.-]+):(\d{1,5})")
PLAIN = re.compile(r"[^\s#,()'\"\\]+")   # what a map path or a project may hold to sit unquoted in the config
# Serve options a shard of the cluster gets from the cluster itself (or never).
OWN_OPTIONS = ("--shard", "--balancer", "--state-file", "--host", "--port", "--scenario", "--record",
               "--record-canonical")
# ... and the environment variables that would give them to every shard alike.
OWN_ENV = ("EMULATOR_SHARD", "EMULATOR_BALANCER", "EMULATOR_STATE_FILE", "EMULATOR_HOST", "EMULATOR_PORT",
           "EMULATOR_SCENARIO", "EMULATOR_RECORD", "EMULATOR_RECORD_CANONICAL")
START_TIMEOUT = 60.0


class ClusterError(Exception):
    """Why a cluster cannot start (one line for the user)."""


# --- the configuration ------------------------------------------------------------------------------------

def check_address(text: str, what: str) -> str:
    if ADDRESS.fullmatch(text) is None or not 0 < int(text.rsplit(":", 1)[1]) <= 65535:
        raise ClusterError(f"{what}: expected HOST:PORT (an IPv6 host in brackets), not {text!r}")
    return text


def render_config(shards: list[str], listen: str, *, map_file: str | None = None, check_ms: int = 1000) -> str:
    """HAProxy's configuration for shards at ``shards`` (HOST:PORT, shard 0 first), listening on ``listen``.
    ``map_file``: the map of API keys to projects (:func:`tokens_map`), when the shards have a tokens file."""
    if not 1 <= len(shards) <= MAX_SHARDS:
        raise ClusterError(f"a cluster has 1 to {MAX_SHARDS} shards, not {len(shards)}")
    for i, address in enumerate(shards):
        check_address(address, f"shard {i}")
    check_address(listen, "listen address")
    if map_file is not None:
        if PLAIN.fullmatch(map_file) is None:
            raise ClusterError(f"the map file's path must have no spaces, quotes, commas or brackets: {map_file!r}")
        rules = ("    http-request set-var(txn.project) var(txn.key),sha2(256),hex,lower,map("
                 f"{map_file}) if {{ var(txn.key) -m found }}")
        rule_doc = f"what the tokens file says (the map {map_file}: sha256(KEY) in hex -> project)"
    else:
        rules = ("    http-request set-var(txn.digest) var(txn.key),sha2(256),bytes(0,8),hex,lower "
                 "if { var(txn.key) -m found }\n"
                 "    http-request set-var(txn.project) str(proj_),concat(,txn.digest,) "
                 "if { var(txn.digest) -m found }")
        rule_doc = "proj_ + the first 16 hex digits of sha256(KEY) (emulator/tenancy.py)"
    check = f"check inter {check_ms}ms fall 2 rise 1"
    backends = "\n\n".join(
        f"backend shard{i}\n"
        "    option httpchk GET /_emulator/health\n"
        "    # 503 is a shard whose state file refuses writes: it still serves reads, and says why to writes\n"
        "    http-check expect rstatus ^(200|503)$\n"
        f"    server shard{i} {address} {check}"
        for i, address in enumerate(shards))
    any_servers = "\n".join(f"    server shard{i} {address} {check}" for i, address in enumerate(shards))
    text = resources.files("emulator.tools").joinpath(TEMPLATE).read_text(encoding="utf-8")
    for name, value in (("count", str(len(shards))), ("listen", listen), ("project_rules", rules),
                        ("project_rule_doc", rule_doc), ("shard_backends", backends), ("any_servers", any_servers)):
        text = text.replace("{{" + name + "}}", value)
    assert "{{" not in text, "a placeholder of the template was not filled"
    return text


def tokens_map(tokens_file: str) -> str:
    """HAProxy's map of API keys to projects for a tokens file: one line ``sha256(key) project`` each (the
    keys themselves are not written: the map holds no credential)."""
    try:
        path = fixture_files.resolve("tokens", tokens_file)
        tokens = load_tokens(path)
    except (LookupError, ConfigError) as exc:
        raise ClusterError(f"--tokens-file {tokens_file}: {exc}") from exc
    lines = ["# API key (its SHA-256, hex) -> project; generated by together-rl-emulator cluster from "
             f"{Path(path).name}"]
    for token, principal in sorted(tokens.items(), key=lambda item: item[1].project):
        if PLAIN.fullmatch(principal.project) is None:
            raise ClusterError(f"--tokens-file {tokens_file}: project {principal.project!r} cannot be routed by "
                               "HAProxy (no spaces, quotes, commas, brackets or #)")
        lines.append(f"{hashlib.sha256(token.encode()).hexdigest()} {principal.project}")
    return "\n".join(lines) + "\n"


# --- running a cluster on this machine ---------------------------------------------------------------------

def lock_state_dir(state_dir: str) -> int:
    """Hold ``state_dir`` for this process: ``lockf`` on ``.cluster.lock`` in it, which holds the holder's
    process id; the kernel drops the lock when the process ends, however it ends. Returns the descriptor
    to keep open; a directory another cluster holds is refused (each shard's file lock would refuse its
    shards too, but one by one and naming a shard). The lock is kept by this process, not by the shards
    it starts, so a shard the cluster restarts is not refused."""
    where = Path(state_dir)
    try:
        where.mkdir(parents=True, exist_ok=True)
        fd = os.open(where / ".cluster.lock", os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        raise ClusterError(f"--state-dir {state_dir} cannot be written: {exc.strerror or exc}") from None
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
        os.close(fd)
        if exc.errno not in (errno.EACCES, errno.EAGAIN):
            raise ClusterError(f"--state-dir {state_dir} cannot be locked: {exc.strerror or exc}") from None
        raise ClusterError(f"--state-dir {state_dir} is in use by another cluster (process id "
                           f"{holder or 'not yet written'}): two clusters on one directory would both write each "
                           "shard's state file, so this one does not start; stop that one or pass another "
                           "directory") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def free_port(host: str) -> int:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def connect_host(host: str) -> str:
    """Where the shards reach the balancer bound to ``host``."""
    return {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)


def url_of(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def shard_command(args: argparse.Namespace, i: int, count: int, balancer: str, serve_args: list[str]) -> list[str]:
    """The command that starts shard ``i`` of ``count`` on this machine (bound to loopback; HAProxy in front)."""
    command = [sys.executable, "-m", "emulator", "serve", "--shard", f"{i}/{count}", "--host", "127.0.0.1",
               "--balancer", balancer]
    if args.state_dir:
        command += ["--state-file", str(Path(args.state_dir) / f"shard-{i}-of-{count}.json")]
    if args.tokens_file:
        command += ["--tokens-file", args.tokens_file]
    if args.admin_token:
        command += ["--admin-token", args.admin_token]
    # A shard is bound to loopback but serves the clients of the balancer's bind address: the Host they send
    # is checked as serve --host HOST would check it (emulator/http/site.py). The balancer's own name the
    # shard admits by itself (--balancer); a wildcard bind admits any name, unless some are listed.
    if args.allowed_hosts:
        command += ["--allowed-hosts", args.allowed_hosts]
    elif args.host.strip("[]") in WILDCARD_BINDS and not os.environ.get("EMULATOR_ALLOWED_HOSTS"):
        command += ["--allowed-hosts", "*"]
    return command + serve_args


@dataclass
class ShardProcess:
    index: int
    args: list[str]
    port: int = 0
    proc: subprocess.Popen[str] | None = None
    restarts: int = 0


class Cluster:
    """N shards and HAProxy; :meth:`start`, then :meth:`supervise` until stopped; :meth:`stop` always."""

    def __init__(self, args: argparse.Namespace, serve_args: list[str], haproxy: str, out: TextIO) -> None:
        self.args = args
        self.serve_args = serve_args
        self.key: tuple[str, str | None] = ("any-key", None)   # what the banner says to export (working_key)
        self.haproxy = haproxy
        self.out = out
        self.count = args.workers
        self.host = args.host
        self.port = args.port or free_port(args.host)
        self.url = url_of(args.host, self.port)
        self.balancer = url_of(connect_host(args.host), self.port)
        self.run_dir = Path(args.run_dir) if args.run_dir else Path(tempfile.mkdtemp(prefix="emulator-cluster-"))
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.env = {k: v for k, v in os.environ.items() if k not in OWN_ENV}
        self.env["PYTHONUNBUFFERED"] = "1"
        self.shards = [ShardProcess(i, self._shard_args(i)) for i in range(self.count)]
        self.lb: subprocess.Popen[bytes] | None = None
        self.stopping = False

    def _shard_args(self, i: int) -> list[str]:
        return shard_command(self.args, i, self.count, self.balancer, self.serve_args)

    def say(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def _launch(self, shard: ShardProcess) -> None:
        # (a session of its own: Ctrl+C reaches the cluster, which stops the shards, and never restarts them)
        shard.proc = subprocess.Popen([*shard.args, "--port", str(shard.port)], stdout=subprocess.PIPE,
                                      stdin=subprocess.DEVNULL, text=True, env=self.env, start_new_session=True)

    def _await_banner(self, shard: ShardProcess, deadline: float) -> None:
        """Read the shard's "listening on" line (its port, the first time), then pass on what else it prints."""
        proc = shard.proc
        assert proc is not None and proc.stdout is not None
        found: list[str] = []

        def read() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                if not found and "listening on" in line:
                    found.append(line.rsplit(" ", 1)[1].strip())
        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        while not found and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.01)
        if not found:
            raise ClusterError(f"shard {shard.index} did not start (exit status {proc.poll()}); its error is above")
        shard.port = int(found[0].rsplit(":", 1)[1])

    def start(self) -> None:
        map_file = None
        if self.args.tokens_file:
            map_path = self.run_dir / "tokens.map"
            map_path.write_text(tokens_map(self.args.tokens_file))
            map_file = str(map_path.resolve())
        for shard in self.shards:  # all at once: each takes a second or two of imports
            self._launch(shard)
        deadline = time.monotonic() + START_TIMEOUT
        for shard in self.shards:
            self._await_banner(shard, deadline)
        config = render_config([f"127.0.0.1:{s.port}" for s in self.shards],
                               f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}",
                               map_file=map_file, check_ms=self.args.check_interval)
        cfg = self.run_dir / "haproxy.cfg"
        cfg.write_text(config)
        checked = subprocess.run([self.haproxy, "-c", "-q", "-f", str(cfg)], capture_output=True, text=True,
                                 timeout=30)
        if checked.returncode != 0:
            raise ClusterError(f"HAProxy refused {cfg}: {(checked.stderr or checked.stdout).strip()[-1500:]}")
        self.lb = lb = subprocess.Popen([self.haproxy, "-db", "-f", str(cfg)], stdin=subprocess.DEVNULL,
                                        env=self.env, start_new_session=True)
        self._await_balancer(deadline)
        self.say(f"Together RL emulator cluster: {self.count} shards behind HAProxy listening on {self.url}")
        key, whose = self.key
        self.say(f"  export TOGETHER_BASE_URL={self.url} TOGETHER_API_KEY={key}    # dashboard: "
                 f"{self.url}/_emulator/ui")
        if whose:
            self.say(f"  {key}: {whose}")
        for shard in self.shards:
            assert shard.proc is not None
            state = f", state file {shard.args[shard.args.index('--state-file') + 1]}" \
                if "--state-file" in shard.args else ""
            self.say(f"  shard {shard.index}/{self.count}: http://127.0.0.1:{shard.port} (pid {shard.proc.pid}"
                     f"{state})")
        self.say(f"  HAProxy pid {lb.pid}, configuration {cfg}")

    def _await_balancer(self, deadline: float) -> None:
        """Until HAProxy answers and has found every shard up (its health checks)."""
        assert self.lb is not None
        while time.monotonic() < deadline:
            if self.lb.poll() is not None:
                raise ClusterError(f"HAProxy exited with status {self.lb.returncode}; its error is above")
            try:  # each shard answers through HAProxy (the header says a shard answered, not HAProxy itself)
                if all(httpx.get(f"{self.balancer}/_emulator/health", headers={"X-Emulator-Shard": str(s.index)},
                                 timeout=2).headers.get("x-emulator-shard") == str(s.index) for s in self.shards):
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise ClusterError("HAProxy did not come up in time")

    def supervise(self) -> int:
        """Restart a shard that exits (same port, same state file) until stopped; 1 if HAProxy exits."""
        assert self.lb is not None
        while not self.stopping:
            if self.lb.poll() is not None:
                self.say(f"cluster: HAProxy exited with status {self.lb.returncode}; stopping the shards")
                return 1
            for shard in self.shards:
                if shard.proc is not None and shard.proc.poll() is not None and not self.stopping:
                    self._restart(shard)
            time.sleep(0.1)
        return 0

    def _restart(self, shard: ShardProcess) -> None:
        assert shard.proc is not None
        code = shard.proc.returncode
        shard.restarts += 1
        self.say(f"cluster: shard {shard.index} exited with status {code}; restarting it on port {shard.port} "
                 f"(restart {shard.restarts})")
        time.sleep(self.args.restart_delay)
        for _ in range(50):  # the port may take a moment to be free again
            self._launch(shard)
            try:
                self._await_banner(shard, time.monotonic() + START_TIMEOUT)
            except ClusterError:
                time.sleep(0.2)
                continue
            assert shard.proc is not None
            self.say(f"  shard {shard.index}/{self.count}: http://127.0.0.1:{shard.port} (pid {shard.proc.pid})")
            return
        self.say(f"cluster: shard {shard.index} does not start again; its tenants get 503 until it does")

    def stop(self) -> None:
        self.stopping = True
        procs = [s.proc for s in self.shards if s.proc is not None] + ([self.lb] if self.lb is not None else [])
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)


def _bounded(kind: type, low: float, high: float, what: str) -> Callable[[str], Any]:
    """An argparse type that says in one plain sentence what it wanted (not Python's ``int()`` wording)."""
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}")
        return value
    return parse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workers", type=_bounded(int, 1, MAX_SHARDS, f"a number of shards (1 to {MAX_SHARDS})"),
                        help="number of shards (default: the number of --shard-address, else the number of cores)")
    parser.add_argument("--host", default="127.0.0.1", help="HAProxy's bind address (default 127.0.0.1; other "
                                                            "addresses need --admin-token)")
    parser.add_argument("--port", type=port_argument, default=8765,
                        help="HAProxy's port (default 8765; 0 picks a free one)")
    parser.add_argument("--state-dir", help="keep each shard's state in DIR/shard-I-of-N.json (a journal each; "
                                            "default: state in memory only)")
    parser.add_argument("--tokens-file", help="as serve's; HAProxy gets a map of its keys to their projects")
    parser.add_argument("--admin-token", help="as serve's (given to every shard)")
    parser.add_argument("--allowed-hosts", metavar="H,...",
                        help="as serve's, for the balancer's --host: Host names served besides the bind address and "
                             "loopback names (with --host 0.0.0.0 any name is served unless listed here)")
    parser.add_argument("--haproxy", default="haproxy", help="the haproxy executable (default: haproxy from PATH)")
    parser.add_argument("--check-interval", default=1000, metavar="MS",
                        type=_bounded(int, 10, 3_600_000, "a number of milliseconds (10 to 3600000)"),
                        help="HAProxy's health checks of each shard, every MS milliseconds (default 1000)")
    parser.add_argument("--restart-delay", default=0.5, metavar="S",
                        type=_bounded(float, 0, 3600, "a number of seconds (0 to 3600)"),
                        help="seconds before a shard that exited is started again (default 0.5)")
    parser.add_argument("--run-dir", help="where the HAProxy configuration (and map) is written (default: a "
                                          "temporary directory)")
    parser.add_argument("--print-config", action="store_true",
                        help="print HAProxy's configuration for shards at --shard-address and exit (start the "
                             "shards yourself: serve --shard I/N --balancer URL)")
    parser.add_argument("--shard-address", action="append", default=[], metavar="HOST:PORT",
                        help="with --print-config: where shard 0, 1, ... listen (repeat, in order)")
    parser.add_argument("--map-file", help="with --print-config and --tokens-file: where to write the map of keys "
                                           "to projects (the configuration names this path)")


def print_config(args: argparse.Namespace, out: TextIO) -> int:
    shards = list(args.shard_address)
    if not shards:
        raise ClusterError("--print-config needs the shards' addresses: --shard-address HOST:PORT, once per shard, "
                           "shard 0 first")
    if args.workers is not None and args.workers != len(shards):
        raise ClusterError(f"--workers {args.workers} but {len(shards)} --shard-address given")
    map_file = None
    if args.tokens_file:
        if not args.map_file:
            raise ClusterError("--tokens-file with --print-config needs --map-file PATH: where to write the map "
                               "HAProxy reads (the configuration names it)")
        map_path = Path(args.map_file).resolve()
        map_path.write_text(tokens_map(args.tokens_file))
        map_file = str(map_path)
    host = args.host
    out.write(render_config(shards, f"[{host}]:{args.port}" if ":" in host else f"{host}:{args.port}",
                            map_file=map_file, check_ms=args.check_interval))
    return 0


def cluster_key(args: argparse.Namespace, serve_args: list[str]) -> tuple[str, str | None]:
    """The API key the banner gives (emulator.tools.server.working_key), from the options the shards get."""
    from emulator.config import ConfigError, add_server_arguments, config_from_args
    from emulator.tools.server import working_key

    parser = argparse.ArgumentParser(add_help=False)
    add_server_arguments(parser)
    known, _ = parser.parse_known_args(serve_args)
    known.tokens_file = args.tokens_file or known.tokens_file
    try:
        return working_key(config_from_args(known))
    except (ConfigError, LookupError, ValueError) as exc:
        raise ClusterError(str(exc)) from None


def main(args: argparse.Namespace, serve_args: list[str], out: TextIO | None = None) -> int:
    """``together-rl-emulator cluster``: every failure to start is one line on stderr and exit status 2."""
    out = out or sys.stdout
    try:
        for arg in serve_args:
            if arg.split("=", 1)[0] in OWN_OPTIONS:
                raise ClusterError(f"{arg.split('=', 1)[0]} is the cluster's to give each shard; see cluster --help "
                                   "(--state-dir for state files, --host/--port for HAProxy)")
        if args.print_config:
            return print_config(args, out)
        if args.shard_address:
            raise ClusterError("--shard-address goes with --print-config (the cluster starts its own shards here)")
        args.workers = args.workers if args.workers is not None else (os.cpu_count() or 2)
        if not 1 <= args.workers <= MAX_SHARDS:
            raise ClusterError(f"--workers must be 1 to {MAX_SHARDS}")
        loopback = args.host in ("127.0.0.1", "localhost", "::1") or args.host.startswith("127.")
        if not loopback and not (args.admin_token or os.environ.get("EMULATOR_ADMIN_TOKEN")):
            raise ClusterError("binding HAProxy to a non-loopback address exposes the control plane /_emulator/*; "
                               "pass --admin-token TOKEN to protect it")
        haproxy = shutil.which(args.haproxy)
        if haproxy is None:
            raise ClusterError(f"cluster needs HAProxy 2.6 or later, and {args.haproxy!r} is not on PATH: install "
                               "it (Debian/Ubuntu: apt-get install haproxy) or name it with --haproxy PATH")
        key = cluster_key(args, serve_args)
        lock = lock_state_dir(args.state_dir) if args.state_dir else None
    except ClusterError as exc:
        print(f"together-rl-emulator: cluster: {exc}", file=sys.stderr)
        return 2
    cluster = Cluster(args, serve_args, haproxy, out)
    cluster.key = key

    def stop(signum: int, frame: Any) -> None:
        cluster.stopping = True

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        try:
            cluster.start()
        except ClusterError as exc:
            print(f"together-rl-emulator: cluster: {exc}", file=sys.stderr)
            return 2
        return cluster.supervise()
    finally:
        cluster.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if lock is not None:
            os.close(lock)
