"""Fold checkpoint files: a snapshot of the folded state at a known ``seq``, and the checks that make it safe.

``fold-checkpoints/seq-<seq>.ckpt`` holds the state at that ``seq`` plus the byte offset and a digest of the trace
prefix it covers (``docs/bundle-format.md`` §7.1). A checkpoint is only a cache that one pure fold can always
rebuild, so it is never trusted: it is used only when its own digests match (damage), it names this run and this
fold version (foreign, or written by a piw whose fold differs), it chains to the previous checkpoint, and the trace
prefix it claims still hashes to its digest (stale: the trace was replaced or rewritten). Anything else is ignored
exactly as if the file did not exist. Hashing a long prefix costs a tenth of a second per 150 MB, so once a chain
has matched, ``verified.json`` records the trace file's device, inode, size and modification time with it; while
all four are unchanged the prefix is the bytes that were hashed and is not hashed again (any write to the trace
changes its modification time). The prefix digest is a hash chain over segments
(``chain_k = sha256(chain_{k-1} ‖ sha256(trace[off_{k-1}:off_k]))``, ``chain_0`` = 32 zero bytes), so checking a
long prefix hashes its segments on both cores at once.

File layout: a JSON header line (:class:`CheckpointHeader`), then ``headBytes`` of msgpack holding every
``RunState`` field except the steps, then ``stepsBytes`` of msgpack holding the steps finished since the previous
checkpoint. Steps are decoded only when something reads one (``len`` does not). Writing is best effort: a
read-only bundle just gets no checkpoints. Where checkpoints are left and how a reader replays from them:
``piw.store.foldcache``.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, BinaryIO

import msgspec

from piw.store.state import CurrentAttempt, RunState, StepList, StepRecord, UpdateRecord
from piw.store.trace import paused_gc

FOLD_CHECKPOINT_SCHEMA = "piw.fold-checkpoint.v1"
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
READ_CHUNK = 1 << 20
"""Bytes read from the trace at a time where it is hashed or searched."""
DECODE_ERRORS = (ValueError, UnicodeDecodeError, KeyError, TypeError)
ARTIFACT_KEY = b'"$artifact"'
"""How every artifact ref is spelled in a trace line (a byte search finds them)."""


def may_hold_ref(data: bytes) -> bool:
    """Whether ``data`` holds :data:`ARTIFACT_KEY`: a search for its ``$`` first (a ``memchr``, 0.5 us a 32 KB
    chunk), as most traces hold none; the whole key's search costs 10 us there (a ``"`` on every few bytes)."""
    return b"$" in data and ARTIFACT_KEY in data


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
class Found:
    header: CheckpointHeader
    path: Path
    head: bytes


def checkpoint_dir(bundle_path: Path) -> Path:
    return bundle_path / DIRECTORY


def headers(bundle_path: Path, run_id: str) -> list[Found]:
    """Every readable checkpoint of this run and fold version whose head digest matches, by ``seq``."""
    found: list[Found] = []
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
        found.append(Found(header, path, head))
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
        buffer = bytearray(READ_CHUNK)
        view = memoryview(buffer)
        try:
            with trace.open("rb", buffering=0) as handle:
                for i in indexes:
                    start, end = bounds[i]
                    handle.seek(start)
                    hasher = hashlib.sha256()
                    remaining = end - start
                    while remaining > 0:
                        got = handle.readinto(view[: min(remaining, READ_CHUNK)])
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
    return [found.header for found in verified_chain(bundle_path, run_id, upto_seq)]


def verified_chain(
    bundle_path: Path, run_id: str, upto_seq: int | None, *, remember: bool = True
) -> list[Found]:
    """The verified chain; ``remember`` false (a read-only viewer) leaves ``verified.json`` as it was."""
    candidates: list[Found] = []
    previous_seq = previous_offset = steps = 0
    for found in headers(bundle_path, run_id):
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
    stamp = trace_identity(trace)
    known = _verified(bundle_path, stamp)
    chain: list[Found] = []
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
        record_verified(bundle_path, stamp, chain[-1].header.seq, chain[-1].header.prefix_sha256)
    return chain


_VERIFIED = "verified.json"


def trace_identity(trace: Path) -> list[int] | None:
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


def record_verified(bundle_path: Path, stamp: list[int], seq: int, prefix_sha256: str) -> None:
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


def _load_steps(chain: list[Found]) -> list[StepRecord]:
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


def restore(chain: list[Found], rebuild: Callable[[int], list[StepRecord]]) -> tuple[RunState, bool] | None:
    """The state of the chain's last checkpoint and whether its prefix holds an artifact ref; ``None`` when the
    head does not agree with its header.

    A step read by index decodes only its own checkpoint's segment (the last few are kept), so a pager showing
    one page of a long run does not decode every step; iterating them loads them all. Steps that cannot be read
    back (damaged or changed since the chain was checked) are rebuilt by ``rebuild(seq)``, the steps of the fold
    of the trace's lines up to ``seq``."""
    base = chain[-1]
    count = base.header.step_start + base.header.step_count
    loaded: list[list[StepRecord]] = []

    def load() -> list[StepRecord]:
        if loaded:
            return loaded[0]
        try:
            steps = _load_steps(chain)
        except (OSError, *DECODE_ERRORS, msgspec.DecodeError):
            steps = rebuild(
                base.header.seq
            )  # damaged or changed since it was checked: the trace rebuilds them
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
            except (OSError, *DECODE_ERRORS, msgspec.DecodeError):
                return load()[index]
            if len(segments) >= _PEEKED_SEGMENTS:  # (the UI and a worker thread may both be reading)
                segments.pop(next(iter(segments), at), None)
            segments[at] = segment
        return segment[index - starts[at]]

    try:
        state, artifact_refs = _decode_head(base.head, StepList.lazy(count, load, peek))
    except (*DECODE_ERRORS, msgspec.DecodeError):
        return None
    if state.trace_seq != base.header.seq or state.run_id != base.header.run_id:
        return None
    if sum(attempts for attempts, _ in state.node_stats.values()) != count:
        return None  # the header's step counts are not covered by a digest: the head's own count decides
    return state, artifact_refs


def write_checkpoint(
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
    except (*DECODE_ERRORS, msgspec.DecodeError):
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


# ---- extending the chain: what a replay and the writer's trail share ------------------------------------------


class Extension:
    """The growing end of a checkpoint chain: the link so far, where the next segment starts, and its hash.

    :func:`~piw.store.foldcache.replay` (a reader folding past the last checkpoint) and
    :class:`~piw.store.foldcache.CheckpointTrail` (the writer, as it appends) both feed it the trace bytes after
    the last checkpoint and ask it to :meth:`leave` one at each boundary, so a checkpoint is built one way whoever
    writes it.
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
        if not self.artifact_refs and may_hold_ref(data):
            self.artifact_refs = True

    def catch_up(self, handle: BinaryIO, end: int) -> bool:
        """Feed the trace bytes from where the fed ones end up to offset ``end``, read from ``handle``; false when
        the file ended first (it got shorter while it was read)."""
        handle.seek(self.position)
        while self.position < end and (piece := handle.read(min(end - self.position, READ_CHUNK))):
            self.feed(piece)
        return self.position == end

    def leave(self, bundle_path: Path, state: RunState) -> None:
        """Write the checkpoint of ``state``, the fold of exactly the bytes fed so far, and start a new segment."""
        self.seal(state).write(bundle_path)

    def seal(self, state: RunState) -> Sealed:
        """End the segment at ``state`` (the fold of exactly the bytes fed so far) and start a new one: what its
        checkpoint holds, to be written now or later (:meth:`Sealed.write`). Cheap: one hash of two digests and a
        list of the segment's steps."""
        self.link = hashlib.sha256(self.link + self.segment.digest()).digest()
        where = {
            "offset": self.position,
            "previous_seq": self.previous_seq,
            "prefix_sha256": self.link.hex(),
            "step_start": self.step_start,
        }
        sealed = Sealed(state, where, state.steps.after(self.step_start), self.artifact_refs)
        self.last = (state.trace_seq, self.link.hex())
        self.previous_seq, self.step_start = state.trace_seq, len(state.steps)
        self.segment = hashlib.sha256()
        return sealed


@dataclass(frozen=True)
class Sealed:
    """One checkpoint's content, sealed by :meth:`Extension.seal`: a state is immutable, so writing it later gives
    the very file writing it at once would."""

    state: RunState
    where: dict[str, Any]
    steps: list[StepRecord]
    artifact_refs: bool

    def write(self, bundle_path: Path) -> None:
        write_checkpoint(bundle_path, self.state, self.where, self.steps, self.artifact_refs)
