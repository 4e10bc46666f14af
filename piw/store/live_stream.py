"""``live-stream.ndjson``: the token stream of the agent steps running now, for other terminals to watch.

The process running an agent step appends what the model streams — the start of each reply, its text deltas,
each tool call as it starts, the end of the reply — to this side file of the bundle, so ``piw watch`` and
``piw view`` on any terminal show the reply while it streams (``docs/bundle-format.md`` §8.1, ``docs/views.md``).
It is not part of the trace: nothing is fsync'd, nothing in the fold, resume, fork or export reads it, and
deleting it loses only what a watcher would have seen. The committed conversation entry stays the truth.

Bounded: past :data:`MAX_BYTES` the file is renamed to ``live-stream.1.ndjson`` (replacing the older one) and a
new file starts, after its ``file`` line (a random id that tells a reader the file changed), with a ``snapshot``
line holding each streaming reply's text so far, so a reader only ever needs the current file.
Lines are written with one ``write`` each on an ``O_APPEND`` descriptor; a torn or foreign line
is skipped by readers.
"""

from __future__ import annotations

import json
import os
import secrets
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

STREAM_FILE = "live-stream.ndjson"
ROTATED_FILE = "live-stream.1.ndjson"
MAX_BYTES = 256 * 1024
"""The file is rotated past this size, so a long reply never grows a bundle by more than twice it."""
KEPT_CHARS = 4000
"""The text of a reply a snapshot carries over a rotation (and a reader keeps): its tail."""


class StreamFile:
    """The bundle's one stream file, shared by every attempt of this process that streams into it."""

    def __init__(self, bundle_path: Path, max_bytes: int = MAX_BYTES) -> None:
        self.path = bundle_path / STREAM_FILE
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._size = 0
        self._replies: dict[str, dict[str, Any]] = {}
        """Per attempt: ``{nodeId, text}`` of the reply streaming now (what a rotation's snapshot carries)."""

    def write(self, record: dict[str, Any]) -> None:
        """Append one record (``attemptId``, ``nodeId``, ``kind`` and its fields); ``OSError`` when it cannot."""
        with self._lock:
            line = _line(record)
            if self._fd is None:
                self._open()
            elif self._size + len(line) > self.max_bytes:
                self._rotate()  # its snapshot holds the replies before this record, which follows it
            self._track(record)
            assert self._fd is not None
            os.write(self._fd, line)
            self._size += len(line)

    def _track(self, record: dict[str, Any]) -> None:
        attempt, kind = str(record.get("attemptId")), record.get("kind")
        if kind == "start":
            self._replies[attempt] = {"nodeId": record.get("nodeId"), "text": ""}
        elif kind == "text" and attempt in self._replies:
            reply = self._replies[attempt]
            reply["text"] = (reply["text"] + str(record.get("text", "")))[-KEPT_CHARS:]
        elif kind == "end":
            self._replies.pop(attempt, None)

    def _open(self) -> None:
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self._size = os.fstat(self._fd).st_size
        if self._size == 0:
            self._header()

    def _header(self) -> None:
        """The first line of every file: its own id, so a reader knows a rotated file from the one it read (an
        inode number can come back after a rotation)."""
        assert self._fd is not None
        line = json.dumps({"kind": "file", "id": secrets.token_hex(8)}).encode() + b"\n"
        os.write(self._fd, line)
        self._size += len(line)

    def _rotate(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
        os.replace(self.path, self.path.with_name(ROTATED_FILE))
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_TRUNC, 0o600)
        self._size = 0
        self._header()
        for attempt, reply in self._replies.items():
            line = _line(
                {"attemptId": attempt, "nodeId": reply["nodeId"], "kind": "snapshot", "text": reply["text"]}
            )
            os.write(self._fd, line)
            self._size += len(line)

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None


def _line(record: dict[str, Any]) -> bytes:
    """One record with its wall-clock ``at`` in seconds (not the trace's clock: nothing orders by it)."""
    stamped = {"at": round(time.time(), 3), **record}
    return json.dumps(stamped, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


_FILES: dict[Path, tuple[StreamFile, int]] = {}
_FILES_LOCK = threading.Lock()


def stream_file(bundle_path: Path) -> StreamFile:
    """The process's stream file of a bundle, for one more attempt (one per bundle, so concurrent children rotate it
    once); each caller gives it back with :func:`release_stream_file` when its attempt's loop ends."""
    with _FILES_LOCK:
        found, users = _FILES.get(bundle_path, (None, 0))
        if found is None:
            found = StreamFile(bundle_path)
        _FILES[bundle_path] = (found, users + 1)
        return found


def release_stream_file(bundle_path: Path) -> None:
    """One attempt is done with the bundle's stream file; the last one closes it (a host runs many bundles)."""
    with _FILES_LOCK:
        found, users = _FILES.get(bundle_path, (None, 0))
        if found is None:
            return
        if users > 1:
            _FILES[bundle_path] = (found, users - 1)
            return
        del _FILES[bundle_path]
    found.close()


# ---- reading ----------------------------------------------------------------------------------------------


@dataclass
class LiveReply:
    """What one attempt's model is streaming now (or last streamed)."""

    node_id: str
    text: str = ""
    tools: list[str] = field(default_factory=list)
    ended: bool = False


class StreamReader:
    """Follows a bundle's stream file incrementally: a byte offset, and a restart when the file was rotated."""

    def __init__(self, bundle_path: Path) -> None:
        self.path = bundle_path / STREAM_FILE
        self._offset = 0
        self._file_id: bytes | None = None
        self._rest = b""
        self.replies: dict[str, LiveReply] = {}

    def poll(self) -> bool:
        """Read what was appended; True when a reply changed."""
        try:
            with open(self.path, "rb") as handle:
                first = handle.readline(200)
                if first != self._file_id or os.fstat(handle.fileno()).st_size < self._offset:
                    self._file_id, self._offset, self._rest = first, 0, b""  # a new file: from its start
                handle.seek(self._offset)
                data = handle.read()
        except OSError:
            return False
        if not data:
            return False
        self._offset += len(data)
        lines = (self._rest + data).split(b"\n")
        self._rest = lines.pop()
        changed = False
        for line in lines:
            changed = self._take(line) or changed
        return changed

    def _take(self, line: bytes) -> bool:
        try:
            record = json.loads(line)
            attempt, kind = str(record["attemptId"]), record["kind"]
        except (ValueError, KeyError, TypeError):
            return False
        node = str(record.get("nodeId") or "")
        if kind == "file":
            return False
        if kind in ("start", "snapshot"):
            self.replies[attempt] = LiveReply(node, str(record.get("text", ""))[-KEPT_CHARS:])
            return True
        reply = self.replies.setdefault(attempt, LiveReply(node))
        if kind == "text":
            reply.text = (reply.text + str(record.get("text", "")))[-KEPT_CHARS:]
        elif kind == "tool":
            reply.tools.append(str(record.get("tool", "")))
        elif kind == "end":
            reply.ended = True
        else:
            return False
        return True

    def reply_of(self, attempt_id: str | None) -> LiveReply | None:
        return self.replies.get(attempt_id) if attempt_id else None
