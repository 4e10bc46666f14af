"""Fold checkpoints in use: replaying a run's trace from the best checkpoint, and the writer's trail of them.

Replaying a long trace costs seconds; every reader (``inspect`` and its views, ``--at``, ``watch``, the viewer)
needs the state at some point of it. Every :data:`CHECKPOINT_EVERY` events the run's writer
(:class:`CheckpointTrail`), or a reader that folded past that point, leaves a checkpoint
(``piw.store.checkpoint_files``, ``docs/bundle-format.md`` §7.1): the state at that ``seq`` plus the byte offset
and a digest of the trace prefix it covers. The next reader starts from the newest trusted checkpoint at or before
where it wants to be and folds only the tail, so ``fold_more(checkpoint, tail) == fold(trace)`` gives the same
state as a full replay.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import msgspec

from piw.store import detached
from piw.store.checkpoint_files import (
    DECODE_ERRORS,
    READ_CHUNK,
    Extension,
    Found,
    Sealed,
    checkpoint_dir,
    headers,
    may_hold_ref,
    record_verified,
    restore,
    trace_identity,
    verified_chain,
)
from piw.store.damage import Damage, line_damage
from piw.store.detached import run_detached
from piw.store.fold import fold, fold_more
from piw.store.state import RunState, StepList, StepRecord, evolve
from piw.store.trace import TraceEvent, decode_event, decode_lines, last_seq, paused_gc
from piw.store.trace_typed import decode_typed

CHECKPOINT_EVERY = int(os.environ.get("PIW_TEST_CHECKPOINT_EVERY", "") or 20_000)
"""Events between checkpoints: a reader folds at most this many events past the one it starts from.
(``PIW_TEST_CHECKPOINT_EVERY`` lowers it for the tests that crash a ``piw`` process.)"""
_DECODE_CHUNK = 1 << 15
"""Bytes decoded in one call: about 125 lines (a megabyte at once was slower: the events left the cache before
the fold used them)."""
_BATCH = 256
_TYPED_FROM = 1 << 20
"""Bytes left to read from which the lines are decoded typed (``piw.store.trace_typed``: its decoder costs a few
milliseconds to build, more than it saves on a short read)."""


@dataclass
class Replay:
    """A run's state folded from the trace, up to ``at`` when given, and where the fold stopped."""

    state: RunState
    offset: int
    """Bytes of the trace that were folded (a follower continues reading here)."""
    next_seq: int
    damage: Damage | None = None
    """Set when the fold stopped at a damaged line that was not the last one."""
    next_at: str | None = None
    """With ``at``: the time of the first event after it (it bounds the session entries shown)."""
    checkpoint_seq: int = 0
    """The ``seq`` of the checkpoint the fold started from (0: from the first line)."""
    artifact_refs: bool = True
    """Whether the folded trace bytes may hold an artifact ref (``"$artifact"``): false only when none of them
    does, so a reader checks the artifacts of a state without searching a long trace for the key again."""

    @property
    def notice(self) -> str | None:
        return self.damage.notice if self.damage else None


# ---- reading the trace from an offset -----------------------------------------------------------------------


@dataclass
class _ReadOutcome:
    """What a stream from :func:`_read` found, complete once it is exhausted."""

    damage: Damage | None = None
    next_at: str | None = None
    artifact_refs: bool = False
    """Whether the bytes read so far hold ``"$artifact"`` (a whole chunk is searched at once, so it may be set by
    a line just past the events yielded: never false when one of them holds a ref)."""


def _read(
    trace: Path, offset: int, seq: int, at: int | None, feed: Callable[[bytes], None] | None = None
) -> tuple[Iterator[tuple[int, list[TraceEvent]]], _ReadOutcome]:
    """Stream ``(end offset, events)`` batches from ``offset`` (whose line has ``seq``) up to ``at``.

    ``feed``, when given, gets the bytes of each batch's lines just before the batch is yielded, so a reader that
    leaves checkpoints hashes exactly the bytes it decoded without reading the file a second time.

    A batch is the lines of one chunk decoded in one call (typed, :func:`piw.store.trace_typed.decode_typed`, or
    else :func:`piw.store.trace.decode_lines`), cut after
    every checkpoint boundary (``seq`` a multiple of :data:`CHECKPOINT_EVERY`), so a boundary event always ends
    its batch and the offset is exact there. A chunk that holds a bad line, or the line past ``at``, is read
    line by line (one event per batch). The torn-tail rule (``docs/bundle-format.md`` §10) holds as for a read from
    byte 0; the second value holds, once the stream is exhausted, the damage of a line that was not the last,
    the time of the event after ``at``, and whether an artifact ref was seen.
    """
    outcome = _ReadOutcome()

    def events() -> Iterator[tuple[int, list[TraceEvent]]]:
        try:
            handle = trace.open("rb")
        except FileNotFoundError:
            return
        with handle:
            handle.seek(offset)
            typed = os.fstat(handle.fileno()).st_size - offset >= _TYPED_FROM
            position, expected, damaged, rest = offset, seq, 0, b""
            while chunk := handle.read(_DECODE_CHUNK):
                data = rest + chunk
                cut = data.rfind(b"\n") + 1
                body, rest = data[:cut], data[cut:]
                if not outcome.artifact_refs and may_hold_ref(body):
                    outcome.artifact_refs = True
                batch = (
                    None
                    if damaged or not body
                    else (typed and decode_typed(body, expected)) or decode_lines(body, expected)
                )
                if batch is not None and (at is None or batch[-1].seq <= at):
                    fed = position
                    for end, events in _cut_at_boundaries(body, position, batch):
                        if feed is not None:
                            feed(body if end - fed == len(body) else body[fed - position : end - position])
                            fed = end
                        yield end, events
                    position += len(body)
                    expected += len(batch)
                    continue
                begin = 0
                while (end := body.find(b"\n", begin)) >= 0:
                    line = body[begin : end + 1]
                    begin = end + 1
                    if damaged:
                        outcome.damage = line_damage(trace.name, damaged)
                        return
                    try:
                        event = decode_event(line, expected)
                    except DECODE_ERRORS:
                        damaged = expected
                        continue
                    if at is not None and event.seq > at:
                        outcome.next_at = event.at
                        return
                    position += len(line)
                    expected += 1
                    if feed is not None:
                        feed(line)
                    yield position, [event]

    return events(), outcome


def _cut_at_boundaries(
    body: bytes, position: int, batch: list[TraceEvent]
) -> Iterator[tuple[int, list[TraceEvent]]]:
    """``batch`` (the lines of ``body``, which starts at ``position``) as batches that end at each checkpoint
    boundary, each with the offset just past its last line."""
    first = batch[0].seq
    start, line_end = 0, -1
    boundary = first + (-first % CHECKPOINT_EVERY)  # the first multiple at or after ``first``
    while boundary <= batch[-1].seq:
        stop = boundary - first + 1  # events up to and including the boundary
        for _ in range(stop - start):
            line_end = body.find(b"\n", line_end + 1)
        yield position + line_end + 1, batch[start:stop]
        start = stop
        boundary += CHECKPOINT_EVERY
    if start < len(batch):
        yield position + len(body), batch[start:] if start else batch


def replay(
    bundle_path: Path, run_id: str, at: int | None = None, *, write: bool = True, bounded: bool = False
) -> Replay:
    """The state of a run at ``at`` (the end of its valid trace without it), from the best checkpoint.

    This is the read API every reader uses: ``inspect`` and its views, ``--at``, ``watch`` and the viewer.
    While folding past the last checkpoint it leaves new ones every :data:`CHECKPOINT_EVERY` events (unless
    ``write`` is false), so the next read of this run, at any point, folds at most that many events.

    ``bounded`` (with ``write``; ``piw watch``, which shows counts and the last steps): each checkpoint is written as
    soon as the fold passes it, and the steps before it are then read back from the checkpoints only when something
    reads them, so a first read holds at most :data:`CHECKPOINT_EVERY` events' steps, not every step of the run.
    """
    chain = verified_chain(bundle_path, run_id, at, remember=write)
    restored = _restore(bundle_path, chain) if chain else None
    return _replay_from(bundle_path, chain, restored, at, write, bounded=bounded and write)


def replay_near_end(bundle_path: Path, run_id: str, since: int) -> Replay | None:
    """``replay(bundle_path, run_id, write=False)`` when a trusted checkpoint at or after ``since`` exists, so
    at most the events after it are folded; ``None`` otherwise, having folded nothing (the viewer's first
    screen of a long run: a checkpoint's head and the tail instead of a long ``state.json``)."""
    found = headers(bundle_path, run_id)
    if not found or found[-1].header.seq < since:
        return None  # (before hashing a prefix for a checkpoint too far back to use)
    chain = verified_chain(bundle_path, run_id, None, remember=False)
    if not chain or chain[-1].header.seq < since:
        return None
    restored = _restore(bundle_path, chain)
    return None if restored is None else _replay_from(bundle_path, chain, restored, None, False)


def _replay_from(
    bundle_path: Path,
    chain: list[Found],
    restored: tuple[RunState, bool] | None,
    at: int | None,
    write: bool,
    *,
    bounded: bool = False,
) -> Replay:
    """:func:`replay` from the verified ``chain`` and the state :func:`_restore` made of it."""
    if restored is None:
        chain, (state, refs_before) = [], (RunState(), False)
    else:
        state, refs_before = restored
    base = chain[-1].header if chain else None
    offset = base.offset if base else 0
    extension = Extension(base, refs_before)
    trace = bundle_path / "trace.ndjson"
    stamp = trace_identity(trace) if write else None
    # A long read of a command that ends at its answer hashes nothing while it folds: the detached writer hashes
    # the same bytes after the answer is out (``_seal_later``)
    later = (
        write
        and not bounded
        and stamp is not None
        and stamp[2] - offset >= _LATER_FROM
        and detached.allowed()
    )
    feed = extension.feed if write and not later else None
    stream, found = _read(trace, offset, (base.seq if base else 0) + 1, at, feed)
    position = offset
    batch: list[TraceEvent] = []
    sealed: list[Sealed] = []
    marks: list[tuple[int, RunState]] = []
    with paused_gc():
        for end, events in stream:
            position = end
            batch.extend(events)
            boundary = write and not events[-1].seq % CHECKPOINT_EVERY
            if len(batch) >= _BATCH or boundary:
                # a chunk of events at most: they are dropped as soon as they are folded (bounded memory)
                state = fold_more(state, batch)
                batch = []
            if boundary and bounded:
                state = _written(bundle_path, extension.seal(state))
            elif boundary and later:
                marks.append((end, state))
            elif boundary:  # the extension was fed exactly the bytes of the events folded so far
                sealed.append(extension.seal(state))
        state = fold_more(state, batch)
    if sealed:
        _leave(bundle_path, sealed, stamp)
    if marks and stamp is not None:
        run_detached(functools.partial(_seal_later, bundle_path, extension, marks, stamp))
    return Replay(
        state,
        position,
        state.trace_seq + 1,
        found.damage,
        found.next_at,
        base.seq if base else 0,
        artifact_refs=refs_before or found.artifact_refs,
    )


def _written(bundle_path: Path, sealed: Sealed) -> RunState:
    """Write ``sealed`` now; its state with the steps up to it read back from the checkpoints when something reads
    them (the state as it was when the checkpoint could not be written or read back)."""
    state = sealed.state
    sealed.write(bundle_path)
    chain = [found for found in headers(bundle_path, state.run_id) if found.header.seq <= state.trace_seq]
    if not chain or chain[-1].header.prefix_sha256 != sealed.where["prefix_sha256"]:
        return state
    restored = _restore(bundle_path, chain)
    if restored is None or len(restored[0].steps) != len(state.steps):
        return state
    return evolve(state, {"steps": restored[0].steps})


def checkpointed_steps(bundle_path: Path, run_id: str, upto_seq: int) -> tuple[int, StepList] | None:
    """The steps of the newest trusted checkpoint at or before ``upto_seq``, read back only when something reads
    them, and its ``seq``; ``None`` without one. A follower that folded past it keeps its later steps after these
    (``fold_more(checkpoint, tail) == fold(trace)``), so what it holds in memory stays bounded."""
    chain = verified_chain(bundle_path, run_id, upto_seq, remember=False)
    restored = _restore(bundle_path, chain) if chain else None
    return None if restored is None else (chain[-1].header.seq, restored[0].steps)


_DETACH_STEPS = 4096
"""Steps in the checkpoints of one read from which they are written by a detached process (when the command
allows it): below that, writing them costs less than a fork."""


def _leave(bundle_path: Path, sealed: list[Sealed], stamp: list[int] | None) -> None:
    """Write the checkpoints a read sealed, those of a long read off its critical path (``piw.store.detached``).

    Then, when the trace did not change while it was read (``stamp``: its identity before the read), remember that
    this file hashes to the chain (``verified.json``), as the run's writer does at close, so the next reader does
    not hash the prefix again.
    """

    def work() -> None:
        for one in sealed:
            one.write(bundle_path)
        last = sealed[-1]
        seq = last.state.trace_seq
        trace = bundle_path / "trace.ndjson"
        unchanged = stamp is not None and trace_identity(trace) == stamp
        if unchanged and stamp and (checkpoint_dir(bundle_path) / f"seq-{seq}.ckpt").is_file():
            record_verified(bundle_path, stamp, seq, last.where["prefix_sha256"])

    if sum(len(one.steps) for one in sealed) >= _DETACH_STEPS:
        run_detached(work)
    else:
        work()


_LATER_FROM = 8 << 20
"""Bytes left to read from which a read that may leave its checkpoints to a detached writer leaves it the hashing
too (``piw.store.detached``): below that, hashing them as they are read costs less than a fork."""


def _seal_later(
    bundle_path: Path, extension: Extension, marks: list[tuple[int, RunState]], stamp: list[int]
) -> None:
    """Seal and write the checkpoints of ``marks`` (``(offset, state)`` at each boundary a read folded past) in the
    detached writer, hashing the trace bytes the read folded by reading them again.

    They are the bytes it folded when the file is the very one it read: the same device, inode, size and
    modification time (``stamp``, taken before the read) before and after they are hashed, the identity
    ``verified.json`` trusts (``docs/bundle-format.md`` §7.1). A trace that changed since (a live run's appends)
    gets no checkpoint from this read: its writer leaves its own (:class:`CheckpointTrail`), and the next read
    folds again with the same result.
    """
    trace = bundle_path / "trace.ndjson"
    if trace_identity(trace) != stamp:
        return
    sealed = []
    try:
        with trace.open("rb") as handle:
            for offset, state in marks:
                if not extension.catch_up(handle, offset):
                    return
                sealed.append(extension.seal(state))
    except OSError:
        return
    if trace_identity(trace) != stamp:
        return
    for one in sealed:
        one.write(bundle_path)
    last = sealed[-1]
    if (checkpoint_dir(bundle_path) / f"seq-{last.state.trace_seq}.ckpt").is_file():
        record_verified(bundle_path, stamp, last.state.trace_seq, last.where["prefix_sha256"])


def events_of_type(trace: Path, kind: str, end: int) -> Iterator[TraceEvent]:
    """The events of one type among the trace lines in ``[0, end)``, without decoding the others.

    Only for a prefix :func:`replay` has already validated (``Replay.offset``): lines are found by their type's
    name and decoded one by one, so a follower that starts from a checkpoint can still feed, say, its progress
    tracks from the updates of the whole run at the cost of a byte search.
    """
    marker = kind.encode()
    try:
        handle = trace.open("rb")
    except OSError:
        return
    with handle:
        position, rest = 0, b""
        while position < end:
            chunk = handle.read(min(READ_CHUNK, end - position))
            if not chunk:
                return
            position += len(chunk)
            data = rest + chunk
            cut = data.rfind(b"\n") + 1
            rest = data[cut:]
            if data.find(marker, 0, cut) < 0:
                continue
            for line in data[:cut].split(b"\n"):
                if marker in line:
                    try:
                        event = _ENVELOPE.decode(line)
                    except msgspec.DecodeError:
                        continue
                    if event.type == kind:
                        yield event


_ENVELOPE = msgspec.json.Decoder(TraceEvent)


# ---- checkpoints left by the run's own writer -----------------------------------------------------------------


class CheckpointTrail:
    """The fold checkpoints a run's writer leaves as it appends, so that no reader ever starts a long run cold.

    Readers leave checkpoints too, but only once someone has read the run; a run read for the first time after
    it finished (``piw inspect``, the viewer, ``piw watch``) replayed it whole: seconds and hundreds of MB on a
    run of a million events. The writer has everything a checkpoint needs as it goes: the folded state after
    each line, the bytes it appended (hashed as they are written, so nothing is read back) and their offsets.
    Every :data:`CHECKPOINT_EVERY` events it writes one, exactly as :func:`replay` would; at close it records
    that this very trace file hashed to the chain (``verified.json``), so the first reader does not hash it again.

    A trail is opened only when the trace ends exactly at the state's last line (a torn or longer tail would make
    offsets lie); it continues the newest valid checkpoint of a resumed run. It is a cache: any failure turns the
    trail off and the run goes on, and readers trust a checkpoint only after their own checks, as always.
    """

    def __init__(self, bundle_path: Path, state: RunState) -> None:
        self.bundle_path = bundle_path
        self.active = False
        trace = bundle_path / "trace.ndjson"
        size = trace.stat().st_size if trace.exists() else 0
        if size and not _ends_at(trace, size, state.trace_seq):
            return
        chain = verified_chain(bundle_path, state.run_id, state.trace_seq, remember=False) if size else []
        restored = _restore(bundle_path, chain) if chain else None
        base = chain[-1].header if chain and restored is not None else None
        self.extension = Extension(base, restored[1] if base and restored else False)
        if self.extension.position < size:  # a resumed run: the lines after the last checkpoint, read once
            with trace.open("rb") as handle:
                self.extension.catch_up(handle, size)
        self.active = self.extension.position == size

    def appended(self, line: bytes, state: RunState) -> None:
        """One line was appended and folded into ``state``: at a boundary, leave a checkpoint."""
        if not self.active:
            return
        self.extension.feed(line)
        if not state.trace_seq % CHECKPOINT_EVERY:
            self.extension.leave(self.bundle_path, state)

    def close(self) -> None:
        """The trace is complete for now: remember that it hashes to the chain, for the next reader."""
        last = self.extension.last if self.active else None
        if last is None:
            return
        stamp = trace_identity(self.bundle_path / "trace.ndjson")
        if stamp is not None and (checkpoint_dir(self.bundle_path) / f"seq-{last[0]}.ckpt").is_file():
            record_verified(self.bundle_path, stamp, *last)


def _ends_at(trace: Path, size: int, seq: int) -> bool:
    """Whether the trace's last byte ends a line and that line is ``seq``."""
    try:
        with trace.open("rb") as handle:
            handle.seek(size - 1)
            if handle.read(1) != b"\n":
                return False
    except OSError:
        return False
    return last_seq(trace) == seq


def _restore(bundle_path: Path, chain: list[Found]) -> tuple[RunState, bool] | None:
    """:func:`~piw.store.checkpoint_files.restore`, steps that cannot be read back rebuilt from the trace."""
    trace = bundle_path / "trace.ndjson"

    def rebuild(seq: int) -> list[StepRecord]:
        return list(fold(event for _, batch in _read(trace, 0, 1, seq)[0] for event in batch).steps)

    return restore(chain, rebuild)
