"""What the viewer reads about one run: a fast first state, a trace index for paging and time travel, and the
live tail.

Opening a run must be quick whatever its length, so :func:`open_run` never reads the whole trace: it takes
``state.json`` when the trace's last line agrees with it (``docs/design/persistence.md`` §3: the cache is
trusted when its ``traceSeq`` is the last valid seq, and the tail after it is folded), which needs only the end
of the file.
:meth:`RunReader.index` then reads the trace once, in the background, and keeps:

- the byte offset of every :data:`OFFSET_EVERY`-th event, so any page of the trace is one seek away;
- fold checkpoints (state and progress windows) every :data:`CHECKPOINT_EVERY` events, made by the first fold
  that passes them (the index pass itself when there was no trusted ``state.json``), so the state at any seq is
  a checkpoint plus at most that many events through the one fold (``fold_more``) — never a second path;
- the seqs of ``update_published`` events (the update history pages through them).

Memory is bounded by the number of checkpoints, not the trace. A damaged line stops the index with a notice and
the valid prefix stays viewable. Nothing here writes; the only probe is the writer-lock check of
:func:`piw.store.db.liveness.writer_is_live` (the run's queue row, read-only).
"""

from __future__ import annotations

import os
import threading
from array import array
from bisect import bisect_right
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from piw.errors import PiwError
from piw.progress import parse_instant
from piw.store import foldcache
from piw.store.bundle import Bundle, open_bundle
from piw.store.db.liveness import writer_is_live
from piw.store.fold import RunState, fold_more
from piw.store.lineage import forks_of
from piw.store.live_stream import LiveReply, StreamReader
from piw.store.session import SessionEntry
from piw.store.state_json import decode_state
from piw.store.trace import TraceEvent, decode_event
from piw.views.progress import Tracks
from piw.views.source import EntryStream, Tail, read_lines, session_tail

OFFSET_EVERY = 256
CHECKPOINT_EVERY = 16_384
BATCH = 2_048
TAIL_CHUNK = 1 << 16
MAX_TAIL_BYTES = 8 << 20
"""How far back from the end :func:`open_run` looks for the events after ``state.json``'s ``traceSeq``."""
LONG_STATE_BYTES = 16 << 20
"""A ``state.json`` longer than this (about 60,000 steps) is read only when no fold checkpoint is near the end."""
_DECODE_ERRORS = (ValueError, UnicodeDecodeError, KeyError, TypeError)


@dataclass
class Checkpoint:
    """The fold after event ``seq``, with the progress windows of the same prefix."""

    seq: int
    offset: int
    state: RunState
    tracks: Tracks


@dataclass
class TraceIndex:
    """What one pass over the trace leaves behind (see the module docstring)."""

    offsets: array[int] = field(default_factory=lambda: array("q", [0]))
    """``offsets[i]`` is the byte offset where event ``i * OFFSET_EVERY + 1`` starts."""
    checkpoints: list[Checkpoint] = field(default_factory=list)
    update_seqs: array[int] = field(default_factory=lambda: array("q"))
    last_seq: int = 0
    end_offset: int = 0
    corruption: str | None = None
    complete: bool = False


class RunReader:
    """One run as the viewer sees it; every method reads, none writes."""

    def __init__(self, bundle: Bundle, snapshot: dict[str, Any], state: RunState, notices: list[str]) -> None:
        self.bundle = bundle
        self.snapshot = snapshot
        self.state = state
        """The state at the end of what has been read (live: kept up to date by :meth:`poll`)."""
        self.notices = notices
        self.index_data = TraceIndex()
        self.indexed = threading.Event()
        self.progress = 0.0
        """How far the index pass has got, 0..1."""
        self.tracks = Tracks()
        """Progress windows at the end of the trace."""
        self._lock = threading.RLock()
        self._trace_tail: Tail[TraceEvent] | None = None
        self._session = session_tail(bundle)
        self._stream = StreamReader(bundle.path)
        """The running agent step's stream (the bundle's side file, ``docs/views.md``): shown, never folded."""
        self.entries: list[SessionEntry] = []
        self.forks: tuple[str, ...] = ()
        """Runs forked from this one (read once when opened; only directory names and manifests)."""

    # ---- what to show ----------------------------------------------------------------------------------

    @property
    def run_id(self) -> str:
        return self.bundle.run_id

    @property
    def last_seq(self) -> int:
        return max(self.state.trace_seq, self.index_data.last_seq)

    @property
    def notice(self) -> str | None:
        """Everything that is damaged, in one line (``None`` when nothing is)."""
        found = [*self.notices]
        for extra in (self.index_data.corruption, self._session.corruption):
            if extra and extra not in found:
                found.append(extra)
        return " · ".join(found) or None

    def live(self) -> bool | None:
        """For a running run: whether a process holds its writer lock (``None`` once it has ended)."""
        return writer_is_live(self.bundle) if self.state.status == "running" else None

    # ---- the index pass --------------------------------------------------------------------------------

    def index(self, stop: threading.Event | None = None) -> TraceIndex:
        """Read the trace once (see the module docstring); safe to call from a worker thread.

        When the run opened from ``state.json`` the pass only validates, records offsets, update seqs and the
        progress windows; the fold (and its checkpoints) happens only without a trusted state, or later, when
        time travel first asks for an earlier state. That keeps one state in memory, not two.
        """
        index = TraceIndex()
        size = max(1, _size(self.bundle.trace_path))
        trusted = self.state
        folding = not trusted.run_id
        state, tracks, batch, tail = RunState(), Tracks(), [], []
        expected, damaged = 1, 0
        for end, line in read_lines(self.bundle.trace_path):
            if stop is not None and stop.is_set():
                return index
            if damaged:
                index.corruption = (
                    f"trace.ndjson line {damaged} is damaged; showing the {damaged - 1} events before it"
                )
                break
            try:
                event = decode_event(line, expected)
            except _DECODE_ERRORS:
                damaged = expected
                continue
            if expected % OFFSET_EVERY == 0:
                index.offsets.append(end)
            if event.type == "update_published":
                index.update_seqs.append(expected)
            tracks.add(event)
            if folding:
                batch.append(event)
                if len(batch) >= BATCH or expected % CHECKPOINT_EVERY == 0:
                    state = fold_more(state, batch)
                    batch = []
                if expected % CHECKPOINT_EVERY == 0:
                    index.checkpoints.append(Checkpoint(expected, end, state, tracks.copy()))
            elif expected > trusted.trace_seq:
                tail.append(event)  # appended after state.json was read (a live run)
            index.last_seq, index.end_offset = expected, end
            expected += 1
            if expected % 8192 == 0:
                self.progress = min(0.99, end / size)
        if folding:
            state = fold_more(state, batch)
        elif index.last_seq < trusted.trace_seq:
            folding = True  # state.json is ahead of the valid prefix (a damaged line): refold the prefix
        else:
            state = fold_more(trusted, tail)
        index.complete = True
        self._settle(index, tracks, state, refold=folding and not state.run_id and bool(index.last_seq))
        return index

    def _settle(self, index: TraceIndex, tracks: Tracks, state: RunState, *, refold: bool) -> None:
        """Install a finished index pass and the state at its end, and follow the trace from there; ``refold``
        when the pass could not fold a state (state.json ahead of a damaged prefix): replay the valid prefix."""
        with self._lock:
            self.index_data = index
            self.tracks = tracks
            if refold:
                self.index_data.checkpoints = []
                state, _ = self._replay(index.last_seq, want_tracks=False)
            self.state = state
            follow: Tail[TraceEvent] = Tail(self.bundle.trace_path, decode_event)
            follow.offset, follow.next_seq = index.end_offset, index.last_seq + 1
            if index.corruption:
                follow.corruption = index.corruption
            self._trace_tail = follow
        self.progress = 1.0
        self.indexed.set()

    # ---- time travel -----------------------------------------------------------------------------------

    def state_at(self, seq: int | None) -> RunState:
        """The fold of events ``1..seq`` (the end when ``seq`` is ``None``); needs the index."""
        if seq is None or seq >= self.last_seq:
            return self.state
        state, _ = self._replay(seq, want_tracks=False)
        return state

    def tracks_at(self, seq: int | None) -> Tracks:
        """The progress windows of events ``1..seq``."""
        if seq is None or seq >= self.last_seq:
            return self.tracks
        return self._replay(seq, want_tracks=True)[1]

    def replay_cost(self, seq: int | None) -> int:
        """How many events :meth:`state_at` would fold for ``seq`` (the viewer moves long replays off the UI)."""
        if seq is None or seq >= self.last_seq:
            return 0
        base = self._checkpoint(seq)
        return seq - (base.seq if base else 0)

    def _checkpoint(self, seq: int) -> Checkpoint | None:
        checkpoints = self.index_data.checkpoints
        found = bisect_right([c.seq for c in checkpoints], seq) - 1
        return checkpoints[found] if found >= 0 else None

    def _replay(self, seq: int, *, want_tracks: bool) -> tuple[RunState, Tracks]:
        """Fold from the nearest checkpoint up to ``seq``, leaving checkpoints behind on the way."""
        base = self._checkpoint(seq)
        if not want_tracks and seq - (base.seq if base else 0) > CHECKPOINT_EVERY:
            stored = self._stored_state(seq, base.seq if base else 0)
            if stored is not None:
                return stored, Tracks()
        state = base.state if base else RunState()
        tracks = base.tracks.copy() if base else Tracks()
        start = base.seq + 1 if base else 1
        batch: list[TraceEvent] = []
        made: list[Checkpoint] = []
        for event in self.events(start, seq + 1):
            batch.append(event)
            tracks.add(event)
            if event.seq % CHECKPOINT_EVERY == 0:
                state, batch = fold_more(state, batch), []
                made.append(Checkpoint(event.seq, 0, state, tracks.copy()))
            elif len(batch) >= BATCH:
                state, batch = fold_more(state, batch), []
        if made:
            with self._lock:
                known = {c.seq for c in self.index_data.checkpoints}
                merged = self.index_data.checkpoints + [c for c in made if c.seq not in known]
                self.index_data.checkpoints = sorted(merged, key=lambda c: c.seq)
        return fold_more(state, batch), tracks

    def _stored_state(self, seq: int, have: int) -> RunState | None:
        """The state at ``seq`` from the bundle's own fold checkpoints (``piw.store.foldcache``, left by
        ``inspect`` and other readers), when one is closer than what this reader holds; read-only: the viewer
        never writes a checkpoint."""
        try:
            found = foldcache.replay(self.bundle.path, self.run_id, seq, write=False)
        except Exception:  # a cache: fold from what we have instead
            return None
        if found.checkpoint_seq <= have or found.state.trace_seq != seq or found.damage is not None:
            return None
        return found.state

    # ---- paging ----------------------------------------------------------------------------------------

    def events(self, start: int, stop: int) -> Iterator[TraceEvent]:
        """Events with ``start <= seq < stop``, read from the nearest indexed offset."""
        start = max(1, start)
        slot = min((start - 1) // OFFSET_EVERY, len(self.index_data.offsets) - 1)
        seq = slot * OFFSET_EVERY + 1
        for _, line in read_lines(self.bundle.trace_path, self.index_data.offsets[slot]):
            if seq >= stop:
                return
            if seq >= start:
                try:
                    yield decode_event(line, seq)
                except _DECODE_ERRORS:
                    return
            seq += 1

    def event(self, seq: int) -> TraceEvent | None:
        return next(self.events(seq, seq + 1), None)

    def entries_at(self, seq: int | None) -> EntryStream:
        """Session entries as they stood at ``seq`` (the cut of :meth:`piw.views.source.RunData.entries`)."""
        if seq is None or seq >= self.last_seq:
            return EntryStream(self.bundle.session_path)
        state = self.state_at(seq)
        following = self.event(seq + 1)
        return EntryStream(
            self.bundle.session_path,
            parse_instant(state.updated_at),
            parse_instant(following.at) if following else None,
        )

    def now_at(self, seq: int | None, clock: Callable[[], datetime] | None = None) -> datetime:
        """The instant clocks are drawn for: the replayed moment when time travelling or ended, else now."""
        state = self.state_at(seq)
        replayed_to = state.finished_at if state.is_terminal else state.updated_at
        fixed = parse_instant(replayed_to) if (seq is not None or state.is_terminal) and replayed_to else None
        return fixed or (clock or _utc_now)()

    # ---- following a live run ----------------------------------------------------------------------------

    def poll_stream(self) -> bool:
        """Read what the running agent step streamed since the last call; True when its reply changed."""
        return self._stream.poll()

    def live_reply(self) -> LiveReply | None:
        """The reply the current attempt's model is streaming now, if another process writes one."""
        current = self.state.current
        reply = self._stream.reply_of(current.attempt_id if current is not None else None)
        return reply if reply is not None and not reply.ended and reply.text.strip() else None

    def poll(self) -> tuple[list[TraceEvent], list[SessionEntry]]:
        """Read what was appended since the index (or the last poll); empty before the index is done.

        A trace that shrank was repaired on resume: the index is rebuilt from the start.
        """
        with self._lock:
            tail = self._trace_tail
            if tail is None:
                return [], []
            read = tail.read()
            if read.restarted:
                self._trace_tail = None
                self.indexed.clear()
        if read.restarted:
            self.index()
            return self.poll()
        entries = self._session.read().records
        with self._lock:
            if read.records:
                index = self.index_data
                self.state = fold_more(self.state, read.records)
                for event in read.records:
                    self.tracks.add(event)
                    if event.type == "update_published":
                        index.update_seqs.append(event.seq)
                # No new offsets: pages past the indexed end are read forward from its last offset.
                index.last_seq = read.records[-1].seq
                index.end_offset = tail.offset - len(tail.partial)
            self.entries.extend(entries)
        return read.records, entries


def _size(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0


def _utc_now() -> datetime:
    return datetime.now(UTC)


def _last_lines(path: Path, limit: int = MAX_TAIL_BYTES) -> list[bytes]:
    """The terminated lines in the last ``limit`` bytes of ``path`` (the first, possibly partial, one dropped
    unless the read reached the start of the file)."""
    size = _size(path)
    if size == 0:
        return []
    with path.open("rb") as handle:
        data = b""
        position = size
        while position > 0 and len(data) < limit:
            step = min(TAIL_CHUNK, position)
            position -= step
            handle.seek(position)
            data = handle.read(step) + data
            if data.count(b"\n") >= 2 and position > 0 and len(data) >= TAIL_CHUNK:
                break
    lines = data.split(b"\n")
    lines.pop()  # bytes after the last newline: an unterminated tail, ignored
    if position > 0 and lines:
        lines.pop(0)
    return lines


def _seq_of(line: bytes) -> int | None:
    try:
        seq = orjson.loads(line).get("seq")
    except (ValueError, UnicodeDecodeError, AttributeError):
        return None
    return seq if type(seq) is int else None


def last_seq(bundle: Bundle) -> int | None:
    """The seq of the trace's last valid line, from the end of the file (a torn last line is skipped)."""
    seqs = [_seq_of(line) for line in _last_lines(bundle.trace_path, TAIL_CHUNK)]
    if seqs and seqs[-1] is None:
        seqs.pop()
    return seqs[-1] if seqs else None


def fast_state(bundle: Bundle) -> RunState | None:
    """``state.json`` plus the events after it, when the end of the trace agrees with it; else ``None``.

    Only the end of the file is read. The last line that decodes gives the last seq; a torn last line is
    ignored as the reader rule says. The index pass later replays the whole trace and replaces this state.

    A long ``state.json`` (over :data:`LONG_STATE_BYTES`: hundreds of thousands of steps, a second to decode and
    as many megabytes held), or a missing one, gives way to the bundle's fold checkpoints when a reader such as
    ``inspect`` left a trusted one near the end: its head, its steps decoded a checkpoint at a time as they are
    shown, and the events after it (:func:`piw.store.foldcache.replay_near_end`, read-only) — the same state, at a
    tenth of the time and memory.
    """
    lines = _last_lines(bundle.trace_path)
    seqs = [_seq_of(line) for line in lines]
    if seqs and seqs[-1] is None:  # a torn final line
        lines, seqs = lines[:-1], seqs[:-1]
    if not seqs or seqs[-1] is None:
        return None
    last = seqs[-1]
    try:
        size: int | None = bundle.state_path.stat().st_size
    except OSError:
        size = None  # no state.json: checkpoints near the end, or the index pass
    if size is None or size > LONG_STATE_BYTES:
        stored = _checkpoint_state(bundle, last)
        if stored is not None or size is None:
            return stored
    try:
        cached = decode_state(bundle.state_path.read_bytes(), lazy_steps=True)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if cached.run_id != bundle.run_id:
        return None
    if cached.trace_seq > last:
        return None
    if cached.trace_seq == last:
        return cached
    try:
        start = seqs.index(cached.trace_seq + 1)
    except ValueError:
        return None  # too far behind to fold from the tail: wait for the index
    try:
        tail = [decode_event(line, cached.trace_seq + 1 + i) for i, line in enumerate(lines[start:])]
    except _DECODE_ERRORS:
        return None
    return fold_more(cached, tail)


def _checkpoint_state(bundle: Bundle, last: int) -> RunState | None:
    """The state at ``last`` from a trusted fold checkpoint at most ``foldcache.CHECKPOINT_EVERY`` events before
    it, else ``None`` (nothing folded)."""
    try:
        found = foldcache.replay_near_end(bundle.path, bundle.run_id, last - foldcache.CHECKPOINT_EVERY)
    except Exception:  # a cache: state.json instead
        return None
    if found is None or found.damage is not None or found.state.trace_seq != last:
        return None
    return found.state if found.state.run_id == bundle.run_id else None


def open_run(home: Path, run_id: str) -> RunReader:
    """Open a run for viewing. ``RunNotFound`` for an unknown id; a damaged bundle opens with notices."""
    bundle = open_bundle(home, run_id)
    notices: list[str] = []
    try:
        snapshot = bundle.read_snapshot()
    except PiwError:
        snapshot = {}
        notices.append("workflow.json is missing or damaged; the graph cannot be drawn")
    if not bundle.trace_path.is_file():
        notices.append("trace.ndjson is missing")
    state = fast_state(bundle) or RunState()
    reader = RunReader(bundle, snapshot, state, notices)
    reader.forks = tuple(forks_of(home, run_id))
    return reader
