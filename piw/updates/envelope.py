"""Durable updates: the envelope, its limits, the run's rate limit, receipts and tool-call idempotency.

Pure and I/O-free: the engine calls these checks in the acceptance order of ``docs/design/updates-progress.md`` §4
and writes only when all of them pass, so a rejection never leaves a trace line behind. Messages name the
field and the rule and never echo data.

``<path>`` in data messages is ``update.data`` followed by ``.name`` for identifier-like keys,
``["any key"]`` (an ASCII JSON string, clipped to 64 characters) for other keys and ``[i]`` for list
items, as in ``update.data.rows[2]["a b"]``. Keys appear in paths; values never appear in messages.
"""

from __future__ import annotations

import json
import math
import re
import threading
import time
import uuid
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict

from piw.errors import UpdateRejected
from piw.progress import ProgressInvalid, validate_progress_data

__all__ = [
    "MAX_CURRENT_UPDATES",
    "MAX_SHELL_UPDATE_LINE_BYTES",
    "MAX_UPDATE_DATA_BYTES",
    "MAX_UPDATE_DATA_DEPTH",
    "UPDATE_RATE_BURST",
    "UPDATE_RATE_PER_SECOND",
    "IdempotencyLedger",
    "TokenBucket",
    "UpdateInput",
    "UpdateReceipt",
    "check_pair_limit",
    "new_update_id",
    "validate_update",
]

MAX_UPDATE_DATA_BYTES = 65_536
MAX_CURRENT_UPDATES = 1_024
UPDATE_RATE_PER_SECOND = 20
UPDATE_RATE_BURST = 100
MAX_SHELL_UPDATE_LINE_BYTES = 65_536
MAX_UPDATE_DATA_DEPTH = 100
"""Nesting levels of ``data``; much deeper JSON overflows pydantic's parser (about 200) on read."""

_TYPE_PATTERN = r"[a-z][a-z0-9.-]{0,63}"
_KEY_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}"
_TYPE = re.compile(_TYPE_PATTERN)
_KEY = re.compile(_KEY_PATTERN)
_ENVELOPE = ("type", "key", "data")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class UpdateInput(BaseModel):
    """What a publisher supplies: ``type``, ``key`` and ``data``; the runtime owns every other field.

    Construction checks only the shapes; :func:`validate_update` applies the rules, so a shell parser
    that builds a bad update still fails with the exact rejection message, not a pydantic error.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    type: str
    key: str
    data: dict[str, Any]


def validate_update(raw: object) -> UpdateInput:
    """Check an envelope (a mapping of exactly type/key/data, or an ``UpdateInput``); return a clean copy.

    Order: envelope, ``type``, ``key``, data (object, non-finite numbers, non-JSON values, depth, size),
    then the progress profile when ``type == "progress"``. The returned data is a JSON round trip, so the
    publisher's later changes cannot reach the record.
    """
    fields = _envelope(raw)
    kind, key = fields.get("type"), fields.get("key")
    if not isinstance(kind, str) or _TYPE.fullmatch(kind) is None:
        raise UpdateRejected(f"update.type must match {_TYPE_PATTERN}")
    if not isinstance(key, str) or _KEY.fullmatch(key) is None:
        raise UpdateRejected(f"update.key must match {_KEY_PATTERN}")
    data = _checked_data(fields.get("data"))
    if kind == "progress":
        try:
            validate_progress_data(data)
        except ProgressInvalid as exc:
            raise UpdateRejected(str(exc)) from None
    return UpdateInput(type=kind, key=key, data=data)


def _envelope(raw: object) -> Mapping[Any, Any]:
    if isinstance(raw, UpdateInput):
        return {"type": raw.type, "key": raw.key, "data": raw.data}
    if not isinstance(raw, Mapping):
        raise UpdateRejected("update must be an object")
    for name in raw:
        if name not in _ENVELOPE:
            raise UpdateRejected(f"update.{_field_name(name)} is not supported")
    return raw


def _field_name(name: object) -> str:
    """An unknown envelope key for a message: printable text clipped to 64 characters, else ``<key>``."""
    if isinstance(name, str) and name.isprintable() and name:
        return name if len(name) <= 64 else name[:63] + "…"
    return "<key>"


def _checked_data(data: object) -> dict[str, Any]:
    if not isinstance(data, Mapping):
        raise UpdateRejected("update.data must be a non-null JSON object")
    walk = _DataWalk()
    walk.visit(data, "update.data", 0)
    if walk.non_finite is not None:
        raise UpdateRejected(f"{walk.non_finite} contains a non-finite number")
    if walk.non_json is not None:
        raise UpdateRejected(f"{walk.non_json} contains a non-JSON value")
    if walk.too_deep:
        raise UpdateRejected(f"update.data must be nested at most {MAX_UPDATE_DATA_DEPTH} levels deep")
    too_big = f"update.data must be at most {MAX_UPDATE_DATA_BYTES} bytes"
    if walk.exhausted:
        raise UpdateRejected(too_big)
    try:
        text = json.dumps(dict(data), separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except ValueError:  # an int too long to print in decimal (``sys.get_int_max_str_digits``)
        raise UpdateRejected("update.data contains a non-JSON value") from None
    if len(text.encode()) > MAX_UPDATE_DATA_BYTES:
        raise UpdateRejected(too_big)
    copy: dict[str, Any] = json.loads(text)
    return copy


class _DataWalk:
    """One pass over ``data`` noting the paths of the first non-finite number and first non-JSON value.

    Every value serializes to at least one byte, so more than ``MAX_UPDATE_DATA_BYTES`` values is already
    too big: the walk stops there, which bounds its work even on shared or self-referencing structures.
    """

    def __init__(self) -> None:
        self.non_finite: str | None = None
        self.non_json: str | None = None
        self.too_deep = False
        self.exhausted = False
        self._budget = MAX_UPDATE_DATA_BYTES
        self._open: set[int] = set()

    def visit(self, value: object, path: str, depth: int) -> None:
        self._budget -= 1
        if self._budget < 0:
            self.exhausted = True
        elif isinstance(value, Mapping | list):
            self._container(value, path, depth)
        elif isinstance(value, float) and not math.isfinite(value):
            self.non_finite = self.non_finite or path
        elif not _is_json_scalar(value):
            self.non_json = self.non_json or path

    def _container(self, value: Mapping[Any, Any] | list[Any], path: str, depth: int) -> None:
        if id(value) in self._open or (depth > 0 and not isinstance(value, dict | list)):
            self.non_json = self.non_json or path  # a cycle, or a non-dict mapping below the top
            return
        if depth >= MAX_UPDATE_DATA_DEPTH:
            self.too_deep = True
            return
        self._open.add(id(value))
        items = value.items() if isinstance(value, Mapping) else enumerate(value)
        for name, item in items:
            if isinstance(value, list):
                child = f"{path}[{name}]"
            elif isinstance(name, str) and _utf8(name):
                child = _child_path(path, name)
            else:
                self.non_json = self.non_json or path
                child = f"{path}[?]"
            self.visit(item, child, depth + 1)
            if self.exhausted:
                break
        self._open.discard(id(value))


def _is_json_scalar(value: object) -> bool:
    if isinstance(value, str):
        return _utf8(value)
    return value is None or isinstance(value, bool | int | float)


def _utf8(text: str) -> bool:
    """Lone surrogates survive ``json.dumps(ensure_ascii=False)`` but cannot be written as UTF-8."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def _child_path(path: str, name: str) -> str:
    if _IDENTIFIER.fullmatch(name):
        return f"{path}.{name}"
    quoted = json.dumps(name if len(name) <= 64 else name[:61] + "...")  # ASCII: no control or bidi text
    return f"{path}[{quoted}]"


def check_pair_limit(
    current_pairs: Collection[tuple[str, str]], type: str, key: str, limit: int = MAX_CURRENT_UPDATES
) -> None:
    """Allow replacing a current ``(type, key)`` pair, and a new one only below the run's limit."""
    if (type, key) not in current_pairs and len(current_pairs) >= limit:
        raise UpdateRejected(f"too many current updates (limit {limit})")


def _default_sleep(seconds: float, cancel: threading.Event | None) -> bool:
    """Sleep; ``True`` when ``cancel`` was set, which ends the wait early."""
    if cancel is None:
        time.sleep(seconds)
        return False
    return cancel.wait(seconds)


class TokenBucket:
    """The run's shared rate limit: ``rate`` tokens a second up to ``burst``, starting full, never persisted.

    Thread-safe, because all publishers of a run (action threads, agent tool, shell readers) share one
    bucket. The clock and sleep are injectable so tests drive it with a fake monotonic clock.
    """

    def __init__(
        self,
        rate: float = UPDATE_RATE_PER_SECOND,
        burst: float = UPDATE_RATE_BURST,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float, threading.Event | None], bool] = _default_sleep,
    ) -> None:
        self._rate, self._burst, self._clock, self._sleep = rate, burst, clock, sleep
        self._tokens = float(burst)
        self._last = clock()
        self._lock = threading.Lock()

    @property
    def tokens(self) -> float:
        """Tokens available now (refilled as of this call)."""
        with self._lock:
            self._refill()
            return self._tokens

    def _refill(self) -> None:
        now = self._clock()
        elapsed = max(0.0, now - self._last)
        self._last = now
        self._tokens = min(self._burst, self._tokens + elapsed * self._rate)

    def try_take(self) -> bool:
        """Take one token if there is one; never raises and never waits."""
        return self._take() == 0.0

    def _take(self) -> float:
        """Take a token and return 0, or return the seconds until one is due."""
        with self._lock:
            self._refill()
            if self._tokens >= 1:
                self._tokens -= 1
                return 0.0
            return (1 - self._tokens) / self._rate

    def take_or_reject(self) -> None:
        """The function-action and agent path: no token means the update is rejected."""
        if not self.try_take():
            raise UpdateRejected("workflow update rate limit exceeded")

    def wait_take(self, cancel: threading.Event | None = None) -> bool:
        """The shell path: block until a token is taken (``True``) or ``cancel`` is set (``False``)."""
        while (delay := self._take()) > 0:
            if self._sleep(delay, cancel):
                return False
        return True


@dataclass(frozen=True)
class UpdateReceipt:
    """What a publisher gets back once its ``update_published`` line is durable."""

    update_id: str
    seq: int
    at: str
    type: str
    key: str

    def to_json(self) -> dict[str, Any]:
        """The camelCase receipt the agent tool returns."""
        return {
            "updateId": self.update_id,
            "seq": self.seq,
            "at": self.at,
            "type": self.type,
            "key": self.key,
        }


def new_update_id() -> str:
    return "upd_" + str(uuid.uuid4())


def _canonical(update: object) -> str | None:
    """Compare updates as JSON text so ``True`` and ``1`` differ; anything unserializable matches nothing."""
    if isinstance(update, UpdateInput):
        update = update.model_dump()
    try:
        return json.dumps(update, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError):
        return None


class IdempotencyLedger:
    """Agent tool call ids already published in this attempt, and the update each one carried.

    The lookup runs before validation (§4 step 2): an identical redelivery adopts the first receipt and writes
    nothing, while the same id with other content is refused rather than silently published twice.
    """

    def __init__(self, entries: Mapping[str, tuple[object, UpdateReceipt]] | None = None) -> None:
        self._entries: dict[str, tuple[str | None, UpdateReceipt]] = {}
        for tool_call_id, (update, receipt) in (entries or {}).items():
            self.record(tool_call_id, update, receipt)

    def record(self, tool_call_id: str, update: object, receipt: UpdateReceipt) -> None:
        """Remember an accepted update under its tool call id (the event's ``idempotencyKey``)."""
        self._entries[tool_call_id] = (_canonical(update), receipt)

    def check(self, tool_call_id: str, update: object) -> UpdateReceipt | None:
        """``None`` for a new id, the first receipt for an identical redelivery; else ``UpdateRejected``."""
        entry = self._entries.get(tool_call_id)
        if entry is None:
            return None
        content, receipt = entry
        if content is None or content != _canonical(update):
            raise UpdateRejected(f"update reuses tool call id {tool_call_id} with different content")
        return receipt
