"""The run writer: the only code that appends to a bundle.

Each event follows the write order of ``persistence.md`` §3: fence, externalize large strings (artifacts first),
append the line (+ fsync per durability), ``fold_more``, then refresh the caches. A lock serialises appends so
threads an action starts (updates, child agents) get one total order.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from piw.artifacts import externalize
from piw.errors import PiwError
from piw.replay import RunState, fold_more
from piw.store import Bundle, WriterLock
from piw.trace import RUN_TERMINAL_TYPES, Durability, FileLayer, LineAppender, TraceEvent
from piw.wire import Manifest, now_iso

Listener = Callable[[TraceEvent, RunState], None]
STATE_CACHE_INTERVAL_S = 1.0


class RunWriter:
    """Appends trace events for one run and keeps the folded state current."""

    def __init__(
        self,
        bundle: Bundle,
        lock: WriterLock,
        durability: Durability,
        state: RunState,
        manifest: Manifest,
        files: FileLayer | None = None,
    ) -> None:
        self.bundle = bundle
        self.lock = lock
        self.durability = durability
        self.files = files or FileLayer()
        self.trace = LineAppender(bundle.trace_path, durability, self.files)
        self.state = state
        self.manifest = manifest
        self.listeners: list[Listener] = []
        self._mutex = threading.RLock()
        self._state_written_at = 0.0
        self._closed = False

    @property
    def mutex(self) -> threading.RLock:
        """Held while appending; callers hold it to make a check-then-append atomic."""
        return self._mutex

    def _store_artifact(self, text: str) -> dict[str, Any]:
        return self.bundle.artifacts.write(text) if self.durability != "flush" else self._store_unsynced(text)

    def _store_unsynced(self, text: str) -> dict[str, Any]:
        from piw.artifacts import ArtifactStore

        return ArtifactStore(self.bundle.path, fsync=lambda fd: None).write(text)

    def append(
        self,
        scope: str,
        type: str,
        payload: dict[str, Any],
        *,
        node_id: str | None = None,
        attempt_id: str | None = None,
        sync: bool = False,
    ) -> TraceEvent:
        """Commit one event. ``sync`` marks an effect boundary that must be durable before the caller goes on."""
        with self._mutex:
            if self._closed:
                raise PiwError("The run writer is closed; nothing more can be recorded for this attempt.")
            self.lock.fence()
            event = TraceEvent(
                seq=self.state.trace_seq + 1,
                at=now_iso(),
                scope=scope,
                type=type,
                run_id=self.bundle.run_id,
                payload=externalize(payload, self._store_artifact),
                node_id=node_id,
                attempt_id=attempt_id,
            )
            terminal = type in RUN_TERMINAL_TYPES
            self.trace.append(event.encode(), sync=sync or terminal or scope == "run")
            self.state = fold_more(self.state, [event])
            self._refresh_caches(force=terminal or scope == "run")
            for listener in list(self.listeners):
                listener(event, self.state)
            return event

    def sync(self) -> None:
        """Make every appended line durable now (an effect is about to happen)."""
        with self._mutex:
            self.trace.sync()

    def _refresh_caches(self, force: bool) -> None:
        now = time.monotonic()
        if force or now - self._state_written_at >= STATE_CACHE_INTERVAL_S:
            self.bundle.write_state(self.state)
            self._state_written_at = now
        state = self.state
        manifest = self.manifest
        if (state.status, state.run_title, state.finished_at) != (
            manifest.status,
            manifest.run_title,
            manifest.finished_at,
        ):
            self.manifest = manifest.model_copy(
                update={"status": state.status, "run_title": state.run_title, "finished_at": state.finished_at}
            )
            self.bundle.write_manifest(self.manifest)

    def close(self) -> None:
        """Flush caches and release the file; the caller releases the writer lock."""
        with self._mutex:
            if self._closed:
                return
            self.trace.sync()
            self.bundle.write_state(self.state)
            self.trace.close()
            self._closed = True
