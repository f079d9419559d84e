"""The path a new user walks (issue 42): docs/new-user-path.md, pasted as written into one bash session in an
empty directory: a training loop on a recording emulator, a pytest test, then the same client against the
replay of the recording. Its first step, the install, is the Install block of docs/getting-started.md,
which tests/test_install.py runs into a fresh environment; here the console scripts are this environment's.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.doc_blocks import block
from tests.test_readme import assert_shows, bash, free_port

PAGE = "new-user-path.md"


def test_the_install_step_is_the_install_block() -> None:
    assert block(PAGE, "1. Install", 0).body == block("getting-started.md", "Install", 0).body


def test_the_new_user_path_walks_as_written(tmp_path: Path) -> None:
    train, train_shows = block(PAGE, "2. A training loop", 0), block(PAGE, "2. A training loop", 1)
    first_test, run_test = block(PAGE, "3. A pytest test", 0), block(PAGE, "3. A pytest test", 1)
    replay, replay_shows = block(PAGE, "4. A replayed demo", 0), block(PAGE, "4. A replayed demo", 1)
    assert first_test.lang == "python" and first_test.body.startswith("# test_first.py")
    (tmp_path / "test_first.py").write_text(first_test.body)
    # "Save the quick start's script as quickstart.py"
    (tmp_path / "quickstart.py").write_text(block("getting-started.md", "Quick start", 3).body)
    port = free_port()
    marks = ["echo '--- step 3'", "echo '--- step 4'"]
    script = "\n".join([train.body, marks[0], run_test.body, marks[1], replay.body])
    script = script.replace("together-rl-emulator serve ", f"together-rl-emulator serve --port {port} ", 1)
    script = script.replace("together-rl-emulator replay demo.jsonl ", f"together-rl-emulator replay demo.jsonl "
                            f"--port {port} ", 1)
    script = script.replace("localhost:8765", f"localhost:{port}").replace("127.0.0.1:8765", f"127.0.0.1:{port}")
    run = bash(script, tmp_path, timeout=300)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    step2, rest = run.stdout.split("--- step 3\n")
    step3, step4 = rest.split("--- step 4\n")
    assert_shows(train_shows.body, step2)
    assert re.search(r"^1 passed in ", step3, re.M) and "failed" not in step3, step3
    assert step4 == replay_shows.body
    first = (tmp_path / "first-run.txt").read_text()
    assert first == (tmp_path / "replayed-run.txt").read_text() and first.endswith("1 2 3 4 -> [5, 6, 7]\n")
    assert "; 0 request(s) had no recorded answer" in (tmp_path / "replay.log").read_text()
