"""The official TypeScript SDK (``together-ai`` on npm) drives the whole flow against the emulator (issue 23).

The TypeScript SDK has no RL resources yet, but its generic ``client.get/post`` reach every endpoint. Its base
URL ends in ``/v1`` (``http://127.0.0.1:8765/v1``), unlike the Python SDK's (the emulator root). The test
installs the pinned package from npm into a cache directory once (``$XDG_CACHE_HOME`` or ``~/.cache``,
``together-rl-emulator/npm``), then runs ``tests/typescript/flow.cjs`` under node against a live emulator,
with a chat rendered by the real Qwen tokenizer. Skipped, with the reason, where node or npm is missing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from emulator.config import Config
from emulator.domain.catalog import QWEN35_IM_END
from emulator.tools.testing import serve_in_thread

pytestmark = [pytest.mark.sdk, pytest.mark.slow]

TS_SDK = "together-ai@0.52.0"
FLOW = Path(__file__).parent / "typescript" / "flow.cjs"


def _cache_dir() -> Path:
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return root / "together-rl-emulator" / "npm" / TS_SDK.replace("@", "-")


@pytest.fixture(scope="module")
def node_modules() -> Path:
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip("the TypeScript SDK test needs node and npm on PATH (e.g. apt-get install nodejs npm)")
    prefix = _cache_dir()
    installed = prefix / "node_modules" / "together-ai" / "package.json"
    if not installed.exists():
        prefix.mkdir(parents=True, exist_ok=True)
        done = subprocess.run([npm, "install", "--no-audit", "--no-fund", "--no-save", "--prefix", str(prefix), TS_SDK],
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0 and installed.exists(), f"npm install {TS_SDK} failed:\n{done.stderr[-2000:]}"
    return prefix / "node_modules"


@pytest.fixture(scope="module")
def emulator_url() -> Iterator[str]:
    with serve_in_thread(Config(validate_responses=True)) as (url, _runtime):
        yield url


def test_typescript_sdk_drives_the_whole_flow(node_modules: Path, emulator_url: str) -> None:
    from tests.test_sdk_tokenizer import chat_tokens

    prompt, completion = chat_tokens()
    env = {**os.environ, "NODE_PATH": str(node_modules), "TOGETHER_BASE_URL": emulator_url + "/v1",
           "TOGETHER_API_KEY": f"ts-key-{os.getpid()}", "FLOW_TOKENS": json.dumps({"prompt": prompt,
                                                                                   "completion": completion})}
    done = subprocess.run(["node", str(FLOW)], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["last_loss"] < out["first_loss"] / 10
    assert out["tokens"] == completion and out["tokens"][-1] == QWEN35_IM_END
    assert out["stop_reason"] == "STOP_REASON_STOP"
    assert out["checkpoint"] in out["listed"]
    assert out["session_status"] in ("TRAINING_SESSION_STATUS_STOPPING", "TRAINING_SESSION_STATUS_STOPPED")
    assert out["resource_status"] in ("MODEL_RESOURCES_STATUS_STOPPING", "MODEL_RESOURCES_STATUS_STOPPED")


def test_the_typescript_base_url_without_v1_misses(node_modules: Path, emulator_url: str) -> None:
    """The convention the README documents, both ways: the TypeScript SDK joins paths to a base URL that ends
    in /v1, so the emulator root alone (the Python SDK's convention) answers 404 unknown_endpoint."""
    script = ("const T = require('together-ai');"
              "new T({apiKey: 'k', baseURL: process.env.ROOT, maxRetries: 0}).get('/rl/supported-models')"
              ".then(() => console.log('200'), (e) => console.log(String(e.status)));")
    env = {**os.environ, "NODE_PATH": str(node_modules), "ROOT": emulator_url}
    wrong = subprocess.run(["node", "-e", script], capture_output=True, text=True, timeout=60, env=env)
    right = subprocess.run(["node", "-e", script], capture_output=True, text=True, timeout=60,
                           env={**env, "ROOT": emulator_url + "/v1"})
    assert (wrong.stdout.strip(), right.stdout.strip()) == ("404", "200"), (wrong.stderr, right.stderr)


def test_the_readme_typescript_snippet_runs(node_modules: Path, emulator_url: str) -> None:
    from tests.doc_blocks import block

    snippet = block("sdk.md", "The TypeScript SDK", 0).body
    assert "http://127.0.0.1:8765/v1" in snippet
    # ESM resolves "together-ai" from the script's own directory: the snippet runs next to node_modules.
    script = node_modules.parent / f"readme-{os.getpid()}.mjs"
    script.write_text(snippet.replace("http://127.0.0.1:8765/v1", emulator_url + "/v1"))
    try:
        done = subprocess.run(["node", str(script)], capture_output=True, text=True, timeout=60)
    finally:
        script.unlink()
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "MODEL_RESOURCES_STATUS_READY"
