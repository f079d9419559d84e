"""Fast checks of the benchmark's own pure helpers (bench/); the benchmark itself runs with `make bench`."""

from __future__ import annotations

import asyncio
import json
import struct
import zlib
from pathlib import Path

import pytest

from bench import report, stats
from bench.ceiling import ROUTES, build_app
from bench.loadgen import LUA


def test_percentile_is_nearest_rank() -> None:
    values = list(range(1, 101))
    assert stats.percentile(values, 50) == 50
    assert stats.percentile(values, 99) == 99
    assert stats.percentile(values, 100) == 100
    assert stats.percentile([7.0], 99) == 7.0
    assert stats.percentile([], 50) is None


def test_ratio_median_and_verdicts() -> None:
    assert stats.ratio(1.0, 4.0) == 0.25
    assert stats.ratio(1.0, 0.0) is None and stats.ratio(None, 1.0) is None
    assert stats.median([3, 1, 2]) == 2 and stats.median([1, 2, 3, 4]) == 2.5 and stats.median([]) is None
    assert stats.verdict(0.6, 0.5, True) == "PASS" and stats.verdict(0.4, 0.5, True) == "MISS"
    assert stats.verdict(9.9, 10, False) == "PASS" and stats.verdict(10, 10, False) == "MISS"
    assert stats.verdict(None, 1, True) == "n/a"


def test_a_round_with_errors_never_counts_before_a_clean_one() -> None:
    clean, faster_clean, failing = {"rps": 100.0, "errors": 0}, {"rps": 120.0, "errors": 0}, {"rps": 900.0, "errors": 5}
    assert stats.better_round(faster_clean, clean) and not stats.better_round(clean, faster_clean)
    assert not stats.better_round(failing, clean)  # fast because its requests failed
    assert stats.better_round(clean, failing)
    assert stats.better_round({"rps": 950.0, "errors": 1}, failing)  # among failing rounds, the faster


def test_a_target_measured_with_errors_is_invalid_not_a_pass() -> None:
    r = {"create_c32_rps": 8471.0, "ceiling_create_c32_rps": 12704.0, "create_c32_rps_ratio": 0.67,
         "create_c32_p99_ms": 4.0, "create_c32_errors": 18854, "create_c32_best_round_errors": 18854,
         "ceiling_create_c32_errors": 0, "ceiling_create_c32_best_round_errors": 0}
    verdicts = {name: v for name, _, v in report.target_rows(r, ["100", "100k"]) if name.startswith("create")}
    assert set(verdicts.values()) == {"INVALID (18854 failed requests)"}, verdicts
    r["create_c32_best_round_errors"] = 0  # the errors were in a round that does not count
    verdicts = {name: v for name, _, v in report.target_rows(r, ["100", "100k"]) if name.startswith("create")}
    assert set(verdicts.values()) == {"PASS"}, verdicts


def test_parse_and_summarize_a_load_generator_report() -> None:
    raw = {
        "requests": 5000,
        "duration_us": 2_000_000,
        "bytes": 1,
        "errors_connect": 0,
        "errors_read": 0,
        "errors_write": 0,
        "errors_status": 2,
        "errors_timeout": 1,
        "errors_flow": 0,
        "lat_p50": 1500,
        "lat_p90": 3000,
        "lat_p99": 9000,
        "lat_mean": 1700.5,
        "lat_max": 20000,
        "loops": 100,
    }
    text = "Running 2s test\n" + stats.MARK + json.dumps(raw) + "\n"
    out = stats.summarize(stats.parse_marked_json(text))
    assert out["rps"] == 2500.0 and out["p50_ms"] == 1.5 and out["p99_ms"] == 9.0
    assert out["errors"] == 3 and out["loops_per_s"] == 50.0
    with pytest.raises(ValueError):
        stats.parse_marked_json("no report here")


def test_wrk_version_and_pool_size() -> None:
    assert stats.wrk_version("wrk debian/4.1.0-3+b2 [epoll] Copyright") == "4.1.0"
    assert stats.wrk_version("wrk 4.2.0 [epoll]") == "4.2.0"
    assert stats.pool_size(1000, 5, margin=1.0) == 1000  # 5000 creates / 5 per resource
    assert stats.pool_size(1, 1) == 20


def test_lua_scripts_are_present() -> None:
    for name in ("common", "static", "create_session", "loop"):
        assert (LUA / f"{name}.lua").is_file()
    assert "BENCH_JSON" in (LUA / "common.lua").read_text()


def test_png_fallback_writes_a_valid_png(tmp_path: Path) -> None:
    sweep = {
        "emulator": {
            1: {"rps": 1000, "p50_ms": 0.9, "p99_ms": 3.0},
            32: {"rps": 2000, "p50_ms": 15, "p99_ms": 40},
        },
        "ceiling": {
            1: {"rps": 4000, "p50_ms": 0.2, "p99_ms": 1.0},
            32: {"rps": 6000, "p50_ms": 5, "p99_ms": 9},
        },
    }
    path = tmp_path / "plot.png"
    report.write_png_fallback(sweep, path, w=120, h=80)
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert (width, height) == (120, 80)
    idat = data[data.index(b"IDAT") + 4 : data.index(b"IEND") - 8]
    assert len(zlib.decompress(idat)) == 80 * (1 + 120 * 3)


def test_markdown_block_is_replaced_and_hand_text_kept(tmp_path: Path) -> None:
    results = {
        "get_rps_ratio": 0.6,
        "get_c32_rps_ratio": 0.6,
        "get_c32_rps": 600.0,
        "ceiling_get_c32_rps": 1000.0,
        "get_c32_p99_ms": 8.0,
        "list_p50_ms_100": 1.0,
        "list_p50_ms_100k": 1.5,
        "list_scaling_ratio": 1.5,
        "mem_bytes_per_idle_session_10k": 900.0,
        "mem_bytes_per_idle_session_100k": 1100.0,
        "startup_s": 1.2,
        "startup_s_max": 1.3,
        "date_utc": "2026-01-01T00:00:00Z",
        "longrun_steps": 200,
        "longrun_small_budget_mib": 8,
        "longrun_small_rss_mb_half": 120.0,
        "longrun_small_rss_mb_end": 121.0,
        "longrun_small_growth_kib_per_step": 10.24,
        "longrun_small_kept_output_mib": 7.9,
        "longrun_small_released": 228,
        "longrun_small_operations": 400,
        "uploads": 20, "upload_mib": 64,
        "uploads_memory_rss_before_mb": 70.0, "uploads_memory_rss_after_first_mb": 74.0,
        "uploads_memory_rss_after_last_mb": 74.5, "uploads_memory_probe_worst_ms": 92.0,
        "uploads_journal_rss_before_mb": 70.0, "uploads_journal_rss_after_first_mb": 76.0,
        "uploads_journal_rss_after_last_mb": 74.0, "uploads_journal_probe_worst_ms": 134.0,
        "uploads_journal_bytes_per_upload_max": 1010, "uploads_journal_restart_s": 1.67,
    }
    info = {
        "nproc": 2,
        "cpu": "X",
        "mem_gib": 1.0,
        "os": "Debian",
        "kernel": "6",
        "python": "3.11",
        "versions": {k: "1" for k in ("uvicorn", "starlette", "connexion", "orjson", "uvloop", "httptools")},
    }
    md = tmp_path / "B.md"
    md.write_text(f"# Title\n\nhand text\n\n{report.BEGIN}\nold\n{report.END}\n\n## Profile\nkept\n")
    report.write_markdown(md, results, {}, info, ["100", "100k"], tmp_path / "p.png", "")
    text = md.read_text()
    assert "hand text" in text and "## Profile\nkept" in text and "\nold\n" not in text
    assert "| GET one session: rate >= 0.5x the ceiling (32 connections) | 0.60x" in text
    assert "memory per idle session < 1 KiB (store of 10k sessions) | 900 B | **PASS**" in text
    assert "memory per idle session < 1 KiB (store of 100k sessions) | 1,100 B | **MISS**" in text
    assert "1.50x (1.00 ms -> 1.50 ms) | **PASS**" in text
    assert "| 8 MiB (small) | 120.0 MiB | 121.0 MiB | 10 KiB | 7.9 MiB | 228 of 400 |" in text
    assert "(default)" not in text  # a row not measured is left out
    assert "| in memory | 70.0 MiB | 74.0 MiB | 74.5 MiB | 92 ms | - | - |" in text
    assert "| --state-file | 70.0 MiB | 76.0 MiB | 74.0 MiB | 134 ms | 1,010 | 1.67 s |" in text


def test_longrun_releases_the_oldest_outputs_beyond_a_small_budget() -> None:
    from bench import longrun

    out = asyncio.run(longrun.run(12, 1))  # ~0.1 MiB of outputs a step against a 1 MiB budget
    assert out["budget_mib"] == 1 and out["operations"] == 24
    assert 0 < out["kept_output_bytes"] <= 1 << 20
    assert out["released"] > 0 and [step for step, _ in out["rss"]][-1] == 12


def test_the_journal_loop_measures_bytes_per_step_and_a_restart_that_restores_the_state(tmp_path: Path) -> None:
    from bench import journal

    out = asyncio.run(journal.loop(3, [1, 3], "sampled", tmp_path))
    assert [p["step"] for p in out["points"]] == [1, 3] and all(p["line_bytes"] > 0 for p in out["points"])
    assert out["restored_identical"] is True and out["load_s"] > 0 and out["model_entries"] > 0


def test_the_journal_target_passes_within_2x_and_misses_beyond_or_when_the_restart_differs() -> None:
    r = {"journal_steps": 1000, "journal_last_step": 1000, "journal_step10_line_bytes": 80000.0,
         "journal_step1000_line_bytes": 150000.0, "journal_bytes_ratio": 1.88, "journal_restored_identical": True}
    rows = {name: (value, v) for name, value, v in report.target_rows(r, ["100", "100k"]) if name.startswith("journal")}
    assert list(rows.values()) == [("1.88x (80,000 B -> 150,000 B); restored identical: True", "PASS")]
    r["journal_bytes_ratio"] = 2.5
    assert [v for name, _, v in report.target_rows(r, ["100", "100k"]) if name.startswith("journal")] == ["MISS"]
    r["journal_bytes_ratio"], r["journal_restored_identical"] = 1.5, False
    assert [v for name, _, v in report.target_rows(r, ["100", "100k"]) if name.startswith("journal")][0].startswith("MISS")
    assert any("| 1000 | 150,000 |" in line for line in report.journal_block(r, {}))


def test_ceiling_serves_the_given_bytes() -> None:
    bodies = {key: json.dumps({"id": key, "status": "X_READY"}) for key in ROUTES if key != "health"}
    app = build_app(bodies)

    async def call(method: str, path: str) -> tuple[int, bytes]:
        sent: list[dict] = []

        async def receive() -> dict:
            return {"type": "http.request", "body": b"{}", "more_body": False}

        async def send(message: dict) -> None:
            sent.append(message)

        scope = {
            "type": "http",
            "method": method,
            "path": path,
            "raw_path": path.encode(),
            "query_string": b"",
            "headers": [],
            "root_path": "",
            "scheme": "http",
            "server": ("127.0.0.1", 1),
        }
        await app(scope, receive, send)
        return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])

    status, body = asyncio.run(call("GET", "/v1/rl/training-sessions/abc"))
    assert status == 200 and json.loads(body)["id"] == "get_session"
    status, body = asyncio.run(call("POST", "/v1/rl/training-sessions/s/operations/optim-step"))
    assert status == 200 and json.loads(body)["id"] == "create_optim"


@pytest.mark.parametrize("scenario", ["get", "list", "create", "loop"])
def test_inproc_measures_every_scenario(scenario: str) -> None:
    from bench import inproc

    per = asyncio.run(inproc.run(scenario, 16, 2))
    assert per is not None and 0 < per < 0.05  # seconds of CPU per request: measured, and not absurd


def test_plugin_scenario_measures_a_fresh_tenant_and_reports_it() -> None:
    from bench import plugin

    cost = plugin.tenant_overhead("thread", 5)
    assert 0 < cost["setup_median_ms"] <= cost["median_ms"] <= cost["p90_ms"]
    r = {"plugin_start_thread_s": 0.31, "plugin_start_thread_s_max": 0.4, "plugin_tenant_thread_ms": 0.6,
         "plugin_tenant_thread_ms_p90": 0.9}
    rows = {name: v for name, _, v in report.target_rows(r, ["100", "100k"]) if name.startswith("pytest plugin")}
    assert {k: v for k, v in rows.items() if "SDK file" not in k and "realistic" not in k} == {
        "pytest plugin: the session's emulator starts < 0.5 s (in a thread)": "PASS",
        "pytest plugin: a fresh tenant per test < 5 ms (in a thread)": "PASS"}


def test_stock_counts_read_schemathesis_test_cases_line() -> None:
    from bench.stock import counts

    green = "Warnings:\n  x\n\nTest cases:\n  2402 generated, 2402 passed, 60 skipped\n\nSeed: 7\n"
    assert counts(green) == {"generated": 2402, "passed": 2402, "skipped": 60, "failures": 0}
    red = "Test cases:\n  2426 generated, 49 found 49 unique failures, 724 skipped\n"
    assert counts(red) == {"generated": 2426, "passed": 0, "skipped": 724, "failures": 49}
    assert counts("no summary") == {"generated": 0, "passed": 0, "skipped": 0, "failures": 0}


def test_the_cluster_model_is_the_per_shard_rate_times_cores_less_the_balancers_share() -> None:
    r = {"cluster_sharded_cpu_us_per_req": 150.0, "cluster_sharded_lb_cpu_us_per_req": 50.0}
    # 1e6 / 150 = 6,667 req/s per shard on a core; HAProxy takes 50 / 200 of every core's time.
    assert report.cluster_model(r, 4) == pytest.approx(4 * 1e6 / 150 * (150 / 200)) == 20_000
    assert report.cluster_model({}, 4) is None
    block = "\n".join(report.cluster_block({**r, "cluster_workers": 2, "cluster_connections": 16,
                                            "cluster_sharded_rps": 9000.0, "cluster_rps_ratio": 1.4},
                                           {}, {"nproc": 2}))
    assert "**1.40x**" in block and "8 cores ~40,000 req/s" in block
    assert "Not measured: skipped" in "\n".join(report.cluster_block({}, {"cluster": "skipped"}, {"nproc": 2}))


def test_the_loop_gives_each_connection_its_own_tenant_when_asked() -> None:
    from bench.pyload import Loop

    spec = {"token": "bench", "tenants": True}
    assert [Loop(spec, "h", n).token for n in (0, 1)] == ["bench-0", "bench-1"]
    assert Loop({"token": "bench"}, "h", 1).token == "bench"
    assert 'args[2] == "per-connection"' in (LUA / "loop.lua").read_text()


def test_the_internals_block_says_what_each_private_internal_saves() -> None:
    r = {"internals_shipped_cpu_us": 50.0, "internals_stock_cpu_us": 45.0, "startup_s": 0.4,
         "startup_spec_checked_s": 0.5}
    block = "\n".join(report.internals_block(r, {}))
    assert "| 0.400 s | 0.500 s | 20% |" in block and "routing" not in block
    assert "| 50.0 us | 45.0 us | -11% |" in block and "one write" not in block
    assert "Not measured: needs wrk" in "\n".join(report.internals_block({}, {"internals": "needs wrk"}))


def test_inproc_drives_the_app_without_the_recorder() -> None:
    """The B of the recorder's A/B: the app under the run-time recorder's wrapper answers every request alone."""
    from bench import inproc

    per = asyncio.run(inproc.run("loop", 4, 2, recorder=False))
    assert per is not None and 0 < per < 0.05


def test_uploads_bench_measures_both_modes(tmp_path: Path) -> None:
    from bench import uploads

    out = uploads.run(tmp_path, 2, 1, tmp_path / "state" / "state.json")
    assert out["journal_restart_files"] == 2 and out["journal_blob_dir_mib"] == 2.0
    assert 0 < out["journal_bytes_per_upload_max"] < 4096  # the record, not the MiB it names
    assert out["journal_rss_after_last_mb"] > 0 and out["journal_probe_worst_ms"] > 0


def test_the_plugins_sdk_file_and_its_targets() -> None:
    from bench.plugin import sdk_test_file

    source = sdk_test_file(20, "realistic")
    compile(source, "test_sdk_file.py", "exec")
    assert source.count("def test_sdk_") == 20 and source.count("profile='realistic'") == 20
    assert "assert True == ((r.updated_at - r.created_at).total_seconds() == 225)" in source
    assert "assert False ==" in sdk_test_file(1, "instant")   # the instant file checks it is not realistic
    r = {"plugin_sdk_file_thread_s": 5.0, "plugin_sdk_file_subprocess_s": 6.0, "plugin_sdk_file_realistic_auto_s": 11.0,
         "plugin_sdk_file_realistic_auto_ratio": 2.2, "plugin_sdk_file_tests": 20}
    rows = {name: verdict for name, _, verdict in report.target_rows(r, ["100", "100k"]) if "SDK file" in name
            or "realistic profile" in name}
    assert list(rows.values()) == ["PASS", "MISS"], rows


def test_compute_bench_times_every_case(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from bench import compute

    monkeypatch.setattr(compute, "BATCH", 4)  # (the cases' sizes are the bench's business: here, that they run)
    monkeypatch.setattr(compute, "LENGTH", 100)
    assert compute.main(["--repeat", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines] == list(compute.CASES)
    assert all(0 < float(line.split()[1]) < 10_000 for line in lines), lines  # ms of CPU: measured, not absurd


def test_every_representation_of_bench_typed_requests_reads_the_same_values() -> None:
    """bench/typed_requests.py compares representations by cost: each must read the four bodies alike."""
    from bench import typed_requests

    def seen(read: object) -> tuple[object, ...]:
        res, ses, fb, opt = read(typed_requests.BODIES)  # type: ignore[operator]
        tensor = fb.samples[0].loss_fn_inputs["weights"]
        return (res.base_model, res.lora_enabled, ses.model_resources_id, fb.loss.type, tuple(tensor.data),
                tensor.dtype, opt.adam_params.learning_rate)

    got = {kind: seen(read) for kind, read in typed_requests.READERS.items()}
    assert set(got) == set(typed_requests.KINDS)
    assert len(set(got.values())) == 1, got
    assert got["msgspec"][0] == "Qwen/Qwen3.8-27B" and got["msgspec"][-1] == 0.0001
