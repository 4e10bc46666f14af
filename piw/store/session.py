"""The conversation record: ``session/entries.ndjson``, one settled message per line.

Entries form a chain through ``parentId``; the current branch is what later model requests see. A session line is
durable before any trace event names its entry id.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from piw.errors import TraceCorrupt
from piw.redaction import Redactor, redactor_for
from piw.store.place import home_of
from piw.store.trace import Durability, FileLayer, LineAppender, iter_lines, truncate_tail
from piw.wire import dumps_line, now_iso


class LineSink(Protocol):
    """What entries are appended through: a :class:`~piw.store.trace.LineAppender`, or a run store's rows."""

    def append(self, line: bytes, *, sync: bool = False, ride_along: bool = False) -> None: ...

    def sync(self) -> None: ...

    def close(self) -> None: ...


NEWEST = object()
"""Default ``parent_id`` of :meth:`SessionLog.append`: chain after the newest entry."""


@dataclass(frozen=True)
class SessionEntry:
    """One line of the conversation record."""

    seq: int
    at: str
    id: str
    parent_id: str | None
    timestamp: str
    message: dict[str, Any]


def parse_session(data: bytes, source: str = "entries.ndjson") -> list[SessionEntry]:
    """Parse entries with the trace's torn-tail rules (unterminated tail and torn last line ignored)."""
    return _parse_prefix(data, source)[0]


def _parse_prefix(data: bytes, source: str) -> tuple[list[SessionEntry], int]:
    """The valid entries and the byte length of the valid prefix."""
    entries: list[SessionEntry] = []
    valid = 0
    failed_at: int | None = None
    for end, line in iter_lines(data):
        if failed_at is not None:
            raise TraceCorrupt(
                f"{source} line {failed_at} is damaged; the file was left untouched.", failed_at
            )
        try:
            raw = json.loads(line.decode("utf-8"))
            entry = raw["entry"]
            if raw["seq"] != len(entries) + 1:
                raise ValueError("seq out of order")
            entries.append(
                SessionEntry(
                    raw["seq"],
                    raw["at"],
                    entry["id"],
                    entry.get("parentId"),
                    entry["timestamp"],
                    entry["message"],
                )
            )
            valid = end
        except (ValueError, KeyError, TypeError, UnicodeDecodeError):
            failed_at = len(entries) + 1
    return entries, valid


def read_session(path: Path) -> list[SessionEntry]:
    try:
        return parse_session(path.read_bytes(), str(path))
    except FileNotFoundError:
        return []


def current_branch(entries: list[SessionEntry]) -> list[SessionEntry]:
    """The chain reachable from the newest entry through ``parentId``, oldest first."""
    if not entries:
        return []
    by_id = {entry.id: entry for entry in entries}
    chain: list[SessionEntry] = []
    cursor: SessionEntry | None = entries[-1]
    while cursor is not None:
        chain.append(cursor)
        cursor = by_id.get(cursor.parent_id) if cursor.parent_id else None
    chain.reverse()
    return chain


def _encoded(entry: SessionEntry) -> bytes:
    """The line of one entry in ``entries.ndjson`` (``docs/bundle-format.md`` §8)."""
    line = {
        "seq": entry.seq,
        "at": entry.at,
        "entry": {
            "type": "message",
            "id": entry.id,
            "parentId": entry.parent_id,
            "timestamp": entry.timestamp,
            "message": entry.message,
        },
    }
    return (dumps_line(line) + "\n").encode("utf-8")


class SessionLog:
    """Appends conversation entries for one run (the writer holds the run's lock)."""

    def __init__(
        self,
        path: Path,
        durability: Durability,
        files: FileLayer | None = None,
        fence: Callable[[], None] | None = None,
        appender: LineSink | None = None,
    ) -> None:
        self._redactor = redactor_for(home_of(path.parents[3])) if len(path.parents) > 3 else Redactor(())
        """``home/runs/RUN/session/entries.ndjson``: the home's secrets never enter the conversation."""
        self._fence = fence or (lambda: None)
        """Checked before every write (the run's claim: appends are fenced, ``docs/bundle-format.md`` §8)."""
        path.parent.mkdir(mode=0o700, exist_ok=True)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            data = b""
        self.entries, valid = _parse_prefix(data, str(path))
        if valid < len(data):
            # A torn tail (crash mid-append): remove it, or the next entry would be glued onto it.
            self._fence()
            truncate_tail(path, valid, files)
        self._appender: LineSink = appender or LineAppender(path, durability, files)
        """Where lines go: the file, or in database mode fenced rows and then the file (``piw.store.pg``)."""

    @property
    def head(self) -> str | None:
        return self.entries[-1].id if self.entries else None

    def append(
        self, message: dict[str, Any], *, parent_id: str | object | None = NEWEST, sync: bool = True
    ) -> SessionEntry:
        """Append one settled message after ``parent_id`` (default: the newest entry; ``None`` starts a root)."""
        self._fence()
        timestamp = now_iso()
        entry = SessionEntry(
            seq=len(self.entries) + 1,
            at=timestamp,
            id=uuid.uuid4().hex,
            parent_id=self.head if parent_id is NEWEST else parent_id,  # type: ignore[arg-type]
            timestamp=timestamp,
            message=self._redactor.value(message),
        )
        self._appender.append(_encoded(entry), sync=sync)
        self.entries.append(entry)
        return entry

    def adopt(self, entry: SessionEntry) -> SessionEntry:
        """Append a copy of another run's entry (a fork's adopted conversation), keeping its id and parent.

        Ids are kept so the adopted steps' ``conversation`` ranges and receipts still name their entries.
        """
        self._fence()
        copied = SessionEntry(
            len(self.entries) + 1, entry.at, entry.id, entry.parent_id, entry.timestamp, entry.message
        )
        self._appender.append(_encoded(copied), sync=False)
        self.entries.append(copied)
        return copied

    def find_custom(self, custom_type: str, key: str, value: Any) -> SessionEntry | None:
        """The first custom entry of a type whose ``details[key]`` equals ``value``."""
        for entry in self.entries:
            message = entry.message
            if message.get("customType") == custom_type and (message.get("details") or {}).get(key) == value:
                return entry
        return None

    def sync(self) -> None:
        self._appender.sync()

    def close(self) -> None:
        self._appender.close()

    def __iter__(self) -> Iterator[SessionEntry]:
        return iter(self.entries)
