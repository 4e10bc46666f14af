"""Trace events: the envelope, encoding, the durable appender and the torn-tail-tolerant reader.

``trace.ndjson`` is the commit point of a run: an event exists once its full line (with ``\\n``) is written and made
durable as the durability setting says. Payloads stay plain camelCase dicts so reading a large trace stays cheap;
the fold knows their shapes (``docs/bundle-format.md`` §6).
"""

from __future__ import annotations

import contextlib
import gc
import io
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import msgspec

from piw.errors import TraceCorrupt, UsageError
from piw.wire import encode_line

Durability = Literal["effects", "always", "flush"]
DURABILITY_VALUES: tuple[Durability, ...] = ("effects", "always", "flush")
SCOPES = frozenset({"run", "node", "agent", "action", "session"})
ATTEMPT_SCOPES = frozenset({"node", "agent", "action"})

RUN_TERMINAL_TYPES = frozenset(
    {"run_completed", "run_waiting", "run_failed", "run_timed_out", "run_cancelled", "run_interrupted"}
)
NODE_TERMINAL_TYPES = frozenset({"node_finished", "node_failed"})


Scope = Literal["run", "node", "agent", "action", "session"]


class TraceEvent(msgspec.Struct, frozen=True, rename="camel", gc=False):
    """One committed trace line. ``payload`` is the camelCase payload object exactly as on disk.

    A ``msgspec.Struct``: the reader decodes each line straight into it (the envelope is type-checked while it
    is parsed, with no intermediate dict), which is most of what replaying a long trace costs. Events hold no
    references to one another, so they stay out of the cyclic collector (``gc=False``).
    """

    seq: int
    at: str
    scope: Scope
    type: str
    run_id: str
    payload: dict[str, Any] = msgspec.field(default_factory=dict)
    node_id: str | None = None
    attempt_id: str | None = None

    def to_wire(self) -> dict[str, Any]:
        """The camelCase JSON object of this line."""
        data: dict[str, Any] = {"seq": self.seq, "at": self.at, "scope": self.scope, "type": self.type}
        data["runId"] = self.run_id
        if self.node_id is not None:
            data["nodeId"] = self.node_id
        if self.attempt_id is not None:
            data["attemptId"] = self.attempt_id
        data["payload"] = self.payload
        return data

    def encode(self, *, plain: bool = False) -> bytes:
        """The full line, newline included (``plain``: see :func:`piw.wire.encode_line`)."""
        return encode_line(self.to_wire(), plain=plain)


_DECODER = msgspec.json.Decoder(TraceEvent)


def decode_event(line: bytes, expected_seq: int) -> TraceEvent:
    """Parse one line; raise ``ValueError`` when it is not a valid envelope with the expected ``seq``.

    The envelope's types (``seq`` an integer, string ``at``/``type``/``runId``, a known ``scope``, an object
    ``payload``) are checked by the decoder itself; unknown fields are ignored.
    """
    event = _DECODER.decode(line)  # msgspec.DecodeError is a ValueError
    if event.seq != expected_seq:
        raise ValueError(f"expected seq {expected_seq}, found {event.seq!r}")
    if event.scope in ATTEMPT_SCOPES and (event.node_id is None or event.attempt_id is None):
        raise ValueError(f"{event.scope} event needs nodeId and attemptId")
    return event


def decode_lines(body: bytes, expected_seq: int) -> list[TraceEvent] | None:
    """Every line of ``body`` (complete lines only) decoded in one call, or ``None`` when any line is not what
    :func:`decode_event` accepts in sequence: the caller then reads those lines one by one, which finds and
    reports the bad line exactly as before.

    One ``msgspec`` call per megabyte instead of one per line is most of what makes a cold replay fast; a
    blank line (which ``decode_lines`` would skip) or two objects on one line change the count and are refused.
    """
    try:
        events = _DECODER.decode_lines(body)
    except (ValueError, UnicodeDecodeError):  # msgspec.DecodeError is a ValueError
        return None
    if len(events) != body.count(b"\n"):
        return None
    for seq, event in enumerate(events, expected_seq):
        if event.seq != seq or (
            event.scope in ATTEMPT_SCOPES and (event.node_id is None or event.attempt_id is None)
        ):
            return None
    return events


@dataclass(frozen=True)
class TraceRead:
    """The valid prefix of a trace and what was found after it."""

    events: list[TraceEvent]
    valid_bytes: int
    torn_bytes: int
    """Bytes after the valid prefix: an unterminated tail and/or one torn final line."""
    tail: bytes = b""
    """Those bytes themselves (``torn_bytes`` of them)."""


def iter_lines(data: bytes) -> Iterator[tuple[int, bytes]]:
    """Yield ``(end_offset, line)`` for every terminated line; an unterminated tail is not yielded."""
    start = 0
    while True:
        end = data.find(b"\n", start)
        if end < 0:
            return
        yield end + 1, data[start:end]
        start = end + 1


def _valid_events(lines: Iterable[bytes], source: str) -> Iterator[tuple[int, TraceEvent]]:
    """``(bytes up to and including this line, event)`` for the valid prefix of a trace's lines.

    An unterminated tail ends the prefix; a terminated line that fails is a torn tail when no terminated line
    follows it, and ``TraceCorrupt`` otherwise (``docs/bundle-format.md`` §10).
    """
    offset = 0
    expected = 1
    pending: tuple[int, str] | None = None
    for line in lines:
        if not line.endswith(b"\n"):
            return
        if pending is not None:
            number, reason = pending
            raise TraceCorrupt(
                f"{source} line {number} is damaged ({reason}); the file was left untouched.", number
            )
        try:
            event = decode_event(line, expected)
        except (ValueError, UnicodeDecodeError) as exc:
            pending = (expected, str(exc))
            continue
        offset += len(line)
        expected += 1
        yield offset, event


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    """Pause the cyclic collector while building many small acyclic objects (parsing, folding).

    Reference counting still frees everything; without the pause the collector traverses the growing result
    again and again, which costs a third of the time of a long replay.
    """
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


def parse_trace(data: bytes, source: str = "trace.ndjson") -> TraceRead:
    """Parse trace bytes: ignore an unterminated tail and a torn last line; raise ``TraceCorrupt`` otherwise."""
    events: list[TraceEvent] = []
    valid = 0
    with paused_gc():
        for end, event in _valid_events(io.BytesIO(data), source):
            events.append(event)
            valid = end
    return TraceRead(events, valid, len(data) - valid, data[valid:])


def read_trace_prefix(path: Path) -> tuple[TraceRead, TraceCorrupt | None]:
    """Like :func:`read_trace`, but a damaged line ends the read instead of raising: the readable prefix and
    the ``TraceCorrupt`` that stopped it (``None`` for an intact trace). For readers that report damage."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return TraceRead([], 0, 0), None
    events: list[TraceEvent] = []
    valid = 0
    try:
        with paused_gc():
            for end, event in _valid_events(io.BytesIO(data), str(path)):
                events.append(event)
                valid = end
    except TraceCorrupt as exc:
        return TraceRead(events, valid, len(data) - valid, data[valid:]), exc
    return TraceRead(events, valid, len(data) - valid, data[valid:]), None


def read_trace(path: Path) -> TraceRead:
    """Read a trace file's valid prefix (missing file → empty)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return TraceRead([], 0, 0)
    return parse_trace(data, str(path))


def last_seq(path: Path, window: int = 1 << 16) -> int | None:
    """The ``seq`` of the last valid line, read from the end of the file (``None`` when that cannot tell).

    The last terminated line is taken, or the one before it when it is torn (``docs/bundle-format.md`` §10); its own
    ``seq`` is trusted as the count of the lines before it, which holds for any trace the writer produced.
    """
    try:
        with path.open("rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            start = max(0, size - window)
            handle.seek(start)
            data = handle.read()
    except OSError:
        return None
    lines = data[: data.rfind(b"\n") + 1].split(b"\n")[:-1]
    if start > 0:
        lines = lines[1:]  # the first may be cut
    for line in reversed(lines[-2:]):
        try:
            event = _DECODER.decode(line)
        except ValueError:
            continue
        return event.seq
    return 0 if size == 0 else None


def iter_trace(path: Path) -> Iterator[TraceEvent]:
    """Stream the valid prefix of a trace file line by line, so folding a long trace never holds all of it."""
    try:
        handle = path.open("rb")
    except FileNotFoundError:
        return
    with handle:
        for _, event in _valid_events(handle, str(path)):
            yield event


class FileLayer:
    """The operating-system calls the appenders use; tests substitute one that records fsyncs."""

    def fsync(self, fd: int) -> None:
        os.fsync(fd)

    def write_all(self, fd: int, data: bytes) -> None:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]


def resolve_durability(configured: str | None = None) -> Durability:
    """``PIW_DURABILITY`` wins over the config value; the default is ``effects``."""
    value = os.environ.get("PIW_DURABILITY") or configured or "effects"
    for option in DURABILITY_VALUES:
        if value == option:
            return option
    raise UsageError(f"Unknown durability {value!r}; use one of: {', '.join(DURABILITY_VALUES)}.")


class LineAppender:
    """Appends complete lines to one NDJSON file with the group-commit rule of ``docs/bundle-format.md`` §11.

    ``sync=True`` marks a commit that must be durable before the caller goes on (an effect boundary); under
    ``effects`` only those fsync, and one fsync covers every line written before it. A ``ride_along`` line
    (``node_started``, a pure compute step) may be lost on power loss and recomputed, so it never forces an
    fsync of its own: :meth:`sync_required` skips the fsync while only such lines are pending.
    """

    def __init__(self, path: Path, durability: Durability, files: FileLayer | None = None) -> None:
        self.path = path
        self.durability = durability
        self.files = files or FileLayer()
        created = not path.exists()
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self._dirty = False
        self._required = False
        self._parent_dirty = created

    def append(self, line: bytes, *, sync: bool = False, ride_along: bool = False) -> None:
        """Write one line; fsync when the durability setting requires it for this commit."""
        self.files.write_all(self._fd, line)
        self._dirty = True
        self._required = self._required or not ride_along
        if self.durability == "always" or (self.durability == "effects" and sync):
            self.sync()

    def sync(self) -> None:
        """Make every written line durable (no-op under ``flush`` or when nothing is pending)."""
        if self.durability == "flush" or not self._dirty:
            return
        self.files.fsync(self._fd)
        self._dirty = self._required = False
        if self._parent_dirty:
            fsync_dir(self.path.parent, self.files)
            self._parent_dirty = False

    def sync_required(self) -> None:
        """Before an external effect: fsync unless every pending line may ride along with a later fsync."""
        if self._required:
            self.sync()

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def truncate_tail(path: Path, valid_bytes: int, files: FileLayer | None = None) -> int:
    """Remove a torn tail after the valid prefix and make the cut durable; returns the bytes removed."""
    removed = path.stat().st_size - valid_bytes
    if removed <= 0:
        return 0
    os.truncate(path, valid_bytes)
    fd = os.open(path, os.O_RDONLY)
    try:
        (files or FileLayer()).fsync(fd)
    finally:
        os.close(fd)
    return removed


def fsync_dir(path: Path, files: FileLayer | None = None) -> None:
    """fsync a directory so a newly created entry in it survives power loss."""
    fd = os.open(path, os.O_RDONLY)
    try:
        (files or FileLayer()).fsync(fd)
    finally:
        os.close(fd)


def events_of_attempt(events: Iterable[TraceEvent], attempt_id: str) -> list[TraceEvent]:
    """Every event of one attempt, in order."""
    return [event for event in events if event.attempt_id == attempt_id]
