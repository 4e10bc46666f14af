"""Where a run's record lives: the seam under the run writer and the resume reader.

The trace is the commit point of a run (``docs/bundle-format.md`` §6, §11). Everything that writes it — the run
writer (``piw.store.writer``), resume's tail repair, a cancel without a holder — and resume's read of it go
through one :class:`RunStore`: create the bundle, append trace lines (durable as the durability setting says,
and at once when ``sync`` asks for it), append conversation entries, put and get artifacts, read the trace from a
``seq``, its head, and the fence that precedes every write. A store is opened through :class:`RunStores`, the
stores of one home.

Today's files are the only implementation (``piw.store.file_store``: the bundle's ``trace.ndjson``, its writer
lock and its artifacts). A store that keeps the trace in a database would implement the same protocol and keep
the bundle as a local mirror, which every reader (views, ``watch``, fold checkpoints) goes on reading:
:attr:`RunStore.bundle` is that local bundle.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from piw.store.fence import Fence
from piw.store.file_store import FileRunStores

if TYPE_CHECKING:
    from piw.store.bundle import Bundle
    from piw.store.session import SessionLog
    from piw.store.trace import Durability, FileLayer, TraceEvent, TraceRead
    from piw.wire_models import Manifest


class RunStore(Protocol):
    """One run's record. Writes need :meth:`acquire` first; each write is preceded by :meth:`fence`."""

    @property
    def run_id(self) -> str: ...

    @property
    def bundle(self) -> Bundle:
        """The run's bundle on this machine: what readers read."""
        ...

    # ---- who may write -----------------------------------------------------------------------------------

    def acquire(self, claim: Fence | None = None) -> RunStore:
        """Take the run for writing under ``claim`` (the holder's lease, or none without a run queue); this store.

        Raises ``RunLocked`` while another process writes the run."""
        ...

    def fence(self) -> None:
        """Raise unless this process may still write: the run is taken and the claim (if any) is still its own."""
        ...

    def release(self) -> None:
        """Let the run go; nothing more may be written through this store."""
        ...

    # ---- the trace -----------------------------------------------------------------------------------------

    def append(self, line: bytes, *, sync: bool = False, ride_along: bool = False) -> None:
        """Commit one complete trace line (the caller fenced). ``sync``: durable before this returns, as the
        durability setting says; ``ride_along``: a line that may be recomputed, which forces no fsync of its own."""
        ...

    def sync(self) -> None:
        """Make every appended line durable (nothing to do under ``flush``)."""
        ...

    def sync_required(self) -> None:
        """Before an external effect: make durable what it may depend on (ride-along lines wait)."""
        ...

    def held_due(self) -> float | None:
        """When the ride-along lines this store holds back must be sent (``time.monotonic()``), or ``None``
        when it holds none. Database mode holds them to send with the next statement (``docs/many-machines.md``,
        "The trace in rows"); files hold nothing."""
        ...

    def send_held(self) -> None:
        """Send the held ride-along lines now (the writer's idle flusher, when no next line came in time)."""
        ...

    def close(self) -> None:
        """Close the trace for appends (the run stays taken until :meth:`release`)."""
        ...

    def read_trace(self, from_seq: int = 1) -> TraceRead:
        """The valid prefix of the trace from ``from_seq`` on, and what follows it (a torn tail); ``TraceCorrupt``
        for a damaged line that is not the last."""
        ...

    def iter_trace(self, from_seq: int = 1) -> Iterator[TraceEvent]:
        """The valid prefix of the trace from ``from_seq`` on, streamed."""
        ...

    def head(self) -> int:
        """The ``seq`` of the last committed line (0: nothing committed yet)."""
        ...

    def unchanged(self, valid_bytes: int, tail: bytes) -> bool:
        """Whether the trace is still what a read found: its valid prefix of ``valid_bytes``, then ``tail`` (lines are
        never rewritten and only a torn tail is ever cut, so nothing else can have changed)."""
        ...

    def repair_tail(self, valid_bytes: int, torn_bytes: int) -> int:
        """Remove the ``torn_bytes`` a read found after the valid prefix of ``valid_bytes`` (the caller fenced); the
        bytes removed."""
        ...

    def discard(self) -> None:
        """Remove a run whose ``run_started`` never committed (nothing started: nothing is left behind)."""
        ...

    # ---- the conversation and artifacts ------------------------------------------------------------------

    def open_session(self) -> SessionLog:
        """The run's conversation record, open for appends fenced by this store."""
        ...

    def put_artifact(self, text: str) -> dict[str, Any]:
        """Store a large string (the caller fenced); its ref body. Durable before a line names it."""
        ...

    def get_artifact(self, ref: dict[str, Any]) -> str:
        """The text of an artifact ref (``ArtifactDamaged`` when it is missing or changed)."""
        ...

    def copy_artifacts(self, source: Bundle) -> int:
        """Copy every artifact of another run's bundle into this run's (a fork); fenced; how many were copied."""
        ...


class RunStores(Protocol):
    """The run stores of one home."""

    def create(self, run_id: str, snapshot: dict[str, Any], manifest: Manifest) -> RunStore:
        """A new run's store with its immutable definition snapshot and first manifest (``run_started`` comes
        next); runs of this home that never started are set aside first."""
        ...

    def open(self, run_id: str) -> RunStore:
        """The store of an existing run (``RunNotFound`` when there is none)."""
        ...

    def head(self, run_id: str) -> int:
        """The ``seq`` of a run's last committed trace line (0: none, or no such run); ``TraceCorrupt`` when its
        trace is damaged before its end."""
        ...


def open_run_stores(
    home: Path, durability: Durability = "effects", files: FileLayer | None = None
) -> RunStores:
    """The run stores of ``home``: its bundles on this machine, or in database mode the database's rows with a
    local mirror per run (``piw.store.place``)."""
    from piw.store.place import database_place

    place = database_place(home)
    if place is not None:
        stores: RunStores = place.run_stores(durability, files)
        return stores
    return FileRunStores(home, durability, files)
