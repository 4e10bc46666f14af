"""Run stores on this machine's disk: the bundle's files, its writer lock and its artifacts (``docs/bundle-format.md``).

:class:`FileRunStore` is :class:`~piw.store.run_store.RunStore` over one bundle: trace lines go to ``trace.ndjson``
through a :class:`~piw.store.trace.LineAppender` (``os.write`` on an fd opened at the first append, fsync as the
durability setting says, ``docs/bundle-format.md`` §11), the conversation to ``session/entries.ndjson``, large
strings to ``artifacts/``. Its fence is the bundle's writer lock, held from :meth:`FileRunStore.acquire` to
:meth:`FileRunStore.release`, and then the holder's claim: the claim in the run database decides who may write,
the lock closes the gap between the claim's check and the write (``docs/detached.md``, "What the database holds").
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from piw.errors import RunLocked
from piw.store.artifacts import ArtifactStore
from piw.store.bundle import (
    Bundle,
    WriterLock,
    copy_artifacts,
    create_bundle,
    discard_incomplete,
    open_bundle,
    set_aside_incomplete,
)
from piw.store.fence import Fence
from piw.store.session import SessionLog
from piw.store.trace import (
    Durability,
    FileLayer,
    LineAppender,
    TraceEvent,
    TraceRead,
    read_trace,
    truncate_tail,
)
from piw.store.trace import iter_trace as iter_trace_file

if TYPE_CHECKING:
    from piw.wire_models import Manifest


class FileRunStore:
    """:class:`~piw.store.run_store.RunStore` over one bundle directory."""

    def __init__(
        self, bundle: Bundle, durability: Durability = "effects", files: FileLayer | None = None
    ) -> None:
        self.bundle = bundle
        self.run_id = bundle.run_id
        self.durability = durability
        self.files = files or FileLayer()
        self._lock = WriterLock(bundle)
        self._claim: Fence | None = None
        self._trace: LineAppender | None = None
        """Opened (and the file created) by the first append, so a store that only reads creates nothing."""
        self._artifacts = ArtifactStore(
            bundle.path, fsync=(lambda fd: None) if durability == "flush" else self.files.fsync
        )

    # ---- who may write -----------------------------------------------------------------------------------

    def acquire(self, claim: Fence | None = None) -> FileRunStore:
        self._lock.acquire()
        self._claim = claim
        return self

    def fence(self) -> None:
        if not self._lock.held:
            raise RunLocked(f"Run {self.run_id}: writer lock not held.")
        if self._claim is not None:
            self._claim.fence()

    def release(self) -> None:
        self._lock.release()

    # ---- the trace -----------------------------------------------------------------------------------------

    def append(self, line: bytes, *, sync: bool = False, ride_along: bool = False) -> None:
        if self._trace is None:
            self._trace = LineAppender(self.bundle.trace_path, self.durability, self.files)
        self._trace.append(line, sync=sync, ride_along=ride_along)

    def sync(self) -> None:
        if self._trace is not None:
            self._trace.sync()

    def sync_required(self) -> None:
        if self._trace is not None:
            self._trace.sync_required()

    def held_due(self) -> float | None:
        return None  # every line is written at once (its fsync may wait, the write does not)

    def send_held(self) -> None:
        pass

    def close(self) -> None:
        if self._trace is not None:
            self._trace.close()

    def read_trace(self, from_seq: int = 1) -> TraceRead:
        read = read_trace(self.bundle.trace_path)
        if from_seq <= 1:
            return read
        return TraceRead(read.events[from_seq - 1 :], read.valid_bytes, read.torn_bytes, read.tail)

    def iter_trace(self, from_seq: int = 1) -> Iterator[TraceEvent]:
        for event in iter_trace_file(self.bundle.trace_path):
            if event.seq >= from_seq:
                yield event

    def head(self) -> int:
        return trace_head(self.bundle.trace_path)

    def unchanged(self, valid_bytes: int, tail: bytes) -> bool:
        try:
            with self.bundle.trace_path.open("rb") as handle:
                handle.seek(valid_bytes)
                return handle.read() == tail
        except FileNotFoundError:
            return False

    def repair_tail(self, valid_bytes: int, torn_bytes: int) -> int:
        if torn_bytes <= 0:
            return 0
        return truncate_tail(self.bundle.trace_path, valid_bytes, self.files)

    def discard(self) -> None:
        discard_incomplete(self.bundle)

    # ---- the conversation and artifacts ------------------------------------------------------------------

    def open_session(self) -> SessionLog:
        return SessionLog(self.bundle.session_path, self.durability, self.files, fence=self.fence)

    def put_artifact(self, text: str) -> dict[str, Any]:
        return self._artifacts.write(text)

    def get_artifact(self, ref: dict[str, Any]) -> str:
        return self._artifacts.read(ref)

    def copy_artifacts(self, source: Bundle) -> int:
        self.fence()  # artifacts are bundle writes too
        return copy_artifacts(source, self.bundle)


def trace_head(trace: Path) -> int:
    """The ``seq`` of the last line of a trace file's valid prefix (0: no file, or nothing committed)."""
    events = read_trace(trace).events
    return events[-1].seq if events else 0


class FileRunStores:
    """:class:`~piw.store.run_store.RunStores` over ``home/runs``: one bundle directory per run."""

    def __init__(
        self, home: Path, durability: Durability = "effects", files: FileLayer | None = None
    ) -> None:
        self.home = home
        self.durability = durability
        self.files = files

    def create(self, run_id: str, snapshot: dict[str, Any], manifest: Manifest) -> FileRunStore:
        set_aside_incomplete(self.home)  # bundles of runs killed before they started (none are retried)
        return FileRunStore(create_bundle(self.home, run_id, snapshot, manifest), self.durability, self.files)

    def open(self, run_id: str) -> FileRunStore:
        return FileRunStore(open_bundle(self.home, run_id), self.durability, self.files)

    def head(self, run_id: str) -> int:
        bundle_dir = self.home / "runs" / run_id
        return trace_head(bundle_dir / "trace.ndjson") if bundle_dir.is_dir() else 0
