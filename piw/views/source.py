"""Reading a run bundle for the views: streamed trace and session records, incremental tails, and ``RunData``.

Views never hold a whole trace: :class:`RecordStream` re-reads the file in chunks each time it is iterated and
:class:`Tail` keeps only a byte offset and an unterminated remainder between reads. Both follow the torn-tail
rule of ``docs/design/persistence.md`` §5 — an unterminated tail is ignored and a bad *last* line is ignored,
while a bad line with more lines after it ends the stream with a corruption notice instead of an exception, so
the valid prefix still shows. Nothing here writes run data (only the fold checkpoints :func:`load_run` leaves as
a cache); the only probe of a run is :func:`piw.store.db.liveness.writer_is_live`, which reads its queue row
read-only (or, without one, takes and releases a shared lock on the bundle).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from piw.errors import StoreError
from piw.progress import parse_instant
from piw.store.bundle import Bundle, open_bundle
from piw.store.damage import Damage, artifact_damage, line_damage
from piw.store.fold import RunState
from piw.store.foldcache import events_of_type, replay
from piw.store.lineage import forks_of
from piw.store.session import SessionEntry
from piw.store.trace import TraceEvent, decode_event, decode_lines

if TYPE_CHECKING:
    from piw.views.row_cache import RowSource

T = TypeVar("T")
Decoder = Callable[[bytes, int], T]
CHUNK = 1 << 20
_DECODE_ERRORS = (ValueError, UnicodeDecodeError, KeyError, TypeError)


def decode_entry(line: bytes, expected_seq: int) -> SessionEntry:
    """One ``session/entries.ndjson`` line; raises ``ValueError`` (or ``KeyError``) when it is not one."""
    raw = json.loads(line.decode("utf-8"))
    entry = raw["entry"]
    if raw["seq"] != expected_seq or not isinstance(entry["message"], dict):
        raise ValueError("not the expected session entry")
    return SessionEntry(
        raw["seq"], raw["at"], entry["id"], entry.get("parentId"), entry["timestamp"], entry["message"]
    )


def read_lines(path: Path, start: int = 0) -> Iterator[tuple[int, bytes]]:
    """``(end offset, line)`` for each terminated line from ``start``; reads in chunks, ignores an open
    tail."""
    offset = start
    for body in _line_chunks(path, CHUNK, start):
        begin = 0
        while (end := body.find(b"\n", begin)) >= 0:
            offset += end + 1 - begin
            yield offset, body[begin:end]
            begin = end + 1


class RecordStream(Generic[T]):
    """A re-iterable stream of the valid records of an NDJSON file, optionally only the first ``limit``.

    With ``decode_many`` (:func:`trace_stream` gives :func:`piw.store.trace.decode_lines`), each chunk of about
    125 lines is decoded in one call; a chunk that call refuses (a bad or blank line, or one past ``limit``) is
    read line by line with ``decode``, so what is found and reported is the same either way.
    """

    def __init__(
        self,
        path: Path,
        decode: Decoder[T],
        limit: int | None = None,
        decode_many: Callable[[bytes, int], list[T] | None] | None = None,
        *,
        start: int = 0,
        first_seq: int = 1,
    ) -> None:
        self.path = path
        self.start, self.first_seq = start, first_seq
        self.decode = decode
        self.limit = limit
        self.decode_many = decode_many
        self.damage: Damage | None = None
        """Set after an iteration that stopped at a damaged line which was not the last one."""

    @property
    def corruption(self) -> str | None:
        """The damage notice, if the last iteration stopped at a damaged line."""
        return self.damage.notice if self.damage else None

    def __iter__(self) -> Iterator[T]:
        self.damage = None
        expected, damaged = self.first_seq, 0
        limit, decode_many = self.limit, self.decode_many
        for body in _line_chunks(self.path, CHUNK if decode_many is None else _BATCH_CHUNK, self.start):
            if decode_many is not None and not damaged:
                batch = decode_many(body, expected)
                if batch is not None and (limit is None or expected + len(batch) - 1 <= limit):
                    expected += len(batch)
                    yield from batch
                    continue
            begin = 0
            while (end := body.find(b"\n", begin)) >= 0:
                line = body[begin:end]
                begin = end + 1
                if damaged:
                    self.damage = line_damage(self.path.name, damaged)
                    return
                if limit is not None and expected > limit:
                    return
                try:
                    record = self.decode(line, expected)
                except _DECODE_ERRORS:
                    damaged = expected
                    continue
                expected += 1
                yield record


_BATCH_CHUNK = 1 << 15
"""Bytes decoded in one ``decode_many`` call: the events are used while they are still in the cache."""


def _line_chunks(path: Path, size: int, start: int = 0) -> Iterator[bytes]:
    """The file's complete lines from byte ``start``, a chunk of about ``size`` bytes at a time (an unterminated
    tail is never yielded)."""
    try:
        handle = path.open("rb")
    except FileNotFoundError:
        return
    with handle:
        handle.seek(start)
        rest = b""
        while chunk := handle.read(size):
            data = rest + chunk
            cut = data.rfind(b"\n") + 1
            if cut:
                yield data[:cut]
            rest = data[cut:]


def trace_stream(
    path: Path, limit: int | None = None, *, start: int = 0, first_seq: int = 1
) -> RecordStream[TraceEvent]:
    """The trace's events (up to ``limit``), decoded a chunk at a time; from byte ``start`` on, where the line of
    ``first_seq`` begins, when given."""
    return RecordStream(path, decode_event, limit, decode_lines, start=start, first_seq=first_seq)


@dataclass
class TailRead(Generic[T]):
    """What one :meth:`Tail.read` found: new records, and whether the file shrank so readers must start
    over."""

    records: list[T]
    restarted: bool = False


class Tail(Generic[T]):
    """An incremental reader for a live NDJSON file: keeps its offset, buffers a partial last line.

    A file shorter than the offset was repaired (a torn tail truncated on resume), so the tail starts again at
    byte 0 and says so; callers then rebuild whatever they folded from the start.
    """

    def __init__(self, path: Path, decode: Decoder[T]) -> None:
        self.path = path
        self.decode = decode
        self.offset = 0
        self.partial = b""
        self.next_seq = 1
        self.damaged: int | None = None
        self.corruption: str | None = None

    def reset(self) -> None:
        self.offset, self.partial, self.next_seq, self.damaged, self.corruption = 0, b"", 1, None, None

    def read(self) -> TailRead[T]:
        """Every record appended since the last read (see :meth:`stream` to take them chunk by chunk)."""
        records: list[T] = []
        restarted = False
        for chunk, restart in self.stream():
            records.extend(chunk)
            restarted = restarted or restart
        return TailRead(records, restarted)

    def size(self) -> int:
        try:
            return os.stat(self.path).st_size
        except FileNotFoundError:
            return 0

    def stream(self, upto: int | None = None) -> Iterator[tuple[list[T], bool]]:
        """The new records in chunks of at most ~1 MiB of lines, with whether the file was repaired.

        A first read of a long file never holds its bytes at once, and a caller that folds each chunk as it
        comes (``watch``) never holds all of its records either. ``upto`` stops at a size taken earlier.
        """
        size = self.size() if upto is None else upto
        restarted = size < self.offset
        if restarted:
            self.reset()
        if size == self.offset or self.corruption:
            if restarted:
                yield [], True
            return
        with self.path.open("rb") as handle:
            handle.seek(self.offset)
            remaining = size - self.offset
            while remaining > 0:
                data = handle.read(min(remaining, CHUNK))
                if not data:
                    break
                remaining -= len(data)
                self.offset += len(data)
                lines = (self.partial + data).split(b"\n")
                self.partial = lines.pop()
                yield self._decode_all(lines), restarted
                restarted = False
                if self.corruption:
                    return

    def _decode_all(self, lines: list[bytes]) -> list[T]:
        records: list[T] = []
        for line in lines:
            if self.damaged is not None:
                self.corruption = f"{self.path.name} line {self.damaged} is damaged; stopped following it."
                break
            try:
                records.append(self.decode(line, self.next_seq))
            except _DECODE_ERRORS:
                self.damaged = self.next_seq
                continue
            self.next_seq += 1
        return records


def trace_tail(bundle: Bundle) -> Tail[TraceEvent]:
    return Tail(bundle.trace_path, decode_event)


def session_tail(bundle: Bundle) -> Tail[SessionEntry]:
    return Tail(bundle.session_path, decode_entry)


@dataclass(frozen=True)
class RunData:
    """Everything a view may read about one run, replayed up to ``at`` when given (time travel)."""

    bundle: Bundle
    state: RunState
    snapshot: dict[str, Any]
    now: datetime
    """The instant live clocks are computed for: wall time for a running run, else the last replayed event."""
    at: int | None = None
    live: bool | None = None
    """Whether a writer holds the run (only probed for a running run read to its end)."""
    notice: str | None = None
    damage: Damage | None = None
    """What is damaged in the bundle (its ``notice`` is ``notice``), for the JSON shapes."""
    next_at: str | None = None
    """When time travelling: the time of the first event after ``at`` (it bounds the session entries)."""
    forks: tuple[str, ...] = ()
    """Runs forked from this one (``piw fork``); read by :func:`load_run` only, not on every watch frame."""

    folded_bytes: int | None = None
    """Bytes of the trace the replay folded (all valid lines up to ``at``): set by :func:`load_run`."""
    artifact_refs: bool | None = None
    """Whether the folded trace may hold an artifact ref (from the replay; ``None``: not known, search)."""

    def update_events(self) -> Iterable[TraceEvent]:
        """The ``update_published`` events up to ``at``: found by a byte search of the folded prefix when the replay
        validated it (a long run's other lines are never decoded), else filtered from :meth:`events`."""
        if self.folded_bytes is not None and not self.state.updates:
            return ()  # the fold keeps every (type, key) it saw: none means the folded prefix holds no update
        return _UpdateEvents(self.bundle.trace_path, self.folded_bytes, self.events())

    def events(self) -> RecordStream[TraceEvent]:
        """A fresh stream of the trace events up to ``at``."""
        return trace_stream(self.bundle.trace_path, self.at)

    def events_after(self, offset: int, seq: int) -> RecordStream[TraceEvent]:
        """The trace events up to ``at`` from byte ``offset`` on, where the line of event ``seq`` begins."""
        return trace_stream(self.bundle.trace_path, self.at, start=offset, first_seq=seq)

    def row_source(self) -> RowSource | None:
        """What a view's rendered-row cache is checked against: the folded prefix of an undamaged trace."""
        if self.damage is not None or self.folded_bytes is None:
            return None
        from piw.views.row_cache import RowSource

        return RowSource(self.bundle.path, self.state.run_id, self.state.trace_seq, self.folded_bytes)

    def entries(self) -> EntryStream:
        """Session entries written before the event after ``at`` (all of them without ``at``)."""
        if self.at is None or self.next_at is None:
            return EntryStream(self.bundle.session_path)
        return EntryStream(
            self.bundle.session_path, parse_instant(self.state.updated_at), parse_instant(self.next_at)
        )


class EntryStream:
    """A re-iterable stream of session entries, cut where the replayed trace ends.

    Entries and events share one clock but not one sequence, so the cut is by time: an entry belongs to the
    replay when it was written before the next event (``before``), or no later than the last replayed one
    (``until``), which settles entries written in the same millisecond as the last event.
    """

    def __init__(self, path: Path, until: datetime | None = None, before: datetime | None = None) -> None:
        self.path, self.until, self.before = path, until, before

    def __iter__(self) -> Iterator[SessionEntry]:
        for entry in RecordStream(self.path, decode_entry):
            moment = parse_instant(entry.at)
            late = self.before is not None and moment is not None and moment >= self.before
            if late and (self.until is None or moment is None or moment > self.until):
                return
            yield entry


def load_run(
    home: Path, run_id: str, at: int | None = None, clock: Callable[[], datetime] | None = None
) -> RunData:
    """Open a bundle and fold its trace up to ``at``; ``RunNotFound`` for an unknown id.

    The fold starts from the newest trustworthy fold checkpoint at or before ``at`` and leaves new ones as it
    goes (:mod:`piw.store.foldcache`), so a long run is replayed in full once and then read in milliseconds.
    """
    bundle = open_bundle(home, run_id)
    replayed = replay(bundle.path, bundle.run_id, at)
    state = replayed.state
    if not state.run_id and replayed.damage is None:
        raise StoreError(
            f"Run {run_id} never started: it was stopped before its first trace event, so there is nothing to "
            "show. The next 'piw run' sets it aside in runs/.incomplete-*."
        )
    data = run_data(bundle, state, at=at, notice=replayed.notice, clock=clock)
    forks = tuple(forks_of(home, run_id))
    return replace(
        data,
        next_at=replayed.next_at,
        damage=replayed.damage,
        forks=forks,
        folded_bytes=replayed.offset,
        artifact_refs=replayed.artifact_refs,
    )


def with_artifact_check(run: RunData) -> RunData:
    """``run`` with the first damaged artifact its state refers to reported (when the trace itself is intact).

    This reads every referenced artifact once (to check its sha256), so only the state view and ``--json`` ask.
    """
    if run.damage is not None:
        return run
    damage = artifact_damage(run.bundle.path, run.state, may_refer=run.artifact_refs)
    return replace(run, damage=damage, notice=damage.notice) if damage else run


class _UpdateEvents:
    """Re-iterable update events: :func:`piw.store.foldcache.events_of_type` of the folded prefix, or (with no
    folded prefix known) the full stream filtered."""

    def __init__(self, path: Path, end: int | None, stream: RecordStream[TraceEvent]) -> None:
        self.path, self.end, self.stream = path, end, stream

    def __iter__(self) -> Iterator[TraceEvent]:
        if self.end is None:
            return (event for event in self.stream if event.type == "update_published")
        return events_of_type(self.path, "update_published", self.end)


def run_data(
    bundle: Bundle,
    state: RunState,
    *,
    at: int | None = None,
    notice: str | None = None,
    clock: Callable[[], datetime] | None = None,
) -> RunData:
    """Wrap a replayed state with the snapshot, the clock and the liveness probe."""
    snapshot = bundle.read_snapshot()
    replayed_to = state.finished_at if state.is_terminal else state.updated_at
    fixed = parse_instant(replayed_to) if (at is not None or state.is_terminal) and replayed_to else None
    now = fixed or (clock or _utc_now)()
    live = None
    if state.status == "running" and at is None:
        from piw.store.db.liveness import writer_is_live  # the queue database: only a running run is probed

        live = writer_is_live(bundle)
    return RunData(bundle, state, snapshot, now, at, live, notice)


def _utc_now() -> datetime:
    return datetime.now(UTC)
