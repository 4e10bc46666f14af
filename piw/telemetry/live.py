"""Live OpenTelemetry export: each attempt's spans leave as the attempt finishes, the run's when it stops.

``[telemetry] otlp_endpoint`` (or ``OTEL_EXPORTER_OTLP_ENDPOINT``) makes :func:`piw.telemetry.hook.live_listeners`
add one writer
listener to every run a process opens — foreground, resumed or on ``piw host`` (``docs/telemetry.md``). The
listener only builds the spans (:mod:`piw.telemetry.spans`, from the folded step and the in-memory conversation)
and hands them to the process's :class:`LiveExporter`; it never waits. The exporter's thread imports the SDK,
sends, and counts: a full queue or a collector that is down drops spans (counted in the run's
``telemetry.json``, shown by ``piw inspect``) instead of slowing or failing the run. A run that ends waits
for its last spans at most ``timeout_s`` when it closes, and not at all once the collector is known to be down.
"""

from __future__ import annotations

import atexit
import logging
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from piw.redaction import redactor_for
from piw.store.telemetry_status import write_telemetry
from piw.store.trace import NODE_TERMINAL_TYPES, RUN_TERMINAL_TYPES, TraceEvent
from piw.telemetry.config import LiveSettings
from piw.telemetry.spans import SpanBuilder, SpanSpec, entries_of
from piw.wire import now_iso

if TYPE_CHECKING:
    from piw.store.fold import RunState
    from piw.store.session import SessionLog
    from piw.store.writer import Listener, RunWriter

log = logging.getLogger(__name__)
RETRY_S = 5.0
"""After the collector could not be reached, spans are dropped without trying for this long."""
BATCH_SPANS = 512


@dataclass
class _RunCounts:
    bundle_path: Path
    sent: int = 0
    dropped: int = 0
    last_error: str | None = None
    finished: bool = False
    dirty: bool = False


@dataclass
class LiveExporter:
    """One per process and endpoint: a bounded queue of spans and the thread that sends them."""

    settings: LiveSettings
    _lock: threading.Condition = field(default_factory=threading.Condition, repr=False)
    _pending: deque[tuple[str, list[SpanSpec]]] = field(default_factory=deque, repr=False)
    _pending_spans: int = 0
    _busy: bool = False
    _down_until: float = 0.0
    _healthy: bool = False
    _broken: str | None = None
    """Why nothing can ever be sent (``piw[otel]`` missing, a malformed endpoint): every span is dropped."""
    _runs: dict[str, _RunCounts] = field(default_factory=dict, repr=False)
    _thread: threading.Thread | None = None
    _closed: bool = False

    @property
    def shown(self) -> str:
        from piw.telemetry.otlp import shown_endpoint

        return shown_endpoint(self.settings.endpoint)

    def register(self, run_id: str, bundle_path: Path) -> None:
        with self._lock:
            self._runs.setdefault(run_id, _RunCounts(bundle_path)).finished = False

    def offer(self, run_id: str, specs: list[SpanSpec], *, last: bool = False) -> None:
        """Queue ``specs`` for sending, or count them dropped when the queue is full; never blocks."""
        with self._lock:
            counts = self._runs.get(run_id)
            if counts is None or self._closed:
                return
            counts.finished = counts.finished or last
            if self._pending_spans + len(specs) > self.settings.queue_spans:
                counts.dropped += len(specs)
                counts.last_error, counts.dirty = "the export queue was full", True
                self._lock.notify_all()
                return
            self._pending.append((run_id, specs))
            self._pending_spans += len(specs)
            self._lock.notify_all()
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name="piw-otlp", daemon=True)
                self._thread.start()

    # ---- the sending thread ---------------------------------------------------------------------------

    def _work(self) -> None:
        sender = self._sender()
        while True:
            with self._lock:
                while not self._pending and not self._closed:
                    self._write_dirty()
                    self._lock.wait(1.0)
                if not self._pending:
                    return
                batch = self._take()
                self._busy = True
            error = self._deliver(sender, [spec for _, specs in batch for spec in specs])
            with self._lock:
                for run_id, specs in batch:
                    counts = self._runs[run_id]
                    if error is None:
                        counts.sent += len(specs)
                    else:
                        counts.dropped += len(specs)
                        counts.last_error = error
                    counts.dirty = True
                self._busy = False
                self._write_dirty()
                self._lock.notify_all()

    def _take(self) -> list[tuple[str, list[SpanSpec]]]:
        batch: list[tuple[str, list[SpanSpec]]] = []
        taken = 0
        while self._pending and (not batch or taken + len(self._pending[0][1]) <= BATCH_SPANS):
            run_id, specs = self._pending.popleft()
            batch.append((run_id, specs))
            taken += len(specs)
        self._pending_spans -= taken
        return batch

    def _sender(self) -> Any:
        from piw.errors import TelemetryError

        try:
            from piw.telemetry.otlp import exporter

            return exporter(self.settings.endpoint, self.settings.timeout_s)
        except TelemetryError as exc:
            self._broken = exc.message
            return None

    def _deliver(self, sender: Any, specs: list[SpanSpec]) -> str | None:
        """Send one batch; the reason it was dropped, or ``None`` when the collector took it."""
        if sender is None:
            return self._broken or "no exporter"
        if time.monotonic() < self._down_until:
            return "the collector was unreachable"
        if not self._healthy and not self._reachable():
            self._down_until = time.monotonic() + RETRY_S
            return "the collector was unreachable"
        from piw.telemetry.otlp import send

        try:
            delivered = send(sender, specs)
        except Exception as exc:  # an exporter bug must not take the thread down
            log.debug("otlp export failed: %s", exc)
            delivered = False
        self._healthy = delivered
        if not delivered:
            self._down_until = time.monotonic() + RETRY_S
            return "the collector did not accept them"
        return None

    def _reachable(self) -> bool:
        """A TCP connect to the collector: a refused or silent port is known at once, without the SDK's retries."""
        parts = urlsplit(self.settings.endpoint)
        port = parts.port or (443 if parts.scheme == "https" else 80)
        try:
            with socket.create_connection(
                (parts.hostname or "127.0.0.1", port), timeout=self.settings.timeout_s
            ):
                return True
        except OSError:
            return False

    def _write_dirty(self) -> None:
        """Leave each changed run's ``telemetry.json`` (under the lock: counts and files agree)."""
        for run_id, counts in list(self._runs.items()):
            if counts.dirty:
                counts.dirty = False
                payload: dict[str, Any] = {
                    "endpoint": self.shown,
                    "sent": counts.sent,
                    "dropped": counts.dropped,
                    "updatedAt": now_iso(),
                }
                if counts.last_error:
                    payload["lastError"] = counts.last_error
                try:
                    write_telemetry(counts.bundle_path, payload)
                except OSError as exc:
                    log.debug("cannot write telemetry.json of %s: %s", run_id, exc)
            if counts.finished and not counts.dirty and not any(r == run_id for r, _ in self._pending):
                del self._runs[run_id]

    # ---- the end of a run, of the process ------------------------------------------------------------

    def flush(self, run_id: str | None = None) -> None:
        """Wait until ``run_id``'s spans (every run's without one) are sent, at most ``timeout_s``, and not at all
        while the collector is known to be down: a run that ends is never held up by a collector that is gone."""
        deadline = time.monotonic() + self.settings.timeout_s
        with self._lock:
            while self._thread is not None and self._waiting_for(run_id):
                left = deadline - time.monotonic()
                if left <= 0 or time.monotonic() < self._down_until or self._broken or self._closed:
                    break
                self._lock.wait(min(left, 0.05))
            self._write_dirty()

    def _waiting_for(self, run_id: str | None) -> bool:
        if self._busy:
            return True
        return any(run_id is None or queued == run_id for queued, _ in self._pending)

    def close(self) -> None:
        """Stop (at process exit): what is still queued is counted as dropped, and the runs' counts are written.

        Nothing is sent from here: the interpreter is shutting down and the HTTP stack may no longer start threads;
        runs flush their own spans when they close (:func:`flush_run`)."""
        with self._lock:
            self._closed = True
            for run_id, specs in self._pending:
                counts = self._runs[run_id]
                counts.dropped += len(specs)
                counts.last_error = counts.last_error or "the process ended before they were sent"
                counts.dirty = True
            self._pending.clear()
            self._pending_spans = 0
            self._write_dirty()
            self._lock.notify_all()


_EXPORTERS: dict[LiveSettings, LiveExporter] = {}
_EXPORTERS_LOCK = threading.Lock()


def _exporter_for(settings: LiveSettings) -> LiveExporter:
    with _EXPORTERS_LOCK:
        if not _EXPORTERS:
            atexit.register(close_exporters)
        found = _EXPORTERS.get(settings)
        if found is None:
            found = _EXPORTERS[settings] = LiveExporter(settings)
        return found


def flush_run(run_id: str) -> None:
    """Give ``run_id``'s last spans a bounded moment to leave (``piw.run.open_run.OpenRun.close``)."""
    with _EXPORTERS_LOCK:
        exporters = list(_EXPORTERS.values())
    for exporter in exporters:
        exporter.flush(run_id)


def close_exporters() -> None:
    """Count what is still queued as dropped and write every run's counts; run at exit."""
    with _EXPORTERS_LOCK:
        exporters = list(_EXPORTERS.values())
        _EXPORTERS.clear()
    for exporter in exporters:
        exporter.close()


class LiveSpans:
    """The writer listener of one run: builds the spans of what just finished and offers them."""

    def __init__(self, exporter: LiveExporter, writer: RunWriter, session: SessionLog, home: Path) -> None:
        self.exporter, self.session = exporter, session
        self.run_id = writer.bundle.run_id
        self.builder = SpanBuilder(
            self.run_id,
            writer.state.workflow_name,
            redactor_for(home),
            exporter.settings.include_content,
            writer.bundle.resolve,
        )
        exporter.register(self.run_id, writer.bundle.path)

    def __call__(self, event: TraceEvent, state: RunState) -> None:
        try:
            if event.type in NODE_TERMINAL_TYPES:
                steps = state.steps
                step = steps[len(steps) - 1] if len(steps) else None
                if step is not None and step.attempt_id == event.attempt_id:
                    self.exporter.offer(
                        self.run_id, self.builder.attempt_spans(step, entries_of(step, self.session.entries))
                    )
            elif event.type in RUN_TERMINAL_TYPES:
                if not self.builder.workflow_name:
                    self.builder.workflow_name = state.workflow_name
                root = self.builder.run_span(state)
                self.exporter.offer(self.run_id, [root] if root is not None else [], last=True)
            elif event.type == "run_started" and not self.builder.workflow_name:
                self.builder.workflow_name = state.workflow_name
        except Exception as exc:  # telemetry never fails a run
            log.debug("run %s: no spans for seq %s: %s", self.run_id, event.seq, exc)


def listener_for(settings: LiveSettings, writer: RunWriter, session: SessionLog, home: Path) -> Listener:
    """The run's telemetry listener, sending to the process's exporter for ``settings``."""
    return LiveSpans(_exporter_for(settings), writer, session, home)
