"""The wire format shared by every persisted file: camelCase JSON, compact lines, timestamps and digests.

Bundles stay readable by pi-workflows readers, so persisted keys are camelCase and encoding is fixed here once.
The pydantic models of persisted files (``WireModel``, ``Manifest``) are :mod:`piw.wire_models`, which builds on
this module: the read-only commands never import pydantic.
"""

from __future__ import annotations

import hashlib
import json
import time
from datetime import UTC, datetime
from typing import Any

import orjson

RUN_BUNDLE_SCHEMA = "pi-workflows.run-bundle.v1"
DEFINITION_SNAPSHOT_SCHEMA = "pi-workflows.definition-snapshot.v1"
RUN_STATE_SCHEMA = "pi-workflows.run-state.v1"
TRACE_EVENT_SCHEMA = "pi-workflows.trace-event.v1"
SESSION_ENTRY_SCHEMA = "pi-workflows.session-entry.v1"
AGENT_STEP_MESSAGE_SCHEMA = "pi-workflows.agent-step-message.v1"


_second: tuple[int, str] = (-1, "")


def now_iso() -> str:
    """The persisted timestamp format: UTC, millisecond precision, ``Z`` suffix.

    Every trace line takes one, so the date and time up to the second are formatted once per second and only
    the milliseconds per call; the text is what ``datetime.now(UTC).isoformat(timespec="milliseconds")``
    gives, with ``Z`` for ``+00:00``.
    """
    global _second
    seconds, nanos = divmod(time.time_ns(), 1_000_000_000)
    cached_second, prefix = _second
    if seconds != cached_second:
        prefix = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
        _second = (seconds, prefix)
    return f"{prefix}.{nanos // 1_000_000:03d}Z"


def format_time(moment: datetime) -> str:
    """Format an aware datetime in the persisted timestamp format."""
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def parse_time(text: str) -> datetime:
    """Parse a persisted timestamp (``Z`` or offset) into an aware datetime."""
    return datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))


def dumps_line(value: Any) -> str:
    """One compact JSON line body (no newline) as every NDJSON file in a bundle uses."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


_ORJSON_LINE = (
    orjson.OPT_APPEND_NEWLINE
    | orjson.OPT_PASSTHROUGH_SUBCLASS
    | orjson.OPT_PASSTHROUGH_DATACLASS
    | orjson.OPT_PASSTHROUGH_DATETIME
)
SAFE_FLOAT_MIN, SAFE_FLOAT_MAX = 1e-4, 1e16
"""Finite floats whose magnitude is 0 or in ``[1e-4, 1e16)`` are spelled by orjson exactly as ``repr`` spells
them (plain decimal); outside that range ``json`` writes ``1e-05`` where orjson writes ``0.00001``."""


def _refuse(value: Any) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def encode_line(value: Any, *, plain: bool = False) -> bytes:
    """One NDJSON line (with ``\n``), byte for byte what :func:`dumps_line` gives.

    ``plain=True`` is the caller's promise that ``value`` holds only ``dict`` (``str`` keys), ``list``, ``str``,
    ``int``, ``bool``, ``None`` and floats in the safe range (:data:`SAFE_FLOAT_MIN`): then orjson writes the
    line, about ten times faster, and its bytes are the same (pinned by a property test). Anything orjson
    refuses (a ``str`` subclass, an integer past 64 bits) falls back to ``json`` so errors stay the same.
    """
    if plain:
        try:
            return orjson.dumps(value, default=_refuse, option=_ORJSON_LINE)
        except TypeError:
            pass
    return (dumps_line(value) + "\n").encode("utf-8")


def is_plain(value: Any) -> bool:
    """Whether :func:`encode_line` may take its fast path for ``value`` (see there)."""
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return True
    if kind is float:
        magnitude: float = abs(value)
        return magnitude == 0.0 or SAFE_FLOAT_MIN <= magnitude < SAFE_FLOAT_MAX
    if kind is dict:
        for key, item in value.items():  # a loop, not all(genexpr): this runs for every line and every row
            if type(key) is not str:
                return False
            inner = type(item)
            if not (inner is str or inner is int or inner is bool or item is None or is_plain(item)):
                return False
        return True
    if kind is list:
        for item in value:
            inner = type(item)
            if not (inner is str or inner is int or inner is bool or item is None or is_plain(item)):
                return False
        return True
    return False


def dumps_canonical(value: Any) -> str:
    """Canonical JSON for digests: sorted keys, compact separators, UTF-8 text."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def sha256_hex(data: bytes | str) -> str:
    """Lowercase hex SHA-256 of bytes, or of a string's UTF-8 encoding."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    return hashlib.sha256(data).hexdigest()


def digest(value: Any) -> str:
    """A ``sha256:``-prefixed digest of a JSON value in canonical form."""
    return "sha256:" + sha256_hex(dumps_canonical(value))
