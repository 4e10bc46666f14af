"""The wire format shared by every persisted file: camelCase JSON, compact lines, timestamps and digests.

Bundles stay readable by pi-workflows readers, so persisted keys are camelCase and encoding is fixed here once.
"""

from __future__ import annotations

import hashlib
import json
import time
from datetime import UTC, datetime
from typing import Any, ClassVar

import orjson
from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer
from pydantic.alias_generators import to_camel

RUN_BUNDLE_SCHEMA = "pi-workflows.run-bundle.v1"
DEFINITION_SNAPSHOT_SCHEMA = "pi-workflows.definition-snapshot.v1"
RUN_STATE_SCHEMA = "pi-workflows.run-state.v1"
TRACE_EVENT_SCHEMA = "pi-workflows.trace-event.v1"
SESSION_ENTRY_SCHEMA = "pi-workflows.session-entry.v1"
AGENT_STEP_MESSAGE_SCHEMA = "pi-workflows.agent-step-message.v1"


class WireModel(BaseModel):
    """Base of persisted models: camelCase aliases, unknown keys ignored, ``None`` omitted unless nullable."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore", frozen=True)
    nullable_fields: ClassVar[frozenset[str]] = frozenset()

    @model_serializer(mode="wrap")
    def _drop_none(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        keep = {to_camel(name) for name in self.nullable_fields} | set(self.nullable_fields)
        return {key: value for key, value in data.items() if value is not None or key in keep}

    def to_wire(self) -> dict[str, Any]:
        """The camelCase JSON object written to disk."""
        return self.model_dump(by_alias=True, mode="json")


class Manifest(WireModel):
    """``manifest.json``: a derived summary of one bundle, replaced atomically."""

    schema_id: str = Field(default=RUN_BUNDLE_SCHEMA, alias="schema")
    run_id: str
    workflow_name: str
    run_title: str | None = None
    workflow_source: dict[str, Any]
    workflow_sources: list[dict[str, Any]] | None = None
    definition_digest: str
    started_at: str
    finished_at: str | None = None
    status: str = "running"
    forked_from: dict[str, Any] | None = None
    """``{runId, seq}`` for a run made by ``piw fork``, so listings find a run's forks without reading traces."""
    trace_schema: str = TRACE_EVENT_SCHEMA
    session_schema: str | None = SESSION_ENTRY_SCHEMA
    paths: dict[str, str] = Field(
        default_factory=lambda: {
            "workflow": "workflow.json",
            "state": "state.json",
            "trace": "trace.ndjson",
            "session": "session/entries.ndjson",
            "artifacts": "artifacts",
        }
    )


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
        return all(type(key) is str and is_plain(item) for key, item in value.items())
    if kind is list:
        return all(is_plain(item) for item in value)
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
