"""The parsed-spec cache (emulator/spec.py): a hit gives the YAML's own document, and a cache that is cut, changed,
unreadable or unwritable only costs a parse, never changes what is served."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
import yaml

from emulator import spec


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    where = tmp_path / "cache"
    monkeypatch.setenv(spec.CACHE_ENV, str(where))
    spec._parsed.cache_clear()
    yield where
    spec._parsed.cache_clear()  # (the next test parses again, from its own environment)


def _from_yaml(name: str) -> dict:
    return yaml.load(spec.spec_text(name), Loader=yaml.CSafeLoader)


def _files(where: Path) -> list[Path]:
    return sorted(where.glob("*.json")) if where.exists() else []


def test_a_parse_is_kept_and_the_next_start_reads_it(cache: Path) -> None:
    assert spec._parsed(spec.VENDOR) == _from_yaml(spec.VENDOR)
    [kept] = _files(cache)
    assert kept.name.startswith("openapi.yaml.")
    # The next process reads the file, not the YAML: a document changed inside a well-formed file shows it.
    doc = _from_yaml(spec.VENDOR)
    doc["info"]["title"] = "read from the cache"
    body = orjson.dumps(doc)
    kept.write_bytes(hashlib.sha256(body).hexdigest().encode() + b"\n" + body)
    spec._parsed.cache_clear()
    assert spec._parsed(spec.VENDOR)["info"]["title"] == "read from the cache"


@pytest.mark.parametrize("damage", ["cut", "flipped", "garbage", "empty", "directory"])
def test_a_damaged_cache_file_is_parsed_again_and_replaced(cache: Path, damage: str) -> None:
    spec._parsed(spec.ADMIN)
    [kept] = _files(cache)
    good = kept.read_bytes()
    if damage == "cut":
        kept.write_bytes(good[: len(good) // 2])
    elif damage == "flipped":  # one letter of a description changed (still JSON), its checksum line not
        at = good.index(b'"description":"') + 16
        kept.write_bytes(good[:at] + bytes([good[at] ^ 1]) + good[at + 1:])
    elif damage == "garbage":
        kept.write_bytes(os.urandom(4096))
    elif damage == "empty":
        kept.write_bytes(b"")
    else:  # something else took the name
        kept.unlink()
        kept.mkdir()
    spec._parsed.cache_clear()
    assert spec._parsed(spec.ADMIN) == _from_yaml(spec.ADMIN)
    if damage != "directory":
        assert kept.read_bytes() == good  # written whole again


def test_an_unwritable_cache_costs_only_the_parse(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the cache directory would be")
    monkeypatch.setenv(spec.CACHE_ENV, str(blocker / "cache"))
    spec._parsed.cache_clear()
    try:
        assert spec._parsed(spec.VENDOR) == _from_yaml(spec.VENDOR)
    finally:
        spec._parsed.cache_clear()
    assert list(tmp_path.iterdir()) == [blocker]


def test_an_empty_setting_keeps_no_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(spec.CACHE_ENV, "")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv("HOME", str(tmp_path))
    assert spec.cache_dir() is None
    spec._parsed.cache_clear()
    try:
        assert spec._parsed(spec.VENDOR) == _from_yaml(spec.VENDOR)
    finally:
        spec._parsed.cache_clear()
    assert list(tmp_path.iterdir()) == []


def test_the_default_place_is_the_users_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(spec.CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert spec.cache_dir() == tmp_path / "xdg" / "together-emulator"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert spec.cache_dir() == tmp_path / ".cache" / "together-emulator"


def test_a_changed_spec_is_a_different_file(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec._parsed(spec.ADMIN)
    original = spec.spec_text(spec.ADMIN)
    monkeypatch.setattr(spec, "spec_text", lambda name: original + "\nx-changed: true\n")
    spec._parsed.cache_clear()
    assert spec._parsed(spec.ADMIN)["x-changed"] is True
    assert len(_files(cache)) == 2
