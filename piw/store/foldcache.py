"""Fold checkpoints: snapshots of the folded state at known ``seq``\\ s, kept in the bundle as a cache.

Replaying a long trace costs seconds; every reader (``inspect`` and its views, ``--at``, ``watch``, the viewer)
needs the state at some point of it. Every :data:`CHECKPOINT_EVERY` events the run's writer
(:class:`CheckpointTrail`), or a reader that folded past that point, leaves ``fold-checkpoints/seq-<seq>.ckpt``:
the state at that ``seq`` plus the byte offset and a digest of the trace prefix it covers. The next reader
starts from the newest checkpoint at or before where it wants to be and folds only the tail, so
``fold_more(checkpoint, tail) == fold(trace)`` gives the same state as a full replay.

A checkpoint is only a cache that one pure fold can always rebuild, so it is never trusted: it is used only when
its own digests match (damage), it names this run and this fold version (foreign, or written by a piw whose
fold differs), it chains to the previous checkpoint, and the trace prefix it claims still hashes to its digest
(stale: the trace was replaced or rewritten). Anything else is ignored exactly as if the file did not exist.
Hashing a long prefix costs a tenth of a second per 150 MB, so once a chain has matched, ``verified.json`` records
the trace file's device, inode, size and modification time with it; while all four are unchanged the prefix is
the bytes that were hashed and is not hashed again (any write to the trace changes its modification time). The
prefix digest is a hash chain over segments (``chain_k = sha256(chain_{k-1} ‖ sha256(trace[off_{k-1}:off_k]))``,
``chain_0`` = 32 zero bytes), so checking a long prefix hashes its segments on both cores at once.

File layout (``docs/bundle-format.md``): a JSON header line (:class:`CheckpointHeader`), then ``headBytes`` of
msgpack holding every ``RunState`` field except the steps, then ``stepsBytes`` of msgpack holding the steps
finished since the previous checkpoint. Steps are decoded only when something reads one (``len`` does not).
Writing is best effort: a read-only bundle just gets no checkpoints.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
from bisect import bisect_right
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, BinaryIO

import msgspec

from piw.store.damage import Damage, line_damage
from piw.store.replay import fold, fold_more
from piw.store.state import CurrentAttempt, RunState, StepList, StepRecord, UpdateRecord
from piw.store.trace import TraceEvent, decode_event, decode_lines, last_seq, paused_gc

FOLD_CHECKPOINT_SCHEMA = "piw.fold-checkpoint.v1"
CHECKPOINT_EVERY = int(os.environ.get("PIW_TEST_CHECKPOINT_EVERY", "") or 20_000)
"""Events between checkpoints: a reader folds at most this many events past the one it starts from.
(``PIW_TEST_CHECKPOINT_EVERY`` lowers it for the tests that crash a ``piw`` process.)"""
DIRECTORY = "fold-checkpoints"
_FOLD_CODE = 2
"""Bump when the fold gives a different state for the same events, or the head holds something new: older
checkpoints then count as stale (2: the head records whether the prefix holds an artifact ref)."""
_STATE_FIELDS = tuple(f.name for f in fields(RunState))
FOLD_VERSION = f"{_FOLD_CODE}-" + hashlib.sha256(",".join(_STATE_FIELDS).encode()).hexdigest()[:12]
"""The fold's version and the shape of ``RunState``: a checkpoint written by another version is ignored."""
_SEQUENCE_FIELDS: dict[str, Callable[[list[Any]], Any]] = {
    f.name: frozenset if str(f.type).startswith("frozenset") else tuple
    for f in fields(RunState)
    if str(f.type).startswith(("frozenset", "tuple"))
}
"""State fields declared as tuples or frozensets (``RunState`` grows; the head decoder must not lag behind)."""
_NAME = re.compile(r"seq-(\d{1,12})\.ckpt")
_ZERO = bytes(32)
_CHUNK = 1 << 20
_DECODE_CHUNK = 1 << 15
"""Bytes decoded in one call: about 125 lines (a megabyte at once was slower: the events left the cache before
the fold used them)."""
_BATCH = 256
_DECODE_ERRORS = (ValueError, UnicodeDecodeError, KeyError, TypeError)


class CheckpointHeader(msgspec.Struct, frozen=True, rename="camel"):
    """The first line of a checkpoint file (JSON)."""

    schema: str
    fold_version: str
    run_id: str
    seq: int
    """The state is the fold of trace lines ``1..seq``."""
    offset: int
    """Bytes of ``trace.ndjson`` those lines take (the line of ``seq`` ends at ``offset - 1`` with ``\\n``)."""
    previous_seq: int
    """The checkpoint this one continues (0 for the first): its steps come before this one's."""
    prefix_sha256: str
    """The hash chain over the trace prefix ``[0, offset)`` (module docstring)."""
    step_start: int
    step_count: int
    head_bytes: int
    head_sha256: str
    steps_bytes: int
    steps_sha256: str


@dataclass(frozen=True)
class _Found:
    header: CheckpointHeader
    path: Path
    head: bytes


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


def checkpoint_dir(bundle_path: Path) -> Path:
    return bundle_path / DIRECTORY


def _headers(bundle_path: Path, run_id: str) -> list[_Found]:
    """Every readable checkpoint of this run and fold version whose head digest matches, by ``seq``."""
    found: list[_Found] = []
    try:
        names = os.listdir(checkpoint_dir(bundle_path))
    except OSError:
        return found
    for name in names:
        if _NAME.fullmatch(name) is None:
            continue
        path = checkpoint_dir(bundle_path) / name
        try:
            with path.open("rb") as handle:
                header = msgspec.json.decode(handle.readline(4096), type=CheckpointHeader)
                head = handle.read(header.head_bytes)
        except (OSError, msgspec.DecodeError):
            continue
        if (
            header.schema != FOLD_CHECKPOINT_SCHEMA
            or header.fold_version != FOLD_VERSION
            or header.run_id != run_id
            or name != f"seq-{header.seq}.ckpt"
            or len(head) != header.head_bytes
            or hashlib.sha256(head).hexdigest() != header.head_sha256
        ):
            continue
        found.append(_Found(header, path, head))
    found.sort(key=lambda item: item.header.seq)
    return found


def _hash_segments(trace: Path, bounds: list[tuple[int, int]]) -> list[bytes] | None:
    """``sha256`` of each ``[start, end)`` of the trace, on two threads (hashlib releases the GIL).

    Read in 1 MiB pieces into one reused buffer per thread (no mapping: touched pages of a mapped file would count
    as this process's memory).
    """
    if not bounds:
        return []
    try:
        if bounds[-1][1] > trace.stat().st_size:
            return None
    except OSError:
        return None
    digests: list[bytes] = [b""] * len(bounds)
    failed: list[BaseException] = []

    def work(indexes: range) -> None:
        buffer = bytearray(_CHUNK)
        view = memoryview(buffer)
        try:
            with trace.open("rb", buffering=0) as handle:
                for i in indexes:
                    start, end = bounds[i]
                    handle.seek(start)
                    hasher = hashlib.sha256()
                    remaining = end - start
                    while remaining > 0:
                        got = handle.readinto(view[: min(remaining, _CHUNK)])
                        if not got:
                            raise OSError("the trace got shorter while it was read")
                        hasher.update(view[:got])
                        remaining -= got
                    digests[i] = hasher.digest()
        except OSError as exc:
            failed.append(exc)

    total = bounds[-1][1]
    middle = next((i for i, (_, end) in enumerate(bounds) if end >= total / 2), len(bounds) - 1)
    helper = threading.Thread(target=work, args=(range(middle + 1, len(bounds)),))
    helper.start()
    work(range(0, middle + 1))
    helper.join()
    return None if failed else digests


def valid_checkpoints(bundle_path: Path, run_id: str, upto_seq: int | None = None) -> list[CheckpointHeader]:
    """The unbroken chain of trustworthy checkpoints from the first one, ending at or before ``upto_seq``."""
    return [found.header for found in _chain(bundle_path, run_id, upto_seq)]


def _chain(bundle_path: Path, run_id: str, upto_seq: int | None, *, remember: bool = True) -> list[_Found]:
    """The verified chain; ``remember`` false (a read-only viewer) leaves ``verified.json`` as it was."""
    candidates: list[_Found] = []
    previous_seq = previous_offset = steps = 0
    for found in _headers(bundle_path, run_id):
        header = found.header
        if upto_seq is not None and header.seq > upto_seq:
            break
        if header.seq == previous_seq:
            continue  # a second file for the same seq cannot exist (names are unique); be safe anyway
        if (
            header.previous_seq != previous_seq
            or header.step_start != steps
            or header.offset <= previous_offset
        ):
            break
        candidates.append(found)
        previous_seq, previous_offset, steps = (
            header.seq,
            header.offset,
            header.step_start + header.step_count,
        )
    try:
        size = (bundle_path / "trace.ndjson").stat().st_size
    except OSError:
        return []
    candidates = [found for found in candidates if found.header.offset <= size]
    if not candidates:
        return []
    trace = bundle_path / "trace.ndjson"
    stamp = _trace_stamp(trace)
    known = _verified(bundle_path, stamp)
    chain: list[_Found] = []
    link, start = _ZERO, 0
    if known is not None and any((f.header.seq, f.header.prefix_sha256) == known for f in candidates):
        # this very file (same inode, size and mtime) already hashed to this chain: only what follows is hashed
        chain = [f for f in candidates if f.header.seq <= known[0]]
        candidates = candidates[len(chain) :]
        link, start = bytes.fromhex(known[1]), chain[-1].header.offset
    bounds = []
    for found in candidates:
        bounds.append((start, found.header.offset))
        start = found.header.offset
    digests = _hash_segments(trace, bounds)
    if digests is None:
        return chain
    for found, digest in zip(candidates, digests, strict=True):
        link = hashlib.sha256(link + digest).digest()
        if link.hex() != found.header.prefix_sha256:
            break
        chain.append(found)
    if remember and candidates and chain and stamp is not None:
        _remember(bundle_path, stamp, chain[-1].header.seq, chain[-1].header.prefix_sha256)
    return chain


_VERIFIED = "verified.json"


def _trace_stamp(trace: Path) -> list[int] | None:
    """The trace file's identity and version: device, inode, size and modification time (ns)."""
    try:
        info = trace.stat()
    except OSError:
        return None
    return [info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns]


def _verified(bundle_path: Path, stamp: list[int] | None) -> tuple[int, str] | None:
    """The checkpoint whose prefix was last hashed and matched, if the trace has not changed since."""
    if stamp is None:
        return None
    try:
        data = msgspec.json.decode((checkpoint_dir(bundle_path) / _VERIFIED).read_bytes())
    except (OSError, msgspec.DecodeError):
        return None
    if not isinstance(data, dict) or data.get("trace") != stamp or data.get("foldVersion") != FOLD_VERSION:
        return None
    seq, digest = data.get("seq"), data.get("prefixSha256")
    return (seq, digest) if isinstance(seq, int) and isinstance(digest, str) else None


def _remember(bundle_path: Path, stamp: list[int], seq: int, prefix_sha256: str) -> None:
    from piw.store.bundle import write_private_file

    record = {"trace": stamp, "foldVersion": FOLD_VERSION, "seq": seq, "prefixSha256": prefix_sha256}
    try:
        write_private_file(checkpoint_dir(bundle_path) / _VERIFIED, msgspec.json.encode(record))
    except OSError:
        return


# ---- the state in a checkpoint ----------------------------------------------------------------------------


_REFS = "artifactRefs"
"""The one head entry that is not a ``RunState`` field: whether the prefix holds an artifact ref. It is in the
head, not the header, so its digest covers it."""


def _encode_head(state: RunState, artifact_refs: bool) -> bytes:
    head: dict[str, Any] = {name: getattr(state, name) for name in _STATE_FIELDS if name != "steps"}
    head["updates"] = list(state.updates.values())
    head[_REFS] = artifact_refs
    return msgspec.msgpack.encode(head)


def _decode_head(data: bytes, steps: StepList) -> tuple[RunState, bool]:
    raw: dict[str, Any] = msgspec.msgpack.decode(data)
    artifact_refs = raw.pop(_REFS, True)
    if set(raw) != set(_STATE_FIELDS) - {"steps"} or type(artifact_refs) is not bool:
        raise ValueError("checkpoint head has other fields than RunState")
    raw["results"] = {node: msgspec.convert(step, StepRecord) for node, step in raw["results"].items()}
    updates = [msgspec.convert(item, UpdateRecord) for item in raw["updates"]]
    raw["updates"] = {(record.type, record.key): record for record in updates}
    if raw["current"] is not None:
        raw["current"] = msgspec.convert(raw["current"], CurrentAttempt)
    raw["node_stats"] = {node: (int(count), total) for node, (count, total) in raw["node_stats"].items()}
    for name, kind in _SEQUENCE_FIELDS.items():  # msgpack has arrays only: give back the declared container
        if isinstance(raw[name], list):
            raw[name] = kind(raw[name])
    raw["steps"] = steps
    return RunState(**raw), artifact_refs


_STEPS_DECODER = msgspec.msgpack.Decoder(list[StepRecord])
_PEEKED_SEGMENTS = 4
"""Checkpoint segments a restored state keeps decoded for steps read by index (a page can straddle two)."""


def _load_steps(chain: list[_Found]) -> list[StepRecord]:
    """The steps of every checkpoint of the chain, each segment checked against its digest."""
    steps: list[StepRecord] = []
    with paused_gc():
        for found in chain:
            header = found.header
            with found.path.open("rb") as handle:
                handle.readline(4096)
                handle.seek(header.head_bytes, os.SEEK_CUR)
                blob = handle.read(header.steps_bytes)
            if len(blob) != header.steps_bytes or hashlib.sha256(blob).hexdigest() != header.steps_sha256:
                raise ValueError(f"{found.path.name}: steps do not match their digest")
            segment = _STEPS_DECODER.decode(blob)
            if len(segment) != header.step_count:
                raise ValueError(f"{found.path.name}: wrong number of steps")
            steps.extend(segment)
    return steps


def _restore(bundle_path: Path, chain: list[_Found]) -> tuple[RunState, bool] | None:
    """The state of the chain's last checkpoint and whether its prefix holds an artifact ref; ``None`` when the
    head does not agree with its header.

    A step read by index decodes only its own checkpoint's segment (the last few are kept), so a pager showing
    one page of a long run does not decode every step; iterating them loads them all."""
    base = chain[-1]
    count = base.header.step_start + base.header.step_count
    trace = bundle_path / "trace.ndjson"
    loaded: list[list[StepRecord]] = []

    def load() -> list[StepRecord]:
        if loaded:
            return loaded[0]
        try:
            steps = _load_steps(chain)
        except (OSError, *_DECODE_ERRORS, msgspec.DecodeError):
            # damaged or changed since it was checked: the trace alone rebuilds them
            prefix = fold(event for _, batch in _read(trace, 0, 1, base.header.seq)[0] for event in batch)
            steps = list(prefix.steps)
        loaded.append(steps)
        return steps

    starts = [found.header.step_start for found in chain]
    segments: dict[int, list[StepRecord]] = {}

    def peek(index: int) -> StepRecord:
        if loaded:
            return loaded[0][index]
        at = bisect_right(starts, index) - 1
        segment = segments.get(at)
        if segment is None:
            try:
                segment = _load_steps(chain[at : at + 1])
            except (OSError, *_DECODE_ERRORS, msgspec.DecodeError):
                return load()[index]
            if len(segments) >= _PEEKED_SEGMENTS:  # (the UI and a worker thread may both be reading)
                segments.pop(next(iter(segments), at), None)
            segments[at] = segment
        return segment[index - starts[at]]

    try:
        state, artifact_refs = _decode_head(base.head, StepList.lazy(count, load, peek))
    except (*_DECODE_ERRORS, msgspec.DecodeError):
        return None
    if state.trace_seq != base.header.seq or state.run_id != base.header.run_id:
        return None
    if sum(attempts for attempts, _ in state.node_stats.values()) != count:
        return None  # the header's step counts are not covered by a digest: the head's own count decides
    return state, artifact_refs


def _write(
    bundle_path: Path,
    state: RunState,
    header_fields: dict[str, Any],
    steps: list[StepRecord],
    artifact_refs: bool,
) -> None:
    """Write one checkpoint (temp file, then rename); silently nothing when the bundle is not writable."""
    from piw.store.bundle import write_private_file  # bundle imports the fold too; keep this module light

    head = _encode_head(state, artifact_refs)
    try:
        if _decode_head(head, state.steps) != (state, artifact_refs):
            return  # a field this encoding does not round-trip exactly: no checkpoint rather than a wrong one
    except (*_DECODE_ERRORS, msgspec.DecodeError):
        return
    try:
        blob = msgspec.msgpack.encode(steps)
    except (TypeError, OverflowError, ValueError):
        return
    header = CheckpointHeader(
        schema=FOLD_CHECKPOINT_SCHEMA,
        fold_version=FOLD_VERSION,
        run_id=state.run_id,
        seq=state.trace_seq,
        head_bytes=len(head),
        head_sha256=hashlib.sha256(head).hexdigest(),
        steps_bytes=len(blob),
        steps_sha256=hashlib.sha256(blob).hexdigest(),
        step_count=len(steps),
        **header_fields,
    )
    directory = checkpoint_dir(bundle_path)
    try:
        if not directory.is_dir():
            directory.mkdir(mode=0o700)
        data = msgspec.json.encode(header) + b"\n" + head + blob
        write_private_file(directory / f"seq-{state.trace_seq}.ckpt", data)
    except OSError:
        return


# ---- extending the chain: what replay and the writer's trail share ---------------------------------------------


class _Extension:
    """The growing end of a checkpoint chain: the link so far, where the next segment starts, and its hash.

    :func:`replay` (a reader folding past the last checkpoint) and :class:`CheckpointTrail` (the writer, as it
    appends) both feed it the trace bytes after the last checkpoint and ask it to :meth:`leave` one at each
    boundary, so a checkpoint is built one way whoever writes it.
    """

    def __init__(self, base: CheckpointHeader | None, artifact_refs: bool) -> None:
        self.link = bytes.fromhex(base.prefix_sha256) if base else _ZERO
        self.previous_seq = base.seq if base else 0
        self.step_start = base.step_start + base.step_count if base else 0
        self.position = base.offset if base else 0
        self.artifact_refs = artifact_refs
        self.segment = hashlib.sha256()
        self.last: tuple[int, str] | None = (base.seq, base.prefix_sha256) if base else None
        """``(seq, prefixSha256)`` of the newest checkpoint of the chain."""

    def feed(self, data: bytes) -> None:
        """Trace bytes that follow those fed before (the next lines after the last checkpoint)."""
        self.segment.update(data)
        self.position += len(data)
        if not self.artifact_refs and _ARTIFACT_KEY in data:
            self.artifact_refs = True

    def catch_up(self, handle: BinaryIO, end: int) -> bool:
        """Feed the trace bytes from where the fed ones end up to offset ``end``, read from ``handle``; false when
        the file ended first (it got shorter while it was read)."""
        handle.seek(self.position)
        while self.position < end and (piece := handle.read(min(end - self.position, _CHUNK))):
            self.feed(piece)
        return self.position == end

    def leave(self, bundle_path: Path, state: RunState) -> None:
        """Write the checkpoint of ``state``, the fold of exactly the bytes fed so far, and start a new segment."""
        self.link = hashlib.sha256(self.link + self.segment.digest()).digest()
        where = {"offset": self.position, "previous_seq": self.previous_seq, "prefix_sha256": self.link.hex(),
                 "step_start": self.step_start}  # fmt: skip
        _write(bundle_path, state, where, state.steps.after(self.step_start), self.artifact_refs)
        self.last = (state.trace_seq, self.link.hex())
        self.previous_seq, self.step_start = state.trace_seq, len(state.steps)
        self.segment = hashlib.sha256()


# ---- reading the trace from an offset -----------------------------------------------------------------------


@dataclass
class _ReadOutcome:
    """What a stream from :func:`_read` found, complete once it is exhausted."""

    damage: Damage | None = None
    next_at: str | None = None
    artifact_refs: bool = False
    """Whether the bytes read so far hold ``"$artifact"`` (a whole chunk is searched at once, so it may be set by
    a line just past the events yielded: never false when one of them holds a ref)."""


_ARTIFACT_KEY = b'"$artifact"'


def _read(
    trace: Path, offset: int, seq: int, at: int | None, feed: Callable[[bytes], None] | None = None
) -> tuple[Iterator[tuple[int, list[TraceEvent]]], _ReadOutcome]:
    """Stream ``(end offset, events)`` batches from ``offset`` (whose line has ``seq``) up to ``at``.

    ``feed``, when given, gets the bytes of each batch's lines just before the batch is yielded, so a reader that
    leaves checkpoints hashes exactly the bytes it decoded without reading the file a second time.

    A batch is the lines of one chunk decoded in one call (:func:`piw.store.trace.decode_lines`), cut after
    every checkpoint boundary (``seq`` a multiple of :data:`CHECKPOINT_EVERY`), so a boundary event always ends
    its batch and the offset is exact there. A chunk that holds a bad line, or the line past ``at``, is read
    line by line (one event per batch). The torn-tail rule of ``persistence.md`` §5 holds as for a read from
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
            position, expected, damaged, rest = offset, seq, 0, b""
            while chunk := handle.read(_DECODE_CHUNK):
                data = rest + chunk
                cut = data.rfind(b"\n") + 1
                body, rest = data[:cut], data[cut:]
                if not outcome.artifact_refs and _ARTIFACT_KEY in body:
                    outcome.artifact_refs = True
                batch = None if damaged or not body else decode_lines(body, expected)
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
                    except _DECODE_ERRORS:
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


def replay(bundle_path: Path, run_id: str, at: int | None = None, *, write: bool = True) -> Replay:
    """The state of a run at ``at`` (the end of its valid trace without it), from the best checkpoint.

    This is the read API every reader uses: ``inspect`` and its views, ``--at``, ``watch`` and the viewer.
    While folding past the last checkpoint it leaves new ones every :data:`CHECKPOINT_EVERY` events (unless
    ``write`` is false), so the next read of this run, at any point, folds at most that many events.
    """
    chain = _chain(bundle_path, run_id, at, remember=write)
    return _replay_from(bundle_path, chain, _restore(bundle_path, chain) if chain else None, at, write)


def replay_near_end(bundle_path: Path, run_id: str, since: int) -> Replay | None:
    """``replay(bundle_path, run_id, write=False)`` when a trusted checkpoint at or after ``since`` exists, so
    at most the events after it are folded; ``None`` otherwise, having folded nothing (the viewer's first
    screen of a long run: a checkpoint's head and the tail instead of a long ``state.json``)."""
    found = _headers(bundle_path, run_id)
    if not found or found[-1].header.seq < since:
        return None  # (before hashing a prefix for a checkpoint too far back to use)
    chain = _chain(bundle_path, run_id, None, remember=False)
    if not chain or chain[-1].header.seq < since:
        return None
    restored = _restore(bundle_path, chain)
    return None if restored is None else _replay_from(bundle_path, chain, restored, None, False)


def _replay_from(
    bundle_path: Path,
    chain: list[_Found],
    restored: tuple[RunState, bool] | None,
    at: int | None,
    write: bool,
) -> Replay:
    """:func:`replay` from the verified ``chain`` and the state :func:`_restore` made of it."""
    if restored is None:
        chain, (state, refs_before) = [], (RunState(), False)
    else:
        state, refs_before = restored
    base = chain[-1].header if chain else None
    offset = base.offset if base else 0
    extension = _Extension(base, refs_before)
    trace = bundle_path / "trace.ndjson"
    stream, found = _read(trace, offset, (base.seq if base else 0) + 1, at, extension.feed if write else None)
    position = offset
    batch: list[TraceEvent] = []
    with paused_gc():
        for end, events in stream:
            position = end
            batch.extend(events)
            boundary = write and not events[-1].seq % CHECKPOINT_EVERY
            if len(batch) >= _BATCH or boundary:
                # a chunk of events at most: they are dropped as soon as they are folded (bounded memory)
                state = fold_more(state, batch)
                batch = []
            if boundary:  # the extension was fed exactly the bytes of the events folded so far
                extension.leave(bundle_path, state)
        state = fold_more(state, batch)
    return Replay(
        state,
        position,
        state.trace_seq + 1,
        found.damage,
        found.next_at,
        base.seq if base else 0,
        artifact_refs=refs_before or found.artifact_refs,
    )


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
            chunk = handle.read(min(_CHUNK, end - position))
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
        chain = _chain(bundle_path, state.run_id, state.trace_seq, remember=False) if size else []
        restored = _restore(bundle_path, chain) if chain else None
        base = chain[-1].header if chain and restored is not None else None
        self.extension = _Extension(base, restored[1] if base and restored else False)
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
        stamp = _trace_stamp(self.bundle_path / "trace.ndjson")
        if stamp is not None and (checkpoint_dir(self.bundle_path) / f"seq-{last[0]}.ckpt").is_file():
            _remember(self.bundle_path, stamp, *last)


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
