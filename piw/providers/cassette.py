"""Provider cassettes: record a provider's event streams to JSONL, replay them without any model.

One line per request: ``{request, requestSha256, events, turn, provider, model, recordedAt}``. The run and
attempt ids of ``request.step`` are fresh in every run, so they are stored as ``<runId>``/``<attemptId>``
placeholders: a cassette recorded in one run replays in another, and a recorded ``workflow`` submission
comes back carrying the replaying attempt's id. Keys never enter a ``ChatRequest``; as a second line of
defence a record containing any configured secret is refused rather than written.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import re
import threading
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

from piw.errors import ProviderError, ScriptExhausted
from piw.providers.base import EVENT_ADAPTER, ChatRequest, DoneEvent, ErrorEvent, Provider, ProviderEvent
from piw.providers.builder import MessageBuilder, now_timestamp
from piw.providers.redaction import contains_secret

CassetteMode = Literal["record", "replay", "off"]
_PLACEHOLDERS = (("run_id", "<runId>"), ("attempt_id", "<attemptId>"))
_MIN_ID_LENGTH = 8
"""Shorter ids are not substituted: replacing a one-letter id would rewrite unrelated text."""


def cassette_mode(env: Mapping[str, str] | None = None) -> CassetteMode:
    """``PIW_PROVIDER_CASSETTE``: ``record``, ``replay`` or ``off`` (the default)."""
    value = ((os.environ if env is None else env).get("PIW_PROVIDER_CASSETTE") or "off").strip().lower()
    modes: dict[str, CassetteMode] = {"record": "record", "replay": "replay", "off": "off"}
    if value not in modes:
        raise ProviderError(f"PIW_PROVIDER_CASSETTE must be record, replay or off, not {value!r}.")
    return modes[value]


def _ids(request: ChatRequest) -> list[tuple[str, str]]:
    """Run-specific ids and their placeholders: this step's ids, then earlier steps' attempt ids in the context.

    Earlier step messages carry their own attempt ids (fresh every run), so a multi-step conversation only
    replays when those are generalized too, numbered in order of appearance.
    """
    if request.step is None:
        return []
    pairs = [(getattr(request.step, field), placeholder) for field, placeholder in _PLACEHOLDERS]
    earlier: list[str] = []
    for message in request.messages:
        details = getattr(message, "details", None) or {}
        attempt = (details.get("contract") or {}).get("attemptId") if isinstance(details, dict) else None
        if isinstance(attempt, str) and attempt != request.step.attempt_id and attempt not in earlier:
            earlier.append(attempt)
    pairs += [(attempt, f"<attemptId:{index}>") for index, attempt in enumerate(earlier, 1)]
    return [(value, placeholder) for value, placeholder in pairs if len(value) >= _MIN_ID_LENGTH]


def _generalize(text: str, request: ChatRequest) -> str:
    for value, placeholder in _ids(request):
        text = text.replace(value, placeholder)
    return text


def _specialize(text: str, request: ChatRequest) -> str:
    for value, placeholder in _ids(request):
        text = text.replace(placeholder, value)
    return text


_RUNTIME_VALUES = (
    (re.compile(r"upd_[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"), "<updateId>"),
    (re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z"), "<time>"),
)
"""Values piw mints at run time that reach the model in tool results (update receipts), so they differ on replay."""


def normalized_request(request: ChatRequest) -> dict[str, Any]:
    """The request as recorded: JSON, with this run's step ids, update ids and receipt times as placeholders."""
    text = _generalize(
        json.dumps(request.model_dump(mode="json", by_alias=True), ensure_ascii=False), request
    )
    for pattern, placeholder in _RUNTIME_VALUES:
        text = pattern.sub(placeholder, text)
    value: dict[str, Any] = json.loads(text)
    return value


def request_sha256(normalized: Mapping[str, Any]) -> str:
    canonical = json.dumps(normalized, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


class RecordingProvider:
    """Wraps a provider and appends one record per request to ``path`` before the final event is yielded."""

    def __init__(self, inner: Provider, path: Path, secrets: Iterable[str] = ()) -> None:
        self.name = inner.name
        self.model = inner.model
        self.path = path
        self._inner = inner
        self._secrets = [secret for secret in secrets if secret]
        self._lock = threading.Lock()

    def stream(self, request: ChatRequest, cancel: threading.Event) -> Iterator[ProviderEvent]:
        events: list[ProviderEvent] = []
        for event in self._inner.stream(request, cancel):
            events.append(event)
            if isinstance(event, DoneEvent | ErrorEvent):
                # Written before the final event goes out, so a refused record stops the turn visibly.
                self._append(request, events)
            yield event

    def _append(self, request: ChatRequest, events: list[ProviderEvent]) -> None:
        normalized = normalized_request(request)
        dumped = json.dumps([EVENT_ADAPTER.dump_python(e, mode="json", by_alias=True) for e in events])
        with self._lock:
            record = {
                "request": normalized,
                "requestSha256": request_sha256(normalized),
                "events": json.loads(_generalize(dumped, request)),
                "turn": _count_lines(self.path) + 1,
                "provider": self.name,
                "model": request.model,
                "recordedAt": now_timestamp(),
            }
            line = json.dumps(record, ensure_ascii=False, separators=(",", ":"))
            if contains_secret(line, self._secrets):
                raise ProviderError(
                    f"Refusing to write cassette {self.path}: the record contains a configured secret "
                    "(an API key or $NAME header value). Remove it from the conversation or stop recording."
                )
            # Cassettes hold whole conversations: private like run bundles (0700 folder, 0600 file).
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            with os.fdopen(fd, "a", encoding="utf-8") as handle:
                handle.write(line + "\n")


def _count_lines(path: Path) -> int:
    try:
        with path.open("rb") as handle:
            return sum(1 for _ in handle)
    except FileNotFoundError:
        return 0


class ReplayProvider:
    """Serves recorded streams in order, with no I/O beyond reading the cassette.

    ``strict`` (the default) fails on a request that differs from the recorded one, showing a short diff,
    so a changed prompt cannot silently replay a stale answer.
    """

    def __init__(
        self, path: Path, strict: bool = True, *, name: str | None = None, model: str | None = None
    ) -> None:
        self.path = path
        self.strict = strict
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            raise ProviderError(f"Cannot read cassette {path}: {exc}") from exc
        try:
            self._records: list[dict[str, Any]] = [json.loads(line) for line in lines if line.strip()]
        except ValueError as exc:
            raise ProviderError(f"Cassette {path} is not valid JSONL: {exc}") from exc
        first = self._records[0] if self._records else {}
        self.name = name or str(first.get("provider", "replay"))
        self.model = model or str(first.get("model", "replay"))
        self._next = 0
        self._lock = threading.Lock()

    def pending(self) -> int:
        with self._lock:
            return len(self._records) - self._next

    def stream(self, request: ChatRequest, cancel: threading.Event) -> Iterator[ProviderEvent]:
        with self._lock:
            number = self._next + 1
            if self._next >= len(self._records):
                raise ScriptExhausted(
                    f"Cassette {self.path} has no record for request {number}; record it again "
                    "with PIW_PROVIDER_CASSETTE=record."
                )
            record = self._records[self._next]
            self._next += 1
        normalized = normalized_request(request)
        if self.strict and request_sha256(normalized) != record.get("requestSha256"):
            raise ProviderError(
                f"Request {number} differs from cassette {self.path}:\n"
                + _diff(record.get("request"), normalized)
            )
        events = json.loads(_specialize(json.dumps(record.get("events", [])), request))
        for raw in events:
            if cancel.is_set():
                yield from MessageBuilder(self.name, request.model).abort()
                return
            yield EVENT_ADAPTER.validate_python(raw)


def _diff(recorded: Any, current: Mapping[str, Any], limit: int = 30) -> str:
    def lines(value: Any) -> list[str]:
        return json.dumps(value, indent=1, sort_keys=True, ensure_ascii=False).splitlines()

    diff = list(
        difflib.unified_diff(lines(recorded), lines(current), "recorded", "current", lineterm="", n=1)
    )
    shown = diff[:limit]
    if len(diff) > limit:
        shown.append(f"… {len(diff) - limit} more diff lines")
    return "\n".join(shown)
