"""The dashboard in a real browser: Debian's chromium under Playwright, against a live emulator.

Objects are made through the official SDK (together==3.1.1) while the page is open, and must appear
without a reload (the page stays live through its SSE stream); the clock is advanced from the page.
Every test also checks that the page raised no script error and asked nothing of any other host.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from emulator.config import Config
from emulator.runtime import Runtime
from emulator.tools.recording import load_recording
from emulator.tools.replay import ReplayApp
from emulator.tools.testing import serve_app, serve_in_thread
from tests import browser as chromium_browser
from tests.helpers import RL, ce_sample, run_op

# Imported here, not inside the test that uses them: pytest compiles a test module when it is first imported
# (assertion rewriting), and CPython 3.11 before 3.11.8 can refuse that compile with "AST constructor recursion
# depth mismatch" (pytest-dev/pytest#10874, fixed by python/cpython#113035). It did, in the replay test, once a
# few browser tests had run before it in the same worker; at collection time no browser has run yet.
from tests.test_replay import client_run, record_at_run_time

reason = chromium_browser.missing()
if reason:
    pytest.skip(reason, allow_module_level=True)

from playwright.sync_api import Page, expect  # noqa: E402 - only once we know it is installed

pytestmark = [pytest.mark.browser, pytest.mark.sdk]
expect.set_options(timeout=10_000)  # generous on a loaded 2-core machine; a pass takes well under a second
BASE_MODEL = "Qwen/Qwen3.8-27B"
_keys = itertools.count()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium_browser.chromium() as b:
        yield b


@pytest.fixture(scope="module")
def realistic() -> Iterator[tuple[str, Runtime]]:
    # Manual clock + realistic timings: statuses move only when someone advances the clock.
    with serve_in_thread(Config(clock="manual", profile="realistic", validate_responses=True)) as served:
        yield served


@pytest.fixture(scope="module")
def instant() -> Iterator[tuple[str, Runtime]]:
    with serve_in_thread(Config(clock="manual", validate_responses=True)) as served:
        yield served


class Watched:
    """A page that records script errors, failed loads and requests to anything but the emulator.

    Control-plane calls the tests make fail on purpose (a bad fault rule: 400) are POSTs; every GET
    (page, assets, data, stream) must succeed.
    """

    def __init__(self, page: Page, origin: str) -> None:
        self.page = page
        self.errors: list[str] = []
        self.foreign: list[str] = []
        page.on("pageerror", lambda exc: self.errors.append(str(exc)))
        page.on("console", self._console)
        page.on("request", lambda req: None if req.url.startswith(origin) or req.url.startswith("data:")
                else self.foreign.append(req.url))
        page.on("response", lambda resp: self.errors.append(f"{resp.status} GET {resp.url}")
                if resp.status >= 400 and resp.request.method == "GET" else None)

    def _console(self, msg: Any) -> None:
        # chromium also logs every HTTP error as "Failed to load resource"; those are judged above.
        if msg.type == "error" and not msg.text.startswith("Failed to load resource"):
            self.errors.append(msg.text)

    def check(self) -> None:
        assert self.errors == []
        assert self.foreign == []


@pytest.fixture
def watched(browser: Any, request: pytest.FixtureRequest) -> Iterator[Watched]:
    server = request.getfixturevalue(request.param) if hasattr(request, "param") else None
    origin = server[0] if server else "http://127.0.0.1"
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(10_000)
    w = Watched(page, origin)
    yield w
    context.close()  # closes the page's event stream before the server stops
    w.check()


def key() -> str:
    return f"browser-key-{next(_keys)}"


def tenant_url(url: str, runtime: Runtime, api_key: str) -> str:
    return f"{url}/_emulator/ui/tenants/{runtime.tenancy.project_for_token(api_key)}"


def status_of(page: Page, table: str, obj_id: str) -> Any:
    return page.locator(f'#{table} tr[data-id="{obj_id}"] .badge').first


@pytest.mark.parametrize("watched", ["realistic"], indirect=True)
def test_sdk_objects_appear_live_and_the_page_advances_the_clock(realistic: tuple[str, Runtime],
                                                                 watched: Watched) -> None:
    from together import Together

    url, runtime = realistic
    page, api_key = watched.page, key()
    sdk = Together(api_key=api_key, base_url=url)
    page.goto(f"{url}/_emulator/ui")
    page.evaluate("window.notReloaded = true")
    r = sdk.post_training.model_resources.create(base_model=BASE_MODEL, lora_enabled=True)
    project = runtime.tenancy.project_for_token(api_key)
    row = page.locator(f'#tenants tr[data-project="{project}"]')
    expect(row).to_contain_text("1 PENDING")  # a new tenant shows up on the index, live
    assert page.evaluate("window.notReloaded") is True
    row.get_by_role("link").click()
    expect(page).to_have_url(tenant_url(url, runtime, api_key))
    page.evaluate("window.notReloaded = true")
    expect(status_of(page, "resources", r.id)).to_have_text("PENDING")

    page.get_by_role("button", name="+5 min").click()  # 45 s in the GPU queue, 180 s CREATING
    expect(status_of(page, "resources", r.id)).to_have_text("READY")
    expect(page.locator("#clock-now")).to_contain_text("00:05:00.000")

    s = sdk.post_training.sessions.create(model_resources_id=r.id, lora_config={"rank": 8}, display_name="live-run")
    expect(status_of(page, "sessions", s.id)).to_have_text("CREATING")  # appears with no reload
    expect(page.locator(f'#sessions tr[data-id="{s.id}"]')).to_contain_text("live-run")
    page.get_by_placeholder("seconds").fill("20")
    page.get_by_role("button", name="Advance", exact=True).click()
    expect(status_of(page, "sessions", s.id)).to_have_text("RUNNING")

    lane = page.locator(f'#timeline g[data-id="{r.id}"]')
    for status in ("PENDING", "CREATING", "READY"):
        expect(lane.locator(f"rect.st-{status}")).to_have_count(1)
    expect(page.locator("#events")).to_contain_text("CREATING → RUNNING")
    assert page.evaluate("window.notReloaded") is True


@pytest.fixture(scope="module")
def system() -> Iterator[tuple[str, Runtime]]:
    # System clock at 150x: the realistic 225 s of provisioning take 1.5 s of real time.
    with serve_in_thread(Config(clock="system", speed=150, profile="realistic", validate_responses=True)) as served:
        yield served


@pytest.mark.parametrize("watched", ["system"], indirect=True)
def test_system_clock_statuses_move_on_screen_and_the_page_stops_the_clock(system: tuple[str, Runtime],
                                                                            watched: Watched) -> None:
    from together import Together

    url, runtime = system
    page, api_key = watched.page, key()
    r = Together(api_key=api_key, base_url=url).post_training.model_resources.create(base_model=BASE_MODEL)
    page.goto(tenant_url(url, runtime, api_key))
    expect(page.locator("#clock-mode")).to_have_text("system")
    # Nobody calls the API: the page's stream settles the tenant as virtual time passes.
    expect(status_of(page, "resources", r.id)).to_have_text("READY")
    shown = page.locator("#clock-now").inner_text()
    expect(page.locator("#clock-now")).not_to_have_text(shown)  # the clock runs on screen

    page.locator("#clock-mode-input").select_option("manual")
    page.locator("#clock-speed-input").fill("2")
    # The running clock is heard of while the form is being filled in: what the user chose stays.
    shown = page.locator("#clock-now").inner_text()
    expect(page.locator("#clock-now")).not_to_have_text(shown)
    page.get_by_role("button", name="Set").click()
    expect(page.locator("#clock-mode")).to_have_text("manual")
    expect(page.locator("#clock-speed")).to_have_text("2")
    assert runtime.clock.mode == "manual" and runtime.clock.speed == 2


@pytest.mark.parametrize("watched", ["instant"], indirect=True)
def test_loss_curve_is_drawn_from_forward_backward_results(instant: tuple[str, Runtime], watched: Watched) -> None:
    from together.post_training import AdamParams, LossConfig, ModelResourcesClient

    url, runtime = instant
    page, api_key = watched.page, key()
    tokens = [1, 2, 3, 4, 5, 6, 7]
    sample = {"model_input": {"chunks": [{"encoded_text": {"tokens": tokens[:-1]}}]},
              "loss_fn_inputs": {"target_tokens": {"data": tokens[1:], "dtype": "int64"},
                                 "weights": {"data": [0, 0, 0, 1, 1, 1], "dtype": "float32"}}}
    ready = threading.Event()

    def train() -> list[float]:
        resources = ModelResourcesClient.create(api_key=api_key, base_url=url, base_model=BASE_MODEL,
                                                interval=0.05, ready_timeout=30)
        session = resources.create_session(lora_config={"rank": 8}, display_name="lr-1e-3", interval=0.05,
                                           timeout=30)
        ready.wait(30)  # the page is open: the curve grows while it watches
        losses = []
        for _ in range(6):
            fb = session.trainer.forward_backward(samples=[sample], loss=LossConfig(type="LOSS_TYPE_CROSS_ENTROPY"))
            losses.append(fb.loss)
            session.trainer.optim_step(adam_params=AdamParams(learning_rate=1e-3))
        return losses

    # The SDK's high-level clients refuse to block in a thread with a running event loop (Playwright's).
    with ThreadPoolExecutor(1) as pool:
        training = pool.submit(train)
        page.goto(f"{url}/_emulator/ui")
        project = runtime.tenancy.project_for_token(api_key)
        page.locator(f'#tenants tr[data-project="{project}"] a').click()  # waits for the SDK's first call
        expect(page.locator("#loss-empty")).to_be_visible()
        ready.set()
        losses = training.result(timeout=60)
    assert losses[-1] < losses[0]
    chart = page.locator("#loss-chart")
    expect(chart).to_have_attribute("data-points", "6")
    expect(chart).to_have_attribute("data-series", "1")
    expect(chart.locator(".u-legend")).to_contain_text("lr-1e-3")
    expect(page.locator("#operations")).to_contain_text(f"loss {losses[0]:.4f}")
    # The curve itself: pixels of the first series' colour (#2f6fdf) on the chart's canvas.
    drawn = page.evaluate("""() => {
        const c = document.querySelector('#loss-chart canvas');
        const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
        let n = 0;
        for (let i = 0; i < d.length; i += 4) {
            if (Math.abs(d[i] - 47) < 30 && Math.abs(d[i + 1] - 111) < 30 && Math.abs(d[i + 2] - 223) < 30
                && d[i + 3] > 200) n++;
        }
        return n;
    }""")
    assert drawn > 100


@pytest.mark.parametrize("watched", ["instant"], indirect=True)
def test_fault_rules_are_added_and_removed_from_the_page(instant: tuple[str, Runtime], watched: Watched) -> None:
    url, runtime = instant
    page = watched.page
    try:
        page.goto(f"{url}/_emulator/ui")
        expect(page.locator("#faults-empty")).to_be_visible()
        page.locator("#fault-example").select_option(label="overloaded: the next 2 session creates answer 429")
        page.get_by_role("button", name="Add rule").click()
        row = page.locator('#faults tr[data-name="overloaded"]')
        expect(row).to_contain_text("createSession")
        assert [r["name"] for r in runtime.faults.describe()] == ["overloaded"]

        page.locator("#fault-rule").fill("{not json")
        page.get_by_role("button", name="Add rule").click()
        expect(page.locator("#message.error")).to_contain_text("not valid JSON")
        page.locator("#fault-rule").fill('{"name": "bad", "effect": {"status": 200}}')
        page.get_by_role("button", name="Add rule").click()
        expect(page.locator("#message.error")).to_contain_text("400-599")  # the control plane's own 400

        # A rule added by someone else shows up live (the stream's faults event).
        runtime.faults.load({"name": "from-curl", "effect": {"status": 503}, "trigger": {"first_n": 0}})
        expect(page.locator('#faults tr[data-name="from-curl"]')).to_be_visible()

        row.get_by_role("button", name="Remove").click()
        expect(row).to_have_count(0)
        assert [r["name"] for r in runtime.faults.describe()] == ["from-curl"]
    finally:
        runtime.faults.clear()


@pytest.mark.parametrize("watched", ["instant"], indirect=True)
def test_scenario_loads_from_the_page(instant: tuple[str, Runtime], watched: Watched) -> None:
    url, runtime = instant
    page = watched.page
    page.goto(f"{url}/_emulator/ui")
    page.locator("#scenario").select_option("two-sessions-step-40")
    expect(page.locator("#scenario-description")).to_contain_text("two RUNNING sessions")
    page.get_by_role("button", name="Load").click()
    expect(page).to_have_url(tenant_url(url, runtime, "demo-key"))
    expect(page.locator("#sessions tbody tr")).to_have_count(2)
    expect(page.locator("#sessions")).to_contain_text("sweep-lr-3e-4")
    expect(page.locator("#loss-chart")).to_have_attribute("data-points", "80")
    expect(page.locator("#loss-chart")).to_have_attribute("data-series", "2")
    expect(page.locator("#checkpoints tbody tr")).to_have_count(4)


@pytest.fixture(scope="module")
def guarded() -> Iterator[tuple[str, Runtime]]:
    with serve_in_thread(Config(clock="manual", admin_token="s3cret", validate_responses=True)) as served:
        yield served


@pytest.mark.parametrize("watched", ["guarded"], indirect=True)
def test_admin_token_reaches_data_stream_and_actions(guarded: tuple[str, Runtime], watched: Watched) -> None:
    url, runtime = guarded
    page = watched.page
    for path in ("", "/api/tenants", "/api/stream"):
        refused = page.request.get(f"{url}/_emulator/ui{path}")
        assert refused.status == 401 and refused.json()["error"]["code"] == "invalid_admin_token"
    page.goto(f"{url}/_emulator/ui?admin_token=s3cret")
    expect(page.locator("#live")).to_have_attribute("data-state", "live")  # the stream took the token
    before = runtime.clock.now()
    page.get_by_role("button", name="+1 h").click()  # the control plane took it as a header
    expect(page.locator("#clock-now")).to_contain_text("01:00:00.000")
    assert runtime.clock.now() == before + 3600


def _train(api_key: str, url: str, base_model: str, name: str | None, steps: int, ready: threading.Event) -> None:
    """An ordinary SDK run: a session trains ``steps`` steps and samples once."""
    from together.post_training import (
        AdamParams,
        LossConfig,
        ModelInput,
        ModelResourcesClient,
        SamplingParams,
    )

    tokens = [9707, 11, 1879, 0, 3555, 374, 264]  # (Qwen3.5 ids of ordinary words)
    sample = {"model_input": {"chunks": [{"encoded_text": {"tokens": tokens[:-1]}}]},
              "loss_fn_inputs": {"target_tokens": {"data": tokens[1:], "dtype": "int64"},
                                 "weights": {"data": [0, 0, 1, 1, 1, 1], "dtype": "float32"}}}
    resources = ModelResourcesClient.create(api_key=api_key, base_url=url, base_model=base_model,
                                            interval=0.05, ready_timeout=30)
    ready.wait(30)
    session = resources.create_session(lora_config={"rank": 8}, display_name=name, interval=0.05, timeout=30)
    for _ in range(steps):
        session.trainer.forward_backward(samples=[sample], loss=LossConfig(type="LOSS_TYPE_CROSS_ENTROPY"))
        session.trainer.optim_step(adam_params=AdamParams(learning_rate=1e-3))
    session.trainer.weights_sync()
    session.generator.sample(ModelInput(chunks=[{"encoded_text": {"tokens": tokens[:4]}}]), num_samples=2,
                             sampling_params=SamplingParams(max_tokens=40, temperature=1.0))


@pytest.mark.parametrize("watched", ["instant"], indirect=True)
def test_an_sdk_run_reads_at_a_glance(instant: tuple[str, Runtime], watched: Watched) -> None:
    from emulator.compute import tokenizers

    url, runtime = instant
    page, api_key = watched.page, "glance-key"  # (its own key: the same samples whatever ran before)
    # A first_n: 1 rule that every GET matches: it fires once, however many requests it matches.
    runtime.faults.load({"name": "one-slow-get", "match": {"method": "GET"}, "trigger": {"first_n": 1},
                         "effect": {"latency_ms": 1}})
    ready = threading.Event()
    try:
        with ThreadPoolExecutor(3) as pool:
            runs = [pool.submit(_train, api_key, url, BASE_MODEL, "run-a", 5, ready),
                    pool.submit(_train, api_key, url, BASE_MODEL, None, 3, ready),
                    # MiniMax-M3: no tokenizer package ships its ids, so its samples stay ids
                    pool.submit(_train, api_key, url, "MiniMaxAI/MiniMax-M3", "minimax", 2, ready)]
            page.goto(f"{url}/")  # / leads to the dashboard
            expect(page).to_have_url(f"{url}/_emulator/ui")
            project = runtime.tenancy.project_for_token(api_key)
            ready.set()
            for run in runs:
                run.result(timeout=60)
        page.locator(f'#tenants tr[data-project="{project}"] a').click()
        expect(page.locator("#samples tbody tr")).to_have_count(3)

        # One lane per session, under its resource, its operations as marks on it; no lane per operation.
        listed = {s.get("display_name") or s["id"]: s for s in
                  page.request.get(f"{url}/_emulator/ui/api/tenants/{project}").json()["sessions"]}
        assert len(listed) == 3
        lanes = page.locator("#timeline g.lane-session")
        expect(lanes).to_have_count(3)
        run_a = page.locator(f'#timeline g.lane-session[data-id="{listed["run-a"]["id"]}"]')
        expect(run_a.locator("rect.mark")).to_have_count(5 * 2 + 2)  # fb + optim per step, sync, sample
        expect(run_a.locator("rect.mark.st-COMPLETED")).to_have_count(12)
        expect(run_a).to_contain_text("run-a")
        unnamed = next(s for name, s in listed.items() if name not in ("run-a", "minimax"))
        expect(page.locator(f'#timeline g.lane-session[data-id="{unnamed["id"]}"]')).to_contain_text(unnamed["id"][:8])
        box = page.locator("#timeline")
        assert box.evaluate("b => b.scrollHeight <= b.clientHeight")  # nothing scrolls away
        # Folding: a resource's sessions fold away and come back; a session unfolds into a row per kind.
        resource_id = listed["run-a"]["model_resources_id"]
        toggle = page.locator(f'#timeline g.lane-resource[data-id="{resource_id}"] [data-toggle="resource"]')
        toggle.click()
        expect(run_a).to_have_count(0)
        expect(page.locator(f'#timeline g.lane-resource[data-id="{resource_id}"]')).to_contain_text("(1 session)")
        toggle.click()
        run_a.locator('[data-toggle="session"]').click()
        kinds = page.locator(f'#timeline g.lane-kind[data-id="{listed["run-a"]["id"]}"]')
        expect(kinds).to_have_count(4)
        expect(kinds.first).to_have_attribute("data-kind", "forward-backward")
        expect(kinds.first.locator("rect.mark")).to_have_count(5)

        # Samples: text where the model's tokenizer is installed, else ids that wrap whole; each operation's
        # completions folded into one line until opened.
        qwen = page.locator("#samples tbody tr", has_text="run-a")
        qwen.locator("details.completion-list summary").click()
        expect(qwen.locator(".seq.text")).to_have_count(3)  # the prompt and two completions
        expect(qwen.locator(".seq.text").first).to_have_text(tokenizers.decode([9707, 11, 1879, 0], "qwen3.5"))
        minimax = page.locator("#samples tbody tr", has_text="minimax")
        minimax.locator("details.completion-list summary").click()
        expect(minimax.locator(".seq.text")).to_have_count(0)
        expect(minimax.locator(".seq.ids .tok").first).to_have_text("9707")
        page.set_viewport_size({"width": 600, "height": 1000})  # narrow: the ids must wrap
        # For every prompt and completion: no id is split across lines; the longest takes several lines.
        split, lines = minimax.evaluate("""row => {
            const seqs = [...row.querySelectorAll('.seq.ids')];
            const split = seqs.flatMap(d => [...d.querySelectorAll('.tok')]).filter(t => t.getClientRects().length !== 1);
            const lines = seqs.map(d => new Set([...d.querySelectorAll('.tok')].map(t => t.getBoundingClientRect().top)).size);
            return [split.length, Math.max(...lines)];
        }""")
        assert split == 0 and lines > 1, (split, lines)
        page.set_viewport_size({"width": 1400, "height": 1000})

        # The loss legend: display names or short ids with the latest loss, no stray x row; integer steps.
        legend = page.locator("#loss-chart .u-legend")
        expect(legend).to_contain_text("run-a")
        expect(legend).to_contain_text(unnamed["id"][:8])
        expect(legend).not_to_contain_text(unnamed["id"])
        expect(legend).not_to_contain_text("--")
        ticks = page.locator("#loss-chart").get_attribute("data-xticks") or ""
        assert ticks and all(t.isdigit() for t in ticks.split()), ticks

        # The fault rule: fired once, matched by every GET since.
        row = page.locator('#faults tr[data-name="one-slow-get"]')
        expect(row.locator(".fired")).to_have_text("1")
        assert int(row.locator(".matched").inner_text()) > 10
    finally:
        runtime.faults.clear()


@pytest.mark.parametrize("watched", ["instant"], indirect=True)
def test_a_memorised_sequence_shows_its_small_losses(instant: tuple[str, Runtime], watched: Watched) -> None:
    # two-sessions-step-40: the lr-3e-4 session learns its 3 tokens to a loss of ~1e-6, which 4 decimals
    # showed as 0.0000.
    url, runtime = instant
    page = watched.page
    page.goto(f"{url}/_emulator/ui")
    page.locator("#scenario").select_option("two-sessions-step-40")
    page.get_by_role("button", name="Load").click()
    expect(page.locator("#loss-chart")).to_have_attribute("data-points", "80")
    expect(page.locator("#operations")).to_contain_text("e-6")
    results = page.locator("#operations td:nth-child(5)").all_inner_texts()
    assert "loss 1.36e-6" in results and not [r for r in results if r.startswith("loss 0.0000")]
    expect(page.locator("#loss-chart .u-legend")).to_contain_text("sweep-lr-3e-4  (last 1.36e-6)")


def test_the_replay_server_shows_the_replayed_run_and_rewinds_from_the_page(browser: Any, tmp_path: Any) -> None:
    import httpx

    path, seen = record_at_run_time(tmp_path)
    app = ReplayApp(load_recording(str(path)))
    with serve_app(app) as url:
        context = browser.new_context(viewport={"width": 1400, "height": 1000})
        page = context.new_page()
        w = Watched(page, url)
        try:
            page.goto(f"{url}/")  # a browser lands on the dashboard of the replay
            expect(page.locator("#replay-panel")).to_be_visible()
            expect(page.locator("#faults-panel")).to_be_hidden()
            expect(page.locator("#tenants-empty")).to_be_visible()
            with httpx.Client(base_url=url) as http:
                class Sync:  # client_run speaks TestClient; httpx.Client is the same shape
                    def __getattr__(self, name: str) -> Any:
                        return getattr(http, name)

                assert client_run(Sync()) == seen  # type: ignore[arg-type]
            page.locator('#tenants tr[data-project="replay"] a').click()
            expect(page.locator("#sessions")).to_contain_text("demo")
            expect(page.locator("#loss-chart")).to_have_attribute("data-points", "1")
            expect(page.locator("#timeline g.lane-session rect.mark")).to_have_count(1)
            expect(page.locator("#replay-progress")).to_contain_text("answered 6 of 6")
            page.get_by_role("button", name="Rewind").click()
            expect(page.locator("#replay-progress")).to_contain_text("answered 0 of 6")
            expect(page.locator("#replay-progress")).to_contain_text("1 rewind")
            assert app.report()["rewinds"] == 1
        finally:
            context.close()
        w.check()


# --- what a GRPO run, a bad day and a finished run look like (issue 42) -------------------------------------

class Api:
    """Plain HTTP calls under one API key (the instant profile finishes an operation by the first read)."""

    def __init__(self, url: str, api_key: str) -> None:
        import httpx

        self.http = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {api_key}"}, timeout=30)

    def session(self, name: str, base_model: str = BASE_MODEL) -> str:
        r = self.http.post(f"{RL}/model-resources", json={"base_model": base_model, "lora_enabled": True}).json()
        s = self.http.post(f"{RL}/training-sessions", json={"model_resources_id": r["id"], "display_name": name,
                                                             "lora_config": {"rank": 8}})
        assert s.status_code == 200, s.text
        return str(s.json()["id"])

    def op(self, sid: str, kind: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        return run_op(self.http, sid, kind, body)  # type: ignore[arg-type]  # httpx.Client: TestClient's shape


def _grpo_step(api: Api, sid: str, step: int, prompt: list[int]) -> None:
    """One step of examples/rl_grpo.py: sample a group from the latest weights, train on group-relative advantages."""
    api.op(sid, "weights-sync", {"weight_sync_type": "WEIGHT_SYNC_TYPE_SYNCHRONOUS"})
    out = api.op(sid, "sample", {"model_inputs": [{"chunks": [{"encoded_text": {"tokens": prompt}}]}], "num_samples": 6,
                                 "sampling_params": {"max_tokens": 8, "temperature": 1.0, "seed": step}})
    seqs = out["output"]["results"][0]["sequences"]
    rewards = [sum(int(t) % 2 == 0 for t in q["tokens"]) / 8 for q in seqs]
    mean = sum(rewards) / len(rewards)
    samples = []
    for q, reward in zip(seqs, rewards):
        toks, n, k = prompt + [int(t) for t in q["tokens"]], len(q["tokens"]), len(prompt) - 1
        samples.append({"model_input": {"chunks": [{"encoded_text": {"tokens": toks[:-1]}}]},
                        "loss_fn_inputs": {"target_tokens": {"data": toks[1:], "dtype": "int64"},
                                           "logprobs": {"data": [0.0] * k + q["logprobs"], "dtype": "float32"},
                                           "advantages": {"data": [0.0] * k + [reward - mean] * n, "dtype": "float32"},
                                           "mask": {"data": [0.0] * k + [1.0] * n, "dtype": "float32"}}})
    for half in (samples[:3], samples[3:]):  # two minibatches: the second is off-policy
        assert api.op(sid, "forward-backward", {"loss": {"type": "LOSS_TYPE_GRPO"}, "samples": half})["status"].endswith(
            "COMPLETED")
        api.op(sid, "optim-step", {"adam_params": {"learning_rate": 1e-3}})


@pytest.mark.parametrize("watched", ["instant"], indirect=True)
def test_a_grpo_run_shows_its_loss_metrics_and_its_sampling_per_step(instant: tuple[str, Runtime],
                                                                     watched: Watched) -> None:
    url, runtime = instant
    page, api_key = watched.page, key()
    api = Api(url, api_key)
    sid = api.session("grpo")
    page.goto(tenant_url(url, runtime, api_key))
    expect(page.locator("#metrics-empty")).to_be_visible()
    expect(page.locator("#sampling-empty")).to_be_visible()
    for step in range(3):
        _grpo_step(api, sid, step, [1, 2, 3])
    # What the GRPO loss returned with its value, one chart per metric, a point per forward-backward (live).
    charts = page.locator("#metrics-charts")
    for metric in ("loss/ratio/mean", "loss/clip/high_fraction", "loss/clip/low_fraction", "loss/kl_sample/mean",
                   "loss/num_tokens"):
        expect(charts.locator(f'[data-metric="{metric}"]')).to_have_attribute("data-points", "6")
    expect(charts.locator('[data-metric="loss/clip/high_fraction"]')).to_contain_text("upper clip")
    expect(charts.locator('[data-metric="loss/ratio/mean"] canvas')).to_have_count(1)
    expect(page.locator("#metrics-empty")).to_be_hidden()
    # Sampling per weights version (0, 2 and 4: two optimizer steps per GRPO step): lengths and stop reasons.
    sampling = page.locator("#sampling-charts")
    expect(sampling.locator('[data-chart="length"]')).to_have_attribute("data-points", "3")
    expect(sampling.locator('[data-chart="length"] .u-legend')).to_contain_text("grpo mean")
    stop = sampling.locator('[data-chart="stop"]')
    expect(stop).to_have_attribute("data-points", "3")
    expect(stop.locator(".u-legend")).to_contain_text(" %")
    legend = stop.locator(".u-legend").inner_text()
    view = page.request.get(f"{url}/_emulator/ui/api/tenants/{runtime.tenancy.project_for_token(api_key)}").json()
    for reason in view["sampling"][0]["stop"]:
        assert f"{reason.lower()} %" in legend


@pytest.mark.parametrize("watched", ["instant"], indirect=True)
def test_failed_forward_backwards_show_on_the_loss_chart_where_they_happened(instant: tuple[str, Runtime],
                                                                             watched: Watched) -> None:
    # The bad-day demo: every 3rd forward-backward fails NON_FINITE_LOSS; the client skips the batch.
    url, runtime = instant
    page, api_key = watched.page, key()
    api = Api(url, api_key)
    sid = api.session("bad-day")
    runtime.faults.load({"name": "nan-loss", "match": {"operation_id": "createForwardBackward"},
                         "trigger": {"nth": [3, 6, 9]},
                         "effect": {"operation_fails": "TRAINING_OPERATION_ERROR_CODE_NON_FINITE_LOSS"}})
    try:
        fb = {"loss": {"type": "LOSS_TYPE_CROSS_ENTROPY"}, "samples": [ce_sample([1, 2, 3, 4], [5, 6, 7])]}
        for _ in range(10):
            if api.op(sid, "forward-backward", fb)["status"].endswith("COMPLETED"):
                api.op(sid, "optim-step", {"adam_params": {"learning_rate": 1e-4}})
    finally:
        runtime.faults.clear()
    page.goto(tenant_url(url, runtime, api_key))
    chart = page.locator("#loss-chart")
    expect(chart).to_have_attribute("data-points", "7")
    expect(chart).to_have_attribute("data-failed", "3 6 9")  # where they happened, not squeezed out
    ticks = [int(t) for t in (chart.get_attribute("data-xticks") or "").split()]
    assert ticks and max(ticks) >= 9, ticks  # the axis counts all 10, not the 7 that completed
    expect(page.locator("#loss-failed")).to_have_text(
        "✕ 3 failed forward-backwards: bad-day: #3, #6, #9 (NON_FINITE_LOSS)")
    # Drawn: the failure marks in red (#d9453b) on the chart's canvas, where the one curve is blue.
    red = page.evaluate("""() => {
        const c = document.querySelector('#loss-chart canvas');
        const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
        let n = 0;
        for (let i = 0; i < d.length; i += 4) {
            if (Math.abs(d[i] - 217) < 30 && Math.abs(d[i + 1] - 69) < 30 && Math.abs(d[i + 2] - 59) < 30
                && d[i + 3] > 200) n++;
        }
        return n;
    }""")
    assert red > 100, red


# Where a line starts inside the element: [the character before the break, the first one after it].
LINE_BREAKS = """el => {
    const chars = [];
    const walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
        for (let i = 0; i < node.length; i++) {
            const r = document.createRange();
            r.setStart(node, i); r.setEnd(node, i + 1);
            const rect = [...r.getClientRects()].find((x) => x.width > 0);
            if (rect) chars.push([node.data[i], rect.top]);
        }
    }
    const breaks = [];
    for (let i = 1; i < chars.length; i++) {
        if (chars[i][1] > chars[i - 1][1] + 2) breaks.push([chars[i - 1][0], chars[i][0]]);
    }
    return breaks;
}"""


def _sensible(before: str, after: str) -> bool:
    """A break between words: after a separator or a space, or between the humps of a camelCase name."""
    return before in "-_./:=, " or after == " " or ((before.islower() or before.isdigit()) and after.isupper())


@pytest.mark.parametrize("watched", ["instant"], indirect=True)
def test_fault_rule_names_and_operation_ids_break_between_words(instant: tuple[str, Runtime], watched: Watched) -> None:
    url, runtime = instant
    page = watched.page
    name = "gpu-queue-for-the-whole-afternoon-of-the-demo"
    runtime.faults.load([{"name": name, "match": {"operation_id": "createModelResources"}, "trigger": {"first_n": 1},
                          "effect": {"queue_position": 6}},
                         {"name": "nan-loss", "match": {"operation_id": "createForwardBackward"},
                          "trigger": {"nth": [3]},
                          "effect": {"operation_fails": "TRAINING_OPERATION_ERROR_CODE_NON_FINITE_LOSS"}}])
    try:
        page.goto(f"{url}/_emulator/ui")
        rows = page.locator("#faults tbody tr")
        expect(rows).to_have_count(2)
        assert "createModelResources" in page.locator("#faults tbody").inner_text().replace("\n", "")
        # Each line of text of the table (a cell, or a block of one), wrapped only between words.
        blocks = page.locator("#faults td div, #faults td:not(:has(div))")
        wrapped = 0
        for i in range(blocks.count()):
            breaks = blocks.nth(i).evaluate(LINE_BREAKS)
            assert all(_sensible(b, a) for b, a in breaks), (blocks.nth(i).inner_text(), breaks)
            wrapped += len(breaks)
        assert wrapped >= 2  # the long name did wrap (at its hyphens)
        expect(page.locator(f'#faults [title="{name}"]')).to_have_count(1)  # the whole name on hover
    finally:
        runtime.faults.clear()


@pytest.fixture
def realistic_alone() -> Iterator[tuple[str, Runtime]]:
    # Its own server: the test moves the clock by hours.
    with serve_in_thread(Config(clock="manual", profile="realistic", validate_responses=True)) as served:
        yield served


def test_a_finished_run_keeps_the_timeline_after_the_clock_moves_on(browser: Any,
                                                                    realistic_alone: tuple[str, Runtime]) -> None:
    url, runtime = realistic_alone
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    w = Watched(page, url)
    try:
        api = Api(url, key())
        admin = page.request
        r = api.http.post(f"{RL}/model-resources", json={"base_model": BASE_MODEL}).json()
        admin.post(f"{url}/_emulator/clock/advance", data={"seconds": 300})
        s = api.http.post(f"{RL}/training-sessions", json={"model_resources_id": r["id"], "display_name": "done"}).json()
        admin.post(f"{url}/_emulator/clock/advance", data={"seconds": 30})
        assert api.http.post(f"{RL}/training-sessions/{s['id']}/stop").status_code == 200
        admin.post(f"{url}/_emulator/clock/advance", data={"seconds": 120})  # STOPPING, then STOPPED
        assert api.http.post(f"{RL}/model-resources/{r['id']}/stop").status_code == 200
        admin.post(f"{url}/_emulator/clock/advance", data={"seconds": 600})
        assert api.http.get(f"{RL}/model-resources/{r['id']}").json()["status"].endswith("STOPPED")
        page.goto(tenant_url(url, runtime, api.http.headers["authorization"].split()[1]))
        svg = page.locator("#timeline svg")
        expect(svg).to_have_attribute("data-finished", "true")
        end = svg.get_attribute("data-end")
        admin.post(f"{url}/_emulator/clock/advance", data={"seconds": 10 * 3600})
        expect(page.locator("#clock-now")).to_contain_text("10:17:30")  # the page heard the clock move
        expect(page.locator("#timeline-finished")).to_be_visible()
        assert svg.get_attribute("data-end") == end  # the window still ends at the run's last event
        # The run fills the window: its READY stretch alone is a good part of the plot, not a sliver.
        ready = page.locator(f'#timeline g[data-id="{r["id"]}"] rect.st-READY')
        width = float(ready.get_attribute("width") or 0)
        assert width > 0.1 * float(svg.get_attribute("width") or 1), width
    finally:
        context.close()
    w.check()


@pytest.mark.parametrize("watched", ["instant"], indirect=True)
def test_the_start_page_names_its_tenants(instant: tuple[str, Runtime], watched: Watched) -> None:
    url, runtime = instant
    page, api_key = watched.page, key()
    Api(url, api_key).session("quick-start")
    assert page.request.post(f"{url}/_emulator/scenarios/two-sessions-step-40").status == 200
    page.goto(f"{url}/_emulator/ui")
    demo = page.locator(f'#tenants tr[data-project="{runtime.tenancy.project_for_token("demo-key")}"]')
    expect(demo.locator("td.tenant .label")).to_have_text("scenario two-sessions-step-40")
    expect(demo).to_contain_text("sweep-lr-1e-4, sweep-lr-3e-4")
    mine = page.locator(f'#tenants tr[data-project="{runtime.tenancy.project_for_token(api_key)}"]')
    expect(mine).to_contain_text("quick-start")
    expect(mine).not_to_contain_text("user_")  # a hash of the key names no one: not listed as a user
    expect(page.locator("#tenants th", has_text="users")).to_be_hidden()  # nor is a column of no one
    demo.get_by_role("link").click()
    expect(page.locator("#crumb")).to_contain_text("scenario two-sessions-step-40")


@pytest.mark.parametrize("watched", ["instant"], indirect=True)
def test_samples_without_a_tokenizer_fold_into_a_line(instant: tuple[str, Runtime], watched: Watched) -> None:
    # MiniMax-M3: no tokenizer ships its ids, so its samples are ids: 4 completions of up to 200 of them.
    url, runtime = instant
    page, api_key = watched.page, key()
    api = Api(url, api_key)
    sid = api.session("ids-only", "MiniMaxAI/MiniMax-M3")
    out = api.op(sid, "sample", {"model_inputs": [{"chunks": [{"encoded_text": {"tokens": [1, 2, 3]}}]}],
                                 "num_samples": 4, "sampling_params": {"max_tokens": 200, "temperature": 1.0}})
    seqs = out["output"]["results"][0]["sequences"]
    page.goto(tenant_url(url, runtime, api_key))
    row = page.locator("#samples tbody tr")
    expect(row).to_have_count(1)
    summary = row.locator("details.completion-list summary")
    lengths = sorted(len(q["tokens"]) for q in seqs)
    span = str(lengths[0]) if lengths[0] == lengths[-1] else f"{lengths[0]}–{lengths[-1]}"
    expect(summary).to_contain_text(f"4 completions · {span} tokens")
    folded = row.bounding_box()
    assert folded is not None and folded["height"] < 60, folded  # one line, not a wall of ids
    summary.click()
    lines = row.locator(".completion")
    expect(lines).to_have_count(4)
    for i, q in enumerate(seqs):
        expect(lines.nth(i).locator(".len")).to_have_text(f"{len(q['tokens'])} tok")
        expect(lines.nth(i).locator(".stop")).to_have_text(q["stop_reason"].replace("STOP_REASON_", "").lower())
        shown = lines.nth(i).locator(".tok").all_inner_texts()
        assert shown == [str(t) for t in q["tokens"][:12]]  # the first tokens; all of them on hover
        assert lines.nth(i).locator(".seq").get_attribute("title") == " ".join(str(t) for t in q["tokens"])
    api.op(sid, "weights-sync", {"weight_sync_type": "WEIGHT_SYNC_TYPE_SYNCHRONOUS"})
    expect(page.locator("#operations tbody tr")).to_have_count(2)  # the page redrew; the list stays open
    expect(row.locator(".completion").first).to_be_visible()


@pytest.mark.parametrize("watched", ["instant"], indirect=True)
def test_the_page_says_what_empty_tables_would_hold_and_what_global_means(instant: tuple[str, Runtime],
                                                                          watched: Watched) -> None:
    url, runtime = instant
    page, api_key = watched.page, key()
    Api(url, api_key).http.post(f"{RL}/model-resources", json={"base_model": BASE_MODEL})
    page.goto(tenant_url(url, runtime, api_key))
    expect(page.locator("#resources tbody tr")).to_have_count(1)
    expect(page.locator("#resources-empty")).to_be_hidden()
    for table, says in (("sessions", "No training session"), ("operations", "No operation yet"),
                        ("samples", "No sample yet"), ("checkpoints", "No checkpoint yet")):
        expect(page.locator(f"#{table}-empty")).to_be_visible()
        expect(page.locator(f"#{table}-empty")).to_contain_text(says)
    header = page.locator("#sessions th", has_text="weights applied / target")
    assert "weights-sync" in (header.get_attribute("title") or "")
    expect(page.locator("#weights-caption")).to_contain_text("the trainer step whose weights the sampler serves")
    # "global" says what it acts on.
    expect(page.locator("#clock-scope")).to_have_text("global: every tenant's time")
    expect(page.locator("#clock-note")).to_contain_text("every tenant's time moves")
    expect(page.locator("#faults-scope")).to_contain_text("every tenant's requests")
    expect(page.locator("#scenario-scope")).to_contain_text("act on every tenant")
