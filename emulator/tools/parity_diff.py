"""The emulator judged against a recording: a recorded answer and the emulator's, compared after normalization.

Ids of the one are mapped to the other's as they appear. :data:`RULES` is the one table of what is compared
how (``parity --rules`` prints it, every Markdown report carries it); :func:`rule_for` applies the first rule
that fits a field.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import orjson


@dataclass(frozen=True)
class Rule:
    name: str
    applies_to: str
    compared_by: str
    why: str


#: What is compared and what is normalized: one table, applied in this order (the first rule that fits).
RULES: tuple[Rule, ...] = (
    Rule("status", "the HTTP status", "value", "the contract's first promise"),
    Rule("media type", "the Content-Type header (no other header is compared)", "value, without parameters",
         "other headers are transport (Date, Server, request ids) or the emulator's own (X-Emulator-Warning)"),
    Rule("ids", "`id`, `*_id`, `created_by`, `next_cursor`, `*_key` fields and the items of `*_ids` arrays",
         "mapped: the first time a recorded id appears, it stands for the emulator's id at the same place; "
         "after that the emulator must answer that id wherever the recording has it",
         "ids are drawn by each side; what matters is that the same object keeps the same id"),
    Rule("timestamps", "`*_at` fields and any RFC 3339 string", "type (an RFC 3339 string, a number, or null)",
         "the emulator's clock follows the recording's pacing, not its instants to the millisecond"),
    Rule("urls", "strings that are http(s) URLs, and the Location header", "shape: a URL on both sides; the "
         "path segments that differ (a presigned token) are mapped like ids",
         "each side hands out its own address and signatures"),
    Rule("model output", "what the model computes: `output.loss`, `output.metrics`, `output.loss_fn_outputs`, "
         "`output.results[].sequences[].{tokens,logprobs,stop_reason,prompt_cache_hit_tokens}`, "
         "`output.results[].{prompt_logprobs,topk_prompt_logprobs}`",
         "type and shape: numbers as numbers (int64 strings as int64 strings), objects by their keys, arrays by "
         "length and item shapes (the generated `tokens` and `logprobs` by item type only)",
         "a tiny simulated model does not compute the real one's numbers, and a real model stops where it stops"),
    Rule("artifact sizes", "`size` of a checkpoint's files (`downloadCheckpoint`)", "type",
         "the simulated model's weights are kilobytes, a real adapter's are not"),
    Rule("error messages", "`error.message` of ErrorData, of a failed operation or session",
         "type (a string)", "wording is not part of the contract; `type`, `code` and `param` are compared"),
    Rule("file bodies", "answers that are not JSON (`/_files/...` downloads, file content)",
         "byte for byte, but a checkpoint's files (model weights) by presence only",
         "model weights are the simulated model's"),
    Rule("everything else", "every other field", "value; a field on one side only is a difference", ""),
)

_MODEL_OUTPUT = tuple(re.compile(p) for p in (
    r"^body\.output\.(loss|metrics|loss_fn_outputs)(\.|\[|$)",
    r"^body\.output\.results\[\d+\]\.sequences\[\d+\]\.(tokens|logprobs|stop_reason|prompt_cache_hit_tokens)(\[|$)",
    r"^body\.output\.results\[\d+\]\.(prompt_logprobs|topk_prompt_logprobs)(\.|\[|$)",
))
_GENERATED = re.compile(r"\.sequences\[\d+\]\.(tokens|logprobs)$")
_ARTIFACT_SIZE = re.compile(r"^body\.data\[\d+\]\.size$")
_ERROR_MESSAGE = re.compile(r"(^|\.)error\.message$")
_RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$", re.I)
_INT64 = re.compile(r"^-?\d+$")


def rule_for(path: str, key: str | None, value: Any, operation: str) -> str:
    """The rule of :data:`RULES` that compares a body field (``path`` from ``body``; ``value`` recorded)."""
    named = key is not None and (key == "id" or key.endswith(("_id", "_key")) or key in ("created_by", "next_cursor"))
    if named and isinstance(value, str):  # (`eos_token_id` and the like are numbers: values)
        return "ids"
    if key is not None and key.endswith("_ids") and isinstance(value, list) and all(isinstance(v, str) for v in value):
        return "ids"
    if any(p.search(path) for p in _MODEL_OUTPUT):
        return "model output"
    if key is not None and key.endswith("_at"):
        return "timestamps"
    if isinstance(value, str) and _RFC3339.match(value):
        return "timestamps"
    if isinstance(value, str) and value.startswith(("http://", "https://")):
        return "urls"
    if operation == "downloadCheckpoint" and _ARTIFACT_SIZE.match(path):
        return "artifact sizes"
    if _ERROR_MESSAGE.search(path):
        return "error messages"
    return "everything else"


def json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        if _RFC3339.match(value):
            return "RFC 3339 string"
        if _INT64.match(value):
            return "int64 string"
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def shown(value: Any) -> str:
    """A value as a report shows it (cut short)."""
    text = orjson.dumps(value).decode() if value is not _ABSENT else "(absent)"
    return text if len(text) <= 200 else text[:197] + "..."


_ABSENT: Any = object()  # a field one side does not have


@dataclass(frozen=True)
class Mismatch:
    field: str
    rule: str
    recorded: str
    emulator: str


class IdMap:
    """Recorded ids and the emulator's, both ways (one object, one id on each side)."""

    def __init__(self) -> None:
        self.forward: dict[str, str] = {}
        self.backward: dict[str, str] = {}

    def pair(self, recorded: str, emulator: str) -> str | None:
        """Note that ``recorded`` stands for ``emulator``; a sentence when that contradicts an earlier pairing."""
        if recorded == "" and emulator == "":
            return None
        known = self.forward.get(recorded)
        if known is not None:
            return None if known == emulator else f"the recording's {recorded} was the emulator's {known} earlier"
        other = self.backward.get(emulator)
        if other is not None and other != recorded:
            return f"the emulator's {emulator} already stands for the recording's {other}"
        self.forward[recorded] = emulator
        self.backward[emulator] = recorded
        return None

    def translate(self, value: str) -> str:
        return self.forward.get(value, value)


def compare(recorded: Any, emulator: Any, ids: IdMap, operation: str, path: str = "body",
            key: str | None = None) -> Iterator[Mismatch]:
    """The mismatches between two JSON values under :data:`RULES` (ids are paired as they are met)."""
    if recorded is _ABSENT or emulator is _ABSENT:
        yield Mismatch(path, rule_for(path, key, recorded if recorded is not _ABSENT else emulator, operation),
                       shown(recorded), shown(emulator))
        return
    rule = rule_for(path, key, recorded, operation)
    if rule == "ids":
        yield from _ids(recorded, emulator, ids, path, operation)
        return
    if rule == "model output":
        yield from _shape(recorded, emulator, path, generated=False)
        return
    if rule in ("timestamps", "artifact sizes", "error messages"):
        if json_type(recorded) != json_type(emulator):
            yield Mismatch(path, rule, json_type(recorded), json_type(emulator))
        return
    if rule == "urls":
        yield from compare_urls(recorded, emulator, ids, path)
        return
    if isinstance(recorded, dict) and isinstance(emulator, dict):
        for k in list(recorded) + [k for k in emulator if k not in recorded]:
            yield from compare(recorded.get(k, _ABSENT), emulator.get(k, _ABSENT), ids, operation, f"{path}.{k}", k)
        return
    if isinstance(recorded, list) and isinstance(emulator, list):
        if len(recorded) != len(emulator):
            yield Mismatch(f"{path}.length", rule, str(len(recorded)), str(len(emulator)))
        for i, (r, e) in enumerate(zip(recorded, emulator)):
            yield from compare(r, e, ids, operation, f"{path}[{i}]", key)
        return
    if type(recorded) is not type(emulator) and not (_number(recorded) and _number(emulator)):
        yield Mismatch(path, rule, f"{shown(recorded)} ({json_type(recorded)})", f"{shown(emulator)} "
                       f"({json_type(emulator)})")
    elif recorded != emulator:
        yield Mismatch(path, rule, shown(recorded), shown(emulator))


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _ids(recorded: Any, emulator: Any, ids: IdMap, path: str, operation: str) -> Iterator[Mismatch]:
    if isinstance(recorded, list) and isinstance(emulator, list):  # a `*_ids` array
        if len(recorded) != len(emulator):
            yield Mismatch(f"{path}.length", "ids", str(len(recorded)), str(len(emulator)))
        for i, (r, e) in enumerate(zip(recorded, emulator)):
            yield from _ids(r, e, ids, f"{path}[{i}]", operation)
        return
    if isinstance(recorded, str) and isinstance(emulator, str):
        clash = ids.pair(recorded, emulator)
        if clash is not None:
            yield Mismatch(path, "ids", f"{recorded} ({clash})", emulator)
        return
    if recorded is None and emulator is None:
        return
    yield Mismatch(path, "ids", f"{shown(recorded)} ({json_type(recorded)})", f"{shown(emulator)} "
                   f"({json_type(emulator)})")


def _shape(recorded: Any, emulator: Any, path: str, generated: bool) -> Iterator[Mismatch]:
    rule = "model output"
    if isinstance(recorded, dict) and isinstance(emulator, dict):
        for k in list(recorded) + [k for k in emulator if k not in recorded]:
            if k not in emulator or k not in recorded:
                yield Mismatch(f"{path}.{k}", rule, shown(recorded.get(k, _ABSENT)), shown(emulator.get(k, _ABSENT)))
            else:
                yield from _shape(recorded[k], emulator[k], f"{path}.{k}", False)
        return
    if isinstance(recorded, list) and isinstance(emulator, list):
        if _GENERATED.search(path):  # what the model generated: its length is the model's
            want = {_kind(v) for v in recorded}
            got = {_kind(v) for v in emulator}
            if want and got and want != got:
                yield Mismatch(path, rule, f"array of {'/'.join(sorted(want))}", f"array of {'/'.join(sorted(got))}")
            return
        if len(recorded) != len(emulator):
            yield Mismatch(f"{path}.length", rule, str(len(recorded)), str(len(emulator)))
        for i, (r, e) in enumerate(zip(recorded, emulator)):
            yield from _shape(r, e, f"{path}[{i}]", False)
        return
    if _kind(recorded) != _kind(emulator):
        yield Mismatch(path, rule, _kind(recorded), _kind(emulator))


def _kind(value: Any) -> str:
    """A JSON type, numbers as one (a computed 1.0 may be written as 1)."""
    kind = json_type(value)
    return "number" if kind in ("integer", "number") else kind


def compare_urls(recorded: Any, emulator: Any, ids: IdMap, path: str) -> Iterator[Mismatch]:
    if not (isinstance(recorded, str) and isinstance(emulator, str) and emulator.startswith(("http://", "https://"))):
        yield Mismatch(path, "urls", f"{shown(recorded)} (URL)", f"{shown(emulator)} ({json_type(emulator)})")
        return
    mine, theirs = urlsplit(recorded).path.split("/"), urlsplit(emulator).path.split("/")
    if len(mine) == len(theirs):  # the same kind of URL: its differing segments are tokens or ids
        for r, e in zip(mine, theirs):
            if r != e:
                ids.pair(r, e)
